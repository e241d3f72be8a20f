# coding=utf-8
"""run_classifier's labelled prediction files (eval_predictions.tsv, test_predictions.tsv):
a header, then per example its guid, the predicted label, the gold label where known, and each
label's probability (regression: the predicted score)."""

import numpy as np


def prediction_tsv(guids, outputs, label_list, gold=None):
  """The text of a labelled prediction file.

  guids: [N] strings. outputs: float [N, C] class probabilities (C = len(label_list)), or for
  regression (label_list None) float [N] scores. gold: [N] label strings (the examples'
  labels), or None (test sets). Columns: guid, prediction (the argmax label, or the score),
  label (gold, when given), then one column per label name with its probability. Numbers are
  written as test_results.tsv writes them (str of the float32), so each one reads back as the
  same float32."""
  outputs = np.asarray(outputs, np.float32)
  if len(guids) != len(outputs) or (gold is not None and len(gold) != len(outputs)):
    raise ValueError("prediction_tsv: %d guids, %d outputs, %s gold labels"
                     % (len(guids), len(outputs), "no" if gold is None else len(gold)))
  header = ["guid", "prediction"] + (["label"] if gold is not None else [])
  if label_list is not None:
    header += [str(label) for label in label_list]
  lines = ["\t".join(header) + "\n"]
  for i, guid in enumerate(guids):
    if label_list is None:
      row = [str(guid), str(outputs[i])]
    else:
      row = [str(guid), str(label_list[int(np.argmax(outputs[i]))])]
    if gold is not None:
      row.append(str(gold[i]))
    if label_list is not None:
      row += [str(p) for p in outputs[i]]
    lines.append("\t".join(row) + "\n")
  return "".join(lines)
