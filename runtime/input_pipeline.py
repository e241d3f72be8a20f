"""The run_* scripts' input pipelines over TFRecord files: the file list of --input_file,
the seeded and seekable training pipeline, the evaluation pipeline, the per-replica batch
size; and the one record writer (RecordWriter, example_bytes: features to tf.train.Examples in
a TFRecord file written under a temporary name)."""

import collections

import numpy as np
import tensorflow as tf

from bert_keras.utils import errors
from bert_keras.utils import file_io


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


class IdCheck(collections.namedtuple("IdCheck", "vocab_size features source flag")):
  """Token ids checked in every batch (check_batch_ids): the int features `features` must lie
  in [0, vocab_size); source names where vocab_size comes from (e.g. "--bert_config_file
  config.json"), flag the files' flag."""


def _records_with_source(file_index, path):
  """(file_index, record index in its file, serialized record) of each record of the file
  `path`."""
  return tf.data.Dataset.zip((tf.data.Dataset.from_tensors(file_index).repeat(),
                              tf.data.Dataset.counter(), tf.data.TFRecordDataset(path)))


def _file_list(files, id_check):
  """The dataset of the file names, or with id_check of (index in files, name) pairs."""
  if id_check is None:
    return tf.data.Dataset.from_tensor_slices(tf.constant(files))
  return tf.data.Dataset.from_tensor_slices((tf.range(len(files), dtype=tf.int32),
                                             tf.constant(files)))


def check_batch_ids(check, batch, paths, indexes):
  """`batch` (a dict of [B, ...] features) after a vectorised check of its token ids: one max
  (and min) per row of each feature of `check` (an IdCheck). An id outside [0, vocab_size)
  stops the pipeline with an InvalidArgumentError whose marked text (utils.errors
  data_error_text, which script_main shows as the one line) names the file and record:
  on every device (tf.data runs on the host), where a GPU's tf.gather would read zeros.
  paths: the files' names (string [F]); indexes: (file int32 [B], record int64 [B]) of each
  row."""
  file_indexes, indexes = indexes
  checks = []
  for name in check.features:
    ids = tf.cast(batch[name], tf.int64)
    rows = tf.reshape(ids, [tf.shape(ids)[0], -1])
    empty = tf.zeros_like(rows[:, :1])
    largest = tf.reduce_max(tf.concat([rows, empty], 1), axis=1)
    smallest = tf.reduce_min(tf.concat([rows, empty], 1), axis=1)
    bad = (largest >= check.vocab_size) | (smallest < 0)

    def fail(name=name, bad=bad, largest=largest, smallest=smallest):
      # (the message is made only for a bad batch)
      row = tf.argmax(tf.cast(bad, tf.int32), output_type=tf.int32)
      value = tf.where(largest[row] >= check.vocab_size, largest[row], smallest[row])
      message = tf.strings.join([
          errors.DATA_ERROR_START, check.flag, " ", tf.gather(paths, file_indexes[row]),
          ": record ", tf.strings.as_string(indexes[row]), " has token id ",
          tf.strings.as_string(value), f" in {name}, outside the vocab_size "
          f"{check.vocab_size} of {check.source} (records made with another vocab than the "
          "config's, or damaged)", errors.DATA_ERROR_END])
      with tf.control_dependencies([tf.debugging.Assert(False, [message], summarize=1)]):
        return tf.constant(False)
    checks.append(tf.cond(tf.reduce_any(bad), fail, lambda: tf.constant(True)))
  with tf.control_dependencies(checks):
    return {key: tf.identity(value) for key, value in batch.items()}


def _decode_and_batch(ds, files, decode_fn, per_replica_batch, id_check):
  """records (or (file index, record index, record) with id_check) -> decoded batches,
  checked."""
  if id_check is None:
    ds = ds.map(decode_fn, num_parallel_calls=tf.data.AUTOTUNE, deterministic=True)
    return ds.batch(per_replica_batch, drop_remainder=True)
  ds = ds.map(lambda file_index, index, raw: (decode_fn(raw), file_index, index),
              num_parallel_calls=tf.data.AUTOTUNE, deterministic=True)
  ds = ds.batch(per_replica_batch, drop_remainder=True)
  names = tf.constant(files)
  return ds.map(lambda batch, file_indexes, indexes: check_batch_ids(
      id_check, batch, names, (file_indexes, indexes)),
      num_parallel_calls=tf.data.AUTOTUNE, deterministic=True)


def training_dataset(files, decode_fn, per_replica_batch, input_context=None, seed=12345,
                     skip_records=0, cycle_length=4, shuffle_buffer=100, trim=False,
                     id_check=None):
  """The original training pipeline, made deterministic and seekable.

  file names -> shard by input pipeline (by file when there are at least as many
  files as pipelines, else by record after interleaving) -> repeat -> shuffle
  (buffer = number of files) -> parallel interleave of TFRecordDatasets
  (cycle_length min(4, files), deterministic order) -> shuffle(100) ->
  skip(skip_records) -> parallel decode -> batch(per_replica_batch,
  drop_remainder=True). Both shuffles are seeded, so the record order is a pure
  function of (files, seed, pipeline): skipping the records consumed before a
  checkpoint resumes the exact input position (records are skipped before
  decoding; TFRecord reading only). trim: each batch is then cut to its longest
  sequence (trim_to_longest; batches of varying length, so not for TPU). id_check: an
  IdCheck of every batch's token ids (check_batch_ids; the records then carry their file
  and index through the pipeline, in the same order).
  """
  num_pipelines, pipeline_id = _context_values(input_context)
  ds = _file_list(files, id_check)
  shard_files = num_pipelines > 1 and len(files) >= num_pipelines
  if shard_files:
    ds = ds.shard(num_pipelines, pipeline_id)
  n_files = len(files) // num_pipelines if shard_files else len(files)
  ds = ds.repeat()
  ds = ds.shuffle(max(n_files, 1), seed=seed, reshuffle_each_iteration=True)
  ds = ds.interleave(tf.data.TFRecordDataset if id_check is None else _records_with_source,
                     cycle_length=max(1, min(cycle_length, n_files)),
                     num_parallel_calls=tf.data.AUTOTUNE, deterministic=True)
  if num_pipelines > 1 and not shard_files:
    ds = ds.shard(num_pipelines, pipeline_id)
  ds = ds.shuffle(shuffle_buffer, seed=seed + 1, reshuffle_each_iteration=True)
  if skip_records:
    ds = ds.skip(skip_records)
  ds = _decode_and_batch(ds, files, decode_fn, per_replica_batch, id_check)
  if trim:
    ds = ds.map(trim_to_longest, num_parallel_calls=tf.data.AUTOTUNE, deterministic=True)
  return ds.prefetch(tf.data.AUTOTUNE)


# The features [B, S] that trim_to_longest cuts (tag_ids: run_ner's per-piece tags).
SEQUENCE_FEATURES = ("input_ids", "input_mask", "segment_ids", "tag_ids")


def trim_to_longest(batch, multiple=8):
  """A batch (dict) whose input_mask is [B, S] (1 = real token, padding at the end) -> the
  same dict with the SEQUENCE_FEATURES it has cut to [B, L], L = trimmed_length
  (the rule of inference.trim_batch too), in TensorFlow ops for tf.data. Other features are
  unchanged. BERT's outputs at the real tokens do not depend on the padding beyond them."""
  length = trimmed_length(batch["input_mask"], multiple)
  return {k: v[:, :length] if k in SEQUENCE_FEATURES else v for k, v in batch.items()}


def trimmed_length(mask, multiple=8):
  """input_mask [B, S] (tensor or array) -> int32 scalar tensor L: the longest sequence
  (max of sum(mask)) rounded up to a multiple of `multiple` (fewer distinct shapes to trace;
  an all-padding or empty batch counts as 1 long), at most S."""
  mask = tf.convert_to_tensor(mask)
  longest = tf.reduce_max(tf.reduce_sum(tf.cast(mask, tf.int32), axis=1))
  return tf.minimum(tf.shape(mask)[1],
                    tf.maximum(1, (longest + multiple - 1) // multiple) * multiple)


def int64_feature(values):
  """A tf.train.Feature holding the ints `values` (an int64_list), as the original's
  create_int_feature."""
  return tf.train.Feature(int64_list=tf.train.Int64List(value=list(values)))


def _feature(values):
  """A tf.train.Feature of `values`: a float array (np.floating) as a float_list, strings or
  bytes as a bytes_list, anything else as ints (int64_feature), flattened."""
  array = np.asarray(values)
  if array.size == 0:  # (no values: an int64 list, whatever NumPy's default dtype)
    return int64_feature([])
  if array.dtype.kind == "f":
    return tf.train.Feature(float_list=tf.train.FloatList(value=array.reshape(-1).tolist()))
  if array.dtype.kind in "SUO":
    return tf.train.Feature(bytes_list=tf.train.BytesList(value=[
        v.encode("utf-8") if isinstance(v, str) else bytes(v) for v in array.reshape(-1)]))
  return int64_feature(array.reshape(-1).tolist())


def example_bytes(features):
  """{name: values} -> a serialized tf.train.Example: ints (lists or int arrays of any shape,
  flattened) as int64 lists, float arrays as float lists, strings as bytes; the one way our
  records are written."""
  return tf.train.Example(features=tf.train.Features(feature={
      name: _feature(values) for name, values in features.items()})).SerializeToString()


class RecordWriter(object):
  """A TFRecord file of tf.train.Examples written under a temporary name (file_io.temp_name):
  write(features) adds one (example_bytes); close() renames it into place, abort() removes
  it. As a context manager: closed when the body ends, aborted when it raises."""

  def __init__(self, path):
    self.path, self.records = path, 0
    self._tmp = file_io.temp_name(path)
    self._writer = tf.io.TFRecordWriter(self._tmp)

  def write(self, features):
    self._writer.write(example_bytes(features))
    self.records += 1

  def close(self):
    self._writer.close()
    try:
      file_io.rename(self._tmp, self.path)
    except BaseException:
      file_io.remove_quietly(self._tmp)
      raise

  def abort(self):
    self._writer.close()
    file_io.remove_quietly(self._tmp)

  def __enter__(self):
    return self

  def __exit__(self, error_type, error, traceback):
    if error_type is None:
      self.close()
    else:
      self.abort()


def evaluation_dataset(files, decode_fn, per_replica_batch, input_context=None, id_check=None):
  """The original eval pipeline: files in order, repeat, batch with drop_remainder;
  records are split round-robin between input pipelines when there are several. id_check:
  as training_dataset's."""
  num_pipelines, pipeline_id = _context_values(input_context)
  if id_check is None:
    ds = tf.data.TFRecordDataset(tf.constant(files))
  else:
    ds = _file_list(files, id_check).flat_map(_records_with_source)
  ds = ds.repeat()
  if num_pipelines > 1:
    ds = ds.shard(num_pipelines, pipeline_id)
  ds = _decode_and_batch(ds, files, decode_fn, per_replica_batch, id_check)
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


def check_record_files(files, flag, feature_lengths, vocab_size=None, id_features=(),
                       vocab_source="", first_records=64):
  """Checks TFRecord files before a model is built; a ValueError naming the flag and file.

  Each file must be a whole TFRecord file: not empty, and (local files) its record framing
  must end exactly at the end of the file (a file cut short inside a record, or a text file
  given as records, is found here instead of training on part of it; a file cut exactly
  between two records cannot be told from a shorter file). Its first `first_records`
  records are read by TensorFlow (which checks their CRCs) and must hold the features of
  `feature_lengths` ({name: values per record}, as the flags give them), and token ids
  (`id_features`) below `vocab_size` (ids past the vocab give NaNs on GPU/TPU). The records
  past those are checked as they are read (IdCheck in training_dataset, evaluation_dataset).
  """
  for path in files:
    _check_record_framing(path, flag)
    try:
      records = [r.numpy() for r in tf.data.TFRecordDataset(path).take(first_records)]
    except tf.errors.OpError as e:
      message = (e.message or type(e).__name__).strip().splitlines()[0]
      raise ValueError(f"{flag} {path}: not a readable TFRecord file ({message})") from None
    for index, raw in enumerate(records):
      _check_record(raw, index, path, flag, feature_lengths, vocab_size, id_features,
                    vocab_source)


def _check_record_framing(path, flag):
  if tf.io.gfile.isdir(path):
    raise ValueError(f"{flag} {path}: a directory, not a TFRecord file (give a file or a glob "
                     f"such as {path.rstrip('/')}/*.tfrecord)")
  try:
    size = tf.io.gfile.stat(path).length
  except tf.errors.OpError as e:
    raise ValueError(f"{flag} {path}: cannot read it ({e.message})") from None
  if size == 0:
    raise ValueError(f"{flag} {path}: empty file (no records)")
  if "://" in path:
    return  # remote: walking every record would read the whole file; TF checks as it reads
  offset = count = 0
  try:
    with open(path, "rb") as f:
      while offset < size:
        f.seek(offset)
        header = f.read(8)
        if len(header) < 8:
          break
        offset += 16 + int.from_bytes(header, "little")  # length, its CRC, data, data CRC
        count += 1
  except OSError as e:
    raise ValueError(f"{flag} {path}: cannot read it ({e.strerror})") from None
  if offset != size:
    raise ValueError(f"{flag} {path}: not a whole TFRecord file: record {count} ends at byte "
                     f"{offset} of {size} (cut short, or not a TFRecord file)")


def _check_record(raw, index, path, flag, feature_lengths, vocab_size, id_features,
                  vocab_source):
  try:
    features = tf.train.Example.FromString(raw).features.feature
  except Exception:  # protobuf's DecodeError
    raise ValueError(f"{flag} {path}: record {index} is not a tf.train.Example") from None
  for name, length in feature_lengths.items():
    if name not in features:
      raise ValueError(f"{flag} {path}: record {index} has no feature {name!r}")
    feature = features[name]
    found = len(feature.int64_list.value) or len(feature.float_list.value)
    if found != length:
      raise ValueError(f"{flag} {path}: record {index} has {found} values of {name}, the "
                       f"flags give {length} (records written with other --max_seq_length / "
                       f"--max_predictions_per_seq?)")
  for name in id_features if vocab_size else ():
    values = features[name].int64_list.value if name in features else ()
    largest = max(values, default=0)
    if largest >= vocab_size:
      raise ValueError(f"{flag} {path}: record {index} has token id {largest} in {name}, but "
                       f"{vocab_source} has vocab_size {vocab_size} (records made with a "
                       f"larger vocab than the config's)")
