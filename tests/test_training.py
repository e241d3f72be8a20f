"""inference.py's distributed inference (make_inference_fn, infer_dataset), used by
run_classifier (eval, predict), run_squad (predict) and extract_features; training.py's
device calls and progress lines (the loop itself runs in tests/test_run_pretraining.py)."""

import os
import subprocess
import sys

import pytest


_SCRIPT = """
import numpy as np, tensorflow as tf
cpu = tf.config.list_physical_devices("CPU")[0]
tf.config.set_logical_device_configuration(cpu, [tf.config.LogicalDeviceConfiguration()] * 2)
from bert_keras import modeling
from bert_keras.runtime import distribution, inference
config = modeling.BertConfig(vocab_size=50, hidden_size=16, num_hidden_layers=2,
                             num_attention_heads=2, intermediate_size=24,
                             max_position_embeddings=12)
rng = np.random.RandomState(0)
n, s = 13, 8
data = {"input_ids": rng.randint(0, 50, [n, s]).astype(np.int32),
        "input_mask": (np.arange(s)[None] < rng.randint(2, s + 1, [n, 1])).astype(np.int32),
        "segment_ids": rng.randint(0, 2, [n, s]).astype(np.int32),
        "row": np.arange(n, dtype=np.int32)}
results, weights = {}, None
for name, devices in (("one_device", ["/cpu:0"]), ("mirrored", ["/cpu:0", "/cpu:1"])):
  strategy = distribution.build_strategy(name, devices=devices)
  with strategy.scope():
    model = modeling.BertModel(config)
  if weights is None:
    weights = [rng.normal(0, 0.3, w.shape).astype(np.float32) for w in model.weights]
  model.set_weights(weights)
  def forward(batch):
    out = model(batch, training=False, output_hidden_states=True)
    return {"row": batch["row"], "pooled": out["pooled_output"],
            "layers": [out["encoder_outputs"][0], out["sequence_output"]]}
  infer = inference.make_inference_fn(strategy, forward)
  ds = tf.data.Dataset.from_tensor_slices(data).batch(5)  # 5, 5, 3 rows; 5 is odd
  batches = list(inference.infer_dataset(infer, ds, 5))
  assert [len(b["row"]) for b, _ in batches] == [5, 5, 3]
  outs = [o for _, o in batches]
  results[name] = {"row": np.concatenate([o["row"] for o in outs]),
                   "pooled": np.concatenate([o["pooled"] for o in outs]),
                   "layer0": np.concatenate([o["layers"][0] for o in outs]),
                   "last": np.concatenate([o["layers"][1] for o in outs])}
  print(name, strategy.num_replicas_in_sync, flush=True)
expected = model(data, output_hidden_states=True)  # the last (mirrored) model, all rows
for name, r in results.items():
  assert r["row"].tolist() == list(range(n)), (name, r["row"])
  np.testing.assert_allclose(r["pooled"], expected["pooled_output"], atol=1e-5)
  np.testing.assert_allclose(r["layer0"], expected["encoder_outputs"][0], atol=1e-5)
  np.testing.assert_allclose(r["last"], expected["sequence_output"], atol=1e-5)
print("ok")
"""


@pytest.mark.slow
def test_inference_on_two_replicas_equals_one_device(tmp_path):
  """13 rows in batches of 5 (odd, and a short last batch) on 2 mirrored replicas: every
  row comes back once, in order, with the outputs of a plain call (nested outputs too)."""
  env = dict(os.environ, TF_CPP_MIN_LOG_LEVEL="2", CUDA_VISIBLE_DEVICES="")
  proc = subprocess.run([sys.executable, "-c", _SCRIPT], env=env, capture_output=True,
                        text=True, timeout=300, cwd=str(tmp_path))
  assert proc.returncode == 0, proc.stderr[-3000:]
  assert proc.stdout.split() == ["one_device", "1", "mirrored", "2", "ok"]


def test_device_calls_stop_at_log_and_checkpoint_boundaries():
  """At most iterations_per_loop steps a call, cut at every multiple of log_every_steps and
  save_checkpoints_steps (0: none) and at num_train_steps."""
  from bert_keras.runtime import training

  def call_ends(step, total, per_loop, log_every, save_every):
    ends = []
    while step < total:
      step += training.steps_to_run(step, total, per_loop, log_every, save_every)
      ends.append(step)
    return ends

  # A 343-step MRPC run with the defaults: a line every 100 steps, not one at the end only.
  assert call_ends(0, 343, 1000, 100, 1000) == [100, 200, 300, 343]
  assert call_ends(0, 343, 1000, 0, 1000) == [343]
  assert call_ends(250, 700, 1000, 100, 300) == [300, 400, 500, 600, 700]
  assert call_ends(0, 10, 4, 0, 0) == [4, 8, 10]


def test_progress_line():
  from bert_keras.runtime import training
  progress = training.Progress(0, 343)
  line = progress.line(100, {"loss": 0.5, "learning_rate": 2e-5, "sequences_per_sec": 45.0})
  assert line.startswith("step = 100, loss = 0.50000, learning_rate = 2e-05, examples/s = 45.0, "
                         "ETA "), line
  assert line.endswith(" (100 of 343 steps)"), line
  progress = training.Progress(0, 8, "sequences")
  line = progress.line(8, {"loss": 1.25, "masked_lm_accuracy": 0.125, "learning_rate": 1e-3,
                           "sequences_per_sec": 12.5, "mfu": 0.0123})
  assert line == ("step = 8, loss = 1.25000, masked_lm_accuracy = 0.1250, learning_rate = 0.001, "
                  "sequences/s = 12.5, mfu = 1.23%, ETA 0:00:00 (8 of 8 steps)"), line


@pytest.mark.parametrize("task_name, use_xla, skips", [
    ("tagger", False, True), ("classifier", False, True), ("tagger", True, False),
    ("squad", False, False)])
def test_build_trainer_skips_the_padding_where_nothing_reads_it(task_name, use_xla, skips):
  """Tagging and classification train on the real tokens only (BertModel.skip_padding);
  SQuAD's loss reads every position, and XLA needs static shapes: not there."""
  import tensorflow as tf
  from bert_keras import modeling, run_classifier, run_ner, run_squad
  from bert_keras.runtime import settings, training
  from bert_keras.tasks.ner import tagging as ner
  config = modeling.BertConfig(vocab_size=30, hidden_size=16, num_hidden_layers=1,
                               num_attention_heads=2, intermediate_size=20)
  make, task = {
      "tagger": (lambda: modeling.BertTokenClassifier(config, 3), ner.TaggerTask()),
      "classifier": (lambda: modeling.BertClassifier(config, 2),
                     run_classifier.ClassifierTask()),
      "squad": (lambda: modeling.BertSquad(config), run_squad.SquadTask())}[task_name]
  options = run_ner.options(use_xla=use_xla)
  trainer = training.build_trainer(settings.RunSettings.from_flags(options).training,
                                   tf.distribute.get_strategy(), make, task, 10, 1)
  assert trainer.model.bert.skip_padding is skips
