"""run_embeddings' files: training pairs, a BEIR retrieval set, texts to model inputs.

Read top to bottom:
  1. read_pairs        train.tsv (a header naming `anchor`, `positive` and optional `negative...`
                       columns) or train.jsonl (those keys; a negative key may hold a list) ->
                       Pair(anchor, positive, negatives, line); every row has the same number of
                       negatives; a missing or empty side is a ValueError naming file and line
  2. BEIR              read_corpus (corpus.jsonl: `_id`, `title`, `text`; the text embedded is
                       (title + " " + text).strip(), as BEIR's SentenceBERT.encode_corpus),
                       read_queries (queries.jsonl: `_id`, `text`), read_qrels (qrels/*.tsv
                       through tasks/retrieval/metrics.py, then every id checked against the
                       corpus and queries, an unknown one naming its line)
  3. STS               read_sts (sts_dev.tsv / sts_test.tsv: a header naming `sentence1`,
                       `sentence2` and `score`) -> (texts_a, texts_b, scores float64 [N])
  4. inputs            TextIds (one integer per distinct text, for duplicate masking),
                       encode_texts: texts -> input_ids, input_mask int32 [N, S] ([CLS] text
                       [SEP], the text cut to S - 2 pieces)
"""

import csv
import dataclasses
import io
import os

import numpy as np
import tensorflow as tf

from bert_keras import preprocessing
from bert_keras.tasks.retrieval import metrics as retrieval_metrics
from bert_keras.utils import json_lines
from bert_keras.utils import text_lines as text_lines_lib

ANCHOR, POSITIVE, NEGATIVE = "anchor", "positive", "negative"


# ----------------------------------------------------------------------------
# 1. Training pairs

@dataclasses.dataclass
class Pair:
  """One training row: anchor, positive (str), negatives (list of str, maybe empty), the
  1-based line of `path` it was read from."""
  anchor: str
  positive: str
  negatives: list
  line: int
  path: str


def text_lines(path):
  """(1-based line number, text of the line without its end) of a UTF-8 file
  (utils/text_lines)."""
  return list(text_lines_lib.numbered_lines(path))


def json_rows(path):
  """(line number, dict) of a JSON-lines file; blank lines skipped; a line that is not a JSON
  object is a ValueError naming it (utils/json_lines, predict.py's rule)."""
  return json_lines.read_objects(path)


def required_text(path, number, name, value):
  """A non-empty string `value` of column `name`, else a ValueError naming file and line."""
  if value is None or (isinstance(value, str) and not value.strip()):
    raise ValueError(f"{path} line {number}: the {name} is missing or empty")
  if not isinstance(value, str):
    raise ValueError(f"{path} line {number}: the {name} is not a string ({value!r:.60})")
  return value


def _tsv_pairs(path):
  lines = text_lines(path)
  if not lines:
    raise ValueError(f"{path}: empty (expected a header naming the columns {ANCHOR} and "
                     f"{POSITIVE})")
  header = [name.strip() for name in lines[0][1].split("\t")]
  for name in (ANCHOR, POSITIVE):
    if name not in header:
      raise ValueError(f"{path} line 1: the header {header} names no `{name}` column")
  anchor, positive = header.index(ANCHOR), header.index(POSITIVE)
  negatives = [i for i, name in enumerate(header) if name.startswith(NEGATIVE)]
  text = "\n".join(line for _, line in lines[1:])
  reader = csv.reader(io.StringIO(text), delimiter="\t", quotechar=None)
  numbers = [number for number, _ in lines[1:]]
  for row, number in zip(reader, numbers):
    if not any(field.strip() for field in row):
      continue
    get = lambda i: row[i] if i < len(row) else None  # noqa: E731
    yield Pair(required_text(path, number, ANCHOR, get(anchor)),
               required_text(path, number, POSITIVE, get(positive)),
               [required_text(path, number, header[i], get(i)) for i in negatives], number, path)


def _jsonl_pairs(path):
  for number, row in json_rows(path):
    negatives = []
    for key in sorted(k for k in row if k.startswith(NEGATIVE)):
      values = row[key] if isinstance(row[key], list) else [row[key]]
      negatives += [required_text(path, number, key, v) for v in values]
    yield Pair(required_text(path, number, ANCHOR, row.get(ANCHOR)),
               required_text(path, number, POSITIVE, row.get(POSITIVE)), negatives, number, path)


def read_pairs(path):
  """The training rows (list of Pair) of a .tsv or .jsonl file (see the module docstring).
  Every row must have as many negatives as the first (one tensor shape); ValueErrors name the
  file and line."""
  pairs = list(_jsonl_pairs(path) if path.endswith(".jsonl") else _tsv_pairs(path))
  if not pairs:
    raise ValueError(f"{path}: no training rows")
  for pair in pairs:
    if len(pair.negatives) != len(pairs[0].negatives):
      raise ValueError(f"{path} line {pair.line}: {len(pair.negatives)} negatives where line "
                       f"{pairs[0].line} has {len(pairs[0].negatives)} (every row needs the "
                       "same number)")
  return pairs


# ----------------------------------------------------------------------------
# 2. BEIR retrieval sets

def _ids_and_texts(path, text_of):
  """({id: text}, {id: line}) of a BEIR JSON-lines file; a missing or repeated `_id`, or one
  holding whitespace, is a ValueError naming the line."""
  texts, lines = {}, {}
  for number, row in json_rows(path):
    doc_id = row.get("_id")
    if doc_id is None or str(doc_id) == "":
      raise ValueError(f"{path} line {number}: no `_id`")
    doc_id = str(doc_id)
    if any(character.isspace() for character in doc_id):  # (found here, before any embedding)
      raise ValueError(f"{path} line {number}: the id {doc_id!r} holds whitespace: a TREC run "
                       "(the runs written and read) cannot hold it")
    if doc_id in texts:
      raise ValueError(f"{path} line {number}: the id {doc_id!r} is given a second time "
                       f"(first on line {lines[doc_id]})")
    texts[doc_id], lines[doc_id] = text_of(path, number, row), number
  if not texts:
    raise ValueError(f"{path}: no entries")
  return texts


def _document_text(path, number, row):
  """BEIR's text of a corpus entry: (title + " " + text).strip()."""
  title, text = row.get("title") or "", row.get("text")
  if not isinstance(text, str) or not isinstance(title, str):
    raise ValueError(f"{path} line {number}: `text` (and `title`) must be strings")
  return (title + " " + text).strip() if title else text.strip()


def _query_text(path, number, row):
  return required_text(path, number, "text", row.get("text"))


def read_corpus(path):
  """{doc_id: text} of a BEIR corpus.jsonl, in file order."""
  return _ids_and_texts(path, _document_text)


def read_queries(path):
  """{query_id: text} of a BEIR queries.jsonl, in file order."""
  return _ids_and_texts(path, _query_text)


def train_file(data_dir, names):
  """The first of `names` (e.g. train.tsv, train.jsonl) in data_dir, else a ValueError."""
  for name in names:
    path = os.path.join(data_dir, name)
    if tf.io.gfile.exists(path):
      return path
  raise ValueError(f"--data_dir: no {' or '.join(names)} in {data_dir}")


def read_beir(data_dir, qrels_file):
  """(corpus {doc_id: text}, queries {query_id: text}, qrels) of a BEIR set in data_dir with
  its qrels file (a path under it, e.g. qrels/dev.tsv); a missing file is a ValueError naming
  it."""
  paths = [os.path.join(data_dir, name) for name in ("corpus.jsonl", "queries.jsonl",
                                                     qrels_file)]
  for path in paths:
    if not tf.io.gfile.exists(path):
      raise ValueError(f"--data_dir: no such file {path}")
  corpus, queries = read_corpus(paths[0]), read_queries(paths[1])
  return corpus, queries, read_qrels(paths[2], queries, corpus)


def read_qrels(path, queries, corpus):
  """{query_id: {doc_id: relevance}} of a qrels file (retrieval_metrics.read_qrels: BEIR's
  TSV or TREC's format); a query id not in `queries` or a document id not in `corpus` is a
  ValueError naming the line."""
  qrels = retrieval_metrics.read_qrels(path)
  unknown = [(q, d) for q, judged in qrels.items() for d in judged
             if q not in queries or d not in corpus]
  if unknown:
    for number, line in text_lines(path):
      fields = line.split("\t") if "\t" in line else line.split()
      if len(fields) in (3, 4) and (fields[0], fields[-2]) in unknown:
        query, doc = fields[0], fields[-2]
        what = (f"the query {query!r} is not in queries.jsonl" if query not in queries
                else f"the document {doc!r} is not in corpus.jsonl")
        raise ValueError(f"{path} line {number}: {what}")
  if not qrels:
    raise ValueError(f"{path}: no judgements")
  return qrels


# ----------------------------------------------------------------------------
# 3. STS: sentence pairs with a gold similarity

STS_COLUMNS = ("sentence1", "sentence2", "score")


def read_sts(path):
  """(texts_a, texts_b: lists of str, scores: float64 [N]) of an STS TSV file with a header
  naming STS_COLUMNS (other columns ignored); an empty side, a score that is not a finite
  number or a missing column is a ValueError naming file and line."""
  lines = text_lines(path)
  header = [name.strip() for name in lines[0][1].split("\t")] if lines else []
  for name in STS_COLUMNS:
    if name not in header:
      raise ValueError(f"{path} line 1: the header {header} names no `{name}` column")
  a, b, score = (header.index(name) for name in STS_COLUMNS)
  texts_a, texts_b, scores = [], [], []
  for number, line in lines[1:]:
    row = line.split("\t")
    if not line.strip():
      continue
    get = lambda i: row[i] if i < len(row) else None  # noqa: E731
    texts_a.append(required_text(path, number, "sentence1", get(a)))
    texts_b.append(required_text(path, number, "sentence2", get(b)))
    try:
      value = float(get(score))
    except (TypeError, ValueError):
      value = float("nan")
    if not np.isfinite(value):
      raise ValueError(f"{path} line {number}: the score {get(score)!r} is not a number")
    scores.append(value)
  if not scores:
    raise ValueError(f"{path}: no sentence pairs")
  return texts_a, texts_b, np.array(scores, np.float64)


# ----------------------------------------------------------------------------
# 4. Model inputs

class TextIds:
  """One integer id per distinct text (the same text, the same id): the ids the loss's duplicate
  masking compares. ids(texts) -> int64 [len(texts)]; texts: the distinct texts in id order."""

  def __init__(self):
    self._ids = {}

  def ids(self, texts):
    return np.array([self._ids.setdefault(t, len(self._ids)) for t in texts], np.int64)

  @property
  def texts(self):
    return list(self._ids)


def encode_texts(texts, tokenizer, max_seq_length):
  """{"input_ids", "input_mask"}: int32 [N, max_seq_length] of [CLS] text [SEP] (the text cut
  to its first max_seq_length - 2 pieces, preprocessing.pack_tokens), zero-padded."""
  ids = np.zeros((len(texts), max_seq_length), np.int32)
  mask = np.zeros((len(texts), max_seq_length), np.int32)
  for row, text in enumerate(texts):
    _, input_ids, input_mask, _ = preprocessing.pack_tokens(
        tokenizer.tokenize(text), None, max_seq_length, tokenizer)
    ids[row], mask[row] = input_ids, input_mask
  return {"input_ids": ids, "input_mask": mask}
