r"""predict.py on Apache Beam: a fine-tuned model's predictions on many files of texts, on any
runner.

  python predict_beam.py --model_dir=/tmp/mrpc_output --input_file='new/*.tsv' \
    --output_file=/tmp/predictions/new --direct_num_workers=2 \
    --direct_running_mode=multi_processing

The same model directories, tasks, text fields, flags and output rows as predict.py (which
see), as a Beam pipeline: locally with the DirectRunner, or on Dataflow, Flink or Spark (an
argument that is not one of our flags goes to Beam's PipelineOptions). It is the same job on
another runner, so it imports predict (its checks, Columns, load_predictor) and row_io
(the row reader and the JSON line) instead of rewriting them.
--input_file: a file pattern, or several separated by commas (TSV, CSV, JSON Lines, each as
predict.py reads one; the text fields are resolved per file from its first good row).
--output_file: a prefix; the rows go to PREFIX-SSSSS-of-NNNNN.jsonl (--num_shards, 0: the
runner decides), in no particular order. Each row is predict.py's row (the input's fields
plus the prediction's), and when it has no --id_column field, "input_file" and "input_line"
(the file and the row's first line) say where it came from. Embeddings with
--output_tfrecord: also PREFIX-SSSSS-of-NNNNN.tfrecord, one tf.train.Example a row ("id"
bytes: the --id_column value, else "FILE:LINE"; "embedding" float_list).
The pipeline: the files spread over the workers, each read row by row (ReadRows), the rows
spread again, predicted by RunInference with PredictorHandler (the model loaded once per
worker process, batches of --batch_size rows), written as sharded text (and TFRecord).
A bad row stops the pipeline with predict.py's one-line error naming the file and line; with
--skip_bad_rows it is counted (the "bad_rows" counter) and written to the dead-letter output
PREFIX-errors-SSSSS-of-NNNNN.jsonl ({"file", "line", "reason"}).
The launcher checks the flags and loads the model once itself (a missing or unreadable model
directory is an error before anything starts); the workers need the package installed with
its [beam] extra (README: "Predicting on Apache Beam").
"""

try:  # outside the venv: a one-line hint, not a traceback
  from bert_keras.utils import quiet_tensorflow  # noqa: F401  (first, before TensorFlow)
except ImportError as e:
  raise SystemExit(f"error: {e} (activate .venv: source .venv/bin/activate, or pip install -e .)")
import json
import os
import re
import time
import types

from absl import app
from absl import flags
from absl import logging
import numpy as np
import tensorflow as tf

from bert_keras import checkpoints
from bert_keras import predict
from bert_keras import task_registry
from bert_keras.pretraining_data import tfrecord_encoding
from bert_keras.runtime import beam_runner
from bert_keras.runtime import common_flags
from bert_keras.runtime import input_pipeline
from bert_keras.prediction import row_io
from bert_keras.utils import errors
from bert_keras.utils import file_io

beam = beam_runner.import_beam()
if beam is not None:
  from apache_beam import coders
  from apache_beam.io import filebasedsink
  from apache_beam.io.filesystem import CompressionTypes
  from apache_beam.io.filesystems import FileSystems
  from apache_beam.ml.inference import base as inference_base

  class FramedRecordSink(filebasedsink.FileBasedSink):
    """Shards of records framed already (tfrecord_frame): written as they are. (Beam's
    WriteToTFRecord needs a CRC32C package the [beam] extra does not install.)"""

    def __init__(self, prefix, suffix, num_shards, shard_name_template):
      super().__init__(prefix, coder=coders.BytesCoder(), file_name_suffix=suffix,
                       num_shards=num_shards, shard_name_template=shard_name_template,
                       mime_type="application/octet-stream",
                       compression_type=CompressionTypes.UNCOMPRESSED)

    def write_encoded_record(self, file_handle, value):
      file_handle.write(value)

NAMESPACE = "predict_beam"
_DoFn = beam.DoFn if beam is not None else object
_ModelHandler = inference_base.ModelHandler if beam is not None else object
# The options the workers need (predict.load_predictor's and the row reader's).
MODEL_OPTIONS = ("model_dir", "task", "max_seq_length", "pooling", "normalize", "threshold",
                 "batch_size", "doc_stride", "max_query_length", "max_answer_length")
# The fields a row without --id_column gets: where it came from.
REFERENCE_FIELDS = ("input_file", "input_line")


class PredictError(ValueError):
  """A user's mistake found on a worker (a bad row, a model that does not load): its message
  is the one line the launcher reports (worker_error_message)."""


def options(**overrides):
  """A namespace of all run() options: DEFAULTS updated with `overrides`."""
  return common_flags.make_options(DEFAULTS, overrides)


def define_flags(fv=flags.FLAGS):
  """predict.py's flags plus the pipeline's."""
  predict.define_flags(fv)
  flags.DEFINE_string("runner", "DirectRunner",
                      "Beam runner: DirectRunner (local), DataflowRunner, FlinkRunner, "
                      "SparkRunner, ... Other Beam pipeline options (--project, --region, "
                      "--temp_location, --setup_file, ...) are passed on to Beam as given.",
                      flag_values=fv)
  flags.DEFINE_integer("direct_num_workers", 1,
                       "DirectRunner: parallel workers (0: one per CPU).", flag_values=fv)
  flags.DEFINE_enum("direct_running_mode", "in_memory", beam_runner.RUNNING_MODES,
                    "DirectRunner: how workers run (multi_processing for real parallelism).",
                    flag_values=fv)
  flags.DEFINE_integer("num_shards", 0, "Output shards (0: the runner decides).",
                       flag_values=fv)
  flags.DEFINE_string("id_column", "id", "The input field that identifies a row; rows "
                      "without it get input_file and input_line.", flag_values=fv)
  flags.DEFINE_bool("output_tfrecord", False, "Embeddings: also write the vectors as "
                    "PREFIX-SSSSS-of-NNNNN.tfrecord (tf.train.Example: id, embedding).",
                    flag_values=fv)
  flags.DEFINE_bool("overwrite", False, "Replace the shards an earlier run left under "
                    "--output_file (without it they are refused: two runs' rows would mix).",
                    flag_values=fv)


DEFAULTS = common_flags.flag_defaults(define_flags)


# ----------------------------------------------------------------------------------------------
# The workers' parts

class ModelInfo(object):
  """What reading a row needs to know of the model (predict.Columns' `predictor`): its task,
  pair and training text fields; picklable, unlike the predictor."""

  def __init__(self, task, pair, text_columns):
    self.task, self.pair, self.text_columns = task, pair, tuple(text_columns)

  @property
  def kind(self):
    return task_registry.get(self.task)


class ReadRows(_DoFn):
  """A file's path -> its good rows (path, line, fields, text_a, text_b or None); a bad row
  is a PredictError, or (skip_bad_rows) a {"file", "line", "reason"} on the "bad" output."""

  def __init__(self, info, input_format, text_a_column, text_b_column, skip_bad_rows,
               max_row_bytes=predict.MAX_ROW_BYTES):
    self.info, self.input_format = info, input_format
    self.text_a_column, self.text_b_column = text_a_column, text_b_column
    self.skip_bad_rows, self.max_row_bytes = skip_bad_rows, max_row_bytes

  def setup(self):
    self.c_rows = beam.metrics.Metrics.counter(NAMESPACE, "rows")
    self.c_bad = beam.metrics.Metrics.counter(NAMESPACE, "bad_rows")

  def process(self, path):
    try:
      yield from self._rows(path)
    except PredictError:
      raise
    except ValueError as e:  # the header, the text fields: predict.py's errors
      raise PredictError(str(e)) from None

  def _rows(self, path):
    reader = row_io.Reader(path, row_io.format_of(path, self.input_format),
                           max_row_bytes=self.max_row_bytes)
    columns = predict.Columns(self.info, self.text_a_column, self.text_b_column)
    for row in reader:
      self.c_rows.inc()
      texts, error = predict.row_texts(row, reader, columns)
      if error is not None:
        if not self.skip_bad_rows:
          raise PredictError(f"{reader.where(row.line)}: {error} (--skip_bad_rows skips "
                             "such rows)")
        self.c_bad.inc()
        yield beam.pvalue.TaggedOutput("bad", row_io.json_line(
            {"file": path, "line": row.line, "reason": error}).rstrip("\n"))
        continue
      yield path, row.line, row.fields, texts[0], texts[1] if columns.b else None


# A predictor per process and options: the launcher's own, reused by an in-process worker.
_PREDICTORS = {}


def _predictor(model_options):
  key = json.dumps(model_options, sort_keys=True)
  if key not in _PREDICTORS:
    _PREDICTORS[key] = predict.load_predictor(predict.options(**model_options))
  return _PREDICTORS[key]


class PredictorHandler(_ModelHandler):
  """RunInference's ModelHandler of a predict.py predictor: load_model loads --model_dir once
  per worker process (RunInference shares it between the process's threads and bundles);
  run_inference predicts a batch of rows (path, line, fields, text_a, text_b) and gives
  each row's output dict (output_row)."""

  def __init__(self, model_options, id_column):
    super().__init__(min_batch_size=model_options["batch_size"],
                     max_batch_size=model_options["batch_size"])
    self._model_options, self._id_column = dict(model_options), id_column

  def load_model(self):
    try:
      return _predictor(self._model_options)
    except ValueError as e:
      raise PredictError(str(e)) from None

  def run_inference(self, batch, model, inference_args=None):
    texts_b = None
    if any(b is not None for _, _, _, _, b in batch):
      texts_b = [b or "" for _, _, _, _, b in batch]
    try:
      results = model.predict([a for _, _, _, a, _ in batch], texts_b)
    except ValueError as e:
      raise PredictError(str(e)) from None
    return [output_row(path, line, fields, prediction, self._id_column)
            for (path, line, fields, _, _), prediction in zip(batch, results)]

  def get_metrics_namespace(self):
    return NAMESPACE


def output_row(path, line, fields, prediction, id_column):
  """predict.py's output row (row_io.merged_row: the input fields, an input field with an
  output's name kept as input_<name>, then the prediction's), plus input_file and input_line
  when it has no `id_column` field."""
  row = row_io.merged_row(fields, prediction)
  if id_column not in fields:
    row.update(zip(REFERENCE_FIELDS, (path, line)))
  return row


def row_id(row, id_column):
  """The id of an output row: its `id_column` value, else "FILE:LINE"."""
  if id_column in row:
    return str(row[id_column])
  return "%s:%d" % (row[REFERENCE_FIELDS[0]], row[REFERENCE_FIELDS[1]])


def embedding_example(row, id_column):
  """A serialized tf.train.Example of an embeddings row: "id" bytes, "embedding" floats."""
  return input_pipeline.example_bytes({
      "id": [row_id(row, id_column)], "embedding": np.asarray(row["embedding"], np.float32)})


_CRC = []  # the process's tfrecord_encoding.Crc32c (its tables grow to the longest record)


def masked_crc32c(data):
  """TFRecord's masked CRC32C of `data` (bytes), with tfrecord_encoding's tables."""
  if not _CRC:
    _CRC.append(tfrecord_encoding.Crc32c(64))
  crc = _CRC[0]
  crc.ensure(len(data))
  part = types.SimpleNamespace(crc=None, data=np.frombuffer(data, np.uint8)[None], valid=None,
                               size=np.array([len(data)]))
  return int(crc.finish(crc.contribution(part, np.zeros(1, np.int64)),
                        np.array([len(data)]))[0])


def tfrecord_frame(record):
  """One TFRecord: the length, its masked CRC32C, the record, its masked CRC32C."""
  length = len(record).to_bytes(8, "little")
  return (length + masked_crc32c(length).to_bytes(4, "little") + record
          + masked_crc32c(record).to_bytes(4, "little"))


def _count_written(line):
  beam.metrics.Metrics.counter(NAMESPACE, "written").inc()
  return line


# ----------------------------------------------------------------------------------------------
# The launcher

def expand_inputs(input_file):
  """The files of --input_file's comma-separated patterns (local or any Beam file system),
  sorted, each once."""
  found = set()
  for pattern in input_file.split(","):
    if pattern:
      for result in FileSystems.match([pattern]):
        found.update(m.path for m in result.metadata_list)
  return sorted(found)


def check_options(options):
  """predict.py's checks (on the first input file) and the pipeline's; returns the input
  files."""
  if beam is None:
    raise ValueError("apache-beam is not installed (pip install 'bert-keras[beam]')")
  if options.rerank_run:
    raise ValueError("--rerank_run: predict.py reranks a TREC run; predict_beam.py scores "
                     "rows of (query, passage) in --input_file")
  if not options.input_file or options.input_file == "-":
    raise ValueError("--input_file is required: a file pattern (a pipeline does not read "
                     "standard input)")
  if not options.output_file or options.output_file == "-":
    raise ValueError("--output_file is required: the prefix of the output shards")
  if not options.model_dir or not (tf.io.gfile.isdir(options.model_dir)
                                   or checkpoints.is_weight_file(options.model_dir)):
    raise ValueError(f"--model_dir {options.model_dir}: no such directory")
  try:
    files = expand_inputs(options.input_file)
  except Exception as e:  # a pattern Beam's file systems cannot read (bad scheme, ...)
    raise ValueError(f"--input_file {options.input_file}: {errors.error_line(e, 300)}") from None
  if not files:
    raise ValueError(f"--input_file {options.input_file}: no files match")
  predict.check_options(types.SimpleNamespace(**dict(vars(options), input_file=files[0],
                                                     output_file=None)))
  if options.num_shards < 0:
    raise ValueError(f"--num_shards={options.num_shards}: must be 0 (automatic) or positive")
  if options.direct_num_workers < 0:
    raise ValueError(f"--direct_num_workers={options.direct_num_workers}: must be 0 (one per "
                     "CPU) or positive")
  prefix = options.output_file
  if not file_io.is_remote(prefix) and os.path.isdir(prefix):
    raise ValueError(f"--output_file {prefix}: a directory; give the shards' prefix inside it "
                     f"(e.g. {os.path.join(prefix, 'predictions')})")
  shard = _shard_pattern(prefix)
  covered = [f for f in files if shard.match(_local(f))]
  if covered:
    raise ValueError(f"--input_file {options.input_file} holds the output shards of "
                     f"--output_file {prefix} ({covered[0]}): a run would read its own output")
  earlier = output_shards(prefix)
  if earlier and not options.overwrite:
    raise ValueError(f"--output_file {prefix}: {len(earlier)} shards of an earlier run are "
                     f"there ({earlier[0]}); pass --overwrite to replace them (the two runs' "
                     "rows would mix)")
  return files


def _local(path):
  return path if file_io.is_remote(path) else os.path.abspath(path)


def _shard_pattern(prefix):
  """The names of the shards a run writes under `prefix`: rows, dead letters, TFRecords."""
  return re.compile(re.escape(_local(prefix)) + r"(-errors)?-\d{5}-of-\d{5}\.(jsonl|tfrecord)$")


def output_shards(prefix):
  """The shards under `prefix` that a run writes (or an earlier run wrote), sorted."""
  pattern = _shard_pattern(prefix)
  found = FileSystems.match([prefix + "-*"])[0].metadata_list
  return sorted(m.path for m in found if pattern.match(_local(m.path)))


def build_pipeline(pipeline, files, info, options):
  """Adds the transforms to `pipeline`: files -> rows -> predictions -> shards."""
  model_options = {name: getattr(options, name) for name in MODEL_OPTIONS}
  shards = dict(num_shards=options.num_shards, shard_name_template="-SSSSS-of-NNNNN")
  read = (pipeline
          | "Files" >> beam.Create(files)
          | "SpreadFiles" >> beam.Reshuffle()
          | "ReadRows" >> beam.ParDo(ReadRows(
              info, options.input_format, options.text_a_column, options.text_b_column,
              options.skip_bad_rows, options.max_row_bytes)).with_outputs("bad", main="rows"))
  rows = (read.rows
          | "SpreadRows" >> beam.Reshuffle()
          | "Predict" >> inference_base.RunInference(
              PredictorHandler(model_options, options.id_column)))
  written = (
      rows
      | "JsonLines" >> beam.Map(lambda row: _count_written(row_io.json_line(row)[:-1]))
      | "Write" >> beam.io.WriteToText(options.output_file, file_name_suffix=".jsonl", **shards))
  if options.output_tfrecord:
    (rows
     | "Examples" >> beam.Map(lambda row: tfrecord_frame(embedding_example(
         row, options.id_column)))
     | "WriteTFRecord" >> beam.io.Write(FramedRecordSink(
         options.output_file, ".tfrecord", options.num_shards, shards["shard_name_template"])))
  if options.skip_bad_rows:
    # Written once the rows' shards are final: a sink deletes the files that its shards'
    # pattern (PREFIX-*-of-NNNNN.jsonl) matches before it renames its own, the dead letters'
    # (PREFIX-errors-...) among them.
    (read.bad
     | "AfterRows" >> beam.Map(lambda line, unused_written: line, beam.pvalue.AsList(written))
     | "WriteErrors" >> beam.io.WriteToText(options.output_file + "-errors",
                                            file_name_suffix=".jsonl", **shards))


def worker_error_message(exc):
  """The message of a PredictError raised on a worker (Beam wraps worker errors, or only
  their text), or None."""
  seen = set()
  e = exc
  while e is not None and id(e) not in seen:
    seen.add(id(e))
    if isinstance(e, PredictError):
      return _without_step(e)
    e = e.__cause__ or e.__context__
  found = re.findall(r"PredictError: (.+)$", str(exc), re.M)
  return _without_step(found[-1]) if found else None


def _without_step(message):
  """A worker error's message without the step Beam appends ("[while running 'Step']")."""
  return re.sub(r"( \[while running '[^\]]*'\])+$", "", str(message).strip())


def _temporary_dirs(prefix):
  """The write transforms' temporary directories beside a local `prefix` (beam-temp-*)."""
  if file_io.is_remote(prefix):
    return set()
  parent = os.path.dirname(prefix) or "."
  name = os.path.basename(prefix)
  return {os.path.join(parent, n) for n in os.listdir(parent)
          if n.startswith(f"beam-temp-{name}-")}


def run(options, beam_options=None):
  """Checks the options, loads the model (the launcher's check), runs the pipeline; returns
  the counts {"rows", "bad", "written"}."""
  files = check_options(options)
  model_options = {name: getattr(options, name) for name in MODEL_OPTIONS}
  predictor = _predictor(model_options)
  if options.output_tfrecord and not predictor.kind.family.pooled:
    raise ValueError(f"--output_tfrecord: for embeddings, not a {predictor.task} model")
  info = ModelInfo(predictor.task, predictor.pair, predictor.text_columns)
  beam_options = beam_options if beam_options is not None else beam_runner.pipeline_options(
      options.runner, options.direct_num_workers, options.direct_running_mode)
  runner = beam_runner.runner_for(beam_options)
  if runner is not None:  # the DirectRunner's INFO lines (servers, workers) are noise here
    import logging as std_logging
    std_logging.getLogger("apache_beam").setLevel(std_logging.WARNING)
  logging.info("predict_beam: %d input files -> %s-SSSSS-of-NNNNN.jsonl", len(files),
               options.output_file)
  parent = os.path.dirname(options.output_file)
  if parent and not file_io.is_remote(parent):
    os.makedirs(parent, exist_ok=True)  # (as Beam's sinks make a bucket's folders)
  for path in output_shards(options.output_file):  # (--overwrite: checked)
    FileSystems.delete([path])
  for path in _temporary_dirs(options.output_file):
    logging.info("predict_beam: removing %s, a temporary folder that a killed run left", path)
    tf.io.gfile.rmtree(path)
  before = _temporary_dirs(options.output_file)
  start = time.perf_counter()
  pipeline = beam.Pipeline(runner=runner, options=beam_options)
  build_pipeline(pipeline, files, info, options)
  try:
    result = pipeline.run()
    result.wait_until_finish()
  except BaseException as e:
    for path in _temporary_dirs(options.output_file) - before:
      tf.io.gfile.rmtree(path)
    message = worker_error_message(e)
    if message is not None:
      raise ValueError(message) from None
    raise
  counters, _ = beam_runner.metrics(result, NAMESPACE)
  counts = {"rows": counters.get("rows", 0), "bad": counters.get("bad_rows", 0),
            "written": counters.get("written", 0)}
  seconds = time.perf_counter() - start
  logging.info("predict_beam: %d rows in %.1f s (%.1f rows/s)%s -> %s-*.jsonl",
               counts["written"], seconds, counts["written"] / max(seconds, 1e-9),
               f"; skipped {counts['bad']} bad rows ({options.output_file}-errors-*.jsonl)"
               if counts["bad"] else "", options.output_file)
  return counts


def main(argv):
  logging.set_verbosity(logging.INFO)
  with errors.one_line_errors():
    beam_args = list(argv[1:])
    if beam is None:
      raise ValueError("apache-beam is not installed (pip install 'bert-keras[beam]')")
    unknown = beam_runner.unknown_beam_args(beam_args)
    if unknown:
      raise ValueError(f"{' '.join(unknown)}: neither a flag of predict_beam.py nor a Beam "
                       "pipeline option")
    values = options(**{name: flags.FLAGS[name].value for name in DEFAULTS})
    beam_options = beam_runner.pipeline_options(
        values.runner, values.direct_num_workers, values.direct_running_mode, beam_args)
    run(values, beam_options)


if __name__ == "__main__":
  define_flags()
  app.run(main, flags_parser=beam_runner.parse_flags)
