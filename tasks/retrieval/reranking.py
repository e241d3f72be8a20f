"""run_reranker's parts: labelled (query, passage) pairs, candidate lists, training records, the
cross-encoder's losses in the training loop, and reranking a TREC run.

Read top to bottom:
  1. training rows   read_labelled_pairs: train.tsv (a header naming `query`, `passage`,
                     `label`) or train.jsonl (those keys) -> LabelledPair(query, passage, label
                     0/1, line); group_by_query: the rows of each query (first-appearance order)
                     for the listwise loss, each with a positive
  2. candidates      read_candidates: a TREC run -> {query_id: [doc_id, ...]} in the run's own
                     order (trec_eval's: score descending, then doc id descending), top_k each;
                     an unknown query or document names its line
  3. inputs, records encode_pairs: [CLS] query [SEP] passage [SEP] -> input_ids, input_mask,
                     segment_ids int32 [N, S]; write_records / decode_fn: one pair a record
                     (pointwise) or one query's C candidates a record ([C*S] each, padded with
                     masked-out candidates)
  4. the loss        RerankTask: losses.pointwise_loss (binary cross-entropy) or
                     losses.listwise_loss (softmax cross-entropy over a query's candidates)
  5. reranking       score_fn / score_pairs (the model's logits float32 [N], batched, longest
                     first), rerank (candidates -> {query_id: {doc_id: logit}}), rerank_file
                     (predict.py's --rerank_run: a run file in, a reranked run file out)
"""

import dataclasses

import numpy as np
import tensorflow as tf

from bert_keras import losses
from bert_keras import preprocessing
from bert_keras.runtime import inference
from bert_keras.runtime import input_pipeline
from bert_keras.runtime import training
from bert_keras.tasks.retrieval import embedding_data
from bert_keras.tasks.retrieval import embeddings
from bert_keras.tasks.retrieval import metrics as retrieval_metrics
from bert_keras.utils import progress as progress_lib
from bert_keras.utils import text_lines

QUERY, PASSAGE, LABEL = "query", "passage", "label"
LOSSES = ("pointwise", "listwise")
TOP_K = 100
RUN_TAG = "bert_keras_reranker"
_FEATURES = ("input_ids", "input_mask", "segment_ids")


# ----------------------------------------------------------------------------
# 1. Training rows

@dataclasses.dataclass
class LabelledPair:
  """One training row: query, passage (str), label (0 or 1), the 1-based line of `path`."""
  query: str
  passage: str
  label: int
  line: int
  path: str


def _label(path, number, value):
  """0 or 1 of a label field (the ints or their text), else a ValueError naming the line."""
  text = value.strip() if isinstance(value, str) else value
  if isinstance(text, bool) or text not in (0, 1, "0", "1"):
    raise ValueError(f"{path} line {number}: the label {value!r:.40} is not 0 or 1")
  return int(text)


def _tsv_rows(path):
  lines = embedding_data.text_lines(path)
  if not lines:
    raise ValueError(f"{path}: empty (expected a header naming the columns {QUERY}, "
                     f"{PASSAGE} and {LABEL})")
  header = [name.strip() for name in lines[0][1].split("\t")]
  for name in (QUERY, PASSAGE, LABEL):
    if name not in header:
      raise ValueError(f"{path} line 1: the header {header} names no `{name}` column")
  columns = [header.index(name) for name in (QUERY, PASSAGE, LABEL)]
  for number, line in lines[1:]:
    if not line.strip():
      continue
    row = line.split("\t")
    yield number, {name: row[i] if i < len(row) else None
                   for name, i in zip((QUERY, PASSAGE, LABEL), columns)}


def read_labelled_pairs(path):
  """The training rows (list of LabelledPair) of a .tsv or .jsonl file; a missing or empty
  query or passage, or a label not 0/1, is a ValueError naming the file and line."""
  rows = embedding_data.json_rows(path) if path.endswith(".jsonl") else _tsv_rows(path)
  pairs = []
  for number, row in rows:
    query = embedding_data.required_text(path, number, QUERY, row.get(QUERY))
    passage = embedding_data.required_text(path, number, PASSAGE, row.get(PASSAGE))
    if row.get(LABEL) is None:
      raise ValueError(f"{path} line {number}: no {LABEL}")
    pairs.append(LabelledPair(query, passage, _label(path, number, row[LABEL]), number, path))
  if not pairs:
    raise ValueError(f"{path}: no training rows")
  return pairs


def group_by_query(pairs):
  """The listwise loss's lists: [[LabelledPair, ...] of one query] in the order the queries
  first appear (a query's rows need not be adjacent); a query without a positive (label 1)
  is a ValueError naming its first line."""
  groups = {}
  for pair in pairs:
    groups.setdefault(pair.query, []).append(pair)
  for group in groups.values():
    if not any(pair.label for pair in group):
      raise ValueError(f"{group[0].path} line {group[0].line}: the query {group[0].query!r:.60}"
                       " has no positive (label 1): the listwise loss (the default --loss) "
                       "needs one per query; give one, or --loss=pointwise")
  return list(groups.values())


# ----------------------------------------------------------------------------
# 2. Candidate lists

def read_candidates(path, queries, corpus, top_k=TOP_K):
  """{query_id: [doc_id, ...]}: the first top_k documents of each query of a TREC run file
  (retrieval_metrics.read_run: a malformed line is a ValueError naming it), in the run's own
  order (retrieval_metrics.rank_documents). A query id not in `queries` or a document id not
  in `corpus` is a ValueError naming the file and line."""
  run = retrieval_metrics.read_run(path, top_k=top_k)  # (each query's first top_k kept)
  for number, line in text_lines.numbered_lines(path):
    fields = line.split()
    if len(fields) == 6:
      if fields[0] not in queries:
        raise ValueError(f"{path} line {number}: the query {fields[0]!r} is not in "
                         "queries.jsonl")
      if fields[2] not in corpus:
        raise ValueError(f"{path} line {number}: the document {fields[2]!r} is not in "
                         "corpus.jsonl")
  if not run:
    raise ValueError(f"{path}: no candidates (an empty run)")
  return {qid: retrieval_metrics.rank_documents(scores)[:top_k] for qid, scores in run.items()}


def candidate_run(candidates):
  """The candidates as a run {query_id: {doc_id: score}} that ranks them in their order
  (scores len, len - 1, ..., 1): what the scorer measures as "before reranking"."""
  return {qid: {d: float(len(docs) - i) for i, d in enumerate(docs)}
          for qid, docs in candidates.items()}


# ----------------------------------------------------------------------------
# 3. Model inputs and training records

def encode_pairs(queries, passages, tokenizer, max_seq_length):
  """{"input_ids", "input_mask", "segment_ids"}: int32 [N, max_seq_length] of [CLS] query [SEP]
  passage [SEP] (preprocessing.pack_tokens: the longer side cut first), zero-padded."""
  arrays = {k: np.zeros((len(queries), max_seq_length), np.int32) for k in _FEATURES}
  cache = {}
  for row, (query, passage) in enumerate(zip(queries, passages)):
    if query not in cache:
      cache[query] = tokenizer.tokenize(query)
    _, ids, mask, segments = preprocessing.pack_tokens(
        list(cache[query]), tokenizer.tokenize(passage), max_seq_length, tokenizer)
    arrays["input_ids"][row], arrays["input_mask"][row] = ids, mask
    arrays["segment_ids"][row] = segments
  return arrays


def write_records(pairs, tokenizer, max_seq_length, path, loss="pointwise"):
  """Writes the training rows as tf.train.Examples (a temporary name, renamed); returns
  (records, list size C: 1 for pointwise). pointwise: a record per pair, input_ids, input_mask,
  segment_ids [S] and label []. listwise: a record per query (group_by_query), its candidates
  [C*S] (C = the longest list; shorter ones padded with [CLS] [SEP] candidates whose
  candidate_mask is 0), labels [C], candidate_mask [C]."""
  arrays = encode_pairs([p.query for p in pairs], [p.passage for p in pairs], tokenizer,
                        max_seq_length)
  index = {id(p): i for i, p in enumerate(pairs)}
  with input_pipeline.RecordWriter(path) as writer:
    if loss == "pointwise":
      size = 1
      for i, pair in enumerate(pairs):
        writer.write({**{k: v[i] for k, v in arrays.items()}, "label": [pair.label]})
      records = len(pairs)
    else:
      groups = group_by_query(pairs)
      size = max(len(group) for group in groups)
      filler = np.zeros((3, max_seq_length), np.int64)
      filler[0, :2] = tokenizer.convert_tokens_to_ids(["[CLS]", "[SEP]"])
      filler[1, :2] = 1
      for group in groups:
        rows = [index[id(p)] for p in group]
        padding = size - len(rows)
        features = {k: np.concatenate([arrays[k][rows]] + [filler[None, j]] * padding)
                    for j, k in enumerate(_FEATURES)}
        features["labels"] = [p.label for p in group] + [0] * padding
        features["candidate_mask"] = [1] * len(rows) + [0] * padding
        writer.write(features)
      records = len(groups)
  return records, size


def decode_fn(seq_length, loss="pointwise", list_size=1):
  """Serialized tf.train.Example -> pointwise: input_ids, input_mask, segment_ids int32 [S],
  label int32 []; listwise: those [C*S], labels and candidate_mask int32 [C]."""
  if loss == "pointwise":
    types = {k: tf.io.FixedLenFeature([seq_length], tf.int64) for k in _FEATURES}
    types["label"] = tf.io.FixedLenFeature([], tf.int64)
  else:
    types = {k: tf.io.FixedLenFeature([list_size * seq_length], tf.int64) for k in _FEATURES}
    for k in ("labels", "candidate_mask"):
      types[k] = tf.io.FixedLenFeature([list_size], tf.int64)

  def decode(record):
    return {k: tf.cast(v, tf.int32) for k, v in tf.io.parse_single_example(record, types).items()}

  return decode


# ----------------------------------------------------------------------------
# 4. The loss

class RerankTask(training.Task):
  """The cross-encoder's loss over a batch, normalised by the GLOBAL count of its units (pairs
  for pointwise, queries for listwise), so that the step's loss is the mean over the global
  batch whatever the replicas and accumulation.
    pointwise: the batch's pairs [b, S] -> logits [b, 1]; losses.pointwise_loss (binary
      cross-entropy from logits, labels 0/1).
    listwise: the batch's queries, C candidates each, [b*C, S] -> logits [b, C];
      losses.listwise_loss (softmax cross-entropy, the positives as the target, padding
      candidates masked out)."""

  examples_name = "pairs"

  def __init__(self, seq_length, loss="pointwise", list_size=1):
    if loss not in LOSSES:
      raise ValueError(f"loss {loss!r} is not one of {', '.join(LOSSES)}")
    self.seq_length, self.loss_name, self.list_size = seq_length, loss, int(list_size)
    if loss == "listwise":
      self.examples_name = "queries"

  def model_inputs(self, batch):
    return {k: tf.reshape(batch[k], [-1, self.seq_length]) for k in _FEATURES}

  def denominators(self, batch):
    return {"units": tf.cast(tf.shape(batch["input_ids"])[0], tf.float32)}

  def loss(self, outputs, batch, denominators):
    b = tf.cast(tf.shape(batch["input_ids"])[0], tf.float32)
    if self.loss_name == "pointwise":
      loss = losses.pointwise_loss(outputs, batch["label"])
    else:
      logits = tf.reshape(tf.cast(outputs, tf.float32), [-1, self.list_size])
      loss = losses.listwise_loss(logits, batch["labels"], batch["candidate_mask"])
    loss = loss * b / denominators["units"]
    return loss, {"loss": loss}


# ----------------------------------------------------------------------------
# 5. Reranking

def score_fn(model, strategy, use_xla=False):
  """inference.make_inference_fn of the model's relevance logits float32 [b, 1]."""

  def forward(batch):
    return model({k: batch[k] for k in _FEATURES}, training=False)

  return inference.make_inference_fn(strategy, forward, use_xla)


def score_pairs(infer, arrays, batch_size, trim=True):
  """The logits float32 [N] of encode_pairs' arrays, batch_size pairs a step, longest first
  (embeddings.embed's batching: any per-row output), back in order."""
  if not len(arrays["input_ids"]):
    return np.zeros([0], np.float32)
  return np.reshape(embeddings.embed(infer, arrays, batch_size, trim), [-1])


def rerank(candidates, queries, corpus, score):
  """{query_id: {doc_id: score}} of every candidate: candidates {query_id: [doc_id]}, queries
  {query_id: text}, corpus {doc_id: text}; score(query texts, passage texts) -> float [N]
  (all pairs at once: the caller batches)."""
  keys = [(q, d) for q in candidates for d in candidates[q]]
  scores = score([queries[q] for q, _ in keys], [corpus[d] for _, d in keys])
  run = {q: {} for q in candidates}
  for (q, d), s in zip(keys, np.reshape(scores, [-1])):
    run[q][d] = float(s)
  return run


def rerank_file(score, run_path, corpus_path, queries_path, output_path, top_k=TOP_K,
                batch_size=32):
  """predict.py --rerank_run: the first top_k candidates of each query of the TREC run
  `run_path` scored by score(query texts, passage texts) -> floats (batch_size pairs a
  call), written as a TREC run to output_path (atomically). The corpus and queries are BEIR
  JSON lines (embedding_data's readers). Returns {"queries", "pairs"}."""
  corpus = embedding_data.read_corpus(corpus_path)
  queries = embedding_data.read_queries(queries_path)
  candidates = read_candidates(run_path, queries, corpus, top_k)

  def batched(texts_a, texts_b):
    found, progress = [], progress_lib.Progress(len(texts_a), live=False)
    for start in range(0, len(texts_a), batch_size):
      found.extend(score(texts_a[start:start + batch_size], texts_b[start:start + batch_size]))
      progress.show(f"rerank: {len(found):,} of {len(texts_a):,} pairs, "
                    f"{progress.rate(len(found)):.1f} pairs/s, ETA {progress.eta(len(found))}")
    return np.asarray(found, np.float64)

  run = rerank(candidates, queries, corpus, batched)
  retrieval_metrics.write_run(output_path, run, RUN_TAG)
  return {"queries": len(run), "pairs": sum(len(d) for d in run.values())}
