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

from bert_keras.tasks.classifier import multi_label


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


def log_softmax(logits):
  """float32 [N, C] -> float32 [N, C] (NumPy)."""
  logits = logits.astype(np.float64)
  shifted = logits - logits.max(axis=-1, keepdims=True)
  return (shifted - np.log(np.exp(shifted).sum(axis=-1, keepdims=True))).astype(np.float32)


def classifier_eval_results(logits, label_ids, is_real_example, batch_sizes, global_step,
                            metric_name="eval_accuracy", is_regression=False, thresholds=None):
  """The original's eval results from the per-example logits: eval_accuracy and eval_loss
  weighted by is_real_example; loss = mean over batches of the batch-mean per-example
  loss (the Estimator's "loss", padding included); global_step. NumPy float32 / int64.

  Plus the task's official metric (metric_name, the processor's) over the real examples:
  eval_f1 (class 1) or eval_matthews_corr of the argmax predictions (metrics.py). Regression
  (logits [N, 1], float labels): eval_loss and loss are the mean squared error, and
  eval_pearson and eval_spearman replace eval_accuracy.

  thresholds not None (a multi-label task; float [C] or a scalar; label_ids multi-hot [N, C]):
  eval_loss and loss are the binary cross-entropy (losses.multi_label_loss, unweighted),
  and multi_label.metrics of the predictions sigmoid(logits) >= thresholds replace
  eval_accuracy: eval_micro_f1, eval_macro_f1, eval_subset_accuracy, eval_hamming_loss.
  """
  real = is_real_example.astype(bool)
  weights = is_real_example.astype(np.float64)
  if thresholds is not None:
    x, y = logits.astype(np.float64), label_ids.astype(np.float64)
    per_example = (np.maximum(x, 0) - x * y + np.log1p(np.exp(-np.abs(x)))).mean(axis=-1)
    predicted = multi_label.predict(multi_label.sigmoid(logits), thresholds)
    results = multi_label.metrics(label_ids[real] > 0.5, predicted[real])
  elif is_regression:
    predictions = logits[:, 0].astype(np.float64)
    per_example = (predictions - label_ids.astype(np.float64)) ** 2
    results = {"eval_pearson": pearson(predictions[real], label_ids[real]),
               "eval_spearman": spearman(predictions[real], label_ids[real])}
  else:
    per_example = -np.take_along_axis(log_softmax(logits), label_ids[:, None].astype(np.int64),
                                      axis=1)[:, 0].astype(np.float64)
    predictions = np.argmax(logits, axis=-1)
    correct = (predictions == label_ids).astype(np.float64)
    results = {"eval_accuracy": (weights * correct).sum() / max(weights.sum(), 1e-12)}
    official = {"eval_f1": f1, "eval_matthews_corr": matthews_corr}
    if metric_name in official:
      results[metric_name] = official[metric_name](label_ids[real], predictions[real])
  bounds = np.cumsum([0] + list(batch_sizes))
  batch_losses = [per_example[a:b].mean() for a, b in zip(bounds[:-1], bounds[1:])]
  results.update(eval_loss=(weights * per_example).sum() / max(weights.sum(), 1e-12),
                 loss=np.mean(batch_losses) if batch_losses else 0.0)
  results = {key: np.float32(value) for key, value in results.items()}
  results["global_step"] = np.int64(global_step)
  return results
