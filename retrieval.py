"""Bi-encoder training and search: the plain and the cached (gradient-cache) training step of
sentence-transformers' (Cached)MultipleNegativesRankingLoss (Gao et al., 2021), and exact top-k
search. The losses are losses.py's (in_batch_negatives_loss); the models modeling.py's
(BertSentenceEncoder, BertCrossEncoder).

Read top to bottom:
  1. plain_step, cached_step    (loss, gradients) of an encoder over a batch of text columns;
                                the cached step embeds in mini-batches and equals the plain one
  2. exact_search               top-k of query x corpus scores over corpus chunks, running top-k

Shapes: B batch (anchors), D embedding size, S sequence length, Q queries, N corpus size. The
training steps use tf.GradientTape; the search is NumPy.

  encoder = modeling.BertSentenceEncoder(config, pooling="mean")
  loss_fn = lambda embeddings: losses.in_batch_negatives_loss(*embeddings, scale=20.0)
  loss, grads = cached_step(encoder, [anchor_features, positive_features], loss_fn,
                            mini_batch_size=32, training=True)
  optimizer.apply_gradients(zip(grads, encoder.trainable_variables))
  scores, indices = exact_search(query_embeddings, corpus_chunks, top_k=10)
"""

from bert_keras.utils import backend  # first: TensorFlow quietly, where it is Keras's backend
import numpy as np

from bert_keras import losses

# TensorFlow where it is Keras's backend (the training steps below are run_embeddings' and
# run_reranker's, on TensorFlow), else None: the search is NumPy and imports no TensorFlow on
# JAX or PyTorch.
tf = backend.tensorflow()


# ----------------------------------------------------------------------------------------------
# 1. Training steps: plain and cached (gradient cache)
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
# 2. Exact search
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
  if similarity not in losses.SIMILARITIES:
    raise ValueError("similarity must be one of %s, got %r" % (", ".join(losses.SIMILARITIES),
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
