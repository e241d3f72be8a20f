"""A diverged run (training.Trainer's one loop, shared by every run_* script): it stops at the
first non-finite loss, or before a checkpoint of non-finite weights, with one `error:` line
naming the step; the checkpoints before it stay, none of the diverged weights is written;
evaluation during training never keeps a non-finite model as best/; absurd --class_weights
are refused."""

import re

import keras
import numpy as np
import pytest
import tensorflow as tf

from bert_keras import modeling
from bert_keras import optimization
from bert_keras import run_classifier
from bert_keras import run_ner
from bert_keras.runtime import settings
from bert_keras.runtime import distribution
from bert_keras.runtime import training
from bert_keras.runtime import training_checkpoints
from bert_keras.tasks.classifier import class_weights
from bert_keras.utils import errors

WORDS = "the a cat dog sat on mat ran fast slow good bad".split()


@pytest.fixture(scope="module")
def tiny(tmp_path_factory):
  """A tiny config, its vocab and a two-label train.tsv / dev.tsv (64 / 8 rows)."""
  root = tmp_path_factory.mktemp("tiny")
  tokens = ["[PAD]", "[UNK]", "[CLS]", "[SEP]"] + WORDS
  (root / "vocab.txt").write_text("".join(t + "\n" for t in tokens))
  config = modeling.BertConfig(vocab_size=len(tokens), hidden_size=32, num_hidden_layers=2,
                               num_attention_heads=2, intermediate_size=64,
                               max_position_embeddings=32)
  (root / "bert_config.json").write_text(config.to_json_string())
  rng = np.random.RandomState(0)
  for name, n in (("train.tsv", 64), ("dev.tsv", 8)):
    (root / name).write_text("sentence\tlabel\n" + "".join(
        " ".join(rng.choice(WORDS, 5)) + "\t" + rng.choice(["x", "y"]) + "\n" for _ in range(n)))
  return root


def _classifier(tiny, out, **overrides):
  return run_classifier.options(**{**dict(
      task_name="custom", data_dir=str(tiny), vocab_file=str(tiny / "vocab.txt"),
      bert_config_file=str(tiny / "bert_config.json"), output_dir=str(out), do_train=True,
      do_eval=True, max_seq_length=12, train_batch_size=8, eval_batch_size=8,
      num_train_epochs=2.0, learning_rate=1e-3, warmup_proportion=0.0,
      save_checkpoints_steps=2, log_every_steps=1), **overrides})


def _error_line(run, options):
  """The `error:` line (SystemExit's code, exit status 1) of run(options) as main shows it."""
  with pytest.raises(SystemExit) as info:
    with errors.one_line_errors():
      run(options)
  return str(info.value.code)


def _checkpoint_steps(out):
  return sorted(int(p.name[len("model.ckpt-"):-len(".index")]) for p in out.iterdir()
                if p.name.startswith("model.ckpt-") and p.name.endswith(".index"))


def _all_finite(prefix):
  reader = tf.train.load_checkpoint(prefix)
  dtypes = reader.get_variable_to_dtype_map()
  return all(np.isfinite(reader.get_tensor(name)).all() for name, dtype in dtypes.items()
             if dtype.is_floating)


def test_run_classifier_diverged_learning_rate_stops_at_the_step(tiny, tmp_path):
  out = tmp_path / "out"
  line = _error_line(run_classifier.run, _classifier(tiny, out, learning_rate=1e6,
                                                     eval_every_steps=2))
  assert "\n" not in line
  found = re.match(r"error: training diverged at step (\d+): its loss is nan\. Its weights were "
                   r"not saved \(the last checkpoint, model\.ckpt-(\d+) in (.*), is kept\)\. "
                   r"Try a lower --learning_rate \(now 1e\+06\), rerunning with "
                   r"--overwrite_output_dir or another --output_dir\.$", line)
  assert found, line
  step, kept = int(found.group(1)), int(found.group(2))
  assert found.group(3) == str(out) and 2 <= kept < step < 16
  # Every checkpoint is from before the divergence, the newest is the one named, all finite.
  steps = _checkpoint_steps(out)
  assert steps and max(steps) == kept and all(s < step for s in steps)
  assert training_checkpoints.latest_checkpoint(str(out)) == str(out / f"model.ckpt-{kept}")
  assert all(_all_finite(str(out / f"model.ckpt-{s}")) for s in steps)
  assert not [p for p in out.iterdir() if ".tmp" in p.name]
  assert not (out / "eval_results.txt").exists()
  # The evaluations during training were of finite models only; best/ is one of them.
  history = training.read_eval_history(str(out))
  assert history and all(e["global_step"] < step and np.isfinite(e["eval_loss"])
                         for e in history)
  assert training.best_metric(str(out), "eval_accuracy") is not None


def test_run_classifier_trains_as_before_at_a_sane_learning_rate(tiny, tmp_path):
  """The same run at --learning_rate=1e-3: no error, the last checkpoint at the last step."""
  out = tmp_path / "out"
  results = run_classifier.run(_classifier(tiny, out, do_eval=False))
  assert _checkpoint_steps(out)[-1] == 16 and _all_finite(str(out / "model.ckpt-16"))
  assert results is not None


def test_class_weights_over_the_bound_are_refused(tiny, tmp_path):
  labels = ["x", "y"]
  assert class_weights.class_weights(f"x:{class_weights.MAX_WEIGHT:g}", labels) == [1e6, 1.0]
  for spec in ("x:1e30", "y:1000001"):
    with pytest.raises(ValueError, match=r"^--class_weights=.*is over 1e\+06 \(so large a "):
      class_weights.class_weights(spec, labels)
  out = tmp_path / "out"
  line = _error_line(run_classifier.run, _classifier(tiny, out, class_weights="x:1e30"))
  assert line.startswith("error: --class_weights=x:1e30: the weight of 'x', 1e30, is over 1e+06")
  assert not _checkpoint_steps(out) if out.exists() else True


def test_the_hint_names_the_runs_flags(tiny, tmp_path):
  hint = training.diverged_hint(settings.RunSettings.from_flags(_classifier(
      tiny, tmp_path, class_weights="x:1e5", dtype="float16")).training)
  assert hint == ("Try a lower --learning_rate (now 0.001), smaller --class_weights (now "
                  "x:1e5) or --dtype=float32 or bfloat16, rerunning with --overwrite_output_dir "
                  "or another --output_dir.")


def test_run_ner_diverges_through_the_same_loop(tmp_path):
  data = tmp_path / "data"
  data.mkdir()
  rng = np.random.RandomState(1)
  words = {"B-PER": ["john", "mary"], "O": ["lives", "in", "the", "city"]}
  text = ""
  for _ in range(40):
    text += "".join(f"{w} NN {t}\n" for t, w in
                    ((t, rng.choice(words[t])) for t in rng.choice(list(words), 5))) + "\n"
  (data / "train.txt").write_text(text)
  (data / "dev.txt").write_text(text)
  tokens = ["[PAD]", "[UNK]", "[CLS]", "[SEP]"] + [w for ws in words.values() for w in ws]
  (tmp_path / "vocab.txt").write_text("".join(t + "\n" for t in tokens))
  config = modeling.BertConfig(vocab_size=len(tokens), hidden_size=32, num_hidden_layers=2,
                               num_attention_heads=2, intermediate_size=64,
                               max_position_embeddings=32)
  (tmp_path / "bert_config.json").write_text(config.to_json_string())
  out = tmp_path / "out"
  options = run_ner.options(
      data_dir=str(data), vocab_file=str(tmp_path / "vocab.txt"),
      bert_config_file=str(tmp_path / "bert_config.json"), output_dir=str(out),
      do_train=True, max_seq_length=12, train_batch_size=8, learning_rate=1e6,
      warmup_proportion=0.0, num_train_epochs=3.0, save_checkpoints_steps=2, log_every_steps=1)
  line = _error_line(run_ner.run, options)
  found = re.match(r"error: training diverged at step (\d+): its loss is nan\. .*"
                   r"Try a lower --learning_rate \(now 1e\+06\)", line)
  assert found, line
  assert all(s < int(found.group(1)) for s in _checkpoint_steps(out))
  assert all(_all_finite(str(out / f"model.ckpt-{s}")) for s in _checkpoint_steps(out))


# ----------------------------------------------------------------------------
# A planted divergence: a finite loss whose gradient is infinite.

class _SqrtTask(training.Task):
  """loss = mean(sqrt(c + o - stop_gradient(o))) = mean(sqrt(c)): finite, but its gradient
  1 / (2 sqrt(c)) is infinite in a batch where c = 0."""

  def model_inputs(self, batch):
    return batch["x"]

  def denominators(self, batch):
    return {"examples": tf.cast(tf.shape(batch["x"])[0], tf.float32)}

  def loss(self, outputs, batch, denominators):
    loss = tf.reduce_sum(tf.sqrt(batch["c"] + outputs - tf.stop_gradient(outputs)))
    loss /= denominators["examples"]
    return loss, {"loss": loss}


def _planted_run(out, zero_at_step, num_train_steps=4):
  strategy = distribution.build_strategy("one_device", devices=["/cpu:0"])
  with strategy.scope():
    model = keras.Sequential([keras.Input([1]), keras.layers.Dense(1)])
    optimizer = optimization.create_optimizer(1e-3, num_train_steps, 0)
  trainer = training.Trainer(strategy, model, optimizer, _SqrtTask())
  c = np.ones([2 * num_train_steps, 1], np.float32)
  c[2 * (zero_at_step - 1):2 * zero_at_step] = 0.0  # the batch of step zero_at_step

  def dataset(input_context, skip_records):
    return tf.data.Dataset.from_tensor_slices(
        {"x": np.ones_like(c), "c": c}).skip(skip_records).batch(2)

  trainer.train(dataset, num_train_steps=num_train_steps, steps_per_loop=num_train_steps,
                output_dir=str(out), save_checkpoints_steps=2, global_batch_size=2,
                log_every_steps=0)


def test_infinite_gradients_at_a_checkpoint_step_are_not_saved(tmp_path):
  with pytest.raises(training.Diverged) as info:
    _planted_run(tmp_path, zero_at_step=4)
  assert str(info.value) == (
      "training diverged at step 4: its loss was finite but the weights after it are not "
      f"(its gradients overflowed). Its weights were not saved (the last checkpoint, "
      f"model.ckpt-2 in {tmp_path}, is kept). Try a lower learning rate.")
  assert _checkpoint_steps(tmp_path) == [2] and _all_finite(str(tmp_path / "model.ckpt-2"))


def test_infinite_gradients_show_as_the_next_steps_loss(tmp_path):
  with pytest.raises(training.Diverged, match=r"^training diverged at step 2: its loss is nan\. "
                     r"Its weights were not saved \(no checkpoint was written\)\."):
    _planted_run(tmp_path, zero_at_step=1)
  assert _checkpoint_steps(tmp_path) == []


# ----------------------------------------------------------------------------
# Evaluation during training.

def test_eval_hook_refuses_a_non_finite_model(tmp_path):
  saved = []

  def hook(metrics):
    return training.EvalHook(lambda step: metrics, str(tmp_path),
                             save_best=lambda directory: saved.append(directory))

  with pytest.raises(training.Diverged, match=r"^training diverged at step 2: its evaluation "
                     r"gives eval_accuracy = nan, eval_loss = nan \(the model's outputs "
                     r"overflow\); it is not kept as best/\.$"):
    hook({"eval_accuracy": np.float32("nan"), "eval_loss": np.float32("nan")})(2)
  assert not saved and not (tmp_path / "best").exists()
  # A NaN metric with a finite loss (a correlation of constant predictions) is no best either.
  nan_metric = hook({"eval_accuracy": float("nan"), "eval_loss": 0.5})
  assert not nan_metric(2) and not saved and nan_metric.best_value is None
  assert not (tmp_path / "best").exists()
  hook({"eval_accuracy": 0.25, "eval_loss": 0.5})(4)
  assert len(saved) == 1 and training.best_metric(str(tmp_path), "eval_accuracy") == 0.25
