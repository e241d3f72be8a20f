"""run_classifier.py: processors, features and TFRecords against the original (on the real
MRPC / CoLA files of ../shared), the classifier head's TF1 names (restored by the original's
create_model graph), and the README command end to end with a tiny model.
"""

import os
import pathlib
import subprocess
import sys

import numpy as np
import pytest
import tensorflow as tf

import oracle
from conftest import mrpc_subset, run_workers, shared_path, worker_results
from bert_keras import checkpoints
from bert_keras import modeling
from bert_keras import preprocessing
from bert_keras import run_classifier
from bert_keras import tokenization

REPO = pathlib.Path(__file__).resolve().parent.parent
ENV = dict(os.environ, TF_CPP_MIN_LOG_LEVEL="3", CUDA_VISIBLE_DEVICES="")
TINY = dict(vocab_size=30522, hidden_size=32, num_hidden_layers=2, num_attention_heads=2,
            intermediate_size=64, max_position_embeddings=64, type_vocab_size=2)


@pytest.fixture(scope="module")
def orig():
  return oracle.original("run_classifier")


@pytest.fixture(scope="module")
def vocab():
  return str(shared_path("data", "vocab", "bert-base-uncased-vocab.txt"))


def _as_tuples(examples):
  return [(e.guid, e.text_a, e.text_b, e.label) for e in examples]


@pytest.mark.parametrize("task", ["MRPC", "CoLA"])
def test_processors_match_the_original(orig, task):
  data_dir = str(shared_path("data", "glue", task))
  ours = run_classifier.PROCESSORS[task.lower()]()
  theirs = {"MRPC": orig.MrpcProcessor, "CoLA": orig.ColaProcessor}[task]()
  assert ours.get_labels() == theirs.get_labels()
  for split in ("train", "dev", "test"):
    got = _as_tuples(getattr(ours, f"get_{split}_examples")(data_dir))
    want = _as_tuples(getattr(theirs, f"get_{split}_examples")(data_dir))
    assert len(got) > 100 and got == want, split


def test_mnli_and_xnli_processors_match_the_original(orig, tmp_path):
  """Synthetic files in the MNLI / XNLI column layouts (not in ../shared)."""
  mnli = ["index\t" + "\t".join(f"c{i}" for i in range(1, 10)) + "\tgold_label"]
  for i in range(4):
    mnli.append(f"{i}\t" + "\t".join(f"x{i}{j}" for j in range(1, 8)) +
                f'\tA "quoted {i}\tThe pair {i}\t' + ["neutral", "entailment"][i % 2])
  for name in ("train.tsv", "dev_matched.tsv", "test_matched.tsv"):
    (tmp_path / name).write_text("\n".join(mnli) + "\n", encoding="utf-8")
  (tmp_path / "multinli").mkdir()
  (tmp_path / "multinli" / "multinli.train.zh.tsv").write_text(
      "premise\thypo\tlabel\n我们\t他们\tcontradictory\n你好\t再见\tneutral\n", encoding="utf-8")
  (tmp_path / "xnli.dev.tsv").write_text(
      "language\tgold_label\t2\t3\t4\t5\ts1\ts2\n"
      "zh\tentailment\t.\t.\t.\t.\t一\t二\nen\tneutral\t.\t.\t.\t.\tone\ttwo\n"
      "zh\tneutral\t.\t.\t.\t.\t三\t四\n", encoding="utf-8")
  for ours, theirs, splits in ((run_classifier.MnliProcessor(), orig.MnliProcessor(),
                                ("train", "dev", "test")),
                               (run_classifier.XnliProcessor(), orig.XnliProcessor(),
                                ("train", "dev"))):
    assert ours.get_labels() == theirs.get_labels()
    for split in splits:
      got = _as_tuples(getattr(ours, f"get_{split}_examples")(str(tmp_path)))
      assert got and got == _as_tuples(getattr(theirs, f"get_{split}_examples")(str(tmp_path)))
  with pytest.raises(NotImplementedError):
    run_classifier.XnliProcessor().get_test_examples(str(tmp_path))


class _CachedTokenizer:
  """The original FullTokenizer with tokenize() memoised (the texts repeat across lengths)."""

  def __init__(self, tokenizer):
    self._tokenizer, self._cache = tokenizer, {}

  def tokenize(self, text):
    if text not in self._cache:
      self._cache[text] = self._tokenizer.tokenize(text)
    return list(self._cache[text])

  def convert_tokens_to_ids(self, tokens):
    return self._tokenizer.convert_tokens_to_ids(tokens)


def _feature_tuple(f):
  return (list(f.input_ids), list(f.input_mask), list(f.segment_ids), f.label_id,
          bool(f.is_real_example))


@pytest.mark.parametrize("task", ["MRPC", "CoLA"])
def test_features_match_the_original(orig, vocab, task):
  """convert_single_example on every dev example, at 128 and at 16 (truncation)."""
  data_dir = str(shared_path("data", "glue", task))
  processor = run_classifier.PROCESSORS[task.lower()]()
  examples = processor.get_dev_examples(data_dir) + [run_classifier.PaddingInputExample()]
  labels = processor.get_labels()
  ours = tokenization.FullTokenizer(vocab, do_lower_case=True)
  theirs = _CachedTokenizer(oracle.original("tokenization").FullTokenizer(vocab, True))
  truncated = 0
  for length in (128, 16):
    for i, example in enumerate(examples):
      got = run_classifier.convert_single_example(i, example, labels, length, ours)
      if isinstance(example, run_classifier.PaddingInputExample):
        example = orig.PaddingInputExample()
      want = orig.convert_single_example(i, example, labels, length, theirs)
      assert _feature_tuple(got) == _feature_tuple(want), (length, i)
      truncated += length == 16 and got.input_mask[-1] == 1
  assert truncated > 100


def test_truncate_seq_pair_matches_the_original(orig):
  rng = np.random.RandomState(0)
  for _ in range(200):
    a, b = list(range(rng.randint(0, 20))), list(range(100, 100 + rng.randint(0, 20)))
    limit = rng.randint(0, 30)
    a2, b2 = list(a), list(b)
    preprocessing.truncate_seq_pair(a, b, limit)
    orig._truncate_seq_pair(a2, b2, limit)
    assert (a, b) == (a2, b2)


def _decode_all(path, length):
  decode = run_classifier.decode_fn(length)
  return [{k: v.numpy().tolist() for k, v in decode(r).items()}
          for r in tf.data.TFRecordDataset(str(path))]


def test_tfrecords_match_the_original(orig, vocab, tmp_path):
  data_dir = str(shared_path("data", "glue", "MRPC"))
  examples = run_classifier.MrpcProcessor().get_dev_examples(data_dir)[:40]
  labels = ["0", "1"]
  ours = tokenization.FullTokenizer(vocab, do_lower_case=True)
  theirs = oracle.original("tokenization").FullTokenizer(vocab, True)
  run_classifier.file_based_convert_examples_to_features(
      examples + [run_classifier.PaddingInputExample()], labels, 24, ours,
      str(tmp_path / "ours.tf_record"))
  orig.file_based_convert_examples_to_features(
      examples + [orig.PaddingInputExample()], labels, 24, theirs,
      str(tmp_path / "theirs.tf_record"))
  assert not list(tmp_path.glob("*.tmp"))
  got = _decode_all(tmp_path / "ours.tf_record", 24)
  want = _decode_all(tmp_path / "theirs.tf_record", 24)
  assert len(got) == 41 and got == want
  assert got[-1]["is_real_example"] == 0 and got[0]["is_real_example"] == 1
  # Same features, same types (all int64), same order of names.
  record = next(iter(tf.data.TFRecordDataset(str(tmp_path / "ours.tf_record")))).numpy()
  features = tf.train.Example.FromString(record).features.feature
  assert sorted(features) == sorted(["input_ids", "input_mask", "segment_ids", "label_ids",
                                     "is_real_example"])
  assert all(f.WhichOneof("kind") == "int64_list" for f in features.values())
  assert len(features["label_ids"].int64_list.value) == 1


# ----------------------------------------------------------------------------
# The classifier head.

def _tiny_config(**overrides):
  return modeling.BertConfig(**{**TINY, "vocab_size": 100, **overrides})


def test_classifier_tf1_names_restore_in_the_original_graph(tmp_path):
  """save_tf1_checkpoint of our BertClassifier is restored by a tf1 Saver over the
  original's create_model graph (every variable, no extra), and both give the same
  probabilities."""
  orig = oracle.original("run_classifier")
  original_modeling = oracle.original("modeling")
  config = _tiny_config()
  model = modeling.BertClassifier(config, 3)
  prefix = str(tmp_path / "clf" / "model.ckpt")
  written = checkpoints.save_tf1_checkpoint(model, prefix)
  assert "output_weights" in written and "output_bias" in written
  rng = np.random.RandomState(0)
  ids = rng.randint(1, 100, (4, 12)).astype(np.int32)
  mask = np.ones_like(ids)
  mask[1, 8:] = 0
  segments = np.zeros_like(ids)
  segments[:, 6:] = 1
  ours = model({"input_ids": ids, "input_mask": mask, "segment_ids": segments},
               training=False).numpy()

  import tensorflow.compat.v1 as tf1
  # create_model reads `output_layer.shape[-1].value` (TF1 Dimension objects).
  tf1.disable_v2_tensorshape()
  try:
    _run_original_create_model(orig, original_modeling, config, ids, mask, segments, prefix,
                               ours)
  finally:
    tf1.enable_v2_tensorshape()


def _run_original_create_model(orig, original_modeling, config, ids, mask, segments, prefix,
                               ours):
  import tensorflow.compat.v1 as tf1
  with tf.Graph().as_default():
    orig_config = original_modeling.BertConfig.from_dict(config.to_dict())
    _, _, logits, probabilities = orig.create_model(
        orig_config, False, tf1.constant(ids), tf1.constant(mask), tf1.constant(segments),
        tf1.constant(np.zeros(4, np.int32)), 3, False)
    graph_vars = {v.op.name: v.shape.as_list() for v in tf1.global_variables()}
    assert graph_vars == {n: list(s) for n, s in tf.train.list_variables(prefix)}
    assert graph_vars["output_weights"] == [3, 32] and graph_vars["output_bias"] == [3]
    with tf1.Session() as sess:
      tf1.train.Saver().restore(sess, prefix)
      theirs_logits, theirs_probs = sess.run([logits, probabilities])
  np.testing.assert_allclose(ours, theirs_logits, atol=1e-5)
  np.testing.assert_allclose(run_classifier.softmax(ours), theirs_probs, atol=1e-6)


def test_classifier_config_round_trip_and_head():
  model = modeling.BertClassifier(_tiny_config(), 2)
  clone = modeling.BertClassifier.from_config(model.get_config())
  assert clone.num_labels == 2 and clone.config == model.config
  assert [v.shape for v in clone.weights] == [v.shape for v in model.weights]
  w = model.classifier.output_weights.numpy()
  assert w.shape == (2, 32) and np.abs(w).max() <= 0.04 + 1e-6 and 0.005 < w.std() < 0.03
  assert not model.classifier.output_bias.numpy().any()
  # Dropout on the pooled output only when training.
  ids = np.ones((2, 8), np.int32)
  a = model(ids, training=False).numpy()
  np.testing.assert_array_equal(a, model(ids, training=False).numpy())
  assert model(ids, training=False).dtype == tf.float32


def test_pretraining_checkpoint_initialises_the_encoder_only(tmp_path):
  config = _tiny_config()
  pretrainer = modeling.BertPretrainer(config)
  checkpoints.save_tf1_checkpoint(pretrainer, str(tmp_path / "bert_model.ckpt"))
  model = modeling.BertClassifier(config, 2)
  head = model.classifier.output_weights.numpy()
  result = checkpoints.load_checkpoint(model, str(tmp_path / "bert_model.ckpt"))
  assert sorted(result.missing) == ["output_bias", "output_weights"]
  np.testing.assert_array_equal(model.bert.embedding_table.numpy(),
                                pretrainer.bert.embedding_table.numpy())
  np.testing.assert_array_equal(model.classifier.output_weights.numpy(), head)


# ----------------------------------------------------------------------------
# End to end.

@pytest.fixture(scope="module")
def glue(tmp_path_factory):
  """Tiny config, MRPC subset (64 train / 32 dev / 16 test), a pretraining checkpoint."""
  root = tmp_path_factory.mktemp("glue")
  mrpc_subset(root)
  config = modeling.BertConfig(**TINY)
  (root / "bert_config.json").write_text(config.to_json_string())
  checkpoints.save_tf1_checkpoint(modeling.BertPretrainer(config),
                                  str(root / "pretrained" / "bert_model.ckpt"))
  return root


def _readme_command(glue, vocab, out, *extra):
  return [sys.executable, str(REPO / "run_classifier.py"), "--task_name=MRPC",
          "--do_train=true", "--do_eval=true", f"--data_dir={glue / 'MRPC'}",
          f"--vocab_file={vocab}", f"--bert_config_file={glue / 'bert_config.json'}",
          f"--init_checkpoint={glue / 'pretrained' / 'bert_model.ckpt'}",
          "--max_seq_length=32", "--train_batch_size=16", "--learning_rate=2e-5",
          "--num_train_epochs=1.0", f"--output_dir={out}", *extra]


@pytest.mark.slow
def test_readme_command_end_to_end(glue, vocab, tmp_path):
  out = tmp_path / "mrpc_output"
  cmd = _readme_command(glue, vocab, out, "--do_predict=true", "--save_checkpoints_steps=2")
  proc = subprocess.run(cmd, env=ENV, capture_output=True, text=True, timeout=300)
  assert proc.returncode == 0, proc.stderr[-3000:]
  log = proc.stderr
  for line in ("*** Example ***", "guid: train-1", "label: 1 (id = 1)",
               "***** Running training *****", "  Num examples = 64", "  Num steps = 4",
               "***** Running evaluation *****", "  Num examples = 32 (32 actual, 0 padding)",
               "***** Eval results *****", "***** Running prediction*****",
               "  Num examples = 16 (16 actual, 0 padding)", "***** Predict results *****",
               "from tf1 checkpoint"):
    assert line in log, line
  assert sorted(p.name for p in out.glob("*.tf_record")) == [
      "eval.tf_record", "predict.tf_record", "train.tf_record"]
  assert (out / "model.ckpt-2.index").exists() and (out / "model.ckpt-4.index").exists()
  assert not [p for p in out.iterdir() if ".tmp" in p.name or p.name.endswith(".lock")]
  results = dict(line.split(" = ") for line in
                 (out / "eval_results.txt").read_text().splitlines())
  # The original's keys plus MRPC's official metric, F1.
  assert list(results) == ["eval_accuracy", "eval_f1", "eval_loss", "global_step", "loss"]
  assert results["global_step"] == "4"
  # The metrics restated in NumPy from the trained model run on eval.tf_record.
  model = modeling.BertClassifier(modeling.BertConfig(**TINY), 2)
  checkpoints.load_checkpoint(model, str(out))
  records = _decode_all(out / "eval.tf_record", 32)
  assert len(records) == 32
  logits = model({k: np.array([r[k] for r in records]) for k in
                  ("input_ids", "input_mask", "segment_ids")}, training=False)
  logits = logits.numpy().astype(np.float64)
  labels = np.array([r["label_ids"] for r in records])
  log_p = logits - np.log(np.exp(logits).sum(1, keepdims=True))
  per_example = -log_p[np.arange(32), labels]
  np.testing.assert_allclose(float(results["eval_accuracy"]),
                             np.mean(logits.argmax(1) == labels), rtol=1e-6)
  sk = pytest.importorskip("sklearn.metrics")
  np.testing.assert_allclose(float(results["eval_f1"]),
                             sk.f1_score(labels, logits.argmax(1), zero_division=0), rtol=1e-6)
  np.testing.assert_allclose(float(results["eval_loss"]), per_example.mean(), rtol=1e-5)
  # eval_batch_size 8: four full batches, so the mean of batch means is the mean.
  np.testing.assert_allclose(float(results["loss"]), per_example.mean(), rtol=1e-5)
  for key in ("eval_accuracy", "eval_f1", "eval_loss", "loss"):
    assert results[key] == str(np.float32(results[key]))
  rows = [line.split("\t") for line in (out / "test_results.tsv").read_text().splitlines()]
  assert len(rows) == 16 and all(len(r) == 2 for r in rows)
  assert all(abs(sum(float(p) for p in r) - 1) < 1e-5 for r in rows)
  assert all(p == str(np.float32(p)) for r in rows for p in r)

  # Again: resumes at step 4 = num_train_steps, only evaluates; same results.
  proc = subprocess.run([c for c in cmd if c != "--do_predict=true"], env=ENV,
                        capture_output=True, text=True, timeout=300)
  assert proc.returncode == 0, proc.stderr[-3000:]
  assert "nothing to train" in proc.stderr
  again = dict(line.split(" = ") for line in
               (out / "eval_results.txt").read_text().splitlines())
  assert again == results

  # Bad input on the command line: one line, no traceback.
  bad = _readme_command(glue, vocab, tmp_path / "bad", "--max_seq_length=512")
  proc = subprocess.run(bad, env=ENV, capture_output=True, text=True, timeout=120)
  assert proc.returncode != 0 and "Traceback" not in proc.stderr
  assert ("error: Cannot use sequence length 512 because the BERT model was only trained "
          "up to sequence length 64") in proc.stderr


def test_bad_input_raises_one_line_errors(glue, vocab, tmp_path):
  base = dict(task_name="MRPC", do_train=True, data_dir=str(glue / "MRPC"), vocab_file=vocab,
              bert_config_file=str(glue / "bert_config.json"), max_seq_length=32,
              output_dir=str(tmp_path / "out"))

  def error(**overrides):
    with pytest.raises(ValueError) as info:
      run_classifier.run(run_classifier.options(**{**base, **overrides}))
    return str(info.value)

  assert "At least one of `do_train`, `do_eval` or `do_predict' must be True." == error(
      do_train=False)
  assert error(task_name="Nope").startswith("Task not found: nope (known tasks: ax, cola, ")
  assert error(max_seq_length=128).startswith(  # the original's message, then the flag
      "Cannot use sequence length 128 because the BERT model was only trained up to sequence "
      "length 64 (--max_seq_length=128; max_position_embeddings of ")
  assert str(tmp_path / "MRPC" / "train.tsv") in error(data_dir=str(tmp_path / "MRPC"))
  assert "--data_dir" in error(data_dir=str(tmp_path / "MRPC"))
  assert "do_lower_case" in error(
      do_lower_case=False, init_checkpoint="/x/uncased_L-12_H-768_A-12/bert_model.ckpt")
  assert "--vocab_file" in error(vocab_file=str(tmp_path / "none.txt"))


@pytest.mark.slow
def test_flags_match_the_original():
  """Every flag of the original run_classifier exists with the same type and default."""
  want, got = oracle.original_and_our_flags("run_classifier", env=ENV)
  # GitHub master's 25 flags plus bert-tensorflow 1.0.4's tpu_job_name.
  assert len(want) == 26 and got == want
  assert {n: run_classifier.DEFAULTS[n] for n in want} == {n: v[0] for n, v in want.items()}


_WORKER = """
import json
from absl import logging
from bert_keras import run_classifier
from bert_keras.runtime import distribution
logging.set_verbosity(logging.INFO)
strategy = distribution.build_strategy("multi_worker_mirrored")
assert strategy.num_replicas_in_sync == 2
results = run_classifier.run(run_classifier.options(**{options!r}), strategy)
print("RESULT", json.dumps({{k: str(v) for k, v in results["eval"].items()}}), flush=True)
"""


@pytest.mark.slow
def test_multi_worker_mirrored_two_processes(glue, vocab, tmp_path):
  """Two workers on localhost (TF_CONFIG), one replica each: the chief writes the TFRecords
  and result files in output_dir, the other writes its records in a private temporary
  directory (removed at the end), and both end with the same eval results."""
  options = dict(task_name="MRPC", do_train=True, do_eval=True, data_dir=str(glue / "MRPC"),
                 vocab_file=vocab, bert_config_file=str(glue / "bert_config.json"),
                 max_seq_length=32, train_batch_size=16, eval_batch_size=8,
                 num_train_epochs=1.0, output_dir=str(tmp_path / "out"))
  script = _WORKER.format(options=options)
  temp = tmp_path / "tmp"   # the workers' temporary directory
  temp.mkdir()
  outputs, logs = run_workers(script, dict(ENV, TMPDIR=str(temp)), tmp_path)
  results = worker_results(outputs)
  assert len(results) == 2 and results[0] == results[1]
  assert results[0]["global_step"] == "4"
  # Each worker wrote the records it reads (none waits on, or races, the chief's files).
  assert all("Writing example 0 of 64" in log and "Writing example 0 of 32" in log
             for log in logs)
  assert not [p for p in os.listdir(temp) if p.startswith("bert_keras_records_")]
  out = tmp_path / "out"
  assert sorted(p.name for p in out.glob("*.tf_record")) == ["eval.tf_record", "train.tf_record"]
  assert (out / "eval_results.txt").exists() and (out / "model.ckpt-4.index").exists()
  assert not list(out.glob("workertemp_*"))


def test_bad_data_is_found_before_training(glue, vocab, tmp_path):
  """Rows with too few fields, unknown labels, an empty dev set, a vocab without [CLS],
  negative numbers: one-line errors naming the file and line, before any training."""
  data = tmp_path / "MRPC"
  data.mkdir()
  for name in ("train.tsv", "dev.tsv", "test.tsv"):
    (data / name).write_text((glue / "MRPC" / name).read_text(encoding="utf-8"),
                             encoding="utf-8")
  out = tmp_path / "out"
  base = dict(task_name="MRPC", do_train=True, do_eval=True, data_dir=str(data),
              vocab_file=vocab, bert_config_file=str(glue / "bert_config.json"),
              max_seq_length=32, output_dir=str(out))

  def error(**overrides):
    with pytest.raises(ValueError) as info:
      run_classifier.run(run_classifier.options(**{**base, **overrides}))
    assert not out.exists(), "the output directory was made before the inputs were checked"
    assert "\n" not in str(info.value)
    return str(info.value)

  dev = (data / "dev.tsv").read_text(encoding="utf-8").splitlines(keepends=True)
  (data / "dev.tsv").write_text("".join(dev[:3] + ["1\tonly two fields\n"] + dev[3:]),
                                encoding="utf-8")
  assert error() == (f"--data_dir: {data}/dev.tsv, line 4: 2 tab-separated fields, the task "
                     "reads field 4")
  (data / "dev.tsv").write_text("".join(dev[:3] + ["7\t1\t2\ta\tb\n"] + dev[3:]),
                                encoding="utf-8")
  assert error() == (f"--data_dir {data}: dev example dev-3 has label '7', not one of "
                     "['0', '1']")
  (data / "dev.tsv").write_text(dev[0], encoding="utf-8")  # the header only
  assert error() == f"--data_dir {data}: the dev file has no examples"
  (data / "dev.tsv").write_text("".join(dev), encoding="utf-8")
  no_cls = tmp_path / "vocab.txt"
  no_cls.write_text("".join(t + "\n" for t in ["[PAD]", "[UNK]", "[SEP]", "the", "a"]))
  assert "has no [CLS] token" in error(vocab_file=str(no_cls))
  assert error(learning_rate=-2e-5) == "--learning_rate=-2e-05: must be > 0"


# ----------------------------------------------------------------------------
# --trim_train_batches.

def test_trim_to_longest_cuts_sequence_features_only():
  from bert_keras.runtime import input_pipeline
  mask = np.zeros((3, 32), np.int32)
  for row, n in enumerate((5, 17, 9)):
    mask[row, :n] = 1
  batch = {"input_ids": np.arange(96, dtype=np.int32).reshape(3, 32), "input_mask": mask,
           "segment_ids": mask.copy(), "label_ids": np.array([0, 1, 1], np.int32)}
  trimmed = input_pipeline.trim_to_longest({k: tf.constant(v) for k, v in batch.items()})
  assert trimmed["input_ids"].shape == (3, 24)  # 17 rounded up to a multiple of 8
  np.testing.assert_array_equal(trimmed["input_ids"], batch["input_ids"][:, :24])
  np.testing.assert_array_equal(trimmed["input_mask"], mask[:, :24])
  np.testing.assert_array_equal(trimmed["label_ids"], batch["label_ids"])
  mask[0, :] = 1  # a full row: nothing to cut
  full = input_pipeline.trim_to_longest({"input_mask": tf.constant(mask)})
  assert full["input_mask"].shape == (3, 32)


@pytest.mark.slow
@pytest.mark.parametrize("accumulation", [1, 2])
def test_trimmed_training_batches_train_the_same_model(glue, vocab, tmp_path, accumulation,
                                                       monkeypatch):
  """--trim_train_batches: with dropout off the trained classifier equals the untrimmed
  run's (the padding changes no gradient), with gradient accumulation too (micro-batches of
  different lengths); and the batches really were shorter than max_seq_length."""
  from bert_keras.runtime import input_pipeline
  config = modeling.BertConfig(**{**TINY, "max_position_embeddings": 128,
                                  "hidden_dropout_prob": 0.0,
                                  "attention_probs_dropout_prob": 0.0})
  (tmp_path / "bert_config.json").write_text(config.to_json_string())
  init = str(tmp_path / "init" / "model.ckpt")  # the head too: both runs start the same
  checkpoints.save_tf1_checkpoint(modeling.BertClassifier(config, 2), init)
  trained, traced = {}, []
  trim_to_longest = input_pipeline.trim_to_longest
  monkeypatch.setattr(input_pipeline, "trim_to_longest",
                      lambda batch: traced.append(trim) or trim_to_longest(batch))
  for trim in (False, True):
    out = tmp_path / f"trim_{trim}"
    run_classifier.run(run_classifier.options(
        task_name="MRPC", do_train=True, data_dir=str(glue / "MRPC"), vocab_file=vocab,
        bert_config_file=str(tmp_path / "bert_config.json"), init_checkpoint=init,
        max_seq_length=128, train_batch_size=16, learning_rate=1e-3, num_train_epochs=1.0,
        gradient_accumulation_steps=accumulation, trim_train_batches=trim,
        output_dir=str(out)))
    model = modeling.BertClassifier(config, 2)
    checkpoints.load_checkpoint(model, str(out))
    trained[trim] = [w.numpy() for w in model.weights]
  assert traced and set(traced) == {True}  # the trimmed run's pipeline, only
  lengths = {int(b["input_ids"].shape[1]) for b in input_pipeline.training_dataset(
      [str(tmp_path / "trim_True" / "train.tf_record")],
      run_classifier.decode_fn(128), 8, trim=True).take(8)}
  assert max(lengths) < 128, lengths
  start = modeling.BertClassifier(config, 2)
  checkpoints.load_checkpoint(start, init)
  assert max(np.abs(a - b).max() for a, b in zip(trained[False], start.weights)) > 1e-3
  for untrimmed, trimmed in zip(trained[False], trained[True]):
    np.testing.assert_allclose(trimmed, untrimmed, atol=2e-5)
