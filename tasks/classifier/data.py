"""run_classifier's data: the examples (InputExample) and the processors that read each
task's files into them: the original's MRPC, CoLA, MNLI and XNLI, the other GLUE tasks
(SST-2, QQP, QNLI, RTE, WNLI, STS-B, MNLI mismatched, the diagnostic set AX), and
--task_name=custom's TSV files (CustomProcessor); PROCESSORS and get_processor pick one by
--task_name, read_examples reads and checks the splits a run asks for.

run_classifier.py re-exports these names under the original's module (run_classifier.
MrpcProcessor, run_classifier.DataProcessor, ...); tasks/tfds_input.py's GlueReader feeds
TFDS rows to the same processors (their _create_examples(lines, set_type)).
"""

import csv
import os

from absl import logging
import numpy as np
import tensorflow as tf

from bert_keras import tokenization
from bert_keras.tasks.classifier import multi_label as multi_label_lib
from bert_keras.utils import errors
from bert_keras.utils import file_io
from bert_keras.utils import text_lines


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


class DataProcessor(object):
  """Base class of the data converters of the sequence classification data sets.

  metric_name: the eval_results.txt key of the task's official metric (the one that picks a
  best checkpoint); is_regression: the label is a float score (get_labels() is None, the model
  has one output trained with mean squared error).
  """

  metric_name = "eval_accuracy"
  is_regression = False

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
    file_io.allow_long_csv_fields()
    with tf.io.gfile.GFile(input_file, "r") as f:
      reader = csv.reader(f, delimiter="\t", quotechar=quotechar)
      try:
        return [_Row(row, input_file, reader.line_num) for row in reader]
      except UnicodeDecodeError:
        text_lines.check_utf8(input_file, f"--data_dir: {input_file}")
        raise
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


class GlueProcessor(DataProcessor):
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


class MnliProcessor(GlueProcessor):
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
      label = _u("contradiction") if set_type.startswith("test") else _u(line[-1])
      examples.append(InputExample(guid=guid, text_a=_u(line[8]), text_b=_u(line[9]),
                                   label=label))
    return examples


class MrpcProcessor(GlueProcessor):
  """MRPC (GLUE): sentence pairs, labels "0" / "1", metric F1."""

  metric_name = "eval_f1"

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


class ColaProcessor(GlueProcessor):
  """CoLA (GLUE): single sentences, labels "0" / "1", metric Matthews correlation; only the
  test file has a header."""

  metric_name = "eval_matthews_corr"

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


class _ColumnsProcessor(GlueProcessor):
  """A GLUE task read by column position; the first line of every file is a header.

  TRAIN_COLUMNS (train and dev files) = (id, text_a, text_b, label) and TEST_COLUMNS (the
  test file) = (id, text_a, text_b): 0-based positions, text_b None for single sentences,
  id None where the file has no id column (the guid then uses the line number, as the
  original's MRPC and CoLA). Guids are "<set_type>-<id>"; test examples get a dummy label
  (the first label; "0" for regression). SKIP_SHORT_ROWS: rows with too few fields are
  skipped with a logged count (QQP) instead of being an error naming the line.
  """

  TRAIN_COLUMNS = (0, 1, 2, 3)
  TEST_COLUMNS = (0, 1, 2)
  SKIP_SHORT_ROWS = False

  def _create_examples(self, lines, set_type):
    test = set_type.startswith("test")
    id_column, a, b, label_column = (self.TEST_COLUMNS + (None,) if test
                                     else self.TRAIN_COLUMNS)
    width = 1 + max(c for c in (id_column, a, b, label_column) if c is not None)
    examples, skipped = [], 0
    for (i, line) in enumerate(lines):
      if i == 0:
        continue
      if self.SKIP_SHORT_ROWS and len(line) < width:
        skipped += 1
        continue
      key = i if id_column is None else _u(line[id_column])
      if test:
        label = "0" if self.is_regression else self.get_labels()[0]
      else:
        label = _u(line[label_column])
      examples.append(InputExample(guid="%s-%s" % (set_type, key), text_a=_u(line[a]),
                                   text_b=None if b is None else _u(line[b]), label=label))
    if skipped:
      logging.warning("%s: skipped %d of %d rows with fewer than %d tab-separated fields",
                      lines[0].path, skipped, len(lines) - 1, width)
    return examples


class Sst2Processor(_ColumnsProcessor):
  """SST-2 (GLUE): single sentences, labels "0" / "1". train/dev: sentence, label; test:
  index, sentence."""

  TRAIN_COLUMNS = (None, 0, None, 1)
  TEST_COLUMNS = (0, 1, None)

  def get_labels(self):
    return ["0", "1"]


class QqpProcessor(_ColumnsProcessor):
  """QQP (GLUE): question pairs, labels "0" / "1", metric F1. train/dev: id, qid1, qid2,
  question1, question2, is_duplicate; test: id, question1, question2. Rows with too few
  fields (a few in the public distribution) are skipped with a logged count."""

  TRAIN_COLUMNS = (0, 3, 4, 5)
  TEST_COLUMNS = (0, 1, 2)
  SKIP_SHORT_ROWS = True
  metric_name = "eval_f1"

  def get_labels(self):
    return ["0", "1"]


class QnliProcessor(_ColumnsProcessor):
  """QNLI (GLUE): index, question, sentence, label (entailment / not_entailment)."""

  def get_labels(self):
    return ["entailment", "not_entailment"]


class RteProcessor(_ColumnsProcessor):
  """RTE (GLUE): index, sentence1, sentence2, label (entailment / not_entailment)."""

  def get_labels(self):
    return ["entailment", "not_entailment"]


class WnliProcessor(_ColumnsProcessor):
  """WNLI (GLUE): index, sentence1, sentence2, label ("0" / "1")."""

  def get_labels(self):
    return ["0", "1"]


class StsbProcessor(_ColumnsProcessor):
  """STS-B (GLUE), a regression task: the label is the similarity score, a float in [0, 5]
  (get_labels() is None; the model has one output, trained with mean squared error).
  train/dev: index, genre, filename, year, old_index, source1, source2, sentence1,
  sentence2, score; test: the same without score."""

  TRAIN_COLUMNS = (0, 7, 8, 9)
  TEST_COLUMNS = (0, 7, 8)
  is_regression = True
  metric_name = "eval_pearson"

  def get_labels(self):
    return None


class MnliMismatchedProcessor(MnliProcessor):
  """MultiNLI with the mismatched dev and test sets (dev_mismatched.tsv, test_mismatched.tsv;
  guids dev_mismatched-<index>, test_mismatched-<index>); the same training set."""

  FILES = {"train": ("train.tsv", "train"), "dev": ("dev_mismatched.tsv", "dev_mismatched"),
           "test": ("test_mismatched.tsv", "test_mismatched")}


class DiagnosticProcessor(_ColumnsProcessor):
  """GLUE's diagnostic set (AX): diagnostic.tsv (index, sentence1, sentence2), prediction
  only, with MNLI's labels: predict with a model fine-tuned on MNLI (--init_checkpoint or its
  output_dir)."""

  FILES = {"test": ("diagnostic.tsv", "test")}

  def get_labels(self):
    return MnliProcessor().get_labels()

  def get_train_examples(self, data_dir):
    raise ValueError("--task_name=ax: the diagnostic set has no training data (predict only: "
                     "--do_predict with an MNLI model)")

  def get_dev_examples(self, data_dir):
    raise ValueError("--task_name=ax: the diagnostic set has no labelled dev data (predict "
                     "only: --do_predict with an MNLI model)")


class CustomProcessor(DataProcessor):
  """--task_name=custom: train.tsv, dev.tsv and test.tsv of data_dir, tab-separated, quotes
  ordinary characters, the first line a header naming the columns.

  text_a_column (None: "sentence1", or "sentence" where there is no such column),
  text_b_column (None: "sentence2" where the file has one, else single sentences; "" or
  "none": single sentences) and label_column (None: "label") pick the columns by name, in
  each file's own header. Labels: `labels` (a list, e.g. from --labels=a,b,c) or the sorted
  distinct values of train.tsv's label column. test.tsv may lack the label column (its
  examples then get the first label as a dummy, as do its rows with an empty label). A
  missing column, a row with fewer or more fields than the header, an empty label in
  train.tsv or dev.tsv, or a train.tsv with fewer than two distinct labels is a ValueError
  naming the file (and line); a label with surrounding spaces is stripped, with a warning
  naming the lines. Guids "<set_type>-<line - 1>".

  multi_label: each label cell holds zero or more labels joined by `separator`
  (multi_label.parse_cell; an empty cell is no label, also in train.tsv), an example's label
  is a tuple of names, get_labels() a multi_label.MultiLabelList (default: the sorted union
  over train.tsv, at least one); a cell naming a label outside the labels is a ValueError
  naming the file and line.
  """

  def __init__(self, data_dir, text_a_column=None, text_b_column=None, label_column=None,
               labels=None, multi_label=False, separator=","):
    self.data_dir = data_dir
    self.text_a_column, self.text_b_column = text_a_column, text_b_column
    self.label_column = label_column or "label"
    self.multi_label, self.separator = bool(multi_label), separator
    self._labels = list(labels) if labels else None
    if self._labels and multi_label:
      self._labels = multi_label_lib.MultiLabelList(self._labels, separator)

  def get_labels(self):
    if self._labels is None and self.multi_label:
      self._labels = multi_label_lib.label_set(
          self.get_train_examples(self.data_dir), self.separator,
          f"--data_dir: {os.path.join(self.data_dir, 'train.tsv')}: its {self.label_column} "
          "column")
    if self._labels is None:
      path = os.path.join(self.data_dir, "train.tsv")
      if not tf.io.gfile.exists(path):
        raise ValueError(f"--data_dir: no such file {path} (--task_name=custom reads its "
                         "labels from it; or give --labels)")
      labels = sorted({e.label for e in self.get_train_examples(self.data_dir)})
      if len(labels) < 2:
        raise ValueError(
            f"--data_dir: {path}: its {self.label_column} column holds "
            f"{len(labels)} distinct label{'' if len(labels) == 1 else 's'} "
            f"({errors.error_line(', '.join(map(repr, labels)), 200)}); a classifier needs "
            "at least two (give --labels to name the others)")
      self._labels = labels
    return self._labels

  def get_train_examples(self, data_dir):
    return self._create_examples(data_dir, "train.tsv", "train")

  def get_dev_examples(self, data_dir):
    return self._create_examples(data_dir, "dev.tsv", "dev")

  def get_test_examples(self, data_dir):
    return self._create_examples(data_dir, "test.tsv", "test")

  def _create_examples(self, data_dir, name, set_type):
    path = os.path.join(data_dir, name)
    lines = self._read_tsv(path)
    if not lines:
      raise ValueError(f"--data_dir: {path} is empty (--task_name=custom needs a header line)")
    a, b, label = self._columns(lines[0], set_type == "test")
    examples = []
    padded = []  # lines whose label had surrounding spaces (stripped)
    for (i, line) in enumerate(lines[1:], 1):
      if len(line) != len(lines[0]):
        raise ValueError(f"--data_dir: {line.path}, line {line.line_number}: {len(line)} "
                         f"tab-separated fields, the header has {len(lines[0])}"
                         + (" (a tab inside a text?)" if len(line) > len(lines[0]) else ""))
      value = None if label is None else _u(line[label])
      if self.multi_label:
        examples.append(InputExample(guid="%s-%s" % (set_type, i), text_a=_u(line[a]),
                                     text_b=None if b is None else _u(line[b]),
                                     label=self._cell_labels(value, line)))
        continue
      if value is not None and value.strip() != value:
        padded.append(line.line_number)
        value = value.strip()
      if value == "":
        if set_type == "test":
          value = None  # an unlabelled test row: the dummy label
        else:
          raise ValueError(f"--data_dir: {line.path}, line {line.line_number}: empty label "
                           f"(column {self.label_column})")
      examples.append(InputExample(
          guid="%s-%s" % (set_type, i), text_a=_u(line[a]),
          text_b=None if b is None else _u(line[b]),
          label=self.get_labels()[0] if value is None else value))
    if padded:
      logging.warning("%s: %d label%s with surrounding spaces stripped (line%s %s)", path,
                      len(padded), "s" if len(padded) > 1 else "",
                      "s" if len(padded) > 1 else "",
                      ", ".join(map(str, padded[:5])) + (", ..." if len(padded) > 5 else ""))
    return examples

  def _cell_labels(self, value, line):
    """A multi-label cell (None: no label column) -> tuple of names, each checked against the
    labels when they are known (--labels, or train.tsv's once read)."""
    return multi_label_lib.parse_cell(value or "", self.separator, self._labels,
                                      f"--data_dir: {line.path}, line {line.line_number}")

  def _columns(self, header, test):
    """The header row -> positions (text_a, text_b or None, label or None)."""
    names = [_u(name).lstrip("\ufeff").strip() for name in header]

    def find(name, flag):
      if name not in names:
        raise ValueError(f"--{flag}={name}: {header.path} has no such column (its header: "
                         f"{', '.join(names)})")
      return names.index(name)

    a = find(self.text_a_column or ("sentence" if "sentence1" not in names and
                                    "sentence" in names else "sentence1"), "text_a_column")
    if self.text_b_column is None:
      b = names.index("sentence2") if "sentence2" in names else None
    elif self.text_b_column.strip().lower() in ("", "none"):
      b = None
    else:
      b = find(self.text_b_column, "text_b_column")
    label = None if test and self.label_column not in names else find(self.label_column,
                                                                       "label_column")
    return a, b, label


PROCESSORS = {"cola": ColaProcessor, "mnli": MnliProcessor, "mrpc": MrpcProcessor,
              "xnli": XnliProcessor, "sst-2": Sst2Processor, "qqp": QqpProcessor,
              "qnli": QnliProcessor, "rte": RteProcessor, "wnli": WnliProcessor,
              "sts-b": StsbProcessor, "mnli-mm": MnliMismatchedProcessor,
              "ax": DiagnosticProcessor}
TASK_ALIASES = {"sst2": "sst-2", "stsb": "sts-b", "mnli_mm": "mnli-mm",
                "mnli-mismatched": "mnli-mm", "diagnostic": "ax"}
CUSTOM_TASK_FLAGS = ("text_a_column", "text_b_column", "label_column", "labels")


def get_processor(task):
  """The processor of task.task_name (task: an options.Classification; case-insensitive;
  PROCESSORS, TASK_ALIASES or "custom", built from the custom-task flags). An unknown name is
  a ValueError listing the known ones; a custom-task flag with another task is one too."""
  name = task.task_name.strip().lower()
  name = TASK_ALIASES.get(name, name)
  multi = task.multi_label
  if name == "custom":
    labels = None
    if task.labels:
      labels = [label.strip() for label in task.labels.split(",")]
      if len(set(labels)) != len(labels) or "" in labels:
        raise ValueError(f"--labels={task.labels}: labels must be distinct and non-empty")
      if len(labels) < (1 if multi else 2):
        raise ValueError(f"--labels={task.labels}: a classifier needs at least two labels")
    return CustomProcessor(task.data_dir, task.text_a_column, task.text_b_column,
                           task.label_column, labels, multi,
                           task.label_separator)
  if multi:
    raise ValueError(f"--multi_label is only for --task_name=custom (not {task.task_name})")
  if name not in PROCESSORS:
    raise ValueError("Task not found: %s (known tasks: %s; also accepted: %s)" % (
        name, ", ".join(sorted(list(PROCESSORS) + ["custom"])), ", ".join(sorted(TASK_ALIASES))))
  for flag in CUSTOM_TASK_FLAGS:
    if getattr(task, flag) is not None:
      raise ValueError(f"--{flag} is only for --task_name=custom (not {task.task_name})")
  return PROCESSORS[name]()


def read_examples(task, processor, label_list):
  """{"train", "dev", "test": list of InputExample, or None where the flags do not ask for
  it}, read and checked before any model is built: a split without examples, or a label that
  is not one of the task's (label_list; None: a regression task, whose labels must be finite
  numbers), is a ValueError naming the file (or --tfds_name). (Test examples carry the task's
  dummy label, or, for --task_name=custom, test.tsv's own when it has a label column.)"""
  wanted = {"train": (task.do_train, processor.get_train_examples),
            "dev": (task.do_eval, processor.get_dev_examples),
            "test": (task.do_predict, processor.get_test_examples)}
  examples = {}
  source = (f"--tfds_name {task.tfds_name}" if task.tfds_name else
            f"--data_dir {task.data_dir}")
  for split, (asked, read) in wanted.items():
    examples[split] = read(task.data_dir) if asked else None
    if asked and not examples[split]:
      raise ValueError(f"{source}: the {split} file has no examples")
    for example in examples[split] if asked else ():
      if label_list is None and not _is_number(example.label):
        raise ValueError(f"{source}: {split} example {example.guid} has "
                         f"label {example.label!r}, not a number (a regression task)")
      if isinstance(label_list, multi_label_lib.MultiLabelList):
        for name in example.label:
          if name not in label_list:
            raise ValueError(f"{source}: {split} example {example.guid} has label {name!r}, "
                             f"not one of {list(label_list)}")
      elif label_list is not None and example.label not in label_list:
        raise ValueError(f"{source}: {split} example {example.guid} has "
                         f"label {example.label!r}, not one of {label_list}")
  return examples


def _is_number(text):
  try:
    return bool(np.isfinite(float(text)))
  except (TypeError, ValueError):
    return False
