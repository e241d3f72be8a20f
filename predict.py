r"""New text in, labelled answers out: a fine-tuned model's predictions on a file of texts.

  python predict.py --model_dir=/tmp/mrpc_output --input_file=new.tsv --output_file=out.jsonl

--model_dir: a run_* output_dir or its best/ (its task.json, labels.txt, bert_config.json,
vocab.txt and newest checkpoint: runtime/model_dir.py), an export_saved_model.py SavedModel
(its serving_default; the label names from its label_names output, else labels.txt in its
assets/ or beside it), an export_saved_model.py --format=tflite / onnx export (model.tflite
or model.onnx, or its directory: tokenized with its vocab.txt and model_config.json, run in
TFLite or ONNX Runtime, the same rows as its SavedModel's: prediction/tflite_onnx.py), a
sentence-transformers directory (embeddings, pooled and normalized as its modules say unless
--pooling / --normalize), or with --task=embeddings any checkpoint
directory checkpoints.load_model reads (Google's, HuggingFace's, or a model.safetensors /
pytorch_model.bin file, its directory supplying the other files).
--input_file: TSV or CSV with a header (by extension), JSON Lines (.jsonl, .json, .ndjson),
or "-" for standard input; --input_format overrides (for "-" without it, the first line
decides: "{" JSON Lines, a tab TSV, else CSV). The texts are the fields named as in training
(run_options.json's text_a_column / text_b_column), else the first present of text_a,
sentence1, sentence, text, question (text_a) and text_b, sentence2, context (text_b; squad:
question and context); --text_a_column, --text_b_column override.
--output_file (default or "-": standard output): JSON Lines, each input row's fields plus
the prediction's (a prediction field replaces an input field of the same name):
  classifier   "label", "probabilities" {label: p}
  multi-label  "labels" (the probabilities that reach task.json's thresholds, or
               --threshold), "probabilities"
  regression   "score"
  tagger       "entities" [{"type", "text", "start", "end", "score"}] (character offsets)
  squad        "answer" {"text", "start", "end"} (character offsets into the context)
  embeddings   "embedding" [floats] (--pooling, --normalize)
  reranker     "score" (the relevance logit of text_a = the query, text_b = the passage)

A reranker (run_reranker.py's model directory or its SavedModel) also reranks a TREC run:
  python predict.py --model_dir=/tmp/reranker_output --rerank_run=dev_run.trec \
    --corpus=corpus.jsonl --queries=queries.jsonl --output_file=reranked.trec
the first --rerank_top_k candidates of each query of the run scored (the BEIR corpus and
queries JSON lines), written as a TREC run (tasks/retrieval/reranking.py.rerank_file).
It streams: rows are read, predicted in batches of --batch_size and written one batch at a
time (memory does not grow with the input), into a temporary file (.<name>.tmp-<pid>,
utils/file_io.temp_name) renamed when complete; a temporary that a killed run left is
removed by the next run. Progress (rows/s, ETA) on stderr. A bad row (a missing field, not
UTF-8, not JSON or nested too deeply, a lone surrogate, a wrong number of fields, longer than
--max_row_bytes) is an error naming the file and line, and no output file is left; with
--skip_bad_rows it is skipped, and the count is logged at the end.
--max_row_bytes (default 1 MiB; 0: no bound) bounds a row's size: tokenizing a row costs
memory and time in proportion to its whole text (tens of times its size), however little of
it the model reads, so a larger row is refused rather than read.
"""

try:  # outside the venv: a one-line hint, not a traceback
  from bert_keras.utils import quiet_tensorflow  # noqa: F401  (first, before TensorFlow)
except ImportError as e:
  raise SystemExit(f"error: {e} (activate .venv: source .venv/bin/activate, or pip install -e .)")
import os
import sys
import time

from absl import app
from absl import flags
from absl import logging
import tensorflow as tf

from bert_keras import checkpoints
from bert_keras import modeling
from bert_keras import task_registry
from bert_keras.runtime import common_flags
from bert_keras.runtime import option_checks as checks
from bert_keras.runtime import outputs
from bert_keras.prediction import row_io
from bert_keras.prediction import predictors
from bert_keras.prediction import tflite_onnx
from bert_keras.tasks.retrieval import reranking
from bert_keras.utils import errors
from bert_keras.utils import file_io
from bert_keras.utils import progress as progress_lib

MAX_LOGGED_BAD_ROWS = 10
MAX_ROW_BYTES = 1 << 20
# What --task may name: what a checkpoint without a task of its own is served as.
CHECKPOINT_TASKS = tuple(dict.fromkeys(k.served_as for k in task_registry.kinds() if k.served_as))


def options(**overrides):
  """A namespace of all run() options: DEFAULTS updated with `overrides`."""
  return common_flags.make_options(DEFAULTS, overrides)


def define_flags(fv=flags.FLAGS):
  flags.DEFINE_string("model_dir", None, "A run_* output_dir (or its best/), a SavedModel of "
                      "export_saved_model.py, or (with --task=embeddings) a checkpoint "
                      "directory.", flag_values=fv)
  flags.DEFINE_string("input_file", None, "TSV/CSV with a header, JSON Lines, or - (stdin).",
                      flag_values=fv)
  flags.DEFINE_string("output_file", None, "JSON Lines to write (default or -: stdout).",
                      flag_values=fv)
  flags.DEFINE_enum("input_format", None, row_io.FORMATS,
                    "The input's format (default: by extension; stdin: by its first line).",
                    flag_values=fv)
  flags.DEFINE_string("text_a_column", None, "The field of the first text (default: as in "
                      "training, else text_a, sentence1, sentence, text or question).",
                      flag_values=fv)
  flags.DEFINE_string("text_b_column", None, "The field of the second text (default: as in "
                      "training, else text_b, sentence2 or context; \"none\": single texts).",
                      flag_values=fv)
  flags.DEFINE_enum("task", None, CHECKPOINT_TASKS, "embeddings: the encoder's pooled vectors "
                    "(any checkpoint; default: the model directory's task).", flag_values=fv)
  flags.DEFINE_integer("batch_size", 32, "Rows per model call.", flag_values=fv)
  flags.DEFINE_integer("max_seq_length", None, "Default: the model directory's task.json.",
                       flag_values=fv)
  flags.DEFINE_enum("pooling", None, modeling.POOLINGS, "--task=embeddings: mean (default), "
                    "cls or max.", flag_values=fv)
  flags.DEFINE_bool("normalize", False, "--task=embeddings: L2-normalise each embedding.",
                    flag_values=fv)
  flags.DEFINE_float("threshold", None, "Multi-label: one threshold for every label (default: "
                     "task.json's thresholds, else 0.5).", flag_values=fv)
  flags.DEFINE_bool("skip_bad_rows", False, "Skip and count bad rows instead of stopping.",
                    flag_values=fv)
  flags.DEFINE_integer("max_row_bytes", MAX_ROW_BYTES, "A row longer than this (bytes of its "
                       "lines) is a bad row (0: no bound).", flag_values=fv)
  flags.DEFINE_integer("doc_stride", None, "squad: the windows' stride (default: task.json).",
                       flag_values=fv)
  flags.DEFINE_integer("max_query_length", None, "squad: question pieces kept (task.json).",
                       flag_values=fv)
  flags.DEFINE_integer("max_answer_length", None, "squad: longest answer in pieces (task.json).",
                       flag_values=fv)
  flags.DEFINE_string("rerank_run", None, "A reranker: the TREC run whose candidates are "
                      "reranked (instead of --input_file; needs --corpus, --queries and "
                      "--output_file).", flag_values=fv)
  flags.DEFINE_string("corpus", None, "--rerank_run: the BEIR corpus.jsonl.", flag_values=fv)
  flags.DEFINE_string("queries", None, "--rerank_run: the BEIR queries.jsonl.", flag_values=fv)
  flags.DEFINE_integer("rerank_top_k", reranking.TOP_K, "--rerank_run: candidates reranked "
                       "per query.", flag_values=fv)
  flags.mark_flag_as_required("model_dir", flag_values=fv)


# The options of run() (options(), model_dir.resolve_options): the flags' names and defaults,
# read from define_flags without parsing or touching absl's FLAGS.
DEFAULTS = common_flags.flag_defaults(define_flags)


def check_options(options):
  """Flag problems as one-line ValueErrors, before the model is loaded."""
  if not options.model_dir or not (tf.io.gfile.isdir(options.model_dir)
                                   or checkpoints.is_weight_file(options.model_dir)
                                   or tflite_onnx.is_token_id_model(options.model_dir)):
    raise ValueError(f"--model_dir {options.model_dir}: no such directory")
  if options.rerank_run:
    _check_rerank_options(options)
    return
  if not options.input_file:
    raise ValueError("--input_file is required (a file, or - for standard input)")
  if options.input_file != "-" and not tf.io.gfile.exists(options.input_file):
    raise ValueError(f"--input_file {options.input_file}: no such file")
  row_io.format_of(options.input_file, options.input_format)
  checks.check(options, {checks.POSITIVE: ("batch_size",),
                         checks.AT_LEAST: {"max_row_bytes": (0, "0: no bound"),
                                           "max_seq_length": (3, "[CLS] a piece [SEP]")}})
  if options.task not in (None,) + CHECKPOINT_TASKS:
    raise ValueError(f"--task={options.task}: only {', '.join(CHECKPOINT_TASKS)} (else the "
                     "model's own task)")
  checks.check(options, {checks.CHOICES: {"pooling": (None,) + modeling.POOLINGS},
                         checks.FRACTION: ("threshold",)})
  if ((options.pooling is not None or options.normalize)
      and not (options.task and task_registry.get(options.task).family.pooled)
      and not predictors.is_saved_model(options.model_dir)
      and not tflite_onnx.is_token_id_model(options.model_dir)
      and not predictors.is_embeddings_model_dir(options.model_dir)):
    raise ValueError("--pooling / --normalize are for --task=embeddings (or an embeddings "
                     "model directory or SavedModel)")
  output = options.output_file
  if output and output != "-":
    if options.input_file != "-" and os.path.abspath(output) == os.path.abspath(
        options.input_file):
      raise ValueError(f"--output_file {output} is the --input_file")
    outputs.check_output(output, "--output_file", options.model_dir, "--model_dir")
    if tf.io.gfile.isdir(output):
      raise ValueError(f"--output_file {output} is a directory: name a file")
    parent = os.path.dirname(output)
    if parent and not file_io.is_remote(output) and not os.path.isdir(parent):
      raise ValueError(f"--output_file {output}: no such directory {parent}")


def _check_rerank_options(options):
  """--rerank_run's flags: the run, corpus and queries files, an output file, a top k."""
  if options.input_file:
    raise ValueError("--rerank_run replaces --input_file: pass one")
  if not options.corpus or not options.queries:
    raise ValueError("--rerank_run needs --corpus and --queries (BEIR JSON lines)")
  if not options.output_file or options.output_file == "-":
    raise ValueError("--rerank_run needs --output_file (the reranked TREC run)")
  checks.check(options, {checks.EXISTING_FILES: ("rerank_run", "corpus", "queries"),
                         checks.POSITIVE: ("rerank_top_k", "batch_size")})


class Columns(object):
  """The text fields of the rows: resolved from the first good row (the header of a
  TSV/CSV), then required in every row."""

  def __init__(self, predictor, text_a_column, text_b_column):
    trained_a, trained_b = predictor.text_columns
    self.a_flag, self.b_flag = text_a_column, text_b_column
    self.a, self.b = text_a_column or trained_a, text_b_column or trained_b
    self.pair, self.task = predictor.pair, predictor.task
    self.squad = predictor.kind.family.answers
    self.resolved = False

  def resolve(self, fields, where):
    names = list(fields)
    if self.b is not None and self.b.lower() == "none":
      self.b = ""
    if self.a is None:
      defaults = predictors.SQUAD_FIELDS[:1] if self.squad else predictors.TEXT_A_FIELDS
      self.a = next((n for n in defaults if n in fields), None)
      if self.a is None:
        raise ValueError(f"{where}: no text field ({' or '.join(defaults)}) among "
                         f"{names}: name it with --text_a_column")
    elif self.a not in fields:
      raise ValueError(f"{where}: no field {self.a!r} (--text_a_column) among {names}")
    if self.pair == "no":
      if self.b_flag:
        raise ValueError(f"--text_b_column={self.b_flag}: the {self.task} model takes one "
                         "text (its kind, or its task.json's \"pair\": false: trained on "
                         "single texts)")
      self.b = ""
    elif self.b is None:
      defaults = predictors.SQUAD_FIELDS[1:] if self.squad else predictors.TEXT_B_FIELDS
      self.b = next((n for n in defaults if n in fields and n != self.a), "")
      if self.squad and not self.b:
        raise ValueError(f"{where}: no context field among {names}: name it with "
                         "--text_b_column")
    elif self.b and self.b not in fields:
      raise ValueError(f"{where}: no field {self.b!r} (--text_b_column) among {names}")
    self.resolved = True

  def texts(self, fields):
    """(text_a, text_b) of a row, or a str saying why it has none."""
    texts = []
    for name in (self.a, self.b):
      if not name:
        texts.append("")
        continue
      value = fields.get(name)
      if value is None:
        return f"no field {name!r}"
      if not isinstance(value, str):
        return f"field {name!r} is not a string"
      texts.append(value)
    return tuple(texts)


def row_texts(row, reader, columns):
  """(texts, None) of a row of row_io.Reader `reader` (Columns `columns` resolved on the
  first good row), or (None, why it is a bad row): the rule predict.py and predict_beam.py
  share."""
  if row.error is not None:
    return None, row.error
  if not columns.resolved:
    columns.resolve(row.fields, reader.where(row.line))
  texts = columns.texts(row.fields)
  return (None, texts) if isinstance(texts, str) else (texts, None)


def _batches(reader, columns, options, counts):
  """Lists of (fields, text_a, text_b) of at most --batch_size good rows; bad rows are a
  ValueError naming the line, or (--skip_bad_rows) counted and logged."""
  batch = []
  for row in reader:
    counts["rows"] += 1
    texts, error = row_texts(row, reader, columns)
    if error is not None:
      if not options.skip_bad_rows:
        raise ValueError(f"{reader.where(row.line)}: {error} (--skip_bad_rows skips such "
                         "rows)")
      counts["bad"] += 1
      if counts["bad"] <= MAX_LOGGED_BAD_ROWS:
        logging.warning("skipped %s: %s", reader.where(row.line), error)
      continue
    batch.append((row, texts[0], texts[1]))
    if len(batch) == options.batch_size:
      yield batch
      batch = []
  if batch:
    yield batch


def predict_stream(predictor, reader, write, options):
  """Reads, predicts and writes (write(str) per output line) every row; returns the counts
  {"rows", "bad", "written"}."""
  columns = Columns(predictor, options.text_a_column, options.text_b_column)
  counts = {"rows": 0, "bad": 0, "written": 0}
  renamed = {}  # (an input field with an output's name: said once)
  progress = progress_lib.Progress(reader.size)
  for batch in _batches(reader, columns, options, counts):
    texts_b = [b for _, _, b in batch] if columns.b else None
    results = predictor.predict([a for _, a, _ in batch], texts_b)
    for (row, _, _), prediction in zip(batch, results):
      bad = row_io.non_finite(prediction)
      if bad is not None:
        raise ValueError(f"{reader.where(row.line)}: the model of --model_dir "
                         f"{options.model_dir} outputs {bad[0]} = {bad[1]} for this row, not a "
                         "number (its weights or config are broken: a diverged model?); refused")
      fields = row_io.merged_row(row.fields, prediction)
      if not counts["written"] and not renamed:
        renamed.update(row_io.renamed_fields(row.fields, prediction))
        for name, kept in renamed.items():
          logging.warning("%s: the input's field %r is written as %r (predict.py writes its "
                          "%r)", reader.where(row.line), name, kept, name)
      try:
        line = row_io.json_line(fields)
      except (RecursionError, ValueError) as e:  # (a field nested almost too deeply to read)
        raise ValueError(f"{reader.where(row.line)}: the row cannot be written as JSON: "
                         f"{type(e).__name__}") from None
      write(line)
    counts["written"] += len(batch)
    done = counts["written"]
    eta = ("" if reader.size is None else ", %.0f%%, ETA %s" % (
        100.0 * reader.bytes_read / max(reader.size, 1),
        progress.eta(done, reader.bytes_read / max(reader.size, 1))))
    progress.show(f"predict: {done} rows, {progress.rate(done):.1f} rows/s{eta}")
  progress.finish()
  return counts


def load_predictor(options):
  """The prediction/predictors.Predictor of --model_dir and the model options."""
  if tflite_onnx.is_token_id_model(options.model_dir):  # a TFLite / ONNX export (token ids in)
    return tflite_onnx.load(options.model_dir, pooling=options.pooling,
                            normalize=options.normalize, threshold=options.threshold)
  predictor = predictors.load(
      options.model_dir, task=options.task, max_seq_length=options.max_seq_length,
      pooling=options.pooling, normalize=options.normalize, threshold=options.threshold,
      batch_size=options.batch_size,
      squad_options=dict(doc_stride=options.doc_stride,
                         max_query_length=options.max_query_length,
                         max_answer_length=options.max_answer_length))
  if (options.pooling is not None or options.normalize) and not predictor.kind.family.pooled:
    raise ValueError(f"--pooling / --normalize are for embeddings, not a {predictor.task} "
                     "model")
  for name in ("doc_stride", "max_query_length", "max_answer_length"):
    if getattr(options, name) is not None and not predictor.kind.family.answers:
      raise ValueError(f"--{name}={getattr(options, name)} is for a squad model, not the "
                       f"{predictor.task} model of --model_dir {options.model_dir} (a "
                       "classifier's windows are its task.json's doc_stride)")
  if options.threshold is not None and not predictor.multi_label:
    raise ValueError(f"--threshold={options.threshold} is for a multi-label model (one trained "
                     f"with --multi_label), not the {predictor.task} model of --model_dir "
                     f"{options.model_dir}")
  return predictor


def predict_file(predictor, options):
  """Streams --input_file through `predictor` to --output_file (atomically) or stdout;
  returns the counts {"rows", "bad", "written"}."""
  reader = row_io.Reader(options.input_file,
                             row_io.format_of(options.input_file, options.input_format),
                             max_row_bytes=options.max_row_bytes)
  start = time.perf_counter()
  output = options.output_file
  if not output or output == "-":
    counts = predict_stream(predictor, reader, sys.stdout.write, options)
    sys.stdout.flush()
  else:
    parent, name = os.path.split(output)
    file_io.remove_stale_temporaries(parent or ".", finals=[name], log=logging.info)
    with file_io.atomic_output(output) as tmp:
      with file_io.open_write(tmp) as f:
        counts = predict_stream(predictor, reader, lambda line: f.write(line.encode("utf-8")),
                                options)
  seconds = time.perf_counter() - start
  logging.info("predict: %d rows in %.1f s (%.1f rows/s)%s -> %s", counts["written"], seconds,
               counts["written"] / max(seconds, 1e-9),
               f"; skipped {counts['bad']} bad rows" if counts["bad"] else "",
               output if output and output != "-" else "<stdout>")
  return counts


def rerank_run(predictor, options):
  """--rerank_run: the run's candidates scored by a reranker `predictor`, written to
  --output_file; returns {"queries", "pairs"}."""
  if not predictor.kind.family.ranks or predictor.pair == "no":
    raise ValueError(f"--rerank_run: --model_dir {options.model_dir} is a {predictor.task} "
                     "model, not a reranker")
  counts = reranking.rerank_file(
      lambda queries, passages: [row["score"] for row in predictor.predict(queries, passages)],
      options.rerank_run, options.corpus, options.queries, options.output_file,
      options.rerank_top_k, options.batch_size)
  logging.info("predict: reranked %d queries (%d pairs) of %s -> %s", counts["queries"],
               counts["pairs"], options.rerank_run, options.output_file)
  return counts


def run(options):
  """Checks the options, loads the model, streams --input_file to --output_file (or reranks
  --rerank_run)."""
  check_options(options)
  if options.rerank_run:
    return rerank_run(load_predictor(options), options)
  return predict_file(load_predictor(options), options)


main = errors.script_main(run)


if __name__ == "__main__":
  define_flags()
  app.run(main, flags_parser=errors.parse_flags)
