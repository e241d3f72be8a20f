"""Evaluation during training (run_classifier --eval_every_steps, training.EvalHook): the
history, the best model in output_dir/best (a TF1 checkpoint re-evaluated here with NumPy),
early stopping, resuming; and trimmed eval/predict batches (inference.trim_batch), whose
logits equal the padded run's.
"""

import json
import os

import numpy as np
import pytest
import tensorflow as tf

from conftest import mrpc_subset, shared_path
from bert_keras import checkpoints
from bert_keras import modeling
from bert_keras import run_classifier
from bert_keras.runtime import inference
from bert_keras.runtime import model_dir
from bert_keras.runtime import training

TINY = dict(vocab_size=30522, hidden_size=32, num_hidden_layers=2, num_attention_heads=2,
            intermediate_size=64, max_position_embeddings=64, type_vocab_size=2)
METRIC = getattr(run_classifier.PROCESSORS["mrpc"], "metric_name", "eval_accuracy")


@pytest.fixture(scope="module")
def glue(tmp_path_factory):
  """Tiny config and an MRPC subset (64 train / 32 dev / 16 test)."""
  root = tmp_path_factory.mktemp("glue")
  mrpc_subset(root)
  (root / "bert_config.json").write_text(modeling.BertConfig(**TINY).to_json_string())
  return root


@pytest.fixture(scope="module")
def vocab():
  return str(shared_path("data", "vocab", "bert-base-uncased-vocab.txt"))


def _options(glue, vocab, out, **overrides):
  return run_classifier.options(**{
      **dict(task_name="MRPC", do_train=True, do_eval=True, data_dir=str(glue / "MRPC"),
             vocab_file=vocab, bert_config_file=str(glue / "bert_config.json"),
             max_seq_length=32, train_batch_size=16, eval_batch_size=8, learning_rate=1e-3,
             num_train_epochs=2.0, output_dir=str(out), log_every_steps=0),
      **overrides})


def _results(path):
  return dict(line.split(" = ") for line in path.read_text().splitlines())


def _history(out):
  return [json.loads(line) for line in (out / "eval_history.jsonl").read_text().splitlines()]


def _numpy_metrics(model, record_file):
  """eval_accuracy and eval_loss of `model` on a classifier TFRecord file, restated in
  NumPy from one plain (untrimmed, unbatched) call."""
  decode = run_classifier.decode_fn(32)
  records = [decode(r) for r in tf.data.TFRecordDataset(str(record_file))]
  inputs = {k: np.array([r[k].numpy() for r in records])
            for k in ("input_ids", "input_mask", "segment_ids")}
  logits = model(inputs, training=False)
  logits = (logits["logits"] if isinstance(logits, dict) else logits).numpy().astype(np.float64)
  labels = np.array([r["label_ids"].numpy() for r in records])
  log_p = logits - np.log(np.exp(logits).sum(1, keepdims=True))
  return {"eval_accuracy": np.mean(logits.argmax(1) == labels),
          "eval_loss": -log_p[np.arange(len(labels)), labels].mean()}


# ----------------------------------------------------------------------------
# The loop's boundaries.

def test_steps_to_run_stops_at_eval_boundaries():
  assert training.steps_to_run(0, 100, 1000, 0, 1000, 7) == 7
  assert training.steps_to_run(7, 100, 1000, 5, 1000, 7) == 3
  assert training.steps_to_run(98, 100, 1000, 0, 1000, 7) == 2
  # 0: no eval boundary, the same calls as before.
  for step in range(0, 100, 3):
    assert (training.steps_to_run(step, 100, 13, 10, 25, 0) ==
            training.steps_to_run(step, 100, 13, 10, 25))


# ----------------------------------------------------------------------------
# End to end.

@pytest.mark.slow
def test_eval_every_steps_history_best_and_resume(glue, vocab, tmp_path, caplog):
  out = tmp_path / "out"
  options = _options(glue, vocab, out, eval_every_steps=3, do_predict=True)
  results = run_classifier.run(options)
  history = _history(out)
  # 64 examples / 16 x 2 epochs = 8 steps: evaluations at 3, 6 and the last step.
  assert [e["global_step"] for e in history] == [3, 6, 8]
  assert all(sorted(e) == sorted(results["eval"]) for e in history)
  assert METRIC in history[0]
  best_entry = max(history, key=lambda e: e[METRIC])  # the first of equals
  best = out / "best"
  best_results = _results(best / "eval_results.txt")
  assert int(best_results["global_step"]) == best_entry["global_step"]
  assert float(best_results[METRIC]) == pytest.approx(best_entry[METRIC], rel=1e-6)
  # --do_eval after training used best/: the same results (at its step).
  assert _results(out / "eval_results.txt") == best_results
  assert "Evaluating/predicting with the best model" in caplog.text
  # best/ is a TF1 checkpoint (the original's names) that BertClassifier loads; its
  # eval_results.txt is what a re-evaluation of it gives.
  names = {name for name, _ in tf.train.list_variables(str(best / "model.ckpt"))}
  assert {"output_weights", "output_bias", "bert/embeddings/word_embeddings"} <= names
  model = modeling.BertClassifier(modeling.BertConfig(**TINY), 2)
  checkpoints.load_checkpoint(model, str(best))
  again = _numpy_metrics(model, out / "eval.tf_record")
  for key, value in again.items():
    np.testing.assert_allclose(float(best_results[key]), value, rtol=1e-5)
  # TensorBoard scalars under eval/; no temporary left.
  assert tf.io.gfile.glob(str(out / "eval" / "events.out.tfevents.*"))
  assert not [p for p in os.listdir(out) if ".tmp" in p or ".old-" in p]
  assert len(results["predict"]) == 16

  # A kill between the last checkpoint and its evaluation: the resumed run makes it.
  (out / "eval_history.jsonl").write_text(
      "".join(json.dumps(e) + "\n" for e in history[:2]))
  run_classifier.run(_options(glue, vocab, out, eval_every_steps=3))
  assert [e["global_step"] for e in _history(out)] == [3, 6, 8]
  assert _history(out)[2] == pytest.approx(history[2])
  # Nothing left to do: the history and best/ stay as they were.
  run_classifier.run(_options(glue, vocab, out, eval_every_steps=3))
  assert [e["global_step"] for e in _history(out)] == [3, 6, 8]
  assert _results(best / "eval_results.txt") == best_results


@pytest.mark.slow
def test_early_stopping(glue, vocab, tmp_path, caplog):
  """A learning rate too small to change any prediction: the metric never improves after
  the first evaluation, so patience 2 stops at step 3 of 8."""
  out = tmp_path / "out"
  options = _options(glue, vocab, out, eval_every_steps=1, early_stopping_patience=2,
                     learning_rate=1e-12)
  run_classifier.run(options)
  assert [e["global_step"] for e in _history(out)] == [1, 2, 3]
  assert "Early stopping at step 3" in caplog.text
  assert tf.train.latest_checkpoint(str(out)).endswith("model.ckpt-3")
  assert _results(out / "best" / "eval_results.txt")["global_step"] == "1"
  # A resumed run does not train on.
  caplog.clear()
  run_classifier.run(options)
  assert "Early stopping already happened" in caplog.text
  assert tf.train.latest_checkpoint(str(out)).endswith("model.ckpt-3")


@pytest.mark.slow
def test_eval_every_steps_zero_leaves_the_output_as_before(glue, vocab, tmp_path):
  """The default: no history, best/ or eval/ directory; the eval results of trimmed batches
  equal the untrimmed (original) ones."""
  outputs = {}
  for trim in (True, False):
    out = tmp_path / f"out_{trim}"
    run_classifier.run(_options(glue, vocab, out, num_train_epochs=0.5, do_predict=True,
                                trim_eval_batches=trim))
    outputs[trim] = out
    files = set(os.listdir(out))
    events = {p for p in files if p.startswith("events.out.tfevents.")}
    assert events and files - events == {
        "checkpoint", "eval.tf_record", "eval_results.txt", "model.ckpt-2.data-00000-of-00001",
        "model.ckpt-2.index", "predict.tf_record", "test_results.tsv", "train.tf_record",
        "eval_predictions.tsv", "test_predictions.tsv", *model_dir.MODEL_FILES}
  a, b = (_results(outputs[t] / "eval_results.txt") for t in (True, False))
  assert a.keys() == b.keys()
  for key in a:
    np.testing.assert_allclose(float(a[key]), float(b[key]), rtol=1e-5)
  pa, pb = (np.loadtxt(outputs[t] / "test_results.tsv") for t in (True, False))
  np.testing.assert_allclose(pa, pb, atol=1e-6)


def test_bad_eval_flags(glue, vocab, tmp_path):
  def error(**overrides):
    with pytest.raises(ValueError) as info:
      run_classifier.run(_options(glue, vocab, tmp_path / "out", **overrides))
    return str(info.value)

  assert "--eval_every_steps=2 needs --do_train and --do_eval" in error(
      eval_every_steps=2, do_eval=False)
  assert error(eval_every_steps=-1) == "--eval_every_steps=-1: must be >= 0"
  assert error(early_stopping_patience=-1) == "--early_stopping_patience=-1: must be >= 0"


# ----------------------------------------------------------------------------
# Trimmed batches.

def test_trim_batch():
  mask = np.array([[1, 1, 1, 0, 0] + [0] * 15, [1] * 9 + [0] * 11])
  arrays = {"input_mask": mask, "input_ids": mask * 7, "label_ids": np.array([0, 1]),
            "extra": np.zeros([2, 20, 3])}
  trimmed, length = inference.trim_batch(arrays)
  assert length == 16
  assert trimmed["input_ids"].shape == (2, 16) and trimmed["extra"].shape == (2, 16, 3)
  assert trimmed["label_ids"].tolist() == [0, 1]
  assert inference.trim_batch(arrays, multiple=32)[1] == 20  # never longer than S
  assert inference.trim_batch({"input_mask": np.zeros([2, 20])})[1] == 8


def test_trimmed_logits_equal_the_padded_ones(tmp_path):
  """Records of random lengths (a batch's longest sequence well under max_seq_length):
  predict_logits with trimmed batches gives the padded run's logits (1e-5), row for row."""
  config = modeling.BertConfig(**{**TINY, "vocab_size": 100})
  model = modeling.BertClassifier(config, 3)
  rng = np.random.RandomState(0)
  path = str(tmp_path / "eval.tf_record")
  seq_length, lengths = 64, rng.randint(3, 30, 21)
  with tf.io.TFRecordWriter(path) as writer:
    for i, n in enumerate(lengths):
      ids = np.zeros(seq_length, np.int64)
      ids[:n] = rng.randint(1, 100, n)
      segments = np.zeros(seq_length, np.int64)
      segments[n // 2:n] = 1
      feature = {"input_ids": ids, "input_mask": (ids > 0).astype(np.int64),
                 "segment_ids": segments, "label_ids": [i % 3], "is_real_example": [1]}
      writer.write(tf.train.Example(features=tf.train.Features(feature={
          k: tf.train.Feature(int64_list=tf.train.Int64List(value=list(v)))
          for k, v in feature.items()})).SerializeToString())
  trimmed = run_classifier.predict_logits(model, path, seq_length, 8, trim=True)
  padded = run_classifier.predict_logits(model, path, seq_length, 8, trim=False)
  assert trimmed[0].shape == (21, 3)
  np.testing.assert_allclose(trimmed[0], padded[0], atol=1e-5)
  assert np.abs(padded[0]).max() > 1e-3
  for a, b in zip(trimmed[1:3], padded[1:3]):
    np.testing.assert_array_equal(a, b)
  assert trimmed[3] == padded[3] == [8, 8, 5]


def test_eval_hook_alone(tmp_path):
  """EvalHook without a model: improvement is strictly greater, patience, best/ replaced and
  recovered after a kill mid-replacement, a re-evaluated step replacing the later entries."""
  values = {2: 0.5, 4: 0.7, 6: 0.6, 8: 0.7}

  def save_best(directory):
    (tmp_path / "saved").write_text(directory)
    open(os.path.join(directory, "weights"), "w").close()

  def make():
    return training.EvalHook(
        lambda s: {"eval_accuracy": np.float32(values[s]), "global_step": np.int64(s)},
        str(tmp_path), patience=2, save_best=save_best)

  hook = make()
  assert [hook(s) for s in (2, 4, 6, 8)] == [False, False, False, True]
  assert _results(tmp_path / "best" / "eval_results.txt") == {
      "eval_accuracy": "0.7", "global_step": "4"}
  assert (tmp_path / "best" / "weights").exists()
  assert ".tmp-" in (tmp_path / "saved").read_text()  # written aside, then renamed
  # A kill between the two renames of a replacement: best/ renamed aside, the new one unused.
  # (file_io.replaced_directory's names: .best.old.tmp-<pid>, .best.tmp-<pid>)
  os.rename(tmp_path / "best", tmp_path / ".best.old.tmp-123")
  (tmp_path / ".best.tmp-7").mkdir()
  again = make()
  assert sorted(p.name for p in tmp_path.iterdir() if p.name.startswith("best")) == ["best"]
  assert not [p for p in tmp_path.iterdir() if p.name.startswith(".best")]
  assert again.best_value == float(np.float32(0.7)) and again.stopped()
  assert again.evaluated(8) and not again.evaluated(5)
  values[6] = 0.9
  assert not again(6)  # a resumed run evaluating step 6 again: the entries from 6 on go
  assert [e["global_step"] for e in _history(tmp_path)] == [2, 4, 6]
  assert _results(tmp_path / "best" / "eval_results.txt")["global_step"] == "6"
  with pytest.raises(ValueError, match="no eval_f1"):
    training.EvalHook(lambda s: {"eval_accuracy": 1.0}, str(tmp_path / "x"),
                      metric_name="eval_f1")(1)
