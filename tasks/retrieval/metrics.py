"""Retrieval scores as trec_eval computes them (and so pytrec_eval and BEIR), under BEIR's names;
the TREC qrels and run files, and BEIR's qrels TSV.

  qrels = read_qrels("test.tsv")     # {qid: {docid: int relevance}}
  run = read_run("run.trec")         # {qid: {docid: float score}}
  evaluate(qrels, run)               # {"NDCG@10": .., "MAP@100": .., "Recall@100": .., ...}

The conventions (trec_eval's, checked against pytrec_eval in tests/test_evaluate_retrieval.py):
- A query's ranking: score descending, ties broken by docid descending (byte order). trec_eval
  keeps scores as 32-bit floats, so two scores equal in float32 are a tie; the rank column of a
  run file is ignored.
- Relevant: relevance > 0. A document of the run missing from the qrels is not relevant.
- Averages run over the qrels' queries with at least one relevant document; such a query missing
  from the run (or with no documents) scores 0 and counts. A query of the run without qrels, or
  whose qrels hold no relevant document, is ignored.
- NDCG@k (trec_eval's ndcg_cut): gain = relevance (0 below 1), discount log2(rank + 1), the ideal
  ranking from the qrels, both cut at k. MAP@k (map_cut): the precisions at the relevant
  documents ranked within k, summed and divided by the query's number of relevant documents.
  Recall@k: relevant within k / relevant. P@k: relevant within k / k (also when fewer than k
  are ranked). MRR@k: 1 / rank of the first relevant document if within k, else 0 (trec_eval's
  recip_rank cut at k, as BEIR computes it). Accuracy@k: 1 when a relevant document is within
  k (trec_eval's success).
"""

import heapq
import math

import numpy as np

from bert_keras.utils import file_io
from bert_keras.utils import text_lines

MEASURES = ("NDCG", "MAP", "Recall", "P", "MRR", "Accuracy")
DEFAULT_K_VALUES = (1, 3, 5, 10, 100)
BEIR_QRELS_HEADER = ("query-id", "corpus-id", "score")


def _integer(text):
  try:
    return int(text)
  except ValueError:
    return None


def read_qrels(path):
  """{qid: {docid: int relevance}} of a TREC qrels file (`qid iteration docid relevance`,
  whitespace-separated) or a BEIR qrels TSV (the header `query-id corpus-id score`, then three
  tab-separated fields a line), told apart by the first line. Blank lines are skipped. A line
  with other fields, a relevance that is not an integer or a (qid, docid) given twice is a
  ValueError naming the file and line."""
  qrels = {}
  beir = None
  for number, line in text_lines.numbered_lines(path):
    if beir is None:
      beir = tuple(x.strip() for x in line.split("\t")) == BEIR_QRELS_HEADER
      if beir:
        continue
    if not line.strip():
      continue
    if beir:
      fields = line.split("\t")
      if len(fields) != 3:
        raise ValueError(f"{path} line {number}: {line!r} is not `query-id<TAB>corpus-id<TAB>"
                         f"score` (a BEIR qrels TSV: its first line is that header)")
      qid, docid, relevance = fields
    else:
      fields = line.split()
      if len(fields) != 4:
        raise ValueError(f"{path} line {number}: {line!r} is not `qid iteration docid "
                         f"relevance` (a TREC qrels line; a BEIR qrels TSV starts with the "
                         f"header query-id<TAB>corpus-id<TAB>score)")
      qid, _, docid, relevance = fields
    value = _integer(relevance)
    if value is None:
      raise ValueError(f"{path} line {number}: {line!r}: the relevance {relevance!r} is not "
                       f"an integer")
    if not qid or not docid:
      raise ValueError(f"{path} line {number}: {line!r}: an empty query or document id")
    judged = qrels.setdefault(qid, {})
    if docid in judged:
      raise ValueError(f"{path} line {number}: document {docid!r} of query {qid!r} is judged "
                       f"a second time")
    judged[docid] = value
  return qrels


# The longest line of a run or qrels file read (a run line is ids and two numbers: far less).
MAX_LINE_BYTES = 1 << 16


def read_run(path, queries=None, top_k=None, skipped=None):
  """{qid: {docid: float score}} of a TREC run file (`qid Q0 docid rank score tag`,
  whitespace-separated; the Q0 and rank fields are not used, as by trec_eval). Blank lines
  are skipped. A line with other fields, a rank that is not an integer, a score that is not a
  number (or NaN), a (qid, docid) given twice or a line over MAX_LINE_BYTES is a ValueError
  naming the file and line.

  Memory stays bounded by what is kept: queries (a set, or None: all) keeps only those
  queries' documents (the others' lines are checked and dropped, their ids added to the set
  `skipped` when given); top_k keeps each query's top_k documents in trec_eval's order
  (rank_documents: all a measure at k <= top_k reads), a document given twice being found
  among those kept."""
  run, kept = {}, {}
  for number, line in text_lines.numbered_lines(path, max_line_bytes=MAX_LINE_BYTES):
    fields = line.split()
    if not fields:
      continue
    if len(fields) != 6:
      raise ValueError(f"{path} line {number}: {line!r} is not `qid Q0 docid rank score tag` "
                       f"(a TREC run line has 6 fields, this one {len(fields)})")
    qid, _, docid, rank, score, _ = fields
    if _integer(rank) is None:
      raise ValueError(f"{path} line {number}: {line!r}: the rank {rank!r} is not an integer")
    try:
      value = float(score)
    except ValueError:
      value = math.nan
    if math.isnan(value):
      raise ValueError(f"{path} line {number}: {line!r}: the score {score!r} is not a number")
    if queries is not None and qid not in queries:
      if skipped is not None:
        skipped.add(qid)
      continue
    ranked = run.setdefault(qid, {})
    if docid in ranked:
      raise ValueError(f"{path} line {number}: document {docid!r} of query {qid!r} is ranked "
                       f"a second time")
    ranked[docid] = value
    if top_k is not None:  # (a min-heap of the kept: trec_eval's order, float32 scores)
      heap = kept.setdefault(qid, [])
      heapq.heappush(heap, (float(np.float32(value)), docid))
      if len(heap) > top_k:
        del ranked[heapq.heappop(heap)[1]]
  return run


def rank_documents(scores):
  """The docids of {docid: score} in trec_eval's order: score descending (compared as float32,
  as trec_eval keeps them), then docid descending. A NaN score is a ValueError."""
  docids = list(scores)
  values = np.asarray([scores[d] for d in docids], dtype=np.float64)
  if np.isnan(values).any():
    bad = docids[int(np.flatnonzero(np.isnan(values))[0])]
    raise ValueError(f"document {bad!r} has the score NaN")
  with np.errstate(over="ignore"):  # beyond float32's range: +-inf, as in trec_eval
    single = values.astype(np.float32).tolist()
  order = sorted(zip(single, docids), reverse=True)
  return [docid for _, docid in order]


def _check_id(kind, text):
  if not text or text != "".join(text.split()):
    raise ValueError(f"the {kind} {text!r} is empty or holds whitespace: a TREC run cannot "
                     f"hold it")


def write_run(path, run, tag):
  """Writes {qid: {docid: score}} as a TREC run (`qid Q0 docid rank score tag`), queries in
  sorted order, each ranked as rank_documents (trec_eval's order, so the rank column agrees
  with what trec_eval reads back); scores written with repr (read back exactly). Written to a
  temporary name and renamed (file_io.write_text_atomic). An id or tag with whitespace, or a
  NaN score, is a ValueError."""
  _check_id("run tag", tag)
  parts = []
  for qid in sorted(run):
    _check_id("query id", qid)
    scores = run[qid]
    try:
      ranked = rank_documents(scores)
    except ValueError as e:
      raise ValueError(f"query {qid!r}: {e}") from None
    for rank, docid in enumerate(ranked, 1):
      _check_id("document id", docid)
      parts.append(f"{qid} Q0 {docid} {rank} {float(scores[docid])!r} {tag}\n")
  file_io.write_text_atomic(path, "".join(parts))


def check_metric(metric, k_values, also=()):
  """--metric (a measure at a cut-off, e.g. NDCG@10; or one of `also`): a ValueError naming
  the flag unless it is one these k_values give."""
  measure, _, cut = metric.partition("@")
  if metric in also or (measure in MEASURES and cut in map(str, k_values)):
    return
  other = f", or one of {', '.join(also)}" if also else ""
  raise ValueError(f"--metric={metric}: a measure ({', '.join(MEASURES)}) at a cut-off in "
                   f"{', '.join(map(str, k_values))}, e.g. NDCG@10{other}")


def _check_k_values(k_values):
  k_values = tuple(k_values)
  if not k_values or any(isinstance(k, bool) or not isinstance(k, (int, np.integer)) or k < 1
                         for k in k_values):
    raise ValueError(f"k_values {k_values!r}: one or more positive integers")
  return tuple(sorted(set(int(k) for k in k_values)))


def scored_queries(qrels):
  """The qids of the qrels that have a relevant document (relevance > 0): those averaged over."""
  return [qid for qid, judged in qrels.items() if any(r > 0 for r in judged.values())]


def query_measures(judged, scores, k_values=DEFAULT_K_VALUES):
  """{measure: value} of one query: `judged` {docid: relevance} (with a relevant document),
  `scores` {docid: score} (may be empty)."""
  k_values = _check_k_values(k_values)
  relevant = sorted((r for r in judged.values() if r > 0), reverse=True)
  if not relevant:
    raise ValueError("the query has no relevant document (relevance > 0) in the qrels")
  num_relevant = len(relevant)
  ideal = np.asarray(relevant[:k_values[-1]], dtype=np.float64)  # the ideal gains
  ranked = rank_documents(scores)[:k_values[-1]]
  n = len(ranked)
  relevance = np.asarray([judged.get(d, 0) for d in ranked], dtype=np.float64)  # [n]
  hit = relevance > 0
  discount = 1.0 / np.log2(np.arange(2, max(n, len(ideal)) + 2, dtype=np.float64))
  dcg = np.cumsum(np.where(hit, relevance, 0.0) * discount[:n])  # [n]
  idcg = np.cumsum(ideal * discount[:len(ideal)])  # [len(ideal)]
  hits = np.cumsum(hit)  # [n]
  precision_sum = np.cumsum(np.where(hit, hits / np.arange(1, n + 1), 0.0))  # [n]
  first = int(np.argmax(hit)) + 1 if hit.any() else None

  def at(cumulative, k):
    """The cumulative value over the first k positions (0 when none)."""
    return float(cumulative[min(k, len(cumulative)) - 1]) if len(cumulative) else 0.0

  result = {}
  for k in k_values:
    found = at(hits, k)
    result[f"NDCG@{k}"] = at(dcg, k) / at(idcg, k)
    result[f"MAP@{k}"] = at(precision_sum, k) / num_relevant
    result[f"Recall@{k}"] = found / num_relevant
    result[f"P@{k}"] = found / k
    result[f"MRR@{k}"] = 1.0 / first if first is not None and first <= k else 0.0
    result[f"Accuracy@{k}"] = 1.0 if found > 0 else 0.0
  return result


def measure_names(k_values=DEFAULT_K_VALUES):
  """The keys of evaluate(), in its order: measure by measure, k ascending."""
  k_values = _check_k_values(k_values)
  return [f"{measure}@{k}" for measure in MEASURES for k in k_values]


def evaluate_per_query(qrels, run, k_values=DEFAULT_K_VALUES):
  """{qid: {measure: value}} of every query that evaluate() averages over (scored_queries)."""
  k_values = _check_k_values(k_values)
  per_query = {}
  for qid in scored_queries(qrels):
    try:
      per_query[qid] = query_measures(qrels[qid], run.get(qid, {}), k_values)
    except ValueError as e:
      raise ValueError(f"query {qid!r}: {e}") from None
  return per_query


def evaluate(qrels, run, k_values=DEFAULT_K_VALUES):
  """{measure: mean over the qrels' queries with a relevant document}, measures named as BEIR's
  (NDCG@k, MAP@k, Recall@k, P@k, MRR@k, Accuracy@k) in measure_names order. `qrels` {qid:
  {docid: int relevance}}, `run` {qid: {docid: score}}. Qrels without any relevant document
  are a ValueError."""
  names = measure_names(k_values)
  per_query = evaluate_per_query(qrels, run, k_values)
  if not per_query:
    raise ValueError("the qrels have no query with a relevant document (relevance > 0)")
  return {name: math.fsum(values[name] for values in per_query.values()) / len(per_query)
          for name in names}


def query_counts(qrels, run):
  """{"scored": queries averaged over, "not_in_run": those of them the run lacks or ranks no
  document for (scored 0), "ignored": the run's queries not scored (no qrels, or none
  relevant)}."""
  scored = set(scored_queries(qrels))
  return {"scored": len(scored),
          "not_in_run": sum(1 for qid in scored if not run.get(qid)),
          "ignored": sum(1 for qid in run if qid not in scored)}


def format_table(measures, k_values=DEFAULT_K_VALUES):
  """evaluate()'s measures as a readable table: a row per measure, a column per k."""
  k_values = _check_k_values(k_values)
  lines = ["%-9s" % "" + "".join("%9s" % f"@{k}" for k in k_values)]
  for measure in MEASURES:
    lines.append("%-9s" % measure + "".join("%9.5f" % measures[f"{measure}@{k}"]
                                             for k in k_values))
  return "\n".join(lines) + "\n"
