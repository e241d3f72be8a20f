"""BERT on one GPU without TensorFlow: our Keras model on JAX (XLA, bfloat16) against HuggingFace
transformers' BertForPreTraining on PyTorch, same chip, same shapes.

For a GPU host with JAX and PyTorch on CUDA 13 and no TensorFlow, no Keras and no network:
run.sh beside this file installs the wheels listed in requirements.txt from a local folder
(fetch_wheels.sh downloads them on a machine that has a network) and runs this script.

Measures, for BERT-Base and BERT-Large (the original's configs, vocabulary 30522):
  train   one pre-training step (masked LM on 20 of 128 / 80 of 512 positions + next
          sentence, gradients, global-norm clipping at 1.0, the optimizer's update) at
          sequence 128 and 512:
            ours   modeling.BertPretrainer, mixed_bfloat16 policy, optimization's
                   AdamWeightDecay (the original's), one jax.jit step (stateless_call +
                   stateless_apply, buffers donated)
            hf     transformers BertForPreTraining (SDPA attention), bfloat16 autocast,
                   torch.optim.AdamW(fused=True), clip_grad_norm_ 1.0, eager PyTorch
  infer   the encoder's forward pass (sequence and pooled output) at sequence 128:
            ours   modeling.BertModel under jax.jit, mixed_bfloat16
            hf     transformers BertModel, bfloat16 autocast, torch.inference_mode
Each figure is sequences/s over timed steps after warm-up (the first call's compile time is
reported apart), and model FLOPs utilisation: the model's matmul FLOPs per sequence
(runtime/flops.py, the same count for both: HuggingFace's head also scores the unmasked
positions, work the count does not credit) x sequences/s / the chip's dense bfloat16 peak
(the datasheet's; the measured peak of a large bfloat16 matmul is reported beside it).

JAX and PyTorch run in separate processes, one after the other, each with the GPU to itself.
Every run is kept to a time budget (--budget_s, whole script), in the order of RUNS; what
does not fit is reported as skipped. A run that runs out of memory is retried at half batch.

  bash bench/gpu/run.sh                                  # on the GPU host, < 8 minutes
  python bench/gpu/bench_gpu.py --tiny                   # anywhere: tiny config, CPU
Where the time goes (a few minutes more; kernel_profile.py; docs/BENCHMARKS.md has the commands):
  bash bench/gpu/run.sh --runs=train:large:128:256,train:large:512:32 --profile_steps=3
  bash bench/gpu/run.sh --runs=train:large:128:256 --peers=jax --prng=rbg
Prints a table; the last line is a JSON object with every figure.
"""

import argparse
import hashlib
import json
import os
import pathlib
import subprocess
import sys
import tempfile
import time
import traceback
import types

import kernel_profile  # beside this file

REPO = pathlib.Path(__file__).resolve().parent.parent.parent

CONFIGS = {
    "base": dict(vocab_size=30522, hidden_size=768, num_hidden_layers=12, num_attention_heads=12,
                 intermediate_size=3072),
    "large": dict(vocab_size=30522, hidden_size=1024, num_hidden_layers=24,
                  num_attention_heads=16, intermediate_size=4096),
    "tiny": dict(vocab_size=512, hidden_size=64, num_hidden_layers=2, num_attention_heads=2,
                 intermediate_size=128),
}
COMMON = dict(hidden_act="gelu", hidden_dropout_prob=0.1, attention_probs_dropout_prob=0.1,
              max_position_embeddings=512, type_vocab_size=2, initializer_range=0.02)
# (job, model, sequence length, batch), in the order they run: what matters most first.
RUNS = [("train", "large", 128, 256), ("train", "base", 128, 256), ("infer", "base", 128, 256),
        ("infer", "large", 128, 256), ("train", "large", 512, 32), ("train", "base", 512, 64)]
TINY_RUNS = [("train", "tiny", 32, 4), ("infer", "tiny", 32, 4)]
PREDICTIONS = {128: 20, 512: 80}   # masked positions per sequence (the original's recipe)
# Dense (no sparsity) bfloat16 tensor-core peaks from the datasheets, FLOP/s.
PEAKS = {"H200": 989e12, "H100": 989e12, "A100": 312e12, "L4": 121e12, "A10": 125e12}


def predictions(seq):
  return PREDICTIONS.get(seq, max(1, round(seq * 0.15)))


def flops_per_sequence(job, model, seq):
  """Model matmul FLOPs per sequence: a training step's (forward x 3) or a forward pass's."""
  sys.path.insert(0, _package_path())
  from bert_keras.runtime import flops   # plain arithmetic: no Keras, no TensorFlow
  config = types.SimpleNamespace(**COMMON, **CONFIGS[model])
  if job == "train":
    return flops.bert_training_flops_per_sequence(config, seq, predictions(seq))
  h, i, layers = config.hidden_size, config.intermediate_size, config.num_hidden_layers
  return seq * layers * (2 * (4 * h * h + 2 * h * i) + 4 * seq * h) + 2 * h * h


def _package_path():
  """A folder holding `bert_keras` -> this checkout (the repository root is the package): one
  folder per checkout, so that two checkouts (or a stale link) do not meet."""
  folder = os.path.join(tempfile.gettempdir(), "bert_keras_gpu_bench_%s" % hashlib.sha1(
      str(REPO).encode()).hexdigest()[:12])
  os.makedirs(folder, exist_ok=True)
  link = os.path.join(folder, "bert_keras")
  if os.path.realpath(link) != str(REPO.resolve()):
    temporary = "%s.%d" % (link, os.getpid())
    os.symlink(str(REPO), temporary)
    os.replace(temporary, link)
  return folder


def _timed(step, sync, args):
  """Calls step() until args.min_time has passed (at least min_steps, at most max_steps), then
  sync() (waits for the device) -> (steps, seconds from the first call to the end of sync)."""
  start, steps = time.perf_counter(), 0
  while steps < args.max_steps and (steps < args.min_steps
                                    or time.perf_counter() - start < args.min_time):
    step()
    steps += 1
  sync()
  return steps, time.perf_counter() - start


# ----------------------------------------------------------------------------------------------
# Ours: Keras on JAX
# ----------------------------------------------------------------------------------------------

def jax_worker(runs, args):
  os.environ["KERAS_BACKEND"] = "jax"
  sys.path.insert(0, _package_path())
  import jax
  import keras
  import numpy as np
  from bert_keras import modeling, optimization
  assert "tensorflow" not in sys.modules, "TensorFlow was imported on the JAX path"
  keras.mixed_precision.set_global_policy(args.policy)
  yield {"worker": "jax", "jax": jax.__version__, "keras": keras.__version__,
         "device": str(jax.devices()[0].device_kind), "platform": jax.devices()[0].platform,
         "matmul_peak": _jax_matmul_peak(jax, args.tiny)}
  rng = np.random.RandomState(0)
  for job, model, seq, batch in runs:
    while True:
      try:
        start = time.perf_counter()
        # Each run: clear_session() below resets the global policy to float32.
        keras.mixed_precision.set_global_policy(args.policy)
        config = modeling.BertConfig.from_dict({**COMMON, **CONFIGS[model]})
        inputs = _random_batch(rng, config.vocab_size, seq, batch, job)
        run = _jax_train if job == "train" else _jax_infer
        record = run(jax, keras, modeling, optimization, config, inputs, args)
        yield {"peer": "ours", "job": job, "model": model, "seq": seq, "batch": batch,
               **record, "wall_s": round(time.perf_counter() - start, 1)}
        break
      except Exception as e:  # noqa: BLE001  (an out-of-memory run is retried at half batch)
        if "RESOURCE_EXHAUSTED" in str(e) and batch > 1:
          batch //= 2
          continue
        yield {"peer": "ours", "job": job, "model": model, "seq": seq, "batch": batch,
               "error": "%s: %s" % (type(e).__name__, str(e).splitlines()[0][:300])}
        traceback.print_exc()
        break
      finally:
        keras.backend.clear_session()
        jax.config.update("jax_default_prng_impl", "threefry2x32")


def _jax_matmul_peak(jax, tiny):
  n = 512 if tiny else 8192
  import jax.numpy as jnp
  a = jnp.ones((n, n), jnp.bfloat16)
  f = jax.jit(lambda x: x @ x)
  f(a).block_until_ready()
  start, repeats = time.perf_counter(), 3 if tiny else 20
  for _ in range(repeats):
    y = f(a)
  y.block_until_ready()
  return 2.0 * n ** 3 * repeats / (time.perf_counter() - start)


def _random_batch(rng, vocab, seq, batch, job):
  """Random token ids, every position real, segment B the second half; for "train" also
  masked-LM positions, ids and weights and next-sentence labels. NumPy arrays."""
  import numpy as np
  p = predictions(seq)
  features = {"input_ids": rng.randint(1, vocab, (batch, seq)).astype("int32"),
              "input_mask": np.ones((batch, seq), "int32"),
              "segment_ids": (np.arange(seq)[None] >= seq // 2).repeat(batch, 0).astype("int32")}
  if job == "train":
    positions = np.sort(np.stack([rng.choice(np.arange(1, seq), p, replace=False)
                                  for _ in range(batch)]), axis=1).astype("int32")
    features.update(masked_lm_positions=positions,
                    masked_lm_ids=rng.randint(1, vocab, (batch, p)).astype("int32"),
                    masked_lm_weights=np.ones((batch, p), "float32"),
                    next_sentence_labels=rng.randint(0, 2, (batch, 1)).astype("int32"))
  return features


def jax_train_step(jax, modeling, model, optimizer, loss_of=None):
  """train_step(state, batch) -> (state, loss): the gradients of loss_of(outputs, batch) (default:
  losses.pretraining_loss) and the optimizer's update, as Keras's JAX trainer does it
  (stateless_call, value_and_grad, stateless_apply); state as jax_train_state makes it. Not
  jitted."""
  if loss_of is None:
    from bert_keras import losses
    loss_of = losses.pretraining_loss

  def loss_fn(trainable, non_trainable, batch):
    outputs, non_trainable = model.stateless_call(trainable, non_trainable, batch, training=True)
    return loss_of(outputs, batch), non_trainable

  grad_fn = jax.value_and_grad(loss_fn, has_aux=True)

  def train_step(state, batch):
    trainable, non_trainable, optimizer_vars = state
    (loss, non_trainable), grads = grad_fn(trainable, non_trainable, batch)
    trainable, optimizer_vars = optimizer.stateless_apply(optimizer_vars, grads, trainable)
    return (trainable, non_trainable, optimizer_vars), loss

  return train_step


def jax_train_state(model, optimizer):
  """The variables' values as a tuple of lists, as train_step returns them: another pytree
  structure would compile the step again."""
  return ([v.value for v in model.trainable_variables],
          [v.value for v in model.non_trainable_variables],
          [v.value for v in optimizer.variables])


def _jax_train(jax, keras, modeling, optimization, config, features, args):
  start = time.perf_counter()
  model = modeling.BertPretrainer(config)
  optimizer = optimization.create_optimizer(1e-4, 10000, 100, optimizer_type=args.optimizer)
  optimizer.build(model.trainable_variables)
  build_s = time.perf_counter() - start
  # After building (Keras's initializers take threefry's keys only), before the step is traced.
  jax.config.update("jax_default_prng_impl", args.prng)
  batch = {k: jax.device_put(v) for k, v in features.items()}
  step_fn = jax.jit(jax_train_step(jax, modeling, model, optimizer), donate_argnums=0)
  state = jax_train_state(model, optimizer)
  holder = {"state": state}

  def step():
    holder["state"], holder["loss"] = step_fn(holder["state"], batch)

  start = time.perf_counter()
  step()
  jax.block_until_ready(holder["loss"])
  compile_s = time.perf_counter() - start
  first_loss = float(holder["loss"])
  step()
  jax.block_until_ready(holder["loss"])
  sync = lambda: jax.block_until_ready(holder["state"])
  steps, seconds = _timed(step, sync, args)
  record = {"build_s": round(build_s, 1), "compile_s": round(compile_s, 2), "steps": steps,
            "seconds": seconds, "seq_per_s": steps * len(features["input_ids"]) / seconds,
            "first_loss": first_loss, "last_loss": float(holder["loss"]), "prng": args.prng}
  if args.profile_steps:
    record["profile"] = _profile(kernel_profile.jax_profile, jax, step, sync,
                                 args.profile_steps, jax.devices()[0].platform)
  return record


def _jax_infer(jax, keras, modeling, optimization, config, features, args):
  """The encoder's forward pass; with --compare_attention, where its attention runs fused
  (cuDNN's flash attention on a GPU in bfloat16), the same pass with the attention written out
  is timed too, and the two outputs compared."""
  import numpy as np
  from bert_keras.utils import jax_ops
  model = modeling.BertModel(config)
  batch = {k: jax.device_put(features[k]) for k in ("input_ids", "input_mask", "segment_ids")}
  arguments = ([v.value for v in model.trainable_variables],
               [v.value for v in model.non_trainable_variables], batch)

  def forward():  # a new function each call: jax.jit caches its trace by the function
    def encoder(trainable, non_trainable, batch):
      outputs, _ = model.stateless_call(trainable, non_trainable, batch, training=False)
      return outputs["sequence_output"], outputs["pooled_output"]
    return jax.jit(encoder)

  record = {"attention": modeling.SelfAttention._fused_attention(
      model.encoder_layers[0].attention, False) or "written out"}
  batch_size, seq = features["input_ids"].shape
  heads = config.num_attention_heads
  if record["attention"] == "cudnn" and not jax_ops.cudnn_takes(
      (batch_size, seq, heads, config.hidden_size // heads), model.compute_dtype):
    record["attention"] = "written out (cuDNN refused)"
  fused = _jax_time_forward(jax, forward(), arguments, args)
  record.update({k: fused[k] for k in ("compile_s", "steps", "seconds", "seq_per_s")})
  if record["attention"] == "cudnn" and args.compare_attention:
    fused_attention = modeling.SelfAttention._fused_attention
    modeling.SelfAttention._fused_attention = lambda self, training: None
    try:
      plain = _jax_time_forward(jax, forward(), arguments, args)
    finally:
      modeling.SelfAttention._fused_attention = fused_attention
    record["written_out_seq_per_s"] = plain["seq_per_s"]
    fused_out, plain_out = (np.asarray(r["out"][0], "float32") for r in (fused, plain))
    record["max_abs_diff_vs_written_out"] = float(np.abs(fused_out - plain_out).max())
  if args.profile_steps:
    record["profile"] = _profile(kernel_profile.jax_profile, jax, fused["step"], fused["sync"],
                                 args.profile_steps, jax.devices()[0].platform)
  return record


def _profile(profiler, *arguments):
  """profiler(*arguments), or {"error": ...}: a failing profiler costs the profile, not the
  run's figures."""
  try:
    return profiler(*arguments)
  except Exception as e:  # noqa: BLE001
    traceback.print_exc()
    return {"error": "%s: %s" % (type(e).__name__, str(e).splitlines()[0][:200] if str(e) else "")}


def _jax_time_forward(jax, forward, arguments, args):
  start = time.perf_counter()
  out = jax.block_until_ready(forward(*arguments))
  compile_s = time.perf_counter() - start
  holder = {}

  def step():
    holder["out"] = forward(*arguments)

  sync = lambda: jax.block_until_ready(holder["out"])
  steps, seconds = _timed(step, sync, args)
  return {"compile_s": round(compile_s, 2), "steps": steps, "seconds": seconds,
          "seq_per_s": steps * len(arguments[2]["input_ids"]) / seconds, "out": out,
          "step": step, "sync": sync}


# ----------------------------------------------------------------------------------------------
# The peer: HuggingFace transformers on PyTorch
# ----------------------------------------------------------------------------------------------

def torch_worker(runs, args):
  import numpy
  try:
    import torch
    import transformers
  except ImportError as e:
    yield {"worker": "torch", "error": "%s is not installed" % e.name}
    return
  device = "cuda" if torch.cuda.is_available() else "cpu"
  yield {"worker": "torch", "torch": torch.__version__, "transformers": transformers.__version__,
         "device": torch.cuda.get_device_name() if device == "cuda" else "cpu"}
  rng = numpy.random.RandomState(0)
  for job, model, seq, batch in runs:
    while True:
      try:
        # gelu_new: the tanh form, the original's (and ours).
        config = transformers.BertConfig(**{**COMMON, **CONFIGS[model], "hidden_act": "gelu_new"},
                                         layer_norm_eps=1e-12)
        features = _random_batch(rng, config.vocab_size, seq, batch, job)
        run = _torch_train if job == "train" else _torch_infer
        yield {"peer": "hf", "job": job, "model": model, "seq": seq, "batch": batch,
               **run(torch, transformers, config, features, device, args)}
        break
      except Exception as e:  # noqa: BLE001
        if isinstance(e, torch.OutOfMemoryError) and batch > 1:
          batch //= 2
          torch.cuda.empty_cache()
          continue
        yield {"peer": "hf", "job": job, "model": model, "seq": seq, "batch": batch,
               "error": "%s: %s" % (type(e).__name__, str(e).splitlines()[0][:300])}
        traceback.print_exc()
        break
      finally:
        if device == "cuda":
          torch.cuda.empty_cache()


def _sync(torch, device):
  if device == "cuda":
    torch.cuda.synchronize()


def _torch_train(torch, transformers, config, features, device, args):
  model = transformers.BertForPreTraining._from_config(config, attn_implementation="sdpa")
  model.to(device).train()
  optimizer = torch.optim.AdamW(model.parameters(), lr=1e-4, weight_decay=0.01,
                                fused=device == "cuda")
  t = {k: torch.as_tensor(v, device=device) for k, v in features.items()}
  t["input_ids"] = t["input_ids"].long()
  labels = torch.full_like(t["input_ids"], -100, dtype=torch.long)
  labels.scatter_(1, t["masked_lm_positions"].long(), t["masked_lm_ids"].long())
  holder = {}

  def step():
    with torch.autocast(device_type=device, dtype=torch.bfloat16):
      out = model(input_ids=t["input_ids"], attention_mask=t["input_mask"],
                  token_type_ids=t["segment_ids"], labels=labels,
                  next_sentence_label=t["next_sentence_labels"][:, 0].long())
    out.loss.backward()
    torch.nn.utils.clip_grad_norm_(model.parameters(), 1.0)
    optimizer.step()
    optimizer.zero_grad(set_to_none=True)
    holder["loss"] = out.loss.detach()

  start = time.perf_counter()
  step()
  _sync(torch, device)
  warm_s = time.perf_counter() - start
  first_loss = float(holder["loss"])
  step()
  _sync(torch, device)
  steps, seconds = _timed(step, lambda: _sync(torch, device), args)
  record = {"compile_s": round(warm_s, 2), "steps": steps, "seconds": seconds,
            "seq_per_s": steps * len(features["input_ids"]) / seconds,
            "first_loss": first_loss, "last_loss": float(holder["loss"])}
  return _torch_profiled(torch, step, device, args, record)


def _torch_infer(torch, transformers, config, features, device, args):
  model = transformers.BertModel._from_config(config, attn_implementation="sdpa")
  model.to(device).eval()
  t = {k: torch.as_tensor(features[k], device=device)
       for k in ("input_ids", "input_mask", "segment_ids")}
  holder = {}

  def step():
    with torch.inference_mode(), torch.autocast(device_type=device, dtype=torch.bfloat16):
      holder["out"] = model(input_ids=t["input_ids"], attention_mask=t["input_mask"],
                            token_type_ids=t["segment_ids"])
  start = time.perf_counter()
  step()
  _sync(torch, device)
  warm_s = time.perf_counter() - start
  step()
  _sync(torch, device)
  steps, seconds = _timed(step, lambda: _sync(torch, device), args)
  record = {"compile_s": round(warm_s, 2), "steps": steps, "seconds": seconds,
            "seq_per_s": steps * len(features["input_ids"]) / seconds}
  return _torch_profiled(torch, step, device, args, record)


def _torch_profiled(torch, step, device, args, record):
  """record, with the kernels' times of --profile_steps more steps where asked."""
  if args.profile_steps:
    record["profile"] = _profile(kernel_profile.torch_profile, torch, step,
                                 lambda: _sync(torch, device), args.profile_steps, device)
  return record


# ----------------------------------------------------------------------------------------------
# The parent: one worker process per framework, a table and a JSON line
# ----------------------------------------------------------------------------------------------

def run_worker(name, runs, args, budget_s):
  """Runs `name`'s worker in a child process with `budget_s` seconds; its records."""
  command = [sys.executable, __file__, "--worker", name, "--worker_runs", json.dumps(runs)]
  command += [a for a in sys.argv[1:] if not a.startswith(("--worker", "--runs"))]
  records = []
  with tempfile.TemporaryFile("w+") as out, tempfile.TemporaryFile("w+") as err:
    try:
      proc = subprocess.run(command, stdout=out, stderr=err, timeout=budget_s, check=False)
      failed = proc.returncode != 0
    except subprocess.TimeoutExpired:
      records.append({"worker": name, "error": "stopped at its time budget (%d s)" % budget_s})
      failed = False
    out.seek(0)
    for line in out:
      if line.startswith("RECORD "):
        records.append(json.loads(line[len("RECORD "):]))
    err.seek(0)
    text = err.read()
    sys.stderr.write(text)
    if failed:
      last = [line for line in text.splitlines() if line.strip()][-1:] or ["no output"]
      records.append({"worker": name, "error": "worker failed: " + last[0][:300]})
  done = {(r["job"], r["model"], r["seq"]) for r in records if "job" in r}
  failed = [r["error"] for r in records if "worker" in r and "error" in r]
  for job, model, seq, batch in runs:
    if (job, model, seq) not in done:
      records.append({"peer": "ours" if name == "jax" else "hf", "job": job, "model": model,
                      "seq": seq, "batch": batch,
                      "error": "skipped: " + (failed[0] if failed else "time budget")})
  return records


def chip_peak(device_name):
  for key, value in PEAKS.items():
    if key in (device_name or ""):
      return value
  return None


def _attention_note(r):
  if "written_out_seq_per_s" not in r:
    return " attention: %s" % r["attention"] if "attention" in r else ""
  return " attention: %s, %.2fx the written-out path's speed, max |diff| %.3g" % (
      r["attention"], r["seq_per_s"] / r["written_out_seq_per_s"],
      r["max_abs_diff_vs_written_out"])


def report(records, tiny):
  info = {r["worker"]: r for r in records if "worker" in r}
  device = info.get("jax", {}).get("device") or info.get("torch", {}).get("device")
  peak = chip_peak(device)
  measured = info.get("jax", {}).get("matmul_peak")
  rows, figures = [], {}
  for r in records:
    if "job" not in r:
      continue
    key = "%s_%s_%s_%d" % (r["peer"], r["job"], r["model"], r["seq"])
    if "seq_per_s" in r:
      fps = flops_per_sequence(r["job"], r["model"], r["seq"]) * r["seq_per_s"]
      r["tflops"] = fps / 1e12
      r["mfu"] = fps / peak if peak else None
      r["mfu_of_measured_peak"] = fps / measured if measured else None
    figures[key] = {k: v for k, v in r.items() if k not in ("peer", "job", "model", "seq")}
    rows.append(r)
  print("device: %s   datasheet bf16 peak: %s   measured bf16 matmul: %s" % (
      device, "%.0f TFLOP/s" % (peak / 1e12) if peak else "unknown",
      "%.0f TFLOP/s" % (measured / 1e12) if measured else "-"))
  for w in ("jax", "torch"):
    if w in info:
      print("  %s: %s" % (w, {k: v for k, v in info[w].items() if k != "worker"}))
  print("%-5s %-5s %-5s %4s %5s %10s %8s %7s %9s %s" % (
      "peer", "job", "model", "seq", "batch", "seq/s", "TFLOP/s", "MFU", "compile", "note"))
  for r in rows:
    if "seq_per_s" in r:
      print("%-5s %-5s %-5s %4d %5d %10.1f %8.1f %7s %8.1fs %s" % (
          r["peer"], r["job"], r["model"], r["seq"], r["batch"], r["seq_per_s"], r["tflops"],
          "%.1f%%" % (100 * r["mfu"]) if r["mfu"] is not None else "-", r["compile_s"],
          ("loss %.2f -> %.2f" % (r["first_loss"], r["last_loss"]) if "first_loss" in r
           else "") + (" prng %s" % r["prng"] if r.get("prng", "threefry2x32") != "threefry2x32"
                       else "") + _attention_note(r)))
    else:
      print("%-5s %-5s %-5s %4d %5d %s" % (r["peer"], r["job"], r["model"], r["seq"],
                                           r["batch"], r["error"]))
  ratios = {}
  for key, value in figures.items():
    if key.startswith("ours_") and "seq_per_s" in value:
      peer = figures.get("hf_" + key[len("ours_"):], {})
      if "seq_per_s" in peer:
        ratios[key[len("ours_"):]] = value["seq_per_s"] / peer["seq_per_s"]
  for key, ratio in ratios.items():
    print("ours / hf  %-18s %.2fx" % (key, ratio))
  for r in rows:
    if "profile" in r:
      label = "profile %s %s %s %d" % (r["peer"], r["job"], r["model"], r["seq"])
      for line in kernel_profile.format_summary(label, r["profile"],
                                                1e3 * r["seconds"] / r["steps"]):
        print(line)
  print(json.dumps({"device": device, "datasheet_peak": peak, "measured_matmul_peak": measured,
                    "versions": {w: {k: v for k, v in i.items() if k != "worker"}
                                 for w, i in info.items()},
                    "figures": figures, "ours_over_hf": ratios, "tiny": tiny}))


def parse_runs(text):
  """--runs's JOB:MODEL:SEQ:BATCH,... -> [(job, model, seq, batch)]; a wrong item exits with
  one error line naming it."""
  runs = []
  for item in text.split(","):
    fields = item.split(":")
    if (len(fields) != 4 or fields[0] not in ("train", "infer") or fields[1] not in CONFIGS
        or not all(f.isdigit() and int(f) > 0 for f in fields[2:])):
      sys.exit("error: --runs: %r is not JOB:MODEL:SEQ:BATCH (JOB train or infer, MODEL one of "
               "%s, SEQ and BATCH positive integers)" % (item, ", ".join(CONFIGS)))
    if int(fields[2]) > COMMON["max_position_embeddings"]:
      sys.exit("error: --runs: %r: SEQ is over %d positions" % (
          item, COMMON["max_position_embeddings"]))
    runs.append((fields[0], fields[1], int(fields[2]), int(fields[3])))
  return runs


def main():
  parser = argparse.ArgumentParser(description=__doc__.split("\n")[0])
  parser.add_argument("--tiny", action="store_true", help="a tiny config, for any CPU")
  parser.add_argument("--budget_s", type=float, default=420.0,
                      help="seconds for the whole script (JAX gets --jax_share of it, PyTorch "
                      "the rest)")
  parser.add_argument("--jax_share", type=float, default=0.7)
  parser.add_argument("--peers", default="jax,torch", help="which workers run")
  parser.add_argument("--optimizer", default="adamw", choices=("adamw", "lamb"))
  parser.add_argument("--policy", default="mixed_bfloat16")
  parser.add_argument("--min_time", type=float, default=3.0)
  parser.add_argument("--min_steps", type=int, default=5)
  parser.add_argument("--max_steps", type=int, default=50)
  parser.add_argument("--prng", default="threefry2x32",
                      choices=("threefry2x32", "rbg", "unsafe_rbg"),
                      help="JAX's random generator for our training steps' dropout "
                      "(jax_default_prng_impl, set after the model is built)")
  parser.add_argument("--compare_attention", action="store_true",
                      help="infer runs whose attention is cuDNN's also time the path written "
                      "out (a second compile) and compare the outputs")
  parser.add_argument("--profile_steps", type=int, default=0,
                      help="after timing each run, this many more steps under the framework's "
                      "profiler: kernel time by kind and the top kernels (kernel_profile.py)")
  parser.add_argument("--runs", help="JOB:MODEL:SEQ:BATCH,... instead of the default list "
                      "(e.g. train:large:128:256,infer:base:128:256)")
  parser.add_argument("--worker", help=argparse.SUPPRESS)
  parser.add_argument("--worker_runs", help=argparse.SUPPRESS)
  args = parser.parse_args()
  if args.profile_steps < 0:
    sys.exit("error: --profile_steps=%d: must be >= 0" % args.profile_steps)
  unknown = set(args.peers.split(",")) - {"jax", "torch"}
  if unknown:
    sys.exit("error: --peers=%s: %s is none of jax, torch" % (args.peers, ", ".join(unknown)))
  if args.tiny:
    args.min_time, args.min_steps, args.max_steps = 0.0, 2, 2
  if args.worker:
    runs = [tuple(r) for r in json.loads(args.worker_runs)]
    worker = jax_worker if args.worker == "jax" else torch_worker
    for record in worker(runs, args):
      print("RECORD " + json.dumps(record), flush=True)
    return
  runs = parse_runs(args.runs) if args.runs else TINY_RUNS if args.tiny else RUNS
  start, records = time.time(), []
  peers = args.peers.split(",")
  for name in peers:
    left = args.budget_s - (time.time() - start)
    share = left * args.jax_share if name == "jax" and "torch" in peers else left
    records += run_worker(name, runs, args, max(share, 1.0))
  report(records, args.tiny)


if __name__ == "__main__":
  main()
