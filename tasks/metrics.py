# coding=utf-8
"""The GLUE tasks' official metrics in NumPy (run_classifier's eval_results.txt).

Every function takes 1-D arrays of the same length N and returns a Python float:
  accuracy(labels, predictions)        fraction of equal entries;
  f1(labels, predictions)              binary F1 of the positive class 1 (MRPC, QQP);
  matthews_corr(labels, predictions)   Matthews correlation of two label vectors (CoLA);
  pearson(x, y), spearman(x, y)        correlation of two float vectors (STS-B; Spearman is
                                       Pearson's of the average ranks, ties averaged).

Undefined values are 0.0, never NaN: F1 with no true and no predicted positive (as
scikit-learn's f1_score, whose warning case also gives 0.0), Matthews correlation when a
vector is constant (as scikit-learn's matthews_corrcoef), and Pearson / Spearman when a vector
is constant or N < 2 (SciPy gives NaN there; 0.0 = "no measurable association", so that a
degenerate model never looks like the best checkpoint nor breaks a comparison). N = 0 gives
0.0 everywhere.
"""

import numpy as np


def accuracy(labels, predictions):
  """Fraction of positions where labels == predictions (0.0 when empty)."""
  labels, predictions = np.asarray(labels), np.asarray(predictions)
  return float(np.mean(labels == predictions)) if labels.size else 0.0


def f1(labels, predictions, positive=1):
  """F1 = 2 TP / (2 TP + FP + FN) of class `positive` (0.0 when TP + FP + FN = 0)."""
  labels, predictions = np.asarray(labels) == positive, np.asarray(predictions) == positive
  tp = float(np.sum(labels & predictions))
  fp = float(np.sum(~labels & predictions))
  fn = float(np.sum(labels & ~predictions))
  return 2 * tp / (2 * tp + fp + fn) if tp + fp + fn else 0.0


def matthews_corr(labels, predictions):
  """Matthews correlation coefficient, multi-class form (Gorodkin's R_K, which is the binary
  (TP TN - FP FN) / sqrt(...) for two classes), from the confusion matrix C:
  (c s - sum_k p_k t_k) / sqrt((s^2 - sum_k p_k^2) (s^2 - sum_k t_k^2)), c = trace C,
  s = N, t_k / p_k = true / predicted counts of class k. 0.0 when the denominator is 0."""
  labels, predictions = np.asarray(labels), np.asarray(predictions)
  if not labels.size:
    return 0.0
  classes, index = np.unique(np.concatenate([labels, predictions]), return_inverse=True)
  true_index, pred_index = index[:labels.size], index[labels.size:]
  t = np.bincount(true_index, minlength=len(classes)).astype(np.float64)
  p = np.bincount(pred_index, minlength=len(classes)).astype(np.float64)
  c = float(np.sum(true_index == pred_index))
  s = float(labels.size)
  denominator = (s * s - p @ p) * (s * s - t @ t)
  return float((c * s - p @ t) / np.sqrt(denominator)) if denominator > 0 else 0.0


def pearson(x, y):
  """Pearson's correlation (float64); 0.0 when N < 2 or a vector is constant."""
  x, y = np.asarray(x, np.float64), np.asarray(y, np.float64)
  if x.size < 2:
    return 0.0
  x, y = x - x.mean(), y - y.mean()
  denominator = np.sqrt((x @ x) * (y @ y))
  if denominator == 0 or not np.isfinite(denominator):
    return 0.0
  return float(np.clip((x @ y) / denominator, -1.0, 1.0))


def average_ranks(x):
  """1-based ranks of x's entries, tied entries sharing the mean of their ranks (float64 [N])."""
  x = np.asarray(x)
  ranks = np.empty(x.size, np.float64)
  ranks[np.argsort(x, kind="stable")] = np.arange(1, x.size + 1)
  _, groups = np.unique(x, return_inverse=True)
  groups = groups.reshape(-1)
  return (np.bincount(groups, weights=ranks) / np.bincount(groups))[groups]


def spearman(x, y):
  """Spearman's rank correlation: pearson of average_ranks (0.0 where pearson is)."""
  return pearson(average_ranks(x), average_ranks(y))
