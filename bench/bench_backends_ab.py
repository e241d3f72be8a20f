"""A/B of the TensorFlow path: the training step and serving with two checkouts of the package.

Two checkouts ("before" and "after", each a folder holding `bert_keras`, put first on
PYTHONPATH) each get a worker process of this script that builds, under TensorFlow:
  train   the training step of bench_model.py's "ours": BertPretrainer (BERT-Small, L4/H512,
          float32), MLM + NSP loss, gradients and the optimizer's update in a tf.function,
          batch 8, seq 128, 20 masked positions; --optimizer: keras AdamW (bench_model's) or
          optimization.AdamWeightDecay (the scripts');
  xla     the same with jit_compile=True (a second model and optimizer);
  b1/b32  bench_serving.py's main row: a BertClassifier (L4/H256, the bert-base-uncased vocab,
          random weights) in serving.ServingModule with the core-ops preprocessor, saved with
          serving.save_atomic and loaded, raw MRPC pairs in: median latency at batch 1 and
          the median time of a batch of 32 (reported as pairs/s).
Both workers are built first, then timed in --rounds interleaved rounds (the order alternating,
so a slow phase of a shared machine falls on both); each figure is the median over all rounds.
Ratios are after's speed over before's (> 1: after is faster).

  git worktree add --detach ../before 81e43be     # and a folder whose bert_keras -> ../before
  python bench/bench_backends_ab.py --before=BEFORE_PATH --after=AFTER_PATH
Prints a table; the last line is a JSON object with every figure.
"""

import argparse
import json
import os
import statistics
import sys
import time

HERE = os.path.dirname(os.path.abspath(__file__))
sys.path.insert(0, HERE)
from shared_data import TimingWorker, serve_timings, shared_data  # noqa: E402
KEYS = {"train": "train step, tf.function", "xla": "train step, jit_compile=True",
        "b1": "serving, batch 1 (ms)", "b32": "serving, batch 32 (pairs/s)"}


def _train_call(bench_model, optimizer_name, jit):
  """One training step of a fresh BERT-Small pretrainer (bench_model's "ours", float32) -> fn()
  running it (loss on the host)."""
  import tensorflow as tf
  from bert_keras import modeling, optimization
  c = modeling.BertConfig.from_dict(dict(modeling.BertConfig(0).to_dict(),
                                         **bench_model.CONFIGS["small"]))
  optimizer = (optimization.create_optimizer(1e-4, 10000, 100)
               if optimizer_name == "adamweightdecay" else None)
  step, _, _ = bench_model.ours(c, "float32", jit, optimizer)
  features = {k: tf.constant(v) for k, v in bench_model.make_batch(c, 8, 128, 20).items()}
  return lambda: float(step(features))


def _serving_calls(directory, requests):
  """bench_serving's main row: -> (fn for one pair, fn for a batch of 32)."""
  import csv
  import tensorflow as tf
  from bert_keras import modeling, preprocessing, serving, tokenization
  vocab_file = shared_data("vocab", "bert-base-uncased-vocab.txt")
  with open(shared_data("glue", "MRPC", "dev.tsv"), encoding="utf-8") as f:
    pairs = [(r[3], r[4]) for r in list(csv.reader(f, delimiter="\t", quoting=csv.QUOTE_NONE))[1:]]
  config = modeling.BertConfig(vocab_size=len(tokenization.load_vocab(vocab_file)),
                               hidden_size=256, num_hidden_layers=4, num_attention_heads=4,
                               intermediate_size=1024, max_position_embeddings=512)
  model = modeling.BertClassifier(config, 2)
  core = preprocessing.BertPreprocessor(vocab_file, True, 128, core_ops_only=True)
  path = os.path.join(directory, "ours")
  serving.save_atomic(serving.ServingModule(model, core, "classifier", trim_padding=True), path)
  loaded = tf.saved_model.load(path)
  fn = loaded.signatures["serving_default"]

  def run(batch):
    return fn(text_a=tf.constant([a for a, _ in batch]),
              text_b=tf.constant([b for _, b in batch]))["probabilities"].numpy()
  state = {"i": 0}

  def one():   # the next request of the first `requests` pairs
    state["i"] = (state["i"] + 1) % requests
    return run(pairs[state["i"]:state["i"] + 1])
  batches = [pairs[i * 32:(i + 1) * 32] for i in range(8)]

  def batch32():
    state["b"] = (state.get("b", 0) + 1) % len(batches)
    return run(batches[state["b"]])
  one.loaded = loaded
  return one, batch32


def worker(args):
  import tempfile
  from bert_keras.utils import quiet_tensorflow  # noqa: F401
  import keras
  import bench_model
  import bert_keras
  keras.utils.set_random_seed(0)
  start = time.perf_counter()
  calls = {}
  measure = args.measure.split(",")
  for key in ("train", "xla"):
    if key in measure:
      calls[key] = _train_call(bench_model, args.optimizer, key == "xla")
  with tempfile.TemporaryDirectory() as directory:
    if "serve" in measure:
      calls["b1"], calls["b32"] = _serving_calls(directory, 40)
    for fn in calls.values():
      for _ in range(3):
        fn()
    print("AB " + json.dumps({"package": os.path.dirname(bert_keras.__file__),
                              "build_s": round(time.perf_counter() - start, 1)}), flush=True)
    serve_timings(calls, "AB ")


def _worker(name, path, args):
  """A worker process of this script with the checkout `path` first on PYTHONPATH."""
  env = dict(os.environ, PYTHONPATH=os.pathsep.join(
      [path] + [p for p in os.environ.get("PYTHONPATH", "").split(os.pathsep) if p]),
      KERAS_BACKEND="tensorflow")
  return TimingWorker(name, [sys.executable, os.path.abspath(__file__), "--worker",
                             "--optimizer=" + args.optimizer, "--measure=" + args.measure],
                      "AB ", env=env)


def main():
  parser = argparse.ArgumentParser(description=__doc__.split("\n")[0])
  parser.add_argument("--before", help="a folder holding bert_keras (the 'before' checkout)")
  parser.add_argument("--after", help="a folder holding bert_keras (the 'after' checkout)")
  parser.add_argument("--optimizer", default="keras_adamw",
                      choices=("keras_adamw", "adamweightdecay"))
  parser.add_argument("--measure", default="train,xla,serve",
                      help="which of train, xla, serve")
  parser.add_argument("--rounds", type=int, default=6)
  parser.add_argument("--steps", type=int, default=3, help="training steps per round and key")
  parser.add_argument("--requests", type=int, default=20, help="batch-1 requests per round")
  parser.add_argument("--batches", type=int, default=4, help="batches of 32 per round")
  parser.add_argument("--worker", action="store_true", help=argparse.SUPPRESS)
  args = parser.parse_args()
  if args.worker:
    return worker(args)
  for name in ("before", "after"):
    path = getattr(args, name)
    if not (path and os.path.isfile(os.path.join(path, "bert_keras", "modeling.py"))):
      parser.error("--%s=%s: not a folder holding bert_keras/modeling.py" % (name, path))
  workers = {}
  try:
    for name in ("before", "after"):
      workers[name] = _worker(name, getattr(args, name), args)
      print("%-6s built: %s" % (name, workers[name].info), flush=True)
    reps = {"train": args.steps, "xla": args.steps, "b1": args.requests, "b32": args.batches}
    measure = args.measure.split(",")
    keys = [k for k in reps if k in measure or (k in ("b1", "b32") and "serve" in measure)]
    times = {(name, key): [] for name in workers for key in keys}
    order = list(workers)
    for r in range(args.rounds):
      for name in order[r % 2:] + order[:r % 2]:
        for key in keys:
          times[name, key] += workers[name].time(key, reps[key])
        time.sleep(0.3)
  finally:
    for w in workers.values():
      w.close()
  medians = {"%s_%s" % (name, key): statistics.median(times[name, key])
             for name in workers for key in keys}
  ratios = {key: medians["before_" + key] / medians["after_" + key] for key in keys}
  print("\noptimizer: %s; %d rounds, medians; %d CPUs\n" % (
      args.optimizer, args.rounds, os.cpu_count()))
  print("| measure | before | after | after / before (speed) |")
  print("|---|---:|---:|---:|")
  for key in keys:
    if key == "b1":
      fig = (1e3 * medians["before_b1"], 1e3 * medians["after_b1"], "%.2f ms")
    elif key == "b32":
      fig = (32 / medians["before_b32"], 32 / medians["after_b32"], "%.1f /s")
    else:
      fig = (8 / medians["before_" + key], 8 / medians["after_" + key], "%.2f seq/s")
    row = "| %s | " + fig[2] + " | " + fig[2] + " | x%.3f |"
    print(row % (KEYS[key], fig[0], fig[1], ratios[key]))
  print(json.dumps({"optimizer": args.optimizer, "rounds": args.rounds,
                    "median_seconds": medians, "after_over_before_speed": ratios,
                    "workers": {n: w.info for n, w in workers.items()}}))


if __name__ == "__main__":
  main()
