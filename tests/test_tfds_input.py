"""tfds_input.py: GLUE and SQuAD through TensorFlow Datasets, never downloading.

The TFDS side of every comparison is made by TFDS's own dataset code. glue/mrpc is really
built (TFRecords) offline from the Microsoft files TFDS builds it from, and compared with GLUE's
TSVs. Elsewhere the glue / squad builders' _generate_examples run over the same files that
run_classifier's processors and run_squad's JSON reader read, encoded with the builder's
features and served, shuffled as TFDS stores them, through tfds.testing.mock_data; the metadata
(dataset_info.json) is written into a temporary --tfds_data_dir, so that the not-prepared check
passes as on a prepared directory.
"""

import contextlib
import itertools
import json
import os
import random
import subprocess
import sys

import numpy as np
import pytest
import tensorflow as tf

from conftest import shared_path
from bert_keras import checkpoints
from bert_keras import evaluate_squad
from bert_keras import modeling
from bert_keras import run_classifier
from bert_keras import run_squad
from bert_keras import tokenization
from bert_keras.tasks import tfds_input

tfds = pytest.importorskip("tensorflow_datasets")

REPO = os.path.dirname(os.path.dirname(os.path.abspath(__file__)))
ENV = dict(os.environ, TF_CPP_MIN_LOG_LEVEL="3", CUDA_VISIBLE_DEVICES="")


class FakeTfds:
  """A --tfds_data_dir with metadata only, and the examples that mock_data serves from it."""

  def __init__(self, data_dir):
    self.data_dir = str(data_dir)
    self.store = {}  # (builder name, config name, split) -> encoded examples

  def add(self, name, split, generated, seed=0):
    """Encodes a builder's generated (key, example) pairs as TFDS stores them (shuffled) and
    records the split in the metadata. Returns the number of examples."""
    builder = tfds.builder(name, data_dir=self.data_dir)
    spec = builder.info.features.get_tensor_spec()
    examples = [_arrays(spec, _plain(builder.info.features.encode_example(example)))
                for _, example in generated]
    random.Random(seed).shuffle(examples)
    self.store[(builder.name, builder.builder_config.name, split)] = examples
    splits = {key[2]: len(value) for key, value in self.store.items()
              if key[:2] == (builder.name, builder.builder_config.name)}
    builder.info.set_splits(tfds.core.SplitDict(
        [tfds.core.SplitInfo(name=s, shard_lengths=[n], num_bytes=0) for s, n in splits.items()]))
    os.makedirs(builder.data_dir, exist_ok=True)
    builder.info.write_to_directory(builder.data_dir)
    return len(examples)

  @contextlib.contextmanager
  def mocked(self):
    store = self.store

    def as_dataset(builder, split, **kwargs):
      examples = store[(builder.name, builder.builder_config.name, str(split))]
      return tf.data.Dataset.from_generator(
          lambda: iter(examples), output_signature=builder.info.features.get_tensor_spec())

    with tfds.testing.mock_data(data_dir=self.data_dir, as_dataset_fn=as_dataset):
      yield


def _plain(value):
  """An encoded example as nested dicts / lists of Python scalars (text as UTF-8 bytes)."""
  if isinstance(value, dict):
    return {key: _plain(item) for key, item in value.items()}
  if isinstance(value, np.ndarray):
    value = value.tolist()
  if isinstance(value, (list, tuple)):
    return [_plain(item) for item in value]
  return value.encode("utf-8") if isinstance(value, str) else value


def _arrays(spec, value):
  if isinstance(spec, dict):
    return {key: _arrays(spec[key], value[key]) for key in spec}
  return np.array(value, dtype=spec.dtype.as_numpy_dtype)


def _generate(name, data_dir, **kwargs):
  """TFDS's own example generation (the builder's _generate_examples) over local files."""
  return list(tfds.builder(name, data_dir=str(data_dir))._generate_examples(**kwargs))


def _as_tuples(examples):
  return [(e.guid, e.text_a, e.text_b, e.label) for e in examples]


# ----------------------------------------------------------------------------
# GLUE on the real files of ../shared.

@pytest.fixture(scope="module")
def real_mrpc(tmp_path_factory):
  """glue/mrpc really built by TFDS (TFRecords, dataset_info.json) offline: its download
  manager takes the Microsoft files and GLUE's dev ids from a manual_dir (checksums verified
  against TFDS's registered ones); any network download fails the test."""
  import importlib.resources
  src = shared_path("data", "glue", "MRPC")
  manual = tmp_path_factory.mktemp("manual")
  for name, target in (("msr_paraphrase_train.txt", None), ("msr_paraphrase_test.txt", None),
                       ("dev_ids.tsv", "data_mrpc_dev_ids.tsv")):
    (manual / (target or name)).write_bytes((src / name).read_bytes())
  data_dir = tmp_path_factory.mktemp("tfds")
  # etils reads TFDS's checksum files through importlib_resources, absent from this venv; the
  # standard library's importlib.resources has the same files() API.
  sys.modules.setdefault("importlib_resources", importlib.resources)
  from tensorflow_datasets.core.download import downloader

  def no_network(*args, **kwargs):
    raise AssertionError("TFDS tried to download")

  saved, downloader._Downloader.download = downloader._Downloader.download, no_network
  try:
    tfds.builder("glue/mrpc", data_dir=str(data_dir)).download_and_prepare(
        download_config=tfds.download.DownloadConfig(manual_dir=str(manual)))
  finally:
    downloader._Downloader.download = saved
  return str(data_dir)


@pytest.mark.slow
def test_real_tfds_mrpc_equals_glue_tsvs(real_mrpc, tmp_path):
  """TFDS builds MRPC from msr_paraphrase_*.txt (not GLUE's TSVs), stores it shuffled: read
  back (not mocked), the same examples, guids, labels and order as MrpcProcessor on GLUE's
  train/dev/test.tsv, and the same feature records."""
  src = shared_path("data", "glue", "MRPC")
  processor = run_classifier.MrpcProcessor()
  reader = tfds_input.GlueReader("glue/mrpc", real_mrpc, processor, "mrpc")
  assert _as_tuples(tfds_input.GlueReader("glue/mrpc:2.0.0", real_mrpc, processor, "mrpc")
                    .get_dev_examples()) == _as_tuples(processor.get_dev_examples(str(src)))
  for split, count in (("train", 3668), ("dev", 408), ("test", 1725)):
    got = getattr(reader, f"get_{split}_examples")()
    want = getattr(processor, f"get_{split}_examples")(str(src))
    assert len(got) == count and _as_tuples(got) == _as_tuples(want), split
  vocab = str(shared_path("data", "vocab", "bert-base-uncased-vocab.txt"))
  tokenizer = tokenization.FullTokenizer(vocab, do_lower_case=True)
  for name, examples in (("tfds", reader.get_dev_examples()),
                         ("tsv", processor.get_dev_examples(str(src)))):
    run_classifier.file_based_convert_examples_to_features(
        examples, ["0", "1"], 32, tokenizer, str(tmp_path / f"{name}.tf_record"))
  assert (tmp_path / "tfds.tf_record").read_bytes() == (tmp_path / "tsv.tf_record").read_bytes()
  assert {e.label for e in reader.get_dev_examples()} == {"0", "1"}


@pytest.mark.slow
@pytest.mark.parametrize("config,task,directory", [("cola", "cola", "CoLA"),
                                                   ("sst2", None, "SST-2"),
                                                   ("wnli", None, "WNLI")])
def test_real_glue_tsvs_through_tfds(tmp_path, config, task, directory):
  """TFDS's generation from the real TSVs, read back: the processor's examples."""
  src = shared_path("data", "glue", directory)
  try:
    task = tfds_input.glue_task_name(f"glue/{config}", task, run_classifier.PROCESSORS)
  except ValueError:
    pytest.skip(f"run_classifier has no processor for glue/{config}")
  # The real files' first 1,000 lines (SST-2's 67,349 training rows add a minute, no case).
  data = tmp_path / "data"
  data.mkdir()
  for split in ("train", "dev", "test"):
    with open(src / f"{split}.tsv", encoding="utf-8") as f:
      (data / f"{split}.tsv").write_text("".join(itertools.islice(f, 1000)), encoding="utf-8")
  fake = FakeTfds(tmp_path / "tfds")
  for split, tfds_split in (("train", "train"), ("dev", "validation"), ("test", "test")):
    fake.add(f"glue/{config}", tfds_split, _generate(
        f"glue/{config}", fake.data_dir, data_file=str(data / f"{split}.tsv"), split=split))
  processor = run_classifier.PROCESSORS[task]()
  with fake.mocked():
    reader = tfds_input.GlueReader(f"glue/{config}", fake.data_dir, processor, task)
    for split in ("train", "dev", "test"):
      got = _as_tuples(getattr(reader, f"get_{split}_examples")())
      want = _as_tuples(getattr(processor, f"get_{split}_examples")(str(data)))
      assert len(got) > 30 and got == want, split


# ----------------------------------------------------------------------------
# GLUE on synthetic files in each task's layout (../shared has no MNLI, QQP, ...).

_TEXTS = ["A \"quoted\" premise , with ' marks .", "Ünïcödé text — 東京 .", "short",
          "Trailing space ", "x y z"]


def _layout(config, i, split):
  """(header, row) of example i in the GLUE distribution's TSV layout (spec/glue_layouts.md),
  with realistic filler in the columns the readers ignore."""
  a, b = _TEXTS[i % 5], _TEXTS[(i + 2) % 5] + f" {i}"
  test = split == "test"
  if config == "cola":
    return ((["index", "sentence"], [str(i), a]) if test else
            (None, ["gj04", str(i % 2), "" if i % 2 else "*", a]))
  if config == "sst2":
    return ((["index", "sentence"], [str(i), a]) if test else
            (["sentence", "label"], [a, str(i % 2)]))
  if config == "qqp":
    return ((["id", "question1", "question2"], [str(i), a, b]) if test else
            (["id", "qid1", "qid2", "question1", "question2", "is_duplicate"],
             [str(i), str(2 * i + 1), str(2 * i + 2), a, b, str(i % 2)]))
  if config == "stsb":
    head = ["index", "genre", "filename", "year", "old_index", "source1", "source2",
            "sentence1", "sentence2"]
    row = [str(i), "main-news", "headlines", "2015", str(100 + i), "none", "none", a, b]
    score = ["3.800", "0.000", "5.000", "1.250", "2.667"][i % 5]
    return (head, row) if test else (head + ["score"], row + [score])
  if config.startswith("mnli") or config == "ax":
    if config == "ax":
      return ["index", "sentence1", "sentence2"], [str(i), a, b]
    head = ["index", "promptID", "pairID", "genre", "sentence1_binary_parse",
            "sentence2_binary_parse", "sentence1_parse", "sentence2_parse", "sentence1",
            "sentence2"]
    row = [str(i), str(31193 + i), f"{31193 + i}n", "government", "( ( a ) )", "( b )",
           "(ROOT (S a))", "(ROOT (S b))", a, b]
    if test:
      return head, row
    label = ["neutral", "entailment", "contradiction"][i % 3]
    if split == "train":
      return head + ["label1", "gold_label"], row + [label, label]
    return (head + ["label%d" % k for k in range(1, 6)] + ["gold_label"],
            row + [label, "neutral", label, label, label, label])
  names = {"qnli": ("question", "sentence"), "rte": ("sentence1", "sentence2"),
           "wnli": ("sentence1", "sentence2")}[config]
  label = (str(i % 2) if config == "wnli" else ["entailment", "not_entailment"][i % 2])
  head, row = ["index", *names], [str(i), a, b]
  return (head, row) if test else (head + ["label"], row + [label])


def _write_tsv(path, config, split, count):
  rows = [_layout(config, i, split) for i in range(count)]
  lines = ([rows[0][0]] if rows[0][0] else []) + [row for _, row in rows]
  path.write_text("".join("\t".join(line) + "\n" for line in lines), encoding="utf-8")


class _SpecProcessor(run_classifier._GlueProcessor):
  """A stand-in for the tasks run_classifier has no processor for yet: the original's style
  (skip the header, guid "<set>-<line>", test label = the first label) over the spec's
  columns (text_a, text_b, label; test: text_a, text_b)."""

  def __init__(self, columns, test_columns, labels, header=True):
    self.columns, self.test_columns, self.labels, self.header = (columns, test_columns, labels,
                                                                 header)

  def get_labels(self):
    return self.labels

  def _create_examples(self, lines, set_type):
    examples = []
    for i, line in enumerate(lines):
      if i == 0 and (self.header or set_type == "test"):
        continue
      a, b, label = ((*self.test_columns, None) if set_type == "test" else self.columns)
      label = self.labels[0] if label is None else line[label]
      examples.append(run_classifier.InputExample(
          f"{set_type}-{i}", line[a], None if b is None else line[b],
          float(label or 0) if self.labels == [None] else label))  # (STS-B: a float)
    return examples


_STAND_INS = {
    "sst2": lambda: _SpecProcessor((0, None, 1), (1, None), ["0", "1"]),
    "qqp": lambda: _SpecProcessor((3, 4, 5), (1, 2), ["0", "1"]),
    "stsb": lambda: _SpecProcessor((7, 8, 9), (7, 8), [None]),
    "qnli": lambda: _SpecProcessor((1, 2, 3), (1, 2), ["entailment", "not_entailment"]),
    "rte": lambda: _SpecProcessor((1, 2, 3), (1, 2), ["entailment", "not_entailment"]),
    "wnli": lambda: _SpecProcessor((1, 2, 3), (1, 2), ["0", "1"]),
}

_FILES = {"mnli": {"train": "train.tsv", "dev": "dev_matched.tsv", "test": "test_matched.tsv"},
          "mnli_mismatched": {"dev": "dev_mismatched.tsv", "test": "test_mismatched.tsv"},
          "ax": {"test": "diagnostic.tsv"}}
_TFDS_SPLITS = {"mnli": {"train": "train", "dev": "validation_matched", "test": "test_matched"},
                "mnli_mismatched": {"dev": "validation", "test": "test"},
                "ax": {"test": "test"}}


@pytest.mark.parametrize("config", ["cola", "sst2", "qqp", "stsb", "mnli", "mnli_mismatched",
                                    "qnli", "rte", "wnli"])
def test_synthetic_glue_layouts_through_tfds(tmp_path, config):
  """Every task's layout: the TSVs read by the task's processor (or a stand-in over the
  spec's columns) and TFDS's generation from the same TSVs read through GlueReader give the
  same examples; STS-B's float32 scores come back as the file's numbers."""
  tsv = tmp_path / "tsv"
  tsv.mkdir()
  fake = FakeTfds(tmp_path / "tfds")
  files = _FILES.get(config, {s: f"{s}.tsv" for s in ("train", "dev", "test")})
  for split, name in files.items():
    _write_tsv(tsv / name, config, split, 7)
    tfds_split = _TFDS_SPLITS.get(config, {"train": "train", "dev": "validation",
                                           "test": "test"})[split]
    fake.add(f"glue/{config}", tfds_split,
             _generate(f"glue/{config}", fake.data_dir, data_file=str(tsv / name), split=split))
  if config == "mnli_mismatched":  # its train split is glue/mnli's
    _write_tsv(tsv / "train.tsv", "mnli", "train", 7)
    fake.add("glue/mnli", "train", _generate("glue/mnli", fake.data_dir,
                                             data_file=str(tsv / "train.tsv"), split="train"))
  try:
    task = tfds_input.glue_task_name(f"glue/{config}", None, run_classifier.PROCESSORS)
    processor = run_classifier.PROCESSORS[task]()
  except ValueError:
    task, processor = config, _STAND_INS[config]()
  want_dir = tsv
  if config == "mnli_mismatched" and task == "mnli":  # the matched processor, mismatched files
    want_dir = tmp_path / "as_matched"
    want_dir.mkdir()
    for name in ("train", "dev", "test"):
      source = {"train": "train.tsv", "dev": "dev_mismatched.tsv",
                "test": "test_mismatched.tsv"}[name]
      (want_dir / _FILES["mnli"][name]).write_bytes((tsv / source).read_bytes())
  with fake.mocked():
    reader = tfds_input.GlueReader(f"glue/{config}", fake.data_dir, processor, task)
    for split in ("train", "dev", "test"):
      got = _as_tuples(getattr(reader, f"get_{split}_examples")())
      want = _as_tuples(getattr(processor, f"get_{split}_examples")(str(want_dir)))
      if config == "mnli_mismatched" and task == "mnli":
        want = [(g.replace("dev_matched", "dev_mismatched"), *rest) for g, *rest in want]
      if getattr(processor, "is_regression", False):  # "3.800" in the file, 3.8 from TFDS
        got, want = ([(*rest, float(label)) for *rest, label in rows] for rows in (got, want))
      assert len(got) == 7 and got == want, split
    if config == "stsb":  # float32 scores written back as the file's numbers
      assert [row[9] for row in reader.rows("dev")[1:]] == [
          "3.8", "0.0", "5.0", "1.25", "2.667", "3.8", "0.0"]


def test_glue_ax_with_the_mnli_processor(tmp_path):
  """glue/ax (GLUE's diagnostic set, test only) predicted by an MNLI model: test examples
  "test-<index>" with the diagnostic's sentences and MNLI's dummy label."""
  tsv = tmp_path / "diagnostic.tsv"
  _write_tsv(tsv, "ax", "test", 6)
  fake = FakeTfds(tmp_path / "tfds")
  fake.add("glue/ax", "test", _generate("glue/ax", fake.data_dir, data_file=str(tsv),
                                        split="test"))
  task = tfds_input.glue_task_name("glue/ax", "MNLI", run_classifier.PROCESSORS)
  with fake.mocked():
    reader = tfds_input.GlueReader("glue/ax", fake.data_dir, run_classifier.MnliProcessor(),
                                   task)
    got = _as_tuples(reader.get_test_examples())
    with pytest.raises(ValueError, match="glue/ax has no train split"):
      reader.get_train_examples()
  want = [(f"test-{i}", *_layout("ax", i, "test")[1][1:], "contradiction") for i in range(6)]
  assert got == want


def test_task_name_and_tfds_name_must_agree():
  processors = run_classifier.PROCESSORS
  assert tfds_input.glue_task_name("glue/mrpc", None, processors) == "mrpc"
  assert tfds_input.glue_task_name("glue/mrpc", "MRPC", processors) == "mrpc"
  assert tfds_input.glue_task_name("glue/mnli_mismatched", None, {"mnli": 1}) == "mnli"
  with pytest.raises(ValueError, match="--task_name=CoLA does not read --tfds_name glue/mrpc"):
    tfds_input.glue_task_name("glue/mrpc", "CoLA", processors)
  with pytest.raises(ValueError, match="no processor"):
    tfds_input.glue_task_name("glue/qqp", None, {"mrpc": 1})
  with pytest.raises(ValueError, match="run_classifier reads glue/<config>"):
    tfds_input.glue_task_name("squad/v1.1", None, processors)
  with pytest.raises(ValueError, match="run_classifier reads glue/<config>"):
    tfds_input.glue_task_name("glue/xnli", None, processors)


# ----------------------------------------------------------------------------
# run_classifier end to end: same records, results and predictions as from the TSVs.

TINY = dict(vocab_size=30522, hidden_size=32, num_hidden_layers=2, num_attention_heads=2,
            intermediate_size=64, max_position_embeddings=64, type_vocab_size=2)


def _decode_all(path, length):
  decode = run_classifier.decode_fn(length)
  return [{k: v.numpy().tolist() for k, v in decode(r).items()}
          for r in tf.data.TFRecordDataset(str(path))]


def test_run_classifier_with_tfds_name_equals_data_dir(tmp_path):
  src = shared_path("data", "glue", "MRPC")
  vocab = str(shared_path("data", "vocab", "bert-base-uncased-vocab.txt"))
  tsv = tmp_path / "MRPC"
  tsv.mkdir()
  fake = FakeTfds(tmp_path / "tfds")
  for split, tfds_split, n in (("train", "train", 16), ("dev", "validation", 24),
                               ("test", "test", 12)):
    with open(src / f"{split}.tsv", encoding="utf-8", newline="") as f:
      lines = f.readlines()[:n + 1]
    (tsv / f"{split}.tsv").write_text("".join(lines), encoding="utf-8", newline="")
    # (TFDS's MRPC comes from the Microsoft files; the TSV subset is in the GLUE layout, which
    # TFDS's generic TSV generation reads as for the other tasks.)
    generated = [(i, {"sentence1": row[3], "sentence2": row[4],
                      "label": int(row[0]) if split != "test" else -1, "idx": i})
                 for i, row in enumerate(line.rstrip("\n").split("\t") for line in lines[1:])]
    fake.add("glue/mrpc", tfds_split, generated)
  config = modeling.BertConfig(**TINY)
  (tmp_path / "bert_config.json").write_text(config.to_json_string())
  checkpoints.save_tf1_checkpoint(modeling.BertPretrainer(config),
                                  str(tmp_path / "pretrained" / "bert_model.ckpt"))
  base = dict(vocab_file=vocab, bert_config_file=str(tmp_path / "bert_config.json"),
              init_checkpoint=str(tmp_path / "pretrained" / "bert_model.ckpt"),
              max_seq_length=32, do_eval=True, do_predict=True)
  want = run_classifier.run(run_classifier.options(
      **base, task_name="MRPC", data_dir=str(tsv), output_dir=str(tmp_path / "tsv_out")))
  with fake.mocked():
    got = run_classifier.run(run_classifier.options(
        **base, tfds_name="glue/mrpc", tfds_data_dir=fake.data_dir,
        output_dir=str(tmp_path / "tfds_out")))
  assert got["eval"] == want["eval"]
  np.testing.assert_array_equal(got["predict"], want["predict"])
  for name in ("eval.tf_record", "predict.tf_record"):
    records = _decode_all(tmp_path / "tfds_out" / name, 32)
    assert len(records) in (24, 12) and records == _decode_all(tmp_path / "tsv_out" / name, 32)
  for name in ("eval_results.txt", "test_results.tsv"):
    assert ((tmp_path / "tfds_out" / name).read_text() ==
            (tmp_path / "tsv_out" / name).read_text())
  with pytest.raises(ValueError, match="--tfds_name replaces --data_dir"):
    run_classifier.run(run_classifier.options(
        **base, tfds_name="glue/mrpc", data_dir=str(tsv), output_dir=str(tmp_path / "x")))
  with pytest.raises(ValueError, match="--task_name is required"):
    run_classifier.run(run_classifier.options(**base, data_dir=str(tsv),
                                              output_dir=str(tmp_path / "x")))
  assert not (tmp_path / "x").exists()


# ----------------------------------------------------------------------------
# Not prepared: one line saying how, no download.

def test_not_prepared_is_a_one_line_error_and_never_downloads(tmp_path, monkeypatch):
  def no_download(*args, **kwargs):
    raise AssertionError("download_and_prepare was called")

  monkeypatch.setattr(tfds.core.DatasetBuilder, "download_and_prepare", no_download)
  empty = str(tmp_path / "empty")
  for name in ("glue/mrpc", "squad/v2.0"):
    with pytest.raises(ValueError) as info:
      tfds_input.load_split(name, "train", empty)
    message = str(info.value)
    assert "\n" not in message and f"--tfds_name {name}: not prepared in {empty}" in message
    assert f"run `tfds build {name} --data_dir={empty}`" in message
  for name in ("glue/nope", "nope_dataset/x"):
    with pytest.raises(ValueError, match=f"--tfds_name {name}: not a TensorFlow Datasets") as e:
      tfds_input.builder(name, empty)
    assert "\n" not in str(e.value)
  vocab = str(shared_path("data", "vocab", "bert-base-uncased-vocab.txt"))
  (tmp_path / "bert_config.json").write_text(modeling.BertConfig(**TINY).to_json_string())
  base = dict(vocab_file=vocab, bert_config_file=str(tmp_path / "bert_config.json"),
              output_dir=str(tmp_path / "out"), tfds_data_dir=empty, max_seq_length=32)
  with pytest.raises(ValueError, match="--data_dir with the task's TSV files"):
    run_classifier.run(run_classifier.options(**base, tfds_name="glue/cola", do_eval=True))
  with pytest.raises(ValueError, match="not prepared.*--train_file / --predict_file"):
    run_squad.run(run_squad.options(**base, tfds_name="squad/v1.1", do_predict=True,
                                    max_query_length=8))
  with pytest.raises(ValueError, match="needs --version_2_with_negative=true"):
    run_squad.run(run_squad.options(**base, tfds_name="squad/v2.0", do_predict=True,
                                    max_query_length=8))
  with pytest.raises(ValueError, match="--tfds_name replaces --train_file"):
    run_squad.run(run_squad.options(**base, tfds_name="squad/v1.1", do_train=True,
                                    train_file=vocab, max_query_length=8))
  assert not (tmp_path / "out").exists()


@pytest.mark.slow
def test_command_line_not_prepared(tmp_path):
  vocab = str(shared_path("data", "vocab", "bert-base-uncased-vocab.txt"))
  (tmp_path / "bert_config.json").write_text(modeling.BertConfig(**TINY).to_json_string())
  cmd = [sys.executable, os.path.join(REPO, "run_classifier.py"), "--tfds_name=glue/mrpc",
         f"--tfds_data_dir={tmp_path / 'empty'}", "--do_eval=true", f"--vocab_file={vocab}",
         f"--bert_config_file={tmp_path / 'bert_config.json'}", "--max_seq_length=32",
         f"--output_dir={tmp_path / 'out'}"]
  proc = subprocess.run(cmd, env=ENV, capture_output=True, text=True, timeout=120)
  assert proc.returncode == 1 and "Traceback" not in proc.stderr
  errors = [line for line in proc.stderr.splitlines() if line.startswith("error: ")]
  assert errors == [f"error: --tfds_name glue/mrpc: not prepared in {tmp_path / 'empty'} (no "
                    f"{tmp_path / 'empty'}/glue/mrpc/2.0.0); run `tfds build glue/mrpc "
                    f"--data_dir={tmp_path / 'empty'}` on a machine with internet access and "
                    "copy the directory here (this run never downloads), or pass --data_dir "
                    "with the task's TSV files instead of --tfds_name"]


# ----------------------------------------------------------------------------
# SQuAD.

def _example_tuple(e):
  return (e.qas_id, e.question_text, e.doc_tokens, e.orig_answer_text, e.start_position,
          e.end_position, e.is_impossible, repr(e))


def _squad_json(v2):
  """Two articles, three paragraphs, SQuAD whitespace (U+202F yes, U+00A0 no), an answer not
  recoverable from the words (skipped when training), v2: impossible questions."""
  context = " Lead\u00a0word\u202fnext\tone\r\nlast\u3000word  "
  qas = [{"id": "a", "question": "q a?", "answers": [{"text": "Lead\u00a0word",
                                                       "answer_start": 1}]},
         {"id": "z", "question": "q z?", "answers": [{"text": "Lead", "answer_start": 1}]},
         {"id": "b", "question": "q b?", "answers": [{"text": "next one", "answer_start": 11}]},
         {"id": "d", "question": "q d?", "answers": [{"text": "word", "answer_start": 25}]}]
  other = "The leader was John Smith (1895-1943). He lived in Tokyo."
  qas2 = [{"id": f"s{i}", "question": f"who {i}?", "answers": [{"text": "John Smith",
                                                               "answer_start": 15}]}
          for i in range(3)]
  qas3 = [{"id": "t", "question": "where?", "answers": [{"text": "Tokyo", "answer_start": 51}]}]
  if v2:
    for qa in qas + qas2 + qas3:
      qa["is_impossible"] = False
    qas3.append({"id": "n", "question": "why?", "answers": [], "is_impossible": True,
                 "plausible_answers": [{"text": "Tokyo", "answer_start": 51}]})
    qas.append({"id": "m", "question": "when?", "answers": [], "is_impossible": True})
  return {"version": "v2.0" if v2 else "1.1", "data": [
      {"title": "One", "paragraphs": [{"context": context, "qas": qas},
                                      {"context": other, "qas": qas2}]},
      {"title": "Two", "paragraphs": [{"context": other + " Again.", "qas": qas3}]}]}


def _squad_fake(tmp_path, name, train_path, dev_path):
  fake = FakeTfds(tmp_path / "tfds")
  for split, path in (("train", train_path), ("validation", dev_path)):
    fake.add(name, split, _generate(name, fake.data_dir, filepath=str(path)))
  return fake


@pytest.mark.parametrize("v2", [False, True])
def test_squad_examples_and_features_equal_the_json_readers(tmp_path, v2):
  name = "squad/v2.0" if v2 else "squad/v1.1"
  path = tmp_path / "squad.json"
  path.write_text(json.dumps(_squad_json(v2)), encoding="utf-8")
  fake = _squad_fake(tmp_path, name, path, path)
  vocab = str(shared_path("data", "vocab", "bert-base-uncased-vocab.txt"))
  tokenizer = tokenization.FullTokenizer(vocab, do_lower_case=True)
  for is_training in (True, False):
    want = run_squad.read_squad_examples(str(path), is_training, v2)
    with fake.mocked():
      got = run_squad.read_tfds_squad_examples(name, is_training, v2, fake.data_dir)
    # The same examples; TFDS keeps no file order, so compare in qas_id order.
    assert len(got) == len(want) >= 7 and sorted(map(_example_tuple, got)) == sorted(
        map(_example_tuple, want))
    assert sum(e.is_impossible for e in got) == (2 if v2 and is_training else 0)
    by_id = {e.qas_id: e for e in got}
    features = {}
    for label, examples in (("got", [by_id[e.qas_id] for e in want]), ("want", want)):
      features[label] = []
      run_squad.convert_examples_to_features(examples, tokenizer, 20, 4, 6, is_training,
                                             features[label].append)
    assert len(features["got"]) > len(want)
    assert [vars(f) for f in features["got"]] == [vars(f) for f in features["want"]]
  with fake.mocked():
    with pytest.raises(ValueError, match="needs --version_2_with_negative"):
      run_squad.read_tfds_squad_examples(name, True, not v2, fake.data_dir)


@pytest.mark.parametrize("name,v2", [("xquad.en.json", False),
                                     ("hf_tiny_squad2_fixture.json", True)])
def test_real_squad_dev_sets_and_their_evaluation(tmp_path, name, v2):
  """Real dev questions (several answers each): the same prediction examples, and the
  evaluate_squad dataset built from TFDS scores predictions as the JSON file does."""
  path = shared_path("data", "squad", name)
  tfds_name = "squad/v2.0" if v2 else "squad/v1.1"
  fake = _squad_fake(tmp_path, tfds_name, path, path)
  want = run_squad.read_squad_examples(str(path), False, v2)
  with fake.mocked():
    got = run_squad.read_tfds_squad_examples(tfds_name, False, v2, fake.data_dir)
    dataset = tfds_input.squad_eval_dataset(tfds_name, v2, fake.data_dir)
  assert len(got) == len(want) > 10
  assert sorted(map(_example_tuple, got)) == sorted(map(_example_tuple, want))
  original = json.loads(path.read_text(encoding="utf-8"))["data"]
  rng = random.Random(0)
  predictions = {}
  for qa in evaluate_squad.questions(original):  # right, wrong, partly right, empty
    answers = [a["text"] for a in qa["answers"]] or [""]
    predictions[qa["id"]] = rng.choice([answers[0], "nothing", answers[-1][:4], ""])
  version = "2.0" if v2 else "1.1"
  assert (evaluate_squad.evaluate(dataset, predictions, version=version) ==
          evaluate_squad.evaluate(original, predictions, version=version))
  assert sorted(qa["id"] for qa in evaluate_squad.questions(dataset)) == sorted(predictions)


def test_run_squad_with_tfds_name_predicts_as_with_predict_file(tmp_path):
  """run_squad.run --do_predict on the v2.0 fixture: the same predictions, n-best lists and
  null odds per question from TFDS as from --predict_file (the key order is TFDS's)."""
  path = shared_path("data", "squad", "hf_tiny_squad2_fixture.json")
  fake = _squad_fake(tmp_path, "squad/v2.0", path, path)
  config = modeling.BertConfig(**{**TINY, "max_position_embeddings": 64})
  (tmp_path / "bert_config.json").write_text(config.to_json_string())
  checkpoints.save_tf1_checkpoint(modeling.BertPretrainer(config),
                                  str(tmp_path / "pretrained" / "bert_model.ckpt"))
  base = dict(vocab_file=str(shared_path("data", "vocab", "bert-base-uncased-vocab.txt")),
              bert_config_file=str(tmp_path / "bert_config.json"),
              init_checkpoint=str(tmp_path / "pretrained" / "bert_model.ckpt"),
              do_predict=True, version_2_with_negative=True, max_seq_length=64,
              doc_stride=32, max_query_length=16, predict_batch_size=5)
  want = run_squad.run(run_squad.options(**base, predict_file=str(path),
                                         output_dir=str(tmp_path / "json_out")))
  with fake.mocked():
    got = run_squad.run(run_squad.options(**base, tfds_name="squad/v2.0",
                                          tfds_data_dir=fake.data_dir,
                                          output_dir=str(tmp_path / "tfds_out")))
  assert len(got["predictions"]) == 14
  assert dict(got["predictions"]) == dict(want["predictions"])  # (TFDS has its own order)
  assert got["eval_results"] == want["eval_results"] and want["eval_results"]["total"] == 14
  assert sorted(got["null_odds"]) == sorted(want["null_odds"])
  nbest = [json.loads((tmp_path / out / "nbest_predictions.json").read_text())
           for out in ("tfds_out", "json_out")]
  for qid in want["null_odds"]:
    assert [e["text"] for e in nbest[0][qid]] == [e["text"] for e in nbest[1][qid]]
    np.testing.assert_allclose([e["probability"] for e in nbest[0][qid]],
                               [e["probability"] for e in nbest[1][qid]], rtol=1e-5)
    np.testing.assert_allclose(got["null_odds"][qid], want["null_odds"][qid], rtol=1e-5,
                               atol=1e-6)
  on_disk = json.loads((tmp_path / "tfds_out" / "predictions.json").read_text())
  assert on_disk == json.loads((tmp_path / "json_out" / "predictions.json").read_text())
