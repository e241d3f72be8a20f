"""run_embeddings' model side: training records, the bi-encoder loss in the training loop, the
cached (gradient-cache) step, and retrieval evaluation.

Read top to bottom:
  1. records        write_records / decode_fn: per training row the anchor, the positive and K
                    negatives as input_ids / input_mask [S] (negatives [K*S]) and their text ids
                    (tasks/retrieval/embedding_data.py.TextIds) for duplicate masking
  2. the loss       EmbeddingTask: the shared encoder embeds anchors, positives and negatives in
                    one call ([b(2+K), S]) and losses.in_batch_negatives_loss scores them;
                    ColumnTrainer: one encoder call per column, each column cut to its own
                    longest text (EmbeddingTask's trim), or the same loss through
                    retrieval.cached_step (--mini_batch_size)
  3. evaluation     embed (texts -> float32 [N, D], batched, longest first, trimmed),
                    retrieval_run (exact search, top 100), retrieval_results (the scorer's
                    measures as eval_ keys)

In-batch negatives come from one replica's micro-batch: with R replicas and A accumulation steps
each anchor is scored against train_batch_size / (R * A) positives (and their negatives), as
sentence-transformers does on several devices without gathering; the step's loss is the mean of
the micro-batches' losses.
"""

import os

from absl import logging
import numpy as np
import tensorflow as tf

from bert_keras import losses
from bert_keras import retrieval
from bert_keras.runtime import inference
from bert_keras.runtime import input_pipeline
from bert_keras.runtime import outputs
from bert_keras.runtime import training
from bert_keras.tasks.retrieval import metrics as retrieval_metrics
from bert_keras.utils import file_io

COLUMNS = ("anchor", "positive", "negative")
K_VALUES = (1, 3, 5, 10, 100)
TOP_K = 100


# ----------------------------------------------------------------------------
# 1. Records

def check_has_negatives(train, batch_size):
  """A ValueError before any training when no anchor would have a negative: no hard negatives
  and a batch (per --gradient_accumulation_steps micro-batch: `batch_size`) of one row, or every
  positive the same text (the other rows' positives are masked as its duplicates). The loss
  would be exactly 0 at every step and nothing learned. train: read_data's "train" dict."""
  if train is None or train["num_negatives"]:
    return
  if batch_size < 2:
    raise ValueError(
        f"--train_batch_size: a batch of {batch_size} row (per --gradient_accumulation_steps "
        f"step) and no hard negatives in {train['path']}: each anchor's only candidate is its "
        "positive, so the loss is 0 and nothing is learned; give a batch of at least 2 rows, "
        "or a negative column")
  if len(set(np.asarray(train["text_ids"]["positive"]).tolist())) < 2:
    raise ValueError(
        f"{train['path']}: every row's positive is the same text and there are no hard "
        "negatives: the other rows' positives are masked as its duplicates, so the loss is 0 "
        "and nothing is learned; give distinct positives or a negative column")


def write_records(columns, text_ids, path):
  """Writes the training rows as tf.train.Examples: columns {"anchor", "positive": encode_texts'
  dict [N, S]; "negative": encode_texts' dict [N*K, S] (row-major) or None}, text_ids {"anchor",
  "positive": int64 [N], "negative": int64 [N*K] or None}; written under a temporary name."""
  n = len(text_ids["anchor"])
  with input_pipeline.RecordWriter(path) as writer:
    for row in range(n):
      features = {}
      for name in COLUMNS:
        if columns.get(name) is None:
          continue
        k = len(text_ids[name]) // n
        for key in ("input_ids", "input_mask"):
          features[f"{name}_{key}"] = columns[name][key][row * k:(row + 1) * k]
        features[f"{name}_text_id"] = text_ids[name][row * k:(row + 1) * k]
      writer.write(features)


def decode_fn(seq_length, num_negatives):
  """Serialized tf.train.Example -> {"<column>_input_ids", "<column>_input_mask": int32 [S]
  ([K*S] for the negatives), "<column>_text_id": int64 [] ([K])}."""
  types = {}
  for name in COLUMNS[:2] + ((COLUMNS[2],) if num_negatives else ()):
    k = num_negatives if name == "negative" else 1
    for key in ("input_ids", "input_mask"):
      types[f"{name}_{key}"] = tf.io.FixedLenFeature([k * seq_length], tf.int64)
    types[f"{name}_text_id"] = tf.io.FixedLenFeature([k] if name == "negative" else [],
                                                     tf.int64)

  def decode(record):
    parsed = tf.io.parse_single_example(record, types)
    return {k: v if k.endswith("text_id") else tf.cast(v, tf.int32) for k, v in parsed.items()}

  return decode


# ----------------------------------------------------------------------------
# 2. The loss

class EmbeddingTask(training.Task):
  """The in-batch negatives loss of a batch of (anchor, positive, K negatives) rows: the
  encoder's embeddings of the three columns -> losses.in_batch_negatives_loss with the text
  ids as duplicate masks, weighted by the micro-batch's share of the global batch (so the
  step's loss is the mean over its micro-batches and replicas)."""

  reads_padding = False  # (the poolings read the real tokens only)
  examples_name = "pairs"

  def __init__(self, seq_length, num_negatives, scale=20.0, symmetric=False,
               matryoshka_dims=None, trim=False):
    self.seq_length, self.num_negatives = seq_length, num_negatives
    self.scale, self.symmetric = scale, symmetric
    self.matryoshka_dims = list(matryoshka_dims) if matryoshka_dims else None
    self.trim = bool(trim)

  def columns(self, batch):
    """The model inputs of each column: [anchors [b, S], positives [b, S] (, negatives
    [b*K, S], anchor-major)], each {"input_ids", "input_mask", "segment_ids"}; with trim each
    column cut to its own longest text ([b, L_c], L_c known when the step runs: not for XLA
    or TPUs; the embeddings are the same, the attention's work on the padding is saved)."""
    found = []
    for name in COLUMNS[:2] + (("negative",) if self.num_negatives else ()):
      ids, mask = batch[f"{name}_input_ids"], batch[f"{name}_input_mask"]
      ids, mask = tf.reshape(ids, [-1, self.seq_length]), tf.reshape(mask, [-1, self.seq_length])
      if self.trim:
        length = input_pipeline.trimmed_length(mask, multiple=1)
        ids, mask = ids[:, :length], mask[:, :length]
      found.append({"input_ids": ids, "input_mask": mask, "segment_ids": tf.zeros_like(ids)})
    return found

  def model_inputs(self, batch):
    """The columns stacked: [b * (2 + K), S] each, anchors then positives then negatives."""
    columns = self.columns(batch)
    return {key: tf.concat([c[key] for c in columns], 0) for key in columns[0]}

  def denominators(self, batch):
    return {"pairs": tf.cast(tf.shape(batch["anchor_input_ids"])[0], tf.float32)}

  def embeddings_loss(self, embeddings, batch, denominators):
    """(loss, stats) of the embeddings of each column ([b, D], [b, D] (, [b*K, D]))."""
    anchors, positives = embeddings[0], embeddings[1]
    b = anchors.shape[0]  # (static: the loop's batches are whole)
    negatives = negative_ids = None
    if self.num_negatives:
      negatives = tf.reshape(embeddings[2], [b, self.num_negatives, -1])
      negative_ids = batch["negative_text_id"]
    loss = losses.in_batch_negatives_loss(
        anchors, positives, negatives, scale=self.scale, symmetric=self.symmetric,
        anchor_ids=batch["anchor_text_id"], positive_ids=batch["positive_text_id"],
        negative_ids=negative_ids, matryoshka_dims=self.matryoshka_dims)
    loss = loss * float(b) / denominators["pairs"]
    return loss, {"loss": loss}

  def loss(self, outputs, batch, denominators):
    b = batch["anchor_input_ids"].shape[0]
    sizes = [b, b] + ([b * self.num_negatives] if self.num_negatives else [])
    return self.embeddings_loss(tf.split(outputs, sizes, axis=0), batch, denominators)


class ColumnTrainer(training.Trainer):
  """training.Trainer that calls the encoder once per column (retrieval.plain_step), so that
  each column can have its own length (EmbeddingTask's trim: questions of 20 pieces are not
  padded to the paragraphs' 256); with mini_batch_size > 0 the gradients come from
  retrieval.cached_step instead: the encoder on mini_batch_size rows at a time (memory of a
  mini-batch, the loss over the whole micro-batch). Made from a built Trainer:
  ColumnTrainer.of(trainer, mini_batch_size)."""

  @classmethod
  def of(cls, trainer, mini_batch_size=0):
    made = cls.__new__(cls)
    made.__dict__.update(trainer.__dict__)
    made.mini_batch_size = int(mini_batch_size)
    return made

  def _grads_and_stats(self, batch, denominators):
    stats = {}

    def loss_fn(embeddings):
      loss, found = self.task.embeddings_loss(embeddings, batch, denominators)
      stats.update(found)
      return self.optimizer.scale_loss(loss) if self.loss_scale else loss

    columns = self.task.columns(batch)
    if self.mini_batch_size:
      _, grads = retrieval.cached_step(self.model, columns, loss_fn, self.mini_batch_size,
                                       training=True)
    else:
      _, grads = retrieval.plain_step(self.model, columns, loss_fn, training=True)
    grads = [tf.convert_to_tensor(g) if isinstance(g, tf.IndexedSlices) else g for g in grads]
    return grads, stats


# ----------------------------------------------------------------------------
# 3. Evaluation

def embedding_fn(model, strategy, use_xla=False):
  """inference.make_inference_fn of the encoder's embeddings float32 [b, D] (inference mode)."""

  def forward(batch):
    return model({"input_ids": batch["input_ids"], "input_mask": batch["input_mask"],
                  "segment_ids": tf.zeros_like(batch["input_ids"])}, training=False)

  return inference.make_inference_fn(strategy, forward, use_xla)


def embed(infer, arrays, batch_size, trim=True):
  """Embeddings float32 [N, D] of encode_texts' arrays, batch_size texts a step; the texts go
  longest first (each batch cut to its longest text when trim) and come back in order."""
  order = np.argsort(-arrays["input_mask"].sum(axis=1), kind="stable")
  sorted_arrays = {k: v[order] for k, v in arrays.items()}
  dataset = tf.data.Dataset.from_tensor_slices(sorted_arrays).batch(batch_size)
  parts = [outputs for _, outputs in inference.infer_dataset(
      infer, dataset, batch_size, "input_mask" if trim else None)]
  embeddings = np.concatenate(parts).astype(np.float32)
  result = np.empty_like(embeddings)
  result[order] = embeddings
  return result


def retrieval_run(query_ids, query_embeddings, doc_ids, doc_embeddings, top_k=TOP_K):
  """{query_id: {doc_id: cosine score}} of the top_k documents of each query
  (retrieval.exact_search)."""
  scores, indices = retrieval.exact_search(query_embeddings, doc_embeddings, top_k)
  return {q: {doc_ids[int(i)]: float(s) for s, i in zip(scores[row], indices[row])}
          for row, q in enumerate(query_ids)}


def retrieval_results(qrels, run, prefix="eval_"):
  """The scorer's measures (tasks/retrieval/metrics.py.evaluate at K_VALUES) as {prefix + name:
  value}, e.g. eval_NDCG@10, eval_MAP@100, eval_Recall@100, eval_MRR@10."""
  return {prefix + name: value for name, value in
          retrieval_metrics.evaluate(qrels, run, K_VALUES).items()}


def _ranks(x):
  """The ranks of x [N] (1..N), ties given their mean rank (as Spearman's rho needs)."""
  order = np.argsort(x, kind="stable")
  ranks = np.empty(len(x), np.float64)
  ranks[order] = np.arange(1, len(x) + 1)
  values, inverse = np.unique(x, return_inverse=True)
  sums = np.bincount(inverse, weights=ranks)
  counts = np.bincount(inverse)
  return (sums / counts)[inverse]


def _pearson(x, y):
  x, y = x - x.mean(), y - y.mean()
  denominator = np.sqrt((x * x).sum() * (y * y).sum())
  return float((x * y).sum() / denominator) if denominator > 0 else 0.0


def sts_results(embeddings_a, embeddings_b, gold, prefix="eval_"):
  """Pearson's r and Spearman's rho of the pairs' cosine similarities against the gold
  scores, as sentence-transformers' EmbeddingSimilarityEvaluator reports them (its cosine
  measures): embeddings float [N, D] each, gold float [N] -> {prefix + "pearson",
  prefix + "spearman"}."""
  a = np.asarray(embeddings_a, np.float64)
  b = np.asarray(embeddings_b, np.float64)
  norms = np.maximum(np.linalg.norm(a, axis=1) * np.linalg.norm(b, axis=1), 1e-12)
  cosine = (a * b).sum(axis=1) / norms
  gold = np.asarray(gold, np.float64)
  return {prefix + "pearson": _pearson(cosine, gold),
          prefix + "spearman": _pearson(_ranks(cosine), _ranks(gold))}


def write_results(output_dir, split, results, run, tag, chief=True):
  """Logs a split's results; writes eval_results.txt and dev_run.trec ("dev") or
  test_results.txt and test_run.trec ("test") into output_dir (the chief only; no run file
  where `run` is None)."""
  logging.info("***** %s results *****", "Eval" if split == "dev" else "Test")
  for key in sorted(results):
    logging.info("  %s = %s", key, str(results[key]))
  if not chief:
    return
  name = "eval_results.txt" if split == "dev" else "test_results.txt"
  file_io.write_text_atomic(os.path.join(output_dir, name), outputs.format_results(results))
  if run is not None:
    retrieval_metrics.write_run(os.path.join(output_dir, f"{split}_run.trec"), run, tag)
