# coding=utf-8
"""The run_* scripts' input pipelines over TFRecord files: the file list of --input_file,
the seeded and seekable training pipeline, the evaluation pipeline, the per-replica batch
size, and the int64 feature the record writers use."""

import tensorflow as tf


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
  """-> (number of input pipelines, this pipeline's index); (1, 0) without a context."""
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
  """The batch of one replica's micro-batch: global_batch / (replicas x accumulation_steps);
  ValueError naming `flag` when that does not divide evenly."""
  replicas = strategy.num_replicas_in_sync
  if global_batch % (replicas * accumulation_steps):
    raise ValueError(
        f"{flag} {global_batch} is not divisible by {replicas} replica(s) x "
        f"{accumulation_steps} accumulation step(s)")
  return global_batch // (replicas * accumulation_steps)
