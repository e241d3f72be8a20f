r"""BERT fine-tuning and prediction on SQuAD 1.1 and SQuAD 2.0 (the original run_squad.py).

Same flags, defaults, examples, features (doc_stride windows), TFRecords (train.tf_record,
eval.tf_record), span head (cls/squad/*, create_model) and loss as the original, and the same
predictions.json, nbest_predictions.json and (--version_2_with_negative) null_odds.json; the
TPUEstimator is replaced by training.py's loop and strategies (checkpoints model.ckpt-N in
--output_dir, resumable). Prediction streams (windows -> model -> answers, a batch at a time)
and, when --predict_file has the answers, evaluates itself with evaluate_squad.py
(eval_results.json; v2.0 also predictions_best_threshold.json).

  python run_squad.py --vocab_file=$BERT_BASE_DIR/vocab.txt \
    --bert_config_file=$BERT_BASE_DIR/bert_config.json \
    --init_checkpoint=$BERT_BASE_DIR/bert_model.ckpt --do_train=True \
    --train_file=$SQUAD_DIR/train-v1.1.json --do_predict=True \
    --predict_file=$SQUAD_DIR/dev-v1.1.json --train_batch_size=12 --learning_rate=3e-5 \
    --num_train_epochs=2.0 --max_seq_length=384 --doc_stride=128 --output_dir=/tmp/squad_base/

Read top to bottom: flags; the TFRecords of the features (FeatureWriter, decode_fn);
training and prediction (create_model, SpanPredictor); run(); evaluation. Reading the SQuAD
JSON (SquadExample, read_squad_examples) and the windows (InputFeatures,
convert_examples_to_features) live in tasks/squad/data.py, the post-processing
(write_predictions, PredictionWriter, get_final_text) in tasks/squad/predictions.py; this
module re-exports them under the original's names.
"""

try:  # outside the venv: a one-line hint, not a traceback
  from bert_keras.utils import quiet_tensorflow  # noqa: F401  (first, before TensorFlow)
except ImportError as e:
  raise SystemExit(f"error: {e} (activate .venv: source .venv/bin/activate, or pip install -e .)")
import collections
import dataclasses
import json
import math
import os
import random

from absl import app
from absl import flags
from absl import logging
import numpy as np
import tensorflow as tf

from bert_keras import evaluate_squad
from bert_keras import losses
from bert_keras import modeling
from bert_keras import tokenization
from bert_keras.runtime import common_flags
from bert_keras.runtime import inference
from bert_keras.runtime import input_pipeline
from bert_keras.runtime import job
from bert_keras.runtime import model_dir
from bert_keras.runtime import option_checks as checks
from bert_keras.runtime import run_checks
from bert_keras.runtime import settings
from bert_keras.runtime import training
from bert_keras.tasks.squad import data as squad_data
from bert_keras.tasks.squad import predictions as squad_predictions
from bert_keras.tasks import tfds_input
from bert_keras.tasks import windows
from bert_keras.utils import errors
from bert_keras.utils import file_io
from bert_keras.utils import progress as progress_lib


def options(**overrides):
  """A namespace of all run() options: DEFAULTS updated with `overrides`."""
  return common_flags.make_options(DEFAULTS, overrides)


def define_flags(fv=flags.FLAGS):
  """The original's flags (same names, types and defaults) plus training.py's."""
  common_flags.define_model_flags(max_seq_length=384, fv=fv)
  flags.DEFINE_string("train_file", None, "SQuAD json for training. E.g., train-v1.1.json",
                      flag_values=fv)
  flags.DEFINE_string("predict_file", None,
                      "SQuAD json for predictions. E.g., dev-v1.1.json or test-v1.1.json",
                      flag_values=fv)
  flags.DEFINE_integer(
      "doc_stride", 128,
      "When splitting up a long document into chunks, how much stride to take between chunks.",
      flag_values=fv)
  flags.DEFINE_integer(
      "max_query_length", 64,
      "The maximum number of tokens for the question. Questions longer than "
      "this will be truncated to this length.", flag_values=fv)
  flags.DEFINE_bool("do_train", False, "Whether to run training.", flag_values=fv)
  flags.DEFINE_bool("do_predict", False, "Whether to run eval on the dev set.", flag_values=fv)
  flags.DEFINE_integer("train_batch_size", 32, "Total batch size for training.", flag_values=fv)
  flags.DEFINE_integer("predict_batch_size", 8, "Total batch size for predictions.", flag_values=fv)
  flags.DEFINE_integer(
      "n_best_size", 20,
      "The total number of n-best predictions to generate in the "
      "nbest_predictions.json output file.", flag_values=fv)
  flags.DEFINE_integer(
      "max_answer_length", 30,
      "The maximum length of an answer that can be generated. This is needed "
      "because the start and end predictions are not conditioned on one another.", flag_values=fv)
  flags.DEFINE_bool(
      "verbose_logging", False,
      "If true, all of the warnings related to data processing will be printed. "
      "A number of warnings are expected for a normal SQuAD evaluation.", flag_values=fv)
  flags.DEFINE_bool(
      "version_2_with_negative", False,
      "If true, the SQuAD examples contain some that do not have an answer.", flag_values=fv)
  flags.DEFINE_float(
      "null_score_diff_threshold", 0.0,
      "If null_score - best_non_null is greater than the threshold predict null.", flag_values=fv)
  flags.DEFINE_string(
      "tfds_name", None,
      "Read SQuAD through TensorFlow Datasets instead of --train_file/--predict_file: "
      "squad/v1.1 or squad/v2.0 (train split for training, validation for predictions). "
      "Never downloads.", flag_values=fv)
  flags.DEFINE_string("tfds_data_dir", None,
                      "TensorFlow Datasets data directory of --tfds_name (default: TFDS's).",
                      flag_values=fv)
  flags.DEFINE_bool(
      "trim_predict_batches", False,
      "Cut each prediction batch to its longest window (rounded up to a multiple of 64) and "
      "rank answer candidates over each window's own tokens only: faster, the same logits; "
      "the original also ranks the padding positions (never an answer) for its n_best_size "
      "candidates, so an undertrained model's answers can differ. Off: the original's.",
      flag_values=fv)
  common_flags.define_shared_flags(("fine_tuning", "tpu", "training", "trim_train_batches"),
                                   fv=fv)
  flags.adopt_module_key_flags(common_flags, flag_values=fv)  # (--help lists them)


# The options of run() (options(), model_dir.resolve_options): the flags' names and defaults,
# read from define_flags without parsing or touching absl's FLAGS.
DEFAULTS = common_flags.flag_defaults(define_flags)


# ----------------------------------------------------------------------------
# Examples and features: tasks/squad/data.py (reading the SQuAD JSON, the doc_stride windows),
# under the original's names.

SquadExample = squad_data.SquadExample
split_context = squad_data.split_context
read_squad_examples = squad_data.read_squad_examples
read_tfds_squad_examples = squad_data.read_tfds_squad_examples
tfds_squad_reader = squad_data.tfds_squad_reader
InputFeatures = squad_data.InputFeatures
FIRST_UNIQUE_ID = squad_data.FIRST_UNIQUE_ID
MAX_LOGGED_WINDOWS = squad_data.MAX_LOGGED_WINDOWS
DocSpan = squad_data.DocSpan
doc_spans_of = squad_data.doc_spans_of
convert_examples_to_features = squad_data.convert_examples_to_features
# The original's private names of the max-context check (tasks/windows.py).
_window_starts = windows.window_starts
_check_is_max_context = windows.check_is_max_context


class FeatureWriter(object):
  """Writes InputFeatures as tf.train.Examples to `filename` (input_pipeline.RecordWriter: a
  temporary name, renamed by close()): int64 unique_ids [1], input_ids, input_mask,
  segment_ids [S] and, when training, start_positions, end_positions and is_impossible (1/0)
  [1]."""

  def __init__(self, filename, is_training):
    self.filename = filename
    self.is_training = is_training
    self.num_features = 0
    self._writer = input_pipeline.RecordWriter(filename)

  def process_feature(self, feature):
    self.num_features += 1
    features = collections.OrderedDict()
    features["unique_ids"] = [feature.unique_id]
    features["input_ids"] = feature.input_ids
    features["input_mask"] = feature.input_mask
    features["segment_ids"] = feature.segment_ids
    if self.is_training:
      features["start_positions"] = [feature.start_position]
      features["end_positions"] = [feature.end_position]
      features["is_impossible"] = [1 if feature.is_impossible else 0]
    self._writer.write(features)

  def close(self):
    self._writer.close()

  def abort(self):
    """Closes and removes the temporary if still there (after close(): nothing)."""
    self._writer.abort()


def decode_fn(seq_length, is_training):
  """Serialized tf.train.Example -> dict of int32 tensors: unique_ids (scalar), input_ids,
  input_mask, segment_ids [S] and, when training, start_positions / end_positions (scalars);
  is_impossible is written but not read, as the original."""
  feature_types = {
      "unique_ids": tf.io.FixedLenFeature([], tf.int64),
      "input_ids": tf.io.FixedLenFeature([seq_length], tf.int64),
      "input_mask": tf.io.FixedLenFeature([seq_length], tf.int64),
      "segment_ids": tf.io.FixedLenFeature([seq_length], tf.int64),
  }
  if is_training:
    feature_types["start_positions"] = tf.io.FixedLenFeature([], tf.int64)
    feature_types["end_positions"] = tf.io.FixedLenFeature([], tf.int64)

  def decode(record):
    example = tf.io.parse_single_example(record, feature_types)
    return {k: tf.cast(v, tf.int32) for k, v in example.items()}

  return decode


# ----------------------------------------------------------------------------
# Training and prediction.

class SquadTask(training.ExampleMeanTask):
  """The batch mean of squad_loss ((start + end cross-entropy) / 2) over the GLOBAL batch."""

  def per_example_loss(self, outputs, batch):
    start_logits, end_logits = span_logits(outputs)
    return losses.squad_loss(start_logits, end_logits, batch["start_positions"],
                               batch["end_positions"])


def span_logits(outputs):
  """BertSquad's outputs -> (start_logits, end_logits), float32 [B, S] each (the one place
  that reads them)."""
  return outputs["start_logits"], outputs["end_logits"]


def create_model(bert_config, is_training, input_ids, input_mask, segment_ids,
                 use_one_hot_embeddings=False, model=None):
  """The original's create_model: BERT's sequence output [B, S, H] through the span head
  (cls/squad/output_weights [2, H], cls/squad/output_bias [2]) -> (start_logits, end_logits),
  float32 [B, S] each (unmasked: padding positions get logits too, as the original).

  input_ids, input_mask, segment_ids: int [B, S]. is_training: dropout on. model: the
  modeling.BertSquad to run (its weights); None builds a new one from bert_config.
  use_one_hot_embeddings: the original's TPU embedding lookup; the same numbers, ignored.
  """
  del use_one_hot_embeddings
  if model is None:
    model = modeling.BertSquad(bert_config)
  outputs = model({"input_ids": input_ids, "input_mask": input_mask,
                   "segment_ids": segment_ids}, training=is_training)
  return span_logits(outputs)


# Post-processing (squad_predictions.py), under the original's names.
RawResult = squad_predictions.RawResult
write_predictions = squad_predictions.write_predictions
PredictionWriter = squad_predictions.PredictionWriter
get_final_text = tokenization.get_final_text

# Prediction batches are cut to their longest window rounded up to a multiple of this: the
# forward pass is traced (and, with XLA, compiled) for at most max_seq_length / 64 shapes.
TRIM_MULTIPLE = 64


def trim_batch(arrays, multiple=None):
  """A dict of arrays [B, S] with "input_mask" (1s then 0s) -> the same arrays [B, L]:
  inference.trim_batch's rule with `multiple` (default TRIM_MULTIPLE). Only columns that are
  padding in every row go: the logits at the kept positions are unchanged (to float
  rounding), since attention never looks at padding."""
  return inference.trim_batch(arrays, multiple=multiple or TRIM_MULTIPLE)[0]


class SpanPredictor(object):
  """The model over SQuAD windows, batch_size at a time, as they come: add(window) each,
  then flush(). A window: anything with unique_id, input_ids, input_mask, segment_ids
  (InputFeatures). Each batch is padded to batch_size rows (one shape for the replicas);
  on_result(window, RawResult) is called for every window in order with its logits over all
  max_seq_length positions, as the original; with trim, each batch is trimmed (trim_batch)
  and the logits are over the window's own tokens only (sum(input_mask) Python floats: its
  padding positions, never an answer, are not kept). At most batch_size windows wait at a
  time."""

  def __init__(self, model, batch_size, on_result, strategy=None, use_xla=False, trim=False):
    strategy = strategy or tf.distribute.get_strategy()

    def forward(batch):
      return create_model(model.config, False, batch["input_ids"], batch["input_mask"],
                          batch["segment_ids"], model=model)

    self._infer = inference.make_inference_fn(strategy, forward, use_xla)
    self._batch_size = batch_size
    self._trim = trim
    self._on_result = on_result
    self._pending = []
    self.num_windows = 0

  def add(self, window):
    self._pending.append(window)
    if len(self._pending) == self._batch_size:
      self.flush()

  def logits(self, arrays):
    """int arrays [n <= batch_size, S] -> (start_logits, end_logits) numpy float32 [n, L]."""
    padded, n = inference.pad_batch(arrays, self._batch_size)
    start_logits, end_logits = self._infer(trim_batch(padded) if self._trim else padded)
    return start_logits[:n], end_logits[:n]

  def flush(self):
    windows, self._pending = self._pending, []
    if not windows:
      return
    arrays = {name: np.array([getattr(w, name) for w in windows], np.int32)
              for name in ("input_ids", "input_mask", "segment_ids")}
    start_logits, end_logits = self.logits(arrays)
    for i, window in enumerate(windows):
      if (self.num_windows + i) % 1000 == 0:
        logging.info("Processing example: %d", self.num_windows + i)
      length = int(arrays["input_mask"][i].sum()) if self._trim else start_logits.shape[1]
      self._on_result(window, RawResult(unique_id=int(window.unique_id),
                                        start_logits=start_logits[i, :length].tolist(),
                                        end_logits=end_logits[i, :length].tolist()))
    self.num_windows += len(windows)


_Window = collections.namedtuple("_Window", ["unique_id", "input_ids", "input_mask",
                                             "segment_ids"])


def predict_results(model, record_file, seq_length, batch_size, strategy=None, use_xla=False,
                    trim=False):
  """SpanPredictor over every record of record_file (eval.tf_record), in order: a list of
  RawResult(unique_id int, start_logits, end_logits: Python floats over the window's
  positions; with trim, over its tokens only)."""
  results = []
  predictor = SpanPredictor(model, batch_size, lambda window, result: results.append(result),
                            strategy, use_xla, trim)
  dataset = tf.data.TFRecordDataset(record_file).map(decode_fn(seq_length, False))
  for record in dataset.as_numpy_iterator():
    predictor.add(_Window(record["unique_ids"], record["input_ids"], record["input_mask"],
                          record["segment_ids"]))
  predictor.flush()
  return results


class Progress(progress_lib.Progress):
  """The progress line of SQuAD's windows, logged at most every 30 seconds (and on finish):
  "<what>: D of N questions (W windows), R questions/s, ETA h:mm:ss"."""

  def __init__(self, what, total):
    super().__init__(total, live=False)
    self.what = what

  def update(self, done, windows, force=False):
    if self.due(force):
      logging.info("%s: %d of %d questions (%d windows), %.1f questions/s, ETA %s", self.what,
                   done, self.total, windows, self.rate(done), self.eta(done))

  def finish(self, windows):
    self.update(self.total, windows, force=True)


# ----------------------------------------------------------------------------

@dataclasses.dataclass(frozen=True)
class Squad(settings.FromFlags):
  """run_squad's own flags, typed (settings.FromFlags): the SQuAD files (or --tfds_name), the
  windows, the answers and the prediction batches."""
  train_file: str | None
  predict_file: str | None
  tfds_name: str | None
  tfds_data_dir: str | None
  version_2_with_negative: bool
  max_seq_length: int
  doc_stride: int
  max_query_length: int
  max_answer_length: int
  n_best_size: int
  do_lower_case: bool
  null_score_diff_threshold: float
  verbose_logging: bool
  predict_batch_size: int
  trim_predict_batches: bool


def _check_options(options):
  """Our checks before the original's: required flags, files, positive sizes."""
  checks.check(options, {
      checks.REQUIRED: dict(vocab_file=checks.MODEL_DIR, bert_config_file=checks.MODEL_DIR,
                            output_dir=None),
      checks.EXISTING_FILES: ("bert_config_file", "vocab_file"),
      checks.POSITIVE: ("train_batch_size", "predict_batch_size", "iterations_per_loop",
                        "gradient_accumulation_steps", "doc_stride", "n_best_size",
                        "max_answer_length"),
      checks.NON_NEGATIVE: ("max_query_length",)})


def validate_flags_or_throw(options, bert_config):
  """The original's checks and messages (ValueError), then whether the SQuAD files exist."""
  tokenization.validate_case_matches_checkpoint(options.do_lower_case, options.init_checkpoint)
  checks.require_one(do_train=options.do_train, do_predict=options.do_predict)
  checks.check(options, {checks.EXCLUSIVE: {"tfds_name": ("train_file", "predict_file")}})
  if options.do_train and not options.train_file and not options.tfds_name:
    raise ValueError("If `do_train` is True, then `train_file` must be specified.")
  if options.do_predict and not options.predict_file and not options.tfds_name:
    raise ValueError("If `do_predict` is True, then `predict_file` must be specified.")
  run_checks.check_max_seq_length(bert_config, settings.ModelSource.from_flags(options))
  if options.max_seq_length <= options.max_query_length + 3:
    raise ValueError("The max_seq_length (%d) must be greater than max_query_length (%d) + 3 "
                     "(--max_seq_length, --max_query_length)"
                     % (options.max_seq_length, options.max_query_length))
  for flag, needed in (("train_file", options.do_train), ("predict_file", options.do_predict)):
    path = getattr(options, flag)
    if needed and not options.tfds_name and not tf.io.gfile.exists(path):
      raise ValueError(f"--{flag} {path}: no such file")


def _read(flag, path, is_training, version_2_with_negative):
  try:
    examples = read_squad_examples(path, is_training, version_2_with_negative)
  except ValueError as e:
    raise ValueError(f"--{flag} {e}") from None
  if not is_training:  # the predictions are {qas_id: ...}
    seen = set()
    for example in examples:
      if example.qas_id in seen:
        raise ValueError(f"--{flag} {path}: question id {example.qas_id!r} appears twice")
      seen.add(example.qas_id)
  return examples


def run(options, strategy=None):
  """Trains and/or predicts as the original main(), then evaluates the predictions when the
  predict_file has answers (evaluate_predictions). Returns a dict: "train_examples" (the
  number read, or None), "predictions" ({qas_id: answer} or None), "null_odds" (v2:
  {qas_id: null score - best non-null score}, else None), "eval_results" (the figures of
  eval_results.json, or None).

  options: a namespace from options(...), or the parsed FLAGS. strategy: a tf.distribute
  strategy (built from the options when None). Both SQuAD files are read and checked before
  anything is written. With a model directory as --output_dir or --init_checkpoint
  (runtime/model_dir.py), the model flags (and doc_stride, max_query_length,
  max_answer_length) may be left out.
  """
  options, _ = model_dir.resolve_options(
      options, DEFAULTS, fill=("doc_stride", "max_query_length", "max_answer_length"),
      writes=("squad",))
  _check_options(options)
  flags = settings.values_of(options)
  run_settings = settings.RunSettings(**settings.parts(flags))
  config = run_checks.run_config(run_settings)
  run_checks.check_segments(config, run_settings.model, "SQuAD's inputs (question, context)")
  validate_flags_or_throw(options, config)
  squad = Squad(**settings.fields(Squad, flags))
  return _run(run_settings, squad, config, strategy)


def _run(run, squad, config, strategy):
  """run() on the typed settings, after the checks: the SQuAD files read, then the output
  directory made and locked, and the work done."""
  train_examples = predict_examples = None
  read = (tfds_squad_reader(squad.tfds_name, squad.tfds_data_dir) if squad.tfds_name
          else _read)
  if run.training.do_train:
    train_examples = read("train_file", squad.train_file, True, squad.version_2_with_negative)
  if run.evaluation.do_predict:
    predict_examples = read("predict_file", squad.predict_file, False,
                            squad.version_2_with_negative)
  # Steps count the examples (questions), not their windows, as the original.
  num_train_steps, num_warmup_steps = training.train_steps(
      run.training, len(train_examples or ()), "examples")
  tokenizer = tokenization.FullTokenizer(vocab_file=run.model.vocab_file,
                                         do_lower_case=run.model.do_lower_case)
  tokenization.check_vocab(tokenizer.vocab, run.model.vocab_file,
                           required=("[UNK]", "[CLS]", "[SEP]"))
  run_checks.check_vocab_fits(config, tokenizer.vocab, run.model)
  with job.started(
      run, config, "squad", strategy, doc_stride=squad.doc_stride,
      max_query_length=squad.max_query_length, max_answer_length=squad.max_answer_length,
      version_2_with_negative=bool(squad.version_2_with_negative)) as run_dir:
    return _train_predict(run, squad, run_dir, config, tokenizer, train_examples,
                          (num_train_steps, num_warmup_steps), predict_examples)


def _train_predict(run, squad, run_dir, config, tokenizer, train_examples, steps,
                   predict_examples):
  """_run() after the reading. steps: (num_train_steps, num_warmup_steps), None each
  without --do_train."""
  num_train_steps, num_warmup_steps = steps
  strategy, record_dir, _ = run_dir
  if run.training.do_train:
    # Pre-shuffled (fixed seed, as the original) so that a small shuffle buffer suffices.
    random.Random(12345).shuffle(train_examples)

  trainer = training.build_trainer(run.training, strategy, lambda: modeling.BertSquad(config),
                                   SquadTask(), num_train_steps or 1, num_warmup_steps or 0)
  model = trainer.model
  results = {"train_examples": None, "predictions": None, "null_odds": None,
             "eval_results": None}

  def train():
    writer = FeatureWriter(os.path.join(record_dir, "train.tf_record"), is_training=True)
    progress = Progress("Writing training windows", len(train_examples))

    def write(feature):
      writer.process_feature(feature)
      progress.update(feature.example_index, writer.num_features)

    try:
      convert_examples_to_features(train_examples, tokenizer, squad.max_seq_length,
                                   squad.doc_stride, squad.max_query_length, True, write)
      writer.close()
    finally:
      writer.abort()  # (after an error: the temporary removed)
    progress.finish(writer.num_features)
    logging.info("***** Running training *****")
    logging.info("  Num orig examples = %d", len(train_examples))
    logging.info("  Num split examples = %d", writer.num_features)
    logging.info("  Batch size = %d", run.training.train_batch_size)
    logging.info("  Num steps = %d", num_train_steps)
    results["train_examples"] = len(train_examples)
    training.fine_tune(trainer, run.training, writer.filename,
                       decode_fn(squad.max_seq_length, is_training=True), num_train_steps)

  job.train_or_restore(run, trainer, train)

  if run.evaluation.do_predict:
    out = record_dir  # output_dir on the chief; discarded on the other workers
    predictions, null_odds, best_non_null = _predict(squad, model, strategy,
                                                     trainer.use_xla, tokenizer,
                                                     predict_examples, out)
    results["predictions"] = predictions
    results["null_odds"] = null_odds if squad.version_2_with_negative else None
    gold = None
    if squad.tfds_name:
      gold = tfds_input.squad_eval_dataset(squad.tfds_name, squad.version_2_with_negative,
                                           squad.tfds_data_dir)
    results["eval_results"] = evaluate_predictions(
        squad.predict_file or f"--tfds_name {squad.tfds_name}", predictions, null_odds,
        best_non_null, out, squad.version_2_with_negative, squad.null_score_diff_threshold,
        gold)
  return results


def _predict(squad, model, strategy, use_xla, tokenizer, examples, out):
  """Features -> eval.tf_record and the model, results -> PredictionWriter, as they come
  (one batch of windows and one example's windows in memory at a time). Returns the
  writer's (predictions, null_odds, best_non_null)."""
  logging.info("***** Running predictions *****")
  logging.info("  Num orig examples = %d", len(examples))
  logging.info("  Batch size = %d", squad.predict_batch_size)
  record_writer = FeatureWriter(os.path.join(out, "eval.tf_record"), is_training=False)
  writer = PredictionWriter(
      examples, squad.n_best_size, squad.max_answer_length, squad.do_lower_case,
      os.path.join(out, "predictions.json"), os.path.join(out, "nbest_predictions.json"),
      os.path.join(out, "null_odds.json"), squad.version_2_with_negative,
      squad.null_score_diff_threshold, squad.verbose_logging)
  progress = Progress("Predicting", len(examples))

  def on_result(feature, result):
    writer.add(feature, result)
    progress.update(feature.example_index, predictor.num_windows)

  predictor = SpanPredictor(model, squad.predict_batch_size, on_result, strategy, use_xla,
                            squad.trim_predict_batches)

  def on_feature(feature):
    record_writer.process_feature(feature)
    predictor.add(feature)

  try:
    convert_examples_to_features(examples, tokenizer, squad.max_seq_length,
                                 squad.doc_stride, squad.max_query_length, False,
                                 on_feature)
    predictor.flush()
    record_writer.close()
    writer.close()
  finally:
    record_writer.abort()
    writer.abort()
  progress.finish(predictor.num_windows)
  logging.info("  Num split examples = %d", predictor.num_windows)
  return writer.predictions, writer.null_odds, writer.best_non_null


# ----------------------------------------------------------------------------
# Evaluation (evaluate_squad.py's official figures).

def _gold_dataset(predict_file, dataset=None):
  """The "data" list of predict_file (or `dataset`, that list already read, e.g. from
  --tfds_name) when every question has gold answers (v2: an "answers" list, possibly empty,
  and at least one answer in the file), else None."""
  if dataset is None:
    dataset = squad_data.load_squad_json(predict_file)
  qas = evaluate_squad.questions(dataset)
  if not all(isinstance(qa.get("answers"), list) for qa in qas):
    return None
  return dataset if any(qa["answers"] for qa in qas) else None


def _on_odds_scale(figures, name, null_odds):
  """best_<name>_thresh as a --null_score_diff_threshold. The official search starts from
  "no question answered" at threshold 0.0 (right for probabilities in [0, 1]) and only a
  strictly better score moves it: when it stays there (best_<name> is the share of
  unanswerable questions), the threshold that answers nothing on the null odds' scale is
  below the smallest odds."""
  threshold = figures[f"best_{name}_thresh"]
  all_null = figures.get("NoAns_total", 0) * 100.0 / figures["total"]
  if threshold == 0.0 and figures["best_" + name] == all_null and null_odds:
    return math.floor(min(null_odds.values())) - 1.0
  return threshold


def evaluate_predictions(predict_file, predictions, null_odds, best_non_null, output_dir,
                         version_2_with_negative=False, null_score_diff_threshold=0.0,
                         dataset=None):
  """The official evaluation of predictions.json when predict_file has the answers (else
  None): writes eval_results.json to output_dir and returns its dict.

  v1.1: exact_match, f1 (evaluate-v1.1.py). v2.0: the figures of evaluate-v2.0.py with
  --na-prob-file null_odds.json --na-prob-thresh <null_score_diff_threshold> (those of
  predictions.json as written), except best_exact, best_f1 and their thresholds: searched
  over the best non-null answers (what any --null_score_diff_threshold predicts; the
  official script searches predictions.json, right only for thresholds below the one used),
  on --null_score_diff_threshold's scale (null_odds.json's: null score - best non-null
  score). predictions_best_threshold.json: the answers of
  --null_score_diff_threshold=<best_f1_thresh>. dataset: predict_file's "data" list already
  read (--tfds_name; predict_file then only names it in the log).
  """
  dataset = _gold_dataset(predict_file, dataset)
  if dataset is None:
    logging.info("Not evaluated: %s has no gold answers", predict_file)
    return None
  missing = []
  if not version_2_with_negative:
    result = evaluate_squad.evaluate(dataset, predictions, version="1.1",
                                     on_missing=missing.append)
  else:
    result = evaluate_squad.evaluate(dataset, predictions, null_odds, null_score_diff_threshold,
                                     version="2.0", on_missing=missing.append)
    best = evaluate_squad.evaluate(dataset, best_non_null, null_odds, version="2.0")
    for name in ("exact", "f1"):
      result["best_" + name] = best["best_" + name]
      result[f"best_{name}_thresh"] = _on_odds_scale(best, name, null_odds)
    threshold = result["best_f1_thresh"]
    answers = collections.OrderedDict(
        (qid, "" if null_odds[qid] > threshold else text) for qid, text in best_non_null.items())
    file_io.write_text_atomic(os.path.join(output_dir, "predictions_best_threshold.json"),
                              json.dumps(answers, indent=4) + "\n")
  if missing:  # questions skipped when reading (no answer found): none when predicting
    logging.warning("%d questions of %s have no prediction", len(missing), predict_file)
  file_io.write_text_atomic(os.path.join(output_dir, "eval_results.json"),
                            json.dumps(result, indent=2) + "\n")
  logging.info("***** Eval results (%s) *****", predict_file)
  for key, value in result.items():
    logging.info("  %s = %s", key, value)
  if version_2_with_negative:
    logging.info("Best F1 %.2f: predictions_best_threshold.json, what "
                 "--null_score_diff_threshold=%r predicts", result["best_f1"],
                 result["best_f1_thresh"])
  return result


main = errors.script_main(run)


if __name__ == "__main__":
  define_flags()
  app.run(main, flags_parser=errors.parse_flags)
