"""run_classifier's options for multi-label tasks, class weights and long documents (issue
25): their flags and checks, the class weights of a run, the thresholds of a multi-label
model, windows pooled into documents, and the task options the model directory records.
All off by default (the original's behaviour and outputs)."""

import dataclasses
import os

from absl import flags
from absl import logging
import numpy as np

from bert_keras.runtime import common_flags
from bert_keras.runtime import option_checks as checks
from bert_keras.runtime import settings
from bert_keras.tasks.classifier import class_weights as class_weights_lib
from bert_keras.tasks.classifier import doc_windows
from bert_keras.tasks.classifier import multi_label as multi_label_lib


def define_flags(fv=flags.FLAGS):
  """run_classifier's --multi_label, --label_separator, --threshold, --tune_threshold,
  --class_weights, --doc_stride and --window_pooling."""
  flags.DEFINE_bool("multi_label", False,
                    "--task_name=custom: the label column holds zero or more labels joined by "
                    "--label_separator (an empty cell: none); one sigmoid output per label.",
                    flag_values=fv)
  flags.DEFINE_string("label_separator", ",", "--multi_label: what joins a cell's labels.",
                      flag_values=fv)
  flags.DEFINE_float("threshold", 0.5, "--multi_label: a label is predicted when its "
                     "probability reaches this (unless tuned thresholds are in --output_dir).",
                     flag_values=fv)
  flags.DEFINE_bool("tune_threshold", False,
                    "--multi_label with --do_eval: one threshold per label maximising its F1 on "
                    "dev, saved in output_dir/thresholds.json and used from then on.",
                    flag_values=fv)
  flags.DEFINE_string("class_weights", None,
                      "balanced (n / (labels x count) over train.tsv) or label:weight,...: "
                      "weights each example's loss by its label's weight (multi-label: each "
                      "label's positive term); each weight in (0, 1e6] (larger ones make the "
                      "loss overflow). Saved in output_dir/class_weights.json.",
                      flag_values=fv)
  flags.DEFINE_integer("doc_stride", 0,
                       "0: texts are truncated to --max_seq_length (the original). N > 0: a "
                       "longer text_a is split into windows starting N word pieces apart; "
                       "training gives each window the label, eval/predict pool the windows' "
                       "logits into one result per document.", flag_values=fv)
  flags.DEFINE_enum("window_pooling", "mean", ["mean", "max"],
                    "--doc_stride: how a document's windows' logits are pooled.", flag_values=fv)


@dataclasses.dataclass(frozen=True)
class Classification(settings.FromFlags):
  """run_classifier's task flags, typed (settings.FromFlags): which task and data, its labels and
  columns (--task_name=custom), multi-label, class weights, windows, and the splits the run
  reads. What data.get_processor, data.read_examples and this module's functions take. Each
  field has a default so that a run's recorded options (run_options.json) of any age read."""
  task_name: str | None = None
  data_dir: str | None = None
  tfds_name: str | None = None
  tfds_data_dir: str | None = None
  labels: str | None = None
  text_a_column: str | None = None
  text_b_column: str | None = None
  label_column: str | None = None
  multi_label: bool = False
  label_separator: str = ","
  threshold: float = 0.5
  tune_threshold: bool = False
  class_weights: str | None = None
  doc_stride: int = 0
  window_pooling: str = "mean"
  max_seq_length: int = 128
  output_dir: str | None = None
  do_train: bool = False
  do_eval: bool = False
  do_predict: bool = False


# The flags task.json records (task_options) that shape what the trained model computes: a
# run on a model directory takes them from there, and refuses them given otherwise
# (model_dir.pin_options).
TASK_JSON_OPTIONS = ("multi_label", "label_separator", "doc_stride", "window_pooling")


# The flags' defaults (their definitions above): a flag set away from its default without
# the flag it works with is refused (validate).
DEFAULTS = common_flags.flag_defaults(define_flags)


def validate(options):
  """The flags' checks, a one-line ValueError each, before anything is read or built."""
  if options.multi_label and options.tfds_name:
    raise ValueError("--multi_label is only for --task_name=custom (not --tfds_name)")
  if options.multi_label and not options.label_separator:
    raise ValueError("--label_separator: must not be empty")
  checks.check(options, {checks.FRACTION: ("threshold",), checks.SET_REQUIRES: {
      "label_separator": (DEFAULTS["label_separator"], ("multi_label",),
                          "it splits a multi-label cell"),
      "threshold": (DEFAULTS["threshold"], ("multi_label",),
                    "a multi-label task's threshold; a single-label task predicts its argmax"),
      "window_pooling": (DEFAULTS["window_pooling"], ("doc_stride",),
                         "it pools the windows of a long text")}})
  if options.tune_threshold and not options.multi_label:
    raise ValueError("--tune_threshold is for --multi_label (per-label thresholds)")
  checks.check(options, {checks.REQUIRES: {
      "tune_threshold": (("do_eval",), "it tunes the thresholds on dev.tsv")}})
  if options.class_weights and not options.do_train:
    raise ValueError(f"--class_weights={options.class_weights} weighs the training loss: it "
                     "needs --do_train")
  doc_windows.check_stride(options.doc_stride, options.max_seq_length, options.window_pooling)


def weights_of(classification, label_list, train_examples):
  """--class_weights -> float [C] (logged), or None; "balanced" counts train_examples'
  labels (None: no training set)."""
  multi = isinstance(label_list, multi_label_lib.MultiLabelList)
  train = train_examples
  occurrences = None if train is None else [
      name for e in train for name in (e.label if multi else [e.label])]
  weights = class_weights_lib.class_weights(classification.class_weights, label_list, occurrences)
  if weights is not None:
    logging.info("Class weights: %s", ", ".join(
        f"{label}: {w:.6g}" for label, w in zip(label_list, weights)))
  return weights


def check_text_b_fits(classification, examples, tokenizer):
  """--doc_stride: every text_b must leave text_a room in a window (doc_windows.windows);
  else a ValueError naming the split and example, before any model is built."""
  for split, split_examples in examples.items():
    for example in split_examples or ():
      if example.text_b:
        doc_windows.windows([], tokenizer.tokenize(example.text_b), classification.max_seq_length,
                            classification.doc_stride, f"{split} example {example.guid}")


def task_options(classification, label_list, thresholds):
  """The run's task options for the model directory's task.json (runtime/model_dir): multi_label,
  and where they apply thresholds and label_separator (multi-label), doc_stride and
  window_pooling (windows)."""
  result = {"multi_label": isinstance(label_list, multi_label_lib.MultiLabelList)}
  if result["multi_label"]:
    result.update(thresholds=[float(t) for t in thresholds],
                  label_separator=label_list.separator)
  if classification.doc_stride:
    result.update(doc_stride=classification.doc_stride,
                  window_pooling=classification.window_pooling)
  return result


def model_description(classification, is_regression, label_list, thresholds):
  """(task, labels, task options) of the model files (runtime/model_dir.write_model_dir):
  "classifier" with the label names in the order of the outputs, or "regression" without;
  the task options are task.json's further entries (task_name, and task_options' entries;
  tuned thresholds are in thresholds.json, which predict.py and export read first)."""
  task = "regression" if is_regression else "classifier"
  return task, label_list, {"task_name": classification.task_name or classification.tfds_name,
                            **task_options(classification, label_list, thresholds)}


def thresholds(classification, label_list):
  """A multi-label task's thresholds float32 [C]: output_dir/thresholds.json's (tuned by an
  earlier --tune_threshold) when there and not tuning again, else --threshold for every label;
  None for other tasks."""
  if not isinstance(label_list, multi_label_lib.MultiLabelList):
    return None
  saved = multi_label_lib.read_thresholds(classification.output_dir, label_list)
  if saved is not None and not classification.tune_threshold:
    logging.info("Thresholds from %s: %s", os.path.join(
        classification.output_dir, multi_label_lib.THRESHOLDS_FILE), saved.tolist())
    return saved
  return np.full([len(label_list)], classification.threshold, np.float32)


def per_document(outputs, documents, classification, batch_size):
  """predict_logits' (logits, labels, real, sizes) over the records -> the same per document
  (example): unchanged without --doc_stride, else each document's windows' logits pooled
  (doc_windows.pool), its first window's label, every document real, batches of
  batch_size documents (the "loss" of eval_metrics)."""
  if not classification.doc_stride:
    return outputs
  logits, labels, _, _ = outputs
  num_documents = int(documents[-1]) + 1 if len(documents) else 0
  pooled = doc_windows.pool(logits, documents, num_documents, classification.window_pooling)
  sizes = [min(batch_size, num_documents - i) for i in range(0, num_documents, batch_size)]
  return (pooled, labels[doc_windows.first_windows(documents)],
          np.ones([num_documents], np.int32), sizes)
