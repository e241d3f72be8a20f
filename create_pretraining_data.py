# coding=utf-8
"""Creates masked-LM / next-sentence-prediction TFRecords for BERT pre-training.

Faithful: with the same inputs and flags (and --num_workers=1, the default) every
output file holds the same records, in the same order, with the same features
and values as the original google-research/bert create_pretraining_data.py.
The original's single `random.Random(random_seed)` is kept and every draw it
made is reproduced in the same order (document shuffle, target lengths, a/b
split, random-next choices, truncation, masking, final instance shuffle).

Fast: nothing here holds or builds per-token Python strings after
tokenization. Documents are token ids in one flat integer array; an instance is
four offsets into it plus its masked positions and replacement ids; the
Mersenne-Twister output of the original's generator is read in bulk
(`getrandbits` of many words at once) and the original's `random()`,
`randint()` and `shuffle()` are replayed on those words inline, with exactly
the same results; records are serialized (protobuf wire format, map keys in
sorted order as `SerializeToString(deterministic=True)` writes them) and framed
as TFRecords (CRC32C) with numpy, many records at a time, without importing
TensorFlow (it is imported only for paths with a scheme, such as gs://).

Bounded memory: all instances must exist before the original's final shuffle
decides the order, but they are kept in compact arrays (about 200 bytes per
instance instead of about 4 KB of Python lists of str), and records are
written straight from them in the final order, a batch at a time.

--num_workers N > 1 (not in the original) splits the input into parts at line
boundaries (about --part_size_mb each, a multiple of N parts), gives part p the
seed derived from (--random_seed, p), and writes part p to
`<output_file>-<p:05d>-of-<P:05d>` for every output file: the same statistics
as the original, deterministic for a given N, in parallel processes, and with
memory bounded by the part size rather than the corpus.
"""

import array
import glob
import hashlib
import itertools
import math
import multiprocessing
import os
import random
import sys
import threading
import time

import numpy as np
from absl import logging

from bert_keras import tokenization

FLAGS = None


# --------------------------------------------------------------------------
# Errors
# --------------------------------------------------------------------------

class UsageError(ValueError):
  """Bad input from the user: the message names the flag, file or line at fault."""


# --------------------------------------------------------------------------
# The original's random.Random, replayed on its raw 32-bit words
# --------------------------------------------------------------------------
#
# CPython's Random (Mersenne Twister) gives:
#   random()       = ((w0 >> 5) * 2**26 + (w1 >> 6)) / 2**53     (two words)
#   getrandbits(k) = w >> (32 - k) for 0 < k <= 32                 (one word)
#   randbelow(n)   = getrandbits(n.bit_length()) until < n          (rejection)
#   randint(a, b)  = a + randbelow(b - a + 1)
#   shuffle(x)     = for i = len-1 .. 1: j = randbelow(i + 1); swap x[i], x[j]
# and getrandbits(32 * n) returns the next n words as one little-endian int.
# _self_check() compares this replay with the real thing at first use.

_TWO31 = 1 << 31
_TWO53 = float(1 << 53)


class RandomWords(object):
  """The word stream of a `random.Random`, with its draws replayed exactly.

  Words are read ahead in chunks (one getrandbits call) and kept three ways,
  none of them as Python int objects per word (creating those was a third of
  the run time):
    top8:  bytes, the top 8 bits of each word (w >> 24). randbelow(m) for
           m <= 255 uses only these bits (w >> (32 - k) == top8 >> (8 - k)),
           and so do random() < 0.5 (top bit) and, except when top8 == 204,
           random() < 0.8. Indexing bytes gives cached small ints: fast.
    top16: array('H'), the top 16 bits, for randbelow(m), m < 65536.
    full:  numpy uint32, the words, for everything else.
  Hot loops read these inline at `pos`; call `reserve(n)` first to have at
  least n words after `pos`, and reload the three after any call that may
  refill.
  """

  _CHUNK = 1 << 18

  def __init__(self, rng):
    self.rng = rng
    self.full = np.zeros(0, dtype=np.uint32)
    self.top8 = b""
    self.top16 = array.array("H")
    self.pos = 0
    self._start_state = rng.getstate()
    self._taken = 0

  def sync(self):
    """Leaves `rng` exactly where the draws replayed so far would have left it.

    Words are read ahead in chunks; this rewinds the generator to its initial
    state and advances it by the number of words actually used.
    """
    used = self._taken - (len(self.full) - self.pos)
    self.rng.setstate(self._start_state)
    while used > 0:
      step = min(used, 1 << 20)
      self.rng.getrandbits(32 * step)
      used -= step
    self.__init__(self.rng)

  def reserve(self, n):
    if len(self.full) - self.pos < n:
      count = max(n, self._CHUNK)
      words = np.frombuffer(
          self.rng.getrandbits(32 * count).to_bytes(4 * count, "little"), dtype="<u4")
      self._taken += count
      full = np.concatenate([self.full[self.pos:], words]).astype(np.uint32)
      self.full = full
      self.top8 = (full >> 24).astype(np.uint8).tobytes()
      self.top16 = array.array("H", (full >> 16).astype("<u2").tobytes())
      self.pos = 0

  def random(self):
    self.reserve(2)
    p = self.pos
    self.pos = p + 2
    return ((int(self.full[p]) >> 5) * 67108864.0 +
            (int(self.full[p + 1]) >> 6)) * (1.0 / 9007199254740992.0)

  def randbelow(self, n):
    k = n.bit_length()
    if k <= 16:
      buf, shift = (self.top8, 8 - k) if k <= 8 else (self.top16, 16 - k)
      while True:
        if self.pos >= len(buf):
          self.reserve(1)
          buf = self.top8 if k <= 8 else self.top16
        r = buf[self.pos] >> shift
        self.pos += 1
        if r < n:
          return r
    words = (k + 31) // 32
    while True:
      self.reserve(words)
      chunk = [int(w) for w in self.full[self.pos:self.pos + words]]
      self.pos += words
      if k % 32:
        chunk[-1] >>= 32 - k % 32
      r = 0
      for w in reversed(chunk):
        r = (r << 32) | w
      if r < n:
        return r

  def randint(self, a, b):
    if b < a:
      raise ValueError("empty range for randint(%d, %d)" % (a, b))
    return a + self.randbelow(b - a + 1)

  def shuffle(self, x):
    for i in range(len(x) - 1, 0, -1):
      j = self.randbelow(i + 1)
      x[i], x[j] = x[j], x[i]

  def permutation(self, n):
    """The order `random.shuffle` gives to list(range(n)), as an array('q')."""
    order = array.array("q", range(n))
    i = n - 1
    while i > 0:
      m = i + 1
      k = m.bit_length()
      if k > 32:
        j = self.randbelow(m)
        order[i], order[j] = order[j], order[i]
        i -= 1
        continue
      # Steps i down to the next power of two share k: replay them from a list.
      low = max(1, (1 << (k - 1)) - 1)
      self.reserve(4 * (i - low + 1) + 4096)
      words = self.full[self.pos:].tolist() if k > 16 else (
          self.top16 if k > 8 else self.top8)
      base = 0 if k > 16 else self.pos
      p = base
      shift = (32 if k > 16 else 16 if k > 8 else 8) - k
      while i >= low:
        limit = (i + 1) << shift
        w = words[p]
        p += 1
        while w >= limit:
          w = words[p]
          p += 1
        j = w >> shift
        order[i], order[j] = order[j], order[i]
        i -= 1
      self.pos += p - base
    return order


_self_checked = False


def _self_check():
  """Verifies the replay against this Python's random.Random (once per process)."""
  global _self_checked
  if _self_checked:
    return
  real = random.Random(20181031)
  ours = RandomWords(random.Random(20181031))
  for n in (1, 2, 3, 5, 7, 64, 100, 127, 128, 129, 30522, 2**31 - 1, 2**32, 2**40 + 7):
    for _ in range(3):
      if real.random() != ours.random() or real.randint(0, n - 1) != ours.randint(0, n - 1):
        raise RuntimeError("this Python's random.Random differs from the replay in "
                           "create_pretraining_data.py; please report it")
  x, y = list(range(300)), list(range(300))
  real.shuffle(x)
  ours.shuffle(y)
  if x != y or list(ours.permutation(1000)) != _real_perm(real, 1000):
    raise RuntimeError("this Python's random.shuffle differs from the replay in "
                       "create_pretraining_data.py; please report it")
  _self_checked = True


def _real_perm(rng, n):
  x = list(range(n))
  rng.shuffle(x)
  return x


# --------------------------------------------------------------------------
# The original's TrainingInstance (for the API and tests)
# --------------------------------------------------------------------------

class TrainingInstance(object):
  """A single training instance (sentence pair), as in the original."""

  def __init__(self, tokens, segment_ids, masked_lm_positions, masked_lm_labels,
               is_random_next):
    self.tokens = tokens
    self.segment_ids = segment_ids
    self.is_random_next = is_random_next
    self.masked_lm_positions = masked_lm_positions
    self.masked_lm_labels = masked_lm_labels

  def __str__(self):
    s = "tokens: %s\n" % " ".join(tokenization.printable_text(x) for x in self.tokens)
    s += "segment_ids: %s\n" % " ".join(str(x) for x in self.segment_ids)
    s += "is_random_next: %s\n" % self.is_random_next
    s += "masked_lm_positions: %s\n" % " ".join(str(x) for x in self.masked_lm_positions)
    s += "masked_lm_labels: %s\n" % " ".join(
        tokenization.printable_text(x) for x in self.masked_lm_labels)
    return s + "\n"

  def __repr__(self):
    return self.__str__()


# --------------------------------------------------------------------------
# Files (local with open(), anything with a scheme through tf.io.gfile)
# --------------------------------------------------------------------------

def _is_remote(path):
  return "://" in path


def _gfile():
  import tensorflow as tf  # pylint: disable=g-import-not-at-top  (remote paths only)
  return tf.io.gfile


def expand_input_patterns(input_file):
  """Expands a comma-separated list of globs like the original's tf.gfile.Glob.

  Local patterns use Python's glob, which lists in directory order like
  TensorFlow's (unsorted; hidden files included, as TensorFlow does).
  """
  files = []
  for pattern in input_file.split(","):
    if _is_remote(pattern):
      files.extend(_gfile().glob(pattern))
    elif pattern:
      try:
        matches = glob.glob(pattern, include_hidden=True)
      except TypeError:  # Python < 3.11: add the hidden files a leading wildcard skips
        matches = glob.glob(pattern)
        if os.path.basename(pattern)[:1] in ("*", "?", "["):
          matches += glob.glob(os.path.join(os.path.dirname(pattern),
                                            "." + os.path.basename(pattern)))
      files.extend(matches)
  return files


def _file_size(path):
  if _is_remote(path):
    return _gfile().stat(path).length
  return os.path.getsize(path)


def _open_read(path):
  if _is_remote(path):
    return _gfile().GFile(path, "rb")
  return open(path, "rb")


def _open_write(path):
  if _is_remote(path):
    return _gfile().GFile(path, "wb")
  return open(path, "wb")


def _rename(src, dst):
  if _is_remote(src):
    _gfile().rename(src, dst, overwrite=True)
  else:
    os.replace(src, dst)


def _remove_quietly(path):
  try:
    if _is_remote(path):
      _gfile().remove(path)
    else:
      os.remove(path)
  except Exception:  # pylint: disable=broad-except
    pass


def _temp_name(path, tag=None):
  """Where `path` is written until complete: .<name>.tmp-<pid> beside it."""
  head, tail = path.rsplit("/", 1) if "/" in path else ("", path)
  name = ".%s.tmp-%s" % (tail, tag or os.getpid())
  return head + "/" + name if head else name


# --------------------------------------------------------------------------
# Reading: documents as token ids in flat arrays
# --------------------------------------------------------------------------

class Corpus(object):
  """Documents of token ids, compactly.

  tokens: [num_tokens] int array, every segment (non-empty line) of every
    non-empty document concatenated, in file order.
  seg_start: [num_segments + 1] int64, segment s is tokens[seg_start[s]:seg_start[s+1]].
  doc_start: [num_documents + 1] int64, document d is segments doc_start[d] .. doc_start[d+1]-1.
  """

  def __init__(self, tokens, seg_start, doc_start, lines=0, nbytes=0):
    self.tokens = tokens
    self.seg_start = seg_start
    self.doc_start = doc_start
    self.lines = lines
    self.nbytes = nbytes

  @property
  def num_documents(self):
    return len(self.doc_start) - 1


def _iter_line_blocks(path, start=0, end=None, block_bytes=4 << 20):
  """Yields (list of str lines, bytes consumed) of path[start:end], as the original reads them.

  The original reads with tf.gfile.GFile(path, "r").readline(): lines end at
  "\\n" only, every "\\r" is dropped (TensorFlow's buffered reader does that),
  and the bytes are decoded as strict UTF-8.
  """
  with _open_read(path) as reader:
    if start:
      reader.seek(start)
    remaining = None if end is None else end - start
    carry = b""
    line_no = 0
    while True:
      size = block_bytes if remaining is None else min(block_bytes, remaining)
      data = reader.read(size) if size > 0 else b""
      if remaining is not None:
        remaining -= len(data)
      if not data:
        if carry:
          yield _decode_lines([carry], path, line_no, start), 0
        return
      data = carry + data
      cut = data.rfind(b"\n") + 1
      carry = data[cut:]
      if cut:
        raw_lines = data[:cut - 1].split(b"\n")
        yield _decode_lines(raw_lines, path, line_no, start), cut
        line_no += len(raw_lines)


def _decode_lines(raw_lines, path, first_line_no, start=0):
  joined = b"\n".join(raw_lines).replace(b"\r", b"")
  try:
    return joined.decode("utf-8").split("\n")
  except UnicodeDecodeError as e:
    bad_line = first_line_no + joined[:e.start].count(b"\n") + 1
    raise UsageError("--input_file %s, line %d%s: not valid UTF-8 (%s)" % (
        path, bad_line, " after byte %d" % start if start else "", e.reason)) from None


def _encoder(tokenizer):
  """texts -> (int ids [total], row_splits [len + 1]): the tokenizer's encode_batch if it has
  one (fast), else tokenize (or tokenize_batch) and vocab lookups (any original-API tokenizer)."""
  encode_batch = getattr(tokenizer, "encode_batch", None)
  if encode_batch is not None:
    return encode_batch
  tokenize_batch = getattr(tokenizer, "tokenize_batch", None)
  if tokenize_batch is None:
    tokenize_batch = lambda texts: [tokenizer.tokenize(t) for t in texts]
  lookup = tokenizer.vocab.__getitem__

  def encode(texts):
    tokenized = tokenize_batch(texts)
    splits = np.zeros(len(tokenized) + 1, dtype=np.int64)
    np.cumsum([len(t) for t in tokenized], out=splits[1:])
    ids = np.fromiter(map(lookup, itertools.chain.from_iterable(tokenized)), dtype=np.int64,
                      count=int(splits[-1]))
    return ids, splits
  return encode


def read_corpus(files, tokenizer, progress=None, batch_lines=4096):
  """Reads documents as the original's create_training_instances does.

  Args:
    files: list of paths, or of (path, start, end) byte ranges (--num_workers parts).
    tokenizer: a FullTokenizer (its encode_batch is used when it has one).
  Returns:
    A Corpus: one segment per line that tokenizes to something; a new
    document at every line that is empty after strip(); documents continue
    across files; empty documents dropped.
  """
  vocab = tokenizer.vocab
  small = len(vocab) and max(vocab.values()) < 65536
  dtype, np_dtype = ("H", np.uint16) if small else ("q", np.int64)
  tokens = array.array(dtype)
  seg_lengths = array.array("q")
  doc_sizes = array.array("q")
  encode = _encoder(tokenizer)
  current_doc = 0
  num_lines = 0
  nbytes = 0
  for item in files:
    path, start, end = item if isinstance(item, tuple) else (item, 0, None)
    for lines, consumed in _iter_line_blocks(path, start, end, block_bytes=1 << 20):
      for b in range(0, len(lines), batch_lines):
        batch = [line.strip() for line in lines[b:b + batch_lines]]
        try:
          ids, splits = encode(batch)
        except KeyError as e:
          raise UsageError("--vocab_file has no token %s, which the tokenizer produced from "
                           "--input_file %s" % (e, path)) from None
        lengths = np.diff(splits).tolist()
        for line, n in zip(batch, lengths):
          if n:
            seg_lengths.append(n)
            current_doc += 1
          elif not line and current_doc:
            doc_sizes.append(current_doc)
            current_doc = 0
        tokens.frombytes(np.asarray(ids, dtype=np_dtype).tobytes())
      num_lines += len(lines)
      nbytes += consumed
      if progress is not None:
        progress.add_read(consumed, len(lines))
  if current_doc:
    doc_sizes.append(current_doc)
  seg_start = np.zeros(len(seg_lengths) + 1, dtype=np.int64)
  np.cumsum(np.frombuffer(seg_lengths, dtype=np.int64), out=seg_start[1:])
  doc_start = np.zeros(len(doc_sizes) + 1, dtype=np.int64)
  np.cumsum(np.frombuffer(doc_sizes, dtype=np.int64), out=doc_start[1:])
  tok = np.frombuffer(tokens, dtype=np_dtype)
  return Corpus(tok, seg_start, doc_start, lines=num_lines, nbytes=nbytes)


# --------------------------------------------------------------------------
# Instances, compactly
# --------------------------------------------------------------------------

class InstanceStore(object):
  """All instances of a run, compactly (about 6 x 8 + 8 per masked position bytes each).

  meta: array('q'), 6 per instance: a_start, a_len, b_start, b_len, is_random_next,
    n (number of masked positions). The instance is
    [CLS] tokens[a_start:a_start+a_len] [SEP] tokens[b_start:b_start+b_len] [SEP].
  masked: array('i'), 2n per instance: the masked positions (in draw order), then
    their new input ids (-1: kept unchanged).
  """

  def __init__(self):
    self.meta = array.array("q")
    self.masked = array.array("i")

  def __len__(self):
    return len(self.meta) // 6

  def views(self):
    meta = np.frombuffer(self.meta, dtype=np.int64).reshape(-1, 6)
    offsets = np.zeros(len(meta) + 1, dtype=np.int64)
    np.cumsum(2 * meta[:, 5], out=offsets[1:])
    return meta, offsets, np.frombuffer(self.masked, dtype=np.int32)


class _Params(object):
  """Everything the generator needs, checked."""

  def __init__(self, tokenizer, max_seq_length, short_seq_prob, masked_lm_prob,
               max_predictions_per_seq, do_whole_word_mask):
    vocab = tokenizer.vocab
    self.cls_id = vocab["[CLS]"]
    self.sep_id = vocab["[SEP]"]
    self.mask_id = vocab["[MASK]"]
    self.max_seq_length = max_seq_length
    self.max_num_tokens = max_seq_length - 3
    self.short_seq_prob = short_seq_prob
    self.masked_lm_prob = masked_lm_prob
    self.max_predictions_per_seq = max_predictions_per_seq
    self.do_whole_word_mask = do_whole_word_mask
    # vocab_words[k] (vocab file order, duplicates collapsed) -> its id.
    self.vocab_word_ids = list(vocab.values())
    size = max(vocab.values()) + 1 if vocab else 0
    self.is_subword = np.zeros(size, dtype=bool)
    for token, index in vocab.items():
      if token.startswith("##"):
        self.is_subword[index] = True
    self.subword_ids = frozenset(np.flatnonzero(self.is_subword).tolist())
    self.full_shuffle_steps = _full_shuffle_tables(max_seq_length)
    # num_to_predict for each len(tokens), with Python's round and float product.
    self.num_to_predict = [
        min(max_predictions_per_seq, max(1, int(round(n * masked_lm_prob))))
        for n in range(max_seq_length + 1)]


def _validate(max_seq_length, masked_lm_prob, max_predictions_per_seq, short_seq_prob,
              dupe_factor):
  if max_seq_length < 5:
    raise UsageError("--max_seq_length=%d is too small to hold [CLS] a [SEP] b [SEP] with a "
                     "and b non-empty (needs at least 5)" % max_seq_length)
  if not 0.0 < masked_lm_prob <= 1.0:
    raise UsageError("--masked_lm_prob=%r must be in (0, 1]" % masked_lm_prob)
  if max_predictions_per_seq < 1:
    raise UsageError("--max_predictions_per_seq=%d must be at least 1" % max_predictions_per_seq)
  if not 0.0 <= short_seq_prob <= 1.0:
    raise UsageError("--short_seq_prob=%r must be in [0, 1]" % short_seq_prob)
  if dupe_factor < 1:
    raise UsageError("--dupe_factor=%d must be at least 1" % dupe_factor)


def _shuffle_tables(limit, num_to_predict):
  """The steps of rng.shuffle(cand_indexes) for n = 0..limit candidates, split four ways.

  Step i is j = randbelow(i + 1); swap cand[i], cand[j]. As (i, shift, bound) in the
  top-bit space of RandomWords: i + 1 >= 256 on the top 16 bits, else the top 8. Only
  the first K = num_to_predict[n + 3] entries of the result are used, and position i is
  never read after step i, so steps with i >= K only need cand[j] = cand[i].
  Returns a list over n of (assign16, swap16, assign8, swap8).
  """
  tables = [((), (), (), ())] * (limit + 1)
  for n in range(2, limit + 1):
    k_keep = num_to_predict[min(n + 3, len(num_to_predict) - 1)]
    def step(i, bits):
      k = (i + 1).bit_length()
      return (i, bits - k, (i + 1) << (bits - k))
    s16 = [step(i, 16) for i in range(n - 1, 254, -1)]  # randbelow(i + 1), i + 1 >= 256
    s8 = [step(i, 8) for i in range(min(n, 255) - 1, 0, -1)]  # i + 1 <= 255: 8 bits
    tables[n] = (tuple(x for x in s16 if x[0] >= k_keep), tuple(x for x in s16 if x[0] < k_keep),
                 tuple(x for x in s8 if x[0] >= k_keep), tuple(x for x in s8 if x[0] < k_keep))
  return tables


def generate_instances(corpus, order, params, words, dupe_factor, store, progress=None,
                       words_for=None):
  """Creates the instances of all passes, drawing from `words` as the original.

  `order` is the document shuffle (document_order), already drawn. Instances
  are appended to `store` in creation order (before the final shuffle).
  `words_for` (not in the original; used by create_pretraining_data_beam.py):
  if given, `words_for(pass_index, document_index)` is called at the start of
  every document of every pass and returns the RandomWords that document's
  draws come from (then `words` is unused); random-next documents are still
  drawn from the whole `corpus`.

  This is the original's create_instances_from_document and
  create_masked_lm_predictions for every document and pass, with every draw
  replayed inline on the word buffers of `words` (see RandomWords); the
  comments name the original's draw each block replays.
  """
  _self_check()
  seg_start = corpus.seg_start
  doc_start = corpus.doc_start
  num_docs = corpus.num_documents
  tokens = corpus.tokens
  max_num_tokens = params.max_num_tokens
  short_seq_prob = params.short_seq_prob
  mask_threshold = 0.8 * _TWO53
  ntp_table = params.num_to_predict
  mask_id = params.mask_id
  cls_id, sep_id = params.cls_id, params.sep_id
  vocab_ids = params.vocab_word_ids
  vocab_size = len(vocab_ids)
  vocab_k = vocab_size.bit_length()
  general = (params.do_whole_word_mask or vocab_k > 16 or
             bool(np.any((tokens == cls_id) | (tokens == sep_id))))
  vocab_shift = max(0, 16 - vocab_k)
  vocab_limit = vocab_size << vocab_shift
  shuffle_steps = _shuffle_tables(params.max_seq_length, ntp_table)
  # Words one instance may use: far above need (about 2 per candidate token).
  reserve = 16 * params.max_seq_length + 4096
  searchsorted = seg_start.searchsorted
  # Segment ranges of the documents in the original's shuffled order.
  first_seg = doc_start[order]
  end_seg = doc_start[order + 1]
  if num_docs < (1 << 22):
    first_seg, end_seg = first_seg.tolist(), end_seg.tolist()
  ndoc_k = num_docs.bit_length()
  ndoc_shift = (8 if ndoc_k <= 8 else 16) - ndoc_k
  ndoc_limit = num_docs << max(ndoc_shift, 0)

  meta_extend = store.meta.extend
  masked_extend = store.masked.extend

  for pass_index in range(dupe_factor):
    for document_index in range(num_docs):
      if words_for is not None:
        words = words_for(pass_index, document_index)
      d0 = int(first_seg[document_index])
      d1 = int(end_seg[document_index])
      offs = seg_start[d0:d1 + 1].tolist()
      n_seg = d1 - d0
      # target_seq_length: random() < short_seq_prob, then randint(2, max_num_tokens).
      target = max_num_tokens
      if words.random() < short_seq_prob:
        target = words.randint(2, max_num_tokens)
      words.reserve(reserve)
      top8, top16, p = words.top8, words.top16, words.pos
      i = 0
      chunk_first = 0
      last = n_seg - 1
      while i < n_seg:
        if i != last and offs[i + 1] - offs[chunk_first] < target:
          i += 1
          continue
        if len(top8) - p < reserve:
          words.pos = p
          words.reserve(reserve)
          top8, top16, p = words.top8, words.top16, words.pos
        n_chunk = i - chunk_first + 1
        # a_end = randint(1, n_chunk - 1) if the chunk has 2 or more segments.
        if n_chunk >= 2:
          m = n_chunk - 1
          k = m.bit_length()
          buf, shift = (top8, 8 - k) if k <= 8 else (top16, 16 - k)
          limit = m << shift
          w = buf[p]
          p += 1
          while w >= limit:
            w = buf[p]
            p += 1
          a_end = 1 + (w >> shift)
        else:
          a_end = 1
        a0 = offs[chunk_first]
        a1 = offs[chunk_first + a_end]
        # Random next: always for a single segment, else random() < 0.5.
        if n_chunk == 1:
          is_random = 1
        else:
          is_random = 1 if top8[p] < 128 else 0
          p += 2
        if is_random:
          target_b = target - (a1 - a0)
          # Up to 10 x randint(0, num_docs - 1) until another document.
          if ndoc_k <= 16:
            buf = top8 if ndoc_k <= 8 else top16
            for _ in range(10):
              w = buf[p]
              p += 1
              while w >= ndoc_limit:
                w = buf[p]
                p += 1
              rdoc = w >> ndoc_shift
              if rdoc != document_index:
                break
          else:
            words.pos = p
            for _ in range(10):
              rdoc = words.randbelow(num_docs)
              if rdoc != document_index:
                break
            top8, top16, p = words.top8, words.top16, words.pos
          r0 = int(first_seg[rdoc])
          r1 = int(end_seg[rdoc])
          # random_start = randint(0, len(random_document) - 1).
          m = r1 - r0
          k = m.bit_length()
          if k <= 16:
            buf, shift = (top8, 8 - k) if k <= 8 else (top16, 16 - k)
            limit = m << shift
            w = buf[p]
            p += 1
            while w >= limit:
              w = buf[p]
              p += 1
            rstart = r0 + (w >> shift)
          elif k <= 32:
            full = words.full
            shift = 32 - k
            w = int(full[p]) >> shift
            p += 1
            while w >= m:
              w = int(full[p]) >> shift
              p += 1
            rstart = r0 + w
          else:
            words.pos = p
            rstart = r0 + words.randbelow(m)
            top8, top16, p = words.top8, words.top16, words.pos
          b0 = int(seg_start[rstart])
          # Segments from random_start until len(tokens_b) >= target_b_length.
          e = int(searchsorted(b0 + target_b))
          if e <= rstart:
            e = rstart + 1
          elif e > r1:
            e = r1
          b1 = int(seg_start[e])
          i -= n_chunk - a_end  # put the unused segments back
        else:
          b0 = a1
          b1 = offs[i + 1]
        # truncate_seq_pair: per removed token, random() < 0.5 -> from the front.
        la = a1 - a0
        lb = b1 - b0
        while la + lb > max_num_tokens:
          if la > lb:
            if top8[p] < 128:
              a0 += 1
            la -= 1
          else:
            if top8[p] < 128:
              b0 += 1
            lb -= 1
          p += 2
        n_tokens = la + lb + 3
        num_to_predict = ntp_table[n_tokens]
        if general:
          words.pos = p
          masked = _mask_general(tokens, a0, la, b0, lb, num_to_predict, params, words)
          top8, top16, p = words.top8, words.top16, words.pos
          positions = [x[0] for x in masked]
          replacements = [x[1] for x in masked]
        else:
          # rng.shuffle(cand_indexes): every position but [CLS] and the two [SEP]s.
          cand = list(range(1, la + 1))
          cand.extend(range(la + 2, n_tokens - 1))
          n_cand = la + lb
          assign16, swap16, assign8, swap8 = shuffle_steps[n_cand]
          for j, shift, limit in assign16:
            w = top16[p]
            p += 1
            while w >= limit:
              w = top16[p]
              p += 1
            cand[w >> shift] = cand[j]
          for j, shift, limit in swap16:
            w = top16[p]
            p += 1
            while w >= limit:
              w = top16[p]
              p += 1
            k = w >> shift
            cand[j], cand[k] = cand[k], cand[j]
          for j, shift, limit in assign8:
            w = top8[p]
            p += 1
            while w >= limit:
              w = top8[p]
              p += 1
            cand[w >> shift] = cand[j]
          for j, shift, limit in swap8:
            w = top8[p]
            p += 1
            while w >= limit:
              w = top8[p]
              p += 1
            k = w >> shift
            cand[j], cand[k] = cand[k], cand[j]
          del cand[num_to_predict:]
          # Per masked position: random() < 0.8 -> [MASK]; else random() < 0.5 ->
          # kept; else vocab_words[randint(0, len(vocab_words) - 1)].
          replacements = []
          for _position in cand:
            w = top8[p]
            if w < 204 or (w == 204 and (int(words.full[p]) >> 5) * 67108864.0 +
                           (int(words.full[p + 1]) >> 6) < mask_threshold):
              p += 2
              replacements.append(mask_id)
            elif top8[p + 2] < 128:
              p += 4
              replacements.append(-1)
            else:
              p += 4
              w = top16[p]
              p += 1
              while w >= vocab_limit:
                w = top16[p]
                p += 1
              replacements.append(vocab_ids[w >> vocab_shift])
          positions = cand  # in draw order; the writer sorts them
        meta_extend((a0, la, b0, lb, is_random, len(positions)))
        masked_extend(positions)
        masked_extend(replacements)
        chunk_first = i + 1
        i += 1
      words.pos = p
      if progress is not None:
        progress.add_documents(1, len(store))
  return store


def _full_shuffle_tables(limit):
  """For n = 0..limit: the steps (i, shift, bound) of shuffling n items, as (top-16-bit steps,
  top-8-bit steps); see _shuffle_tables."""
  tables = [((), ())] * (limit + 1)
  for n in range(2, limit + 1):
    s16 = tuple((i, 16 - (i + 1).bit_length(), (i + 1) << (16 - (i + 1).bit_length()))
                for i in range(n - 1, 254, -1))
    s8 = tuple((i, 8 - (i + 1).bit_length(), (i + 1) << (8 - (i + 1).bit_length()))
               for i in range(min(n, 255) - 1, 0, -1))
    tables[n] = (s16, s8)
  return tables


def _mask_general(tokens, a0, la, b0, lb, num_to_predict, params, words):
  """create_masked_lm_predictions of the original (with whole-word masking), on ids.

  Candidate groups: every position but the [CLS]/[SEP] tokens; with whole-word
  masking a "##" piece joins the previous group (across a [SEP], as upstream).
  rng.shuffle(groups), then groups in that order while they fit in
  num_to_predict; per position random() < 0.8 -> [MASK], else random() < 0.5 ->
  kept, else vocab_words[randint(0, len(vocab_words) - 1)].
  Returns [(position, new input id or -1 for unchanged)] sorted by position.
  """
  cls_id, sep_id = params.cls_id, params.sep_id
  ids = [cls_id] + tokens[a0:a0 + la].tolist() + [sep_id] + tokens[b0:b0 + lb].tolist() + [sep_id]
  subwords = params.subword_ids if params.do_whole_word_mask else ()
  groups = []
  for index, token in enumerate(ids):
    if token == cls_id or token == sep_id:
      continue
    if groups and token in subwords:
      groups[-1].append(index)
    else:
      groups.append([index])
  n = len(groups)
  words.reserve(64 * len(ids) + 4096)
  if n <= params.max_seq_length:
    top8, top16, p = words.top8, words.top16, words.pos
    s16, s8 = params.full_shuffle_steps[n]
    for j, shift, limit in s16:
      w = top16[p]
      p += 1
      while w >= limit:
        w = top16[p]
        p += 1
      k = w >> shift
      groups[j], groups[k] = groups[k], groups[j]
    for j, shift, limit in s8:
      w = top8[p]
      p += 1
      while w >= limit:
        w = top8[p]
        p += 1
      k = w >> shift
      groups[j], groups[k] = groups[k], groups[j]
    words.pos = p
  else:
    words.shuffle(groups)
  vocab_ids = params.vocab_word_ids
  num_vocab = len(vocab_ids)
  mask_id = params.mask_id
  masked = []
  count = 0
  for group in groups:  # groups never overlap: the original's covered-index check never fires
    if count >= num_to_predict:
      break
    if count + len(group) > num_to_predict:
      continue
    for index in group:
      if words.random() < 0.8:
        replacement = mask_id
      elif words.random() < 0.5:
        replacement = -1
      else:
        replacement = vocab_ids[words.randbelow(num_vocab)]
      masked.append((index, replacement))
    count += len(group)
  masked.sort()
  return masked


def document_order(corpus, words):
  """Draws the original's rng.shuffle(all_documents): returns the shuffled order (int64)."""
  num_docs = corpus.num_documents
  if num_docs == 0:
    return np.zeros(0, dtype=np.int64)
  return np.frombuffer(words.permutation(num_docs), dtype=np.int64)


# --------------------------------------------------------------------------
# Writing: tf.train.Example wire format and TFRecord framing, vectorized
# --------------------------------------------------------------------------

# (name, kind) in the original's insertion (and logging) order.
FEATURES = (("input_ids", "int"), ("input_mask", "int"), ("segment_ids", "int"),
            ("masked_lm_positions", "int"), ("masked_lm_ids", "int"),
            ("masked_lm_weights", "float"), ("next_sentence_labels", "int"))


class _Crc32c(object):
  """Masked CRC32C of many byte strings at once (TFRecord framing).

  CRC is linear: crc(m) = R(0, m) ^ R(~0, zeros(len m)) ^ ~0, where R(0, m)
  is the XOR over the bytes of T[d][byte], d = the number of bytes after it.
  """

  def __init__(self, max_len):
    t0 = np.arange(256, dtype=np.uint32)
    for _ in range(8):
      t0 = np.where(t0 & 1, (t0 >> 1) ^ np.uint32(0x82F63B78), t0 >> 1).astype(np.uint32)
    self.t0 = t0
    self.tables = np.zeros(0, dtype=np.uint32)
    self.zeros = np.array([0xFFFFFFFF], dtype=np.uint32)
    self._grow(max_len)

  def _grow(self, max_len):
    t0 = self.t0
    rows = [self.tables.reshape(-1, 256)] if len(self.tables) else []
    current = rows[0][-1] if rows else t0
    have = rows[0].shape[0] if rows else 0
    new = []
    if not have:
      new.append(t0)
      have = 1
    for _ in range(have, max_len):
      current = t0[current & 0xFF] ^ (current >> 8)
      new.append(current)
    self.tables = np.concatenate(rows + [np.stack(new)] if new else rows).reshape(-1)
    z = self.zeros.tolist()
    while len(z) <= max_len:
      c = z[-1]
      z.append(int(t0[c & 0xFF]) ^ (c >> 8))
    self.zeros = np.array(z, dtype=np.uint32)

  def ensure(self, max_len):
    if max_len > len(self.tables) // 256:
      self._grow(max_len)
      self._prefix = {}

  def _table(self, key):
    """Prefix-XOR tables (over the distance d to the end of the record) for runs of bytes."""
    table = self._prefix.get(key) if hasattr(self, "_prefix") else None
    if table is not None:
      return table
    if not hasattr(self, "_prefix"):
      self._prefix = {}
    t = self.tables.reshape(-1, 256)
    n = t.shape[0]
    if key == "one":  # P[d] = XOR of T[x][1] for x < d
      table = np.zeros(n + 1, dtype=np.uint32)
      table[1:] = np.bitwise_xor.accumulate(t[:, 1])
    elif key == "float_one":  # R[d] = U[d] ^ R[d - 4], U[d]: the bytes of 1.0f ending at d
      unit = np.zeros(n, dtype=np.uint32)
      unit[:n - 1] = t[:n - 1, 0x3F] ^ t[1:, 0x80]
      table = unit.copy()
      for r in range(4):
        table[r::4] = np.bitwise_xor.accumulate(unit[r::4])
    else:  # a constant string ending at distance d
      data = np.frombuffer(key, dtype=np.uint8)
      table = np.zeros(n, dtype=np.uint32)
      for i, byte in enumerate(data):
        shift = len(data) - 1 - i
        table[:n - shift] ^= t[shift:, byte]
    self._prefix[key] = table
    return table

  def contribution(self, part, after, lengths=None, features=None):
    """XOR over part's bytes of T[distance to the record end][byte], per row: [B] uint32."""
    t = self.tables
    if part.crc == "const":
      return self._table(part.const)[after]
    width = part.data.shape[1]
    if part.crc == "input_mask":  # ones at bytes 0 .. length-1 of the part
      p = self._table("one")
      return p[after + width] ^ p[after + width - lengths]
    if part.crc == "segment_ids":  # ones at bytes len_a+2 .. length-1
      p = self._table("one")
      first = np.asarray(features["segment_ids"].argmax(axis=1), dtype=np.int64)
      return p[after + width - first] ^ p[after + width - lengths]
    if part.crc == "masked_lm_weights":  # 1.0f in the first n of width/4 floats
      r = self._table("float_one")
      n = features["masked_lm_weights"].sum(axis=1).astype(np.int64)
      hi = after + width - 4
      lo = hi - 4 * n
      return np.where(n > 0, r[hi] ^ np.where(lo >= 0, r[np.maximum(lo, 0)], 0), 0).astype(
          np.uint32)
    if part.valid is None:
      dist = after.astype(np.int32)[:, None] + np.arange(width - 1, -1, -1, dtype=np.int32)
    else:
      dist = (after + part.size).astype(np.int32)[:, None] - np.cumsum(
          part.valid, axis=1, dtype=np.int32)
    dist <<= 8
    dist |= part.data
    return np.bitwise_xor.reduce(t[dist], axis=1)

  def finish(self, raw, lengths):
    """Masked CRC32C from the XOR of contributions and the lengths."""
    crc = (raw ^ self.zeros[lengths] ^ np.uint32(0xFFFFFFFF)).astype(np.uint32)
    rotated = (crc >> np.uint32(15)) | (crc << np.uint32(17))
    return rotated + np.uint32(0xA282EAD8)


def _varint(values, nbytes):
  """values: [B, n] ints in [0, 2**(7*nbytes)) -> (bytes [B, n*nbytes] uint8, valid bool or None)."""
  v = np.asarray(values)
  b, n = v.shape
  if nbytes == 1:
    return v.astype(np.uint8), None
  v = v.astype(np.uint32 if nbytes <= 4 else np.uint64)
  out = np.empty((b, n, nbytes), dtype=np.uint8)
  valid = np.empty((b, n, nbytes), dtype=bool)
  valid[:, :, 0] = True
  out[:, :, 0] = v & 0x7F
  for k in range(1, nbytes):
    group = v >> (7 * k)
    valid[:, :, k] = group != 0
    out[:, :, k] = group & 0x7F
    out[:, :, k - 1] |= valid[:, :, k].view(np.uint8) << 7
  return out.reshape(b, n * nbytes), valid.reshape(b, n * nbytes)


def _varint_size(v):
  v = np.asarray(v, dtype=np.int64)
  size = np.ones(v.shape, dtype=np.int64)
  top = int(v.max()) if v.size else 0
  k = 1
  while k < 10 and (1 << (7 * k)) <= top:
    size += v >= (1 << (7 * k))
    k += 1
  return size


def _nbytes_for(max_value):
  return max(1, (int(max_value).bit_length() + 6) // 7)


class _Part(object):
  """A run of bytes of every record: data [B, w] uint8 (invalid bytes are 0), valid [B, w]
  or None (all valid), size [B] (valid bytes), and how its CRC contribution is computed."""

  def __init__(self, data, valid, size, crc="gather", const=None):
    self.data, self.valid, self.size, self.crc, self.const = data, valid, size, crc, const


def encode_records(features, value_bytes, crc, lengths=None):
  """Serializes tf.train.Examples of the pre-training features and frames them as TFRecords.

  Args:
    features: dict name -> [B, n] array (ints >= 0, float32 for masked_lm_weights).
    value_bytes: dict name -> varint bytes enough for every value of that int feature.
    crc: a _Crc32c.
    lengths: [B] real lengths of the instances (input_mask ones), when features come
      from instance_features: input_mask, segment_ids and masked_lm_weights then get
      their CRC from prefix tables instead of byte by byte.
  Returns:
    uint8 [total]: the B records, TFRecord-framed, concatenated. Map entries are
    in sorted key order, as SerializeToString(deterministic=True) writes them.
  """
  batch = len(features["input_ids"])
  parts = []

  def const(data):
    arr = np.frombuffer(bytes(data), dtype=np.uint8)
    parts.append(_Part(np.broadcast_to(arr, (batch, len(arr))), None,
                       np.full(batch, len(arr), dtype=np.int64), "const", bytes(data)))

  def var(values):
    values = np.asarray(values).reshape(batch, 1)
    data, valid = _varint(values, _nbytes_for(values.max()))
    size = valid.sum(axis=1, dtype=np.int64) if valid is not None else np.ones(batch, np.int64)
    parts.append(_Part(data, valid, size))

  sized = []
  total = 0
  for name, kind in sorted(FEATURES):
    values = features[name]
    if kind == "int":
      data, valid = _varint(values, value_bytes[name])
      payload = (valid.sum(axis=1, dtype=np.int64) if valid is not None
                 else np.full(batch, data.shape[1], dtype=np.int64))
      tag = 0x1A
    else:
      data = np.ascontiguousarray(values, dtype="<f4").view(np.uint8).reshape(batch, -1)
      valid = None
      payload = np.full(batch, data.shape[1], dtype=np.int64)
      tag = 0x12
    l1 = 1 + _varint_size(payload) + payload
    l2 = 1 + _varint_size(l1) + l1
    key = name.encode("ascii")
    l3 = 3 + len(key) + _varint_size(l2) + l2
    total = total + 1 + _varint_size(l3) + l3
    how = "gather"
    if lengths is not None and name in ("input_mask", "segment_ids", "masked_lm_weights"):
      how = name
    sized.append((key, tag, _Part(data, valid, payload, how), l1, l2, l3))
  const(b"\x0a")
  var(total)
  for key, tag, part, l1, l2, l3 in sized:
    const(b"\x0a")
    var(l3)
    const(b"\x0a" + bytes([len(key)]) + key + b"\x12")
    var(l2)
    const(bytes([tag]))
    var(l1)
    const(b"\x0a")
    var(part.size)
    parts.append(part)
  record_len = np.sum([part.size for part in parts], axis=0)
  crc.ensure(int(sum(part.data.shape[1] for part in parts)) + 16)
  raw = np.zeros(batch, dtype=np.uint32)
  after = record_len.copy()  # bytes after the current part
  for part in parts:
    after -= part.size
    raw ^= crc.contribution(part, after, lengths, features)
  data_crc = crc.finish(raw, record_len)
  len_bytes = record_len.astype("<u8").view(np.uint8).reshape(batch, 8)
  header = _Part(len_bytes, None, np.full(batch, 8, dtype=np.int64))
  len_crc = crc.finish(crc.contribution(header, np.zeros(batch, dtype=np.int64)),
                       header.size)
  framed = np.concatenate(
      [len_bytes, len_crc.astype("<u4").view(np.uint8).reshape(batch, 4)] +
      [part.data for part in parts] +
      [data_crc.astype("<u4").view(np.uint8).reshape(batch, 4)], axis=1)
  ones = np.ones((batch, 12), dtype=bool)
  framed_valid = np.concatenate(
      [ones] + [part.valid if part.valid is not None else
                np.ones(part.data.shape, dtype=bool) for part in parts] + [ones[:, :4]], axis=1)
  return framed[framed_valid]


def instance_features(views, tokens, idx, params):
  """The 7 features (padded, as the original writes them) of instances idx.

  Args:
    views: InstanceStore.views().
    tokens: the corpus token ids.
    idx: [B] instance indexes.
  Returns:
    (features dict of [B, n] arrays, real lengths [B] int64).
  """
  meta_all, offsets, masked = views
  seq = params.max_seq_length
  preds = params.max_predictions_per_seq
  rows = len(idx)
  meta = meta_all[idx]
  a0, la, b0, lb = (meta[:, c:c + 1] for c in range(4))
  col = np.arange(seq, dtype=np.int64)[None, :]
  ids = np.zeros((rows, seq), dtype=np.int32)
  in_a = (col >= 1) & (col <= la)
  ids[in_a] = tokens[np.broadcast_to(a0 + col - 1, ids.shape)[in_a]]
  in_b = (col >= la + 2) & (col <= la + lb + 1)
  ids[in_b] = tokens[np.broadcast_to(b0 + col - la - 2, ids.shape)[in_b]]
  r = np.arange(rows)
  ids[:, 0] = params.cls_id
  ids[r, la[:, 0] + 1] = params.sep_id
  ids[r, la[:, 0] + lb[:, 0] + 2] = params.sep_id
  length = la + lb + 3
  mask = col < length
  segment = (col >= la + 2) & mask
  nm = meta[:, 5:6]
  k = np.arange(preds, dtype=np.int64)[None, :]
  has = k < nm
  if len(masked):
    off = offsets[idx][:, None]
    positions = np.where(has, masked[np.where(has, off + k, 0)], seq)
    repl = np.where(has, masked[np.where(has, off + nm + k, 0)], -1)
    order = np.argsort(positions, axis=1, kind="stable")
    positions = np.take_along_axis(positions, order, axis=1)
    repl = np.take_along_axis(repl, order, axis=1)
    positions = np.where(has, positions, 0).astype(np.int64)
  else:
    positions = np.zeros((rows, preds), dtype=np.int64)
    repl = np.full((rows, preds), -1, dtype=np.int64)
  labels = np.where(has, ids[r[:, None], positions], 0)
  change = has & (repl >= 0)
  ids[np.broadcast_to(r[:, None], change.shape)[change], positions[change]] = repl[change]
  features = {
      "input_ids": ids,
      "input_mask": mask.view(np.uint8),
      "segment_ids": segment.view(np.uint8),
      "masked_lm_positions": positions,
      "masked_lm_ids": labels,
      "masked_lm_weights": has.astype(np.float32),
      "next_sentence_labels": meta[:, 4:5].copy(),
  }
  return features, length[:, 0]


def _log_example(features, row, length, inv_vocab):
  logging.info("*** Example ***")
  ids = features["input_ids"][row, :length].tolist()
  logging.info("tokens: %s" % " ".join(
      tokenization.printable_text(inv_vocab[x]) for x in ids))
  for name, kind in FEATURES:
    values = features[name][row].tolist()
    logging.info("%s: %s" % (name, " ".join(str(x) for x in values)))


def record_value_bytes(params):
  """Varint bytes enough for every value of each int feature (encode_records' value_bytes)."""
  max_id = max(params.vocab_word_ids + [params.cls_id, params.sep_id, params.mask_id])
  id_bytes = _nbytes_for(max_id)
  return {"input_ids": id_bytes, "masked_lm_ids": id_bytes, "input_mask": 1,
          "segment_ids": 1, "next_sentence_labels": 1,
          "masked_lm_positions": _nbytes_for(params.max_seq_length)}


def write_instances(store, order, tokens, params, output_files, inv_vocab, progress=None,
                    log_examples=20, batch_size=1024, commit=True, temp_tag=None):
  """Writes instances in `order` round-robin over output_files (instance k -> file k mod n).

  Each file is written to a temporary name and renamed when complete (unless
  not `commit`: then the temporary names are returned for the caller to
  rename); on an error no output (temporary or final) is left behind.
  Returns the number of instances written, or the temporary names.
  """
  views = store.views()
  value_bytes = record_value_bytes(params)
  crc = _Crc32c(1024)
  n_files = len(output_files)
  temps = [_temp_name(path, temp_tag) for path in output_files]
  writers = []
  try:
    for temp in temps:
      writers.append(_open_write(temp))
    order = np.asarray(order, dtype=np.int64)
    step = batch_size * n_files
    for g0 in range(0, len(order), step):
      batch = order[g0:g0 + step]
      features, lengths = instance_features(views, tokens, batch, params)
      for row in range(max(0, min(log_examples - g0, len(batch)))):
        _log_example(features, row, int(lengths[row]), inv_vocab)
      for f in range(n_files):
        rows = np.arange(f, len(batch), n_files)
        if not len(rows):
          continue
        if n_files > 1:
          sub = {name: value[rows] for name, value in features.items()}
          sub_lengths = lengths[rows]
        else:
          sub, sub_lengths = features, lengths
        writers[f].write(encode_records(sub, value_bytes, crc, sub_lengths).tobytes())
      if progress is not None:
        progress.add_written(len(batch))
    for writer in writers:
      writer.close()
    if not commit:
      return temps
    for temp, path in zip(temps, output_files):
      _rename(temp, path)
  except BaseException:
    for writer in writers:
      try:
        writer.close()
      except Exception:  # pylint: disable=broad-except
        pass
    for temp in temps:
      _remove_quietly(temp)
    raise
  return len(order)


def to_training_instances(store, order, tokens, params, inv_vocab):
  """The instances as the original's TrainingInstance objects (str tokens), in `order`."""
  views = store.views()
  out = []
  order = np.asarray(order, dtype=np.int64)
  for g0 in range(0, len(order), 1024):
    batch = order[g0:g0 + 1024]
    features, lengths = instance_features(views, tokens, batch, params)
    for row, length in enumerate(lengths.tolist()):
      n = int(features["masked_lm_weights"][row].sum())
      out.append(TrainingInstance(
          tokens=[inv_vocab[x] for x in features["input_ids"][row, :length].tolist()],
          segment_ids=features["segment_ids"][row, :length].tolist(),
          masked_lm_positions=features["masked_lm_positions"][row, :n].tolist(),
          masked_lm_labels=[inv_vocab[x] for x in features["masked_lm_ids"][row, :n].tolist()],
          is_random_next=bool(features["next_sentence_labels"][row, 0])))
  return out


# --------------------------------------------------------------------------
# The original's create_training_instances, and the whole run
# --------------------------------------------------------------------------

def _check_vocab(tokenizer, vocab_file):
  missing = [t for t in ("[CLS]", "[SEP]", "[MASK]") if t not in tokenizer.vocab]
  if missing:
    raise UsageError("--vocab_file %s has no %s token%s (%d entries read)" % (
        vocab_file, ", ".join(missing), "s" if len(missing) > 1 else "", len(tokenizer.vocab)))


def create_training_instances(input_files, tokenizer, max_seq_length, dupe_factor,
                              short_seq_prob, masked_lm_prob, max_predictions_per_seq, rng,
                              do_whole_word_mask=False):
  """The original's function: a list of TrainingInstance in final order (same draws on rng).

  Convenient for tests and small corpora; run() is the compact, fast path.
  """
  _validate(max_seq_length, masked_lm_prob, max_predictions_per_seq, short_seq_prob,
            max(dupe_factor, 1))
  params = _Params(tokenizer, max_seq_length, short_seq_prob, masked_lm_prob,
                   max_predictions_per_seq, do_whole_word_mask)
  corpus = read_corpus(list(input_files), tokenizer)
  words = RandomWords(rng)
  order = document_order(corpus, words)
  store = InstanceStore()
  generate_instances(corpus, order, params, words, dupe_factor, store)
  final = words.permutation(len(store))
  words.sync()
  inv_vocab = {v: k for k, v in tokenizer.vocab.items()}
  return to_training_instances(store, final, corpus.tokens, params, inv_vocab)


class Progress(object):
  """Documents read, instances created and written, rate and ETA, on stderr or the log.

  On a terminal, one line rewritten in place every half second; otherwise an
  INFO log line every `interval` seconds (default 30), so logs stay readable.
  Counters may live in shared memory (--num_workers), then `parts` > 1.
  """

  # Fraction of a part's work in each phase (measured: reading, creating, writing).
  WEIGHTS = (0.2, 0.6, 0.2)
  LOG_INTERVAL_S = 30.0  # between INFO lines when stderr is not a terminal

  def __init__(self, total_bytes, parts=1, counters=None, fractions=None, interval=None,
               enabled=True):
    self.total_bytes = max(total_bytes, 1)
    self.parts = parts
    # bytes read, lines, documents processed (x passes), instances created, written
    self.counters = counters if counters is not None else [0] * 5
    self.fractions = fractions if fractions is not None else [0.0] * parts
    self.tty = sys.stderr.isatty()
    self.interval = interval if interval is not None else (
        0.5 if self.tty else self.LOG_INTERVAL_S)
    self.enabled = enabled
    self.start = time.time()
    self.last = self.start
    self.part = 0
    self.part_bytes = 1
    self.doc_steps = 1
    self.instances = 1
    self._done = [0, 0, 0]
    self._printed = False

  def begin_part(self, part, part_bytes):
    self.part = part
    self.part_bytes = max(part_bytes, 1)
    self._done = [0, 0, 0]

  def set_totals(self, doc_steps=None, instances=None):
    if doc_steps is not None:
      self.doc_steps = max(doc_steps, 1)
    if instances is not None:
      self.instances = max(instances, 1)

  def _add(self, index, amount):
    counters = self.counters
    if hasattr(counters, "get_lock"):
      with counters.get_lock():
        counters[index] += amount
    else:
      counters[index] += amount

  def _update_fraction(self):
    w = self.WEIGHTS
    f = (w[0] * min(1.0, self._done[0] / self.part_bytes) +
         w[1] * min(1.0, self._done[1] / self.doc_steps) +
         w[2] * min(1.0, self._done[2] / self.instances))
    self.fractions[self.part] = f
    if self.parts == 1:
      self.maybe_report()

  def add_read(self, nbytes, lines):
    self._add(0, nbytes)
    self._add(1, lines)
    self._done[0] += nbytes
    self._update_fraction()

  def add_documents(self, count, instances_so_far):
    self._done[1] += count
    self._add(2, count)
    if self.parts == 1:
      self.counters[3] = instances_so_far
    self._update_fraction()

  def add_written(self, count):
    self._add(4, count)
    self._done[2] += count
    self._update_fraction()

  def line(self):
    c = list(self.counters)
    elapsed = max(time.time() - self.start, 1e-9)
    fraction = sum(self.fractions) / self.parts
    eta = elapsed * (1 - fraction) / fraction if fraction > 0.01 else float("nan")
    mb = c[0] / 1e6
    return ("read %.1f/%.1f MB (%s lines, %.2f MB/s), %s document passes, %s instances created, "
            "%s written, %3.0f%%, ETA %s" % (
                mb, self.total_bytes / 1e6, format(c[1], ","), mb / elapsed, format(c[2], ","),
                format(c[3], ","), format(c[4], ","), 100 * fraction,
                "?" if math.isnan(eta) else time.strftime("%H:%M:%S", time.gmtime(eta))))

  def maybe_report(self, force=False):
    if not self.enabled:
      return
    now = time.time()
    if not force and now - self.last < self.interval:
      return
    self.last = now
    if self.tty:
      sys.stderr.write("\r\033[K" + self.line())
      sys.stderr.flush()
      self._printed = True
    else:
      logging.info("progress: %s", self.line())

  def finish(self):
    if self.enabled and self.tty and self._printed:
      sys.stderr.write("\r\033[K" + self.line() + "\n")
      sys.stderr.flush()


class Config(object):
  """All options of a run (the flags), checked."""

  def __init__(self, input_files, output_files, vocab_file, do_lower_case=True,
               do_whole_word_mask=False, max_seq_length=128, max_predictions_per_seq=20,
               random_seed=12345, dupe_factor=10, masked_lm_prob=0.15, short_seq_prob=0.1,
               num_workers=1, part_size_mb=64, progress=True):
    self.input_files = list(input_files)
    self.output_files = list(output_files)
    self.vocab_file = vocab_file
    self.do_lower_case = do_lower_case
    self.do_whole_word_mask = do_whole_word_mask
    self.max_seq_length = max_seq_length
    self.max_predictions_per_seq = max_predictions_per_seq
    self.random_seed = random_seed
    self.dupe_factor = dupe_factor
    self.masked_lm_prob = masked_lm_prob
    self.short_seq_prob = short_seq_prob
    self.num_workers = num_workers
    self.part_size_mb = part_size_mb
    self.progress = progress
    _validate(max_seq_length, masked_lm_prob, max_predictions_per_seq, short_seq_prob,
              dupe_factor)
    if num_workers < 1:
      raise UsageError("--num_workers=%d must be at least 1" % num_workers)
    if part_size_mb <= 0:
      raise UsageError("--part_size_mb=%r must be positive" % part_size_mb)
    if not self.input_files:
      raise UsageError("--input_file: no files match")
    if not self.output_files or not all(self.output_files):
      raise UsageError("--output_file %r: empty file name" % ",".join(self.output_files))
    for path in self.output_files:
      if not _is_remote(path):
        directory = os.path.dirname(path) or "."
        if not os.path.isdir(directory):
          raise UsageError("--output_file %s: directory %s does not exist" % (path, directory))
    for path in self.input_files:
      if not _is_remote(path) and not os.path.isfile(path):
        raise UsageError("--input_file %s: not a readable file" % path)


def _make_tokenizer(config):
  try:
    tokenizer = tokenization.FullTokenizer(
        vocab_file=config.vocab_file, do_lower_case=config.do_lower_case)
  except (OSError, IOError, UnicodeDecodeError, ValueError) as e:
    raise UsageError("--vocab_file %s: %s" % (config.vocab_file, e)) from None
  _check_vocab(tokenizer, config.vocab_file)
  return tokenizer


def _process(config, tokenizer, files, seed, output_files, progress, log_examples, commit,
             total_bytes, temp_tag=None):
  """Reads `files`, creates the instances with Random(seed), writes them; returns (count, temps)."""
  params = _Params(tokenizer, config.max_seq_length, config.short_seq_prob,
                   config.masked_lm_prob, config.max_predictions_per_seq,
                   config.do_whole_word_mask)
  progress.begin_part(progress.part, total_bytes)
  corpus = read_corpus(files, tokenizer, progress)
  if corpus.num_documents == 0 and commit:
    raise UsageError("--input_file %s: the corpus is empty (no line tokenizes to anything)"
                     % ",".join(f if isinstance(f, str) else f[0] for f in files))
  words = RandomWords(random.Random(seed))
  order = document_order(corpus, words)
  store = InstanceStore()
  progress.set_totals(doc_steps=corpus.num_documents * config.dupe_factor)
  generate_instances(corpus, order, params, words, config.dupe_factor, store, progress)
  final = words.permutation(len(store))
  if commit:
    logging.info("*** Writing to output files ***")
    for path in output_files:
      logging.info("  %s", path)
  progress.set_totals(instances=len(store))
  inv_vocab = tokenizer.inv_vocab if hasattr(tokenizer, "inv_vocab") else {
      v: k for k, v in tokenizer.vocab.items()}
  result = write_instances(store, final, corpus.tokens, params, output_files, inv_vocab,
                           progress, log_examples=log_examples, commit=commit,
                           temp_tag=temp_tag)
  return len(store), (None if commit else result)


def part_output_files(output_files, part, num_parts):
  """--num_workers output names: <output_file>-<part:05d>-of-<num_parts:05d>."""
  return ["%s-%05d-of-%05d" % (path, part, num_parts) for path in output_files]


def part_seed(random_seed, part):
  """The seed of part `part` in --num_workers mode, derived from --random_seed."""
  digest = hashlib.sha256(b"bert_keras.create_pretraining_data/%d/%d" % (random_seed, part))
  return int.from_bytes(digest.digest()[:8], "little")


def plan_parts(input_files, num_parts):
  """Splits the input files into `num_parts` byte ranges of about equal size at line starts.

  Returns a list (one per part) of lists of (path, start, end).
  """
  sizes = [_file_size(path) for path in input_files]
  total = sum(sizes)
  cuts = []  # global offsets where a part starts (line starts)
  starts = np.cumsum([0] + sizes)
  for k in range(1, num_parts):
    target = (total * k) // num_parts
    index = int(np.searchsorted(starts, target, side="right") - 1)
    index = min(index, len(sizes) - 1)
    local = target - int(starts[index])
    if local > 0:
      with _open_read(input_files[index]) as reader:
        reader.seek(local - 1)
        while True:
          data = reader.read(1 << 16)
          if not data:
            local = sizes[index]
            break
          newline = data.find(b"\n")
          if newline >= 0:
            local += newline
            break
          local += len(data)
    cuts.append(max(int(starts[index]) + local, cuts[-1] if cuts else 0))
  bounds = [0] + cuts + [total]
  parts = []
  for k in range(num_parts):
    lo, hi = bounds[k], bounds[k + 1]
    pieces = []
    for index, path in enumerate(input_files):
      f0, f1 = int(starts[index]), int(starts[index + 1])
      s, e = max(lo, f0), min(hi, f1)
      if s < e:
        pieces.append((path, s - f0, e - f0))
    parts.append(pieces)
  return parts


_WORKER = {}


def _worker_init(config, counters, fractions, tokenizer):
  logging.set_verbosity(logging.INFO)
  _WORKER["config"] = config
  _WORKER["counters"] = counters
  _WORKER["fractions"] = fractions
  _WORKER["tokenizer"] = tokenizer if tokenizer is not None else _make_tokenizer(config)


def _worker_run(task):
  part, num_parts, pieces, tag = task
  config = _WORKER["config"]
  progress = Progress(1, parts=num_parts, counters=_WORKER["counters"],
                      fractions=_WORKER["fractions"], enabled=False)
  progress.part = part
  outputs = part_output_files(config.output_files, part, num_parts)
  count, _ = _process(config, _WORKER["tokenizer"], pieces,
                       part_seed(config.random_seed, part), outputs, progress,
                       20 if part == 0 else 0, False, sum(e - s for _, s, e in pieces), tag)
  progress._add(3, count)  # pylint: disable=protected-access
  return part, count


def run(config):
  """Runs create_pretraining_data; returns the number of instances written."""
  _self_check()
  tokenizer = _make_tokenizer(config)
  logging.info("*** Reading from input files ***")
  for path in config.input_files:
    logging.info("  %s", path)
  sizes = [_file_size(path) for path in config.input_files]
  total_bytes = sum(sizes)
  if config.num_workers == 1:
    progress = Progress(total_bytes, enabled=config.progress)
    count, _ = _process(config, tokenizer, config.input_files, config.random_seed,
                        config.output_files, progress, 20, True, total_bytes)
    progress.finish()
    logging.info("Wrote %d total instances", count)
    return count
  return _run_parallel(config, tokenizer, total_bytes)


def _run_parallel(config, tokenizer, total_bytes):
  part_bytes = int(config.part_size_mb * (1 << 20))
  n = config.num_workers
  num_parts = n * max(1, -(-total_bytes // (n * part_bytes)))
  parts = plan_parts(config.input_files, num_parts)
  use_fork = ("fork" in multiprocessing.get_all_start_methods() and
              "tensorflow" not in sys.modules)
  ctx = multiprocessing.get_context("fork" if use_fork else "spawn")
  counters = ctx.Array("q", 5)
  fractions = ctx.Array("d", num_parts, lock=False)
  progress = Progress(total_bytes, parts=num_parts, counters=counters, fractions=fractions,
                      enabled=config.progress)
  logging.info("*** Writing to output files (%d parts over %d workers) ***", num_parts, n)
  for path in config.output_files:
    logging.info("  %s", part_output_files([path], 0, num_parts)[0].replace(
        "-00000-of-", "-?????-of-"))
  done = threading.Event()

  def report():
    while not done.wait(max(progress.interval, 0.05)):
      progress.maybe_report(force=True)

  results = []
  outputs = [part_output_files(config.output_files, p, num_parts) for p in range(num_parts)]
  tag = "%d" % os.getpid()
  temps = [(_temp_name(path, tag), path) for names in outputs for path in names]
  committed = False
  try:
    # The workers are forked when the pool starts; the reporter thread only after that
    # (forking while another thread holds the logging lock would deadlock the child).
    with ctx.Pool(n, initializer=_worker_init,
                  initargs=(config, counters, fractions, tokenizer if use_fork else None)) as pool:
      reporter = threading.Thread(target=report, daemon=True)
      reporter.start()
      tasks = [(p, num_parts, parts[p], tag) for p in range(num_parts)]
      for part, count in pool.imap_unordered(_worker_run, tasks):
        results.append((part, count))
    total = sum(count for _, count in results)
    if total == 0:
      raise UsageError("--input_file %s: the corpus is empty (no line tokenizes to anything)"
                       % ",".join(config.input_files))
    for temp, path in temps:
      _rename(temp, path)
    committed = True
  finally:
    done.set()
    if not committed:
      for temp, _ in temps:
        _remove_quietly(temp)
  progress.finish()
  for part, count in sorted(results):
    logging.info("part %d: %d instances", part, count)
  logging.info("Wrote %d total instances", total)
  return total


# --------------------------------------------------------------------------
# Command line
# --------------------------------------------------------------------------

def define_original_flags():
  """Defines the original's flags (same names, defaults, meaning); returns absl's FLAGS."""
  from absl import flags  # pylint: disable=g-import-not-at-top
  flags.DEFINE_string("input_file", None,
                      "Input raw text file (or comma-separated list of files; globs allowed).")
  flags.DEFINE_string("output_file", None,
                      "Output TF example file (or comma-separated list of files).")
  flags.DEFINE_string("vocab_file", None,
                      "The vocabulary file that the BERT model was trained on.")
  flags.DEFINE_bool("do_lower_case", True,
                    "Whether to lower case the input text. Should be True for uncased "
                    "models and False for cased models.")
  flags.DEFINE_bool("do_whole_word_mask", False,
                    "Whether to use whole word masking rather than per-WordPiece masking.")
  flags.DEFINE_integer("max_seq_length", 128, "Maximum sequence length.")
  flags.DEFINE_integer("max_predictions_per_seq", 20,
                       "Maximum number of masked LM predictions per sequence.")
  flags.DEFINE_integer("random_seed", 12345, "Random seed for data generation.")
  flags.DEFINE_integer("dupe_factor", 10,
                       "Number of times to duplicate the input data (with different masks).")
  flags.DEFINE_float("masked_lm_prob", 0.15, "Masked LM probability.")
  flags.DEFINE_float("short_seq_prob", 0.1,
                     "Probability of creating sequences which are shorter than the "
                     "maximum length.")
  flags.mark_flag_as_required("input_file")
  flags.mark_flag_as_required("output_file")
  flags.mark_flag_as_required("vocab_file")
  return flags.FLAGS


def define_flags():
  """Defines the original's flags plus --num_workers, --part_size_mb and --progress."""
  from absl import flags  # pylint: disable=g-import-not-at-top
  global FLAGS
  define_original_flags()
  flags.DEFINE_integer(
      "num_workers", 1,
      "Parallel processes. 1 (default): the original's records exactly. N > 1: the input is "
      "split at line boundaries into a multiple of N parts of about --part_size_mb, part p "
      "uses a seed derived from --random_seed and p and writes "
      "<output_file>-<p:05d>-of-<parts:05d> (for each output file); deterministic for a "
      "given N, same statistics as the original.")
  flags.DEFINE_float("part_size_mb", 64,
                     "With --num_workers > 1: the largest part of the input (MB) one worker "
                     "holds in memory at a time.")
  flags.DEFINE_bool("progress", True,
                    "Show progress (documents read, instances written, rate, ETA): a line "
                    "updated in place on a terminal, an INFO line every 30 s otherwise.")
  FLAGS = flags.FLAGS


def main(_):
  logging.set_verbosity(logging.INFO)
  try:
    input_files = expand_input_patterns(FLAGS.input_file)
    if not input_files:
      raise UsageError("--input_file %s: no files match" % FLAGS.input_file)
    config = Config(
        input_files, FLAGS.output_file.split(","), FLAGS.vocab_file,
        do_lower_case=FLAGS.do_lower_case, do_whole_word_mask=FLAGS.do_whole_word_mask,
        max_seq_length=FLAGS.max_seq_length,
        max_predictions_per_seq=FLAGS.max_predictions_per_seq,
        random_seed=FLAGS.random_seed, dupe_factor=FLAGS.dupe_factor,
        masked_lm_prob=FLAGS.masked_lm_prob, short_seq_prob=FLAGS.short_seq_prob,
        num_workers=FLAGS.num_workers, part_size_mb=FLAGS.part_size_mb,
        progress=FLAGS.progress)
    run(config)
  except UsageError as e:
    raise SystemExit("error: %s" % e) from None


if __name__ == "__main__":
  from absl import app  # pylint: disable=g-import-not-at-top
  define_flags()
  app.run(main)
