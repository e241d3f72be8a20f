"""run_pretraining.py + training.py: the original's command line, losses, eval file,
and the custom loop's invariants (same weights on 1 device, 2 mirrored replicas and
with gradient accumulation; multi-worker completes and agrees; SIGKILL + restart ends
with the weights of an uninterrupted run).

Tiny model (2 layers, hidden 32, vocab 100, seq 32); TFRecords written here in the
original's feature format (create_pretraining_data's seven features). Subprocesses only
where a fresh TF runtime is needed (logical devices, multi-worker, SIGKILL); they are kept
few (each ~5 s of import).
"""

import json
import os
import pathlib
import signal
import subprocess
import sys

import numpy as np
import pytest
import tensorflow as tf

import oracle
from conftest import run_workers, worker_results
from bert_keras import checkpoints
from bert_keras import losses
from bert_keras import modeling
from bert_keras import run_pretraining
from bert_keras.runtime import distribution
from bert_keras.runtime import input_pipeline
from bert_keras.runtime import outputs
from bert_keras.runtime import training_checkpoints
from bert_keras.utils import errors

REPO = pathlib.Path(__file__).resolve().parent.parent
SEQ, PRED, VOCAB = 32, 5, 100
ENV = dict(os.environ, TF_CPP_MIN_LOG_LEVEL="3", CUDA_VISIBLE_DEVICES="")


def _write_records(path, n, seed):
  rng = np.random.RandomState(seed)

  def ints(values):
    return tf.train.Feature(int64_list=tf.train.Int64List(value=[int(v) for v in values]))

  with tf.io.TFRecordWriter(str(path)) as writer:
    for _ in range(n):
      length = rng.randint(8, SEQ + 1)
      ids = np.zeros(SEQ, np.int64)
      ids[:length] = rng.randint(5, VOCAB, length)
      mask = (np.arange(SEQ) < length).astype(np.int64)
      segments = ((np.arange(SEQ) >= length // 2) & (np.arange(SEQ) < length)).astype(np.int64)
      k = rng.randint(1, PRED + 1)
      positions = np.zeros(PRED, np.int64)
      positions[:k] = np.sort(rng.choice(np.arange(1, length), k, replace=False))
      labels = np.zeros(PRED, np.int64)
      labels[:k] = rng.randint(5, VOCAB, k)
      weights = (np.arange(PRED) < k).astype(np.float32)
      features = {  # the original's order (create_pretraining_data's write order)
          "input_ids": ints(ids), "input_mask": ints(mask), "segment_ids": ints(segments),
          "masked_lm_positions": ints(positions), "masked_lm_ids": ints(labels),
          "masked_lm_weights": tf.train.Feature(float_list=tf.train.FloatList(value=weights)),
          "next_sentence_labels": ints([rng.randint(0, 2)])}
      writer.write(tf.train.Example(
          features=tf.train.Features(feature=features)).SerializeToString())


@pytest.fixture(scope="module")
def data(tmp_path_factory):
  root = tmp_path_factory.mktemp("pretraining")
  _write_records(root / "part-0.tfrecord", 48, seed=1)
  _write_records(root / "part-1.tfrecord", 40, seed=2)
  config = dict(vocab_size=VOCAB, hidden_size=32, num_hidden_layers=2, num_attention_heads=2,
                intermediate_size=64, hidden_act="gelu", max_position_embeddings=64,
                type_vocab_size=2, initializer_range=0.02)
  for name, dropout in (("config.json", 0.1), ("config_nodropout.json", 0.0)):
    (root / name).write_text(json.dumps(dict(config, hidden_dropout_prob=dropout,
                                             attention_probs_dropout_prob=dropout)))
  # A TF1-named initial checkpoint (as Google's bert_model.ckpt).
  model = modeling.BertPretrainer(modeling.BertConfig.from_dict(config))
  checkpoints.save_tf1_checkpoint(model, str(root / "init" / "bert_model.ckpt"))
  return root


def _options(data, out, **kw):
  base = dict(bert_config_file=str(data / "config_nodropout.json"),
              input_file=str(data / "part-*.tfrecord"), output_dir=str(out),
              init_checkpoint=str(data / "init" / "bert_model.ckpt"), do_train=True,
              train_batch_size=8, max_seq_length=SEQ, max_predictions_per_seq=PRED,
              num_train_steps=6, num_warmup_steps=2, learning_rate=2e-3,
              iterations_per_loop=3, save_checkpoints_steps=3, max_eval_steps=3)
  base.update(kw)
  return run_pretraining.options(**base)


def _weights(prefix):
  reader = tf.train.load_checkpoint(str(prefix))
  return {name: reader.get_tensor(name) for name in reader.get_variable_to_shape_map()}


def _assert_same_weights(a, b, atol):
  assert sorted(a) == sorted(b)
  worst = max(float(np.max(np.abs(a[n] - b[n]))) for n in a)
  assert worst <= atol, f"max weight difference {worst}"


# ----------------------------------------------------------------------------
# In-process.

def test_losses_and_metrics_match_the_original_formulas():
  """The original run_pretraining's losses and metric_fn restated in NumPy: MLM loss
  sum(w*l)/(sum(w)+1e-5), NSP mean; eval metrics weighted accuracy / weighted mean loss;
  "loss" = mean of batch losses."""
  rng = np.random.RandomState(0)
  b, p, v = 4, 3, 11
  logits = rng.normal(size=(b, p, v)).astype(np.float32)
  ns_logits = rng.normal(size=(b, 2)).astype(np.float32)
  ids = rng.randint(0, v, (b, p)).astype(np.int32)
  weights = np.array([[1, 1, 0], [1, 0, 0], [1, 1, 1], [0, 0, 0]], np.float32)
  labels = rng.randint(0, 2, (b, 1)).astype(np.int32)
  batch = {"masked_lm_ids": tf.constant(ids), "masked_lm_weights": tf.constant(weights),
           "next_sentence_labels": tf.constant(labels),
           "input_ids": tf.zeros((b, 8), tf.int32)}
  outputs = {"masked_lm_logits": tf.constant(logits),
             "next_sentence_logits": tf.constant(ns_logits)}

  def log_softmax(x):
    x = x - x.max(-1, keepdims=True)
    return x - np.log(np.exp(x).sum(-1, keepdims=True))

  mlm = -np.take_along_axis(log_softmax(logits), ids[..., None], -1)[..., 0]
  nsp = -np.take_along_axis(log_softmax(ns_logits), labels, -1)[:, 0]
  want_loss = (weights * mlm).sum() / (weights.sum() + 1e-5) + nsp.mean()

  task = run_pretraining.PretrainingTask()
  dens = task.denominators(batch)
  loss, stats = task.loss(outputs, batch, dens)
  np.testing.assert_allclose(float(loss), want_loss, rtol=1e-5)
  np.testing.assert_allclose(
      float(loss), float(losses.pretraining_loss(outputs, batch)), rtol=1e-5)
  # Two half batches with the global denominators sum to the full-batch loss.
  halves = [{k: t[:2] for k, t in batch.items()}, {k: t[2:] for k, t in batch.items()}]
  out_halves = [{k: t[:2] for k, t in outputs.items()}, {k: t[2:] for k, t in outputs.items()}]
  parts = [float(task.loss(o, h, dens)[0]) for o, h in zip(out_halves, halves)]
  np.testing.assert_allclose(sum(parts), want_loss, rtol=1e-5)

  sums = task.per_batch_eval({k: float(x) for k, x in task.eval_stats(outputs, batch).items()})
  totals = {k: 2 * x for k, x in sums.items()}  # the same batch twice
  results = task.eval_results(totals, 2, 7)
  correct = (logits.argmax(-1) == ids).astype(np.float32)
  np.testing.assert_allclose(results["masked_lm_accuracy"],
                             (weights * correct).sum() / weights.sum(), rtol=1e-6)
  np.testing.assert_allclose(results["masked_lm_loss"],
                             (weights * mlm).sum() / weights.sum(), rtol=1e-5)
  np.testing.assert_allclose(results["next_sentence_accuracy"],
                             (ns_logits.argmax(-1) == labels[:, 0]).mean(), rtol=1e-6)
  np.testing.assert_allclose(results["next_sentence_loss"], nsp.mean(), rtol=1e-5)
  np.testing.assert_allclose(results["loss"], want_loss, rtol=1e-5)
  assert results["global_step"] == 7


def test_eval_results_format():
  text = outputs.format_results({"loss": np.float32(0.0979674), "global_step": np.int64(20),
                                 "masked_lm_accuracy": np.float32(0.985479)})
  assert text == "global_step = 20\nloss = 0.0979674\nmasked_lm_accuracy = 0.985479\n"


def test_input_pipeline_is_seekable(data):
  """The training input order is a pure function of the seed: skipping the records
  consumed by k steps gives exactly the batches an uninterrupted iterator gives next."""
  files = input_pipeline.expand_input_files(str(data / "part-*.tfrecord"))
  decode = run_pretraining.decode_fn(SEQ, PRED)
  full = [b["input_ids"].numpy() for b in
          input_pipeline.training_dataset(files, decode, 4, seed=3).take(30)]
  resumed = [b["input_ids"].numpy() for b in input_pipeline.training_dataset(
      files, decode, 4, seed=3, skip_records=4 * 17).take(13)]
  for a, b in zip(full[17:], resumed):
    np.testing.assert_array_equal(a, b)
  assert full[0].shape == (4, SEQ) and full[0].dtype == np.int32


@pytest.mark.slow  # (the fast tier stays under 5 minutes on 2 cores)
def test_gradient_accumulation_equals_large_batch(data, tmp_path):
  big = run_pretraining.run(_options(data, tmp_path / "big", do_eval=True))
  acc = run_pretraining.run(_options(data, tmp_path / "acc", do_eval=True,
                                     gradient_accumulation_steps=4))
  _assert_same_weights(_weights(tmp_path / "big" / "bert_model.ckpt"),
                       _weights(tmp_path / "acc" / "bert_model.ckpt"), atol=2e-6)
  assert big["global_step"] == acc["global_step"] == 6
  np.testing.assert_allclose(big["loss"], acc["loss"], rtol=1e-5)
  # --init_checkpoint accepts one of our TF2 training checkpoints (model only).
  model = modeling.BertPretrainer(modeling.BertConfig.from_json_file(
      str(data / "config_nodropout.json")))
  names = checkpoints.tf1_variable_map(model)
  assert training_checkpoints.restore_model_variables(
      str(tmp_path / "big" / "model.ckpt-6"), names) == len(names)
  _assert_same_weights(_weights(tmp_path / "big" / "bert_model.ckpt"),
                       {n: v.numpy() for n, v in names.items()}, atol=0)
  assert training_checkpoints.restore_model_variables(
      str(data / "init" / "bert_model.ckpt"), names) is None


@pytest.mark.slow  # (the fast tier stays under 5 minutes on 2 cores)
def test_progress_lines_every_log_every_steps_with_unchanged_results(data, tmp_path, caplog):
  """--log_every_steps=2 with --iterations_per_loop=1000 logs a progress line at steps 2, 4
  and 6 (and 3, where a checkpoint cuts the device loop), each with loss, masked-LM accuracy,
  learning rate, sequences/s, MFU and ETA; the weights and eval results are those of a run
  that logs once per checkpoint (--log_every_steps=0): only the device calls are cut."""
  import logging
  caplog.set_level(logging.INFO)
  chunked = run_pretraining.run(_options(data, tmp_path / "chunked", do_eval=True,
                                         iterations_per_loop=1000, log_every_steps=2))
  lines = [r.getMessage() for r in caplog.records if r.getMessage().startswith("step = ")]
  assert [int(line.split(",")[0].split(" = ")[1]) for line in lines] == [2, 3, 4, 6], lines
  for line in lines:
    for part in (", loss = ", ", masked_lm_accuracy = ", ", learning_rate = ",
                 ", sequences/s = ", ", mfu = ", ", ETA "):
      assert part in line, line
  assert lines[-1].endswith("ETA 0:00:00 (6 of 6 steps)"), lines[-1]
  caplog.clear()
  whole = run_pretraining.run(_options(data, tmp_path / "whole", do_eval=True,
                                       iterations_per_loop=1000, log_every_steps=0))
  lines = [r.getMessage() for r in caplog.records if r.getMessage().startswith("step = ")]
  assert [int(line.split(",")[0].split(" = ")[1]) for line in lines] == [3, 6], lines
  assert whole == chunked
  _assert_same_weights(_weights(tmp_path / "chunked" / "bert_model.ckpt"),
                       _weights(tmp_path / "whole" / "bert_model.ckpt"), atol=0)


@pytest.mark.slow
def test_xla_mixed_precision_and_lamb_run(data, tmp_path):
  """--use_xla with bfloat16 and LAMB, and float16 with loss scaling, train (finite,
  changed weights) and evaluate."""
  initial = _weights(data / "init" / "bert_model.ckpt")
  try:
    for name, kw in (("xla_bf16", dict(use_xla=True, dtype="bfloat16", optimizer="lamb")),
                     ("fp16", dict(dtype="float16", do_eval=True, max_eval_steps=1))):
      results = run_pretraining.run(_options(data, tmp_path / name, num_train_steps=2,
                                             iterations_per_loop=2, **kw))
      final = _weights(tmp_path / name / "bert_model.ckpt")
      assert all(np.all(np.isfinite(w)) for w in final.values())
      assert not np.allclose(final["bert/encoder/layer_0/output/dense/kernel"],
                             initial["bert/encoder/layer_0/output/dense/kernel"])
      if results is not None:
        assert results["global_step"] == 2
        assert all(np.isfinite(float(v)) for v in results.values())
  finally:
    distribution.set_dtype_policy("float32")


def test_bad_flags_raise_one_line_errors(data, tmp_path):
  with pytest.raises(ValueError, match="do_train"):
    run_pretraining.run(_options(data, tmp_path, do_train=False, do_eval=False))
  with pytest.raises(ValueError, match="--input_file"):
    run_pretraining.run(_options(data, tmp_path, input_file=str(tmp_path / "none*")))
  with pytest.raises(ValueError, match="--train_batch_size"):
    run_pretraining.run(_options(data, tmp_path, train_batch_size=6,
                                 gradient_accumulation_steps=4))


# ----------------------------------------------------------------------------
# Subprocesses.

@pytest.mark.slow
def test_original_readme_command_line(data, tmp_path):
  """The README's pre-training command (tiny values), unchanged flags, as a script."""
  out = tmp_path / "pretraining_output"
  cmd = [sys.executable, str(REPO / "run_pretraining.py"),
         f"--input_file={data / 'part-0.tfrecord'},{data / 'part-1.tfrecord'}",
         f"--output_dir={out}", "--do_train=True", "--do_eval=True",
         f"--bert_config_file={data / 'config.json'}",
         f"--init_checkpoint={data / 'init' / 'bert_model.ckpt'}",
         "--train_batch_size=8", f"--max_seq_length={SEQ}",
         f"--max_predictions_per_seq={PRED}", "--num_train_steps=8", "--num_warmup_steps=2",
         "--learning_rate=2e-5", "--iterations_per_loop=4", "--save_checkpoints_steps=4",
         "--max_eval_steps=3"]
  proc = subprocess.run(cmd, env=ENV, capture_output=True, text=True, timeout=300)
  assert proc.returncode == 0, proc.stderr[-3000:]
  log = proc.stderr
  assert "*** Input Files ***" in log and "***** Running training *****" in log
  assert "loaded 39 variables from tf1 checkpoint" in log or "from tf1 checkpoint" in log
  assert "step = 8, loss = " in log and "sequences/s" in log and "mfu" in log
  lines = (out / "eval_results.txt").read_text().splitlines()
  assert [line.split(" = ")[0] for line in lines] == [
      "global_step", "loss", "masked_lm_accuracy", "masked_lm_loss",
      "next_sentence_accuracy", "next_sentence_loss"]
  assert lines[0] == "global_step = 8"
  assert all(np.isfinite(float(line.split(" = ")[1])) for line in lines)
  assert (out / "model.ckpt-4.index").exists() and (out / "model.ckpt-8.index").exists()
  assert tf.train.latest_checkpoint(str(out)).endswith("model.ckpt-8")
  exported = _weights(out / "bert_model.ckpt")
  assert "bert/encoder/layer_1/output/LayerNorm/gamma" in exported
  assert "cls/predictions/output_bias" in exported
  assert list(out.glob("events.out.tfevents.*"))
  # Our TF2 checkpoint stores every model variable under its original TF1 name
  # (model_variables/<name, "/" escaped as ".S">), plus optimizer slots and the step.
  keys = {name for name, _ in tf.train.list_variables(str(out / "model.ckpt-8"))}
  for name in exported:
    assert "model_variables/%s/.ATTRIBUTES/VARIABLE_VALUE" % name.replace("/", ".S") in keys
  assert "step/.ATTRIBUTES/VARIABLE_VALUE" in keys
  # Running the same command again: resumes at step 8 = num_train_steps, evaluates only.
  proc = subprocess.run(cmd, env=ENV, capture_output=True, text=True, timeout=300)
  assert proc.returncode == 0, proc.stderr[-3000:]
  assert "nothing to train" in proc.stderr
  # Bad input: one line naming the flag, no traceback.
  proc = subprocess.run(cmd[:2] + [f"--output_dir={tmp_path / 'other'}", "--do_train=True",
                                   f"--bert_config_file={data / 'missing.json'}",
                                   "--input_file=x"], env=ENV, capture_output=True,
                        text=True, timeout=120)
  assert proc.returncode != 0 and "Traceback" not in proc.stderr
  assert "error: --bert_config_file" in proc.stderr


@pytest.mark.slow
def test_flags_match_the_original():
  """Every flag of the original run_pretraining exists with the same type and default."""
  want, got = oracle.original_and_our_flags("run_pretraining", env=ENV)
  assert len(want) == 22 and got == want
  assert set(run_pretraining.DEFAULTS) >= set(want)
  assert {n: run_pretraining.DEFAULTS[n] for n in want} == {n: v[0] for n, v in want.items()}


_MIRRORED = """
import sys, tensorflow as tf
cpu = tf.config.list_physical_devices("CPU")[0]
tf.config.set_logical_device_configuration(cpu, [tf.config.LogicalDeviceConfiguration()] * 2)
from bert_keras import run_pretraining
from bert_keras.runtime import distribution
runs = {{"one_device": (["/cpu:0"], 1), "mirrored": (["/cpu:0", "/cpu:1"], 1),
        "mirrored_accum": (["/cpu:0", "/cpu:1"], 2)}}
for name, (devices, accum) in runs.items():
  kind = "one_device" if len(devices) == 1 else "mirrored"
  strategy = distribution.build_strategy(kind, devices=devices)
  assert strategy.num_replicas_in_sync == len(devices)
  o = run_pretraining.options(**{options!r}, output_dir={out!r} + "/" + name,
                              gradient_accumulation_steps=accum)
  print(name, run_pretraining.run(o, strategy), flush=True)
"""


@pytest.mark.slow
def test_mirrored_two_replicas_equals_one_device(data, tmp_path):
  """MirroredStrategy on 2 logical CPUs (with and without accumulation) ends with the
  weights of one device for the same global batch (dropout 0; clipping active)."""
  o = vars(_options(data, tmp_path))
  o.pop("output_dir")
  o.pop("gradient_accumulation_steps")
  script = _MIRRORED.format(options=o, out=str(tmp_path))
  proc = subprocess.run([sys.executable, "-c", script], env=ENV, capture_output=True,
                        text=True, timeout=300, cwd=str(tmp_path))
  assert proc.returncode == 0, proc.stderr[-3000:]
  one = _weights(tmp_path / "one_device" / "bert_model.ckpt")
  for name in ("mirrored", "mirrored_accum"):
    _assert_same_weights(one, _weights(tmp_path / name / "bert_model.ckpt"), atol=2e-6)


_WORKER = """
import hashlib, json, sys, numpy as np
from bert_keras import run_pretraining
from bert_keras.runtime import distribution, training
models = []
build = training.build_trainer
def capture(*args):
  trainer = build(*args)
  models.append(trainer.model)
  return trainer
training.build_trainer = capture
strategy = distribution.build_strategy("multi_worker_mirrored")
assert strategy.num_replicas_in_sync == 2
o = run_pretraining.options(**{options!r})
results = run_pretraining.run(o, strategy)
digest = hashlib.sha256(b"".join(np.asarray(v.numpy()).tobytes()
                                 for v in models[0].trainable_variables)).hexdigest()
results = {{k: float(v) for k, v in results.items()}}
print("RESULT", json.dumps(dict(results, weights_sha256=digest)), flush=True)
"""


@pytest.mark.slow
def test_multi_worker_mirrored_two_processes(data, tmp_path):
  """Two workers on localhost (TF_CONFIG), one replica each: both finish with bitwise
  identical weights and the same eval results; each reads its own file shard; only the
  chief writes checkpoints, the export and eval_results.txt."""
  o = vars(_options(data, tmp_path / "out", do_eval=True, train_batch_size=8,
                    eval_batch_size=8))
  script = _WORKER.format(options=o)
  outputs, _ = run_workers(script, ENV, tmp_path)
  results = worker_results(outputs)
  assert len(results) == 2 and results[0] == results[1]
  assert results[0]["global_step"] == 6
  out = tmp_path / "out"
  assert (out / "eval_results.txt").exists() and (out / "bert_model.ckpt.index").exists()
  assert not list(out.glob("workertemp_*"))


@pytest.mark.slow
def test_sigkill_and_restart_resumes_exactly(data, tmp_path):
  """A run killed with SIGKILL mid-training and restarted with the same command resumes
  from its last checkpoint (model, optimizer, step, dropout RNG state, input position)
  and ends with the weights of an uninterrupted run (dropout 0.1 on)."""
  def command(out):
    return [sys.executable, str(REPO / "run_pretraining.py"),
            f"--input_file={data / 'part-*.tfrecord'}", f"--output_dir={out}",
            "--do_train=True", f"--bert_config_file={data / 'config.json'}",
            "--train_batch_size=4", f"--max_seq_length={SEQ}",
            f"--max_predictions_per_seq={PRED}", "--num_train_steps=40",
            "--num_warmup_steps=5", "--learning_rate=1e-3", "--iterations_per_loop=2",
            "--save_checkpoints_steps=4", "--keep_checkpoint_max=3"]

  # Uninterrupted reference, in this process (same seed -> same initial weights).
  reference = run_pretraining.run(_options(
      data, tmp_path / "ref", bert_config_file=str(data / "config.json"), init_checkpoint=None,
      train_batch_size=4, num_train_steps=40, num_warmup_steps=5, learning_rate=1e-3,
      iterations_per_loop=2, save_checkpoints_steps=4, keep_checkpoint_max=3))
  assert reference is None

  out = tmp_path / "killed"
  proc = subprocess.Popen(command(out), env=ENV, text=True, stdout=subprocess.DEVNULL,
                          stderr=subprocess.PIPE)
  try:
    for line in proc.stderr:  # kill right after the log line of step 10
      if "step = 10," in line:
        os.kill(proc.pid, signal.SIGKILL)
        break
    proc.wait(timeout=300)
  finally:
    if proc.poll() is None:
      proc.kill()
  assert proc.returncode == -signal.SIGKILL
  assert not (out / "bert_model.ckpt.index").exists()  # it did not finish
  killed_at = tf.train.latest_checkpoint(str(out))
  assert killed_at is not None and int(killed_at.rsplit("-", 1)[1]) < 40
  assert len(list(out.glob("model.ckpt-*.index"))) <= 3

  proc = subprocess.run(command(out), env=ENV, capture_output=True, text=True, timeout=300)
  assert proc.returncode == 0, proc.stderr[-3000:]
  assert f"Restoring from {killed_at}" in proc.stderr
  assert not [p.name for p in out.iterdir() if ".tmp" in p.name or "_temp" in p.name
              or p.name == outputs.LOCK_NAME]
  assert "skipping" in proc.stderr
  _assert_same_weights(_weights(tmp_path / "ref" / "bert_model.ckpt"),
                       _weights(out / "bert_model.ckpt"), atol=1e-6)


def test_xla_is_on_by_default_only_where_it_helps():
  # --use_xla unset (None) means: on for GPU/TPU devices, off on CPU.
  assert run_pretraining.DEFAULTS["use_xla"] is None
  assert not distribution.default_use_xla(tf.distribute.OneDeviceStrategy("/cpu:0"))

  class FakeExtended:
    worker_devices = ("/job:localhost/replica:0/task:0/device:GPU:0",)
  assert distribution.default_use_xla(type("FakeStrategy", (), {"extended": FakeExtended})())


# ----------------------------------------------------------------------------
# Bad inputs found before the model is built: a one-line ValueError naming the flag and file.

def _bad_run(data, tmp_path, **kw):
  out = tmp_path / "out"
  with pytest.raises(ValueError) as info:
    run_pretraining.run(_options(data, out, **kw))
  assert not out.exists(), "the output directory was made before the inputs were checked"
  message = str(info.value)
  assert "\n" not in message
  return message


def test_bad_record_files_are_one_line_errors_before_training(data, tmp_path):
  empty = tmp_path / "empty.tfrecord"
  empty.write_bytes(b"")
  assert _bad_run(data, tmp_path, input_file=str(empty)) == (
      f"--input_file {empty}: empty file (no records)")
  whole = (data / "part-0.tfrecord").read_bytes()
  cut = tmp_path / "cut.tfrecord"
  cut.write_bytes(whole[:len(whole) // 2 + 100])  # a copy interrupted inside a record
  assert _bad_run(data, tmp_path, input_file=str(cut)).startswith(
      f"--input_file {cut}: not a whole TFRecord file: record ")
  text = tmp_path / "corpus.txt"
  text.write_text("This is a sentence, not a record file.\n" * 20)
  assert f"--input_file {text}: not a whole TFRecord file" in _bad_run(
      data, tmp_path, input_file=str(text))
  corrupt = tmp_path / "corrupt.tfrecord"
  corrupt.write_bytes(whole[:40] + bytes([whole[40] ^ 0xFF]) + whole[41:])  # a flipped byte
  assert _bad_run(data, tmp_path, input_file=str(corrupt)).startswith(
      f"--input_file {corrupt}: not a readable TFRecord file")


def test_records_that_do_not_match_the_flags_or_config(data, tmp_path):
  records = str(data / "part-0.tfrecord")
  assert _bad_run(data, tmp_path, input_file=records, max_seq_length=64).startswith(
      f"--input_file {records}: record 0 has {SEQ} values of input_ids, the flags give 64")
  assert _bad_run(data, tmp_path, input_file=records, max_predictions_per_seq=7).startswith(
      f"--input_file {records}: record 0 has {PRED} values of masked_lm_positions")
  small = dict(json.loads((data / "config_nodropout.json").read_text()), vocab_size=20)
  (tmp_path / "small.json").write_text(json.dumps(small))
  message = _bad_run(data, tmp_path, input_file=records, init_checkpoint=None,
                     bert_config_file=str(tmp_path / "small.json"))
  assert message.startswith(f"--input_file {records}: record 0 has token id ")
  assert message.endswith(f"but --bert_config_file {tmp_path}/small.json has vocab_size 20 "
                          "(records made with a larger vocab than the config's)")


@pytest.mark.parametrize("flag, value, expected", [
    ("learning_rate", -1e-4, "--learning_rate=-0.0001: must be > 0"),
    ("save_checkpoints_steps", -5, "--save_checkpoints_steps=-5: must be >= 0"),
    ("log_every_steps", -1, "--log_every_steps=-1: must be >= 0"),
])
def test_bad_training_numbers(data, tmp_path, flag, value, expected):
  assert _bad_run(data, tmp_path, **{flag: value}) == expected


@pytest.mark.slow
def test_truncated_or_incomplete_newest_checkpoint_falls_back(data, tmp_path, caplog):  # noqa: F811
  out = tmp_path / "out"
  run_pretraining.run(_options(data, out))                 # checkpoints 3 and 6
  reference = _weights(out / "bert_model.ckpt")             # the final export (TF1 names)
  assert training_checkpoints.checkpoint_problem(str(out / "model.ckpt-6")) is None
  # A save cut short: half the data of the newest checkpoint, and TF's temporary directory.
  data_file = out / "model.ckpt-6.data-00000-of-00001"
  data_file.write_bytes(data_file.read_bytes()[:data_file.stat().st_size // 2])
  (out / "model.ckpt-6_temp").mkdir()
  assert "truncated" in training_checkpoints.checkpoint_problem(str(out / "model.ckpt-6"))
  caplog.clear()
  run_pretraining.run(_options(data, out))
  assert (f"Checkpoint {out}/model.ckpt-6 is unreadable (its .data files hold" in caplog.text)
  assert f"Restoring from {out}/model.ckpt-3" in caplog.text
  assert not (out / "model.ckpt-6_temp").exists()
  # Steps 4-6 again from checkpoint 3: the same weights as the first run's (no dropout).
  _assert_same_weights(reference, _weights(out / "bert_model.ckpt"), atol=1e-6)

  (out / "model.ckpt-6.index").unlink()                    # an index never written
  caplog.clear()
  results = run_pretraining.run(_options(data, out, do_train=False, do_eval=True))
  assert "model.ckpt-6 is unreadable (no .index file)" in caplog.text
  assert int(results["global_step"]) == 3

  for name in ("model.ckpt-3.index",):
    (out / name).unlink()
  with pytest.raises(ValueError) as info:
    run_pretraining.run(_options(data, out))
  assert str(info.value) == (
      f"{out}: none of the checkpoints its \"checkpoint\" file names is readable: "
      "model.ckpt-6 (no .index file); model.ckpt-3 (no .index file)")


def test_relative_output_dir_resumes(tmp_path, monkeypatch):
  """tf.train.get_checkpoint_state joins relative entries with the directory already: a
  relative --output_dir must find its own checkpoints (joined once, not twice)."""
  monkeypatch.chdir(tmp_path)
  step = tf.Variable(0)
  manager = training_checkpoints.make_checkpoint_manager(tf.train.Checkpoint(step=step), "out")
  for value in (1, 2):
    step.assign(value)
    manager.save(checkpoint_number=value)
  assert training_checkpoints.latest_checkpoint("out") == os.path.join("out", "model.ckpt-2")
  data_file = tmp_path / "out" / "model.ckpt-2.data-00000-of-00001"
  data_file.write_bytes(b"")                                # cut short: the previous one
  assert training_checkpoints.latest_checkpoint("out") == os.path.join("out", "model.ckpt-1")


def _records_with_a_bad_id(path, n, bad_index, bad_id=150):
  from test_run_pretraining import _write_records
  _write_records(path, n, seed=3)
  records = [r.numpy() for r in tf.data.TFRecordDataset(str(path))]
  example = tf.train.Example.FromString(records[bad_index])
  example.features.feature["input_ids"].int64_list.value[0] = bad_id
  records[bad_index] = example.SerializeToString()
  with tf.io.TFRecordWriter(str(path)) as writer:
    for record in records:
      writer.write(record)


def test_id_check_of_every_batch_names_file_and_record(tmp_path):
  path = tmp_path / "bad.tfrecord"
  _records_with_a_bad_id(path, 20, 13)
  decode = run_pretraining.decode_fn(32, 5)
  check = input_pipeline.IdCheck(100, ("input_ids", "masked_lm_ids"), "--bert_config_file c",
                                 "--input_file")
  expected = (f"--input_file {path}: record 13 has token id 150 in input_ids, outside the "
              "vocab_size 100 of --bert_config_file c")
  for ds in (input_pipeline.training_dataset([str(path)], decode, 4, id_check=check),
             input_pipeline.evaluation_dataset([str(path)], decode, 4, id_check=check)):
    with pytest.raises(tf.errors.InvalidArgumentError) as info:
      for _ in ds.take(10):
        pass
    assert errors.data_error_text(info.value.message).startswith(expected)
  good = list(input_pipeline.evaluation_dataset([str(path)], decode, 4, id_check=check).take(3))
  assert len(good) == 3 and good[0]["input_ids"].shape == (4, 32)   # records 0-11 are fine


def test_bad_id_past_the_first_records_is_one_line_mid_training(data, tmp_path):  # noqa: F811
  path = tmp_path / "bad.tfrecord"
  _records_with_a_bad_id(path, 72, 70)
  options = _options(data, tmp_path / "out", input_file=str(path), num_train_steps=20,
                     save_checkpoints_steps=100)
  with pytest.raises(SystemExit) as info:
    with errors.one_line_errors():
      run_pretraining.run(options)
  assert str(info.value.code).startswith(
      f"error: --input_file {path}: record 70 has token id 150 in input_ids, outside the "
      f"vocab_size 100 of --bert_config_file {data / 'config_nodropout.json'}")


def test_damaged_record_past_the_first_records_is_one_line(data, tmp_path):  # noqa: F811
  from test_run_pretraining import _write_records
  path = tmp_path / "damaged.tfrecord"
  _write_records(path, 90, seed=5)
  raw = bytearray(path.read_bytes())
  offset = 0
  for _ in range(80):                                       # record 80's data: a CRC error
    offset += 16 + int.from_bytes(raw[offset:offset + 8], "little")
  raw[offset + 12 + 20] ^= 0xFF
  path.write_bytes(bytes(raw))
  options = _options(data, tmp_path / "out", input_file=str(path), num_train_steps=30,
                     save_checkpoints_steps=100)
  with pytest.raises(SystemExit) as info:
    with errors.one_line_errors():
      run_pretraining.run(options)
  assert str(info.value.code) == (f"error: --input_file {path}: corrupted record at byte "
                                  f"{offset} (its checksum does not match: the file is "
                                  "damaged)")
  # Among several files, the damaged one is named.
  other = tmp_path / "whole.tfrecord"
  _write_records(other, 90, seed=6)
  assert run_pretraining.damaged_record_text(
      f"corrupted record at {offset + 12}", [str(other), str(path)]) == (  # (its data)
      f"--input_file {path}: corrupted record at byte {offset} (its checksum does not match: "
      "the file is damaged)")
  assert run_pretraining.damaged_record_text("another error", [str(path)]) is None


@pytest.mark.slow  # (the fast tier stays under 5 minutes on 2 cores)
def test_a_slow_step_still_shows_progress_every_interval(data, tmp_path, caplog, monkeypatch):
  """Progress at least every 30 s whatever --log_every_steps says: once a device call shows
  how long a step takes, the next calls are cut so that each lasts about 30 s (here the
  interval is made tiny, so every call after the first is one step, where --log_every_steps=2
  alone gives lines at 2, 4 and 6); the weights are those of the uncut run."""
  import logging
  from bert_keras.utils import progress as progress_lib
  caplog.set_level(logging.INFO)
  monkeypatch.setattr(progress_lib.Progress, "LOG_INTERVAL_S", 1e-6)
  run_pretraining.run(_options(data, tmp_path / "cut", iterations_per_loop=1000,
                               log_every_steps=2, save_checkpoints_steps=1000))
  lines = [r.getMessage() for r in caplog.records if r.getMessage().startswith("step = ")]
  assert [int(line.split(",")[0].split(" = ")[1]) for line in lines] == [2, 3, 4, 5, 6], lines
  monkeypatch.undo()
  run_pretraining.run(_options(data, tmp_path / "whole", iterations_per_loop=1000,
                               log_every_steps=2, save_checkpoints_steps=1000))
  _assert_same_weights(_weights(tmp_path / "cut" / "bert_model.ckpt"),
                       _weights(tmp_path / "whole" / "bert_model.ckpt"), atol=0)
