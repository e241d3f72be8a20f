"""Pre-training loop benchmark: run_pretraining's custom loop against Keras model.fit.

Measures, in one process on this machine, sequences/s and model FLOPs utilisation (MFU)
of a full pre-training step (input pipeline from TFRecords in the original's format,
forward, MLM + NSP loss, backward, global-norm clip, AdamWeightDecay update):
  ours loop        training.Trainer as run_pretraining uses it (tf.distribute one-device
                   strategy, iterations_per_loop steps inside one tf.function)
  ours loop+xla    the same with --use_xla (forward/backward jit-compiled)
  keras fit        the same modeling.BertPretrainer and optimizer under model.fit
                   (MLM + NSP losses as Keras losses), jit_compile=False
  keras fit+xla    model.fit with jit_compile=True
  keras_hub fit    keras_hub.models.BertMaskedLM (BertBackbone + MLM head, no NSP) of the
                   same size under model.fit, jit_compile=False / True (skipped if absent)
Each row: one warm-up pass (tracing/compilation) then one timed pass of --steps steps.
MFU = sequences/s x training FLOPs per sequence (flops.bert_training_flops_per_sequence)
/ the measured matmul peak of this device (flops.measured_peak_flops).

Usage:
  python bench/bench_pretraining.py --quick     # tiny config, a few steps (~1-2 min CPU)
  python bench/bench_pretraining.py             # BERT-Base, seq 128, batch 32, 50 steps
  python bench/bench_pretraining.py --dtype bfloat16 --config base --batch 64
Prints a table; the last line is a JSON object with every figure.
"""

import argparse
import json
import os
import pathlib
import platform
import sys
import tempfile
import time

os.environ.setdefault("TF_CPP_MIN_LOG_LEVEL", "2")

import numpy as np  # noqa: E402
import tensorflow as tf  # noqa: E402
import keras  # noqa: E402

REPO = pathlib.Path(__file__).resolve().parent.parent
from bert_keras import modeling  # noqa: E402
from bert_keras import optimization  # noqa: E402
from bert_keras import run_pretraining  # noqa: E402
from bert_keras.runtime import settings  # noqa: E402  (pip install -e . in the clone)
from bert_keras.runtime import distribution  # noqa: E402
from bert_keras.runtime import flops  # noqa: E402
from bert_keras.runtime import input_pipeline  # noqa: E402
from bert_keras.runtime import training  # noqa: E402

CONFIGS = {
    "base": dict(vocab_size=30522, hidden_size=768, num_hidden_layers=12,
                 num_attention_heads=12, intermediate_size=3072),
    "small": dict(vocab_size=30522, hidden_size=512, num_hidden_layers=4,
                  num_attention_heads=8, intermediate_size=2048),
    "tiny": dict(vocab_size=1000, hidden_size=64, num_hidden_layers=2,
                 num_attention_heads=2, intermediate_size=256),
}


def write_records(path, n, seq, pred, vocab, seed=0):
  """n synthetic examples in the original's tf.train.Example format (create_pretraining_data's
  seven features)."""
  rng = np.random.RandomState(seed)

  def ints(values):
    return tf.train.Feature(int64_list=tf.train.Int64List(value=[int(v) for v in values]))

  with tf.io.TFRecordWriter(path) as writer:
    for _ in range(n):
      ids = rng.randint(5, vocab, seq)
      positions = np.sort(rng.choice(np.arange(1, seq), pred, replace=False))
      features = {
          "input_ids": ints(ids), "input_mask": ints(np.ones(seq)),
          "segment_ids": ints(np.arange(seq) >= seq // 2),
          "masked_lm_positions": ints(positions), "masked_lm_ids": ints(ids[positions]),
          "masked_lm_weights": tf.train.Feature(
              float_list=tf.train.FloatList(value=np.ones(pred))),
          "next_sentence_labels": ints([rng.randint(0, 2)])}
      writer.write(tf.train.Example(
          features=tf.train.Features(feature=features)).SerializeToString())


def bench_ours(args, config, files, use_xla):
  """run_pretraining's loop: returns sequences/s of the timed (second) loop."""
  options = run_pretraining.options(
      bert_config_file="unused", input_file=",".join(files), output_dir="unused",
      max_seq_length=args.seq, max_predictions_per_seq=args.pred, do_train=True,
      train_batch_size=args.batch, learning_rate=1e-4, num_train_steps=2 * args.steps,
      num_warmup_steps=10, dtype=args.dtype, use_xla=use_xla)
  strategy = distribution.build_strategy("one_device")
  trainer = training.build_trainer(settings.RunSettings.from_flags(options).training, strategy,
                                   lambda: modeling.BertPretrainer(config),
                                   run_pretraining.PretrainingTask(), 2 * args.steps, 10)
  decode = run_pretraining.decode_fn(args.seq, args.pred)
  per_loop = []

  def dataset_fn(ctx, skip):
    return input_pipeline.training_dataset(files, decode, args.batch, ctx, skip_records=skip)

  with tempfile.TemporaryDirectory() as out:
    trainer.train(dataset_fn, num_train_steps=2 * args.steps, steps_per_loop=args.steps,
                  output_dir=out, save_checkpoints_steps=0, global_batch_size=args.batch,
                  log_every_steps=0, log_fn=lambda step, stats: per_loop.append(stats))
  return per_loop[-1]["sequences_per_sec"], per_loop[-1]["loss"]


def _fit_dataset(files, args, with_nsp=True, hub=False):
  decode = run_pretraining.decode_fn(args.seq, args.pred)

  def split(b):
    if hub:
      x = {"token_ids": b["input_ids"], "segment_ids": b["segment_ids"],
           "padding_mask": b["input_mask"] > 0, "mask_positions": b["masked_lm_positions"]}
      return x, b["masked_lm_ids"], b["masked_lm_weights"]
    x = {k: b[k] for k in ("input_ids", "input_mask", "segment_ids", "masked_lm_positions")}
    y = {"masked_lm_logits": b["masked_lm_ids"], "next_sentence_logits": b["next_sentence_labels"]}
    w = {"masked_lm_logits": b["masked_lm_weights"],
         "next_sentence_logits": tf.ones_like(b["next_sentence_labels"], tf.float32)}
    return x, y, w

  ds = input_pipeline.training_dataset(files, decode, args.batch)
  return ds.map(split, num_parallel_calls=tf.data.AUTOTUNE).prefetch(tf.data.AUTOTUNE)


class _Timer(keras.callbacks.Callback):
  def on_epoch_begin(self, epoch, logs=None):
    self.start = time.perf_counter()

  def on_epoch_end(self, epoch, logs=None):
    self.elapsed = time.perf_counter() - self.start
    self.loss = (logs or {}).get("loss", float("nan"))


def bench_fit(args, config, files, jit, hub=False):
  distribution.set_dtype_policy(args.dtype)
  opt = optimization.create_optimizer(1e-4, 2 * args.steps, 10)
  xent = keras.losses.SparseCategoricalCrossentropy(from_logits=True)
  if hub:
    import keras_hub
    backbone = keras_hub.models.BertBackbone(
        vocabulary_size=config.vocab_size, num_layers=config.num_hidden_layers,
        num_heads=config.num_attention_heads, hidden_dim=config.hidden_size,
        intermediate_dim=config.intermediate_size, dropout=0.1,
        max_sequence_length=config.max_position_embeddings)
    model = keras_hub.models.BertMaskedLM(backbone, preprocessor=None)
    model.compile(optimizer=opt, loss=xent, weighted_metrics=[], jit_compile=jit)
  else:
    model = modeling.BertPretrainer(config)   # returns the two logits: compile's dict loss
    model.compile(optimizer=opt, loss={"masked_lm_logits": xent, "next_sentence_logits": xent},
                  jit_compile=jit)
  timer = _Timer()
  model.fit(_fit_dataset(files, args, hub=hub), steps_per_epoch=args.steps, epochs=2,
            verbose=0, callbacks=[timer])
  distribution.set_dtype_policy("float32")
  return args.steps * args.batch / timer.elapsed, float(timer.loss)


def main():
  parser = argparse.ArgumentParser(description=__doc__.split("\n")[0])
  parser.add_argument("--quick", action="store_true", help="tiny config, few steps")
  parser.add_argument("--config", default="base", choices=sorted(CONFIGS))
  parser.add_argument("--seq", type=int, default=128)
  parser.add_argument("--pred", type=int, default=20)
  parser.add_argument("--batch", type=int, default=32)
  parser.add_argument("--steps", type=int, default=50, help="timed steps per row")
  parser.add_argument("--dtype", default="float32", choices=["float32", "bfloat16", "float16"])
  parser.add_argument("--skip", default="", help="comma-separated rows to skip")
  args = parser.parse_args()
  if args.quick:
    args.config, args.seq, args.pred, args.batch, args.steps = "tiny", 32, 5, 8, 10
  config = modeling.BertConfig.from_dict(dict(CONFIGS[args.config], type_vocab_size=2,
                                              max_position_embeddings=512))
  peak = flops.measured_peak_flops(args.dtype)
  flops_per_sequence = flops.bert_training_flops_per_sequence(config, args.seq, args.pred)
  skip = set(filter(None, args.skip.split(",")))
  rows = []
  with tempfile.TemporaryDirectory() as tmp:
    files = []
    for i in range(2):
      files.append(os.path.join(tmp, f"part-{i}.tfrecord"))
      write_records(files[-1], max(4 * args.batch, 64), args.seq, args.pred, config.vocab_size,
                    seed=i)
    runs = [("ours loop", lambda: bench_ours(args, config, files, False)),
            ("ours loop+xla", lambda: bench_ours(args, config, files, True)),
            ("keras fit", lambda: bench_fit(args, config, files, False)),
            ("keras fit+xla", lambda: bench_fit(args, config, files, True)),
            ("keras_hub fit", lambda: bench_fit(args, config, files, False, hub=True)),
            ("keras_hub fit+xla", lambda: bench_fit(args, config, files, True, hub=True))]
    for name, fn in runs:
      if name in skip:
        continue
      try:
        seq_per_s, loss = fn()
        rows.append({"name": name, "sequences_per_sec": seq_per_s,
                     "mfu": seq_per_s * flops_per_sequence / peak, "loss": loss})
      except ImportError as e:
        rows.append({"name": name, "skipped": f"not installed ({e.name})"})
      except Exception as e:
        rows.append({"name": name, "skipped": f"{type(e).__name__}: {str(e)[:120]}"})
      keras.backend.clear_session()
      print(rows[-1], flush=True, file=sys.stderr)

  print("machine: %s, %d CPUs, GPUs %d, TensorFlow %s, Keras %s" % (
      platform.machine(), os.cpu_count(), len(tf.config.list_physical_devices("GPU")),
      tf.__version__, keras.__version__))
  print("config %s (L%d H%d), seq %d, batch %d, %d masked, dtype %s, %d timed steps; "
        "matmul peak %.1f GFLOP/s; %.3f GFLOP per training sequence" % (
            args.config, config.num_hidden_layers, config.hidden_size, args.seq, args.batch,
            args.pred, args.dtype, args.steps, peak / 1e9, flops_per_sequence / 1e9))
  print()
  print("| run | sequences/s | MFU | final loss |")
  print("|---|---:|---:|---:|")
  for row in rows:
    if "skipped" in row:
      print(f"| {row['name']} | skipped: {row['skipped']} | | |")
    else:
      print(f"| {row['name']} | {row['sequences_per_sec']:.1f} | {100 * row['mfu']:.2f}% | "
            f"{row['loss']:.3f} |")
  print(json.dumps({"config": args.config, "seq": args.seq, "batch": args.batch,
                    "dtype": args.dtype, "steps": args.steps, "peak_flops": peak,
                    "flops_per_sequence": flops_per_sequence, "rows": rows}))


if __name__ == "__main__":
  main()
