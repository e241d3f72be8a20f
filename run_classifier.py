# coding=utf-8
r"""BERT fine-tuning on sentence (pair) classification: GLUE MRPC, CoLA, MNLI and XNLI
(the original run_classifier.py).

Same flags, defaults, processors, features, TFRecords (train/eval/predict.tf_record),
eval_results.txt and test_results.tsv as the original; the TPUEstimator is replaced by
training.py's loop and strategies (checkpoints model.ckpt-N in --output_dir, resumable).

  python run_classifier.py --task_name=MRPC --do_train=true --do_eval=true \
    --data_dir=$GLUE_DIR/MRPC --vocab_file=$BERT_BASE_DIR/vocab.txt \
    --bert_config_file=$BERT_BASE_DIR/bert_config.json \
    --init_checkpoint=$BERT_BASE_DIR/bert_model.ckpt --max_seq_length=128 \
    --train_batch_size=32 --learning_rate=2e-5 --num_train_epochs=3.0 \
    --output_dir=/tmp/mrpc_output/
"""

from bert_keras import quiet_tensorflow  # noqa: F401  (first: before TensorFlow is imported)
import csv
import os

from absl import app
from absl import flags
from absl import logging
import keras
import numpy as np
import tensorflow as tf

from bert_keras import cli
from bert_keras import distribution
from bert_keras import inference
from bert_keras import input_pipeline
from bert_keras import modeling
from bert_keras import preprocessing
from bert_keras import tokenization
from bert_keras import training
from bert_keras import training_checkpoints

# Programmatic defaults = the flags' defaults (see define_flags).
DEFAULTS = dict(
    data_dir=None, bert_config_file=None, task_name=None, vocab_file=None, output_dir=None,
    init_checkpoint=None, do_lower_case=True, max_seq_length=128, do_train=False,
    do_eval=False, do_predict=False, train_batch_size=32, eval_batch_size=8,
    predict_batch_size=8, learning_rate=5e-5, num_train_epochs=3.0, warmup_proportion=0.1,
    save_checkpoints_steps=1000, iterations_per_loop=1000,
    tpu_job_name=None,
    **cli.TPU_DEFAULTS, **cli.TRAINING_DEFAULTS)


def options(**overrides):
  """A namespace of all run() options: DEFAULTS updated with `overrides`."""
  return cli.make_options(DEFAULTS, overrides)


def define_flags():
  """The original's flags (same names, types and defaults) plus training.py's."""
  flags.DEFINE_string(
      "data_dir", None,
      "The input data dir. Should contain the .tsv files (or other data files) for the task.")
  cli.define_model_flags(max_seq_length=128)
  flags.DEFINE_string("task_name", None, "The name of the task to train.")
  flags.DEFINE_bool("do_train", False, "Whether to run training.")
  flags.DEFINE_bool("do_eval", False, "Whether to run eval on the dev set.")
  flags.DEFINE_bool("do_predict", False,
                    "Whether to run the model in inference mode on the test set.")
  flags.DEFINE_integer("train_batch_size", 32, "Total batch size for training.")
  flags.DEFINE_integer("eval_batch_size", 8, "Total batch size for eval.")
  flags.DEFINE_integer("predict_batch_size", 8, "Total batch size for predict.")
  cli.define_fine_tuning_flags()
  cli.define_tpu_flags()
  # bert-tensorflow 1.0.4's extra TPU flag: accepted (TPUStrategy finds the TPU workers).
  flags.DEFINE_string("tpu_job_name", None,
                      "Name of TPU worker, if anything other than 'tpu_worker'")
  cli.define_training_flags()
  for name in ("data_dir", "task_name", "vocab_file", "bert_config_file", "output_dir"):
    flags.mark_flag_as_required(name)
  flags.adopt_module_key_flags(cli)  # --help lists them too, not only --helpfull


# ----------------------------------------------------------------------------
# Examples and processors.

class InputExample(object):
  """A single training/test example: guid, text_a, optional text_b (pair tasks) and the
  label string (test examples carry a dummy label)."""

  def __init__(self, guid, text_a, text_b=None, label=None):
    self.guid = guid
    self.text_a = text_a
    self.text_b = text_b
    self.label = label


class PaddingInputExample(object):
  """A fake example padding the eval/predict sets to a multiple of the batch size on TPU;
  its features are all zeros with is_real_example False."""


class InputFeatures(object):
  """The features of one example (lists of max_seq_length ints, an int label id)."""

  def __init__(self, input_ids, input_mask, segment_ids, label_id, is_real_example=True):
    self.input_ids = input_ids
    self.input_mask = input_mask
    self.segment_ids = segment_ids
    self.label_id = label_id
    self.is_real_example = is_real_example


class DataProcessor(object):
  """Base class of the data converters of the sequence classification data sets."""

  def get_train_examples(self, data_dir):
    """A list of InputExample for the train set."""
    raise NotImplementedError()

  def get_dev_examples(self, data_dir):
    """A list of InputExample for the dev set."""
    raise NotImplementedError()

  def get_test_examples(self, data_dir):
    """A list of InputExample for prediction."""
    raise NotImplementedError()

  def get_labels(self):
    """The list of label strings (index = label id)."""
    raise NotImplementedError()

  @classmethod
  def _read_tsv(cls, input_file, quotechar=None):
    """Rows (lists of strings) of a tab separated file; quotechar None = no quoting (a
    double quote is an ordinary character). Read through a text-mode GFile, as the
    original (which drops every "\\r"). A missing file raises ValueError naming it."""
    if not tf.io.gfile.exists(input_file):
      raise ValueError(f"--data_dir: no such file {input_file}")
    with tf.io.gfile.GFile(input_file, "r") as f:
      reader = csv.reader(f, delimiter="\t", quotechar=quotechar)
      try:
        return [_Row(row, input_file, reader.line_num) for row in reader]
      except UnicodeDecodeError as e:
        raise ValueError(f"--data_dir: {input_file} is not UTF-8 text ({e.reason})") from None
      except csv.Error as e:
        raise ValueError(f"--data_dir: {input_file}, line {reader.line_num}: {e}") from None


class _Row(list):
  """A TSV row (a list of fields) that knows its file and line: a missing column is a
  ValueError naming them, not an IndexError from inside a processor."""

  def __init__(self, fields, path, line_number):
    super().__init__(fields)
    self.path, self.line_number = path, line_number

  def __getitem__(self, index):
    try:
      return super().__getitem__(index)
    except IndexError:
      raise ValueError(f"--data_dir: {self.path}, line {self.line_number}: {len(self)} "
                       f"tab-separated fields, the task reads field {index + 1}") from None


def _u(text):
  return tokenization.convert_to_unicode(text)


class XnliProcessor(DataProcessor):
  """XNLI, Chinese only (train from multinli/multinli.train.zh.tsv, dev from xnli.dev.tsv)."""

  def __init__(self):
    self.language = "zh"

  def get_train_examples(self, data_dir):
    lines = self._read_tsv(
        os.path.join(data_dir, "multinli", "multinli.train.%s.tsv" % self.language))
    examples = []
    for (i, line) in enumerate(lines):
      if i == 0:
        continue
      label = _u(line[2])
      if label == _u("contradictory"):
        label = _u("contradiction")
      examples.append(InputExample(guid="train-%d" % i, text_a=_u(line[0]),
                                   text_b=_u(line[1]), label=label))
    return examples

  def get_dev_examples(self, data_dir):
    lines = self._read_tsv(os.path.join(data_dir, "xnli.dev.tsv"))
    examples = []
    for (i, line) in enumerate(lines):
      if i == 0:
        continue
      if _u(line[0]) != _u(self.language):
        continue
      examples.append(InputExample(guid="dev-%d" % i, text_a=_u(line[6]),
                                   text_b=_u(line[7]), label=_u(line[1])))
    return examples

  def get_labels(self):
    return ["contradiction", "entailment", "neutral"]


class _GlueProcessor(DataProcessor):
  """A GLUE task in data_dir: FILES names the train/dev/test files and the dev set's guid
  prefix; subclasses turn the rows into examples (_create_examples(lines, set_type))."""

  FILES = {"train": ("train.tsv", "train"), "dev": ("dev.tsv", "dev"),
           "test": ("test.tsv", "test")}

  def _examples(self, data_dir, split):
    name, set_type = self.FILES[split]
    return self._create_examples(self._read_tsv(os.path.join(data_dir, name)), set_type)

  def get_train_examples(self, data_dir):
    return self._examples(data_dir, "train")

  def get_dev_examples(self, data_dir):
    return self._examples(data_dir, "dev")

  def get_test_examples(self, data_dir):
    return self._examples(data_dir, "test")


class MnliProcessor(_GlueProcessor):
  """MultiNLI (GLUE; matched dev and test sets)."""

  FILES = {"train": ("train.tsv", "train"), "dev": ("dev_matched.tsv", "dev_matched"),
           "test": ("test_matched.tsv", "test")}

  def get_labels(self):
    return ["contradiction", "entailment", "neutral"]

  def _create_examples(self, lines, set_type):
    examples = []
    for (i, line) in enumerate(lines):
      if i == 0:
        continue
      guid = "%s-%s" % (set_type, _u(line[0]))
      label = _u("contradiction") if set_type == "test" else _u(line[-1])
      examples.append(InputExample(guid=guid, text_a=_u(line[8]), text_b=_u(line[9]),
                                   label=label))
    return examples


class MrpcProcessor(_GlueProcessor):
  """MRPC (GLUE): sentence pairs, labels "0" / "1"."""

  def get_labels(self):
    return ["0", "1"]

  def _create_examples(self, lines, set_type):
    examples = []
    for (i, line) in enumerate(lines):
      if i == 0:
        continue
      label = _u("0") if set_type == "test" else _u(line[0])
      examples.append(InputExample(guid="%s-%s" % (set_type, i), text_a=_u(line[3]),
                                   text_b=_u(line[4]), label=label))
    return examples


class ColaProcessor(_GlueProcessor):
  """CoLA (GLUE): single sentences, labels "0" / "1"; only the test file has a header."""

  def get_labels(self):
    return ["0", "1"]

  def _create_examples(self, lines, set_type):
    examples = []
    for (i, line) in enumerate(lines):
      if set_type == "test" and i == 0:
        continue
      if set_type == "test":
        text_a, label = _u(line[1]), _u("0")
      else:
        text_a, label = _u(line[3]), _u(line[1])
      examples.append(InputExample(guid="%s-%s" % (set_type, i), text_a=text_a, text_b=None,
                                   label=label))
    return examples


PROCESSORS = {"cola": ColaProcessor, "mnli": MnliProcessor, "mrpc": MrpcProcessor,
              "xnli": XnliProcessor}


# ----------------------------------------------------------------------------
# Features.

def convert_single_example(ex_index, example, label_list, max_seq_length, tokenizer):
  """InputExample -> InputFeatures: [CLS] a [SEP] (segment 0) [b [SEP]] (segment 1),
  zero-padded to max_seq_length (preprocessing.pack_tokens). Logs the first 5 examples."""
  if isinstance(example, PaddingInputExample):
    return InputFeatures(input_ids=[0] * max_seq_length, input_mask=[0] * max_seq_length,
                         segment_ids=[0] * max_seq_length, label_id=0, is_real_example=False)
  label_map = {label: i for i, label in enumerate(label_list)}
  tokens_a = tokenizer.tokenize(example.text_a)
  tokens_b = tokenizer.tokenize(example.text_b) if example.text_b else None
  tokens, input_ids, input_mask, segment_ids = preprocessing.pack_tokens(
      tokens_a, tokens_b, max_seq_length, tokenizer)
  label_id = label_map[example.label]
  if ex_index < 5:
    logging.info("*** Example ***")
    logging.info("guid: %s", example.guid)
    logging.info("tokens: %s", " ".join(tokenization.printable_text(t) for t in tokens))
    logging.info("input_ids: %s", " ".join(str(x) for x in input_ids))
    logging.info("input_mask: %s", " ".join(str(x) for x in input_mask))
    logging.info("segment_ids: %s", " ".join(str(x) for x in segment_ids))
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
  label_ids [1], is_real_example [1]) to output_file (via a temporary name)."""
  tmp = output_file + ".tmp"
  with tf.io.TFRecordWriter(tmp) as writer:
    for (ex_index, example) in enumerate(examples):
      if ex_index % 10000 == 0:
        logging.info("Writing example %d of %d", ex_index, len(examples))
      feature = convert_single_example(ex_index, example, label_list, max_seq_length,
                                       tokenizer)
      features = {
          "input_ids": input_pipeline.int64_feature(feature.input_ids),
          "input_mask": input_pipeline.int64_feature(feature.input_mask),
          "segment_ids": input_pipeline.int64_feature(feature.segment_ids),
          "label_ids": input_pipeline.int64_feature([feature.label_id]),
          "is_real_example": input_pipeline.int64_feature([int(feature.is_real_example)]),
      }
      writer.write(tf.train.Example(
          features=tf.train.Features(feature=features)).SerializeToString())
  tf.io.gfile.rename(tmp, output_file, overwrite=True)


def decode_fn(seq_length):
  """Serialized tf.train.Example -> dict of int32 tensors (label_ids, is_real_example
  scalars), as the original's file_based_input_fn_builder."""
  feature_types = {
      "input_ids": tf.io.FixedLenFeature([seq_length], tf.int64),
      "input_mask": tf.io.FixedLenFeature([seq_length], tf.int64),
      "segment_ids": tf.io.FixedLenFeature([seq_length], tf.int64),
      "label_ids": tf.io.FixedLenFeature([], tf.int64),
      "is_real_example": tf.io.FixedLenFeature([], tf.int64),
  }

  def decode(record):
    example = tf.io.parse_single_example(record, feature_types)
    return {k: tf.cast(v, tf.int32) for k, v in example.items()}

  return decode


# ----------------------------------------------------------------------------
# Training loss.

class ClassifierTask(training.ExampleMeanTask):
  """The batch mean of classifier_loss over the GLOBAL batch."""

  def per_example_loss(self, outputs, batch):
    return modeling.classifier_loss(outputs, batch["label_ids"])  # outputs: the logits


def predict_logits(model, record_file, seq_length, batch_size, strategy=None, use_xla=False):
  """Runs the model (inference) over every record of record_file in order, batch_size
  records a step split over the replicas of `strategy` (default: the current one), the last
  batch padded (and the padding dropped); returns (logits float32 [N, num_labels], label_ids
  int [N], is_real_example int [N], batch boundaries list)."""
  strategy = strategy or tf.distribute.get_strategy()
  ds = tf.data.TFRecordDataset(record_file).map(decode_fn(seq_length)).batch(batch_size)
  infer = inference.make_inference_fn(
      strategy, lambda batch: model(ClassifierTask().model_inputs(batch), training=False),
      use_xla)
  logits, labels, real, sizes = [], [], [], []
  for batch, batch_logits in inference.infer_dataset(infer, ds, batch_size):
    logits.append(batch_logits)
    labels.append(batch["label_ids"])
    real.append(batch["is_real_example"])
    sizes.append(len(labels[-1]))
  num_labels = model.num_labels
  if not logits:
    return np.zeros([0, num_labels], np.float32), np.zeros([0], np.int32), \
        np.zeros([0], np.int32), []
  return np.concatenate(logits), np.concatenate(labels), np.concatenate(real), sizes


def log_softmax(logits):
  """float32 [N, C] -> float32 [N, C] (NumPy)."""
  logits = logits.astype(np.float64)
  shifted = logits - logits.max(axis=-1, keepdims=True)
  return (shifted - np.log(np.exp(shifted).sum(axis=-1, keepdims=True))).astype(np.float32)


def eval_metrics(logits, label_ids, is_real_example, batch_sizes, global_step):
  """The original's eval results from the per-example logits: eval_accuracy and eval_loss
  weighted by is_real_example; loss = mean over batches of the batch-mean per-example
  loss (the Estimator's "loss", padding included); global_step. NumPy float32 / int64."""
  per_example = -np.take_along_axis(log_softmax(logits), label_ids[:, None].astype(np.int64),
                                    axis=1)[:, 0].astype(np.float64)
  weights = is_real_example.astype(np.float64)
  correct = (np.argmax(logits, axis=-1) == label_ids).astype(np.float64)
  bounds = np.cumsum([0] + list(batch_sizes))
  batch_losses = [per_example[a:b].mean() for a, b in zip(bounds[:-1], bounds[1:])]
  return {
      "eval_accuracy": np.float32((weights * correct).sum() / max(weights.sum(), 1e-12)),
      "eval_loss": np.float32((weights * per_example).sum() / max(weights.sum(), 1e-12)),
      "global_step": np.int64(global_step),
      "loss": np.float32(np.mean(batch_losses) if batch_losses else 0.0),
  }


def softmax(logits):
  """float32 [N, C] -> class probabilities float32 [N, C] (tf.nn.softmax, as the original)."""
  return tf.nn.softmax(tf.constant(logits, tf.float32), axis=-1).numpy()


# ----------------------------------------------------------------------------

def _validate(options):
  for name in ("data_dir", "task_name", "vocab_file", "bert_config_file", "output_dir"):
    if not getattr(options, name):
      raise ValueError(f"--{name} is required")
  tokenization.validate_case_matches_checkpoint(options.do_lower_case, options.init_checkpoint)
  if not options.do_train and not options.do_eval and not options.do_predict:
    raise ValueError("At least one of `do_train`, `do_eval` or `do_predict' must be True.")
  for name in ("bert_config_file", "vocab_file"):
    if not tf.io.gfile.exists(getattr(options, name)):
      raise ValueError(f"--{name} {getattr(options, name)}: no such file")
  for name in ("train_batch_size", "eval_batch_size", "predict_batch_size",
               "iterations_per_loop", "gradient_accumulation_steps", "max_seq_length"):
    if getattr(options, name) < 1:
      raise ValueError(f"--{name}={getattr(options, name)}: must be >= 1")
  if options.max_seq_length < 3:
    raise ValueError(f"--max_seq_length={options.max_seq_length}: must be >= 3 ([CLS] a [SEP] b "
                     "[SEP])")
  training.check_training_numbers(options)


def run(options, strategy=None):
  """Trains, evaluates and/or predicts as the original main(); returns a dict with the
  eval results ("eval", or None) and the predicted probabilities ("predict", or None).

  options: a namespace from options(...), or the parsed FLAGS. strategy: a tf.distribute
  strategy (built from the options when None).
  """
  _validate(options)
  config = cli.load_bert_config(options.bert_config_file)
  if options.max_seq_length > config.max_position_embeddings:
    raise ValueError(
        "Cannot use sequence length %d because the BERT model was only trained up to "
        "sequence length %d" % (options.max_seq_length, config.max_position_embeddings))
  task_name = options.task_name.lower()
  if task_name not in PROCESSORS:
    raise ValueError("Task not found: %s" % task_name)
  processor = PROCESSORS[task_name]()
  label_list = processor.get_labels()
  tokenizer = tokenization.FullTokenizer(vocab_file=options.vocab_file,
                                         do_lower_case=options.do_lower_case)
  tokenization.check_vocab(tokenizer.vocab, options.vocab_file,
                           required=("[UNK]", "[CLS]", "[SEP]"))
  examples = read_examples(options, processor, label_list)
  tf.io.gfile.makedirs(options.output_dir)  # (after the checks: no empty directory on error)
  keras.utils.set_random_seed(options.seed)
  strategy = distribution.strategy_for(options, strategy)
  with distribution.record_directory(strategy, options.output_dir) as record_dir:
    return _train_eval_predict(options, strategy, config, examples, label_list, tokenizer,
                               distribution.is_chief(strategy), record_dir)


def read_examples(options, processor, label_list):
  """{"train", "dev", "test": list of InputExample, or None where the flags do not ask for
  it}, read and checked before any model is built: a split without examples, or a train/dev
  label that is not one of the task's, is a ValueError naming the file."""
  wanted = {"train": (options.do_train, processor.get_train_examples),
            "dev": (options.do_eval, processor.get_dev_examples),
            "test": (options.do_predict, processor.get_test_examples)}
  examples = {}
  for split, (asked, read) in wanted.items():
    examples[split] = read(options.data_dir) if asked else None
    if asked and not examples[split]:
      raise ValueError(f"--data_dir {options.data_dir}: the {split} file has no examples")
    for example in examples[split] if split != "test" and asked else ():
      if example.label not in label_list:
        raise ValueError(f"--data_dir {options.data_dir}: {split} example {example.guid} has "
                         f"label {example.label!r}, not one of {label_list}")
  return examples


def _train_eval_predict(options, strategy, config, examples, label_list, tokenizer, chief,
                        record_dir):
  """run() after the checks: train, eval and predict as the flags ask."""
  train_examples = examples["train"]
  num_train_steps = None
  num_warmup_steps = None
  if options.do_train:
    num_train_steps = int(len(train_examples) / options.train_batch_size *
                          options.num_train_epochs)
    num_warmup_steps = int(num_train_steps * options.warmup_proportion)
    if num_train_steps < 1:
      raise ValueError(
          f"--num_train_epochs={options.num_train_epochs}: {len(train_examples)} training "
          f"examples / --train_batch_size={options.train_batch_size} x epochs gives 0 "
          "training steps")

  trainer = training.build_trainer(
      options, strategy, lambda: modeling.BertClassifier(config, len(label_list)),
      ClassifierTask(), num_train_steps or 1, num_warmup_steps or 0)

  if options.do_train:
    train_file = os.path.join(record_dir, "train.tf_record")
    file_based_convert_examples_to_features(train_examples, label_list, options.max_seq_length,
                                            tokenizer, train_file)
    logging.info("***** Running training *****")
    logging.info("  Num examples = %d", len(train_examples))
    logging.info("  Batch size = %d", options.train_batch_size)
    logging.info("  Num steps = %d", num_train_steps)
    training.fine_tune(trainer, options, train_file, decode_fn(options.max_seq_length),
                       num_train_steps)
  else:
    training_checkpoints.restore_for_inference(trainer, options.output_dir,
                                               options.init_checkpoint)
  results = {"eval": None, "predict": None}
  if options.do_eval:
    results["eval"] = _evaluate(options, trainer, examples["dev"], label_list, tokenizer,
                                chief, record_dir)
  if options.do_predict:
    results["predict"] = _predict(options, trainer, examples["test"], label_list, tokenizer,
                                  chief, record_dir)
  return results


def _evaluate(options, trainer, eval_examples, label_list, tokenizer, chief, record_dir):
  """--do_eval: the dev set through eval.tf_record; logs the original's eval results, writes
  them to eval_results.txt (chief) and returns them."""
  logits, labels, real, sizes = _logits_over(
      eval_examples, "eval", "***** Running evaluation *****", options.eval_batch_size,
      options, trainer, label_list, tokenizer, record_dir)
  metrics = eval_metrics(logits, labels, real, sizes, int(trainer.global_step.numpy()))
  logging.info("***** Eval results *****")
  for key in sorted(metrics):
    logging.info("  %s = %s", key, str(metrics[key]))
  if chief:
    cli.write_text_atomic(os.path.join(options.output_dir, "eval_results.txt"),
                          cli.format_results(metrics))
  return metrics


def _logits_over(examples, split, heading, batch_size, options, trainer, label_list, tokenizer,
                 record_dir):
  """Writes the examples to <split>.tf_record, logs the original's heading for them, and
  returns predict_logits over the records (logits, labels, real, sizes)."""
  record_file = os.path.join(record_dir, "%s.tf_record" % split)
  file_based_convert_examples_to_features(examples, label_list, options.max_seq_length,
                                          tokenizer, record_file)
  logging.info(heading)
  logging.info("  Num examples = %d (%d actual, %d padding)", len(examples), len(examples), 0)
  logging.info("  Batch size = %d", batch_size)
  return predict_logits(trainer.model, record_file, options.max_seq_length, batch_size,
                        trainer.strategy, trainer.use_xla)


def _predict(options, trainer, predict_examples, label_list, tokenizer, chief, record_dir):
  """--do_predict: the test set through predict.tf_record; writes the class probabilities of
  each real example to test_results.tsv (chief) and returns them (float32 [N, labels])."""
  num_actual = len(predict_examples)
  logits, _, real, _ = _logits_over(
      predict_examples, "predict", "***** Running prediction*****", options.predict_batch_size,
      options, trainer, label_list, tokenizer, record_dir)
  probabilities = softmax(logits)[real.astype(bool)]
  lines = ["\t".join(str(p) for p in row) + "\n" for row in probabilities]
  assert len(lines) == num_actual
  logging.info("***** Predict results *****")
  if chief:
    cli.write_text_atomic(os.path.join(options.output_dir, "test_results.tsv"), "".join(lines))
  return probabilities


main = cli.script_main(run)


if __name__ == "__main__":
  define_flags()
  app.run(main)
