"""The tf.distribute side of the run_* scripts: which strategy runs them (one_device,
mirrored, multi_worker_mirrored or tpu), which worker is the chief, where each worker
writes, whether XLA is on by default, and the Keras dtype policy."""

import contextlib
import os
import shutil
import socket
import tempfile

from absl import logging
import keras
import tensorflow as tf

STRATEGIES = ("one_device", "mirrored", "multi_worker_mirrored", "tpu")


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
    except Exception as e:
      first = str(e).strip().splitlines()[0] if str(e).strip() else type(e).__name__
      raise ValueError(f"--tpu_name={tpu_name!r}: no TPU reachable ({first})") from None
    return tf.distribute.TPUStrategy(resolver)
  raise ValueError(f"--distribution_strategy={name}: expected one of {STRATEGIES}")


def strategy_for(placement, strategy=None):
  """The scripts' strategy: `strategy` if given, else the one a settings.Placement names
  (--distribution_strategy and the TPU flags, see build_strategy); logs it."""
  if strategy is None:
    strategy = build_strategy(placement.distribution_strategy, use_tpu=placement.use_tpu,
                              tpu_name=placement.tpu_name, tpu_zone=placement.tpu_zone,
                              gcp_project=placement.gcp_project, master=placement.master)
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
