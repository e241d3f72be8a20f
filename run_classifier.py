r"""BERT fine-tuning on sentence (pair) classification: GLUE MRPC, CoLA, MNLI and XNLI
(the original run_classifier.py), plus SST-2, QQP, QNLI, RTE, WNLI, STS-B (regression),
MNLI mismatched, the diagnostic set (AX) and --task_name=custom (your own TSV files).

Same flags, defaults, processors, features, TFRecords (train/eval/predict.tf_record),
eval_results.txt and test_results.tsv as the original; the TPUEstimator is replaced by
training.py's loop and strategies (checkpoints model.ckpt-N in --output_dir, resumable).

  python run_classifier.py --task_name=MRPC --do_train=true --do_eval=true \
    --data_dir=$GLUE_DIR/MRPC --vocab_file=$BERT_BASE_DIR/vocab.txt \
    --bert_config_file=$BERT_BASE_DIR/bert_config.json \
    --init_checkpoint=$BERT_BASE_DIR/bert_model.ckpt --max_seq_length=128 \
    --train_batch_size=32 --learning_rate=2e-5 --num_train_epochs=3.0 \
    --output_dir=/tmp/mrpc_output/

Read top to bottom: flags; features (convert_single_example, the TFRecords); the model
(create_model, ClassifierTask, predict_logits); run() and main. The examples and processors
(InputExample, DataProcessor, MrpcProcessor, ..., PROCESSORS, get_processor) live in
tasks/classifier/data.py; this module re-exports them under the original's names.
"""

try:  # outside the venv: a one-line hint, not a traceback
  from bert_keras.utils import quiet_tensorflow  # noqa: F401  (first, before TensorFlow)
except ImportError as e:
  raise SystemExit(f"error: {e} (activate .venv: source .venv/bin/activate, or pip install -e .)")
import os

from absl import app
from absl import flags
from absl import logging
import numpy as np
import tensorflow as tf

from bert_keras import losses
from bert_keras import modeling
from bert_keras import preprocessing
from bert_keras import tokenization
from bert_keras.runtime import common_flags
from bert_keras.runtime import inference
from bert_keras.runtime import input_pipeline
from bert_keras.runtime import job
from bert_keras.runtime import model_dir
from bert_keras.runtime import option_checks as checks
from bert_keras.runtime import outputs
from bert_keras.runtime import run_checks
from bert_keras.runtime import settings
from bert_keras.runtime import training
from bert_keras.tasks.classifier import class_weights as class_weights_lib
from bert_keras.tasks.classifier import data as classifier_data
from bert_keras.tasks.classifier import options as classifier_options
from bert_keras.tasks.classifier import doc_windows
from bert_keras.tasks.classifier import metrics
from bert_keras.tasks.classifier import multi_label as multi_label_lib
from bert_keras.tasks.classifier import prediction_files
from bert_keras.tasks import tfds_input
from bert_keras.utils import errors
from bert_keras.utils import file_io


def options(**overrides):
  """A namespace of all run() options: DEFAULTS updated with `overrides`."""
  return common_flags.make_options(DEFAULTS, overrides)


def define_flags(fv=flags.FLAGS):
  """The original's flags (same names, types and defaults) plus training.py's."""
  flags.DEFINE_string(
      "data_dir", None,
      "The input data dir. Should contain the .tsv files (or other data files) for the task.",
      flag_values=fv)
  common_flags.define_model_flags(max_seq_length=128, fv=fv)
  flags.DEFINE_string("task_name", None, "The name of the task to train.", flag_values=fv)
  _define_custom_task_flags(fv=fv)
  classifier_options.define_flags(fv=fv)
  # bert-tensorflow 1.0.4's extra TPU flag: accepted (TPUStrategy finds the TPU workers).
  flags.DEFINE_string("tpu_job_name", None,
                      "Name of TPU worker, if anything other than 'tpu_worker'", flag_values=fv)
  flags.DEFINE_string(
      "tfds_name", None,
      "Read the task through TensorFlow Datasets instead of --data_dir: glue/<config> (e.g. "
      "glue/mrpc, glue/mnli); it implies --task_name. Never downloads.", flag_values=fv)
  flags.DEFINE_string("tfds_data_dir", None,
                      "TensorFlow Datasets data directory of --tfds_name (default: TFDS's).",
                      flag_values=fv)
  # (data_dir, task_name: checked in run(), as --tfds_name may stand for them)
  common_flags.define_shared_flags(
      ("jobs",) + common_flags.FINE_TUNING + ("trim_train_batches",), fv=fv)
  flags.adopt_module_key_flags(common_flags, flag_values=fv)  # (--help lists them)


def _define_custom_task_flags(fv=flags.FLAGS):
  flags.DEFINE_string("text_a_column", None,
                      "--task_name=custom: the header name of the first text's column "
                      "(default sentence1, or sentence where there is no sentence1).",
                      flag_values=fv)
  flags.DEFINE_string("text_b_column", None,
                      "--task_name=custom: the second text's column (default sentence2 where "
                      "there is one, else single sentences; 'none': single sentences).",
                      flag_values=fv)
  flags.DEFINE_string("label_column", None,
                      "--task_name=custom: the label column (default label; test.tsv may "
                      "lack it).", flag_values=fv)
  flags.DEFINE_string("labels", None,
                      "--task_name=custom: comma-separated labels in the order of the model's "
                      "outputs (default: the sorted distinct labels of train.tsv).", flag_values=fv)


# The options of run() (options(), model_dir.resolve_options): the flags' names and defaults,
# read from define_flags without parsing or touching absl's FLAGS.
DEFAULTS = common_flags.flag_defaults(define_flags)
# task.json's "task" of the models it trains (an --output_dir holding another kind's model is
# refused: model_dir.check_kind).
MODEL_KINDS = ("classifier", "regression")


# ----------------------------------------------------------------------------
# Examples and processors: tasks/classifier/data.py, under the original's names.

InputExample = classifier_data.InputExample
PaddingInputExample = classifier_data.PaddingInputExample
DataProcessor = classifier_data.DataProcessor
XnliProcessor = classifier_data.XnliProcessor
MnliProcessor = classifier_data.MnliProcessor
MrpcProcessor = classifier_data.MrpcProcessor
ColaProcessor = classifier_data.ColaProcessor
Sst2Processor = classifier_data.Sst2Processor
QqpProcessor = classifier_data.QqpProcessor
QnliProcessor = classifier_data.QnliProcessor
RteProcessor = classifier_data.RteProcessor
WnliProcessor = classifier_data.WnliProcessor
StsbProcessor = classifier_data.StsbProcessor
MnliMismatchedProcessor = classifier_data.MnliMismatchedProcessor
DiagnosticProcessor = classifier_data.DiagnosticProcessor
CustomProcessor = classifier_data.CustomProcessor
PROCESSORS = classifier_data.PROCESSORS
TASK_ALIASES = classifier_data.TASK_ALIASES
CUSTOM_TASK_FLAGS = classifier_data.CUSTOM_TASK_FLAGS
get_processor = classifier_data.get_processor
read_examples = classifier_data.read_examples
_GlueProcessor = classifier_data.GlueProcessor  # (the base of the GLUE processors)


# ----------------------------------------------------------------------------
# Features.

class InputFeatures(object):
  """The features of one example (lists of max_seq_length ints, an int label id)."""

  def __init__(self, input_ids, input_mask, segment_ids, label_id, is_real_example=True):
    self.input_ids = input_ids
    self.input_mask = input_mask
    self.segment_ids = segment_ids
    self.label_id = label_id
    self.is_real_example = is_real_example


def convert_single_example(ex_index, example, label_list, max_seq_length, tokenizer):
  """InputExample -> InputFeatures: [CLS] a [SEP] (segment 0) [b [SEP]] (segment 1),
  zero-padded to max_seq_length (preprocessing.pack_tokens). Logs the first 5 examples.
  label_list None: a regression task, label_id = float(example.label); a
  multi_label.MultiLabelList: label_id = the multi-hot float32 [C] of the example's tuple."""
  if isinstance(example, PaddingInputExample):
    return InputFeatures(input_ids=[0] * max_seq_length, input_mask=[0] * max_seq_length,
                         segment_ids=[0] * max_seq_length, label_id=0, is_real_example=False)
  tokens_a = tokenizer.tokenize(example.text_a)
  tokens_b = tokenizer.tokenize(example.text_b) if example.text_b else None
  return features_of_tokens(ex_index, example, tokens_a, tokens_b, label_list, max_seq_length,
                            tokenizer)


def features_of_tokens(ex_index, example, tokens_a, tokens_b, label_list, max_seq_length,
                       tokenizer):
  """convert_single_example on the example's word pieces (tokens_a: a --doc_stride window)."""
  tokens, input_ids, input_mask, segment_ids = preprocessing.pack_tokens(
      tokens_a, tokens_b, max_seq_length, tokenizer)
  if isinstance(label_list, multi_label_lib.MultiLabelList):
    label_id = label_list.multi_hot(example.label)
  elif label_list is None:
    label_id = float(example.label)
  else:
    label_id = {label: i for i, label in enumerate(label_list)}[example.label]
  if ex_index < 5:
    logging.info("*** Example ***")
    logging.info("guid: %s", example.guid)
    logging.info("tokens: %s", " ".join(tokenization.printable_text(t) for t in tokens))
    logging.info("input_ids: %s", " ".join(str(x) for x in input_ids))
    logging.info("input_mask: %s", " ".join(str(x) for x in input_mask))
    logging.info("segment_ids: %s", " ".join(str(x) for x in segment_ids))
    if label_list is None or isinstance(label_list, multi_label_lib.MultiLabelList):
      logging.info("label: %s", example.label)
    else:
      logging.info("label: %s (id = %d)", example.label, label_id)
  return InputFeatures(input_ids=input_ids, input_mask=input_mask, segment_ids=segment_ids,
                       label_id=label_id, is_real_example=True)


def convert_examples_to_features(examples, label_list, max_seq_length, tokenizer):
  """A list of InputFeatures (the original keeps this for in-memory input)."""
  features = []
  for (ex_index, example) in enumerate(examples):
    if ex_index % 10000 == 0:
      logging.info("Writing example %d of %d", ex_index, len(examples))
    features.append(convert_single_example(ex_index, example, label_list, max_seq_length,
                                           tokenizer))
  return features


def file_based_convert_examples_to_features(examples, label_list, max_seq_length, tokenizer,
                                            output_file):
  """Writes one tf.train.Example per example (int64 input_ids, input_mask, segment_ids [S],
  label_ids [1], is_real_example [1]) to output_file (via a temporary name). label_list None
  (regression): label_ids is a float feature [1] instead (multi-label: float [C])."""

  def features():
    for (ex_index, example) in enumerate(examples):
      if ex_index % 10000 == 0:
        logging.info("Writing example %d of %d", ex_index, len(examples))
      yield convert_single_example(ex_index, example, label_list, max_seq_length, tokenizer)

  write_feature_records(features(), label_list, output_file)


def write_feature_records(features, label_list, output_file):
  """InputFeatures (an iterable) -> TFRecords in output_file (via a temporary name)."""
  multi = isinstance(label_list, multi_label_lib.MultiLabelList)
  with input_pipeline.RecordWriter(output_file) as writer:
    for feature in features:
      writer.write({
          "input_ids": feature.input_ids,
          "input_mask": feature.input_mask,
          "segment_ids": feature.segment_ids,
          "label_ids": (np.asarray(feature.label_id, np.float32) if multi else
                        np.asarray([feature.label_id], np.float32) if label_list is None
                        else [feature.label_id]),
          "is_real_example": [int(feature.is_real_example)],
      })


def write_records(examples, label_list, classification, tokenizer, output_file):
  """The examples' records in output_file -> the example (document) of each record, int [R].
  --doc_stride 0: one record per example (file_based_convert_examples_to_features); else one
  per window of text_a (doc_windows.windows), each with the example's label."""
  if not classification.doc_stride:
    file_based_convert_examples_to_features(examples, label_list, classification.max_seq_length,
                                            tokenizer, output_file)
    return np.arange(len(examples))
  documents = []
  features = doc_windows.window_features(
      examples, tokenizer, classification.max_seq_length, classification.doc_stride, documents,
      lambda i, example, a, b: features_of_tokens(i, example, a, b, label_list,
                                                  classification.max_seq_length, tokenizer))
  write_feature_records(features, label_list, output_file)
  logging.info("--doc_stride=%d: %d examples -> %d windows", classification.doc_stride,
               len(examples), len(documents))
  return np.array(documents, np.int64)


def decode_fn(seq_length, is_regression=False, num_multi_labels=0):
  """Serialized tf.train.Example -> dict of int32 tensors (label_ids, is_real_example
  scalars), as the original's file_based_input_fn_builder; is_regression: label_ids is a
  float32 scalar; num_multi_labels C > 0 (multi-label): label_ids is float32 [C]."""
  label_type = (tf.io.FixedLenFeature([num_multi_labels], tf.float32) if num_multi_labels else
                tf.io.FixedLenFeature([], tf.float32 if is_regression else tf.int64))
  feature_types = {
      "input_ids": tf.io.FixedLenFeature([seq_length], tf.int64),
      "input_mask": tf.io.FixedLenFeature([seq_length], tf.int64),
      "segment_ids": tf.io.FixedLenFeature([seq_length], tf.int64),
      "label_ids": label_type,
      "is_real_example": tf.io.FixedLenFeature([], tf.int64),
  }

  def decode(record):
    example = tf.io.parse_single_example(record, feature_types)
    return {k: v if v.dtype == tf.float32 else tf.cast(v, tf.int32) for k, v in example.items()}

  return decode


# ----------------------------------------------------------------------------
# The model and its loss.

def classifier_outputs(logits, labels, is_regression=False, multi_label=False,
                       class_weights=None):
  """The original create_model's (loss, per_example_loss, logits, probabilities) from the
  logits float32 [B, num_labels] and labels [B].

  multi_label (labels float multi-hot [B, C]): per_example_loss = losses.multi_label_loss
  (the mean over the labels of the binary cross-entropy; class_weights weigh each label's
  positive term), probabilities = sigmoid(logits). Single-label, class_weights float [C]: each
  example's loss times its gold label's weight (the batch loss stays the mean over examples).

  Classification: per_example_loss = -log softmax(logits)[label] (int labels), float32 [B];
  probabilities = softmax(logits) float32 [B, num_labels]. Regression (num_labels 1, float
  labels): per_example_loss = (logits[:, 0] - label)^2, float32 [B]; "probabilities" = the
  predicted scores logits[:, 0], float32 [B]. loss = the mean of per_example_loss (scalar).
  """
  logits = tf.cast(logits, tf.float32)
  if is_regression:
    predictions = logits[:, 0]
    per_example_loss = tf.square(predictions - tf.reshape(tf.cast(labels, tf.float32), [-1]))
    probabilities = predictions
  elif multi_label:
    per_example_loss = losses.multi_label_loss(logits, labels, class_weights)
    probabilities = tf.sigmoid(logits)
  else:
    per_example_loss = losses.classifier_loss(logits, labels)
    if class_weights is not None:
      per_example_loss *= tf.gather(tf.constant(class_weights, tf.float32),
                                    tf.reshape(tf.cast(labels, tf.int32), [-1]))
    probabilities = tf.nn.softmax(logits, axis=-1)
  return tf.reduce_mean(per_example_loss), per_example_loss, logits, probabilities


def create_model(bert_config, is_training, input_ids, input_mask, segment_ids, labels,
                 num_labels, use_one_hot_embeddings=False, model=None, is_regression=None):
  """The original's create_model: the fine-tuning model on a batch -> (loss [],
  per_example_loss [B], logits [B, num_labels], probabilities) as classifier_outputs.

  The model is a modeling.BertClassifier(bert_config, num_labels) (BertModel, dropout 0.1 on
  the pooled output when is_training, output_weights [num_labels, H] / output_bias
  [num_labels]): `model` when given (the training loop's own), else a new one, whose weights
  are freshly initialised (Keras has no variable scope to reuse: pass `model` to use trained
  weights). input_ids, input_mask, segment_ids int [B, S]; labels int [B] (float [B] for
  regression). is_regression None: num_labels == 1 (one output, mean squared error).
  use_one_hot_embeddings (the original's TPU embedding lookup) gives the same numbers and is
  accepted for the signature's sake only.
  """
  del use_one_hot_embeddings
  if model is None:
    model = modeling.BertClassifier(bert_config, num_labels)
  if is_regression is None:
    is_regression = num_labels == 1
  outputs = model({"input_ids": input_ids, "input_mask": input_mask,
                   "segment_ids": segment_ids}, training=is_training)
  return classifier_outputs(outputs, labels, is_regression, getattr(model, "multi_label", False))


class ClassifierTask(training.ExampleMeanTask):
  """The batch mean over the GLOBAL batch of create_model's per_example_loss (cross-entropy,
  or the squared error when is_regression). metric_name: the task's official metric in the
  eval results (a processor's metric_name). multi_label: binary cross-entropy over multi-hot
  labels; class_weights: None or float [C] (classifier_outputs)."""

  reads_padding = False  # (the head reads [CLS] only)

  def __init__(self, is_regression=False, metric_name="eval_accuracy", multi_label=False,
               class_weights=None):
    self.is_regression = is_regression
    self.metric_name = metric_name
    self.multi_label = multi_label
    self.class_weights = None if class_weights is None else np.asarray(class_weights,
                                                                       np.float32)

  def per_example_loss(self, outputs, batch):
    return classifier_outputs(outputs, batch["label_ids"], self.is_regression,
                              self.multi_label, self.class_weights)[1]


def predict_logits(model, record_file, seq_length, batch_size, strategy=None, use_xla=False,
                   is_regression=False, trim=True, infer=None):
  """Runs the model (inference) over every record of record_file in order, batch_size
  records a step split over the replicas of `strategy` (default: the current one), the last
  batch padded (and the padding dropped); returns (logits float32 [N, num_labels], label_ids
  int [N] (float32 for regression), is_real_example int [N], batch boundaries list). The
  logits are create_model's (is_training False) on the model. trim: each batch cut to its
  longest sequence (inference.trim_batch; same logits, less work), except on TPU (one shape
  per compilation). infer: a classifier_inference_fn to reuse (else one is made)."""
  strategy = strategy or tf.distribute.get_strategy()
  multi = model.num_labels if getattr(model, "multi_label", False) else 0
  ds = tf.data.TFRecordDataset(record_file).map(decode_fn(seq_length, is_regression, multi))
  ds = ds.batch(batch_size)
  infer = infer or classifier_inference_fn(model, strategy, use_xla, is_regression)
  trim_key = "input_mask" if trim and not isinstance(strategy, tf.distribute.TPUStrategy) \
      else None
  logits, labels, real, sizes = [], [], [], []
  for batch, batch_logits in inference.infer_dataset(infer, ds, batch_size, trim_key):
    logits.append(batch_logits)
    labels.append(batch["label_ids"])
    real.append(batch["is_real_example"])
    sizes.append(len(labels[-1]))
  num_labels = model.num_labels
  if not logits:
    return np.zeros([0, num_labels], np.float32), \
        np.zeros([0, multi] if multi else [0], np.float32 if is_regression or multi else
                 np.int32), np.zeros([0], np.int32), []
  return np.concatenate(logits), np.concatenate(labels), np.concatenate(real), sizes


def classifier_inference_fn(model, strategy, use_xla=False, is_regression=False):
  """inference.make_inference_fn of the model's logits (float32 [B, num_labels]): create_model
  with is_training False on the model."""

  def forward(batch):
    return create_model(None, False, batch["input_ids"], batch["input_mask"],
                        batch["segment_ids"], batch["label_ids"], model.num_labels,
                        model=model, is_regression=is_regression)[2]

  return inference.make_inference_fn(strategy, forward, use_xla)


# The original's eval results from the logits (tasks/classifier/metrics.py; tests call it by
# this name).
eval_metrics = metrics.classifier_eval_results


def softmax(logits):
  """float32 [N, C] -> class probabilities float32 [N, C] (tf.nn.softmax, as the original)."""
  return tf.nn.softmax(tf.constant(logits, tf.float32), axis=-1).numpy()


# ----------------------------------------------------------------------------

def _validate(options):
  optional = ("data_dir", "task_name") if options.tfds_name else ()  # (--tfds_name: from TFDS)
  required = dict(data_dir=None, task_name=checks.MODEL_DIR, vocab_file=checks.MODEL_DIR,
                  bert_config_file=checks.MODEL_DIR, output_dir=None)
  checks.check(options, {checks.EXCLUSIVE: {"tfds_name": ("data_dir",)}})
  checks.check_start(options, {k: v for k, v in required.items() if k not in optional})
  checks.check(options, {
      checks.EXISTING_FILES: ("bert_config_file", "vocab_file"),
      checks.POSITIVE: ("train_batch_size", "eval_batch_size", "predict_batch_size",
                        "iterations_per_loop", "gradient_accumulation_steps", "max_seq_length"),
      checks.REQUIRES: checks.EVAL_EVERY_STEPS,
      checks.AT_LEAST: {"max_seq_length": (3, "[CLS] a [SEP] b [SEP]")}})
  classifier_options.validate(options)


def run(options, strategy=None):
  """Trains, evaluates and/or predicts as the original main(); returns a dict with the
  eval results ("eval", or None) and the predicted probabilities ("predict", or None).

  options: a namespace from options(...), or the parsed FLAGS. strategy: a tf.distribute
  strategy (built from the options when None). With a model directory as --output_dir or
  --init_checkpoint (runtime/model_dir.py), the model flags and --task_name may be left out.
  """
  options, model = model_dir.resolve_options(
      options, DEFAULTS, pin=classifier_options.TASK_JSON_OPTIONS, writes=MODEL_KINDS)
  _fill_task_from(options, model)
  _validate(options)
  flags = settings.values_of(options)
  run_settings = settings.RunSettings(**settings.parts(flags))
  classification = classifier_options.Classification(
      **settings.fields(classifier_options.Classification, flags))
  return _run(run_settings, classification, model, strategy)


def _run(run, classification, model, strategy):
  """run() on the typed settings (run: settings.RunSettings; classification: the task's
  classifier_options.Classification; model: the model directory read, or None)."""
  config = run_checks.run_config(run)
  run_checks.check_max_seq_length(config, run.model)
  task_name = None
  if classification.tfds_name:
    task_name = tfds_input.glue_task_name(classification.tfds_name, classification.task_name,
                                          PROCESSORS)
    task_name = TASK_ALIASES.get(task_name, task_name)
    processor = PROCESSORS[task_name]()
  else:
    processor = get_processor(classification)
  label_list = processor.get_labels()
  if model is not None and (model["source"] == "output_dir" or not run.training.do_train):
    model_dir.check_labels(label_list, model,
                           "--labels" if classification.labels else "--task_name")
  if label_list is None:
    logging.info("Labels: none (a regression task)")
  else:
    logging.info("Labels (%d%s): %s", len(label_list),
                 ", multi-label" if classification.multi_label else "",
                 errors.error_line(", ".join(map(repr, label_list))))
  if classification.class_weights and label_list is None:
    raise ValueError("--class_weights: not for a regression task")
  tokenizer = tokenization.FullTokenizer(vocab_file=run.model.vocab_file,
                                         do_lower_case=run.model.do_lower_case)
  tokenization.check_vocab(tokenizer.vocab, run.model.vocab_file,
                           required=("[UNK]", "[CLS]", "[SEP]"))
  run_checks.check_vocab_fits(config, tokenizer.vocab, run.model)
  task_processor = processor  # its is_regression and metric_name, also under --tfds_name
  if classification.tfds_name:
    processor = tfds_input.GlueReader(classification.tfds_name, classification.tfds_data_dir,
                                      processor, task_name)
  examples = read_examples(classification, processor, label_list)
  for split, split_examples in examples.items():
    if split_examples and any(example.text_b for example in split_examples):
      run_checks.check_segments(config, run.model, f"the {split} examples of " + (
          f"--tfds_name {classification.tfds_name}" if classification.tfds_name
          else f"--task_name={classification.task_name}"))
      break
  multi = isinstance(label_list, multi_label_lib.MultiLabelList)
  task = ClassifierTask(
      task_processor.is_regression, "eval_micro_f1" if multi else task_processor.metric_name,
      multi, classifier_options.weights_of(classification, label_list, examples["train"]))
  thresholds = classifier_options.thresholds(classification, label_list)  # (stale ones: now)
  if classification.doc_stride:
    classifier_options.check_text_b_fits(classification, examples, tokenizer)
  kind, labels, task_options = classifier_options.model_description(
      classification, task.is_regression, label_list, thresholds)
  if examples["train"] is not None:  # a model trained on pairs reads pairs (predict.py)
    task_options["pair"] = any(example.text_b for example in examples["train"])
  with job.started(run, config, kind, strategy, labels, **task_options) as run_dir:
    return _train_eval_predict(run, classification, run_dir, config, examples, label_list,
                               tokenizer, task)


def _fill_task_from(options, model):
  """--task_name (and --task_name=custom's columns and labels), when not given, from the
  model directory `model` (read_model_dir's dict, or None): the options of the run that
  trained it, and its labels. Not for a --do_train run warm-started from another task's
  model (only the model flags come from an --init_checkpoint directory then)."""
  if model is None or (options.do_train and model["source"] != "output_dir"):
    return
  trained = model["options"]
  if "task_name" in model["given"] or options.tfds_name or not trained.get("task_name"):
    return
  options.task_name = trained["task_name"]
  for name in CUSTOM_TASK_FLAGS[:3]:
    if name not in model["given"]:
      setattr(options, name, trained.get(name))
  if options.task_name.strip().lower() == "custom" and "labels" not in model["given"] \
      and model.get("labels"):
    options.labels = ",".join(model["labels"])


def _train_eval_predict(run, classification, run_dir, config, examples, label_list, tokenizer,
                        task=None):
  """_run() after the checks: train, eval and predict as the flags ask. run_dir: the
  job.RunDir (strategy, record_dir, chief). task: the
  ClassifierTask (regression or not, official metric; default a classification by
  accuracy). label_list None: regression (one output); a MultiLabelList: multi-label."""
  task = task or ClassifierTask()
  strategy, record_dir, chief = run_dir
  num_labels = 1 if label_list is None else len(label_list)
  multi = isinstance(label_list, multi_label_lib.MultiLabelList)
  train_examples = examples["train"]
  num_train_steps = None
  num_warmup_steps = None
  if run.training.do_train:
    train_file = os.path.join(record_dir, "train.tf_record")
    num_records = len(train_examples)
    if classification.doc_stride:  # (the windows decide the step count)
      num_records = len(write_records(train_examples, label_list, classification, tokenizer,
                                      train_file))
    num_train_steps, num_warmup_steps = training.train_steps(run.training, num_records,
                                                             "examples")

  trainer = training.build_trainer(
      run.training, strategy,
      lambda: modeling.BertClassifier(config, num_labels, multi_label=multi), task,
      num_train_steps or 1, num_warmup_steps or 0)

  def train():
    if not classification.doc_stride:
      write_records(train_examples, label_list, classification, tokenizer, train_file)
    if task.class_weights is not None and chief:
      class_weights_lib.write_weights(run.output.output_dir, label_list, task.class_weights)
    logging.info("***** Running training *****")
    logging.info("  Num examples = %d", len(train_examples))
    logging.info("  Batch size = %d", run.training.train_batch_size)
    logging.info("  Num steps = %d", num_train_steps)
    training.fine_tune(trainer, run.training, train_file,
                       decode_fn(classification.max_seq_length, task.is_regression,
                                 num_labels if multi else 0), num_train_steps,
                       **_eval_during_training(run, classification, trainer, examples["dev"],
                                               label_list, tokenizer, chief, record_dir, task))

  job.train_or_restore(run, trainer, train)
  results = {"eval": None, "predict": None}
  thresholds = classifier_options.thresholds(classification, label_list)
  if run.evaluation.do_eval:
    results["eval"], thresholds = _evaluate(run, classification, trainer, examples["dev"],
                                            label_list, tokenizer, chief, record_dir, thresholds)
  if run.evaluation.do_predict:
    results["predict"] = _predict(run, classification, trainer, examples["test"], label_list,
                                  tokenizer, chief, record_dir, thresholds)
  results["task_options"] = classifier_options.task_options(classification, label_list,
                                                            thresholds)
  return results


def _eval_during_training(run, classification, trainer, eval_examples, label_list, tokenizer,
                          chief, record_dir, task):
  """--eval_every_steps: the Trainer.train arguments that evaluate on the dev set
  (eval.tf_record) during training by the task's metric_name
  (job.eval_during_training); {} when --eval_every_steps is 0."""
  if not run.training.eval_every_steps:
    return {}
  record_file = os.path.join(record_dir, "eval.tf_record")
  documents = write_records(eval_examples, label_list, classification, tokenizer, record_file)
  infer = classifier_inference_fn(trainer.model, trainer.strategy, trainer.use_xla,
                                  task.is_regression)
  thresholds = classifier_options.thresholds(classification, label_list)

  def evaluate(step):
    batch_size = run.evaluation.eval_batch_size
    outputs = predict_logits(
        trainer.model, record_file, classification.max_seq_length, batch_size, trainer.strategy,
        trainer.use_xla, task.is_regression, run.evaluation.trim_eval_batches, infer)
    outputs = classifier_options.per_document(outputs, documents, classification, batch_size)
    return eval_metrics(*outputs, step, task.metric_name, task.is_regression, thresholds)

  return job.eval_during_training(run.training, evaluate, task.metric_name, chief,
                                          trainer.model)


def _scores(logits, label_list):
  """Per-example logits [N, C] -> what the prediction files hold: the score [N] (regression),
  the sigmoid probabilities (multi-label) or the softmax ones [N, C]."""
  if label_list is None:
    return logits[:, 0]
  if isinstance(label_list, multi_label_lib.MultiLabelList):
    return multi_label_lib.sigmoid(logits)
  return softmax(logits)


def _evaluate(run, classification, trainer, eval_examples, label_list, tokenizer, chief, record_dir,
              thresholds=None):
  """--do_eval: the dev set through eval.tf_record; logs the original's eval results, writes
  them to eval_results.txt (chief) and returns (them, thresholds). Multi-label with
  --tune_threshold: the thresholds are tuned on these logits first (written to
  output_dir/thresholds.json) and the results use them."""
  logits, labels, real, sizes = _logits_over(
      eval_examples, "eval", "***** Running evaluation *****", run.evaluation.eval_batch_size,
      run, classification, trainer, label_list, tokenizer, record_dir)
  if thresholds is not None and classification.tune_threshold:
    thresholds = multi_label_lib.tune_thresholds(
        multi_label_lib.sigmoid(logits[real.astype(bool)]), labels[real.astype(bool)] > 0.5,
        classification.threshold)
    logging.info("Tuned thresholds: %s", ", ".join(
        f"{label}: {t:.6g}" for label, t in zip(label_list, thresholds)))
    if chief:
      multi_label_lib.write_thresholds(run.output.output_dir, label_list, thresholds, tuned=True)
  results = eval_metrics(logits, labels, real, sizes, int(trainer.global_step.numpy()),
                         trainer.task.metric_name, trainer.task.is_regression, thresholds)
  logging.info("***** Eval results *****")
  for key in sorted(results):
    logging.info("  %s = %s", key, str(results[key]))
  if chief:
    file_io.write_text_atomic(os.path.join(run.output.output_dir, "eval_results.txt"),
                              outputs.format_results(results))
    real = real.astype(bool)
    file_io.write_text_atomic(
        os.path.join(run.output.output_dir, "eval_predictions.tsv"),
        prediction_files.prediction_tsv([e.guid for e in eval_examples],
                                        _scores(logits, label_list)[real], label_list,
                                        gold=[e.label for e in eval_examples],
                                        thresholds=thresholds))
  return results, thresholds


def _logits_over(examples, split, heading, batch_size, run, classification, trainer, label_list,
                 tokenizer, record_dir):
  """Writes the examples to <split>.tf_record (write_records), logs the original's heading
  for them, and returns predict_logits over the records (logits, labels, real, sizes), per
  example (classifier_options.per_document)."""
  record_file = os.path.join(record_dir, "%s.tf_record" % split)
  documents = write_records(examples, label_list, classification, tokenizer, record_file)
  logging.info(heading)
  logging.info("  Num examples = %d (%d actual, %d padding)", len(examples), len(examples), 0)
  logging.info("  Batch size = %d", batch_size)
  outputs = predict_logits(trainer.model, record_file, classification.max_seq_length, batch_size,
                           trainer.strategy, trainer.use_xla, label_list is None,
                           run.evaluation.trim_eval_batches)
  return classifier_options.per_document(outputs, documents, classification, batch_size)


def _predict(run, classification, trainer, predict_examples, label_list, tokenizer, chief,
             record_dir, thresholds=None):
  """--do_predict: the test set through predict.tf_record; writes the class probabilities of
  each real example to test_results.tsv (chief) and returns them (float32 [N, labels]); for
  regression (label_list None) the predicted score, one a line (float32 [N]); multi-label:
  each label's sigmoid probability (test_predictions.tsv: the labels reaching thresholds)."""
  num_actual = len(predict_examples)
  logits, _, real, _ = _logits_over(
      predict_examples, "predict", "***** Running prediction*****",
      run.evaluation.predict_batch_size, run, classification, trainer, label_list, tokenizer,
      record_dir)
  probabilities = _scores(logits, label_list)[real.astype(bool)]
  if label_list is None:
    lines = ["%s\n" % score for score in probabilities]
  else:
    lines = ["\t".join(str(p) for p in row) + "\n" for row in probabilities]
  assert len(lines) == num_actual
  logging.info("***** Predict results *****")
  if chief:
    file_io.write_text_atomic(os.path.join(run.output.output_dir, "test_results.tsv"),
                              "".join(lines))
    file_io.write_text_atomic(
        os.path.join(run.output.output_dir, "test_predictions.tsv"),
        prediction_files.prediction_tsv([e.guid for e in predict_examples], probabilities,
                                        label_list, thresholds=thresholds))
  return probabilities


main = errors.script_main(run)


if __name__ == "__main__":
  define_flags()
  app.run(main, flags_parser=errors.parse_flags)
