"""retrieval.py: the in-batch negatives loss against a NumPy restatement (in-batch, hard
negatives, symmetric, duplicate positives, Matryoshka), the cached training step against the
plain one on a tiny BertSentenceEncoder, and exact_search against a brute-force sort."""

import numpy as np
import pytest
import tensorflow as tf

from bert_keras import losses
from bert_keras import modeling
from bert_keras import retrieval
from conftest import randomize


# --- the loss, restated in NumPy -------------------------------------------------------------

def _np_normalize(x):
  return x / np.maximum(np.linalg.norm(x, axis=-1, keepdims=True), 1e-12)


def _np_ce(logits, excluded):
  """Per row: -log softmax(logits)[i] over the candidates not excluded (the target never is)."""
  total = 0.0
  for i, row in enumerate(logits):
    kept = [row[j] for j in range(len(row)) if j == i or not excluded[i][j]]
    top = max(kept)
    total += top + np.log(sum(np.exp(v - top) for v in kept)) - row[i]
  return total / len(logits)


def _np_loss(a, p, n=None, scale=20.0, symmetric=False, anchor_ids=None, positive_ids=None,
             negative_ids=None, dims=None, weights=None, similarity="cosine"):
  """The loss from its definition, one candidate at a time, in float64."""
  batch = len(a)
  dims = dims or [a.shape[1]]
  weights = weights or [1.0] * len(dims)
  total = 0.0
  for dim, weight in zip(dims, weights):
    aa, pp = a[:, :dim], p[:, :dim]
    cands = list(pp) + ([] if n is None else list(n[:, :, :dim].reshape(-1, dim)))
    cand_pos = list(range(batch)) + ([] if n is None else [None] * (n.shape[0] * n.shape[1]))
    cand_neg = [None] * batch + ([] if n is None else
                                 [(j, k) for j in range(n.shape[0]) for k in range(n.shape[1])])
    if similarity == "cosine":
      aa, cands = _np_normalize(aa), [_np_normalize(c) for c in cands]
    logits = scale * np.array([[ai @ c for c in cands] for ai in aa])
    excluded = [[False] * len(cands) for _ in range(batch)]
    for i in range(batch):
      for c in range(len(cands)):
        j = cand_pos[c]
        if j is not None and j != i:
          excluded[i][c] = bool(
              (positive_ids is not None and positive_ids[j] == positive_ids[i])
              or (anchor_ids is not None and anchor_ids[j] == anchor_ids[i]))
        if cand_neg[c] is not None and negative_ids is not None and positive_ids is not None:
          excluded[i][c] = negative_ids[cand_neg[c]] == positive_ids[i]
    loss = _np_ce(logits, excluded)
    if symmetric:
      back = logits[:, :batch].T
      back_excluded = [[excluded[j][i] for j in range(batch)] for i in range(batch)]
      loss = (loss + _np_ce(back, back_excluded)) / 2
    total += weight * loss
  return total


def _data(batch=6, negatives=2, size=8, seed=0):
  rng = np.random.RandomState(seed)
  a = rng.normal(size=(batch, size))
  p = a + 0.8 * rng.normal(size=(batch, size))      # related, so the loss is not uniform
  n = rng.normal(size=(batch, negatives, size))
  return a, p, n


def _loss(*args, **kwargs):
  return float(losses.in_batch_negatives_loss(*args, **kwargs))


@pytest.mark.parametrize("similarity", ["cosine", "dot"])
@pytest.mark.parametrize("symmetric", [False, True])
def test_in_batch_and_hard_negatives_match_numpy(similarity, symmetric):
  a, p, n = _data()
  scale = 20.0 if similarity == "cosine" else 0.5
  for negatives in (None, n):
    want = _np_loss(a, p, negatives, scale=scale, symmetric=symmetric, similarity=similarity)
    got = _loss(a, p, negatives, scale=scale, symmetric=symmetric, similarity=similarity)
    np.testing.assert_allclose(got, want, rtol=0, atol=1e-6)
  # Hard negatives make the task harder: the loss must grow (they are candidates at all).
  assert _loss(a, p, n) > _loss(a, p)
  # float32 inputs are computed in float32
  got32 = _loss(a.astype(np.float32), p.astype(np.float32), n.astype(np.float32),
                scale=scale, symmetric=symmetric, similarity=similarity)
  np.testing.assert_allclose(got32, _np_loss(a, p, n, scale=scale, symmetric=symmetric,
                                             similarity=similarity), rtol=1e-5)


@pytest.mark.parametrize("symmetric", [False, True])
def test_duplicate_positives_are_not_negatives(symmetric):
  """Anchors 0 and 3 share one positive text (id 7): p[3] is a copy of p[0]. For anchor 0,
  candidate p[3] has the same logit as its target p[0]; counted as a negative it would add
  exp(logit) to the softmax's denominator and raise the loss by about log 2 for that row
  (likewise for anchor 3), so a loss that ignores the mask differs from the NumPy restatement
  (which leaves it out) by far more than 1e-6 -- checked below against the unmasked loss."""
  a, p, n = _data(seed=1)
  p[3] = p[0]
  positive_ids = np.array([7, 1, 2, 7, 4, 5])
  anchor_ids = np.array([10, 11, 12, 13, 11, 14])    # anchors 1 and 4: the same query text
  negative_ids = np.array([[20, 21], [22, 2], [23, 24], [25, 26], [27, 28], [29, 30]])
  for negatives, neg_ids in ((None, None), (n, negative_ids)):
    kwargs = dict(symmetric=symmetric, positive_ids=positive_ids, anchor_ids=anchor_ids,
                  negative_ids=neg_ids)
    want = _np_loss(a, p, negatives, **kwargs)
    got = _loss(a, p, negatives, **kwargs)
    np.testing.assert_allclose(got, want, rtol=0, atol=1e-6)
    unmasked = _loss(a, p, negatives, symmetric=symmetric)
    assert abs(unmasked - want) > 1e-2
  # Only the ids matter: the positive-text ids alone mask p[3] for anchor 0 and p[0] for 3.
  np.testing.assert_allclose(_loss(a, p, positive_ids=positive_ids),
                             _np_loss(a, p, positive_ids=positive_ids), rtol=0, atol=1e-6)


def test_masked_loss_has_finite_gradients():
  a, p, n = (tf.constant(x) for x in _data(seed=2))
  ids = tf.constant([0, 1, 0, 2, 3, 1])
  with tf.GradientTape() as tape:
    tape.watch([a, p, n])
    loss = losses.in_batch_negatives_loss(a, p, n, symmetric=True, positive_ids=ids)
  for gradient in tape.gradient(loss, [a, p, n]):
    assert np.isfinite(gradient.numpy()).all()


def test_matryoshka_matches_numpy():
  a, p, n = _data(size=16, seed=3)
  for negatives in (None, n):
    for dims, weights in (([16, 8, 4], None), ([16, 8, 2], [1.0, 0.5, 0.25])):
      for symmetric in (False, True):
        want = _np_loss(a, p, negatives, symmetric=symmetric, dims=dims, weights=weights)
        got = _loss(a, p, negatives, symmetric=symmetric, matryoshka_dims=dims,
                    matryoshka_weights=weights)
        np.testing.assert_allclose(got, want, rtol=0, atol=1e-6)
  # Truncation renormalises: the 4-dim loss is not the full one.
  assert abs(_loss(a, p, matryoshka_dims=[4]) - _loss(a, p)) > 1e-3


def test_loss_refuses_bad_arguments():
  a, p, n = _data()
  with pytest.raises(ValueError, match="anchors and positives"):
    losses.in_batch_negatives_loss(a, p[:3])
  with pytest.raises(ValueError, match="negatives must be"):
    losses.in_batch_negatives_loss(a, p, n[:, :, :4])
  with pytest.raises(ValueError, match="matryoshka_dims"):
    losses.in_batch_negatives_loss(a, p, matryoshka_dims=[9])
  with pytest.raises(ValueError, match="one weight per dim"):
    losses.in_batch_negatives_loss(a, p, matryoshka_dims=[8, 4], matryoshka_weights=[1])
  with pytest.raises(ValueError, match="similarity"):
    losses.in_batch_negatives_loss(a, p, similarity="l2")


# --- the cached step -------------------------------------------------------------------------

def _encoder(dropout):
  config = modeling.BertConfig(vocab_size=40, hidden_size=32, num_hidden_layers=2,
                               num_attention_heads=4, intermediate_size=48,
                               max_position_embeddings=16, type_vocab_size=2,
                               hidden_dropout_prob=dropout, attention_probs_dropout_prob=dropout)
  encoder = modeling.BertSentenceEncoder(config, pooling="mean")
  rng = np.random.RandomState(5)
  columns = []
  for _ in range(3):   # anchors [8, S], positives [8, S], negatives [8 * 1, S]
    lengths = rng.randint(3, 10, size=8)
    ids = rng.randint(4, 40, size=(8, 10)) * (np.arange(10)[None, :] < lengths[:, None])
    columns.append({"input_ids": ids.astype(np.int32),
                    "input_mask": (ids > 0).astype(np.int32),
                    "segment_ids": np.zeros_like(ids, np.int32)})
  encoder(columns[0])
  randomize(encoder, seed=4)
  return encoder, columns


def _loss_fn(embeddings):
  anchors, positives, negatives = embeddings
  return losses.in_batch_negatives_loss(
      anchors, positives, tf.reshape(negatives, (8, 1, -1)), symmetric=True,
      positive_ids=[0, 1, 2, 3, 0, 5, 6, 7], matryoshka_dims=[32, 8])


def _dense(gradients):
  return [None if g is None else tf.convert_to_tensor(g).numpy() for g in gradients]


def test_cached_step_equals_plain_step():
  encoder, columns = _encoder(dropout=0.0)
  loss, gradients = retrieval.plain_step(encoder, columns, _loss_fn)
  cached_loss, cached = retrieval.cached_step(encoder, columns, _loss_fn, mini_batch_size=2)
  np.testing.assert_allclose(float(cached_loss), float(loss), rtol=1e-6)
  plain = _dense(gradients)
  assert sum(g is not None for g in plain) > 10
  for want, got in zip(plain, _dense(cached)):
    assert (want is None) == (got is None)
    if want is not None:
      np.testing.assert_allclose(got, want, rtol=0, atol=1e-5)
  # A mini-batch size that does not divide the batch (3, 3, 2) too.
  _, uneven = retrieval.cached_step(encoder, columns, _loss_fn, mini_batch_size=3)
  for want, got in zip(plain, _dense(uneven)):
    if want is not None:
      np.testing.assert_allclose(got, want, rtol=0, atol=1e-5)


def test_cached_step_replays_dropout():
  """With dropout on, the cached step's gradients are those of the loss of the masks its first
  pass drew: the same as one tape over the same mini-batches from the same seed state. Without
  the replay the second pass would draw new masks and the gradients would differ (the loss
  with dropout is checked to differ from the loss without, so the masks matter)."""
  encoder, columns = _encoder(dropout=0.2)
  state = retrieval.random_state(encoder)
  assert state, "the dropout layers' seed states"
  start = [v.numpy() for v in state]

  def reference():
    with tf.GradientTape() as tape:
      embeddings = [tf.concat([encoder({k: v[i:i + 2] for k, v in features.items()},
                                       training=True) for i in range(0, 8, 2)], 0)
                    for features in columns]
      loss = _loss_fn(embeddings)
    return loss, _dense(tape.gradient(loss, encoder.trainable_variables))

  want_loss, want = reference()
  end = [v.numpy() for v in state]
  for variable, value in zip(state, start):
    variable.assign(value)
  loss, got = retrieval.cached_step(encoder, columns, _loss_fn, mini_batch_size=2,
                                    training=True)
  np.testing.assert_allclose(float(loss), float(want_loss), rtol=1e-6)
  for w, g in zip(want, _dense(got)):
    if w is not None:
      np.testing.assert_allclose(g, w, rtol=0, atol=1e-5)
  for variable, value in zip(state, end):   # left where the first pass left it
    np.testing.assert_array_equal(variable.numpy(), value)
  no_dropout, _ = retrieval.plain_step(encoder, columns, _loss_fn, training=False)
  assert abs(float(no_dropout) - float(want_loss)) > 1e-3


# --- exact search ----------------------------------------------------------------------------

def _brute_force(queries, corpus, k, similarity):
  if similarity == "cosine":
    queries, corpus = _np_normalize(queries), _np_normalize(corpus)
  scores = queries @ corpus.T
  order = np.array([np.lexsort((np.arange(len(row)), -row))[:k] for row in scores])
  return np.take_along_axis(scores, order, axis=1), order


def _tied_vectors(rng, count, size=16):
  """Vectors of 4 entries +-1 (norm 2) scaled by powers of two: their cosines and dot products
  are exact in float64, so equal scores are equal bits (many ties, on purpose)."""
  x = np.zeros((count, size))
  for row in x:
    row[rng.choice(size, 4, replace=False)] = rng.choice([-1.0, 1.0], 4)
  return x * 2.0 ** rng.randint(0, 3, size=(count, 1))


@pytest.mark.parametrize("similarity", ["cosine", "dot"])
def test_exact_search_matches_brute_force_with_ties(similarity):
  rng = np.random.RandomState(6)
  queries, corpus = _tied_vectors(rng, 7), _tied_vectors(rng, 103)
  corpus[50] = corpus[3]                      # exact duplicates too
  for k in (1, 5, 20):
    want_scores, want_indices = _brute_force(queries, corpus, k, similarity)
    _, counts = np.unique(want_scores[0], return_counts=True)
    for chunk_size in (1, 4, 10, 17, 103, 1000):
      scores, indices = retrieval.exact_search(queries, corpus, k, similarity,
                                               chunk_size=chunk_size)
      np.testing.assert_array_equal(indices, want_indices)
      np.testing.assert_array_equal(scores, want_scores)
    # an iterator of uneven chunks
    bounds = [0, 9, 10, 40, 41, 103]
    chunks = (corpus[s:e] for s, e in zip(bounds[:-1], bounds[1:]))
    scores, indices = retrieval.exact_search(queries, chunks, k, similarity)
    np.testing.assert_array_equal(indices, want_indices)
  assert (counts > 1).any()                   # the data has ties inside the top-k


def test_exact_search_random_floats_and_small_corpus():
  rng = np.random.RandomState(7)
  queries, corpus = rng.normal(size=(5, 8)), rng.normal(size=(30, 8))
  scores, indices = retrieval.exact_search(queries, corpus, 4, chunk_size=7)
  want_scores, want_indices = _brute_force(queries, corpus, 4, "cosine")
  np.testing.assert_array_equal(indices, want_indices)
  np.testing.assert_allclose(scores, want_scores, rtol=1e-12)
  scores, indices = retrieval.exact_search(queries, corpus[:3], 10, "dot")
  assert indices.shape == (5, 3)              # k = min(top_k, N)
  with pytest.raises(ValueError, match="top_k"):
    retrieval.exact_search(queries, corpus, 0)
  with pytest.raises(ValueError, match="corpus chunks"):
    retrieval.exact_search(queries, corpus[:, :4], 2)
