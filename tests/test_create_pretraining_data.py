"""create_pretraining_data.py: the original's records, exactly, and the real-use behaviour.

Differential tests run the original (bert-tensorflow's create_pretraining_data,
imported in-process through tests/oracle.py) and ours on the same corpora and
flags and compare instance by instance / record by record. Whole-word masking
(absent from bert-tensorflow 1.0.4) is checked against golden digests recorded
for the shared bert_sample_text.txt. Speed is measured in bench/bench_pretraining_data.py, not here.
"""

import hashlib
import os
import pathlib
import random
import subprocess
import sys

import numpy as np
import pytest

import oracle
from conftest import REPO, shared_path

from bert_keras import create_pretraining_data as cpd
from bert_keras import tokenization
from bert_keras.pretraining_data import random_replay
from bert_keras.pretraining_data import tfrecord_encoding
from bert_keras.utils import file_io
from bert_keras.utils import progress

SCRIPT = str(REPO / "create_pretraining_data.py")
SPECIALS = ["[PAD]", "[UNK]", "[CLS]", "[SEP]", "[MASK]"]

# A corpus exercising the reader: blank-line documents, several blank lines in a
# row, whitespace-only lines, a line that tokenizes to nothing (control chars
# only: no new document), "\r" inside and at the end of lines (dropped as
# TensorFlow's readline does), single-sentence documents, long sentences that
# need truncation, accents, CJK, punctuation, and no newline at the end of the
# file (so the document continues into the next file).
CORPUS_1 = (
    "The quick brown fox jumps over the lazy dog.\n"
    "It was not amused, and said so: \"Really?\"\r\n"
    "Naïve café owners in Ångström street sold 12,000 croissants.\n"
    "\n"
    "A single-sentence document.\n"
    "\n"
    "\n"
    "   \t \n"
    "Second doc, first line with ünïcödé and 日本語 text.\n"
    "\x00\x01\x02\n"
    "Line after a control-only line, still the same document.\n"
    + " ".join("word%d" % (i % 37) for i in range(300)) + "\n"
    "Short.\n"
    "An\rembedded carriage return joins words.\n"
    "\n"
    "Third document: one, two, three, four, five, six, seven, eight.\n"
    "Nine ten eleven twelve; thirteen fourteen fifteen sixteen!\n"
    "Seventeen eighteen nineteen twenty (twenty-one) twenty-two.\n"
    "Last line without a newline continues into the next file")
CORPUS_2 = (
    "first line of file two, same document as the last line of file one.\n"
    "Then another sentence of the continued document.\n"
    "\n"
    + "\n".join("Sentence number %d of the fourth document talks about %s." % (
        i, " ".join(["things"] * (i % 7 + 1))) for i in range(40)) + "\n"
    "\n"
    "Fifth and last document; it has two lines.\n"
    "Here is the second line, THE END.\n")


def _write(path, text):
  path.write_bytes(text.encode("utf-8"))
  return str(path)


def _vocab_file(tmp_path, lines, name="vocab.txt"):
  path = tmp_path / name
  path.write_text("".join(t + "\n" for t in lines), encoding="utf-8")
  return str(path)


def _corpus_vocab(tmp_path, texts, do_lower_case=True, pieces=True):
  """A vocab built from the corpus: whole words plus "##" pieces, so WordPiece splits some words."""
  basic = tokenization.BasicTokenizer(do_lower_case=do_lower_case)
  words = set()
  for text in texts:
    for line in text.split("\n"):
      words.update(basic.tokenize(line))
  vocab = set()
  for word in words:
    if pieces and len(word) > 5 and sum(map(ord, word)) % 3 == 0:  # deterministic
      vocab.add(word[:3])
      vocab.add("##" + word[3:])
    else:
      vocab.add(word)
  return _vocab_file(tmp_path, SPECIALS + sorted(vocab))


@pytest.fixture(scope="module")
def orig():
  return oracle.original("create_pretraining_data")


@pytest.fixture(scope="module")
def orig_tok():
  return oracle.original("tokenization")


def _as_tuples(instances):
  return [(list(i.tokens), list(i.segment_ids), list(i.masked_lm_positions),
           list(i.masked_lm_labels), bool(i.is_random_next)) for i in instances]


# --------------------------------------------------------------------------
# The replay of random.Random
# --------------------------------------------------------------------------

def test_random_replay_equals_python_random():
  """random(), randint (1-bit to 41-bit ranges), shuffle and a long permutation draw exactly
  as random.Random, and sync() leaves the generator where the real one would be."""
  for seed in (0, 12345, 2**40 + 3):
    real = random.Random(seed)
    ours = random_replay.RandomWords(random.Random(seed))
    for n in (1, 2, 3, 7, 128, 129, 255, 256, 257, 30522, 65535, 65536, 65537, 2**31,
              2**32 - 1, 2**32, 2**32 + 1, 2**41 + 5):
      for _ in range(20):
        assert real.randint(0, n - 1) == ours.randint(0, n - 1)
      assert real.random() == ours.random()
    for size in (0, 1, 2, 3, 100, 300, 600):
      x, y = list(range(size)), list(range(size))
      real.shuffle(x)
      ours.shuffle(y)
      assert x == y
    x = list(range(70000))
    real.shuffle(x)
    assert list(ours.permutation(70000)) == x
    ours.sync()
    assert ours.rng.getstate() == real.getstate()


def test_randbelow_draws_in_c_equals_python():
  """The C extension's randbelow_draws (when built) gives the pure-Python one's draws, list
  updates, positions and errors, on top 8, top 16 and full 32-bit words."""
  native, python = random_replay.randbelow_draws, random_replay.PYTHON_RANDBELOW_DRAWS
  if native is python:
    pytest.skip("the C extension is not built (or BERT_KERAS_PURE_PYTHON=1)")
  words = random_replay.RandomWords(random.Random(7))
  words.reserve(1 << 16)
  full = words.full[:8192].tolist()
  for top_bits, width in ((words.top8, 8), (words.top16, 16), (full, 32)):
    for m in (1, 2, 3, 100, 128, 129, 255, 256, 30522, 65535, 65536, 2**31 + 5, 2**32 - 1):
      if m.bit_length() <= width:
        steps = (random_replay.draw_step(m, width),) * 50
        assert native(top_bits, 3, steps) == python(top_bits, 3, steps), (width, m)
  for n, keep in ((2, 1), (30, 7), (300, 20), (300, 300)):
    for steps in random_replay.shuffle_steps(n, keep):
      x, y = [str(v) for v in range(n)], [str(v) for v in range(n)]
      top_bits = words.top16 if steps and steps[0][0] >= 255 else words.top8
      assert native(top_bits, 11, steps, x) == python(top_bits, 11, steps, y)
      assert x == y
  for draw in (native, python):
    with pytest.raises(IndexError):
      draw(b"\xff\xff", 0, ((0, 0, 1),))


# --------------------------------------------------------------------------
# Golden values (counts and digests on bert_sample_text.txt), whole-word masking included
# --------------------------------------------------------------------------

# vocab, do_whole_word_mask, dupe_factor, instances, random-next, masked, min, max, digest
GOLDEN = [
    ("A", False, 5, 54, 29, 890, 33, 128, "15158090e2ec1d5bfdf0e6db0090b7384e89f95c"),
    ("A", True, 5, 54, 29, 890, 33, 128, "15158090e2ec1d5bfdf0e6db0090b7384e89f95c"),
    ("A", False, 1, 11, 6, 167, 33, 128, "ed7bc277afe1b3d5c4ff195d4003757d7dd1526f"),
    ("A", False, 10, 109, 57, 1754, 30, 128, "41f962b8ea717ea75d5026553a64dd1d87ccdf23"),
    ("B", True, 5, 118, 93, 2229, 87, 128, "fac26cd3932793d9f0873b99de4517c549594962"),
    ("B", False, 5, 116, 89, 2188, 87, 128, "5e47429205453dbb4d0edf7289f4ea25a08a82f7"),
]


def _golden_vocabs(tmp_path, sample):
  basic = tokenization.BasicTokenizer(do_lower_case=True)
  tokens = set()
  with open(sample, encoding="utf-8") as f:
    for line in f:
      tokens.update(basic.tokenize(line))
  chars = sorted(set("".join(tokens)))
  vocab_a = SPECIALS + sorted(tokens)
  vocab_b = SPECIALS + chars + ["##" + c for c in chars]
  return {"A": _vocab_file(tmp_path, vocab_a, "a.txt"),
          "B": _vocab_file(tmp_path, vocab_b, "b.txt")}


def _digest(instances):
  h = hashlib.sha1()
  for inst in instances:
    h.update(("%s|%s|%s|%s|%s\n" % (
        " ".join(inst.tokens), " ".join(map(str, inst.segment_ids)),
        " ".join(map(str, inst.masked_lm_positions)), " ".join(inst.masked_lm_labels),
        "1" if inst.is_random_next else "0")).encode("utf-8"))
  return h.hexdigest()


def test_golden_digests(tmp_path):
  """Vocab A/B digests, then counts and instance digests for both vocabs, with and without
  whole-word masking, dupe 1/5/10 (the reference for --do_whole_word_mask)."""
  sample = shared_path("data", "text", "bert_sample_text.txt")
  vocabs = _golden_vocabs(tmp_path, sample)
  assert hashlib.sha1(pathlib.Path(vocabs["A"]).read_bytes()).hexdigest() == (
      "fb7b2afb2b4ba8c69e2ef510f69108c7fd568ee5")
  assert hashlib.sha1(pathlib.Path(vocabs["B"]).read_bytes()).hexdigest() == (
      "26254099e098ff940a9dfee03589af5716cc46d7")
  for vocab, wwm, dupe, count, rnd, masked, shortest, longest, digest in GOLDEN:
    tokenizer = tokenization.FullTokenizer(vocabs[vocab], do_lower_case=True)
    instances = cpd.create_training_instances(
        [str(sample)], tokenizer, 128, dupe, 0.1, 0.15, 20, random.Random(12345),
        do_whole_word_mask=wwm)
    lengths = [len(i.tokens) for i in instances]
    assert (len(instances), sum(i.is_random_next for i in instances),
            sum(len(i.masked_lm_positions) for i in instances), min(lengths),
            max(lengths)) == (count, rnd, masked, shortest, longest), (vocab, wwm, dupe)
    assert _digest(instances) == digest, (vocab, wwm, dupe)
    if (vocab, wwm, dupe) == ("B", True, 5):  # its first instance, as recorded
      first = instances[0]
      assert first.is_random_next and first.tokens[1:3] == ["##l", "##e"]
      assert first.masked_lm_positions == (
          [16, 17, 18, 31, 32, 46] + list(range(72, 83)) + [125, 126])


# --------------------------------------------------------------------------
# Instances equal the original's (in-process), across flags
# --------------------------------------------------------------------------

# max_seq_length, dupe_factor, short_seq_prob, masked_lm_prob, max_predictions, lower, seed
CASES = [
    (128, 3, 0.1, 0.15, 20, True, 12345),
    (32, 2, 0.5, 0.15, 5, True, 1),
    (16, 3, 1.0, 0.3, 3, False, 7),
    (64, 1, 0.0, 1.0, 64, True, 99),     # everything masked (up to the cap)
    (5, 2, 0.2, 0.5, 2, True, 3),        # the smallest max_seq_length
    (200, 2, 0.1, 0.01, 20, False, 5),   # num_to_predict rounds to 0 -> 1
    (400, 3, 0.1, 0.15, 70, True, 11),   # more than 256 candidates: 16-bit shuffle draws
]


@pytest.mark.parametrize("case", CASES)
def test_instances_equal_original(tmp_path, orig, orig_tok, case):
  """Same TrainingInstances (tokens, segments, masked positions and labels, random-next), same
  order, and the generator left in the same state, with the original's tokenizer in both."""
  max_seq, dupe, short, mlm, preds, lower, seed = case
  files = [_write(tmp_path / "c1.txt", CORPUS_1), _write(tmp_path / "c2.txt", CORPUS_2)]
  vocab = _corpus_vocab(tmp_path, [CORPUS_1, CORPUS_2], do_lower_case=lower)
  tokenizer = orig_tok.FullTokenizer(vocab, do_lower_case=lower)
  rng_a, rng_b = random.Random(seed), random.Random(seed)
  expected = orig.create_training_instances(files, tokenizer, max_seq, dupe, short, mlm, preds,
                                            rng_a)
  got = cpd.create_training_instances(files, tokenizer, max_seq, dupe, short, mlm, preds, rng_b)
  assert _as_tuples(got) == _as_tuples(expected)
  assert rng_a.getstate() == rng_b.getstate()


class _SplitTokenizer(object):
  """Whitespace tokenizer over a vocab: lets the corpus contain [CLS]/[SEP]/[MASK] and "##"
  tokens."""

  def __init__(self, tokens):
    self.vocab = {t: i for i, t in enumerate(tokens)}
    self.inv_vocab = {i: t for t, i in self.vocab.items()}

  def tokenize(self, text):
    return text.split()

  def convert_tokens_to_ids(self, tokens):
    return [self.vocab[t] for t in tokens]


def test_special_tokens_in_corpus_and_huge_vocab_equal_original(tmp_path, orig):
  """The general path: corpus tokens that are [SEP]/[CLS] (never masked), and a vocab of
  70,000 entries (random replacement ids need 17 bits)."""
  words = ["w%d" % i for i in range(69990)]
  tokenizer = _SplitTokenizer(SPECIALS + ["##x", "##y"] + words)
  rng = random.Random(0)
  lines = []
  for d in range(6):
    for _ in range(rng.randint(1, 12)):
      toks = [rng.choice(["[SEP]", "[CLS]", "[MASK]", "##x", "##y"] + words[:50])
              for _ in range(rng.randint(1, 30))]
      lines.append(" ".join(toks))
    lines.append("")
  path = _write(tmp_path / "special.txt", "\n".join(lines))
  for seed in (1, 2):
    rng_a, rng_b = random.Random(seed), random.Random(seed)
    expected = orig.create_training_instances([path], tokenizer, 48, 3, 0.2, 0.2, 8, rng_a)
    got = cpd.create_training_instances([path], tokenizer, 48, 3, 0.2, 0.2, 8, rng_b)
    assert _as_tuples(got) == _as_tuples(expected)
    assert rng_a.getstate() == rng_b.getstate()


def test_document_of_70000_segments_equals_original(tmp_path, orig):
  """random_start = randint(0, len(document) - 1) over more than 2**16 segments (a 17-bit draw)."""
  words = ["w%d" % i for i in range(50)]
  tokenizer = _SplitTokenizer(SPECIALS + words)
  rng = random.Random(3)
  lines = [" ".join(rng.choice(words) for _ in range(rng.randint(1, 4))) for _ in range(70000)]
  path = _write(tmp_path / "long.txt", "\n".join(lines))  # one document: random next in itself
  rng_a, rng_b = random.Random(5), random.Random(5)
  expected = orig.create_training_instances([path], tokenizer, 128, 1, 0.1, 0.15, 20, rng_a)
  got = cpd.create_training_instances([path], tokenizer, 128, 1, 0.1, 0.15, 20, rng_b)
  assert _as_tuples(got) == _as_tuples(expected)
  assert rng_a.getstate() == rng_b.getstate()


def test_very_long_lines_equal_original(tmp_path, orig):
  """Lines of 8,000 tokens: truncation draws two words per removed token, far more than an
  instance's usual share of words read ahead (the replay ran out of words here once)."""
  words = ["w%d" % i for i in range(50)]
  tokenizer = _SplitTokenizer(SPECIALS + words)
  rng = random.Random(1)
  lines = []
  for _ in range(12):
    lines.extend(" ".join(rng.choice(words) for _ in range(rng.randint(3, 20))) for _ in range(5))
    lines.extend([" ".join(rng.choice(words) for _ in range(8000)), ""])
  path = _write(tmp_path / "long_lines.txt", "\n".join(lines))
  rng_a, rng_b = random.Random(5), random.Random(5)
  expected = orig.create_training_instances([path], tokenizer, 128, 3, 0.1, 0.15, 20, rng_a)
  got = cpd.create_training_instances([path], tokenizer, 128, 3, 0.1, 0.15, 20, rng_b)
  assert _as_tuples(got) == _as_tuples(expected)
  assert rng_a.getstate() == rng_b.getstate()


# --------------------------------------------------------------------------
# TFRecords equal the original's, record by record
# --------------------------------------------------------------------------

def _records(path):
  """(raw bytes, decoded features) of each record of a TFRecord file, CRCs checked by TF."""
  import tensorflow as tf
  out = []
  for rec in tf.data.TFRecordDataset(str(path)):
    raw = rec.numpy()
    example = tf.train.Example.FromString(raw)
    features = {}
    for name, feature in example.features.feature.items():
      kind = feature.WhichOneof("kind")
      features[name] = (kind, list(getattr(feature, kind).value))
    out.append((raw, features))
  return out


def _write_original(orig, orig_tok, files, outputs, vocab, lower, max_seq, dupe, preds, seed=12345,
                    short=0.1, mlm=0.15):
  tokenizer = orig_tok.FullTokenizer(vocab, do_lower_case=lower)
  instances = orig.create_training_instances(files, tokenizer, max_seq, dupe, short, mlm, preds,
                                             random.Random(seed))
  orig.write_instance_to_example_files(instances, tokenizer, max_seq, preds, outputs)


def _book_subset(tmp_path, name, lines, start=0):
  book = shared_path("data", "text", "gutenberg_sentence_per_line", name)
  with open(book, encoding="utf-8") as f:
    text = f.read().split("\n")[start:start + lines]
  # Blank lines every 40 sentences make documents (the books have none).
  out = []
  for i, line in enumerate(text):
    out.append(line)
    if i % 40 == 39:
      out.append("")
  return _write(tmp_path / name, "\n".join(out) + "\n")


@pytest.mark.parametrize("lower,outputs,dupe,max_seq,preds", [
    (True, 3, 2, 128, 20),
    (False, 1, 1, 64, 10),
])
def test_records_equal_original_on_books(tmp_path, orig, orig_tok, lower, outputs, dupe, max_seq,
                                         preds):
  """Real books (subsets, 2 files), our tokenizer and writer (run()) against the original's:
  every output file holds the same records in the same order, each with the same features;
  ours are the deterministic serialization of those Examples."""
  files = [_book_subset(tmp_path, "carroll-alice.txt", 900),
           _book_subset(tmp_path, "chesterton-thursday.txt", 700, start=300)]
  vocab = str(shared_path("data", "vocab", "bert-base-uncased-vocab.txt"))
  ours = [str(tmp_path / ("ours%d.tfrecord" % i)) for i in range(outputs)]
  theirs = [str(tmp_path / ("orig%d.tfrecord" % i)) for i in range(outputs)]
  _write_original(orig, orig_tok, files, theirs, vocab, lower, max_seq, dupe, preds)
  count = cpd.run(cpd.Config(files, ours, vocab, do_lower_case=lower, max_seq_length=max_seq,
                             max_predictions_per_seq=preds, dupe_factor=dupe, progress=False))
  import tensorflow as tf
  total = 0
  for a, b in zip(theirs, ours):
    expected, got = _records(a), _records(b)
    assert len(got) == len(expected) > 0
    for (_, fe), (raw, fg) in zip(expected, got):
      assert fg == fe
      assert raw == tf.train.Example.FromString(raw).SerializeToString(deterministic=True)
    total += len(got)
  assert total == count
  assert sorted(os.listdir(tmp_path)) == sorted(os.path.basename(p) for p in files + ours + theirs)


def original_parsing_features(max_seq_length, max_predictions_per_seq):
  """The FixedLenFeatures the original run_pretraining input_fn parses the records with."""
  import tensorflow as tf
  seq, preds = max_seq_length, max_predictions_per_seq
  return {
      "input_ids": tf.io.FixedLenFeature([seq], tf.int64),
      "input_mask": tf.io.FixedLenFeature([seq], tf.int64),
      "segment_ids": tf.io.FixedLenFeature([seq], tf.int64),
      "masked_lm_positions": tf.io.FixedLenFeature([preds], tf.int64),
      "masked_lm_ids": tf.io.FixedLenFeature([preds], tf.int64),
      "masked_lm_weights": tf.io.FixedLenFeature([preds], tf.float32),
      "next_sentence_labels": tf.io.FixedLenFeature([1], tf.int64),
  }


def _crc32c(data):
  crc = 0xFFFFFFFF
  for byte in data:
    crc ^= byte
    for _ in range(8):
      crc = (crc >> 1) ^ (0x82F63B78 if crc & 1 else 0)
  crc ^= 0xFFFFFFFF
  return (((crc >> 15) | (crc << 17)) + 0xA282EAD8) & 0xFFFFFFFF


def test_tfrecord_framing_and_parsing_features(tmp_path):
  """Framing checked with an independent bitwise CRC32C; records parse with the features of
  the original run_pretraining input_fn (FixedLenFeature lengths and dtypes)."""
  files = [_write(tmp_path / "c1.txt", CORPUS_1), _write(tmp_path / "c2.txt", CORPUS_2)]
  vocab = _corpus_vocab(tmp_path, [CORPUS_1, CORPUS_2])
  out = str(tmp_path / "out.tfrecord")
  count = cpd.run(cpd.Config(files, [out], vocab, max_seq_length=40, max_predictions_per_seq=6,
                             dupe_factor=2, progress=False))
  data = pathlib.Path(out).read_bytes()
  offset = n = 0
  while offset < len(data):
    length = int.from_bytes(data[offset:offset + 8], "little")
    assert int.from_bytes(data[offset + 8:offset + 12], "little") == _crc32c(
        data[offset:offset + 8])
    payload = data[offset + 12:offset + 12 + length]
    assert int.from_bytes(data[offset + 12 + length:offset + 16 + length], "little") == (
        _crc32c(payload))
    offset += 16 + length
    n += 1
  assert offset == len(data) and n == count
  import tensorflow as tf
  parsing = original_parsing_features(40, 6)
  for rec in tf.data.TFRecordDataset(out).map(lambda r: tf.io.parse_single_example(r, parsing)):
    mask = rec["input_mask"].numpy()
    weights = rec["masked_lm_weights"].numpy()
    assert mask.sum() >= 5 and set(np.unique(weights)) <= {0.0, 1.0}
    positions = rec["masked_lm_positions"].numpy()[weights > 0]
    assert (positions < mask.sum()).all() and list(positions) == sorted(positions)


# --------------------------------------------------------------------------
# The command line: logging, errors, --num_workers
# --------------------------------------------------------------------------

def _cli(*args, cwd=None):
  env = dict(os.environ)
  env.pop("PYTHONPATH", None)
  return subprocess.run([sys.executable, SCRIPT] + list(args), capture_output=True, text=True,
                        cwd=cwd, env=env, timeout=300)


@pytest.mark.slow
def test_cli_logs_like_the_original_and_is_byte_reproducible(tmp_path):
  files = [_write(tmp_path / "c1.txt", CORPUS_1), _write(tmp_path / "c2.txt", CORPUS_2)]
  vocab = _corpus_vocab(tmp_path, [CORPUS_1, CORPUS_2])
  runs = []
  for k in range(2):
    out = str(tmp_path / ("o%d.tfrecord" % k))
    result = _cli("--input_file=%s" % str(tmp_path / "c*.txt"), "--output_file=" + out,
                  "--vocab_file=" + vocab, "--max_seq_length=48", "--dupe_factor=3")
    assert result.returncode == 0, result.stderr
    runs.append(pathlib.Path(out).read_bytes())
  log = result.stderr
  assert "*** Reading from input files ***" in log and "*** Writing to output files ***" in log
  assert log.count("*** Example ***") == 20
  assert "masked_lm_weights: 1.0" in log and "next_sentence_labels: " in log
  written = int(log.split("Wrote ")[1].split()[0])
  api = cpd.run(cpd.Config(files, [str(tmp_path / "api.tfrecord")], vocab, max_seq_length=48,
                           dupe_factor=3, progress=False))
  assert written == api > 20
  assert runs[0] == runs[1] == (tmp_path / "api.tfrecord").read_bytes()


@pytest.mark.slow
@pytest.mark.parametrize("flags,expect", [
    (["--input_file={dir}/nothing*.txt"], "--input_file"),
    (["--input_file={dir}/empty.txt"], "empty"),
    (["--vocab_file={dir}/nomask.txt"], "[MASK]"),
    (["--vocab_file={dir}/missing_vocab.txt"], "--vocab_file"),
    (["--max_seq_length=4"], "--max_seq_length"),
    (["--masked_lm_prob=0"], "--masked_lm_prob"),
    (["--masked_lm_prob=1.5"], "--masked_lm_prob"),
    (["--max_predictions_per_seq=0"], "--max_predictions_per_seq"),
    (["--output_file={dir}/no/such/dir/out.tfrecord"], "--output_file"),
])
def test_cli_bad_input(tmp_path, flags, expect):
  """A one-line error naming the flag or file, a non-zero exit, and no output left behind."""
  _write(tmp_path / "c1.txt", CORPUS_1)
  _write(tmp_path / "empty.txt", "\n\n   \n\x00\n")
  vocab = _corpus_vocab(tmp_path, [CORPUS_1])
  _vocab_file(tmp_path, [t for t in pathlib.Path(vocab).read_text().split("\n") if t != "[MASK]"],
              "nomask.txt")
  out_dir = tmp_path / "out"
  out_dir.mkdir()
  base = {"--input_file": str(tmp_path / "c1.txt"), "--vocab_file": vocab,
          "--output_file": str(out_dir / "a.tfrecord") + "," + str(out_dir / "b.tfrecord")}
  for flag in flags:
    name, value = flag.split("=", 1)
    base[name] = value.format(dir=tmp_path)
  result = _cli(*["%s=%s" % kv for kv in base.items()])
  assert result.returncode != 0
  assert "Traceback" not in result.stderr
  last = result.stderr.strip().splitlines()[-1]
  assert last.startswith("error: ") and expect in last, result.stderr
  assert os.listdir(out_dir) == []


def test_no_partial_output_on_failure(tmp_path, monkeypatch):
  """An error while writing leaves neither the temporary nor the final files."""
  files = [_write(tmp_path / "c1.txt", CORPUS_1)]
  vocab = _corpus_vocab(tmp_path, [CORPUS_1])
  out_dir = tmp_path / "out"
  out_dir.mkdir()
  calls = []

  def failing(*args, **kwargs):
    calls.append(1)
    if len(calls) == 2:
      raise RuntimeError("disk full")
    return real(*args, **kwargs)

  real = tfrecord_encoding.encode_records
  monkeypatch.setattr(tfrecord_encoding, "encode_records", failing)
  with pytest.raises(RuntimeError):
    cpd.run(cpd.Config(files, [str(out_dir / "a"), str(out_dir / "b")], vocab,
                       max_seq_length=32, dupe_factor=2, progress=False))
  assert os.listdir(out_dir) == []


def test_no_partial_output_when_a_worker_fails(tmp_path):
  """--num_workers: one part fails (invalid UTF-8 at the end of the input) after others
  have written their shards: a clear error, and no shard (temporary or final) is left."""
  files = [_write(tmp_path / "c1.txt", CORPUS_1 + "\n" + CORPUS_2 * 5)]
  bad = tmp_path / "c2.txt"
  bad.write_bytes(CORPUS_2.encode("utf-8") * 3 + b"bad \xff byte\n")
  vocab = _corpus_vocab(tmp_path, [CORPUS_1, CORPUS_2])
  out_dir = tmp_path / "out"
  out_dir.mkdir()
  with pytest.raises(cpd.UsageError, match="c2.txt.*line [0-9]+: not UTF-8 \\(byte"):
    cpd.run(cpd.Config(files + [str(bad)], [str(out_dir / "a")], vocab, max_seq_length=32,
                       dupe_factor=1, progress=False, num_workers=2, part_size_mb=0.002))
  assert os.listdir(out_dir) == []


@pytest.mark.slow
def test_num_workers_shards_deterministic_same_statistics(tmp_path):
  """--num_workers 2: parts by line ranges, shards <output>-0000p-of-0000P for each output,
  byte-identical across runs, every line's tokens used, statistics like the original's."""
  book = shared_path("data", "text", "gutenberg_sentence_per_line", "austen-persuasion.txt")
  with open(book, encoding="utf-8") as f:
    lines = f.read().split("\n")[:3000]
  text = "\n".join(line if i % 25 else line + "\n" for i, line in enumerate(lines)) + "\n"
  files = [_write(tmp_path / "p1.txt", text[:len(text) // 3]),
           _write(tmp_path / "p2.txt", text[len(text) // 3:])]
  vocab = str(shared_path("data", "vocab", "bert-base-uncased-vocab.txt"))
  single = cpd.run(cpd.Config(files, [str(tmp_path / "single")], vocab, dupe_factor=3,
                              progress=False))
  results = []
  for k in range(2):
    outs = [str(tmp_path / ("w%d_a" % k)), str(tmp_path / ("w%d_b" % k))]
    total = cpd.run(cpd.Config(files, outs, vocab, dupe_factor=3, num_workers=2,
                               part_size_mb=0.1, progress=False))
    names = sorted(p for p in os.listdir(tmp_path) if p.startswith("w%d_" % k))
    num_parts = int(names[0].rsplit("-of-", 1)[1])
    assert num_parts % 2 == 0 and num_parts >= 4  # part_size_mb bounds the part size
    assert names == sorted("w%d_%s-%05d-of-%05d" % (k, ab, p, num_parts)
                           for ab in "ab" for p in range(num_parts))
    results.append((total, [(tmp_path / n).read_bytes() for n in names]))
  assert results[0] == results[1]
  stats = {}
  for label, paths in (("single", [tmp_path / "single"]),
                       ("workers", [tmp_path / n for n in os.listdir(tmp_path)
                                    if n.startswith("w0_")])):
    recs = [f for p in paths for _, f in _records(p)]
    stats[label] = (len(recs),
                    np.mean([f["next_sentence_labels"][1][0] for f in recs]),
                    np.sum([sum(f["masked_lm_weights"][1]) for f in recs]) /
                    np.sum([sum(f["input_mask"][1]) for f in recs]))
  assert stats["single"][0] == single
  assert abs(stats["workers"][0] / stats["single"][0] - 1) < 0.1
  assert abs(stats["workers"][1] - stats["single"][1]) < 0.05
  assert abs(stats["workers"][2] - stats["single"][2]) < 0.005


@pytest.mark.parametrize("workers", [1, 2])
def test_progress_lines_when_not_a_terminal(tmp_path, monkeypatch, caplog, workers):
  """Progress (documents read, instances, rate, ETA) goes to the log as whole lines."""
  import logging
  files = [_write(tmp_path / "c1.txt", CORPUS_1), _write(tmp_path / "c2.txt", CORPUS_2)]
  vocab = _corpus_vocab(tmp_path, [CORPUS_1, CORPUS_2])
  monkeypatch.setattr(progress.Progress, "LOG_INTERVAL_S", 0.0)
  with caplog.at_level(logging.INFO):
    cpd.run(cpd.Config(files, [str(tmp_path / "o")], vocab, max_seq_length=32, dupe_factor=2,
                       num_workers=workers, progress=True))
  lines = [r.getMessage() for r in caplog.records if r.getMessage().startswith("progress: ")]
  assert lines and "ETA" in lines[-1] and "instances created" in lines[-1]
  assert all("\r" not in line for line in lines)


def test_paths_with_a_scheme_go_through_tf_io_gfile(tmp_path):
  """file:// paths (like gs://) are globbed, read, written and renamed with tf.io.gfile,
  giving the same bytes as local paths."""
  _write(tmp_path / "c1.txt", CORPUS_1)
  _write(tmp_path / "c2.txt", CORPUS_2)
  vocab = _corpus_vocab(tmp_path, [CORPUS_1, CORPUS_2])
  local = file_io.expand_input_patterns(str(tmp_path / "c*.txt"))
  remote = file_io.expand_input_patterns("file://" + str(tmp_path / "c*.txt"))
  assert [p.replace("file://", "") for p in remote] == local
  for files, out in ((local, str(tmp_path / "local")),
                     (remote, "file://" + str(tmp_path / "remote"))):
    cpd.run(cpd.Config(files, [out], vocab, max_seq_length=40, dupe_factor=2, progress=False))
  assert (tmp_path / "local").read_bytes() == (tmp_path / "remote").read_bytes()
  assert not [p for p in os.listdir(tmp_path) if ".tmp-" in p]


def test_pretraining_data_output_file_that_is_a_directory(tmp_path):
  text = tmp_path / "in.txt"
  text.write_text("a b\n")
  vocab = tmp_path / "vocab.txt"
  vocab.write_text("[PAD]\n[UNK]\n[CLS]\n[SEP]\n[MASK]\na\nb\n")
  for output, expected in ((tmp_path, f"--output_file {tmp_path}: is a directory"),
                           (text / "x.tfrecord", f"--output_file {text}/x.tfrecord: {text} "
                            "is not a directory")):
    with pytest.raises(cpd.UsageError) as info:
      cpd.Config([str(text)], [str(output)], str(vocab))
    assert str(info.value).startswith(expected)
