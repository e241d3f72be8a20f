"""run_classifier's labelled prediction files (eval_predictions.tsv, test_predictions.tsv):
a header, then per example its guid, the predicted label, the gold label where known, and each
label's probability (regression: the predicted score)."""

import numpy as np

from bert_keras.tasks.classifier import multi_label


def prediction_tsv(guids, outputs, label_list, gold=None, thresholds=None):
  """The text of a labelled prediction file.

  guids: [N] strings. outputs: float [N, C] class probabilities (C = len(label_list)), or for
  regression (label_list None) float [N] scores. gold: [N] label strings (the examples'
  labels), or None (test sets). Columns: guid, prediction (the argmax label, or the score),
  label (gold, when given), then one column per label name with its probability. Numbers are
  written as test_results.tsv writes them (str of the float32), so each one reads back as the
  same float32.

  Multi-label (label_list a multi_label.MultiLabelList): outputs are each label's sigmoid
  probability, the prediction is the labels whose probability reaches thresholds (float [C]
  or a scalar; default 0.5) and gold a tuple of names per example, both joined by the
  list's separator ("" for none)."""
  outputs = np.asarray(outputs, np.float32)
  if len(guids) != len(outputs) or (gold is not None and len(gold) != len(outputs)):
    raise ValueError("prediction_tsv: %d guids, %d outputs, %s gold labels"
                     % (len(guids), len(outputs), "no" if gold is None else len(gold)))
  multi = isinstance(label_list, multi_label.MultiLabelList)
  if multi:
    predicted = multi_label.predict(outputs, 0.5 if thresholds is None else thresholds)
  header = ["guid", "prediction"] + (["label"] if gold is not None else [])
  if label_list is not None:
    header += [str(label) for label in label_list]
  lines = ["\t".join(header) + "\n"]
  for i, guid in enumerate(guids):
    if label_list is None:
      row = [str(guid), str(outputs[i])]
    elif multi:
      row = [str(guid), label_list.join(np.asarray(label_list)[predicted[i]])]
    else:
      row = [str(guid), str(label_list[int(np.argmax(outputs[i]))])]
    if gold is not None:
      row.append(label_list.join(gold[i]) if multi else str(gold[i]))
    if label_list is not None:
      row += [str(p) for p in outputs[i]]
    lines.append("\t".join(row) + "\n")
  return "".join(lines)
