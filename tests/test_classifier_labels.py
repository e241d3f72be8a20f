"""run_classifier's multi-label tasks, class weights and long-document windows:
the metrics against scikit-learn, the losses against NumPy, the windows against the
truncated features, two tiny end-to-end runs and the one-line errors."""

import csv
import json
import os
import subprocess
import sys

import numpy as np
import pytest
import tensorflow as tf

import oracle
from conftest import REPO, config_file
from test_run_pretraining import ENV
from bert_keras import checkpoints
from bert_keras import losses
from bert_keras import modeling
from bert_keras import run_classifier
from bert_keras.tasks.classifier import class_weights
from bert_keras.tasks.classifier import doc_windows
from bert_keras.tasks.classifier import multi_label

WORDS = ("the a cat dog sat on mat ran fast slow good bad movie is was not very it he she "
         "what why how who question answer yes no").split()
LABELS = ["animal", "motion", "opinion"]  # cat/dog, ran/fast/slow, good/bad


def _sk():
  return pytest.importorskip("sklearn.metrics")


# ----------------------------------------------------------------------------
# Metrics, thresholds, weights, losses, windows (no model).

def test_multi_label_metrics_equal_sklearn():
  sk = _sk()
  rng = np.random.RandomState(0)
  cases = [(rng.rand(40, 5) < 0.3, rng.rand(40, 5) < 0.3) for _ in range(5)]
  gold = np.zeros([6, 3], bool)
  gold[:, 0] = [1, 0, 1, 0, 0, 1]
  cases.append((gold, np.zeros([6, 3], bool)))  # labels never gold nor predicted: F1 0
  cases.append((gold, gold.copy()))
  for gold, predicted in cases:
    got = multi_label.metrics(gold, predicted)
    with _no_check():
      want = {"eval_micro_f1": sk.f1_score(gold, predicted, average="micro"),
              "eval_macro_f1": sk.f1_score(gold, predicted, average="macro"),
              "eval_subset_accuracy": sk.accuracy_score(gold, predicted),
              "eval_hamming_loss": sk.hamming_loss(gold, predicted)}
    assert got.keys() == want.keys()
    for key in want:
      assert got[key] == pytest.approx(want[key], abs=1e-12), key


class _no_check:
  def __enter__(self):
    import warnings
    self._w = warnings.catch_warnings()
    self._w.__enter__()
    warnings.simplefilter("ignore")

  def __exit__(self, *exc):
    self._w.__exit__(*exc)


def test_tuned_thresholds_maximise_each_labels_f1():
  sk = _sk()
  rng = np.random.RandomState(1)
  gold = rng.rand(50, 4) < 0.3
  gold[:, 3] = False  # no positive: keeps the default
  probabilities = np.clip(gold * 0.3 + rng.rand(50, 4) * 0.7, 0, 1).astype(np.float32)
  thresholds = multi_label.tune_thresholds(probabilities, gold, 0.5)
  assert thresholds[3] == np.float32(0.5)
  for c in range(3):
    grid = np.r_[np.linspace(0, 1, 1001), probabilities[:, c]].astype(np.float32)
    predicted = probabilities[None, :, c] >= grid[:, None]
    tp = (predicted & gold[None, :, c]).sum(1)
    f1 = 2 * tp / (predicted.sum(1) + gold[:, c].sum())
    chosen = sk.f1_score(gold[:, c], probabilities[:, c] >= thresholds[c])
    assert chosen == pytest.approx(f1.max()) and f1.max() > f1[500]  # (500: 0.5)
    # Away from every probability: a rounding difference at serving time flips no label.
    assert np.abs(probabilities[:, c] - thresholds[c]).min() > 1e-4


def test_balanced_weights_equal_sklearn_and_bad_weights():
  from sklearn.utils.class_weight import compute_class_weight
  y = ["b", "a", "a", "c", "a", "b", "a"]
  np.testing.assert_allclose(
      class_weights.class_weights("balanced", ["a", "b", "c"], y),
      compute_class_weight("balanced", classes=np.array(["a", "b", "c"]), y=np.array(y)))
  assert class_weights.class_weights("b:2.5, a:0.5", ["a", "b", "c"]) == [0.5, 2.5, 1.0]
  for spec, message in [("x:2", "unknown label 'x'"), ("a:0", "must be a positive number"),
                        ("a:-1", "must be a positive number"), ("a:big", "is not a number"),
                        ("a:inf", "must be a positive number"), ("a", "is not label:weight"),
                        ("a:1,a:2", "named twice")]:
    with pytest.raises(ValueError, match=message):
      class_weights.class_weights(spec, ["a", "b", "c"], y)
  with pytest.raises(ValueError, match="label 'd' never occurs"):
    class_weights.class_weights("balanced", ["a", "b", "c", "d"], y)


def _np_log_sigmoid(x):
  return -np.logaddexp(0, -x)


def test_weighted_losses_against_numpy():
  rng = np.random.RandomState(2)
  logits = rng.randn(6, 3).astype(np.float32) * 3
  targets = (rng.rand(6, 3) < 0.4).astype(np.float32)
  weights = np.array([0.5, 2.0, 3.0], np.float32)
  for w in (None, weights):
    got = losses.multi_label_loss(logits, targets, w).numpy()
    pw = np.ones(3) if w is None else w
    want = -(pw * targets * _np_log_sigmoid(logits.astype(np.float64))
             + (1 - targets) * _np_log_sigmoid(-logits.astype(np.float64))).mean(axis=1)
    np.testing.assert_allclose(got, want, rtol=1e-5, atol=1e-6)
  keras_bce = tf.keras.losses.BinaryCrossentropy(from_logits=True, reduction=None)
  np.testing.assert_allclose(losses.multi_label_loss(logits, targets).numpy(),
                             keras_bce(targets, logits).numpy(), rtol=1e-5)
  labels = np.array([0, 2, 1, 1, 0, 2])
  _, per_example, _, _ = run_classifier.classifier_outputs(logits, labels,
                                                           class_weights=weights)
  log_softmax = logits - np.log(np.exp(logits.astype(np.float64)).sum(1, keepdims=True))
  np.testing.assert_allclose(per_example.numpy(),
                             -weights[labels] * log_softmax[np.arange(6), labels], rtol=1e-5)
  task = run_classifier.ClassifierTask(multi_label=True, class_weights=weights)
  np.testing.assert_allclose(task.per_example_loss(logits, {"label_ids": targets}).numpy(),
                             losses.multi_label_loss(logits, targets, weights).numpy())


def test_windows_and_pooling():
  pieces = [f"p{i}" for i in range(23)]
  got = doc_windows.windows(pieces, None, 10, 3)  # 8 pieces a window, starts 0, 3, ..., 15
  assert [w[0] for w in got] == ["p0", "p3", "p6", "p9", "p12", "p15"]
  assert all(len(w) == 8 for w in got) and got[-1][-1] == "p22"
  assert doc_windows.windows(pieces[:8], None, 10, 3) == [pieces[:8]]
  pair = doc_windows.windows(pieces, ["b"] * 4, 10, 2)  # 3 pieces of a beside 4 of b
  assert all(len(w) == 3 for w in pair) and pair[-1][-1] == "p22" and pair[1][0] == "p2"
  with pytest.raises(ValueError, match="dev example dev-3 has a text_b of 7 word pieces"):
    doc_windows.windows(pieces, ["b"] * 7, 10, 2, "dev example dev-3")
  logits = np.arange(12, dtype=np.float32).reshape(6, 2)
  documents = np.array([0, 0, 0, 1, 2, 2])
  np.testing.assert_array_equal(doc_windows.pool(logits, documents, 3, "mean"),
                                [[2, 3], [6, 7], [9, 10]])
  np.testing.assert_array_equal(doc_windows.pool(logits, documents, 3, "max"),
                                [[4, 5], [6, 7], [10, 11]])
  assert doc_windows.first_windows(documents).tolist() == [0, 3, 4]


def test_multi_label_classifier_config_round_trip():
  config = modeling.BertConfig(vocab_size=40, hidden_size=16, num_hidden_layers=1,
                               num_attention_heads=2, intermediate_size=32)
  model = modeling.BertClassifier(config, 3, multi_label=True)
  again = modeling.BertClassifier.from_config(model.get_config())
  assert again.multi_label and again.num_labels == 3
  assert "multi_label" not in modeling.BertClassifier(config, 3).get_config()
  logits = np.array([[0.0, 2.0, -1.0]], np.float32)
  np.testing.assert_allclose(again.probabilities(logits), 1 / (1 + np.exp(-logits)), rtol=1e-6)


# ----------------------------------------------------------------------------
# End to end on a tiny model.

@pytest.fixture(scope="module")
def tiny(tmp_path_factory):
  root = tmp_path_factory.mktemp("tiny")
  tokens = ["[PAD]", "[UNK]", "[CLS]", "[SEP]"] + WORDS
  (root / "vocab.txt").write_text("".join(t + "\n" for t in tokens))
  config = modeling.BertConfig(vocab_size=len(tokens), hidden_size=32, num_hidden_layers=2,
                               num_attention_heads=2, intermediate_size=64,
                               max_position_embeddings=64, type_vocab_size=2)
  (root / "bert_config.json").write_text(config.to_json_string())
  return root, config


def _write(directory, name, rows):
  os.makedirs(directory, exist_ok=True)
  with open(os.path.join(directory, name), "w", encoding="utf-8", newline="") as f:
    f.write("".join("\t".join(r) + "\n" for r in rows))


def _multi_label_rows(rng, n):
  rows = [["sentence", "label"]]
  cues = {"animal": ["cat", "dog"], "motion": ["ran", "fast", "slow"], "opinion": ["good", "bad"]}
  for _ in range(n):
    labels = [name for name in LABELS if rng.rand() < 0.4]
    words = list(rng.choice(["the", "a", "on", "it", "is"], 3))
    for name in labels:
      words += list(rng.choice(cues[name], 2))
    rng.shuffle(words)
    rows.append([" ".join(words), ",".join(labels)])
  return rows


def _options(tiny, data, out, **extra):
  root, _ = tiny
  values = dict(task_name="custom", data_dir=str(data), vocab_file=str(root / "vocab.txt"),
                bert_config_file=str(root / "bert_config.json"), output_dir=str(out),
                do_train=True, do_eval=True, do_predict=True, max_seq_length=16,
                train_batch_size=8, eval_batch_size=4, predict_batch_size=4,
                num_train_epochs=2.0, learning_rate=2e-3)
  values.update(extra)
  return run_classifier.options(**values)


def _read_tsv(path):
  lines = path.read_text().splitlines()
  return lines[0].split("\t"), [line.split("\t") for line in lines[1:]]


def _model_logits(tiny, directory, record_file, seq_length, multi=0):
  """The checkpoint in `directory` run eagerly on every record of record_file."""
  model = modeling.BertClassifier(tiny[1], multi or 2, multi_label=bool(multi))
  checkpoints.load_checkpoint(model, str(directory))
  decode = run_classifier.decode_fn(seq_length, False, multi)
  records = [decode(r) for r in tf.data.TFRecordDataset(str(record_file))]
  inputs = {k: np.stack([r[k].numpy() for r in records])
            for k in ("input_ids", "input_mask", "segment_ids")}
  return model(inputs, training=False).numpy(), records


@pytest.fixture(scope="module")
def multi_label_run(tiny, tmp_path_factory):
  rng = np.random.RandomState(3)
  root = tmp_path_factory.mktemp("multi_label")
  data = root / "data"
  _write(data, "train.tsv", _multi_label_rows(rng, 48))
  dev = _multi_label_rows(rng, 12)
  dev[1][1] = ""  # an example without labels
  _write(data, "dev.tsv", dev)
  _write(data, "test.tsv", [["sentence"]] + [[r[0]] for r in _multi_label_rows(rng, 5)[1:]])
  out = root / "out"
  results = run_classifier.run(_options(tiny, data, out, multi_label=True, tune_threshold=True,
                                        class_weights="balanced", eval_every_steps=3,
                                        num_train_epochs=1.0))
  return data, out, results, dev


def test_multi_label_end_to_end(tiny, multi_label_run):
  """Training with balanced class weights and evaluations during training (best/ by micro
  F1), tuned thresholds, the prediction files: every metric recomputed by scikit-learn from
  eval_predictions.tsv, whose probabilities are the sigmoid of the saved model's logits."""
  sk = _sk()
  data, out, results, dev = multi_label_run
  got = dict(line.split(" = ") for line in (out / "eval_results.txt").read_text().splitlines())
  assert sorted(got) == ["eval_hamming_loss", "eval_loss", "eval_macro_f1", "eval_micro_f1",
                         "eval_subset_accuracy", "global_step", "loss"]
  history = [json.loads(line) for line in (out / "eval_history.jsonl").read_text().splitlines()]
  assert [e["global_step"] for e in history] == [3, 6]
  best = max(history, key=lambda e: e["eval_micro_f1"])  # (the first on ties)
  assert int(got["global_step"]) == best["global_step"] and (out / "best").is_dir()
  # Class weights: sklearn's balanced weights over the label occurrences of train.tsv.
  from sklearn.utils.class_weight import compute_class_weight
  y = [name for row in _read_tsv(data / "train.tsv")[1] for name in row[1].split(",") if name]
  saved = json.loads((out / "class_weights.json").read_text())
  np.testing.assert_allclose([saved[k] for k in LABELS],
                             compute_class_weight("balanced", classes=np.array(LABELS),
                                                  y=np.array(y)), rtol=1e-6)
  # Thresholds tuned on dev, saved, used.
  thresholds = json.loads((out / "thresholds.json").read_text())
  assert thresholds["labels"] == LABELS and thresholds["tuned"]
  assert results["task_options"] == {"multi_label": True, "label_separator": ",",
                                     "thresholds": thresholds["thresholds"]}
  header, rows = _read_tsv(out / "eval_predictions.tsv")
  assert header == ["guid", "prediction", "label"] + LABELS and len(rows) == 12
  probabilities = np.array([[float(x) for x in r[3:]] for r in rows], np.float32)
  logits, records = _model_logits(tiny, out / "best", out / "eval.tf_record", 16, 3)
  np.testing.assert_allclose(probabilities, 1 / (1 + np.exp(-logits)), atol=1e-5)
  gold = np.array([[name in r[2].split(",") for name in LABELS] for r in rows])
  np.testing.assert_array_equal(gold, np.stack([r["label_ids"].numpy() for r in records]) > 0)
  assert rows[0][2] == "" and rows[0][2] == dev[1][1]
  predicted = np.array([[name in r[1].split(",") for name in LABELS] for r in rows])
  np.testing.assert_array_equal(
      predicted, probabilities >= np.array(thresholds["thresholds"], np.float32))
  with _no_check():
    want = {"eval_micro_f1": sk.f1_score(gold, predicted, average="micro"),
            "eval_macro_f1": sk.f1_score(gold, predicted, average="macro"),
            "eval_subset_accuracy": sk.accuracy_score(gold, predicted),
            "eval_hamming_loss": sk.hamming_loss(gold, predicted)}
  for key, value in want.items():
    assert np.float32(got[key]) == np.float32(value), key
  header, rows = _read_tsv(out / "test_predictions.tsv")
  assert header == ["guid", "prediction"] + LABELS and len(rows) == 5
  test_probabilities = np.loadtxt(out / "test_results.tsv", ndmin=2)
  np.testing.assert_allclose(test_probabilities, [[float(x) for x in r[2:]] for r in rows])
  # A later --do_predict run reads the tuned thresholds back.
  again = run_classifier.run(_options(tiny, data, out, multi_label=True, do_train=False,
                                      do_eval=False))
  assert again["task_options"]["thresholds"] == thresholds["thresholds"]


def test_windows_end_to_end(tiny, tmp_path):
  """--doc_stride: long documents become windows (each with the document's label), the
  prediction files hold one row per document whose logits are the mean of its windows'; a
  document that fits has the features (so the logits) of the truncating run."""
  rng = np.random.RandomState(4)
  data = tmp_path / "data"

  def rows(n):
    out = [["sentence", "label"]]
    for i in range(n):
      length = int(rng.choice([5, 12, 30]))
      words = rng.choice(["cat", "dog", "good"] if i % 2 else ["ran", "bad", "slow"], length)
      out.append([" ".join(words), str(i % 2)])
    return out

  for name, n in (("train.tsv", 24), ("dev.tsv", 10), ("test.tsv", 6)):
    _write(data, name, rows(n))
  out = tmp_path / "out"
  run_classifier.run(_options(tiny, data, out, doc_stride=5, num_train_epochs=1.0))
  dev_rows = _read_tsv(data / "dev.tsv")[1]
  header, predictions = _read_tsv(out / "eval_predictions.tsv")
  assert len(predictions) == len(dev_rows) == 10
  logits, records = _model_logits(tiny, out, out / "eval.tf_record", 16)
  lengths = [len(r[0].split()) for r in dev_rows]
  counts = [1 if n <= 14 else len(doc_windows.windows([0] * n, None, 16, 5)) for n in lengths]
  assert len(records) == sum(counts) > len(dev_rows)
  documents = np.repeat(np.arange(10), counts)
  mean = doc_windows.pool(logits, documents, 10, "mean")
  softmax = np.exp(mean) / np.exp(mean).sum(1, keepdims=True)
  np.testing.assert_allclose([[float(x) for x in r[3:]] for r in predictions], softmax,
                             atol=1e-5)
  # Every window of a document carries its label.
  labels = np.array([r["label_ids"].numpy() for r in records])
  np.testing.assert_array_equal(labels, np.repeat([int(r[1]) for r in dev_rows], counts))
  # A document that fits: the same features as without windows.
  tokenizer = run_classifier.tokenization.FullTokenizer(str(tiny[0] / "vocab.txt"))
  examples = run_classifier.CustomProcessor(str(data)).get_dev_examples(str(data))
  for i, example in enumerate(examples):
    if counts[i] == 1:
      plain = run_classifier.convert_single_example(9, example, ["0", "1"], 16, tokenizer)
      window = records[int(np.flatnonzero(documents == i)[0])]
      for key in ("input_ids", "input_mask", "segment_ids"):
        assert window[key].numpy().tolist() == getattr(plain, key)
  # predict.py on the output_dir windows the same way (task.json's doc_stride): one answer
  # per document with eval_predictions.tsv's probabilities.
  from bert_keras import predict
  (tmp_path / "dev.jsonl").write_text("".join(json.dumps({"sentence": r[0]}) + "\n"
                                              for r in dev_rows))
  predict.run(predict.options(model_dir=str(out), input_file=str(tmp_path / "dev.jsonl"),
                              output_file=str(tmp_path / "dev.out.jsonl"), batch_size=3))
  answers = [json.loads(line) for line in (tmp_path / "dev.out.jsonl").read_text().splitlines()]
  np.testing.assert_allclose([[a["probabilities"][k] for k in ("0", "1")] for a in answers],
                             softmax, atol=1e-5)
  assert [a["label"] for a in answers] == [r[1] for r in predictions]


def test_bad_input_is_one_line_before_anything_is_built(tiny, tmp_path):
  data = tmp_path / "data"
  _write(data, "train.tsv", [["sentence", "label"], ["a cat", "x,y"], ["a dog", ""]])
  _write(data, "dev.tsv", [["sentence", "label"], ["a cat", "x"], ["the dog", "x,z"]])
  out = tmp_path / "out"

  def error(**overrides):
    with pytest.raises(ValueError) as info:
      run_classifier.run(_options(tiny, data, out, **{"do_predict": False, **overrides}))
    assert not out.exists()
    return str(info.value)

  assert error(multi_label=True, task_name="MRPC") == (
      "--multi_label is only for --task_name=custom (not MRPC)")
  assert error(multi_label=True) == (
      f"--data_dir: {data / 'dev.tsv'}, line 3: label 'z' is not one of the labels (x, y)")
  assert error(multi_label=True, labels="x,z").startswith(
      f"--data_dir: {data / 'train.tsv'}, line 2: label 'y' is not one of the labels")
  assert error(doc_stride=14) == (
      "--doc_stride=14: must be smaller than --max_seq_length minus the special tokens "
      "(16 - 2 = 14), or windows would skip word pieces")
  assert "unknown label 'q'" in error(multi_label=True, labels="x,y,z", class_weights="q:2")
  assert "weight of 'x' must be a positive number" in error(
      multi_label=True, labels="x,y,z", class_weights="x:0")
  assert error(tune_threshold=True) == (
      "--tune_threshold is for --multi_label (per-label thresholds)")
  assert error(class_weights="balanced", task_name="sts-b").startswith(
      "--class_weights: not for a regression task")
  # Flags that do nothing without another.
  assert error(threshold=0.7) == (
      "--threshold=0.7 needs --multi_label (a multi-label task's threshold; a single-label task "
      "predicts its argmax)")
  assert error(label_separator="|") == (
      "--label_separator=| needs --multi_label (it splits a multi-label cell)")
  assert error(window_pooling="max") == (
      "--window_pooling=max needs --doc_stride (it pools the windows of a long text)")
  # Given at their defaults, they are given all the same (not silently ignored).
  assert error(threshold=0.5).startswith("--threshold=0.5 needs --multi_label (")
  assert error(label_separator=",").startswith("--label_separator=, needs --multi_label (")
  assert error(window_pooling="mean").startswith("--window_pooling=mean needs --doc_stride (")


def test_a_flag_given_on_the_command_line_at_its_default(tiny, tmp_path):
  """run_classifier's command line (absl flags parsed, run(FLAGS) as main runs it):
  --threshold=0.5 without --multi_label and --window_pooling=mean without --doc_stride are
  refused as other values are, before anything is read or written."""
  from absl import flags
  root, _ = tiny
  data = tmp_path / "data"
  _write(data, "train.tsv", [["sentence", "label"], ["a cat", "x"]])
  out = tmp_path / "out"
  for flag, message in (("--threshold=0.5", "--threshold=0.5 needs --multi_label ("),
                        ("--window_pooling=mean", "--window_pooling=mean needs --doc_stride (")):
    fv = flags.FlagValues()
    run_classifier.define_flags(fv=fv)
    fv(["run_classifier.py", "--task_name=custom", f"--data_dir={data}", "--do_train",
        f"--vocab_file={root / 'vocab.txt'}", f"--bert_config_file={root / 'bert_config.json'}",
        "--max_seq_length=16", f"--output_dir={out}", flag])
    with pytest.raises(ValueError) as info:
      run_classifier.run(fv)
    assert str(info.value).startswith(message)
    assert not out.exists()


def test_a_label_separator_that_splits_no_cell(tiny, tmp_path, caplog):
  """--multi_label whose --label_separator is in no train.tsv cell: every combination of
  labels would be a label. A label holding another usual separator: refused, naming both
  flags; else a warning."""
  data = tmp_path / "data"
  _write(data, "train.tsv", [["sentence", "label"], ["a cat", "x|y"], ["a dog", "x"],
                             ["the dog", "y"]])
  out = tmp_path / "out"
  with pytest.raises(ValueError) as info:
    run_classifier.run(_options(tiny, data, out, multi_label=True, do_eval=False,
                                do_predict=False))
  assert str(info.value) == (
      f"--data_dir: {data / 'train.tsv'}: its label column: no cell holds two labels joined "
      "by --label_separator=',', and the label 'x|y' holds '|': with --multi_label every "
      "combination would be a label of its own (give --label_separator='|')")
  assert not out.exists()
  _write(data, "train.tsv", [["sentence", "label"], ["a cat", "x"], ["a dog", "y"]])
  processor = run_classifier.get_processor(_options(tiny, data, out, multi_label=True))
  assert processor.get_labels() == ["x", "y"]
  assert "no cell holds two labels joined by --label_separator=','" in caplog.text


def test_multi_label_export(tiny, multi_label_run, tmp_path):
  """export_saved_model --multi_label on the run's best/: the thresholds of thresholds.json,
  sigmoid probabilities and the predicted labels as eval_predictions.tsv has them."""
  from bert_keras import export_saved_model
  data, out, _, dev = multi_label_run
  root, _ = tiny
  export_dir = tmp_path / "export"
  export_saved_model.run(export_saved_model.options(
      bert_config_file=str(root / "bert_config.json"), vocab_file=str(root / "vocab.txt"),
      init_checkpoint=str(out / "best"), max_seq_length=16, export_dir=str(export_dir),
      multi_label=True))
  loaded = tf.saved_model.load(str(export_dir))
  texts = [r[0] for r in dev[1:]]
  got = loaded.signatures["serving_default"](text_a=tf.constant(texts),
                                             text_b=tf.constant([""] * len(texts)))
  _, rows = _read_tsv(out / "eval_predictions.tsv")
  np.testing.assert_allclose(got["probabilities"].numpy(),
                             [[float(x) for x in r[3:]] for r in rows], atol=1e-5)
  assert [x.decode() for x in got["labels"].numpy()] == [r[1] for r in rows]
  with pytest.raises(ValueError, match="--multi_label / --threshold are for --task=classifier"):
    export_saved_model.run(export_saved_model.options(
        bert_config_file=str(root / "bert_config.json"), vocab_file=str(root / "vocab.txt"),
        init_checkpoint=str(out), export_dir=str(tmp_path / "x"), task="squad",
        multi_label=True))


def test_text_b_without_room_for_windows(tiny, tmp_path):
  pair = tmp_path / "pair"
  _write(pair, "train.tsv", [["sentence1", "sentence2", "label"], ["b", "c", "1"],
                             ["a", "the cat sat on the mat the dog ran fast slow good bad", "0"]])
  out = tmp_path / "out"
  with pytest.raises(ValueError) as info:
    run_classifier.run(_options(tiny, pair, out, do_eval=False, do_predict=False,
                                doc_stride=4))
  assert str(info.value) == (
      "--doc_stride: train example train-2 has a text_b of 13 word pieces, which leaves no "
      "room for text_a in --max_seq_length=16")
  assert not out.exists()


def test_predict_on_the_multi_label_output_dir(multi_label_run, tmp_path):
  """predict.py on the run's output_dir (its best/ checkpoint): task.json says multi-label,
  the tuned thresholds of thresholds.json apply, and each dev text gets the labels and
  probabilities of eval_predictions.tsv."""
  from bert_keras import predict
  data, out, _, dev = multi_label_run
  assert json.loads((out / "task.json").read_text())["multi_label"] is True
  (tmp_path / "dev.jsonl").write_text("".join(json.dumps({"sentence": r[0]}) + "\n"
                                              for r in dev[1:]))
  predict.run(predict.options(model_dir=str(out / "best"), input_file=str(tmp_path / "dev.jsonl"),
                              output_file=str(tmp_path / "out.jsonl")))
  got = [json.loads(line) for line in (tmp_path / "out.jsonl").read_text().splitlines()]
  _, rows = _read_tsv(out / "eval_predictions.tsv")
  assert len(got) == len(rows) == 12
  for row, answer in zip(rows, got):
    assert answer["labels"] == [name for name in row[1].split(",") if name]
    np.testing.assert_allclose([answer["probabilities"][name] for name in LABELS],
                               [float(x) for x in row[3:]], atol=1e-5)


def test_tsv_field_over_the_csv_limit_is_read(tmp_path):
  text = "word " * 60000                                   # 300,000 characters
  path = tmp_path / "train.tsv"
  path.write_text(f"sentence\tlabel\n{text}\t1\nshort\t0\n", encoding="utf-8")
  rows = run_classifier.DataProcessor._read_tsv(str(path))
  assert [len(row[0]) for row in rows] == [len("sentence"), len(text), len("short")]
  assert rows[1] == [text, "1"]
  # The original fails on this file (csv's default limit, 131,072 characters a field); a file
  # within the limit reads the same rows in both.
  original = oracle.original("run_classifier")
  raised = csv.field_size_limit(131072)
  try:
    with pytest.raises(csv.Error, match="field larger than field limit"):
      original.DataProcessor._read_tsv(str(path))
  finally:
    csv.field_size_limit(raised)
  small = tmp_path / "small.tsv"
  small.write_text(f"sentence\tlabel\n{'word ' * 20000}\t1\n", encoding="utf-8")
  assert original.DataProcessor._read_tsv(str(small)) == run_classifier.DataProcessor._read_tsv(
      str(small))


def _custom(tmp_path, train, labels=None):
  data_dir = tmp_path / "custom"
  data_dir.mkdir(exist_ok=True)
  (data_dir / "train.tsv").write_text(train, encoding="utf-8")
  return run_classifier.CustomProcessor(str(data_dir), labels=labels), data_dir / "train.tsv"


@pytest.mark.parametrize("train, expected", [
    ("sentence\tlabel\na b\tx\nc\ty\textra\n", "line 3: 3 tab-separated fields, the header has 2"),
    ("sentence\tlabel\na b\tx\nc\t\n", "line 3: empty label (column label)"),
    ("sentence\tlabel\na b\tx\nc\t  \n", "line 3: empty label (column label)"),
    ("sentence\tlabel\na b\tx\nc\tx\n", "its label column holds 1 distinct label ('x'); a "
     "classifier needs at least two"),
])
def test_custom_task_labels_that_would_train_a_wrong_model(tmp_path, train, expected):
  processor, path = _custom(tmp_path, train)
  with pytest.raises(ValueError) as info:
    processor.get_labels()
  assert str(info.value).startswith(f"--data_dir: {path}")
  assert expected in str(info.value)


def test_custom_task_labels_with_spaces_are_stripped_with_a_warning(tmp_path, caplog):
  processor, path = _custom(tmp_path, "sentence\tlabel\na\tx\nb\t y \nc\ty\n")
  assert processor.get_labels() == ["x", "y"]
  assert f"{path}: 1 label with surrounding spaces stripped (line 3)" in caplog.text
  # test.tsv: an empty label is an unlabelled row (the dummy label).
  (path.parent / "test.tsv").write_text("sentence\tlabel\nd\t\n")
  assert [e.label for e in processor.get_test_examples(str(path.parent))] == ["x"]


def test_custom_task_needs_two_labels_from_the_flag():
  with pytest.raises(ValueError, match="--labels=only: a classifier needs at least two"):
    run_classifier.get_processor(run_classifier.options(task_name="custom", labels="only",
                                                        data_dir="x"))


@pytest.mark.slow
def test_command_line_custom_task_with_one_label(tmp_path):
  vocab = tmp_path / "vocab.txt"
  vocab.write_text("[PAD]\n[UNK]\n[CLS]\n[SEP]\nthe\n")
  config = config_file(tmp_path, "config.json")
  data_dir = tmp_path / "custom"
  data_dir.mkdir()
  (data_dir / "train.tsv").write_text("sentence\tlabel\nthe\tyes\nthe the\tyes\n")
  proc = subprocess.run(
      [sys.executable, str(REPO / "run_classifier.py"), "--task_name=custom", "--do_train",
       f"--data_dir={data_dir}", f"--vocab_file={vocab}", f"--bert_config_file={config}",
       "--max_seq_length=16", f"--output_dir={tmp_path / 'out'}"],
      env=ENV, capture_output=True, text=True, timeout=300)
  assert proc.returncode == 1
  assert proc.stderr.strip().splitlines()[-1] == (
      f"error: --data_dir: {data_dir / 'train.tsv'}: its label column holds 1 distinct label "
      "('yes'); a classifier needs at least two (give --labels to name the others)")
  assert "Traceback" not in proc.stderr
  assert not (tmp_path / "out").exists()
