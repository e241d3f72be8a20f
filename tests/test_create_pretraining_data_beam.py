"""create_pretraining_data_beam.py: the Beam pipeline, on the DirectRunner.

Checked here: the reader finds the single-process script's documents whatever
the byte ranges; the output bytes do not depend on the runner's mode, its
number of workers or the read ranges; the records parse with the original
run_pretraining features and through run_pretraining's input pipeline;
the statistics (instances per document, random-next rate, masking rate,
tokens per instance) are the single-process script's on the same corpus; bad
input gives create_pretraining_data.py's errors and leaves nothing behind.
Skipped when apache-beam (the optional extra) is not installed.
"""

import os
import pathlib
import random
import subprocess
import sys

import numpy as np
import pytest

beam = pytest.importorskip("apache_beam")

from conftest import REPO, shared_path  # noqa: E402
from test_create_pretraining_data import (  # noqa: E402
    CORPUS_1, CORPUS_2, _corpus_vocab, _records, original_parsing_features)

from bert_keras import create_pretraining_data as cpd  # noqa: E402
from bert_keras import create_pretraining_data_beam as cpdb  # noqa: E402
from bert_keras import tokenization  # noqa: E402

SCRIPT = str(REPO / "create_pretraining_data_beam.py")
SPECIALS = ["[PAD]", "[UNK]", "[CLS]", "[SEP]", "[MASK]"]


def _write(path, text):
  path.parent.mkdir(parents=True, exist_ok=True)
  path.write_bytes(text.encode("utf-8"))
  return str(path)


def _synthetic_corpus(directory, files=3, docs=40, seed=0):
  """Many small documents of random words (some pieces, some long lines), in `files` files
  in two sub-directories; returns (paths, vocab path)."""
  rng = random.Random(seed)
  words = ["w%d" % i for i in range(300)]
  paths = []
  for f in range(files):
    lines = []
    for _ in range(docs):
      for _ in range(rng.randint(1, 14)):
        lines.append(" ".join(rng.choice(words) + rng.choice(["", "", "", "ing", "ed"])
                              for _ in range(rng.randint(1, 30))) + rng.choice([".", "!", ""]))
      lines.append("" if rng.random() < 0.8 else "  \t")
    paths.append(_write(directory / ("part%d" % (f % 2)) / ("c%d.txt" % f), "\n".join(lines)))
  vocab = SPECIALS + words + ["##ing", "##ed", ".", "!"]
  vocab_path = directory / "vocab.txt"
  vocab_path.write_text("".join(t + "\n" for t in vocab), encoding="utf-8")
  return paths, str(vocab_path)


def _run(files, output, vocab, mode="in_memory", workers=1, **kwargs):
  config = cpdb.Config(files, output if isinstance(output, list) else [output], vocab, **kwargs)
  options = cpdb.pipeline_options(direct_num_workers=workers, direct_running_mode=mode)
  return cpdb.run(config, options)


def _outputs(directory, prefix):
  return sorted(p for p in os.listdir(directory) if p.startswith(prefix))


# --------------------------------------------------------------------------
# Reading
# --------------------------------------------------------------------------

def _beam_documents(path, vocab, chunk):
  """Token ids of every document of `path` read in byte ranges of `chunk` bytes."""
  fn = cpdb.ReadDocuments(pathlib.Path(vocab).read_bytes(), True, 12345, 1, 1)
  fn.setup()
  size = os.path.getsize(path)
  docs = []
  for _, rel, start, end in cpdb.plan_ranges([(path, size)], chunk):
    for _, (_, offset, tokens, seg) in fn.process((path, rel, start, end)):
      tokens = np.frombuffer(tokens, dtype=fn.dtype).tolist()
      ends = np.cumsum(np.frombuffer(seg, dtype=np.int32)).tolist()
      docs.append((offset, [tokens[a:b] for a, b in zip([0] + ends[:-1], ends)]))
  return docs


@pytest.mark.slow
def test_reader_finds_the_single_process_documents_whatever_the_ranges(tmp_path):
  """Blank and whitespace-only lines, control-only lines, "\\r", no final newline, long lines:
  the documents (token ids per line) of each file are create_pretraining_data's, with the same
  offsets for every range size (ranges that start inside a line, a document or a blank run)."""
  texts = {"c1.txt": CORPUS_1, "c2.txt": CORPUS_2, "lead.txt": "\n\n  \nfirst\n\n\nsecond\r\n\n",
           "one.txt": "a single line without newline"}
  vocab = _corpus_vocab(tmp_path, list(texts.values()) + ["first second a single line"])
  tokenizer = tokenization.FullTokenizer(vocab)
  for name, text in texts.items():
    path = _write(tmp_path / name, text)
    corpus = cpd.read_corpus([path], tokenizer)
    expected = []
    for d in range(corpus.num_documents):
      segs = range(int(corpus.doc_start[d]), int(corpus.doc_start[d + 1]))
      expected.append([corpus.tokens[corpus.seg_start[s]:corpus.seg_start[s + 1]].tolist()
                       for s in segs])
    reference = None
    for chunk in (1 << 20, 1, 2, 7, 50, 333):
      docs = _beam_documents(path, vocab, chunk)
      assert [d for _, d in docs] == expected, (name, chunk)
      offsets = [o for o, _ in docs]
      if reference is None:
        reference = offsets
      assert offsets == reference, (name, chunk)


@pytest.mark.slow
def test_common_root_and_relative_keys():
  assert cpdb.common_root(["/a/b/x.txt", "/a/b/c/y.txt"]) == "/a/b/"
  assert cpdb.common_root(["gs://bucket/d/x", "gs://bucket/e/y"]) == "gs://bucket/"
  assert cpdb.common_root(["x.txt"]) == ""
  ranges = cpdb.plan_ranges([("/data/AA/wiki_00", 10), ("/data/AB/wiki_00", 25)], 10)
  assert [r[1:] for r in ranges] == [("AA/wiki_00", 0, 10), ("AB/wiki_00", 0, 8),
                                     ("AB/wiki_00", 8, 16), ("AB/wiki_00", 16, 25)]


# --------------------------------------------------------------------------
# Determinism, sharding, feature format
# --------------------------------------------------------------------------

@pytest.mark.slow
def test_same_bytes_in_process_and_with_two_worker_processes(tmp_path):
  """DirectRunner in-process (1 worker, 64 MB ranges) and multi_processing (2 workers, 1 KB
  ranges): the same shard files, byte for byte; shards named <output>-SSSSS-of-NNNNN for
  each output prefix, instances spread over all of them, records in no creation order."""
  files, vocab = _synthetic_corpus(tmp_path / "corpus")
  runs = []
  for k, (mode, workers, chunk) in enumerate([("in_memory", 1, 64), ("multi_processing", 2,
                                                                     0.001)]):
    out = tmp_path / ("run%d" % k)
    out.mkdir()
    count, counters = _run(files, [str(out / "a.tfrecord"), str(out / "b.tfrecord")], vocab,
                           mode=mode, workers=workers, read_chunk_mb=chunk, num_shards=3,
                           bucket_size_mb=0.004, dupe_factor=2, max_seq_length=64,
                           max_predictions_per_seq=10)
    names = _outputs(out, "")
    assert names == ["%s.tfrecord-%05d-of-00003" % (p, s) for p in "ab" for s in range(3)]
    runs.append((count, [(out / n).read_bytes() for n in names]))
    assert counters["buckets"] > 2 * 4  # several buckets in each of the 2 passes
    assert counters["documents"] == 3 * 40
  assert runs[0] == runs[1]
  count, shards = runs[0]
  sizes = [len(_records(tmp_path / "run0" / n)) for n in _outputs(tmp_path / "run0", "")]
  assert sum(sizes) == count and min(sizes) > count / 6 * 0.6
  assert not [p for p in os.listdir(tmp_path / "run1") if ".tmp-" in p]


@pytest.mark.slow
def test_records_parse_with_the_original_features_and_run_pretraining_reads_them(tmp_path):
  """Every record parses with the original run_pretraining features (lengths and dtypes);
  masks, segments and masked positions are consistent; input_pipeline.training_dataset with
  run_pretraining.decode_fn reads the shards through a glob; an empty shard is still written."""
  import tensorflow as tf
  files, vocab = _synthetic_corpus(tmp_path / "corpus", files=2, docs=15)
  out = tmp_path / "out"
  out.mkdir()
  count, _ = _run(files, str(out / "ex.tfrecord"), vocab, num_shards=40, dupe_factor=1,
                  max_seq_length=40, max_predictions_per_seq=6)
  names = _outputs(out, "ex.tfrecord-")
  assert len(names) == 40 and any((out / n).stat().st_size == 0 for n in names)
  parsing = original_parsing_features(40, 6)
  paths = [str(out / n) for n in names]
  seen = 0
  vocab_ids = tokenization.load_vocab(vocab)
  for rec in tf.data.TFRecordDataset(paths).map(lambda r: tf.io.parse_single_example(r, parsing)):
    seen += 1
    mask = rec["input_mask"].numpy()
    length = int(mask.sum())
    ids = rec["input_ids"].numpy()
    segments = rec["segment_ids"].numpy()
    assert 5 <= length <= 40 and mask[:length].all() and not mask[length:].any()
    assert ids[0] == vocab_ids["[CLS]"] and ids[length - 1] == vocab_ids["[SEP]"]
    first_b = int(np.argmax(segments))
    assert ids[first_b - 1] == vocab_ids["[SEP]"] and segments[first_b:length].all()
    weights = rec["masked_lm_weights"].numpy()
    positions = rec["masked_lm_positions"].numpy()[weights > 0]
    assert len(positions) >= 1 and list(positions) == sorted(positions)
    assert (positions > 0).all() and (positions < length).all()
    assert rec["next_sentence_labels"].numpy()[0] in (0, 1)
  assert seen == count > 50

  try:
    from bert_keras.runtime import input_pipeline
    from bert_keras import run_pretraining
  except Exception as e:
    pytest.skip("run_pretraining does not import here: %s" % e)
  input_files = input_pipeline.expand_input_files(str(out / "ex.tfrecord-*"))
  assert sorted(input_files) == paths
  dataset = input_pipeline.training_dataset(input_files, run_pretraining.decode_fn(40, 6), 8)
  batch = next(iter(dataset))
  assert batch["input_ids"].shape == (8, 40) and batch["masked_lm_weights"].shape == (8, 6)
  assert batch["next_sentence_labels"].shape == (8, 1)


# --------------------------------------------------------------------------
# Statistics against the single-process script
# --------------------------------------------------------------------------

def _statistics(paths, max_seq_length=128, max_predictions_per_seq=20):
  """Instances, random-next rate, masked tokens per token and tokens per instance of the
  records in `paths` (parsed with the original features, a batch at a time)."""
  import tensorflow as tf
  parsing = {"input_mask": tf.io.FixedLenFeature([max_seq_length], tf.int64),
             "masked_lm_weights": tf.io.FixedLenFeature([max_predictions_per_seq], tf.float32),
             "next_sentence_labels": tf.io.FixedLenFeature([1], tf.int64)}
  n = rnd = tokens = masked = 0
  dataset = tf.data.TFRecordDataset([str(p) for p in paths]).batch(4096)
  for batch in dataset.map(lambda r: tf.io.parse_example(r, parsing)):
    n += int(batch["input_mask"].shape[0])
    rnd += int(batch["next_sentence_labels"].numpy().sum())
    tokens += int(batch["input_mask"].numpy().sum())
    masked += float(batch["masked_lm_weights"].numpy().sum())
  return {"instances": n, "random_next": rnd / n, "masked_per_token": masked / tokens,
          "tokens_per_instance": tokens / n}


@pytest.mark.slow
def test_statistics_equal_the_single_process_script_on_books(tmp_path):
  """Four books with a blank line every 40 sentences (148 documents), dupe_factor 3, the
  pipeline (one bucket: random next from the whole corpus, as the original; 6 buckets per
  pass: from a bucket) against create_pretraining_data.py on the same files.

  The short target length (drawn per document and pass, probability 0.1) dominates the
  spread: on this corpus, over 30 seeds, the single-process script's instance count varies
  by 2% (sd), its random-next rate by 0.009, tokens per instance by 1.5%; and so does the
  pipeline's (its per-document RNG, same means). With --short_seq_prob=0 the spread is 0.55%,
  0.006 and 0.11%. So: with short_seq_prob 0, instances per document within 3%, random-next
  rate within 0.03, tokens per instance within 0.6% (about 3.5 sd of a difference); with
  the default 0.1, within 10%, 0.05 and 7%; masked tokens per token within 0.001 in both
  (0.1485-0.1487 over the seeds)."""
  files = []
  for name in ("carroll-alice.txt", "austen-persuasion.txt", "chesterton-thursday.txt",
               "bryant-stories.txt"):
    with open(shared_path("data", "text", "gutenberg_sentence_per_line", name),
              encoding="utf-8") as f:
      lines = f.read().split("\n")[:1480]  # ends with a blank line: no document spans files
    text = "".join(line + ("\n\n" if i % 40 == 39 else "\n") for i, line in enumerate(lines))
    files.append(_write(tmp_path / "books" / name, text))
  vocab = str(shared_path("data", "vocab", "bert-base-uncased-vocab.txt"))
  documents = cpd.read_corpus(files, tokenization.FullTokenizer(vocab)).num_documents
  total_mb = sum(os.path.getsize(f) for f in files) / (1 << 20)
  cases = [  # short_seq_prob, buckets, tolerances: instances, random next, tokens per instance
      (0.0, 1, (0.03, 0.03, 0.006)),
      (0.0, 6, (0.03, 0.03, 0.006)),
      (0.1, 6, (0.10, 0.05, 0.07)),
  ]
  expected = {}
  for short, buckets, (tol_n, tol_rnd, tol_tpi) in cases:
    if short not in expected:
      single = str(tmp_path / ("single%s.tfrecord" % short))
      cpd.run(cpd.Config(files, [single], vocab, dupe_factor=3, short_seq_prob=short,
                         progress=False))
      expected[short] = _statistics([single])
    want = expected[short]
    out = tmp_path / ("beam_%s_%d" % (short, buckets))
    out.mkdir()
    count, counters = _run(files, str(out / "b.tfrecord"), vocab, dupe_factor=3,
                           short_seq_prob=short, num_shards=2,
                           bucket_size_mb=64 if buckets == 1 else total_mb / (buckets - 0.5))
    assert counters["documents"] == documents
    assert counters["buckets"] == 3 * buckets
    got = _statistics([out / n for n in _outputs(out, "b.tfrecord-")])
    label = (short, buckets, got, want)
    print("statistics", label)
    assert got["instances"] == count
    assert abs(got["instances"] / want["instances"] - 1) < tol_n, label
    assert abs(got["random_next"] - want["random_next"]) < tol_rnd, label
    assert abs(got["tokens_per_instance"] / want["tokens_per_instance"] - 1) < tol_tpi, label
    assert abs(got["masked_per_token"] - want["masked_per_token"]) < 0.001, label


# --------------------------------------------------------------------------
# Bad input: as create_pretraining_data.py
# --------------------------------------------------------------------------

BAD = [  # (overrides of the good arguments, what the message names)
    ({"input_files": ["{dir}/empty.txt"]}, "empty"),
    ({"vocab_file": "{dir}/nomask.txt"}, "[MASK]"),
    ({"vocab_file": "{dir}/missing_vocab.txt"}, "--vocab_file"),
    ({"max_seq_length": 4}, "--max_seq_length"),
    ({"masked_lm_prob": 0.0}, "--masked_lm_prob"),
    ({"masked_lm_prob": 1.5}, "--masked_lm_prob"),
    ({"max_predictions_per_seq": 0}, "--max_predictions_per_seq"),
    ({"output_files": ["{dir}/no/such/dir/out.tfrecord"]}, "--output_file"),
    ({"input_files": ["{dir}/c1.txt", "{dir}/bad_utf8.txt"]}, "not UTF-8 (byte"),
]


def _bad_setup(tmp_path):
  _write(tmp_path / "c1.txt", CORPUS_1)
  _write(tmp_path / "empty.txt", "\n\n   \n\x00\n")
  (tmp_path / "bad_utf8.txt").write_bytes(CORPUS_2.encode("utf-8") + b"bad \xff byte\n")
  vocab = _corpus_vocab(tmp_path, [CORPUS_1, CORPUS_2])
  (tmp_path / "nomask.txt").write_text(
      pathlib.Path(vocab).read_text().replace("[MASK]\n", ""), encoding="utf-8")
  out_dir = tmp_path / "out"
  out_dir.mkdir()
  return vocab, out_dir


@pytest.mark.slow
@pytest.mark.parametrize("overrides,expect", BAD)
def test_bad_input_same_errors_as_the_single_process_script(tmp_path, overrides, expect):
  """The same UsageError message as create_pretraining_data.run gives, nothing left in the
  output directory (a bad file found by the pipeline included)."""
  vocab, out_dir = _bad_setup(tmp_path)
  args = {"input_files": [str(tmp_path / "c1.txt")], "vocab_file": vocab,
          "output_files": [str(out_dir / "a.tfrecord")], "max_seq_length": 32}
  for key, value in overrides.items():
    args[key] = ([v.format(dir=tmp_path) for v in value] if isinstance(value, list) else
                 value.format(dir=tmp_path) if isinstance(value, str) else value)

  def message(fn):
    with pytest.raises(cpd.UsageError) as info:
      fn()
    return str(info.value)

  positional = (args.pop("input_files"), args.pop("output_files"), args.pop("vocab_file"))
  theirs = message(lambda: cpd.run(cpd.Config(*positional, progress=False, **args)))
  ours = message(lambda: cpdb.run(cpdb.Config(*positional, **args), cpdb.pipeline_options()))
  assert expect in ours and ours == theirs
  assert os.listdir(out_dir) == []


def _cli(*args):
  env = dict(os.environ)
  env.pop("PYTHONPATH", None)
  return subprocess.run([sys.executable, SCRIPT] + list(args), capture_output=True, text=True,
                        env=env, timeout=300)


@pytest.mark.slow
@pytest.mark.parametrize("flags,expect", [
    (["--input_file={dir}/nothing*.txt"], "--input_file"),
    (["--input_file={dir}/empty.txt"], "empty"),
    (["--input_file={dir}/c1.txt,{dir}/bad_utf8.txt", "--direct_num_workers=2",
      "--direct_running_mode=multi_processing", "--read_chunk_mb=0.0002"], "bad_utf8.txt"),
    (["--dupe_factr=3"], "--dupe_factr=3: neither a flag"),
])
def test_cli_bad_input(tmp_path, flags, expect):
  """From the command line: a one-line error, a non-zero exit, no traceback, no output left
  (errors found on the launcher, and inside the pipeline, in-process and in worker processes)."""
  vocab, out_dir = _bad_setup(tmp_path)
  base = {"--input_file": str(tmp_path / "c1.txt"), "--vocab_file": vocab,
          "--output_file": str(out_dir / "a.tfrecord"), "--max_seq_length": "32"}
  extra = []
  for flag in flags:
    name, value = flag.split("=", 1)
    if name in base:
      base[name] = value.format(dir=tmp_path)
    else:
      extra.append(flag)
  result = _cli(*["%s=%s" % kv for kv in base.items()] + extra)
  assert result.returncode != 0
  assert "Traceback" not in result.stderr
  last = result.stderr.strip().splitlines()[-1]
  assert last.startswith("error: ") and expect in last, result.stderr[-3000:]
  assert os.listdir(out_dir) == []


@pytest.mark.slow
def test_cli_writes_and_logs(tmp_path):
  """The script: shards, the original's log lines, the counters, and the same bytes as the
  API."""
  files, vocab = _synthetic_corpus(tmp_path / "corpus", files=2, docs=10)
  out = tmp_path / "cli"
  out.mkdir()
  result = _cli("--input_file=%s" % str(tmp_path / "corpus" / "part*" / "*.txt"),
                "--output_file=%s" % str(out / "x"), "--vocab_file=" + vocab, "--dupe_factor=2",
                "--max_seq_length=48", "--num_shards=2")
  assert result.returncode == 0, result.stderr[-3000:]
  log = result.stderr
  assert "*** Reading from input files ***" in log and "*** Writing to output files ***" in log
  assert "counter instances: " in log and "masked per token" in log
  assert log.count("*** Example ***") == 20
  written = int(log.split("Wrote ")[1].split()[0])
  api = tmp_path / "api"
  api.mkdir()
  count, _ = _run(sorted(files), str(api / "x"), vocab, dupe_factor=2, max_seq_length=48,
                  num_shards=2)
  assert written == count > 0
  assert [(out / n).read_bytes() for n in _outputs(out, "x-")] == (
      [(api / n).read_bytes() for n in _outputs(api, "x-")])
