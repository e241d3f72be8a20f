"""The losses of every task kind, in Keras ops (any backend), float32.

Read top to bottom:
  1. the original's        masked_lm_loss, next_sentence_loss, pretraining_loss (run_pretraining),
                           classifier_loss, multi_label_loss (run_classifier),
                           token_classifier_loss (run_ner), squad_loss (run_squad)
  2. bi-encoders           in_batch_negatives_loss (sentence-transformers'
                           MultipleNegativesRankingLoss, its symmetric form and MatryoshkaLoss)
  3. rerankers             pointwise_loss (binary cross-entropy from logits), listwise_loss
                           (softmax cross-entropy over a query's candidates)

Shapes: B batch, P masked positions, V vocabulary, S sequence length, K hard negatives per
anchor, D embedding size, Q queries, C candidates per query.
"""

import keras
from keras import ops

SIMILARITIES = ("cosine", "dot")


# ----------------------------------------------------------------------------------------------
# 1. The original's losses
# ----------------------------------------------------------------------------------------------

def _sparse_nll(logits, labels):
  """-log softmax(logits)[label]: logits [..., N], labels int [...] -> float32 [...]. Keras's
  sparse categorical cross-entropy (TensorFlow's fused kernel on TensorFlow)."""
  return ops.sparse_categorical_crossentropy(ops.cast(labels, "int32"),
                                             ops.cast(logits, "float32"), from_logits=True)


def masked_lm_per_position_loss(logits, label_ids):
  """-log p(label) at each masked position: logits [B, P, V], label_ids int [B, P] ->
  float32 [B, P]."""
  return _sparse_nll(logits, label_ids)


def next_sentence_per_example_loss(logits, labels):
  """-log p(label) per example: logits [B, 2], labels int [B] or [B, 1] (0 = is next) ->
  float32 [B]."""
  return _sparse_nll(logits, ops.reshape(labels, (-1,)))


def masked_lm_loss(logits, label_ids, label_weights, weight_sum=None):
  """sum(w * -log p(label)) / (weight_sum + 1e-5), as run_pretraining; weight_sum defaults
  to sum(w) of this batch (a distributed loop passes the sum over the global batch).

  logits [B, P, V], label_ids int [B, P], label_weights float [B, P] -> scalar float32.
  """
  weights = ops.cast(label_weights, "float32")
  if weight_sum is None:
    weight_sum = ops.sum(weights)
  return (ops.sum(weights * masked_lm_per_position_loss(logits, label_ids)) /
          (weight_sum + 1e-5))


def next_sentence_loss(logits, labels, num_examples=None):
  """The sum of -log p(label) over the batch / num_examples (default: this batch's size, i.e.
  the batch mean). logits [B, 2], labels int [B] or [B, 1] (0 = is next) -> scalar float32."""
  per_example = next_sentence_per_example_loss(logits, labels)
  if num_examples is None:
    num_examples = ops.cast(ops.shape(per_example)[0], "float32")
  return ops.sum(per_example) / num_examples


def classifier_loss(logits, label_ids):
  """Per-example -log softmax(logits)[label]: logits [B, N], label_ids int [B] -> float32 [B]
  (the original's per_example_loss; its "loss" is the batch mean)."""
  return _sparse_nll(logits, ops.reshape(label_ids, (-1,)))


def multi_label_loss(logits, labels, pos_weight=None):
  """Per-example binary cross-entropy of a multi-label classifier: the mean over the labels
  of -(w_c y log sigmoid(x) + (1 - y) log(1 - sigmoid(x))), from logits float [B, C] and
  multi-hot labels float [B, C] -> float32 [B]. pos_weight: None (all 1) or float [C], each
  label's weight of its positive term (run_classifier's --class_weights). Without pos_weight
  it equals keras.losses.BinaryCrossentropy(from_logits=True, reduction=None)."""
  x = ops.cast(logits, "float32")
  y = ops.cast(labels, "float32")
  # -log sigmoid(x) = softplus(-x) = log1p(exp(-|x|)) + max(-x, 0), stable for any x;
  # -log(1 - sigmoid(x)) = x + softplus(-x).
  softplus_minus_x = ops.log1p(ops.exp(-ops.abs(x))) + ops.maximum(-x, 0.0)
  w = 1.0 if pos_weight is None else ops.cast(pos_weight, "float32")
  per_label = w * y * softplus_minus_x + (1.0 - y) * (x + softplus_minus_x)
  return ops.mean(per_label, axis=-1)


def token_classifier_loss(logits, label_ids):
  """Per-token -log softmax(logits)[label], 0 where label_ids < 0 (WordPieces after a word's
  first, [CLS], [SEP], padding): logits [B, S, N], label_ids int [B, S] -> float32 [B, S].
  The mean over the tagged tokens is sum(loss) / sum(label_ids >= 0)."""
  labels = ops.cast(label_ids, "int32")
  picked = _sparse_nll(logits, ops.maximum(labels, 0))
  return ops.where(labels >= 0, picked, ops.zeros_like(picked))


def squad_loss(start_logits, end_logits, start_positions, end_positions):
  """Per-example (-log softmax(start_logits)[start] - log softmax(end_logits)[end]) / 2:
  logits float [B, S], positions int [B] (or [B, 1]) -> float32 [B]. The softmax runs over
  all S positions (padding included); a position outside [0, S) contributes 0 (the
  original's one-hot). The batch mean is the original's total_loss = (start_loss +
  end_loss) / 2."""
  def nll(logits, positions):
    logits = ops.cast(logits, "float32")
    positions = ops.reshape(ops.cast(positions, "int32"), (-1, 1))
    one_hot = ops.cast(positions == ops.arange(ops.shape(logits)[-1], dtype="int32")[None],
                       "float32")                                             # [B, S]
    return -ops.sum(one_hot * ops.log_softmax(logits, axis=-1), axis=-1)
  return (nll(start_logits, start_positions) + nll(end_logits, end_positions)) / 2.0


def pretraining_loss(outputs, features, masked_lm_weight_sum=None, num_examples=None):
  """masked_lm_loss + next_sentence_loss from BertPretrainer outputs (masked_lm_logits
  [B, P, V], next_sentence_logits [B, 2]) and the run_pretraining features (masked_lm_ids,
  masked_lm_weights [B, P], next_sentence_labels [B, 1]) -> scalar float32. The
  denominators default to this batch's own; run_pretraining's loop passes the global
  batch's sum of masked_lm_weights and number of examples."""
  return (masked_lm_loss(outputs["masked_lm_logits"], features["masked_lm_ids"],
                         features["masked_lm_weights"], masked_lm_weight_sum)
          + next_sentence_loss(outputs["next_sentence_logits"],
                               features["next_sentence_labels"], num_examples))


# ----------------------------------------------------------------------------------------------
# 2. The in-batch negatives loss (bi-encoders)
# ----------------------------------------------------------------------------------------------

def _float(x):
  """x as a float tensor: float64 stays float64, anything else becomes float32."""
  x = ops.convert_to_tensor(x)
  return x if keras.backend.standardize_dtype(x.dtype) == "float64" else ops.cast(x, "float32")


def _l2_normalize(x):
  """x / max(||x||, 1e-12) along the last axis (torch's F.normalize, as sentence-transformers)."""
  return x / ops.maximum(ops.sqrt(ops.sum(x * x, axis=-1, keepdims=True)), 1e-12)


def _false_negative_mask(batch_size, num_negatives, anchor_ids, positive_ids, negative_ids):
  """bool [B, B + B*K]: True where candidate j of anchor i is a known match other than i's own
  positive, or None when no ids are given. Candidates are the B positives, then the B*K
  negatives in row-major order of [B, K].

  Positive j (j != i) is masked when positive_ids[j] == positive_ids[i] (the same text) or
  anchor_ids[j] == anchor_ids[i] (another positive of the same anchor text); negative (j, k)
  when negative_ids[j, k] == positive_ids[i] (anchor i's own positive text used as a negative).
  The ids are integer ids of texts in one numbering (the same text, the same id)."""
  if anchor_ids is None and positive_ids is None:
    return None
  same = ops.zeros((batch_size, batch_size), "bool")
  for ids in (anchor_ids, positive_ids):
    if ids is not None:
      ids = ops.reshape(ops.convert_to_tensor(ids, "int64"), (-1,))
      same = ops.logical_or(same, ops.equal(ids[:, None], ids[None, :]))
  same = ops.logical_and(same, ops.logical_not(ops.cast(ops.eye(batch_size), "bool")))
  if not num_negatives:
    return same
  if negative_ids is None or positive_ids is None:
    negatives = ops.zeros((batch_size, batch_size * num_negatives), "bool")
  else:
    positive = ops.reshape(ops.convert_to_tensor(positive_ids, "int64"), (-1, 1))
    negative = ops.reshape(ops.convert_to_tensor(negative_ids, "int64"), (1, -1))
    negatives = ops.equal(positive, negative)
  return ops.concatenate([same, negatives], axis=1)


def _cross_entropy_to_diagonal(logits, mask):
  """mean_i(logsumexp_j(logits[i, j]) - logits[i, i]), logits [B, C >= B], with the True
  entries of mask (bool [B, C] or None) left out of the sum (their logit set to -inf)."""
  target = ops.diagonal(logits[:, :ops.shape(logits)[0]])
  if mask is not None:
    logits = ops.where(mask, ops.cast(float("-inf"), logits.dtype), logits)
  return ops.mean(ops.logsumexp(logits, axis=-1) - target)


def _one_loss(anchors, positives, negatives, scale, symmetric, similarity, mask):
  """The loss at one embedding size: anchors, positives [B, d], negatives [B, K, d] or None."""
  candidates = positives
  if negatives is not None:
    candidates = ops.concatenate(
        [positives, ops.reshape(negatives, (-1, ops.shape(negatives)[-1]))], axis=0)
  if similarity == "cosine":
    anchors, candidates = _l2_normalize(anchors), _l2_normalize(candidates)
  logits = scale * ops.matmul(anchors, ops.transpose(candidates))           # [B, B + B*K]
  loss = _cross_entropy_to_diagonal(logits, mask)
  if not symmetric:
    return loss
  batch_size = ops.shape(anchors)[0]
  backward = ops.transpose(logits[:, :batch_size])                          # positives -> anchors
  backward_mask = None if mask is None else ops.transpose(mask[:, :batch_size])
  return (loss + _cross_entropy_to_diagonal(backward, backward_mask)) / 2.0


def in_batch_negatives_loss(anchors, positives, negatives=None, scale=20.0, symmetric=False,
                            anchor_ids=None, positive_ids=None, negative_ids=None,
                            matryoshka_dims=None, matryoshka_weights=None, similarity="cosine"):
  """The multiple-negatives ranking loss: each anchor must pick its own positive among all the
  batch's candidates. Returns a scalar (float64 for float64 inputs, else float32).

  anchors [B, D], positives [B, D], negatives [B, K, D] or None (hard negatives). Anchor i's
  candidates are the B positives and all B*K negatives; logits = scale * cosine(anchor,
  candidate) (or the dot product, similarity="dot"); the loss is the batch mean of the
  cross-entropy with positive i as anchor i's target. symmetric: the mean of that and the
  positives -> anchors direction (positive i must pick anchor i among the B anchors;
  MultipleNegativesSymmetricRankingLoss).

  anchor_ids, positive_ids int [B], negative_ids int [B, K] (optional): ids of the texts, so
  that a candidate that is in fact a match (the same positive text twice in the batch, ...; see
  _false_negative_mask) is not counted as a negative: its logit is -inf, except the target.

  matryoshka_dims: None, or sizes d (each 1..D); the loss is then sum_d w_d * loss(embeddings
  truncated to their first d values, renormalised for cosine), w = matryoshka_weights (default
  all 1), as MatryoshkaLoss (list D itself to include the full size).
  """
  if similarity not in SIMILARITIES:
    raise ValueError("similarity must be one of %s, got %r" % (", ".join(SIMILARITIES),
                                                                similarity))
  anchors, positives = _float(anchors), _float(positives)
  if len(anchors.shape) != 2 or tuple(anchors.shape) != tuple(positives.shape):
    raise ValueError("anchors and positives must both be [B, D], got %s and %s"
                     % (tuple(anchors.shape), tuple(positives.shape)))
  batch_size, size = anchors.shape
  num_negatives = 0
  if negatives is not None:
    negatives = _float(negatives)
    if (len(negatives.shape) != 3 or negatives.shape[0] != batch_size
        or negatives.shape[2] != size):
      raise ValueError("negatives must be [B, K, D] = [%s, K, %s], got %s"
                       % (batch_size, size, tuple(negatives.shape)))
    num_negatives = negatives.shape[1]
  dims, weights = _matryoshka(matryoshka_dims, matryoshka_weights, size)
  mask = _false_negative_mask(batch_size, num_negatives, anchor_ids, positive_ids, negative_ids)
  total = 0.0
  for dim, weight in zip(dims, weights):
    loss = _one_loss(anchors[:, :dim], positives[:, :dim],
                     None if negatives is None else negatives[:, :, :dim],
                     scale, symmetric, similarity, mask)
    total = total + weight * loss
  return total


def _matryoshka(dims, weights, size):
  """([d, ...], [w, ...]) of the Matryoshka sizes and weights; ([size], [1.0]) for none."""
  if dims is None:
    if weights is not None:
      raise ValueError("matryoshka_weights given without matryoshka_dims")
    return [size], [1.0]
  dims = [int(d) for d in dims]
  if not dims or any(d < 1 or (size is not None and d > size) for d in dims):
    raise ValueError("matryoshka_dims must be sizes in 1..%s, got %s" % (size, dims))
  weights = [1.0] * len(dims) if weights is None else [float(w) for w in weights]
  if len(weights) != len(dims):
    raise ValueError("matryoshka_weights needs one weight per dim (%d), got %d"
                     % (len(dims), len(weights)))
  return dims, weights


# ----------------------------------------------------------------------------------------------
# 3. The rerankers' losses
# ----------------------------------------------------------------------------------------------

def pointwise_loss(logits, labels, weights=None):
  """Binary cross-entropy from logits, averaged: logits float [B] (or [B, 1]), labels 0/1 [B],
  weights float [B] or None (all 1): sum_i w_i * bce(label_i, logit_i) / sum_i w_i. A scalar."""
  logits = ops.reshape(_float(logits), (-1,))
  labels = ops.cast(ops.reshape(labels, (-1,)), logits.dtype)
  # log(1 + exp(-|x|)) + max(x, 0) - x * y: stable for any x
  losses = (ops.log1p(ops.exp(-ops.abs(logits))) + ops.maximum(logits, 0.0) - logits * labels)
  if weights is None:
    return ops.mean(losses)
  weights = ops.cast(ops.reshape(weights, (-1,)), logits.dtype)
  return ops.sum(losses * weights) / ops.maximum(ops.sum(weights), 1e-12)


def listwise_loss(logits, labels, mask=None):
  """The softmax cross-entropy over each query's candidates, the positives as the target.

  logits float [Q, C] (candidate c of query q), labels 0/1 [Q, C], mask bool/0-1 [Q, C] or None
  (all real; padding candidates are left out of the softmax). For a query with P >= 1
  positives the target distribution puts 1/P on each, so its loss is
    logsumexp_{c real} logits[q, c] - (1/P) sum_{c positive} logits[q, c];
  the result is the mean over the queries that have a positive (a query without one gives no
  signal and is skipped; 0 when none has). A scalar."""
  logits = _float(logits)
  labels = ops.cast(labels, logits.dtype)
  real = ops.ones_like(logits) if mask is None else ops.cast(mask, logits.dtype)
  labels = labels * real
  masked = ops.where(real > 0, logits, ops.cast(float("-inf"), logits.dtype))
  positives = ops.sum(labels, axis=-1)                                      # [Q]
  has_positive = ops.cast(positives > 0, logits.dtype)
  target = ops.sum(labels * ops.where(real > 0, logits, 0.0), axis=-1) / ops.maximum(
      positives, 1.0)
  per_query = (ops.logsumexp(masked, axis=-1) - target) * has_positive
  per_query = ops.where(has_positive > 0, per_query, 0.0)  # (a query with no real candidate)
  return ops.sum(per_query) / ops.maximum(ops.sum(has_positive), 1.0)
