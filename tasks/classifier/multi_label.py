"""run_classifier --multi_label: zero or more labels per example.

A label cell holds labels joined by a separator (an empty cell: no label). The model has one
sigmoid output per label (modeling.BertClassifier(..., multi_label=True) returns the logits;
probabilities = sigmoid(logits)); a prediction is every label whose probability reaches its
threshold. The metrics here equal scikit-learn's f1_score(average="micro" / "macro"),
accuracy_score (subset accuracy) and hamming_loss with their default arguments (tested).
"""

import json
import os

from absl import logging
import numpy as np
import tensorflow as tf

from bert_keras import model_files
from bert_keras.utils import file_io

THRESHOLDS_FILE = "thresholds.json"


class MultiLabelList(list):
  """The label names of a multi-label task (a list, index = model output), with the cell
  separator. Its examples' labels are tuples of label names."""

  def __init__(self, labels, separator=","):
    super().__init__(labels)
    self.separator = separator

  def multi_hot(self, labels):
    """A tuple of label names -> float32 [C] with 1.0 at each named label."""
    row = np.zeros([len(self)], np.float32)
    for label in labels:
      row[self.index(label)] = 1.0
    return row

  def join(self, labels):
    """Label names -> the cell text (the separator between them; "" for none)."""
    return self.separator.join(labels)


def parse_cell(cell, separator, labels=None, where="a label cell"):
  """A label cell -> a tuple of label names (each stripped; empty parts dropped, so "" is no
  label and "a,,b" is (a, b)); a label named twice counts once, in its first place. labels:
  None, or the known labels: a name outside them is a ValueError starting with `where` (e.g.
  "--data_dir: dev.tsv, line 7")."""
  names = tuple(dict.fromkeys(n for n in (part.strip() for part in cell.split(separator)) if n))
  for name in names if labels is not None else ():
    if name not in labels:
      raise ValueError(f"{where}: label {name!r} is not one of the labels "
                       f"({', '.join(map(str, labels))})")
  return names


# Characters that often join a cell's labels: a label holding one where no cell was split by
# --label_separator means the separator is not the data's (label_set).
COMMON_SEPARATORS = (",", ";", "|")


def label_set(examples, separator, where):
  """The sorted union of the examples' labels (tuples) -> a MultiLabelList; none at all is a
  ValueError starting with `where`. When no cell held two labels (`separator` split none):
  a label holding another of COMMON_SEPARATORS is a ValueError naming --label_separator and
  --multi_label (every combination of labels would be a label of its own); else a warning."""
  labels = sorted({name for example in examples for name in example.label})
  if not labels:
    raise ValueError(f"{where} names no label (give --labels)")
  if not any(len(example.label) > 1 for example in examples):
    joined = [(name, char) for name in labels for char in COMMON_SEPARATORS
              if char != separator and char in name]
    if joined:
      name, char = joined[0]
      raise ValueError(
          f"{where}: no cell holds two labels joined by --label_separator={separator!r}, and "
          f"the label {name!r} holds {char!r}: with --multi_label every combination would be "
          f"a label of its own (give --label_separator={char!r})")
    logging.warning("%s: no cell holds two labels joined by --label_separator=%r: with "
                    "--multi_label each cell is one label (is the separator right?)", where,
                    separator)
  return MultiLabelList(labels, separator)


def multi_hot(examples_labels, label_list):
  """[N] tuples of label names -> float32 [N, C]."""
  if not examples_labels:
    return np.zeros([0, len(label_list)], np.float32)
  return np.stack([label_list.multi_hot(labels) for labels in examples_labels])


def sigmoid(logits):
  """float [N, C] -> float32 [N, C], computed in float64 without overflow."""
  x = np.asarray(logits, np.float64)
  return np.where(x >= 0, 1 / (1 + np.exp(-np.abs(x))),
                  np.exp(-np.abs(x)) / (1 + np.exp(-np.abs(x)))).astype(np.float32)


def predict(probabilities, thresholds):
  """probabilities float [N, C], thresholds float [C] (or a scalar) -> bool [N, C]: each
  label whose probability reaches (>=) its threshold."""
  return np.asarray(probabilities) >= np.asarray(thresholds, np.float32)


def _f1(tp, fp, fn):
  """F1 = 2tp / (2tp + fp + fn), 0 where the denominator is 0 (scikit-learn's default
  zero_division, which warns and gives 0). Arrays or scalars."""
  tp, fp, fn = (np.asarray(x, np.float64) for x in (tp, fp, fn))
  denominator = 2 * tp + fp + fn
  return np.where(denominator > 0, 2 * tp / np.maximum(denominator, 1), 0.0)


def metrics(gold, predicted):
  """gold, predicted: bool (or 0/1) [N, C] -> {eval_micro_f1, eval_macro_f1,
  eval_subset_accuracy, eval_hamming_loss} (float64): F1 over all (example, label) cells,
  the mean of each label's F1, the fraction of examples whose whole label set is right, and
  the fraction of wrong cells."""
  gold, predicted = np.asarray(gold, bool), np.asarray(predicted, bool)
  tp = (gold & predicted).sum(axis=0)
  fp = (~gold & predicted).sum(axis=0)
  fn = (gold & ~predicted).sum(axis=0)
  n = max(gold.shape[0], 1)
  return {"eval_micro_f1": float(_f1(tp.sum(), fp.sum(), fn.sum())),
          "eval_macro_f1": float(_f1(tp, fp, fn).mean()) if gold.shape[1] else 0.0,
          "eval_subset_accuracy": float((gold == predicted).all(axis=1).sum() / n),
          "eval_hamming_loss": float((gold != predicted).sum() / max(gold.size, 1))}


def tune_thresholds(probabilities, gold, default=0.5):
  """One threshold per label maximising that label's F1 on (probabilities float [N, C], gold
  bool [N, C]) -> float32 [C]. The candidates are the label's distinct probabilities (a
  prediction is probability >= threshold) and `default`; on a tie the candidate closest to
  `default` wins, and the threshold is set halfway between it and the next lower candidate
  (same predictions, away from any example's probability). A label no candidate gives a
  positive F1 (e.g. no positive example) keeps `default`."""
  probabilities = np.asarray(probabilities, np.float32)
  gold = np.asarray(gold, bool)
  thresholds = np.full([probabilities.shape[1]], default, np.float32)
  for c in range(probabilities.shape[1]):
    candidates = np.unique(np.append(probabilities[:, c], np.float32(default)))
    predicted = probabilities[:, c][None, :] >= candidates[:, None]  # [K, N]
    tp = (predicted & gold[None, :, c]).sum(axis=1)
    fp = (predicted & ~gold[None, :, c]).sum(axis=1)
    fn = (~predicted & gold[None, :, c]).sum(axis=1)
    f1 = _f1(tp, fp, fn)
    if f1.max() <= 0:
      continue
    best = np.flatnonzero(f1 == f1.max())
    k = best[np.argmin(np.abs(candidates[best] - default))]
    # Not the probability itself but halfway down to the next lower candidate: the same
    # predictions on these examples, and a margin for the rounding of another run or device.
    thresholds[c] = candidates[k] if candidates[k] == np.float32(default) else (
        (candidates[k - 1] if k else np.float32(0.0)) + candidates[k]) / 2
  return thresholds


def write_thresholds(output_dir, label_list, thresholds, tuned):
  """output_dir/thresholds.json: {"labels", "thresholds", "label_separator", "tuned"}
  (written atomically); returns the dict."""
  record = {"labels": list(label_list), "thresholds": [float(t) for t in thresholds],
            "label_separator": label_list.separator, "tuned": bool(tuned)}
  file_io.write_text_atomic(os.path.join(output_dir, THRESHOLDS_FILE),
                            json.dumps(record, indent=2) + "\n")
  return record


def read_record(directory):
  """The dict of directory/thresholds.json (labels, thresholds, label_separator, tuned), or
  of the output_dir above a best/ without one; None without the file. A file that is not
  such a record is a ValueError naming it."""
  for where in (directory, os.path.dirname(directory.rstrip("/"))
                if os.path.basename(directory.rstrip("/")) == "best" else None):
    path = where and os.path.join(where, THRESHOLDS_FILE)
    if path and tf.io.gfile.exists(path):
      with tf.io.gfile.GFile(path) as f:
        try:
          record = json.loads(f.read())
        except ValueError as e:
          raise ValueError(f"{path}: not a thresholds file (not JSON: {e})") from None
      check_record(record, path)
      return record
  return None


def check_record(record, path):
  """A ValueError naming the file `path` and the field when `record` (thresholds.json's value)
  is not what write_thresholds writes: "labels" distinct non-empty names, "thresholds" one
  number in [0, 1] per label, "label_separator" (when there) a string."""
  if not isinstance(record, dict) or "labels" not in record or "thresholds" not in record:
    raise ValueError(f"{path}: not a thresholds file (a JSON object with \"labels\" and "
                     f"\"thresholds\"): {_shown(record)}")
  labels, thresholds = record["labels"], record["thresholds"]
  problem = model_files.names_problem(labels)
  if problem:
    raise ValueError(f"{path}: \"labels\" {problem}, not {_shown(labels)}")
  bad = [thresholds]  # (the value shown)
  if isinstance(thresholds, list) and len(thresholds) == len(labels):
    bad = [t for t in thresholds if isinstance(t, bool) or not isinstance(t, (int, float))
           or not 0 <= t <= 1][:1]  # (a NaN is not)
  if bad:
    raise ValueError(f"{path}: \"thresholds\" must be {len(labels)} numbers in [0, 1] (one a "
                     f"label), not {_shown(bad[0])}")
  if not isinstance(record.get("label_separator", ""), str):
    raise ValueError(f"{path}: \"label_separator\" must be a string, not "
                     f"{_shown(record['label_separator'])}")


def _shown(value):
  return json.dumps(value)[:80]


def read_thresholds(directory, label_list=None):
  """The thresholds (float32 [C]) of directory/thresholds.json (read_record), or None
  without the file; a ValueError naming the file when its labels are not label_list's."""
  record = read_record(directory)
  if record is None:
    return None
  if label_list is not None and list(record["labels"]) != list(label_list):
    raise ValueError(f"{os.path.join(directory, THRESHOLDS_FILE)}: its labels "
                     f"{record['labels']} are not the task's {list(label_list)}")
  return np.asarray(record["thresholds"], np.float32)
