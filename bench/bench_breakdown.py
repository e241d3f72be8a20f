"""Where the time goes: the figures behind docs/BENCHMARKS.md's NER and embeddings analyses.

  --part=ner         all-MiniLM-L6-v2 on WNUT-17's train.txt (../shared/data/ner/wnut17): how
                     much padding run_ner's trimmed batches of 32 hold; seconds per training
                     step (run_ner's Trainer over its TFRecords) with and without
                     BertModel.skip_padding; AdamWeightDecay's update of the 22.7M weights, as
                     one XLA pass (ours) and as the dozen TensorFlow ops it replaced.
  --part=embeddings  the CPU's float32 and bfloat16 matmul rates; the encoder at [32, 32]
                     (float32 graph, XLA, mixed_bfloat16 and its cosine to float32) and at
                     [1, 27] (graph, XLA); the embeddings SavedModel's in-graph tokenization
                     and the encoder alone on MRPC dev's 816 sentences in length-sorted
                     batches of 32, and (with --st_python) transformers' BertModel on the same
                     token ids (PyTorch, inference mode, in a Python of its own).

  python bench/bench_breakdown.py [--part=ner,embeddings] [--st_python=hf-venv/bin/python]
Prints a table per part; the last line is a JSON object of the figures.
"""

import argparse
import json
import os
import statistics
import subprocess
import sys
import tempfile
import time

import numpy as np

HERE = os.path.dirname(os.path.abspath(__file__))
sys.path.insert(0, HERE)
from shared_data import (check_executable, export_embeddings, median_seconds,  # noqa: E402
                         minilm_dir, mrpc_sentences, shared_data)

TORCH_SIDE = """
import json, sys, time, numpy as np, torch, transformers
model = transformers.BertModel.from_pretrained(sys.argv[1]).eval()
batches = [(torch.tensor(i.astype(np.int64)), torch.tensor(m.astype(np.int64)))
           for i, m in np.load(sys.argv[2], allow_pickle=True)]
n = sum(len(i) for i, _ in batches)
def rate():
  start = time.perf_counter()
  with torch.inference_mode():
    for i, m in batches:
      model(input_ids=i, attention_mask=m).last_hidden_state.numpy()
  return n / (time.perf_counter() - start)
rate()
print(json.dumps({"per_s": max(rate() for _ in range(3)), "threads": torch.get_num_threads()}))
"""


def _median_ms(fn, repeats):
  """The median milliseconds of fn() over `repeats` calls, after two warm-up calls."""
  return median_seconds(fn, repeats, warmups=2) * 1e3


# ----------------------------------------------------------------------------------------------

def ner_part(model_dir, data_dir, tmp):
  import tensorflow as tf
  from bert_keras import modeling, optimization, run_ner, tokenization
  from bert_keras.runtime import distribution, input_pipeline, settings, training
  from bert_keras.tasks.ner import tagging as ner
  path = next((os.path.join(data_dir, f"train.{e}") for e in ("txt", "conll")
               if os.path.exists(os.path.join(data_dir, f"train.{e}"))), None)
  if path is None:
    sys.exit(f"error: --ner_data_dir={data_dir}: no train.txt or train.conll")
  tokenizer = tokenization.FullTokenizer(os.path.join(model_dir, "vocab.txt"), True)
  sentences = ner.read_conll(path)
  labels = ner.tag_list(sentences)
  arrays = ner.window_arrays(ner.convert_sentences(sentences, tokenizer, labels, 128, 64), 128)
  lengths = arrays["input_mask"].sum(1)
  order = np.random.default_rng(0).permutation(len(lengths))
  padded = sum(len(b) * -(-b.max() // 8) * 8
               for b in (lengths[order[i:i + 32]] for i in range(0, len(order), 32)))
  record_file = os.path.join(tmp, "train.tf_record")
  ner.write_records(arrays, record_file)
  config = modeling.BertConfig.from_json_file(os.path.join(model_dir, "config.json"))
  run_settings = settings.RunSettings.from_flags(run_ner.options(trim_train_batches=True))
  strategy = distribution.strategy_for(run_settings.placement, None)
  figures = {"positions_per_real_piece": float(padded / lengths.sum())}
  for skip in (False, True):
    trainer = training.build_trainer(
        run_settings.training, strategy,
        lambda: modeling.BertTokenClassifier(config, len(labels)), ner.TaggerTask(), 1000, 100)
    trainer.model.bert.skip_padding = skip
    dataset = strategy.distribute_datasets_from_function(
        lambda context: input_pipeline.training_dataset(
            [record_file], ner.decode_fn(128), 32, context, seed=1, trim=True))
    iterator, loop = iter(dataset), trainer._build_train_loop()
    start = time.perf_counter()
    loop(iterator, tf.constant(1, tf.int32))["loss"].numpy()
    figures[f"first_step_s_skip_{skip}"] = time.perf_counter() - start
    per_step = []
    for _ in range(3):
      start = time.perf_counter()
      loop(iterator, tf.constant(10, tf.int32))["loss"].numpy()
      per_step.append((time.perf_counter() - start) / 10)
    figures[f"step_s_skip_{skip}"] = statistics.median(per_step)

  class OpsAdamWeightDecay(optimization.AdamWeightDecay):
    """The update as separate TensorFlow ops (what the XLA pass replaced)."""

    def update_step(self, gradient, variable, learning_rate):
      m, v = (s[self._get_variable_index(variable)] for s in (self._adam_m, self._adam_v))
      grad = tf.cast(gradient, variable.dtype)
      next_m = self.beta_1 * m + (1.0 - self.beta_1) * grad
      next_v = self.beta_2 * v + (1.0 - self.beta_2) * tf.square(grad)
      update = next_m / (tf.sqrt(next_v) + self.epsilon)
      if self.use_weight_decay(variable):
        update += self.weight_decay_rate * variable
      self.assign(m, next_m)
      self.assign(v, next_v)
      self.assign(variable, variable - tf.cast(learning_rate, variable.dtype) * update)

  variables = modeling.BertTokenClassifier(config, len(labels)).trainable_variables
  grads = [tf.random.normal(v.shape) * 1e-3 for v in variables]
  for name, cls in (("xla", optimization.AdamWeightDecay), ("ops", OpsAdamWeightDecay)):
    optimizer = cls(learning_rate=1e-5, weight_decay_rate=0.01, global_clipnorm=1.0,
                    exclude_from_weight_decay=["LayerNorm", "layer_norm", "bias"])
    optimizer.build(variables)
    apply = tf.function(lambda: optimizer.apply(grads, variables))
    figures[f"adamw_apply_ms_{name}"] = _median_ms(lambda: (apply(), variables[0].numpy()), 10)
  figures["weights"] = int(sum(np.prod(v.shape) for v in variables))
  print(f"NER (all-MiniLM-L6-v2, WNUT-17 train.txt, batches of 32 trimmed to the longest)\n"
        f"| | value |\n|---|---:|\n"
        f"| positions per real piece | {figures['positions_per_real_piece']:.2f} |\n"
        f"| training step, full [B, S] | {figures['step_s_skip_False']:.3f} s |\n"
        f"| training step, skip_padding | {figures['step_s_skip_True']:.3f} s |\n"
        f"| first step (trace, graph optimisation, XLA) | "
        f"{figures['first_step_s_skip_True']:.1f} s |\n"
        f"| AdamWeightDecay update, one XLA pass | {figures['adamw_apply_ms_xla']:.1f} ms |\n"
        f"| AdamWeightDecay update, TensorFlow ops | {figures['adamw_apply_ms_ops']:.1f} ms |\n")
  return figures


# ----------------------------------------------------------------------------------------------

def embeddings_part(model_dir, mrpc_dev, st_python, tmp):
  import tensorflow as tf
  from bert_keras import checkpoints, modeling
  figures = {}
  a = tf.random.normal([2048, 2048])
  for dtype in (tf.float32, tf.bfloat16):
    x = tf.cast(a, dtype)
    matmul = tf.function(lambda x=x: tf.matmul(x, x))
    ms = _median_ms(lambda: matmul().numpy(), 10)
    figures[f"matmul_gflops_{dtype.name}"] = 2 * 2048 ** 3 / ms / 1e6
  encoder = checkpoints.load_model(model_dir)
  rng = np.random.default_rng(0)

  def encoder_ms(model, batch, length, jit=False):
    ids = tf.constant(rng.integers(1000, 20000, (batch, length)), tf.int32)
    mask = tf.ones((batch, length), tf.int32)
    run = tf.function(lambda: tf.cast(model({"input_ids": ids, "input_mask": mask})[
        "sequence_output"], tf.float32), jit_compile=jit)
    return _median_ms(lambda: run().numpy(), 20), run().numpy()

  figures["encoder_32x32_ms"], full = encoder_ms(encoder, 32, 32)
  figures["encoder_32x32_xla_ms"], _ = encoder_ms(encoder, 32, 32, jit=True)
  bf16 = modeling.BertModel(encoder.config, dtype="mixed_bfloat16")
  bf16.set_weights(encoder.get_weights())
  rng = np.random.default_rng(0)  # the same ids again
  figures["encoder_32x32_bf16_ms"], half = encoder_ms(bf16, 32, 32)
  e, f = full.mean(1), half.mean(1)
  e, f = (x / np.linalg.norm(x, axis=1, keepdims=True) for x in (e, f))
  figures["bf16_min_cosine"] = float((e * f).sum(1).min())
  figures["bf16_max_abs_diff"] = float(np.abs(e - f).max())
  c = encoder.config
  figures["encoder_32x32_gflop"] = 32 * 32 * c.num_hidden_layers * 2 * (
      4 * c.hidden_size ** 2 + 2 * c.hidden_size * c.intermediate_size) / 1e9
  figures["encoder_1x27_ms"], _ = encoder_ms(encoder, 1, 27)
  figures["encoder_1x27_xla_ms"], _ = encoder_ms(encoder, 1, 27, jit=True)

  sentences = mrpc_sentences(mrpc_dev)
  order = sorted(range(len(sentences)), key=lambda i: -len(sentences[i]))
  batches = [[sentences[j] for j in order[i:i + 32]] for i in range(0, len(order), 32)]
  export_dir = os.path.join(tmp, "embeddings")
  export_embeddings(model_dir, export_dir)
  preprocess = tf.saved_model.load(export_dir).signatures["preprocess"]
  features = [preprocess(text_a=tf.constant(b), text_b=tf.constant([""] * len(b)))
              for b in batches]
  figures["preprocess_per_s"] = len(sentences) / _median_ms(lambda: [preprocess(
      text_a=tf.constant(b), text_b=tf.constant([""] * len(b))) for b in batches], 3) * 1e3
  longest = [int(f["input_mask"].numpy().sum(1).max()) for f in features]
  ids = [(f["input_ids"].numpy()[:, :n], f["input_mask"].numpy()[:, :n])
         for f, n in zip(features, longest)]
  encoder.skip_padding = True  # (as the SavedModel runs it)
  run = tf.function(lambda i, m: encoder({"input_ids": i, "input_mask": m})["sequence_output"],
                    reduce_retracing=True)
  figures["encoder_mrpc_per_s"] = len(sentences) / _median_ms(
      lambda: [run(i, m).numpy() for i, m in ids], 3) * 1e3
  if st_python:
    ids_file = os.path.join(tmp, "ids.npy")
    np.save(ids_file, np.array(ids, dtype=object), allow_pickle=True)
    done = subprocess.run([st_python, "-c", TORCH_SIDE, model_dir, ids_file],
                          capture_output=True, text=True)
    if done.returncode != 0:
      sys.exit("error: the PyTorch side failed: " + done.stderr[-2000:])
    figures["torch_encoder_mrpc_per_s"] = json.loads(done.stdout.strip().splitlines()[-1])[
        "per_s"]
  peak = figures["matmul_gflops_float32"]
  achieved = figures["encoder_32x32_gflop"] / figures["encoder_32x32_ms"] * 1e3
  torch_row = (f"| transformers' BertModel, the same batches | "
               f"{figures['torch_encoder_mrpc_per_s']:.0f} sentences/s |\n" if st_python else "")
  print(f"Embeddings (all-MiniLM-L6-v2)\n| | value |\n|---|---:|\n"
        f"| float32 matmul 2048^3 | {peak:.0f} GFLOP/s |\n"
        f"| bfloat16 matmul 2048^3 | {figures['matmul_gflops_bfloat16']:.0f} GFLOP/s |\n"
        f"| encoder [32, 32] float32 ({figures['encoder_32x32_gflop']:.1f} GFLOP) | "
        f"{figures['encoder_32x32_ms']:.1f} ms: {achieved:.0f} GFLOP/s, "
        f"{100 * achieved / peak:.0f}% of the matmul's |\n"
        f"| encoder [32, 32] XLA | {figures['encoder_32x32_xla_ms']:.1f} ms |\n"
        f"| encoder [32, 32] mixed_bfloat16 | {figures['encoder_32x32_bf16_ms']:.1f} ms "
        f"(cosine >= {figures['bf16_min_cosine']:.5f}) |\n"
        f"| encoder [1, 27] graph / XLA | {figures['encoder_1x27_ms']:.2f} / "
        f"{figures['encoder_1x27_xla_ms']:.2f} ms |\n"
        f"| in-graph tokenization, {len(batches)} length-sorted MRPC batches | "
        f"{figures['preprocess_per_s']:,.0f} sentences/s |\n"
        f"| our encoder, the same batches | {figures['encoder_mrpc_per_s']:.0f} sentences/s |\n"
        + torch_row)
  return figures


def main():
  parser = argparse.ArgumentParser(description=__doc__.split("\n")[0])
  parser.add_argument("--part", default="ner,embeddings")
  parser.add_argument("--st_python", default=None,
                      help="a Python with torch and transformers: adds their encoder's rate")
  parser.add_argument("--ner_data_dir", default=shared_data("ner", "wnut17"))
  parser.add_argument("--mrpc_dev", default=shared_data("glue", "MRPC", "dev.tsv"))
  args = parser.parse_args()
  parts = [p.strip() for p in args.part.split(",") if p.strip()]
  for part in parts:
    if part not in ("ner", "embeddings"):
      sys.exit(f"error: --part={args.part}: parts are ner and embeddings")
  if args.st_python:
    check_executable(args, "st_python")
  if "embeddings" in parts and not os.path.isfile(args.mrpc_dev):
    sys.exit(f"error: --mrpc_dev={args.mrpc_dev}: no such file")
  if "ner" in parts and not os.path.isdir(args.ner_data_dir):
    sys.exit(f"error: --ner_data_dir={args.ner_data_dir}: no such directory")
  model_dir = minilm_dir()
  from bert_keras.utils import quiet_tensorflow  # noqa: F401
  figures = {"cpus": os.cpu_count()}
  with tempfile.TemporaryDirectory() as tmp:
    if "ner" in parts:
      figures["ner"] = ner_part(model_dir, args.ner_data_dir, tmp)
    if "embeddings" in parts:
      figures["embeddings"] = embeddings_part(model_dir, args.mrpc_dev, args.st_python, tmp)
  print(json.dumps(figures))


if __name__ == "__main__":
  main()
