"""Distributed inference for the run_* scripts and extract_features: a model's forward
pass run on every replica of a strategy at once, over numpy batches padded to one shape."""

import numpy as np
import tensorflow as tf

from bert_keras.runtime import input_pipeline
from bert_keras.utils import progress as progress_lib


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

  @tf.function(reduce_retracing=True)  # trimmed batches (trim_batch) vary in length
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


def infer_dataset(infer, dataset, batch_size, trim_key=None, what="rows"):
  """Runs infer (make_inference_fn) over a dataset of batches of at most batch_size (a dict
  of tensors each), every batch zero-padded to batch_size (one shape for every step) and the
  padding rows dropped from the outputs. Yields (batch as numpy arrays, outputs as numpy
  arrays) per batch, in order. A progress line ("inference: 640 of 3,000 rows, 21.3 rows/s,
  ETA 0:01:51"; `what` names the rows) at most every 30 seconds, whatever the batch size.

  trim_key: e.g. "input_mask": each batch's sequence features are cut to the batch's longest
  sequence first (trim_batch), which saves the work on the padding; outputs with a sequence
  axis then have the trimmed length (a caller pads them back if it needs to)."""
  batches = int(dataset.cardinality())
  total = batches * batch_size if batches >= 0 else None  # (at most: the last may be short)
  progress, done = progress_lib.Progress(total, live=False), 0
  for batch in dataset:
    arrays = {k: v.numpy() for k, v in batch.items()}
    inputs = trim_batch(arrays, trim_key)[0] if trim_key else arrays
    padded, n = pad_batch(inputs, batch_size)
    outputs = tf.nest.map_structure(lambda x: x[:n], infer(padded))
    done += n
    of = f" of about {total:,}" if total else ""
    progress.show(f"inference: {done:,}{of} {what}, {progress.rate(done):.1f} {what}/s, "
                  f"ETA {progress.eta(done) if total else '?'}")
    yield arrays, outputs


def trim_batch(arrays, mask_key="input_mask", multiple=8):
  """A dict of numpy arrays, `arrays[mask_key]` [B, S] (1 = real token, 0 = padding at the
  end) -> (the dict with every array of shape [B, S, ...] cut to [B, L, ...], L), L the
  batch's longest sequence rounded up to a multiple of `multiple`, at most S
  (input_pipeline.trimmed_length).
  BERT's outputs at the real positions do not depend on the padding beyond them (the
  attention masks it out), so the model gives the same results on the trimmed batch."""
  mask = arrays[mask_key]
  seq_length = mask.shape[1]
  length = int(input_pipeline.trimmed_length(mask, multiple))
  if length == seq_length:
    return arrays, length
  return {k: v[:, :length] if v.ndim >= 2 and v.shape[1] == seq_length else v
          for k, v in arrays.items()}, length
