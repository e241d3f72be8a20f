"""Two choices of modeling.py on JAX, each timed against its alternative in one process on this
CPU (docs/BENCHMARKS.md, "The same two choices on a CPU" under "On a GPU"):

  attention  the encoder's forward pass (BERT-Small, float32, batch 32, seq 128) with the
             attention written out (what runs on a CPU) against jax.nn.dot_product_attention's
             XLA implementation in its place (SelfAttention's fused path, XLA standing in for
             cuDNN, which a CPU does not have); the largest difference of the outputs too;
  dropout    a pretraining step (BERT-Small, float32, batch 8, seq 128, 20 masked positions,
             AdamWeightDecay; one jax.jit of stateless_call + value_and_grad + stateless_apply)
             with its dropout masks from JAX's default generator (threefry) against "rbg"
             (set after the model is built; see utils/jax_ops.dropout_key).

Both sides of each pair are compiled first, then timed in --rounds interleaved rounds (the order
alternating); each figure is the median over the rounds.

  python bench/bench_jax_variants.py [--rounds=7] [--quick]
Prints a table; the last line is a JSON object with every figure.
"""

import argparse
import json
import os
import statistics
import sys
import time

os.environ["KERAS_BACKEND"] = "jax"
sys.path.insert(0, os.path.join(os.path.dirname(os.path.abspath(__file__)), "gpu"))

SMALL = dict(vocab_size=30522, hidden_size=512, num_hidden_layers=4, num_attention_heads=8,
             intermediate_size=2048)
TINY = dict(vocab_size=512, hidden_size=64, num_hidden_layers=2, num_attention_heads=2,
            intermediate_size=128)


def attention_pair(jax, modeling, jax_ops, config, batch, seq):
  """{"written out": fn, "xla dot_product_attention": fn}, each running the encoder once; and
  the largest |difference| of their sequence outputs."""
  import numpy as np
  model = modeling.BertModel(config)
  rng = np.random.RandomState(0)
  inputs = {"input_ids": rng.randint(1, config.vocab_size, (batch, seq)).astype("int32"),
            "input_mask": np.ones((batch, seq), "int32"),
            "segment_ids": np.zeros((batch, seq), "int32")}
  model(inputs)
  weights = ([v.value for v in model.trainable_variables],
             [v.value for v in model.non_trainable_variables])

  def compiled():  # a new function each time: jax.jit caches a trace by its function
    def encoder(trainable, non_trainable, x):
      return model.stateless_call(trainable, non_trainable, x)[0]["sequence_output"]
    step = jax.jit(encoder)
    out = np.asarray(step(*weights, inputs))
    return (lambda: step(*weights, inputs).block_until_ready()), out

  written_out, plain = compiled()
  fused_attention = modeling.SelfAttention._fused_attention
  cudnn_attention = jax_ops.cudnn_attention
  modeling.SelfAttention._fused_attention = lambda self, training: None if training else "cudnn"
  jax_ops.cudnn_attention = lambda q, k, v, bias: jax.nn.dot_product_attention(
      q, k, v, bias=bias, implementation="xla")
  try:
    xla, fused = compiled()
  finally:
    modeling.SelfAttention._fused_attention = fused_attention
    jax_ops.cudnn_attention = cudnn_attention
  return {"written out": written_out, "xla dot_product_attention": xla}, float(
      np.abs(plain - fused).max())


def dropout_pair(jax, modeling, optimization, config, batch, seq):
  """{"threefry": fn, "rbg": fn}, each running one training step on its own state."""
  import numpy as np
  import bench_gpu  # its random pretraining batch
  model = modeling.BertPretrainer(config)
  optimizer = optimization.create_optimizer(1e-4, 10000, 100)
  optimizer.build(model.trainable_variables)
  features = bench_gpu._random_batch(np.random.RandomState(0), config.vocab_size, seq, batch,
                                     "train")
  model(features)

  steps = {}
  for name, impl in (("threefry", "threefry2x32"), ("rbg", "rbg")):
    jax.config.update("jax_default_prng_impl", impl)
    # a new function, so a new trace, per generator
    step = jax.jit(bench_gpu.jax_train_step(jax, modeling, model, optimizer))
    holder = {"state": bench_gpu.jax_train_state(model, optimizer)}

    def run(step=step, holder=holder):
      holder["state"], loss = step(holder["state"], features)
      loss.block_until_ready()
    run()
    steps[name] = run
  jax.config.update("jax_default_prng_impl", "threefry2x32")
  return steps


def interleaved(pair, rounds, repeats):
  """{name: median ms of one call} over `rounds` rounds of `repeats` calls, order alternating."""
  times = {name: [] for name in pair}
  for r in range(rounds):
    for name in (list(pair) if r % 2 == 0 else list(pair)[::-1]):
      start = time.perf_counter()
      for _ in range(repeats):
        pair[name]()
      times[name].append(1e3 * (time.perf_counter() - start) / repeats)
  return {name: statistics.median(values) for name, values in times.items()}


def main():
  parser = argparse.ArgumentParser(description=__doc__.split("\n")[0])
  parser.add_argument("--rounds", type=int, default=7)
  parser.add_argument("--quick", action="store_true", help="tiny config, 2 rounds: checks the "
                      "script works")
  args = parser.parse_args()
  if args.rounds < 1:
    sys.exit("error: --rounds=%d: must be >= 1" % args.rounds)
  import jax
  import keras  # noqa: F401  (before bert_keras, which registers its classes with it)
  from bert_keras import modeling, optimization
  from bert_keras.utils import jax_ops
  config = modeling.BertConfig.from_dict(TINY if args.quick else SMALL)
  rounds = 2 if args.quick else args.rounds
  attention, difference = attention_pair(jax, modeling, jax_ops, config, 4 if args.quick else 32,
                                         32 if args.quick else 128)
  dropout = dropout_pair(jax, modeling, optimization, config, 2 if args.quick else 8,
                         32 if args.quick else 128)
  figures = {"attention": interleaved(attention, rounds, 3),
             "dropout": interleaved(dropout, rounds, 4)}
  print("JAX %s on %s; %s; %d interleaved rounds, medians" % (
      jax.__version__, jax.devices()[0].device_kind, "tiny" if args.quick else "BERT-Small",
      rounds))
  print("| pair | variant | ms | vs the first |")
  print("|---|---|---:|---:|")
  for pair, times in figures.items():
    first = next(iter(times.values()))
    for name, ms in times.items():
      print("| %s | %s | %.1f | %.2fx |" % (pair, name, ms, ms / first))
  print("attention outputs: largest |difference| %.3g" % difference)
  print(json.dumps({"jax": jax.__version__, "quick": args.quick, "rounds": rounds,
                    "ms": figures, "attention_max_abs_diff": difference}))


if __name__ == "__main__":
  main()
