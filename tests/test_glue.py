"""run_classifier's GLUE tasks beyond the original four: the processors on hand-written files
in the GLUE layouts (../shared/spec/glue_layouts.md), the task registry, --task_name=custom,
the metrics against scikit-learn / SciPy, create_model against the original's, STS-B
regression, and one tiny end-to-end run per kind of task (classification, regression, custom).
"""

import os
import subprocess
import sys
import warnings

import numpy as np
import pytest
import tensorflow as tf

import oracle
from conftest import shared_path
from bert_keras import checkpoints
from bert_keras import modeling
from bert_keras import run_classifier
from bert_keras.tasks.classifier import metrics

REPO = os.path.dirname(os.path.dirname(os.path.abspath(__file__)))
ENV = dict(os.environ, TF_CPP_MIN_LOG_LEVEL="3", CUDA_VISIBLE_DEVICES="")
WORDS = ("the a cat dog sat on mat ran fast slow good bad movie is was not very it he she "
         "what why how who question answer yes no").split()


def _write(directory, name, rows):
  """rows: lists of fields (or strings, written as they are) -> a TSV file."""
  os.makedirs(directory, exist_ok=True)
  text = "".join((r if isinstance(r, str) else "\t".join(r)) + "\n" for r in rows)
  with open(os.path.join(directory, name), "w", encoding="utf-8", newline="") as f:
    f.write(text)


def _tuples(examples):
  return [(e.guid, e.text_a, e.text_b, e.label) for e in examples]


def _processor(name, **flags):
  return run_classifier.get_processor(run_classifier.options(**{"task_name": name,
                                                                "data_dir": "x", **flags}))


# ----------------------------------------------------------------------------
# Processors on hand-written files in the GLUE layouts.

def test_sst2(tmp_path):
  _write(tmp_path, "train.tsv", [["sentence", "label"], ["a good movie ", "1"],
                                 ['it was "bad', "0"]])
  _write(tmp_path, "dev.tsv", [["sentence", "label"], ["very good", "1"]])
  _write(tmp_path, "test.tsv", [["index", "sentence"], ["0", "not bad"], ["1", "slow"]])
  p = _processor("SST-2")
  assert type(p) is run_classifier.Sst2Processor and p.get_labels() == ["0", "1"]
  assert (p.metric_name, p.is_regression) == ("eval_accuracy", False)
  assert _tuples(p.get_train_examples(str(tmp_path))) == [
      ("train-1", "a good movie ", None, "1"), ("train-2", 'it was "bad', None, "0")]
  assert _tuples(p.get_dev_examples(str(tmp_path))) == [("dev-1", "very good", None, "1")]
  assert _tuples(p.get_test_examples(str(tmp_path))) == [
      ("test-0", "not bad", None, "0"), ("test-1", "slow", None, "0")]


def test_qqp_skips_short_rows_with_a_count(tmp_path, caplog):
  header = ["id", "qid1", "qid2", "question1", "question2", "is_duplicate"]
  _write(tmp_path, "train.tsv", [header, ["7", "1", "2", "why?", "how?", "0"],
                                 ["8", "3", "4", "who is it"],  # too few columns
                                 ["9", "5", "6", "what?", "what is?", "1"]])
  _write(tmp_path, "dev.tsv", [header, ["11", "1", "2", "q1", "q2", "1"]])
  _write(tmp_path, "test.tsv", [["id", "question1", "question2"], ["0", "a?", "b?"],
                                ["1", "only one"]])
  p = _processor("qqp")
  assert p.get_labels() == ["0", "1"] and p.metric_name == "eval_f1"
  assert _tuples(p.get_train_examples(str(tmp_path))) == [
      ("train-7", "why?", "how?", "0"), ("train-9", "what?", "what is?", "1")]
  assert "skipped 1 of 3 rows with fewer than 6 tab-separated fields" in caplog.text
  assert str(tmp_path / "train.tsv") in caplog.text
  assert _tuples(p.get_dev_examples(str(tmp_path))) == [("dev-11", "q1", "q2", "1")]
  assert _tuples(p.get_test_examples(str(tmp_path))) == [("test-0", "a?", "b?", "0")]
  assert "skipped 1 of 2 rows with fewer than 3" in caplog.text


@pytest.mark.parametrize("name,labels", [("qnli", ["entailment", "not_entailment"]),
                                         ("rte", ["entailment", "not_entailment"]),
                                         ("WNLI", ["0", "1"])])
def test_index_pair_label_tasks(tmp_path, name, labels):
  """QNLI (index, question, sentence, label), RTE and WNLI (index, sentence1, sentence2,
  label); test: index, text, text."""
  _write(tmp_path, "train.tsv", [["index", "s1", "s2", "label"], ["0", "A b.", "c", labels[1]],
                                 ["1", "d", "e f", labels[0]]])
  _write(tmp_path, "dev.tsv", [["index", "s1", "s2", "label"], ["5", "g", "h", labels[0]]])
  _write(tmp_path, "test.tsv", [["index", "s1", "s2"], ["3", "i", "j"]])
  p = _processor(name)
  assert p.get_labels() == labels and p.metric_name == "eval_accuracy"
  assert _tuples(p.get_train_examples(str(tmp_path))) == [
      ("train-0", "A b.", "c", labels[1]), ("train-1", "d", "e f", labels[0])]
  assert _tuples(p.get_dev_examples(str(tmp_path))) == [("dev-5", "g", "h", labels[0])]
  assert _tuples(p.get_test_examples(str(tmp_path))) == [("test-3", "i", "j", labels[0])]


STSB_HEADER = ["index", "genre", "filename", "year", "old_index", "source1", "source2",
               "sentence1", "sentence2", "score"]


def _stsb_row(index, a, b, score=None):
  return [str(index), "main-news", "f", "2012", "0001", "none", "none", a, b] + (
      [score] if score is not None else [])


def test_stsb_is_regression(tmp_path):
  _write(tmp_path, "train.tsv", [STSB_HEADER, _stsb_row(0, "a cat", "the cat", "4.750"),
                                 _stsb_row(1, "a dog", "it ran", "0.000")])
  _write(tmp_path, "dev.tsv", [STSB_HEADER, _stsb_row(9, "x", "y", "2.5")])
  _write(tmp_path, "test.tsv", [STSB_HEADER[:-1], _stsb_row(4, "p", "q")])
  for name in ("STS-B", "stsb", "sts-b"):
    p = _processor(name)
    assert type(p) is run_classifier.StsbProcessor
  assert p.is_regression and p.get_labels() is None and p.metric_name == "eval_pearson"
  assert _tuples(p.get_train_examples(str(tmp_path))) == [
      ("train-0", "a cat", "the cat", "4.750"), ("train-1", "a dog", "it ran", "0.000")]
  assert _tuples(p.get_dev_examples(str(tmp_path))) == [("dev-9", "x", "y", "2.5")]
  assert _tuples(p.get_test_examples(str(tmp_path))) == [("test-4", "p", "q", "0")]


MNLI_HEADER = ["index", "promptID", "pairID", "genre", "s1_bin", "s2_bin", "s1_parse",
               "s2_parse", "sentence1", "sentence2"]


def test_mnli_mismatched_and_diagnostic(tmp_path):
  _write(tmp_path, "train.tsv", [MNLI_HEADER + ["label1", "gold_label"],
                                 ["0"] + ["p"] * 7 + ["a", "b", "neutral", "neutral"]])
  _write(tmp_path, "dev_mismatched.tsv", [
      MNLI_HEADER + ["label1", "label2", "gold_label"],
      ["3"] + ["p"] * 7 + ["c", "d", "entailment", "neutral", "entailment"]])
  _write(tmp_path, "test_mismatched.tsv", [MNLI_HEADER, ["8"] + ["p"] * 7 + ["e", "f"]])
  _write(tmp_path, "diagnostic.tsv", [["index", "sentence1", "sentence2"], ["0", "g", "h"],
                                      ["1", "i", "j"]])
  p = _processor("MNLI-MM")
  assert p.get_labels() == ["contradiction", "entailment", "neutral"]
  assert _tuples(p.get_train_examples(str(tmp_path))) == [("train-0", "a", "b", "neutral")]
  assert _tuples(p.get_dev_examples(str(tmp_path))) == [
      ("dev_mismatched-3", "c", "d", "entailment")]
  assert _tuples(p.get_test_examples(str(tmp_path))) == [
      ("test_mismatched-8", "e", "f", "contradiction")]
  ax = _processor("AX")
  assert ax.get_labels() == p.get_labels()
  assert _tuples(ax.get_test_examples(str(tmp_path))) == [
      ("test-0", "g", "h", "contradiction"), ("test-1", "i", "j", "contradiction")]
  with pytest.raises(ValueError, match="--task_name=ax: the diagnostic set has no training"):
    ax.get_train_examples(str(tmp_path))
  with pytest.raises(ValueError, match="predict only"):
    ax.get_dev_examples(str(tmp_path))


@pytest.mark.parametrize("task,counts", [("SST-2", (67349, 872, 1821)),
                                         ("WNLI", (635, 71, 146))])
def test_real_glue_files(task, counts):
  """The real SST-2 and WNLI files of ../shared (skipped without them): every row read, the
  labels the task's, test guids = the index column in file order."""
  import csv
  data_dir = str(shared_path("data", "glue", task))
  p = _processor(task)
  splits = [p.get_train_examples(data_dir), p.get_dev_examples(data_dir),
            p.get_test_examples(data_dir)]
  assert tuple(len(x) for x in splits) == counts
  assert {e.label for e in splits[0] + splits[1]} == {"0", "1"}
  with open(os.path.join(data_dir, "test.tsv"), encoding="utf-8", newline="") as f:
    rows = list(csv.reader(f, delimiter="\t", quotechar=None))[1:]
  assert [e.guid for e in splits[2]] == ["test-%s" % r[0] for r in rows]
  assert [e.text_a for e in splits[2]] == [r[1] for r in rows]
  assert all((e.text_b is None) == (task == "SST-2") for x in splits for e in x)


def test_original_tasks_keep_their_metric_and_registry():
  assert {n: (_processor(n).metric_name, _processor(n).is_regression)
          for n in ("cola", "mrpc", "mnli", "xnli")} == {
      "cola": ("eval_matthews_corr", False), "mrpc": ("eval_f1", False),
      "mnli": ("eval_accuracy", False), "xnli": ("eval_accuracy", False)}
  for name, cls in (("Sst2", run_classifier.Sst2Processor), ("QQP", run_classifier.QqpProcessor),
                    ("mnli_mm", run_classifier.MnliMismatchedProcessor),
                    ("diagnostic", run_classifier.DiagnosticProcessor),
                    (" CoLA ", run_classifier.ColaProcessor)):
    assert type(_processor(name)) is cls


def test_unknown_task_and_misplaced_custom_flags():
  with pytest.raises(ValueError) as info:
    _processor("Nope")
  message = str(info.value)
  assert message.startswith("Task not found: nope (known tasks: ax, cola, custom, ")
  for name in ("mnli-mm", "mrpc", "qnli", "qqp", "rte", "sst-2", "sst2", "sts-b", "stsb",
               "wnli", "xnli"):
    assert any(f" {name}{end}" in message for end in ",;)"), name
  assert message.endswith("; also accepted: diagnostic, mnli-mismatched, mnli_mm, sst2, stsb)")
  with pytest.raises(ValueError, match="--label_column is only for --task_name=custom"):
    _processor("rte", label_column="y")
  with pytest.raises(ValueError, match="--labels=a,a: labels must be distinct"):
    _processor("custom", labels="a,a")


# ----------------------------------------------------------------------------
# --task_name=custom.

def test_custom_columns_labels_and_errors(tmp_path):
  d = str(tmp_path)
  _write(d, "train.tsv", [["id", "sentence1", "sentence2", "label"], ["1", "a", "b", "pos"],
                          ["2", "c", "d", "neg"], ["3", "e", "f", "pos"]])
  _write(d, "dev.tsv", [["label", "sentence2", "sentence1"], ["neg", "y", "x"]])
  _write(d, "test.tsv", [["sentence1", "sentence2"], ["t", "u"]])
  p = run_classifier.CustomProcessor(d)
  assert p.get_labels() == ["neg", "pos"]
  assert _tuples(p.get_train_examples(d)) == [("train-1", "a", "b", "pos"),
                                              ("train-2", "c", "d", "neg"),
                                              ("train-3", "e", "f", "pos")]
  # Columns by name, in each file's own header; test.tsv without labels.
  assert _tuples(p.get_dev_examples(d)) == [("dev-1", "x", "y", "neg")]
  assert _tuples(p.get_test_examples(d)) == [("test-1", "t", "u", "neg")]
  # --labels fixes the order; single sentences; other column names.
  p = _processor("custom", data_dir=d, labels="pos,neg", text_b_column="none")
  assert p.get_labels() == ["pos", "neg"]
  assert _tuples(p.get_dev_examples(d)) == [("dev-1", "x", None, "neg")]
  _write(d, "train.tsv", ["\ufeffsentence\ty", "one\t2", "two\t10"])
  p = run_classifier.CustomProcessor(d, label_column="y")
  assert p.get_labels() == ["10", "2"]  # sorted strings
  assert _tuples(p.get_train_examples(d)) == [("train-1", "one", None, "2"),
                                              ("train-2", "two", None, "10")]
  # Errors: a missing column, a short row, no train.tsv for the labels, an empty file.
  with pytest.raises(ValueError) as info:
    run_classifier.CustomProcessor(d).get_labels()
  assert str(info.value) == (f"--label_column=label: {d}/train.tsv has no such column (its "
                             "header: sentence, y)")
  with pytest.raises(ValueError, match="--text_a_column=text: .* has no such column"):
    run_classifier.CustomProcessor(d, text_a_column="text").get_train_examples(d)
  _write(d, "train.tsv", ["sentence\tlabel", "one\t2", "two", "three\t1"])
  with pytest.raises(ValueError) as info:
    run_classifier.CustomProcessor(d).get_train_examples(d)
  assert str(info.value) == (f"--data_dir: {d}/train.tsv, line 3: 1 tab-separated fields, "
                             "the header has 2")
  os.remove(os.path.join(d, "train.tsv"))
  with pytest.raises(ValueError, match="reads its labels from it; or give --labels"):
    run_classifier.CustomProcessor(d).get_labels()
  _write(d, "dev.tsv", [])
  with pytest.raises(ValueError, match="dev.tsv is empty"):
    run_classifier.CustomProcessor(d, labels=["a"]).get_dev_examples(d)


# ----------------------------------------------------------------------------
# Metrics against scikit-learn and SciPy.

def _sk():
  sk = pytest.importorskip("sklearn.metrics")
  stats = pytest.importorskip("scipy.stats")
  return sk, stats


@pytest.mark.slow
def test_metrics_match_sklearn_and_scipy():
  sk, stats = _sk()
  rng = np.random.RandomState(0)
  cases = [([0, 1, 1, 0, 1], [0, 1, 0, 0, 1]), ([1, 1, 1], [0, 0, 0]), ([0, 1], [1, 0]),
           ([1, 0, 1, 1], [1, 0, 1, 1])]
  for _ in range(300):
    n, classes = rng.randint(1, 50), rng.randint(2, 4)
    cases.append((rng.randint(0, classes, n), rng.randint(0, classes, n)))
  with warnings.catch_warnings():
    warnings.simplefilter("ignore")
    for y, p in cases:
      y, p = np.asarray(y), np.asarray(p)
      assert metrics.accuracy(y, p) == pytest.approx(sk.accuracy_score(y, p), abs=1e-12)
      assert metrics.matthews_corr(y, p) == pytest.approx(sk.matthews_corrcoef(y, p), abs=1e-12)
      yb, pb = y % 2, p % 2
      assert metrics.f1(yb, pb) == pytest.approx(sk.f1_score(yb, pb, zero_division=0),
                                                 abs=1e-12)
  for _ in range(300):
    n = rng.randint(2, 60)
    x = rng.randn(n)
    y = np.round(rng.randn(n) * 2) / 2 if rng.rand() < 0.5 else x * rng.randn() + rng.randn(n)
    x = np.round(x, rng.randint(0, 3))  # ties
    if np.ptp(x) == 0 or np.ptp(y) == 0:
      continue
    assert metrics.pearson(x, y) == pytest.approx(stats.pearsonr(x, y)[0], abs=1e-10)
    assert metrics.spearman(x, y) == pytest.approx(stats.spearmanr(x, y)[0], abs=1e-10)
    np.testing.assert_allclose(metrics.average_ranks(x), stats.rankdata(x))


def test_metric_edge_cases():
  """Undefined values are 0.0 (documented in metrics.py): sklearn's for Matthews and F1;
  SciPy gives NaN for a constant vector, we give 0.0."""
  sk, stats = _sk()
  with warnings.catch_warnings():
    warnings.simplefilter("ignore")
    for y, p in (([1, 1, 1], [1, 1, 1]), ([0, 0, 0], [0, 0, 0]), ([0, 1, 0], [1, 1, 1]),
                 ([1, 1], [0, 0])):
      assert metrics.matthews_corr(y, p) == sk.matthews_corrcoef(y, p) == 0.0
      assert metrics.f1(y, p) == sk.f1_score(y, p, zero_division=0)
      assert metrics.accuracy(y, p) == sk.accuracy_score(y, p)
    assert metrics.f1([0, 0], [0, 0]) == 0.0
    assert np.isnan(stats.pearsonr([1.0, 2.0, 3.0], [2.0, 2.0, 2.0])[0])
  assert metrics.pearson([1.0, 2.0, 3.0], [2.0, 2.0, 2.0]) == 0.0
  assert metrics.spearman([1.0, 2.0, 3.0], [2.0, 2.0, 2.0]) == 0.0
  assert metrics.pearson([1.0], [2.0]) == metrics.spearman([], []) == 0.0
  assert metrics.accuracy([], []) == metrics.f1([], []) == metrics.matthews_corr([], []) == 0.0
  assert metrics.pearson([1, 2, 3], [2, 4, 6]) == 1.0
  assert metrics.spearman([1, 2, 3], [30, 20, 10]) == -1.0


def test_eval_metrics_official_keys():
  sk, stats = _sk()
  rng = np.random.RandomState(1)
  logits = rng.randn(21, 2).astype(np.float32)
  labels = rng.randint(0, 2, 21)
  real = np.ones(21, np.int64)
  real[-3:] = 0  # padding: excluded from the weighted metrics
  keep = slice(0, 18)
  predictions = logits.argmax(1)
  for metric_name, oracle_fn, key in (
      ("eval_f1", sk.f1_score, "eval_f1"),
      ("eval_matthews_corr", sk.matthews_corrcoef, "eval_matthews_corr"),
      ("eval_accuracy", None, None)):
    got = run_classifier.eval_metrics(logits, labels, real, [8, 8, 5], 7, metric_name)
    want_keys = ["eval_accuracy", "eval_loss", "global_step", "loss"] + ([key] if key else [])
    assert sorted(got) == sorted(want_keys)
    assert got["eval_accuracy"] == np.float32(np.mean(predictions[keep] == labels[keep]))
    if key:
      assert got[key] == np.float32(oracle_fn(labels[keep], predictions[keep]))
      assert got[key].dtype == np.float32
  # Regression: MSE losses, Pearson / Spearman of the real examples, no eval_accuracy.
  scores = (rng.rand(21) * 5).astype(np.float32)
  got = run_classifier.eval_metrics(logits[:, :1], scores, real, [8, 8, 5], 3,
                                    "eval_pearson", is_regression=True)
  assert sorted(got) == ["eval_loss", "eval_pearson", "eval_spearman", "global_step", "loss"]
  err = (logits[:, 0].astype(np.float64) - scores) ** 2
  np.testing.assert_allclose(got["eval_loss"], err[keep].mean(), rtol=1e-6)
  np.testing.assert_allclose(got["loss"], np.mean([err[:8].mean(), err[8:16].mean(),
                                                   err[16:].mean()]), rtol=1e-6)
  np.testing.assert_allclose(got["eval_pearson"],
                             stats.pearsonr(logits[keep, 0], scores[keep])[0], rtol=1e-5)
  np.testing.assert_allclose(got["eval_spearman"],
                             stats.spearmanr(logits[keep, 0], scores[keep])[0], rtol=1e-5)


# ----------------------------------------------------------------------------
# create_model.

def _tiny_config():
  return modeling.BertConfig(vocab_size=100, hidden_size=32, num_hidden_layers=2,
                             num_attention_heads=2, intermediate_size=64,
                             max_position_embeddings=64, type_vocab_size=2)


def _batch(rng, n=5, length=12):
  ids = rng.randint(1, 100, (n, length)).astype(np.int32)
  mask = np.ones_like(ids)
  mask[1, 7:] = 0
  segments = np.zeros_like(ids)
  segments[:, 6:] = 1
  return ids, mask, segments


def test_create_model_matches_the_original(tmp_path):
  """Same weights (our TF1 checkpoint restored in the original's create_model graph), same
  batch and labels: the four outputs agree."""
  orig = oracle.original("run_classifier")
  original_modeling = oracle.original("modeling")
  config = _tiny_config()
  model = modeling.BertClassifier(config, 3)
  prefix = str(tmp_path / "model.ckpt")
  checkpoints.save_tf1_checkpoint(model, prefix)
  ids, mask, segments = _batch(np.random.RandomState(0))
  labels = np.array([0, 2, 1, 1, 2], np.int32)
  ours = [t.numpy() for t in run_classifier.create_model(
      config, False, ids, mask, segments, labels, 3, model=model)]
  import tensorflow.compat.v1 as tf1
  tf1.disable_v2_tensorshape()  # create_model reads `shape[-1].value` (TF1 Dimension)
  try:
    with tf.Graph().as_default():
      outputs = orig.create_model(
          original_modeling.BertConfig.from_dict(config.to_dict()), False, tf1.constant(ids),
          tf1.constant(mask), tf1.constant(segments), tf1.constant(labels), 3, False)
      with tf1.Session() as sess:
        tf1.train.Saver().restore(sess, prefix)
        theirs = sess.run(list(outputs))
  finally:
    tf1.enable_v2_tensorshape()
  assert [a.shape for a in ours] == [b.shape for b in theirs] == [(), (5,), (5, 3), (5, 3)]
  for a, b in zip(ours, theirs):
    np.testing.assert_allclose(a, b, atol=2e-5)
  assert ours[0] > 0 and all(a.dtype == np.float32 for a in ours)


def test_create_model_formulas_and_regression():
  config = _tiny_config()
  rng = np.random.RandomState(3)
  ids, mask, segments = _batch(rng)
  tf.random.set_seed(0)
  loss, per_example, logits, probabilities = [t.numpy() for t in run_classifier.create_model(
      config, False, ids, mask, segments, np.array([1, 0, 1, 1, 0]), 2)]  # a new model
  logits64 = logits.astype(np.float64)
  log_p = logits64 - np.log(np.exp(logits64).sum(1, keepdims=True))
  np.testing.assert_allclose(per_example, -log_p[np.arange(5), [1, 0, 1, 1, 0]], rtol=1e-5)
  np.testing.assert_allclose(probabilities, np.exp(log_p), rtol=1e-5)
  np.testing.assert_allclose(loss, per_example.mean(), rtol=1e-6)
  # Regression (num_labels 1): squared error, the scores as "probabilities".
  model = modeling.BertClassifier(config, 1)
  scores = np.array([0.5, 4.75, 2.0, 3.0, 0.0], np.float32)
  loss, per_example, logits, predictions = [t.numpy() for t in run_classifier.create_model(
      config, False, ids, mask, segments, scores, 1, model=model)]
  assert logits.shape == (5, 1) and predictions.shape == (5,) and per_example.shape == (5,)
  want = model({"input_ids": ids, "input_mask": mask, "segment_ids": segments},
               training=False)
  np.testing.assert_array_equal(logits, want.numpy())
  np.testing.assert_array_equal(predictions, logits[:, 0])
  np.testing.assert_allclose(per_example, (logits[:, 0] - scores) ** 2, rtol=1e-6)
  np.testing.assert_allclose(loss, per_example.mean(), rtol=1e-6)
  # is_training: dropout on (the pooled output), so the logits change.
  train_logits = run_classifier.create_model(config, True, ids, mask, segments, scores, 1,
                                             model=model)[2].numpy()
  assert not np.allclose(train_logits, logits)
  # The training loss of ClassifierTask is create_model's per_example_loss.
  outputs = model({"input_ids": ids, "input_mask": mask, "segment_ids": segments})
  task = run_classifier.ClassifierTask(is_regression=True)
  np.testing.assert_allclose(task.per_example_loss(outputs, {"label_ids": scores}).numpy(),
                             per_example, rtol=1e-6)


def test_regression_records_are_float(tmp_path):
  vocab = tmp_path / "vocab.txt"
  vocab.write_text("".join(t + "\n" for t in ["[PAD]", "[UNK]", "[CLS]", "[SEP]"] + WORDS))
  from bert_keras import tokenization
  tokenizer = tokenization.FullTokenizer(str(vocab), do_lower_case=True)
  examples = [run_classifier.InputExample("train-0", "the cat", "a dog", "4.750"),
              run_classifier.InputExample("train-1", "the cat", None, "0.2")]
  path = str(tmp_path / "r.tf_record")
  run_classifier.file_based_convert_examples_to_features(examples, None, 8, tokenizer, path)
  raw = [r.numpy() for r in tf.data.TFRecordDataset(path)]
  feature = tf.train.Example.FromString(raw[0]).features.feature
  assert feature["label_ids"].WhichOneof("kind") == "float_list"
  assert feature["input_ids"].WhichOneof("kind") == "int64_list"
  decoded = [run_classifier.decode_fn(8, is_regression=True)(r) for r in raw]
  assert decoded[0]["label_ids"].dtype == tf.float32
  np.testing.assert_allclose([d["label_ids"].numpy() for d in decoded], [4.75, 0.2], rtol=1e-7)
  assert decoded[0]["input_ids"].dtype == tf.int32


# ----------------------------------------------------------------------------
# End to end, tiny model, hand-written data.

@pytest.fixture(scope="module")
def tiny(tmp_path_factory):
  root = tmp_path_factory.mktemp("tiny")
  vocab = root / "vocab.txt"
  tokens = ["[PAD]", "[UNK]", "[CLS]", "[SEP]"] + WORDS
  vocab.write_text("".join(t + "\n" for t in tokens))
  config = modeling.BertConfig(vocab_size=len(tokens), hidden_size=32, num_hidden_layers=2,
                               num_attention_heads=2, intermediate_size=64,
                               max_position_embeddings=32, type_vocab_size=2)
  (root / "bert_config.json").write_text(config.to_json_string())
  return root, config


def _sentence(rng):
  return " ".join(rng.choice(WORDS, rng.randint(2, 7)))


def _run(tiny, task, data_dir, out, **extra):
  root, _ = tiny
  return run_classifier.run(run_classifier.options(
      task_name=task, data_dir=str(data_dir), vocab_file=str(root / "vocab.txt"),
      bert_config_file=str(root / "bert_config.json"), output_dir=str(out), do_train=True,
      do_eval=True, do_predict=True, max_seq_length=16, train_batch_size=8,
      eval_batch_size=4, predict_batch_size=4, num_train_epochs=1.0, learning_rate=1e-3,
      **extra))


def _results(out):
  return dict(line.split(" = ") for line in (out / "eval_results.txt").read_text().splitlines())


def _model_logits(tiny, out, num_labels, split, regression=False, records_dir=None):
  """The saved model's logits on <split>.tf_record and its labels (NumPy float64): the model
  (in records_dir, default out) run eagerly on all records at once, checked against
  run_classifier.predict_logits (the
  run's inference path), whose values are returned (the same float rounding as the run's:
  the correlations of a tiny model's near-constant predictions are sensitive to it)."""
  model = modeling.BertClassifier(tiny[1], num_labels)
  checkpoints.load_checkpoint(model, str(out))
  decode = run_classifier.decode_fn(16, regression)
  record_file = str((records_dir or out) / f"{split}.tf_record")
  records = [decode(r) for r in tf.data.TFRecordDataset(record_file)]
  inputs = {k: np.stack([r[k].numpy() for r in records])
            for k in ("input_ids", "input_mask", "segment_ids")}
  eager = model(inputs, training=False).numpy()
  logits, labels, real, _ = run_classifier.predict_logits(model, record_file, 16, 4,
                                                          is_regression=regression)
  np.testing.assert_allclose(logits, eager, atol=1e-5)
  np.testing.assert_array_equal(labels, [r["label_ids"].numpy() for r in records])
  assert real.all()
  return logits.astype(np.float64), labels


def _check_labelled_predictions(out, labels, got, batch_size=4, metric=None):
  """eval_predictions.tsv alone gives back every figure of eval_results.txt (scikit-learn's
  on its columns), and test_predictions.tsv holds test_results.tsv's probabilities with the
  guid and the argmax label."""
  sk, _ = _sk()
  rows = [line.split("\t") for line in (out / "eval_predictions.tsv").read_text().splitlines()]
  assert rows[0] == ["guid", "prediction", "label"] + labels
  body = rows[1:]
  probabilities = np.array([[float(x) for x in r[3:]] for r in body])
  gold = np.array([labels.index(r[2]) for r in body])
  predicted = np.array([labels.index(r[1]) for r in body])
  np.testing.assert_array_equal(predicted, probabilities.argmax(1))
  assert float(got["eval_accuracy"]) == pytest.approx(sk.accuracy_score(gold, predicted))
  per_example = -np.log(probabilities[np.arange(len(gold)), gold])
  assert float(got["eval_loss"]) == pytest.approx(per_example.mean(), rel=1e-4)
  batches = [per_example[i:i + batch_size].mean() for i in range(0, len(gold), batch_size)]
  assert float(got["loss"]) == pytest.approx(np.mean(batches), rel=1e-4)
  if metric == "eval_f1":
    assert float(got["eval_f1"]) == pytest.approx(sk.f1_score(gold, predicted), abs=1e-6)
  test = [line.split("\t") for line in (out / "test_predictions.tsv").read_text().splitlines()]
  original = [line.split("\t") for line in (out / "test_results.tsv").read_text().splitlines()]
  assert test[0] == ["guid", "prediction"] + labels
  assert [r[2:] for r in test[1:]] == original
  assert [r[1] for r in test[1:]] == [labels[int(np.argmax([float(x) for x in r]))]
                                      for r in original]
  assert len({r[0] for r in test[1:]}) == len(original)  # one guid per example


def test_mrpc_labelled_predictions_recompute_eval_results(tiny, tmp_path):
  rng = np.random.RandomState(3)
  data = tmp_path / "MRPC"
  header = ["Quality", "#1 ID", "#2 ID", "#1 String", "#2 String"]
  for name, n in (("train.tsv", 16), ("dev.tsv", 11)):
    _write(data, name, [header] + [[str(rng.randint(2)), str(i), str(i + 1), _sentence(rng),
                                    _sentence(rng)] for i in range(n)])
  _write(data, "test.tsv", [["index"] + header[1:]] + [
      [str(i), str(i), str(i + 1), _sentence(rng), _sentence(rng)] for i in range(6)])
  out = tmp_path / "out"
  _run(tiny, "MRPC", data, out)
  got = _results(out)
  assert "eval_f1" in got
  _check_labelled_predictions(out, ["0", "1"], got, metric="eval_f1")


@pytest.mark.slow
def test_rte_end_to_end(tiny, tmp_path):
  sk, _ = _sk()
  rng = np.random.RandomState(0)
  labels = ["entailment", "not_entailment"]
  data = tmp_path / "RTE"
  for name, n in (("train.tsv", 32), ("dev.tsv", 10)):
    _write(data, name, [["index", "sentence1", "sentence2", "label"]] + [
        [str(i), _sentence(rng), _sentence(rng), labels[rng.randint(2)]] for i in range(n)])
  _write(data, "test.tsv", [["index", "sentence1", "sentence2"]] + [
      [str(100 + i), _sentence(rng), _sentence(rng)] for i in range(7)])
  out = tmp_path / "out"
  result = _run(tiny, "RTE", data, out)
  got = _results(out)
  assert list(got) == ["eval_accuracy", "eval_loss", "global_step", "loss"]
  assert got["global_step"] == "4"
  logits, label_ids = _model_logits(tiny, out, 2, "eval")
  assert len(label_ids) == 10
  log_p = logits - np.log(np.exp(logits).sum(1, keepdims=True))
  np.testing.assert_allclose(float(got["eval_accuracy"]),
                             sk.accuracy_score(label_ids, logits.argmax(1)), rtol=1e-6)
  np.testing.assert_allclose(float(got["eval_loss"]), -log_p[np.arange(10), label_ids].mean(),
                             rtol=1e-4)
  assert result["eval"]["eval_accuracy"] == np.float32(got["eval_accuracy"])
  rows = [line.split("\t") for line in (out / "test_results.tsv").read_text().splitlines()]
  assert len(rows) == 7 and all(len(r) == 2 for r in rows)
  assert all(p == str(np.float32(p)) for r in rows for p in r)
  test_logits, _ = _model_logits(tiny, out, 2, "predict")
  np.testing.assert_allclose(np.array(rows, np.float64),
                             np.exp(test_logits) / np.exp(test_logits).sum(1, keepdims=True),
                             atol=1e-5)
  _check_labelled_predictions(out, labels, got)


@pytest.mark.slow
def test_stsb_end_to_end(tiny, tmp_path):
  _, stats = _sk()
  rng = np.random.RandomState(1)
  data = tmp_path / "STS-B"
  for name, n in (("train.tsv", 24), ("dev.tsv", 9)):
    _write(data, name, [STSB_HEADER] + [
        _stsb_row(i, _sentence(rng), _sentence(rng), "%.3f" % (rng.rand() * 5))
        for i in range(n)])
  _write(data, "test.tsv", [STSB_HEADER[:-1]] + [
      _stsb_row(i, _sentence(rng), _sentence(rng)) for i in range(5)])
  out = tmp_path / "out"
  result = _run(tiny, "sts-b", data, out)
  got = _results(out)
  assert list(got) == ["eval_loss", "eval_pearson", "eval_spearman", "global_step", "loss"]
  assert got["global_step"] == "3"
  logits, scores = _model_logits(tiny, out, 1, "eval", regression=True)
  want_scores = [float(line.split("\t")[9])
                 for line in (data / "dev.tsv").read_text().splitlines()[1:]]
  np.testing.assert_allclose(scores, want_scores, rtol=1e-6)  # float labels, in file order
  predictions = logits[:, 0]
  np.testing.assert_allclose(float(got["eval_loss"]), np.mean((predictions - scores) ** 2),
                             rtol=1e-4)
  np.testing.assert_allclose(float(got["eval_pearson"]),
                             stats.pearsonr(predictions, scores)[0], rtol=1e-4, atol=1e-6)
  np.testing.assert_allclose(float(got["eval_spearman"]),
                             stats.spearmanr(predictions, scores)[0], rtol=1e-4, atol=1e-6)
  lines = (out / "test_results.tsv").read_text().splitlines()
  assert len(lines) == 5 and all("\t" not in line and line == str(np.float32(line))
                                 for line in lines)
  test_logits, _ = _model_logits(tiny, out, 1, "predict", regression=True)
  np.testing.assert_allclose([float(x) for x in lines], test_logits[:, 0], atol=1e-5)
  rows = [line.split("\t") for line in (out / "eval_predictions.tsv").read_text().splitlines()]
  assert rows[0] == ["guid", "prediction", "label"]
  # Written as str(float32): read back as float32, the run's own values (as float64 the
  # strings are up to half a float32 step away, enough to move the Pearson of near-constant
  # predictions of a 3-step model by 1e-4).
  predicted = np.array([np.float32(r[1]) for r in rows[1:]], np.float64)
  np.testing.assert_allclose(predicted, predictions, atol=1e-5)
  np.testing.assert_allclose([float(r[2]) for r in rows[1:]], scores, rtol=1e-6)
  np.testing.assert_allclose(float(got["eval_pearson"]), stats.pearsonr(predicted, scores)[0],
                             rtol=1e-4, atol=1e-6)
  test = [line.split("\t") for line in (out / "test_predictions.tsv").read_text().splitlines()]
  assert test[0] == ["guid", "prediction"] and [r[1] for r in test[1:]] == lines
  np.testing.assert_allclose(result["predict"], test_logits[:, 0], atol=1e-5)
  # A non-numeric score is a one-line error before training.
  _write(data, "dev.tsv", [STSB_HEADER, _stsb_row(0, "a", "b", "high")])
  with pytest.raises(ValueError, match="dev example dev-0 has label 'high', not a number"):
    _run(tiny, "stsb", data, tmp_path / "out2")
  assert not (tmp_path / "out2").exists()


@pytest.mark.slow
def test_mnli_mismatched_then_diagnostic_end_to_end(tiny, tmp_path):
  """Train on MNLI, evaluate on dev_mismatched (mnli-mm), then predict the diagnostic set
  (ax) from the fine-tuned output_dir: its probabilities are the MNLI model's."""
  rng = np.random.RandomState(3)
  labels = ["contradiction", "entailment", "neutral"]
  data = tmp_path / "MNLI"
  for name, n in (("train.tsv", 16), ("dev_mismatched.tsv", 6)):
    _write(data, name, [MNLI_HEADER + ["gold_label"]] + [
        [str(i)] + ["p"] * 7 + [_sentence(rng), _sentence(rng), labels[rng.randint(3)]]
        for i in range(n)])
  _write(data, "test_mismatched.tsv", [MNLI_HEADER] + [
      [str(i)] + ["p"] * 7 + [_sentence(rng), _sentence(rng)] for i in range(3)])
  _run(tiny, "mnli-mm", data, tmp_path / "mnli")
  assert list(_results(tmp_path / "mnli")) == ["eval_accuracy", "eval_loss", "global_step",
                                               "loss"]
  assert len((tmp_path / "mnli" / "test_results.tsv").read_text().splitlines()) == 3
  ax = tmp_path / "AX"
  _write(ax, "diagnostic.tsv", [["index", "sentence1", "sentence2"]] + [
      [str(i), _sentence(rng), _sentence(rng)] for i in range(6)])
  root, _ = tiny
  result = run_classifier.run(run_classifier.options(
      task_name="AX", data_dir=str(ax), vocab_file=str(root / "vocab.txt"),
      bert_config_file=str(root / "bert_config.json"), output_dir=str(tmp_path / "ax_out"),
      init_checkpoint=str(tmp_path / "mnli"), do_predict=True, max_seq_length=16,
      predict_batch_size=4))
  assert result["eval"] is None and result["predict"].shape == (6, 3)
  rows = [line.split("\t")
          for line in (tmp_path / "ax_out" / "test_results.tsv").read_text().splitlines()]
  assert len(rows) == 6 and all(len(r) == 3 for r in rows)
  logits, _ = _model_logits(tiny, tmp_path / "mnli", 3, "predict",
                            records_dir=tmp_path / "ax_out")
  np.testing.assert_allclose(np.array(rows, np.float64),
                             np.exp(logits) / np.exp(logits).sum(1, keepdims=True), atol=1e-5)
  with pytest.raises(ValueError, match="--task_name=ax: the diagnostic set has no training"):
    run_classifier.run(run_classifier.options(
        task_name="ax", data_dir=str(ax), vocab_file=str(root / "vocab.txt"),
        bert_config_file=str(root / "bert_config.json"), output_dir=str(tmp_path / "ax2"),
        do_train=True, max_seq_length=16))


@pytest.mark.slow
def test_custom_end_to_end_and_command_line(tiny, tmp_path):
  """The README's custom example: a header, text and label columns by name, three labels;
  test.tsv without labels."""
  sk, _ = _sk()
  rng = np.random.RandomState(2)
  data = tmp_path / "custom"
  names = ["question", "answer", "other"]
  _write(data, "train.tsv", [["text", "category"]] + [
      [_sentence(rng), names[i % 3]] for i in range(24)])
  _write(data, "dev.tsv", [["category", "text"]] + [
      [names[rng.randint(3)], _sentence(rng)] for _ in range(6)])
  _write(data, "test.tsv", [["text"]] + [[_sentence(rng)] for _ in range(5)])
  out = tmp_path / "out"
  _run(tiny, "custom", data, out, text_a_column="text", label_column="category")
  got = _results(out)
  assert list(got) == ["eval_accuracy", "eval_loss", "global_step", "loss"]
  logits, label_ids = _model_logits(tiny, out, 3, "eval")
  # Labels: sorted distinct training labels -> ids.
  dev_labels = [line.split("\t")[0] for line in (data / "dev.tsv").read_text().splitlines()[1:]]
  assert list(label_ids) == [sorted(names).index(label) for label in dev_labels]
  np.testing.assert_allclose(float(got["eval_accuracy"]),
                             sk.accuracy_score(label_ids, logits.argmax(1)), rtol=1e-6)
  rows = [line.split("\t") for line in (out / "test_results.tsv").read_text().splitlines()]
  assert len(rows) == 5 and all(len(r) == 3 for r in rows)

  root, _ = tiny
  base = [sys.executable, os.path.join(REPO, "run_classifier.py"), f"--data_dir={data}",
          f"--vocab_file={root / 'vocab.txt'}", f"--bert_config_file={root / 'bert_config.json'}",
          f"--output_dir={tmp_path / 'cli'}", "--do_eval=true", "--max_seq_length=16"]
  # A dev label not seen in training: one line naming it.
  _write(data, "dev.tsv", [["category", "text"], ["question", "a b"], ["statement", "c"]])
  proc = subprocess.run(base + ["--task_name=custom", "--text_a_column=text",
                                "--label_column=category"],
                        env=ENV, capture_output=True, text=True, timeout=120)
  assert proc.returncode == 1 and "Traceback" not in proc.stderr
  assert (f"error: --data_dir {data}: dev example dev-2 has label 'statement', not one of "
          "['answer', 'other', 'question']") in proc.stderr.splitlines()
  proc = subprocess.run(base + ["--task_name=nope"], env=ENV, capture_output=True, text=True,
                        timeout=120)
  assert proc.returncode == 1 and "Traceback" not in proc.stderr
  errors = [line for line in proc.stderr.splitlines() if line.startswith("error:")]
  assert len(errors) == 1 and errors[0].startswith(
      "error: Task not found: nope (known tasks: ax, cola, custom, mnli, mnli-mm")
  assert not (tmp_path / "cli").exists()
