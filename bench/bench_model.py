"""Model benchmark: training-step throughput and encoder latency, ours against peers.

Measures, in one process on this machine:
  * the machine's matmul throughput (float32 and bfloat16, best of a few BERT-like shapes),
    the denominator of model FLOPs utilisation (MFU);
  * training-step throughput (sequences/s): MLM + NSP loss, gradients and an Adam-style
    update, seq 128, batch 8, 20 masked positions;
  * encoder inference latency (sequence + pooled output) at batch 1 and batch 32;
for each config (BERT-Base, BERT-Small L4/H512) and each peer:
  ours            modeling.BertPretrainer, tf.function, float32
  ours+xla        the same, jit_compile=True
  ours bf16       mixed_bfloat16 policy (LayerNorm, softmax, logits, loss in float32)
  ours bf16+xla   the same with XLA (not run by default: XLA's CPU backend does not use
                  oneDNN's bfloat16 matmuls, so it is slower than without XLA)
  keras_hub       keras_hub.models.BertBackbone + MaskedLMHead + Dense(2), tf.function
  keras_hub+xla   the same, jit_compile=True
  original        google-research/bert modeling.py + run_pretraining heads +
                  optimization.create_optimizer in a TF1 graph (bert-tensorflow, with the
                  stand-ins of tests/oracle.py)
Every peer of a config is built (and warmed up) first, then all are timed in interleaved
rounds, so that a slow phase of a shared machine does not fall on one peer only; each figure
is the median over the rounds. Peers that are not installed are reported as skipped. A
loss-curve check trains ours in float32 and mixed_bfloat16 from the same initial weights on
the same batches.

Usage:
  python bench/bench_model.py                 # full run (BERT-Base and Small), ~15-25 min
  python bench/bench_model.py --quick         # tiny config, a few steps: checks it all works
  python bench/bench_model.py --backend=jax --kerashub_python=kh-venv/bin/python
      # instead: ours (BertPretrainer + AdamWeightDecay) against KerasHub on one Keras backend
      # (tensorflow, jax or torch), BERT-Small, each peer in a process of its own (KerasHub's
      # from its own Python), timed in interleaved rounds; see backend_worker below
Prints a table; the last line is a JSON object with every figure.
"""

import argparse
import gc
import json
import os
import pathlib
import platform
import statistics
import sys
import time

os.environ.setdefault("TF_CPP_MIN_LOG_LEVEL", "2")


def _flag(name):
  """--name's value on the command line, read before Keras is imported (--backend picks
  Keras's backend, which Keras reads once, at its import); None when absent."""
  for i, arg in enumerate(sys.argv[1:], 1):
    if arg.startswith(name + "="):
      return arg.split("=", 1)[1]
    if arg == name and i + 1 < len(sys.argv):
      return sys.argv[i + 1]
  return None


BACKEND = _flag("--backend")
REPO = pathlib.Path(__file__).resolve().parent.parent
import numpy as np  # noqa: E402
sys.path.insert(0, str(REPO / "bench"))
from shared_data import TimingWorker, serve_timings  # noqa: E402
if BACKEND:   # the backends comparison: Keras and the model are imported by its workers
  os.environ["KERAS_BACKEND"] = BACKEND
else:
  import tensorflow as tf  # noqa: E402
  import keras  # noqa: E402
  from bert_keras import losses  # noqa: E402  (pip install -e . in the clone)
  from bert_keras import modeling  # noqa: E402

CONFIGS = {
    "base": dict(vocab_size=30522, hidden_size=768, num_hidden_layers=12,
                 num_attention_heads=12, intermediate_size=3072, type_vocab_size=2),
    "small": dict(vocab_size=30522, hidden_size=512, num_hidden_layers=4,
                  num_attention_heads=8, intermediate_size=2048, type_vocab_size=2),
    "tiny": dict(vocab_size=30522, hidden_size=128, num_hidden_layers=2,
                 num_attention_heads=2, intermediate_size=512, type_vocab_size=2),
}


# --- FLOPs -----------------------------------------------------------------------------------

def encoder_flops(c, batch, seq):
  """Forward matmul FLOPs of the encoder and pooler (2 per multiply-add)."""
  h, i = c.hidden_size, c.intermediate_size
  per_token_layer = 2 * (4 * h * h + 2 * h * i) + 2 * 2 * seq * h   # dense + QK^T + PV
  return batch * (seq * c.num_hidden_layers * per_token_layer + 2 * h * h)


def training_flops(c, batch, seq, predictions):
  """Forward + backward (3x forward) FLOPs of one pretraining step."""
  h = c.hidden_size
  heads = batch * predictions * (2 * h * h + 2 * h * c.vocab_size) + batch * 2 * 2 * h
  return 3 * (encoder_flops(c, batch, seq) + heads)


def matmul_peak(dtype, seconds=2.0):
  """Best measured GFLOP/s of tf.matmul over BERT-like shapes, in `dtype`."""
  best = 0.0
  for m, k, n in ((1024, 768, 3072), (1024, 3072, 768), (2048, 2048, 2048)):
    a = tf.cast(tf.random.normal([m, k]), dtype)
    b = tf.cast(tf.random.normal([k, n]), dtype)
    fn = tf.function(tf.matmul)
    fn(a, b).numpy()
    reps, start = 0, time.perf_counter()
    while time.perf_counter() - start < seconds / 3:
      out = fn(a, b)
      reps += 1
    out.numpy()
    best = max(best, 2.0 * m * k * n * reps / (time.perf_counter() - start) / 1e9)
  return best


# --- data ------------------------------------------------------------------------------------

def make_batch(c, batch, seq, predictions, seed=0):
  rng = np.random.RandomState(seed)
  lengths = rng.randint(seq // 2, seq + 1, batch)
  mask = (np.arange(seq)[None] < lengths[:, None]).astype(np.int32)
  ids = rng.randint(1000, c.vocab_size, (batch, seq)).astype(np.int32) * mask
  segments = ((np.arange(seq)[None] >= (lengths // 2)[:, None]) * mask).astype(np.int32)
  positions = np.sort(rng.randint(1, seq // 2, (batch, predictions)), axis=1).astype(np.int32)
  return {"input_ids": ids, "input_mask": mask, "segment_ids": segments,
          "masked_lm_positions": positions,
          "masked_lm_ids": rng.randint(1000, c.vocab_size, (batch, predictions)).astype(np.int32),
          "masked_lm_weights": np.ones((batch, predictions), np.float32),
          "next_sentence_labels": rng.randint(0, 2, (batch, 1)).astype(np.int32)}


# --- peers -----------------------------------------------------------------------------------

def _optimizer():
  import keras
  return keras.optimizers.AdamW(learning_rate=1e-4, weight_decay=0.01, epsilon=1e-6,
                                global_clipnorm=1.0)


def ours(c, policy, jit, optimizer=None):
  """-> (train_step(features) -> loss, encode(features) -> outputs, the model); the optimizer
  keras AdamW (_optimizer) unless given."""
  model = modeling.BertPretrainer(c, dtype=policy)
  optimizer = _optimizer() if optimizer is None else optimizer
  variables = model.trainable_variables

  @tf.function(jit_compile=jit)
  def train_step(features):
    with tf.GradientTape() as tape:
      loss = losses.pretraining_loss(model(features, training=True), features)
    optimizer.apply_gradients(zip(tape.gradient(loss, variables), variables))
    return loss

  @tf.function(jit_compile=jit)
  def encode(features):
    out = model.bert(features, training=False)
    return out["sequence_output"], out["pooled_output"]

  return train_step, encode, model


def keras_hub_peer(c, jit):
  import keras_hub
  backbone = keras_hub.models.BertBackbone(
      vocabulary_size=c.vocab_size, num_layers=c.num_hidden_layers,
      num_heads=c.num_attention_heads, hidden_dim=c.hidden_size,
      intermediate_dim=c.intermediate_size, dropout=0.1,
      max_sequence_length=c.max_position_embeddings, num_segments=c.type_vocab_size)
  mlm = keras_hub.layers.MaskedLMHead(vocabulary_size=c.vocab_size,
                                      token_embedding=backbone.token_embedding,
                                      intermediate_activation="gelu")
  nsp = keras.layers.Dense(2)
  optimizer = _optimizer()

  def inputs(f):
    return {"token_ids": f["input_ids"], "segment_ids": f["segment_ids"],
            "padding_mask": f["input_mask"]}

  f0 = make_batch(c, 1, 8, 2)
  out = backbone(inputs(f0))
  mlm(out["sequence_output"], mask_positions=f0["masked_lm_positions"])
  nsp(out["pooled_output"])
  variables = backbone.trainable_variables + mlm.trainable_variables + nsp.trainable_variables

  @tf.function(jit_compile=jit)
  def train_step(features):
    with tf.GradientTape() as tape:
      out = backbone(inputs(features), training=True)
      logits = mlm(out["sequence_output"], mask_positions=features["masked_lm_positions"])
      loss = (losses.masked_lm_loss(logits, features["masked_lm_ids"],
                                      features["masked_lm_weights"])
              + losses.next_sentence_loss(nsp(out["pooled_output"]),
                                            features["next_sentence_labels"]))
    optimizer.apply_gradients(zip(tape.gradient(loss, variables), variables))
    return loss

  @tf.function(jit_compile=jit)
  def encode(features):
    out = backbone(inputs(features), training=False)
    return out["sequence_output"], out["pooled_output"]

  return train_step, encode


def original_peer(c, batch, seq, predictions, train):
  """The original code in a TF1 graph; -> run() callable (train step or encoder forward)."""
  sys.path.insert(0, str(REPO / "tests"))
  import oracle
  try:
    original = oracle.original("modeling")
    pretraining = oracle.original("run_pretraining")
    optimization = oracle.original("optimization")
  except BaseException as e:  # pytest.skip raises a BaseException subclass
    raise ImportError(str(e)) from None
  tf1 = tf.compat.v1
  graph = tf.Graph()
  with graph.as_default():
    ph = {k: tf1.placeholder(tf.float32 if k == "masked_lm_weights" else tf.int32,
                             v.shape, name=k)
          for k, v in make_batch(c, batch, seq, predictions).items()}
    config = original.BertConfig.from_dict(c.to_dict())
    model = original.BertModel(config, is_training=train, input_ids=ph["input_ids"],
                               input_mask=ph["input_mask"], token_type_ids=ph["segment_ids"])
    if train:
      mlm_loss, _, _ = pretraining.get_masked_lm_output(
          config, model.get_sequence_output(), model.get_embedding_table(),
          ph["masked_lm_positions"], ph["masked_lm_ids"], ph["masked_lm_weights"])
      nsp_loss, _, _ = pretraining.get_next_sentence_output(
          config, model.get_pooled_output(), ph["next_sentence_labels"])
      fetch = optimization.create_optimizer(mlm_loss + nsp_loss, 1e-4, 1000, 10, False)
    else:
      fetch = [model.get_sequence_output(), model.get_pooled_output()]
    sess = tf1.Session(graph=graph)
    sess.run(tf1.global_variables_initializer())
  feed = {ph[k]: v for k, v in make_batch(c, batch, seq, predictions).items()}
  return lambda: sess.run(fetch, feed), sess


# --- backends: ours against KerasHub on one Keras backend, each peer in a Python of its own --

BACKEND_PEERS = ("ours", "keras_hub")


def _plain_config(name):
  """CONFIGS[name] with the original's other fields, as a namespace (no bert_keras needed)."""
  import types
  return types.SimpleNamespace(max_position_embeddings=512, hidden_dropout_prob=0.1,
                               attention_probs_dropout_prob=0.1, **CONFIGS[name])


def _ours_net(name):
  """-> (net: BertPretrainer, its encoder, loss(outputs, features), optimizer, encoder inputs):
  our model and our optimizer (optimization.AdamWeightDecay, run_pretraining's)."""
  from bert_keras import losses, modeling, optimization
  c = modeling.BertConfig.from_dict(dict(modeling.BertConfig(0).to_dict(), **CONFIGS[name]))
  net = modeling.BertPretrainer(c)
  optimizer = optimization.create_optimizer(1e-4, 10000, 100)
  return net, net.bert, losses.pretraining_loss, optimizer, lambda f: {
      k: f[k] for k in ("input_ids", "input_mask", "segment_ids")}


def _keras_hub_net(name):
  """The same for KerasHub: BertBackbone + MaskedLMHead (tied to the token embedding) +
  Dense(2), the loss in Keras ops, keras.optimizers.AdamW with the same settings."""
  import keras
  import keras_hub
  from keras import ops
  c = _plain_config(name)

  class Pretrainer(keras.Model):
    def __init__(self):
      super().__init__()
      self.backbone = keras_hub.models.BertBackbone(
          vocabulary_size=c.vocab_size, num_layers=c.num_hidden_layers,
          num_heads=c.num_attention_heads, hidden_dim=c.hidden_size,
          intermediate_dim=c.intermediate_size, dropout=0.1,
          max_sequence_length=c.max_position_embeddings, num_segments=c.type_vocab_size)
      self.mlm = keras_hub.layers.MaskedLMHead(
          vocabulary_size=c.vocab_size, token_embedding=self.backbone.token_embedding,
          intermediate_activation="gelu")
      self.nsp = keras.layers.Dense(2)

    def call(self, f, training=False):
      out = self.backbone(inputs(f), training=training)
      return {"masked_lm_logits": self.mlm(out["sequence_output"],
                                           mask_positions=f["masked_lm_positions"]),
              "next_sentence_logits": self.nsp(out["pooled_output"])}

  def inputs(f):
    return {"token_ids": f["input_ids"], "segment_ids": f["segment_ids"],
            "padding_mask": f["input_mask"]}

  def loss(outputs, f):
    nll = lambda labels, logits: ops.sparse_categorical_crossentropy(  # noqa: E731
        labels, logits, from_logits=True)
    w = ops.cast(f["masked_lm_weights"], "float32")
    mlm = ops.sum(w * nll(f["masked_lm_ids"], outputs["masked_lm_logits"])) / (ops.sum(w) + 1e-5)
    nsp = ops.mean(nll(ops.reshape(f["next_sentence_labels"], (-1,)),
                       outputs["next_sentence_logits"]))
    return mlm + nsp

  net = Pretrainer()
  return net, net.backbone, loss, _optimizer(), inputs


def _backend_calls(net, encoder, loss_of, optimizer, encoder_inputs, batches):
  """-> {"train": fn, "b1": fn, "b32": fn}, each one step or one forward pass, finished (its
  result on the host), in the style of Keras's own trainer on this backend:
    jax         one jax.jit of stateless_call + value_and_grad + optimizer.stateless_apply
                (what model.fit's jitted train_step does), the state donated; the encoder's
                stateless_call under jax.jit;
    torch       eager: forward, loss.backward(), optimizer.apply on the variables' .grad under
                torch.no_grad (what Keras's torch trainer does); the encoder under no_grad;
    tensorflow  tf.function of a GradientTape step + apply_gradients; the encoder in a
                tf.function."""
  import keras
  from keras import ops
  backend = keras.backend.backend()
  tensors = {k: {n: ops.convert_to_tensor(v) for n, v in b.items()} for k, b in batches.items()}
  net(tensors["train"], training=False)   # builds every variable
  train, enc = tensors["train"], {k: encoder_inputs(tensors[k]) for k in ("b1", "b32")}
  tvars = net.trainable_variables
  calls = {}
  if backend == "jax":
    import jax
    sys.path.insert(0, str(REPO / "bench" / "gpu"))
    import bench_gpu  # its step (Keras's JAX trainer's) and state (a tuple of lists)
    step = jax.jit(bench_gpu.jax_train_step(jax, None, net, optimizer, loss_of),
                   donate_argnums=0)
    optimizer.build(tvars)
    holder = {"state": bench_gpu.jax_train_state(net, optimizer)}

    def train_call():
      holder["state"], loss = step(holder["state"], train)
      return float(loss)
    forward = jax.jit(lambda tv, ntv, x: encoder.stateless_call(tv, ntv, x, training=False)[0])
    # Copies: the training step donates (deletes) the arrays that the variables hold.
    weights = ([jax.numpy.array(v.value) for v in encoder.trainable_variables],
               [jax.numpy.array(v.value) for v in encoder.non_trainable_variables])
    for key in ("b1", "b32"):
      calls[key] = (lambda x: lambda: jax.block_until_ready(forward(*weights, x)))(enc[key])
  elif backend == "torch":
    import torch

    def train_call():
      for v in tvars:
        v.value.grad = None
      loss = loss_of(net(train, training=True), train)
      loss.backward()
      with torch.no_grad():
        optimizer.apply([v.value.grad for v in tvars], tvars)
      return float(loss.detach())

    def encode(x):
      with torch.no_grad():
        out = encoder(x, training=False)
      return out["sequence_output"].cpu().numpy(), out["pooled_output"].cpu().numpy()
    for key in ("b1", "b32"):
      calls[key] = (lambda x: lambda: encode(x))(enc[key])
  else:
    import tensorflow as tf

    @tf.function
    def tf_step(batch):
      with tf.GradientTape() as tape:
        loss = loss_of(net(batch, training=True), batch)
      optimizer.apply_gradients(zip(tape.gradient(loss, tvars), tvars))
      return loss

    @tf.function
    def encode(x):
      out = encoder(x, training=False)
      return out["sequence_output"], out["pooled_output"]

    def train_call():
      return float(tf_step(train))
    for key in ("b1", "b32"):
      calls[key] = (lambda x: lambda: [t.numpy() for t in encode(x)])(enc[key])
  calls["train"] = train_call
  return calls


def backend_worker(args):
  """A peer's process: builds it, warms it up, prints READY, then times the calls that the
  parent asks for on stdin ("train 3": three training steps) and prints their seconds."""
  import keras
  name = args.configs.split(",")[0]
  build = _ours_net if args.worker == "ours" else _keras_hub_net
  start = time.perf_counter()
  net, encoder, loss_of, optimizer, encoder_inputs = build(name)
  c = _plain_config(name)
  batches = {"train": make_batch(c, args.batch, args.seq, args.predictions),
             "b1": make_batch(c, 1, args.seq, args.predictions, seed=1),
             "b32": make_batch(c, 32, args.seq, args.predictions, seed=32)}
  calls = _backend_calls(net, encoder, loss_of, optimizer, encoder_inputs, batches)
  losses = [calls["train"]()]
  build_s = time.perf_counter() - start
  for fn in calls.values():
    for _ in range(args.warmup):
      fn()
  losses.append(calls["train"]())
  info = {"backend": keras.backend.backend(), "keras": keras.__version__,
          "build_and_compile_s": round(build_s, 1), "first_loss": losses[0],
          "loss_after_warmup": losses[-1],
          "parameters": int(sum(np.prod(v.shape) for v in net.trainable_variables))}
  if args.worker == "keras_hub":
    import keras_hub
    info["keras_hub"] = keras_hub.version()
  print("BENCH " + json.dumps(info), flush=True)
  serve_timings(calls, "BENCH ")


def _worker(peer, python, args, name):
  """A backend_worker child process (this script in `python`) and its request/reply pipe."""
  command = [python, os.path.abspath(__file__), "--worker=" + peer, "--backend=" + BACKEND,
             "--configs=" + name]
  command += ["--%s=%s" % (k, getattr(args, k))
              for k in ("batch", "seq", "predictions", "warmup")]
  return TimingWorker(peer, command, "BENCH ")


def bench_backend(name, args):
  """Ours against KerasHub on BACKEND for config `name`: both built (one after the other),
  then timed in interleaved rounds (the order alternating); -> {peer: row}."""
  workers = {}
  try:
    for peer in BACKEND_PEERS:
      python = sys.executable if peer == "ours" else args.kerashub_python
      workers[peer] = _worker(peer, python, args, name)
      print("%-6s %-10s built in %.0f s (%s)" % (name, peer, workers[peer].info[
          "build_and_compile_s"], workers[peer].info), flush=True)
    reps = {"train": args.steps, "b1": 5 * args.latency_reps, "b32": args.latency_reps}
    times = {(peer, key): [] for peer in workers for key in reps}
    for r in range(args.rounds):
      for peer in BACKEND_PEERS[r % 2:] + BACKEND_PEERS[:r % 2]:
        for key in reps:
          times[peer, key] += workers[peer].time(key, max(1, reps[key] // args.rounds))
        time.sleep(0.3)   # lets the other process's idle threads go to sleep
  finally:
    for worker in workers.values():
      worker.close()
  rows = {}
  for peer, worker in workers.items():
    rows[peer] = {"config": name, "peer": peer, "backend": BACKEND,
                  "train_seq_per_s": args.batch / statistics.median(times[peer, "train"]),
                  "latency_b1_ms": 1e3 * statistics.median(times[peer, "b1"]),
                  "latency_b32_ms": 1e3 * statistics.median(times[peer, "b32"]),
                  **worker.info}
  ours, hub = rows["ours"], rows["keras_hub"]
  rows["ratio"] = {"train": ours["train_seq_per_s"] / hub["train_seq_per_s"],
                   "b1": hub["latency_b1_ms"] / ours["latency_b1_ms"],
                   "b32": hub["latency_b32_ms"] / ours["latency_b32_ms"]}
  return rows


def backends_main(args):
  if not (args.kerashub_python and os.access(args.kerashub_python, os.X_OK)):
    sys.exit("error: --backend needs --kerashub_python, a Python with keras-hub (and the "
             "backend) installed: %r is not an executable file" % args.kerashub_python)
  print("backend %s, %d CPUs; ours: modeling.BertPretrainer + optimization.AdamWeightDecay; "
        "KerasHub: BertBackbone + MaskedLMHead + Dense(2) + keras AdamW; float32; training "
        "batch %d, seq %d, %d masked positions; encoder latency at seq %d" % (
            BACKEND, os.cpu_count(), args.batch, args.seq, args.predictions, args.seq))
  results = {name: bench_backend(name, args) for name in args.configs.split(",")}
  print()
  print("| config | peer | train seq/s | encoder b1 ms | encoder b32 ms |")
  print("|---|---|---:|---:|---:|")
  for name, rows in results.items():
    for peer in BACKEND_PEERS:
      r = rows[peer]
      print("| %s | %s | %.2f | %.1f | %.0f |" % (
          name, "ours" if peer == "ours" else "KerasHub %s" % r.get("keras_hub", ""),
          r["train_seq_per_s"], r["latency_b1_ms"], r["latency_b32_ms"]))
    ratio = rows["ratio"]
    print("| %s | ours / KerasHub (speed) | x%.2f | x%.2f | x%.2f |" % (
        name, ratio["train"], ratio["b1"], ratio["b32"]))
  print(json.dumps({"backend": BACKEND, "batch": args.batch, "seq": args.seq,
                    "steps": args.steps, "rounds": args.rounds, "results": results}))


# --- runs ------------------------------------------------------------------------------------

PEERS = ["ours", "ours+xla", "ours bf16", "keras_hub", "keras_hub+xla", "original"]


def _peer_calls(peer, c, args, train_batch):
  """-> {"train": fn, "b1": fn, "b32": fn} (each runs one step or one forward pass) and the
  TF1 sessions to close. Raises ImportError if the peer is not installed."""
  seq, predictions = args.seq, args.predictions
  calls, sessions = {}, []
  if peer == "original":
    calls["train"], sess = original_peer(c, args.batch, seq, predictions, True)
    sessions.append(sess)
    for batch in (1, 32):
      calls["b%d" % batch], sess = original_peer(c, batch, seq, predictions, False)
      sessions.append(sess)
    return calls, sessions
  bf16 = "bf16" in peer
  if peer.startswith("ours"):
    train, encode, _ = ours(c, "mixed_bfloat16" if bf16 else "float32", "xla" in peer)
  else:
    train, encode = keras_hub_peer(c, "xla" in peer)
  features = {k: tf.constant(v) for k, v in train_batch.items()}
  calls["train"] = lambda: train(features).numpy()
  for batch in (1, 32):
    data = make_batch(c, batch, seq, predictions, seed=batch)
    inputs = {k: tf.constant(data[k]) for k in ("input_ids", "input_mask", "segment_ids")}
    calls["b%d" % batch] = (lambda inputs: lambda: [t.numpy() for t in encode(inputs)])(inputs)
  return calls, sessions


def bench_config(name, args, peaks, results):
  """Builds every peer of one config, then times them in interleaved rounds.

  Each round runs every peer in turn (the order rotates from round to round), so a slow
  phase of a shared machine falls on all peers alike instead of on whichever ran then;
  each figure is the median over all rounds.
  """
  c = modeling.BertConfig.from_dict(dict(modeling.BertConfig(0).to_dict(), **CONFIGS[name]))
  seq, predictions = args.seq, args.predictions
  train_batch = make_batch(c, args.batch, seq, predictions)
  flops = {"train": training_flops(c, args.batch, seq, predictions),
           "b1": encoder_flops(c, 1, seq), "b32": encoder_flops(c, 32, seq)}
  built, rows, all_sessions = {}, {}, []
  for peer in args.peers:
    rows[peer] = {"config": name, "peer": peer,
                  "_peak": peaks["bfloat16" if "bf16" in peer else "float32"]}
    try:
      calls, sessions = _peer_calls(peer, c, args, train_batch)
      all_sessions += sessions
      for fn in calls.values():   # compiles, then warms up
        for _ in range(args.warmup):
          fn()
      built[peer] = calls
      print("%-6s %-14s built" % (name, peer), flush=True)
    except ImportError as e:
      rows[peer]["skipped"] = str(e).splitlines()[0][:120]
  times = {(peer, key): [] for peer in built for key in ("train", "b1", "b32")}
  # Batch-1 calls are short and their times scatter most: five times as many of them.
  reps = {"train": args.steps, "b1": 5 * args.latency_reps, "b32": args.latency_reps}
  order = list(built)
  for r in range(args.rounds if order else 0):
    for peer in order[r % len(order):] + order[:r % len(order)]:
      for key, fn in built[peer].items():
        for _ in range(max(1, reps[key] // args.rounds)):
          start = time.perf_counter()
          fn()
          times[peer, key].append(time.perf_counter() - start)
  for peer in args.peers:
    row = rows[peer]
    if peer in built:
      seconds = statistics.median(times[peer, "train"])
      row["train_seq_per_s"] = args.batch / seconds
      row["train_mfu"] = flops["train"] / seconds / (row["_peak"] * 1e9)
      for batch in (1, 32):
        seconds = statistics.median(times[peer, "b%d" % batch])
        row["latency_b%d_ms" % batch] = seconds * 1e3
        row["latency_b%d_mfu" % batch] = flops["b%d" % batch] / seconds / (row["_peak"] * 1e9)
    results.append(row)
    print(_format_row(row), flush=True)
  for sess in all_sessions:
    sess.close()
  built.clear()
  keras.backend.clear_session()
  gc.collect()


def loss_curve(args):
  """Trains ours in float32 and mixed_bfloat16 from the same weights on the same batches."""
  c = modeling.BertConfig.from_dict(dict(modeling.BertConfig(0).to_dict(),
                                         **CONFIGS[args.curve_config]))
  c.hidden_dropout_prob = c.attention_probs_dropout_prob = 0.0   # same function both times
  batches = [make_batch(c, args.batch, args.seq, args.predictions, seed=100 + i % 4)
             for i in range(args.curve_steps)]
  curves, initial = {}, None
  for policy in ("float32", "mixed_bfloat16"):
    keras.utils.set_random_seed(0)
    train, _, model = ours(c, policy, True)
    if initial is None:
      initial = [v.numpy() for v in model.weights]
    for v, value in zip(model.weights, initial):
      v.assign(value)
    curves[policy] = [float(train({k: tf.constant(v) for k, v in b.items()}))
                      for b in batches]
    keras.backend.clear_session()
  a, b = np.array(curves["float32"]), np.array(curves["mixed_bfloat16"])
  return {"config": args.curve_config, "steps": args.curve_steps,
          "float32": [round(float(x), 4) for x in a],
          "mixed_bfloat16": [round(float(x), 4) for x in b],
          "max_abs_diff": float(np.max(np.abs(a - b))),
          "final_rel_diff": float(abs(a[-1] - b[-1]) / abs(a[-1]))}


def _format_row(row):
  if "skipped" in row:
    return "%-6s %-14s skipped: %s" % (row["config"], row["peer"], row["skipped"])
  return ("%-6s %-14s %8.2f seq/s %5.0f%% | b1 %8.1f ms %5.0f%% | b32 %9.1f ms %5.0f%%" % (
      row["config"], row["peer"], row["train_seq_per_s"], 100 * row["train_mfu"],
      row["latency_b1_ms"], 100 * row["latency_b1_mfu"], row["latency_b32_ms"],
      100 * row["latency_b32_mfu"]))


def markdown_table(results):
  lines = ["| config | peer | train seq/s (MFU) | latency b1 ms (MFU) | latency b32 ms (MFU) |",
           "|---|---|---|---|---|"]
  for r in results:
    if "skipped" in r:
      lines.append("| %s | %s | skipped | | |" % (r["config"], r["peer"]))
    else:
      lines.append("| %s | %s | %.2f (%.0f%%) | %.1f (%.0f%%) | %.0f (%.0f%%) |" % (
          r["config"], r["peer"], r["train_seq_per_s"], 100 * r["train_mfu"],
          r["latency_b1_ms"], 100 * r["latency_b1_mfu"], r["latency_b32_ms"],
          100 * r["latency_b32_mfu"]))
  return "\n".join(lines)


def main():
  parser = argparse.ArgumentParser(description=__doc__.split("\n")[0])
  parser.add_argument("--configs", help="default: base,small (with --backend: small)")
  parser.add_argument("--backend", choices=("tensorflow", "jax", "torch"),
                      help="instead: ours against KerasHub on this Keras backend, each in a "
                      "process of its own (needs --kerashub_python)")
  parser.add_argument("--kerashub_python",
                      help="with --backend: a Python with keras-hub and the backend installed "
                      "(not a dependency of this repository)")
  parser.add_argument("--worker", choices=BACKEND_PEERS, help=argparse.SUPPRESS)
  parser.add_argument("--peers", default=",".join(PEERS))
  parser.add_argument("--batch", type=int, default=8)
  parser.add_argument("--seq", type=int, default=128)
  parser.add_argument("--predictions", type=int, default=20)
  parser.add_argument("--warmup", type=int, default=3)
  parser.add_argument("--steps", type=int, default=10)
  parser.add_argument("--latency_reps", type=int, default=10)
  parser.add_argument("--rounds", type=int, default=5,
                      help="interleaved rounds over the peers (--steps and --latency_reps are "
                           "split among them)")
  parser.add_argument("--curve_config", default="small")
  parser.add_argument("--curve_steps", type=int, default=30)
  parser.add_argument("--quick", action="store_true",
                      help="tiny config, 2 warmup + 3 timed steps: checks the script works")
  args = parser.parse_args()
  if args.worker:
    return backend_worker(args)
  if args.backend:
    args.configs = args.configs or "small"
    return backends_main(args)
  args.configs = args.configs or "base,small"
  if args.quick:
    args.configs, args.warmup, args.steps, args.latency_reps, args.rounds = "tiny", 2, 3, 3, 3
    args.curve_config, args.curve_steps = "tiny", 6
  args.peers = [p.strip() for p in args.peers.split(",") if p.strip()]
  unknown = sorted(set(args.peers) - set(PEERS + ["ours bf16+xla"]))
  if unknown:
    parser.error("--peers: unknown %s (known: %s, ours bf16+xla)" % (unknown, ", ".join(PEERS)))

  print("machine: %s, %d CPUs, TensorFlow %s, Keras %s" % (
      platform.processor() or platform.machine(), os.cpu_count(), tf.__version__,
      keras.__version__))
  peaks = {"float32": matmul_peak(tf.float32), "bfloat16": matmul_peak(tf.bfloat16)}
  print("matmul peak: float32 %.1f GFLOP/s, bfloat16 %.1f GFLOP/s" % (
      peaks["float32"], peaks["bfloat16"]))
  if peaks["bfloat16"] < 1.2 * peaks["float32"]:
    print("note: bfloat16 matmuls are not faster than float32 here (no AVX512_BF16/AMX?)")
  print("training: batch %d, seq %d, %d masked positions; latency: encoder, seq %d" % (
      args.batch, args.seq, args.predictions, args.seq))
  results = []
  for name in args.configs.split(","):
    bench_config(name, args, peaks, results)
  curve = loss_curve(args)
  # The peak again: on a shared machine a single reading can be low, which would inflate MFU.
  for dtype in peaks:
    peaks[dtype] = max(peaks[dtype], matmul_peak(tf.as_dtype(dtype)))
  for row in results:
    scale = row.pop("_peak") / peaks["bfloat16" if "bf16" in row["peer"] else "float32"]
    for key in [k for k in row if k.endswith("mfu")]:
      row[key] *= scale
  print("matmul peak (max of start and end): float32 %.1f, bfloat16 %.1f GFLOP/s" % (
      peaks["float32"], peaks["bfloat16"]))
  print("loss curve (%s, %d steps, no dropout): float32 %s" % (
      curve["config"], curve["steps"], curve["float32"]))
  print("                                   mixed_bfloat16 %s" % curve["mixed_bfloat16"])
  print("  max |difference| %.4f, final relative difference %.4f" % (
      curve["max_abs_diff"], curve["final_rel_diff"]))
  print()
  print("final table (MFU against the peak above):")
  print(markdown_table(results))
  summary = summarize(results)
  for name, rows in summary.items():
    for row_name, e in rows.items():
      print("%s %s: fastest float32 peer %s %.2f; %s %.2f (x%.2f)%s" % (
          name, row_name, e["fastest_peer"], e["fastest_peer_value"], e["ours_float32"],
          e["ours_float32_value"], e["ours_float32_speedup"],
          ", ours bf16 %.2f (x%.2f)" % (e["ours_bf16_value"], e["ours_bf16_speedup"])
          if "ours_bf16_value" in e else ""))
  print(json.dumps({"matmul_gflops": peaks, "batch": args.batch, "seq": args.seq,
                    "results": results, "summary": summary, "loss_curve": curve}))


def summarize(results):
  """Per config and row: the fastest float32 peer against ours (float32 and bf16).

  Ratios are speedups (> 1: ours is faster): throughput / peer's throughput for training,
  peer's latency / our latency for the latency rows. "ours float32" is the better of ours
  with and without XLA.
  """
  summary = {}
  rows_of = {"train": ("train_seq_per_s", True), "latency_b1": ("latency_b1_ms", False),
             "latency_b32": ("latency_b32_ms", False)}
  for name in sorted({r["config"] for r in results}):
    rows = [r for r in results if r["config"] == name and "skipped" not in r]
    peers = [r for r in rows if not r["peer"].startswith("ours")]
    ours_fp32 = [r for r in rows if r["peer"].startswith("ours") and "bf16" not in r["peer"]]
    ours_bf16 = [r for r in rows if r["peer"].startswith("ours") and "bf16" in r["peer"]]
    if not (peers and ours_fp32):
      continue
    summary[name] = {}
    for row_name, (key, higher_is_better) in rows_of.items():
      pick = max if higher_is_better else min
      speed = (lambda v: v) if higher_is_better else (lambda v: 1.0 / v)
      best = pick(peers, key=lambda r: r[key])
      fp32 = pick(ours_fp32, key=lambda r: r[key])
      entry = {"fastest_peer": best["peer"], "fastest_peer_value": best[key],
               "ours_float32": fp32["peer"], "ours_float32_value": fp32[key],
               "ours_float32_speedup": speed(fp32[key]) / speed(best[key])}
      if ours_bf16:
        bf16 = pick(ours_bf16, key=lambda r: r[key])
        entry.update(ours_bf16_value=bf16[key],
                     ours_bf16_speedup=speed(bf16[key]) / speed(best[key]))
      summary[name][row_name] = entry
  return summary


if __name__ == "__main__":
  main()
