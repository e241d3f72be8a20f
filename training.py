# coding=utf-8
"""What the run_* scripts share: strategy flags, the tf.distribute strategy,
input-pipeline helpers, ONE custom training loop and checkpoint management.

The loop serves every strategy (one_device, mirrored, multi_worker_mirrored,
tpu): `iterations_per_loop` steps run inside one tf.function (a tf.range loop
over a distributed iterator), each step runs `strategy.run` on the replicas,
optionally accumulating gradients over several micro-batches, and the optimizer
sums gradients across replicas before clipping them (see optimization.py).

Losses are normalised by GLOBAL denominators: a task first computes, from its
inputs only, local sums (e.g. the number of examples, the sum of the masked-LM
weights), the loop sums them over micro-batches and replicas, and the task's
loss divides by those global sums. The summed gradient over replicas and
micro-batches is then exactly the gradient of the loss on the global batch, so
a run gives the same weights on 1 device, on N replicas and with N accumulation
steps for the same global batch.
"""

import contextlib
import os
import shutil
import socket
import tempfile
import time
import types

from absl import flags
from absl import logging
import keras
import numpy as np
import tensorflow as tf
from tensorflow.core.framework import summary_pb2

from bert_keras import checkpoints

STRATEGIES = ("one_device", "mirrored", "multi_worker_mirrored", "tpu")


# ----------------------------------------------------------------------------
# Flags (defined only by the scripts' define_flags(), never at import).

# The defaults of define_tpu_flags() and define_training_flags(), for callers of a script's
# run() that build its options without parsing flags (make_options).
TPU_DEFAULTS = dict(use_tpu=False, tpu_name=None, tpu_zone=None, gcp_project=None,
                    master=None, num_tpu_cores=8)
TRAINING_DEFAULTS = dict(distribution_strategy=None, dtype="float32", use_xla=None,
                         gradient_accumulation_steps=1, optimizer="adamw",
                         keep_checkpoint_max=5, seed=12345)


def make_options(defaults, overrides):
  """A namespace of all of a script's run() options: `defaults` updated with `overrides`.

  An override that is not an option raises TypeError (a misspelt name would else be ignored).
  """
  unknown = set(overrides) - set(defaults)
  if unknown:
    raise TypeError(f"unknown options {sorted(unknown)}")
  return types.SimpleNamespace(**{**defaults, **overrides})


def define_tpu_flags():
  """The original's TPU/cluster flags, with the original defaults."""
  flags.DEFINE_bool("use_tpu", False, "Whether to use TPU or GPU/CPU.")
  flags.DEFINE_string(
      "tpu_name", None,
      "The Cloud TPU to use for training. This should be either the name used "
      "when creating the Cloud TPU, or a grpc://ip.address.of.tpu:8470 url.")
  flags.DEFINE_string(
      "tpu_zone", None,
      "[Optional] GCE zone where the Cloud TPU is located in. If not specified, "
      "we will attempt to automatically detect the GCE project from metadata.")
  flags.DEFINE_string(
      "gcp_project", None,
      "[Optional] Project name for the Cloud TPU-enabled project. If not "
      "specified, we will attempt to automatically detect the GCE project from "
      "metadata.")
  flags.DEFINE_string("master", None, "[Optional] TensorFlow master URL.")
  flags.DEFINE_integer(
      "num_tpu_cores", 8,
      "Only used if `use_tpu` is True. Total number of TPU cores to use.")


def define_model_flags(max_seq_length, tokenizer=True, output_dir=True,
                       max_seq_length_help=""):
  """The original scripts' model flags, with their help texts: bert_config_file,
  init_checkpoint, max_seq_length (the script's default), and output_dir, vocab_file and
  do_lower_case where the script has them."""
  flags.DEFINE_string(
      "bert_config_file", None,
      "The config json file corresponding to the pre-trained BERT model. "
      "This specifies the model architecture.")
  if tokenizer:
    flags.DEFINE_string("vocab_file", None,
                        "The vocabulary file that the BERT model was trained on.")
  if output_dir:
    flags.DEFINE_string("output_dir", None,
                        "The output directory where the model checkpoints will be written.")
  flags.DEFINE_string("init_checkpoint", None,
                      "Initial checkpoint (usually from a pre-trained BERT model).")
  if tokenizer:
    flags.DEFINE_bool(
        "do_lower_case", True,
        "Whether to lower case the input text. Should be True for uncased "
        "models and False for cased models.")
  flags.DEFINE_integer(
      "max_seq_length", max_seq_length,
      "The maximum total input sequence length after WordPiece tokenization. "
      "Sequences longer than this will be truncated, and sequences shorter "
      "than this will be padded." + max_seq_length_help)


def define_fine_tuning_flags():
  """The original fine-tuning scripts' (run_classifier, run_squad) common optimisation and
  loop flags, with their defaults."""
  flags.DEFINE_float("learning_rate", 5e-5, "The initial learning rate for Adam.")
  flags.DEFINE_float("num_train_epochs", 3.0, "Total number of training epochs to perform.")
  flags.DEFINE_float(
      "warmup_proportion", 0.1,
      "Proportion of training to perform linear learning rate warmup for. "
      "E.g., 0.1 = 10% of training.")
  flags.DEFINE_integer("save_checkpoints_steps", 1000,
                       "How often to save the model checkpoint.")
  flags.DEFINE_integer("iterations_per_loop", 1000,
                       "How many steps to make in each estimator call (here: training "
                       "steps per compiled loop, and per log line).")


def define_training_flags():
  """Flags added beyond the original (all optional, defaults = original behaviour)."""
  flags.DEFINE_enum(
      "distribution_strategy", None, STRATEGIES,
      "tf.distribute strategy. Default: tpu with --use_tpu, mirrored when more "
      "than one GPU is visible, else one_device. multi_worker_mirrored reads "
      "the cluster from TF_CONFIG.")
  flags.DEFINE_enum("dtype", "float32", ["float32", "bfloat16", "float16"],
                    "Compute dtype (Keras mixed-precision policy; variables stay "
                    "float32). float16 adds dynamic loss scaling.")
  flags.DEFINE_bool("use_xla", None,
                    "Compile the forward/backward pass with XLA. Default: on for GPU and TPU, "
                    "off on CPU (where XLA's backend is slower than TensorFlow's oneDNN kernels).")
  flags.DEFINE_integer(
      "gradient_accumulation_steps", 1,
      "Micro-batches per optimizer step; train_batch_size is the batch of one "
      "optimizer step and must be divisible by this times the replica count.")
  flags.DEFINE_enum("optimizer", "adamw", ["adamw", "lamb"],
                    "adamw = the original AdamWeightDecay; lamb = LAMB.")
  flags.DEFINE_integer("keep_checkpoint_max", 5,
                       "Number of most recent checkpoints kept in output_dir.")
  flags.DEFINE_integer("seed", 12345, "Seed of the input shuffles.")


# ----------------------------------------------------------------------------
# Strategy.

def default_use_xla(strategy):
  """XLA where it helps: True if the strategy's devices are GPUs or TPUs, False on CPU.

  On CPU, XLA's backend does not use oneDNN's kernels and is no faster
  (bench/bench_model.py, BERT-Base: training 2.05 vs 2.09 seq/s, batch-32 inference
  4361 vs 3979 ms).
  """
  devices = [d.upper() for d in strategy.extended.worker_devices]
  return any(":GPU:" in d or ":TPU:" in d for d in devices)


def build_strategy(name=None, use_tpu=False, tpu_name=None, tpu_zone=None,
                   gcp_project=None, master=None, devices=None):
  """Returns a tf.distribute.Strategy.

  name: one of STRATEGIES or None (tpu if use_tpu; mirrored if >1 GPU; else
  one_device). devices: optional device list for one_device/mirrored.
  Raises ValueError (one line) when the TPU or the cluster cannot be reached.
  """
  if use_tpu and name not in (None, "tpu"):
    raise ValueError(f"--use_tpu conflicts with --distribution_strategy={name}")
  if name is None:
    if use_tpu:
      name = "tpu"
    elif len(tf.config.list_logical_devices("GPU")) > 1:
      name = "mirrored"
    else:
      name = "one_device"
  if name == "one_device":
    if devices:
      device = devices[0]
    elif tf.config.list_logical_devices("GPU"):
      device = "/gpu:0"
    else:
      device = "/cpu:0"
    return tf.distribute.OneDeviceStrategy(device)
  if name == "mirrored":
    return tf.distribute.MirroredStrategy(devices=devices)
  if name == "multi_worker_mirrored":
    if "TF_CONFIG" not in os.environ:
      logging.warning("multi_worker_mirrored without TF_CONFIG: single worker")
    return tf.distribute.MultiWorkerMirroredStrategy()
  if name == "tpu":
    tpu = tpu_name or master or ""
    _check_grpc_reachable(tpu, "--tpu_name" if tpu_name else "--master")
    try:
      resolver = tf.distribute.cluster_resolver.TPUClusterResolver(
          tpu=tpu, zone=tpu_zone, project=gcp_project)
      tf.config.experimental_connect_to_cluster(resolver)
      tf.tpu.experimental.initialize_tpu_system(resolver)
    except Exception as e:  # pylint: disable=broad-except
      first = str(e).strip().splitlines()[0] if str(e).strip() else type(e).__name__
      raise ValueError(f"--tpu_name={tpu_name!r}: no TPU reachable ({first})") from None
    return tf.distribute.TPUStrategy(resolver)
  raise ValueError(f"--distribution_strategy={name}: expected one of {STRATEGIES}")


def strategy_for(o, strategy=None):
  """The scripts' strategy: `strategy` if given, else the one the options name
  (--distribution_strategy and the TPU flags, see build_strategy); logs it."""
  if strategy is None:
    strategy = build_strategy(o.distribution_strategy, use_tpu=o.use_tpu, tpu_name=o.tpu_name,
                              tpu_zone=o.tpu_zone, gcp_project=o.gcp_project, master=o.master)
  logging.info("Strategy %s with %d replica(s)", type(strategy).__name__,
               strategy.num_replicas_in_sync)
  return strategy


@contextlib.contextmanager
def record_directory(strategy, output_dir):
  """Where a fine-tuning script writes its TFRecords: output_dir on the chief, as the
  original; on the other workers of a multi-worker run a private temporary directory
  (removed on exit), so that no process reads a file another is still writing."""
  if is_chief(strategy):
    yield output_dir
    return
  directory = tempfile.mkdtemp(prefix="bert_keras_records_")
  try:
    yield directory
  finally:
    shutil.rmtree(directory, ignore_errors=True)


def _check_grpc_reachable(address, flag, timeout=10.0):
  """A grpc://host:port that refuses TCP connections makes TF wait forever: fail fast."""
  if not address.startswith("grpc://"):
    return
  host, _, port = address[len("grpc://"):].rpartition(":")
  try:
    socket.create_connection((host, int(port)), timeout=timeout).close()
  except (OSError, ValueError) as e:
    raise ValueError(f"{flag}={address}: no TPU reachable ({e})") from None


def is_chief(strategy):
  """True on the worker that writes checkpoints, summaries and result files."""
  resolver = getattr(strategy, "cluster_resolver", None)
  if resolver is None or isinstance(strategy, tf.distribute.TPUStrategy):
    return True
  task_type, task_id = resolver.task_type, resolver.task_id
  return task_type is None or task_type == "chief" or (
      task_type == "worker" and task_id == 0 and
      "chief" not in resolver.cluster_spec().as_dict())


def worker_dir(strategy, output_dir):
  """output_dir on the chief; a private temporary directory on other workers
  (they must take part in saving, collectives, but their files are discarded)."""
  if is_chief(strategy):
    return output_dir
  resolver = strategy.cluster_resolver
  return os.path.join(output_dir, f"workertemp_{resolver.task_type}_{resolver.task_id}")


def set_dtype_policy(dtype):
  """Sets the global Keras dtype policy: float32, mixed_bfloat16 or mixed_float16."""
  policy = {"float32": "float32", "bfloat16": "mixed_bfloat16",
            "float16": "mixed_float16"}[dtype]
  keras.config.set_dtype_policy(policy)


# ----------------------------------------------------------------------------
# Input.

def expand_input_files(input_file, flag="--input_file"):
  """Comma-separated list of globs -> sorted-per-glob file list (tf.io.gfile)."""
  files = []
  for pattern in (input_file or "").split(","):
    pattern = pattern.strip()
    if pattern:
      files.extend(tf.io.gfile.glob(pattern))
  if not files:
    raise ValueError(f"{flag} {input_file!r}: no file matches")
  return files


def _context_values(input_context):
  if input_context is None:
    return 1, 0
  return input_context.num_input_pipelines, input_context.input_pipeline_id


def training_dataset(files, decode_fn, per_replica_batch, input_context=None, seed=12345,
                     skip_records=0, cycle_length=4, shuffle_buffer=100):
  """The original training pipeline, made deterministic and seekable.

  file names -> shard by input pipeline (by file when there are at least as many
  files as pipelines, else by record after interleaving) -> repeat -> shuffle
  (buffer = number of files) -> parallel interleave of TFRecordDatasets
  (cycle_length min(4, files), deterministic order) -> shuffle(100) ->
  skip(skip_records) -> parallel decode -> batch(per_replica_batch,
  drop_remainder=True). Both shuffles are seeded, so the record order is a pure
  function of (files, seed, pipeline): skipping the records consumed before a
  checkpoint resumes the exact input position (records are skipped before
  decoding; TFRecord reading only).
  """
  num_pipelines, pipeline_id = _context_values(input_context)
  ds = tf.data.Dataset.from_tensor_slices(tf.constant(files))
  shard_files = num_pipelines > 1 and len(files) >= num_pipelines
  if shard_files:
    ds = ds.shard(num_pipelines, pipeline_id)
  n_files = len(files) // num_pipelines if shard_files else len(files)
  ds = ds.repeat()
  ds = ds.shuffle(max(n_files, 1), seed=seed, reshuffle_each_iteration=True)
  ds = ds.interleave(tf.data.TFRecordDataset, cycle_length=max(1, min(cycle_length, n_files)),
                     num_parallel_calls=tf.data.AUTOTUNE, deterministic=True)
  if num_pipelines > 1 and not shard_files:
    ds = ds.shard(num_pipelines, pipeline_id)
  ds = ds.shuffle(shuffle_buffer, seed=seed + 1, reshuffle_each_iteration=True)
  if skip_records:
    ds = ds.skip(skip_records)
  ds = ds.map(decode_fn, num_parallel_calls=tf.data.AUTOTUNE, deterministic=True)
  ds = ds.batch(per_replica_batch, drop_remainder=True)
  return ds.prefetch(tf.data.AUTOTUNE)


def int64_feature(values):
  """A tf.train.Feature holding the ints `values` (an int64_list), as the original's
  create_int_feature."""
  return tf.train.Feature(int64_list=tf.train.Int64List(value=list(values)))


def evaluation_dataset(files, decode_fn, per_replica_batch, input_context=None):
  """The original eval pipeline: files in order, repeat, batch with drop_remainder;
  records are split round-robin between input pipelines when there are several."""
  num_pipelines, pipeline_id = _context_values(input_context)
  ds = tf.data.TFRecordDataset(tf.constant(files)).repeat()
  if num_pipelines > 1:
    ds = ds.shard(num_pipelines, pipeline_id)
  ds = ds.map(decode_fn, num_parallel_calls=tf.data.AUTOTUNE, deterministic=True)
  ds = ds.batch(per_replica_batch, drop_remainder=True)
  return ds.prefetch(tf.data.AUTOTUNE)


def per_replica_batch_size(global_batch, strategy, accumulation_steps=1, flag="batch size"):
  replicas = strategy.num_replicas_in_sync
  if global_batch % (replicas * accumulation_steps):
    raise ValueError(
        f"{flag} {global_batch} is not divisible by {replicas} replica(s) x "
        f"{accumulation_steps} accumulation step(s)")
  return global_batch // (replicas * accumulation_steps)


# ----------------------------------------------------------------------------
# Checkpoints.

def named_model_variables(model, names=None):
  """{stable unique name: variable} for EVERY variable of `model`.

  names: optional {name: variable} for (some of) them, e.g. checkpoints.tf1_variable_map
  (the original TF1 names); the rest (e.g. dropout seed-generator states) are named
  "other_<i>" in model.variables order. Keras paths are not used as keys: they are not
  unique (two Dense layers named "dense" in one block) and auto-numbered names
  ("seed_generator_7") depend on what the process built before.
  """
  named = dict(names or {})
  seen = {id(v) for v in named.values()}
  others = [v for v in model.variables if id(v) not in seen]
  for i, v in enumerate(others):
    named[f"other_{i}"] = v
  return named


def make_checkpoint(model, optimizer, step, names=None):
  """Our checkpoint: tf.train.Checkpoint(model=..., optimizer=..., step=...,
  model_variables={name: variable}).

  `model_variables` (see named_model_variables) holds every model variable under a
  stable name, so the checkpoint is complete and restorable whatever Keras 3 exposes as
  tf.train.Checkpoint children (it does not expose layers held in Python lists, nor
  seed generators). Being the shortest object path, it is also where the tensors are
  stored: key "model_variables/<name with '/' written '.S'>/.ATTRIBUTES/VARIABLE_VALUE",
  e.g. model_variables/bert.Sembeddings.Sword_embeddings/.ATTRIBUTES/VARIABLE_VALUE.
  """
  return tf.train.Checkpoint(model=model, optimizer=optimizer, step=step,
                             model_variables=named_model_variables(model, names))


def restore_model_variables(path, names):
  """Warm-starts from one of OUR checkpoints: restores the variables of `names`
  ({name: variable}, e.g. checkpoints.tf1_variable_map(model)) from the checkpoint's
  `model_variables` entry; optimizer slots and step are ignored. Returns the number
  of variables restored, or None when `path` is not such a checkpoint."""
  try:
    keys = {name for name, _ in tf.train.list_variables(path)}
  except (tf.errors.NotFoundError, ValueError, tf.errors.InvalidArgumentError):
    return None
  def key(name):
    return "model_variables/%s/.ATTRIBUTES/VARIABLE_VALUE" % (
        name.replace(".", "..").replace("/", ".S"))
  present = {n: v for n, v in names.items() if key(n) in keys}
  if not present:
    return None
  tf.train.Checkpoint(model_variables=present).restore(path).expect_partial()
  return len(present)


def warm_start(model, init_checkpoint):
  """--init_checkpoint: loads the model's variables from `init_checkpoint` (a file prefix or
  a directory, whose newest model.ckpt-N is used). One of our training checkpoints
  (model.ckpt-N) gives every variable of checkpoints.tf1_variable_map(model) it holds;
  anything else (Google's TF1 checkpoints, our exports, HuggingFace weights) goes through
  checkpoints.load_checkpoint. Variables absent from the checkpoint (e.g. a new task head)
  keep their initial values. Raises checkpoints.CheckpointError (a ValueError) on a mismatch."""
  if not init_checkpoint:
    return
  path = init_checkpoint
  if tf.io.gfile.isdir(path):
    path = latest_checkpoint(path) or path
  restored = restore_model_variables(path, checkpoints.tf1_variable_map(model))
  if restored:
    logging.info("init_checkpoint: restored %d variables from %s", restored, path)
  else:
    result = checkpoints.load_checkpoint(model, init_checkpoint)
    logging.info("init_checkpoint: %s", result)


def fine_tune(trainer, model, o, train_file, decode_fn, num_train_steps):
  """The fine-tuning scripts' training (run_classifier, run_squad): the records of
  train_file decoded by decode_fn, o.train_batch_size sequences a step (split over the
  replicas and o.gradient_accumulation_steps micro-batches), num_train_steps steps,
  warm-started from o.init_checkpoint, checkpoints in o.output_dir (resumed when there);
  logs step, loss, learning rate and examples/s every o.iterations_per_loop steps."""
  per_replica = per_replica_batch_size(o.train_batch_size, trainer.strategy,
                                       o.gradient_accumulation_steps, "--train_batch_size")

  def dataset(input_context, skip_records):
    return training_dataset([train_file], decode_fn, per_replica, input_context, seed=o.seed,
                            skip_records=skip_records)

  def log(step, stats):
    logging.info("step = %d, loss = %.5f, learning_rate = %.4g, examples/s = %.1f", step,
                 stats["loss"], stats["learning_rate"], stats["sequences_per_sec"])

  trainer.train(dataset, num_train_steps=num_train_steps, steps_per_loop=o.iterations_per_loop,
                output_dir=o.output_dir, save_checkpoints_steps=o.save_checkpoints_steps,
                keep_checkpoint_max=o.keep_checkpoint_max,
                init_fn=lambda: warm_start(model, o.init_checkpoint),
                global_batch_size=o.train_batch_size, log_fn=log)


def restore_for_inference(trainer, model, output_dir, init_checkpoint):
  """Without training: the newest checkpoint in output_dir, else init_checkpoint; a warning
  when there is neither (the weights stay freshly initialised)."""
  if trainer.restore_latest(output_dir):
    return
  if init_checkpoint:
    warm_start(model, init_checkpoint)
  else:
    logging.warning("No checkpoint in --output_dir %s and no --init_checkpoint: using freshly "
                    "initialised weights", output_dir)


def make_inference_fn(strategy, forward, use_xla=False):
  """forward(batch) -> outputs, run on every replica of `strategy` at once.

  batch: a dict of tensors [b, ...]; outputs: a nested structure (tf.nest) of tensors
  [b, ...]. Returns infer(arrays): `arrays` a dict of numpy arrays [B, ...]; B is padded up
  to a multiple of this worker's replica count and each replica gets its share of
  consecutive rows; returns the outputs as numpy arrays [B, ...] in row order (the padding
  dropped). In a multi-worker run every worker computes all B rows: the scripts' inference
  is per worker. One tf.function: call it with the same B every time (pad_batch) so that
  TPUs and XLA compile once.
  """
  if use_xla:
    forward = tf.function(forward, jit_compile=True)
  structure = []  # the structure of forward's outputs, seen when step is traced

  @tf.function
  def step(batch):
    outputs = strategy.run(forward, args=(batch,))
    structure[:] = [outputs]
    return [strategy.experimental_local_results(x) for x in tf.nest.flatten(outputs)]

  local = _local_replicas(strategy)

  def infer(arrays):
    n = len(next(iter(arrays.values())))
    per_replica = -(-n // local)
    arrays, _ = pad_batch(arrays, per_replica * local)

    def replica_rows(context):
      start = (context.replica_id_in_sync_group % local) * per_replica
      return {k: tf.constant(v[start:start + per_replica]) for k, v in arrays.items()}

    flat = step(strategy.experimental_distribute_values_from_function(replica_rows))
    return tf.nest.pack_sequence_as(
        structure[0], [np.concatenate([part.numpy() for part in parts])[:n] for parts in flat])

  return infer


def _local_replicas(strategy):
  """The number of replicas on this worker (all of them, except in a multi-worker run)."""
  try:
    return len(strategy.extended.worker_devices) or strategy.num_replicas_in_sync
  except (AttributeError, RuntimeError):  # the default strategy has no worker_devices
    return strategy.num_replicas_in_sync


def pad_batch(arrays, batch_size):
  """A dict of numpy arrays [n, ...], n <= batch_size -> (the arrays zero-padded to
  [batch_size, ...], n)."""
  n = len(next(iter(arrays.values())))
  if n == batch_size:
    return arrays, n
  return {k: np.concatenate([v, np.zeros((batch_size - n,) + v.shape[1:], v.dtype)])
          for k, v in arrays.items()}, n


def infer_dataset(infer, dataset, batch_size):
  """Runs infer (make_inference_fn) over a dataset of batches of at most batch_size (a dict
  of tensors each), every batch zero-padded to batch_size (one shape for every step) and the
  padding rows dropped from the outputs. Yields (batch as numpy arrays, outputs as numpy
  arrays) per batch, in order."""
  for batch in dataset:
    arrays = {k: v.numpy() for k, v in batch.items()}
    padded, n = pad_batch(arrays, batch_size)
    yield arrays, tf.nest.map_structure(lambda x: x[:n], infer(padded))


def script_main(run):
  """The absl main() of a run_* script: run(FLAGS), with a user's mistake (a ValueError,
  which checkpoints.CheckpointError and tokenization.VocabError are) reported as one line
  `error: ...` and exit status 1 instead of a traceback."""

  def main(unused_argv):
    logging.set_verbosity(logging.INFO)
    try:
      run(flags.FLAGS)
    except ValueError as e:
      raise SystemExit("error: " + " ".join(str(e).split())) from None

  return main


def make_checkpoint_manager(checkpoint, directory, max_to_keep=5):
  """Files <directory>/model.ckpt-<step>.{index,data-*} plus the "checkpoint"
  state file. A checkpoint becomes visible to latest_checkpoint only once the
  state file is rewritten (atomically, after the data and index are complete),
  so a run killed while saving resumes from the previous checkpoint."""
  return tf.train.CheckpointManager(checkpoint, directory, max_to_keep=max_to_keep,
                                    checkpoint_name="model.ckpt")


def latest_checkpoint(directory):
  try:
    return tf.train.latest_checkpoint(directory)
  except (tf.errors.NotFoundError, ValueError):
    return None


def write_text_atomic(path, text):
  """Writes `text` to path.tmp then renames it over path (tf.io.gfile)."""
  tmp = path + ".tmp"
  with tf.io.gfile.GFile(tmp, "w") as f:
    f.write(text)
  tf.io.gfile.rename(tmp, path, overwrite=True)


def format_results(results):
  """The original eval_results.txt: sorted "key = value" lines."""
  return "".join("%s = %s\n" % (key, str(results[key])) for key in sorted(results))


def write_scalars(writer, step, values):
  """TensorBoard scalar summaries without needing the tensorboard package
  (tf.summary.write with the "scalars" plugin metadata, as tf.summary.scalar)."""
  metadata = summary_pb2.SummaryMetadata()
  metadata.plugin_data.plugin_name = "scalars"
  with writer.as_default(step=step):
    for key, value in values.items():
      tf.summary.write(key, tf.constant(float(value), tf.float32), metadata=metadata)
  writer.flush()


# ----------------------------------------------------------------------------
# Throughput and model FLOPs utilisation.

_PEAK_FLOPS = {}


def measured_peak_flops(dtype="float32", n=2048, repeats=5):
  """FLOP/s of a large matmul on the first device (measured once per dtype):
  the denominator of model FLOPs utilisation (MFU)."""
  if dtype in _PEAK_FLOPS:
    return _PEAK_FLOPS[dtype]
  tf_dtype = {"float32": tf.float32, "bfloat16": tf.bfloat16, "float16": tf.float16}[dtype]
  if not tf.config.list_logical_devices("GPU") and not tf.config.list_logical_devices("TPU"):
    n = min(n, 1024)
  a = tf.random.normal([n, n], dtype=tf.float32)
  a = tf.cast(a, tf_dtype)

  @tf.function
  def matmuls(x):
    y = x
    for _ in range(repeats):
      y = tf.matmul(y, x) * tf.cast(1.0 / n, tf_dtype)
    return tf.reduce_sum(tf.cast(y, tf.float32))

  matmuls(a).numpy()
  start = time.perf_counter()
  matmuls(a).numpy()
  elapsed = time.perf_counter() - start
  _PEAK_FLOPS[dtype] = 2.0 * n ** 3 * repeats / max(elapsed, 1e-9)
  return _PEAK_FLOPS[dtype]


def bert_training_flops_per_sequence(config, seq_length, predictions_per_seq):
  """Matmul FLOPs of one training step per sequence (forward x 3): per layer and
  token 2*(4H^2 + 2HI) for the projections and 4*S*H for scores and context;
  pooler 2H^2; masked-LM head P*(2H^2 + 2HV); NSP 4H."""
  h, i = config.hidden_size, config.intermediate_size
  layers, v, s, p = config.num_hidden_layers, config.vocab_size, seq_length, predictions_per_seq
  forward = (s * layers * (2 * (4 * h * h + 2 * h * i) + 4 * s * h) + 2 * h * h +
             p * (2 * h * h + 2 * h * v) + 4 * h)
  return 3.0 * forward


# ----------------------------------------------------------------------------
# The custom training loop.

class Task:
  """What the loop needs from a script (all methods run per replica, in graph).

  denominators(batch) -> dict of float32 scalars: LOCAL sums computed from the
      inputs only (e.g. number of examples); summed by the loop over micro-batches
      and replicas before `loss` is called.
  loss(outputs, batch, denominators) -> (loss, stats): `loss` is this batch's
      contribution to the global-batch loss (local sums divided by the global
      denominators); `stats` a dict of float32 scalars summed for logging.
  model_inputs(batch) -> what the model is called on.
  train_stat_names: keys of the `stats` of loss(); summarize_train(sums, steps)
      turns their sums over a loop of `steps` steps into the logged values.
  eval_stats(outputs, batch) -> dict of local float32 sums (keys eval_stat_names
      minus the per-batch ones); per_batch_eval(global_sums) adds per-batch
      quantities (e.g. the batch loss); eval_results(totals, steps, global_step)
      -> the results dict written to eval_results.txt.
  """
  train_stat_names = ()
  eval_stat_names = ()

  def denominators(self, batch):
    raise NotImplementedError

  def loss(self, outputs, batch, denominators):
    raise NotImplementedError

  def model_inputs(self, batch):
    return batch


class ExampleMeanTask(Task):
  """A fine-tuning task whose loss is the mean over the GLOBAL batch of a per-example loss
  (whatever the replica count or accumulation), as the original's single-device loss; the
  model sees input_ids, input_mask and segment_ids. Subclasses give per_example_loss."""

  train_stat_names = ("loss",)

  def per_example_loss(self, outputs, batch):
    """float32 [b]."""
    raise NotImplementedError

  def model_inputs(self, batch):
    return {k: batch[k] for k in ("input_ids", "input_mask", "segment_ids")}

  def denominators(self, batch):
    return {"examples": tf.cast(tf.shape(batch["input_ids"])[0], tf.float32)}

  def loss(self, outputs, batch, denominators):
    loss = tf.reduce_sum(self.per_example_loss(outputs, batch)) / denominators["examples"]
    return loss, {"loss": loss}


def _sum_dicts(a, b):
  return {k: a[k] + b[k] for k in a}


class Trainer:
  """One custom loop for every strategy.

  Build the model (with variables), optimizer and step counter under
  strategy.scope(), then call train(). The optimizer must be built on
  model.trainable_variables (done here) before a checkpoint is restored.
  """

  def __init__(self, strategy, model, optimizer, task, *, accumulation_steps=1, use_xla=False,
               loss_scale=False, variable_names=None):
    self.strategy = strategy
    self.model = model
    self.optimizer = optimizer
    self.task = task
    self.accumulation_steps = int(accumulation_steps)
    self.use_xla = use_xla
    self.loss_scale = loss_scale
    self.variable_names = variable_names  # {name: variable}, see named_model_variables
    with strategy.scope():
      self.global_step = tf.Variable(
          0, dtype=tf.int64, trainable=False, name="global_step",
          aggregation=tf.VariableAggregation.ONLY_FIRST_REPLICA)
      self.optimizer.build(model.trainable_variables)
    self._train_loop = None
    self._eval_loop = None

  # -- per-replica computation ---------------------------------------------

  def _grads_and_stats(self, batch, denominators):
    tvars = self.model.trainable_variables
    with tf.GradientTape() as tape:
      outputs = self.model(self.task.model_inputs(batch), training=True)
      loss, stats = self.task.loss(outputs, batch, denominators)
      scaled = self.optimizer.scale_loss(loss) if self.loss_scale else loss
    grads = tape.gradient(scaled, tvars)
    grads = [tf.convert_to_tensor(g) if isinstance(g, tf.IndexedSlices) else g for g in grads]
    grads = [tf.zeros_like(v) if g is None else g for g, v in zip(grads, tvars)]
    return grads, stats

  def _replica_train_step(self, micro_batches):
    """micro_batches: tuple (accumulation_steps) of dicts of per-replica batches."""
    ctx = tf.distribute.get_replica_context()
    dens = self.task.denominators(micro_batches[0])
    for b in micro_batches[1:]:
      dens = _sum_dicts(dens, self.task.denominators(b))
    dens = ctx.all_reduce(tf.distribute.ReduceOp.SUM, dens)
    grad_fn = tf.function(self._grads_and_stats, jit_compile=True) if self.use_xla else \
        self._grads_and_stats
    if len(micro_batches) == 1:
      grads, stats = grad_fn(micro_batches[0], dens)
    else:
      stacked = {k: tf.stack([b[k] for b in micro_batches]) for k in micro_batches[0]}
      first = {k: v[0] for k, v in stacked.items()}
      grads, stats = grad_fn(first, dens)
      for i in tf.range(1, len(micro_batches)):
        batch = {k: v[i] for k, v in stacked.items()}
        more_grads, more_stats = grad_fn(batch, dens)
        grads = [g + h for g, h in zip(grads, more_grads)]
        stats = _sum_dicts(stats, more_stats)
    self.optimizer.apply(grads, self.model.trainable_variables)
    return stats

  def _replica_eval_step(self, batch):
    outputs = self.model(self.task.model_inputs(batch), training=False)
    return self.task.eval_stats(outputs, batch)

  # -- compiled loops -------------------------------------------------------

  def _build_train_loop(self):
    strategy = self.strategy

    @tf.function
    def train_loop(iterator, num_steps):
      sums = {k: tf.constant(0.0) for k in self.task.train_stat_names}
      for _ in tf.range(num_steps):
        micro = tuple(next(iterator) for _ in range(self.accumulation_steps))
        per_replica = strategy.run(self._replica_train_step, args=(micro,))
        sums = {k: sums[k] + strategy.reduce(tf.distribute.ReduceOp.SUM, per_replica[k],
                                             axis=None) for k in sums}
        self.global_step.assign_add(1)
      return sums

    return train_loop

  def _build_eval_loop(self):
    strategy = self.strategy

    @tf.function
    def eval_loop(iterator, num_steps):
      totals = {k: tf.constant(0.0) for k in self.task.eval_stat_names}
      for _ in tf.range(num_steps):
        per_replica = strategy.run(self._replica_eval_step, args=(next(iterator),))
        stats = {k: strategy.reduce(tf.distribute.ReduceOp.SUM, v, axis=None)
                 for k, v in per_replica.items()}
        stats = self.task.per_batch_eval(stats)
        totals = {k: totals[k] + stats[k] for k in totals}
      return totals

    return eval_loop

  # -- driver ---------------------------------------------------------------

  def train(self, dataset_fn, *, num_train_steps, steps_per_loop, output_dir,
            save_checkpoints_steps, keep_checkpoint_max=5, init_fn=None,
            global_batch_size, flops_per_sequence=None, peak_flops=None, log_fn=None):
    """Trains to num_train_steps (global), resuming from output_dir.

    dataset_fn(input_context, skip_records_per_pipeline) -> per-replica batched
    dataset (see training_dataset). init_fn() is called once when there is no
    checkpoint in output_dir (e.g. --init_checkpoint). Returns the final step.
    """
    strategy = self.strategy
    chief = is_chief(strategy)
    directory = worker_dir(strategy, output_dir)
    tf.io.gfile.makedirs(directory)
    checkpoint = make_checkpoint(self.model, self.optimizer, self.global_step,
                                 self.variable_names)
    manager = make_checkpoint_manager(checkpoint, directory, keep_checkpoint_max)
    # Every worker restores from the chief's directory.
    if not self.restore_latest(output_dir) and init_fn is not None:
      init_fn()
    step = int(self.global_step.numpy())
    if step >= num_train_steps:
      logging.info("global step %d >= num_train_steps %d: nothing to train", step,
                   num_train_steps)
      return step

    replicas = strategy.num_replicas_in_sync

    def distributed_fn(input_context):
      per_pipeline_replicas = replicas // input_context.num_input_pipelines
      per_replica = global_batch_size // (replicas * self.accumulation_steps)
      records = step * self.accumulation_steps * per_replica * per_pipeline_replicas
      if records:
        logging.info("Resuming the input at step %d: skipping %d records per input "
                     "pipeline", step, records)
      return dataset_fn(input_context, records)

    dataset = strategy.distribute_datasets_from_function(distributed_fn)
    iterator = iter(dataset)
    if self._train_loop is None:
      self._train_loop = self._build_train_loop()
    writer = tf.summary.create_file_writer(output_dir) if chief else \
        tf.summary.create_noop_writer()

    while step < num_train_steps:
      next_save = ((step // save_checkpoints_steps) + 1) * save_checkpoints_steps \
          if save_checkpoints_steps else num_train_steps
      n = min(steps_per_loop, num_train_steps - step, next_save - step)
      start = time.perf_counter()
      stats = self._train_loop(iterator, tf.constant(n, tf.int32))
      stats = {k: float(v.numpy()) for k, v in stats.items()}
      elapsed = time.perf_counter() - start
      step = int(self.global_step.numpy())
      stats = self.task.summarize_train(stats, n)
      stats["learning_rate"] = float(self.optimizer.learning_rate)  # of the next update
      seq_per_s = n * global_batch_size / max(elapsed, 1e-9)
      stats["sequences_per_sec"] = seq_per_s
      if flops_per_sequence and peak_flops:
        stats["mfu"] = seq_per_s * flops_per_sequence / (
            peak_flops * strategy.num_replicas_in_sync)
      if log_fn is not None:
        log_fn(step, stats)
      write_scalars(writer, step, stats)
      if step == num_train_steps or (save_checkpoints_steps and
                                     step % save_checkpoints_steps == 0):
        path = manager.save(checkpoint_number=step)
        if chief:
          logging.info("Saved checkpoint %s", path)
    if not chief:
      tf.io.gfile.rmtree(directory)
    return step

  def restore_latest(self, output_dir):
    """Restores model, optimizer and step from the newest checkpoint in output_dir;
    returns its path, or None when there is none."""
    latest = latest_checkpoint(output_dir)
    if latest:
      logging.info("Restoring from %s", latest)
      checkpoint = make_checkpoint(self.model, self.optimizer, self.global_step,
                                   self.variable_names)
      checkpoint.restore(latest).assert_existing_objects_matched()
    return latest

  def evaluate(self, dataset_fn, num_steps):
    """Runs num_steps eval batches; returns the task's summed eval statistics."""
    dataset = self.strategy.distribute_datasets_from_function(dataset_fn)
    if self._eval_loop is None:
      self._eval_loop = self._build_eval_loop()
    totals = self._eval_loop(iter(dataset), tf.constant(num_steps, tf.int32))
    return {k: v.numpy() for k, v in totals.items()}
