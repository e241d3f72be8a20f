"""Bi-encoder training and search: the in-batch negatives loss (sentence-transformers'
MultipleNegativesRankingLoss, its symmetric form and MatryoshkaLoss), the cached (gradient-cache)
training step of CachedMultipleNegativesRankingLoss (Gao et al., 2021), and exact top-k search;
and the cross-encoder (reranker): its model and its two losses.

Read top to bottom:
  1. in_batch_negatives_loss    scale * cosine (or dot) logits, cross-entropy to the diagonal;
                                hard negatives, symmetric, duplicate masking, Matryoshka dims
  2. plain_step, cached_step    (loss, gradients) of an encoder over a batch of text columns;
                                the cached step embeds in mini-batches and equals the plain one
  3. exact_search               top-k of query x corpus scores over corpus chunks, running top-k
  4. BertCrossEncoder           a (query, passage) pair -> one relevance logit [B, 1];
                                pointwise_loss (binary cross-entropy from logits) and
                                listwise_loss (softmax cross-entropy over a query's candidates)

Shapes: B batch (anchors), K hard negatives per anchor, D embedding size, S sequence length,
Q queries, N corpus size. The loss uses keras.ops (any backend); the training steps use
tf.GradientTape; the search is NumPy.

  encoder = modeling.BertSentenceEncoder(config, pooling="mean")
  loss_fn = lambda embeddings: in_batch_negatives_loss(*embeddings, scale=20.0)
  loss, grads = cached_step(encoder, [anchor_features, positive_features], loss_fn,
                            mini_batch_size=32, training=True)
  optimizer.apply_gradients(zip(grads, encoder.trainable_variables))
  scores, indices = exact_search(query_embeddings, corpus_chunks, top_k=10)
"""

from bert_keras.utils import backend  # first: TensorFlow quietly, where it is Keras's backend
import keras
import numpy as np
from keras import ops

from bert_keras import modeling

# TensorFlow where it is Keras's backend (the training steps below are run_embeddings' and
# run_reranker's, on TensorFlow), else None: the losses, the search and BertCrossEncoder are
# Keras ops and NumPy and import no TensorFlow on JAX or PyTorch.
tf = backend.tensorflow()

SIMILARITIES = ("cosine", "dot")


# ----------------------------------------------------------------------------------------------
# 1. The in-batch negatives loss
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
# 2. Training steps: plain and cached (gradient cache)
# ----------------------------------------------------------------------------------------------

def plain_step(encoder, columns, loss_fn, training=False):
  """(loss, gradients) of loss_fn over one batch, all in one tape.

  encoder: a Keras model, feature dict of [b, S] -> embeddings [b, D]. columns: a list of
  feature dicts, one per column of the batch (anchors [B, S], positives [B, S], negatives
  [B*K, S] anchor-major, ...). loss_fn: [embeddings [B_c, D] per column] -> scalar. Returns
  the scalar loss and one gradient per encoder.trainable_variables (None where unused)."""
  with tf.GradientTape() as tape:
    embeddings = [encoder(features, training=training) for features in columns]
    loss = loss_fn(embeddings)
  return loss, tape.gradient(loss, encoder.trainable_variables)


def _mini_batches(features, size):
  """[(start, stop, feature dict of rows start:stop)] covering a column's rows."""
  rows = int(next(iter(features.values())).shape[0])
  return [(start, min(start + size, rows), {k: v[start:start + size] for k, v in
                                            features.items()})
          for start in range(0, rows, size)]


def random_state(encoder):
  """The encoder's variables that are not weights: the seed states of its dropout layers."""
  weights = {id(w) for w in encoder.weights}
  return [v for v in encoder.variables if id(v) not in weights]


def _add(total, gradient):
  """total + gradient, either None; IndexedSlices are concatenated, not densified."""
  if total is None or gradient is None:
    return gradient if total is None else total
  if isinstance(total, tf.IndexedSlices) and isinstance(gradient, tf.IndexedSlices):
    return tf.IndexedSlices(tf.concat([total.values, gradient.values], 0),
                            tf.concat([total.indices, gradient.indices], 0), total.dense_shape)
  return tf.convert_to_tensor(total) + tf.convert_to_tensor(gradient)


def cached_step(encoder, columns, loss_fn, mini_batch_size, training=False):
  """plain_step's (loss, gradients) with the encoder run on mini_batch_size rows at a time, so
  memory grows with the mini-batch, not the batch (the loss still sees all B candidates).

  (a) every mini-batch of every column is embedded without a tape; (b) the loss and its
  gradient G with respect to the embeddings [B_c, D] are taken over the whole batch; (c) each
  mini-batch is embedded again under a tape and the gradients of sum(embeddings * G[rows]) are
  summed: by the chain rule, the gradients of the loss. Same arguments as plain_step.

  Dropout (training=True): before each mini-batch's first pass the encoder's random state (the
  seed variables of its dropout layers) is saved and restored before its second, so both passes
  draw the same masks and the gradients are exact for the loss returned; afterwards the state is
  where the first pass left it. The masks differ from plain_step's over the whole batch (other
  shapes), so the two agree exactly only with dropout off. loss_fn must depend on trainable
  variables through the embeddings only.
  """
  if int(mini_batch_size) < 1:
    raise ValueError("mini_batch_size must be at least 1, got %r" % (mini_batch_size,))
  state = random_state(encoder)
  parts = [_mini_batches(features, int(mini_batch_size)) for features in columns]
  saved, embeddings = [], []
  for column in parts:
    outputs = []
    for _, _, features in column:
      saved.append([tf.identity(v) for v in state])
      outputs.append(tf.stop_gradient(encoder(features, training=training)))
    embeddings.append(tf.concat(outputs, 0))
  after = [tf.identity(v) for v in state]
  with tf.GradientTape() as tape:
    tape.watch(embeddings)
    loss = loss_fn(embeddings)
  cotangents = tape.gradient(loss, embeddings)
  variables = encoder.trainable_variables
  gradients = [None] * len(variables)
  values = iter(saved)
  for column, cotangent in zip(parts, cotangents):
    for start, stop, features in column:
      for variable, value in zip(state, next(values)):
        variable.assign(value)
      with tf.GradientTape() as tape:
        output = encoder(features, training=training)
        surrogate = tf.reduce_sum(tf.cast(output, cotangent.dtype) * cotangent[start:stop])
      gradients = [_add(total, g) for total, g in
                   zip(gradients, tape.gradient(surrogate, variables))]
  for variable, value in zip(state, after):
    variable.assign(value)
  return loss, gradients


# ----------------------------------------------------------------------------------------------
# 3. Exact search
# ----------------------------------------------------------------------------------------------

def _top_k_positions(scores, k):
  """bool [Q, C]: for each row the k highest scores, ties to the lower position (k <= C)."""
  if k >= scores.shape[1]:
    return np.ones(scores.shape, bool)
  kth = -np.partition(-scores, k - 1, axis=1)[:, k - 1:k]                  # [Q, 1]
  above = scores > kth
  tied = scores == kth
  room = k - above.sum(axis=1, keepdims=True)
  return above | (tied & (np.cumsum(tied, axis=1) <= room))


def _chunks(corpus, chunk_size):
  """Corpus chunks [N_i, D] as NumPy arrays: an array split in rows of chunk_size, or the
  chunks of an iterable as they come."""
  if isinstance(corpus, np.ndarray) or hasattr(corpus, "__array__"):
    corpus = np.asarray(corpus)
    if corpus.ndim == 2:
      for start in range(0, corpus.shape[0], chunk_size):
        yield corpus[start:start + chunk_size]
      return
  for chunk in corpus:
    yield np.asarray(chunk)


def exact_search(query_embeddings, corpus, top_k, similarity="cosine", chunk_size=65536):
  """The top_k corpus entries of each query by cosine (or dot) score.

  query_embeddings [Q, D]; corpus: embeddings [N, D] (scored chunk_size rows at a time) or an
  iterable of chunks [N_i, D] (index = position in their concatenation). Returns (scores
  float [Q, k], indices int64 [Q, k]), each row by decreasing score, equal scores by lower index
  first; k = min(top_k, N). Memory: one [Q, N_i + k] block at a time, never [Q, N]."""
  if similarity not in SIMILARITIES:
    raise ValueError("similarity must be one of %s, got %r" % (", ".join(SIMILARITIES),
                                                                similarity))
  if int(top_k) < 1 or int(chunk_size) < 1:
    raise ValueError("top_k and chunk_size must be at least 1, got %r and %r"
                     % (top_k, chunk_size))
  queries = np.asarray(query_embeddings)
  if queries.ndim != 2:
    raise ValueError("query_embeddings must be [Q, D], got shape %s" % (queries.shape,))
  if similarity == "cosine":
    queries = _np_normalize(queries)
  best_scores = np.zeros((queries.shape[0], 0), queries.dtype)
  best_indices = np.zeros((queries.shape[0], 0), np.int64)
  offset = 0
  for chunk in _chunks(corpus, int(chunk_size)):
    if chunk.ndim != 2 or chunk.shape[1] != queries.shape[1]:
      raise ValueError("corpus chunks must be [N_i, %d], got shape %s"
                       % (queries.shape[1], chunk.shape))
    if similarity == "cosine":
      chunk = _np_normalize(chunk)
    # The kept entries stay in index order, before the chunk's: position order = index order.
    scores = np.concatenate([best_scores, queries @ chunk.T], axis=1)
    indices = np.concatenate(
        [best_indices, np.broadcast_to(np.arange(offset, offset + len(chunk)),
                                       (len(queries), len(chunk)))], axis=1)
    keep = _top_k_positions(scores, int(top_k))
    width = min(int(top_k), scores.shape[1])
    best_scores = scores[keep].reshape(len(queries), width)
    best_indices = indices[keep].reshape(len(queries), width)
    offset += len(chunk)
  order = np.argsort(-best_scores, axis=1, kind="stable")
  return (np.take_along_axis(best_scores, order, axis=1),
          np.take_along_axis(best_indices, order, axis=1))


def _np_normalize(x):
  """x / max(||x||, 1e-12) along the last axis, in x's float dtype (float32 for integers)."""
  x = x if np.issubdtype(x.dtype, np.floating) else x.astype(np.float32)
  return x / np.maximum(np.linalg.norm(x, axis=-1, keepdims=True), 1e-12).astype(x.dtype)


# ----------------------------------------------------------------------------------------------
# 4. The cross-encoder (reranker)
# ----------------------------------------------------------------------------------------------

@keras.saving.register_keras_serializable(package="bert_keras")
class BertCrossEncoder(modeling.BertClassifier):
  """A reranker: BertClassifier with one output, the relevance logit of a (query, passage)
  pair (the query as text_a / segment 0, the passage as text_b / segment 1), as
  sentence-transformers' CrossEncoder with num_labels=1. Its weights and TF1 / HuggingFace
  names are a one-output BertClassifier's (BertForSequenceClassification); its class tells it
  apart from a regression (task_registry's "reranker").

  BertCrossEncoder(encoder_or_config[, num_labels=1]). Inputs: BertModel's dict [B, S]. Returns
  the logits float32 [B, 1]; sigmoid(logit) is the probability of relevance."""

  def __init__(self, encoder_or_config, num_labels=1, **kwargs):
    if int(num_labels) != 1:
      raise ValueError(f"a cross-encoder has one output (the relevance logit), not "
                       f"num_labels={num_labels}")
    kwargs.setdefault("name", "bert_cross_encoder")
    kwargs.pop("multi_label", None)
    super().__init__(encoder_or_config, 1, **kwargs)

  def probabilities(self, logits):
    """The logits [B, 1] -> the probabilities of relevance float32 [B, 1] (sigmoid)."""
    return ops.sigmoid(ops.cast(logits, "float32"))


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
