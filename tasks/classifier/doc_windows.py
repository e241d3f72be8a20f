"""run_classifier --doc_stride: a text_a longer than max_seq_length split into overlapping
windows (tasks/windows.py's doc_spans, the rule of SQuAD and NER), and the windows' logits
pooled back into one result per document (--window_pooling=mean|max).

A document that fits gets one window equal to what truncation packs (nothing is cut), so its
logits are the ones it gets without windows. Sentence pairs: the windows run over text_a,
text_b is kept whole in each; a text_b that leaves no room for text_a is an error.
"""

import numpy as np

from bert_keras import model_files
from bert_keras.tasks import windows as windows_lib

POOLINGS = ("mean", "max")


def check_stride(doc_stride, max_seq_length, window_pooling="mean"):
  """The flags, checked before anything is built: a ValueError naming them when doc_stride is
  negative, not smaller than max_seq_length - 2 ([CLS] and [SEP]: windows would skip word
  pieces; model_files.stride_problem, the rule task.json is read with too), or
  window_pooling unknown."""
  if doc_stride < 0:
    raise ValueError(f"--doc_stride={doc_stride}: must be >= 0 (0: truncate, as the original)")
  problem = model_files.stride_problem(doc_stride, max_seq_length)
  if problem:
    raise ValueError(f"--doc_stride={doc_stride}: {problem}")
  if window_pooling not in POOLINGS:
    raise ValueError(f"--window_pooling={window_pooling}: one of {', '.join(POOLINGS)}")


def windows(tokens_a, tokens_b, max_seq_length, doc_stride, name="an example"):
  """text_a's word pieces (and text_b's, or None) -> list of text_a windows (lists of pieces),
  each packable with tokens_b into max_seq_length: [tokens_a] when the whole fits, else
  windows of max_seq_length - 2 (pairs: - 3 - len(tokens_b)) pieces starting doc_stride
  apart, the last reaching the end. A text_b that leaves no room is a ValueError naming
  `name` (e.g. "dev example dev-7")."""
  special = 3 if tokens_b else 2
  room = max_seq_length - special - (len(tokens_b) if tokens_b else 0)
  if room < 1:
    raise ValueError(f"--doc_stride: {name} has a text_b of {len(tokens_b)} word pieces, "
                     f"which leaves no room for text_a in --max_seq_length={max_seq_length}")
  if len(tokens_a) <= room:
    return [tokens_a]
  return [tokens_a[start:start + length]
          for start, length in windows_lib.doc_spans(len(tokens_a), room, doc_stride)]


def window_features(examples, tokenizer, max_seq_length, doc_stride, documents,
                    make_features):
  """Yields make_features(record index, example, window of text_a's pieces, text_b's pieces
  or None) for every window (windows above) of every example in order, appending the
  example's index to `documents` (a list) for each."""
  for index, example in enumerate(examples):
    tokens_a = tokenizer.tokenize(example.text_a)
    tokens_b = tokenizer.tokenize(example.text_b) if example.text_b else None
    for window in windows(tokens_a, tokens_b, max_seq_length, doc_stride,
                          f"example {example.guid}"):
      documents.append(index)
      yield make_features(len(documents) - 1, example, list(window), tokens_b)


def pool(logits, documents, num_documents, how="mean"):
  """The windows' logits float [W, C] and their documents int [W] (each in [0,
  num_documents), every document at least one window) -> float32 [num_documents, C]: the
  mean (float64 sum / count) or the max of each document's windows."""
  logits = np.asarray(logits, np.float64)
  documents = np.asarray(documents, np.int64)
  counts = np.bincount(documents, minlength=num_documents)
  if (counts == 0).any():
    raise ValueError(f"document {int(np.argmin(counts))} has no window")
  if how == "mean":
    sums = np.zeros([num_documents, logits.shape[1]])
    np.add.at(sums, documents, logits)
    return (sums / counts[:, None]).astype(np.float32)
  if how == "max":
    result = np.full([num_documents, logits.shape[1]], -np.inf)
    np.maximum.at(result, documents, logits)
    return result.astype(np.float32)
  raise ValueError(f"window pooling {how!r}: one of {', '.join(POOLINGS)}")


def first_windows(documents):
  """int [W] (non-decreasing document of each window) -> int [N]: each document's first
  window."""
  documents = np.asarray(documents, np.int64)
  return np.flatnonzero(np.r_[True, documents[1:] != documents[:-1]])
