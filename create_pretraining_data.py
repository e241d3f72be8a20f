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
Mersenne-Twister output of the original's generator is read in bulk and its
`random()`, `randint()` and `shuffle()` are replayed on those words with exactly
the same results (random_replay.py); records are serialized and framed as
TFRecords with numpy, many records at a time (tfrecord_encoding.py), without
importing TensorFlow (it is imported only for paths with a scheme, such as gs://:
file_io.py).

Bounded memory: all instances must exist before the original's final shuffle
decides the order, but they are kept in compact arrays (about 200 bytes per
instance instead of about 4 KB of Python lists of str), and records are
written straight from them in the final order, a batch at a time.

--num_workers N > 1 (not in the original) splits the input into parts at line
boundaries (about --part_size_mb each, a multiple of N parts), gives part p the
seed derived from (--random_seed, p), and writes part p to
`<output_file>-<p:05d>-of-<P:05d>` for every output file: the same statistics
as the original, deterministic for a given N, in parallel processes, and with
memory bounded by the part size rather than the corpus (parallel_parts.py).
"""

try:  # outside the venv: a one-line hint, not a traceback
  from bert_keras.utils import errors  # (first: it imports absl)
except ImportError as e:
  raise SystemExit(f"error: {e} (activate .venv: source .venv/bin/activate, or pip install -e .)")

import array
import itertools
import os
import random
import types

import numpy as np
from absl import logging

from bert_keras import tokenization
from bert_keras.pretraining_data import data_progress as progress_lib
from bert_keras.pretraining_data import parallel_parts
from bert_keras.pretraining_data import random_replay
from bert_keras.pretraining_data import tfrecord_encoding
from bert_keras.runtime import option_checks as checks
from bert_keras.utils import file_io
from bert_keras.utils import text_lines

FLAGS = None


class UsageError(ValueError):
  """Bad input from the user: the message names the flag, file or line at fault."""


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
# Reading: documents as token ids in flat arrays
# --------------------------------------------------------------------------

class Corpus(object):
  """Documents of token ids, compactly.

  tokens: [num_tokens] int array, every segment (non-empty line) of every
    non-empty document concatenated, in file order.
  seg_start: [num_segments + 1] int64, segment s is tokens[seg_start[s]:seg_start[s+1]].
  doc_start: [num_documents + 1] int64, document d is segments doc_start[d] .. doc_start[d+1]-1.
  """

  def __init__(self, tokens, seg_start, doc_start):
    self.tokens = tokens
    self.seg_start = seg_start
    self.doc_start = doc_start

  @property
  def num_documents(self):
    return len(self.doc_start) - 1


def _iter_line_blocks(path, start=0, end=None, block_bytes=4 << 20):
  """Yields (list of str lines, bytes consumed) of path[start:end], as the original reads them.

  The original reads with tf.gfile.GFile(path, "r").readline(): lines end at
  "\\n" only, every "\\r" is dropped (TensorFlow's buffered reader does that),
  and the bytes are decoded as strict UTF-8.
  """
  with file_io.open_read(path) as reader:
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
          yield decode_lines([carry], path, line_no, start), 0
        return
      data = carry + data
      cut = data.rfind(b"\n") + 1
      carry = data[cut:]
      if cut:
        raw_lines = data[:cut - 1].split(b"\n")
        yield decode_lines(raw_lines, path, line_no, start), cut
        line_no += len(raw_lines)


def decode_lines(raw_lines, path, first_line_no, start=0):
  """Raw lines (bytes, no "\\n") -> str lines as the original reads them: "\\r" dropped, strict
  UTF-8 (an invalid byte: a UsageError naming the file and the line, first_line_no + 1 being
  the first's; `start`: the byte offset the numbering starts from, when not 0)."""
  joined = b"\n".join(raw_lines).replace(b"\r", b"")
  try:
    return joined.decode("utf-8").split("\n")
  except UnicodeDecodeError as e:
    raise UsageError(text_lines.message(
        e, "--input_file %s%s" % (path, " from byte %d" % start if start else ""),
        first_line_no + 1)) from None


def line_encoder(tokenizer):
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
  encode = line_encoder(tokenizer)
  current_doc = 0  # segments of the document being read
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
        for line, n in zip(batch, np.diff(splits).tolist()):
          if n:
            seg_lengths.append(n)
            current_doc += 1
          elif not line and current_doc:
            doc_sizes.append(current_doc)
            current_doc = 0
        tokens.frombytes(np.asarray(ids, dtype=np_dtype).tobytes())
      if progress is not None:
        progress.add_read(consumed, len(lines))
  if current_doc:
    doc_sizes.append(current_doc)
  return Corpus(np.frombuffer(tokens, dtype=np_dtype), _starts(seg_lengths), _starts(doc_sizes))


def _starts(sizes):
  """array('q') [n] of sizes -> int64 [n + 1]: where each starts, then the total."""
  starts = np.zeros(len(sizes) + 1, dtype=np.int64)
  np.cumsum(np.frombuffer(sizes, dtype=np.int64), out=starts[1:])
  return starts
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
    """(meta int64 [N, 6], offsets int64 [N + 1] into masked, masked int32 [total])."""
    meta = np.frombuffer(self.meta, dtype=np.int64).reshape(-1, 6)
    offsets = np.zeros(len(meta) + 1, dtype=np.int64)
    np.cumsum(2 * meta[:, 5], out=offsets[1:])
    return meta, offsets, np.frombuffer(self.masked, dtype=np.int32)


class InstanceParams(object):
  """The instance options (flags) and the vocab ids the generator needs."""

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
    self.subword_ids = frozenset(index for token, index in vocab.items()
                                 if token.startswith("##"))
    # num_to_predict for each len(tokens), with Python's round and float product.
    self.num_to_predict = [
        min(max_predictions_per_seq, max(1, int(round(n * masked_lm_prob))))
        for n in range(max_seq_length + 1)]


def check_bounds(table, **values):
  """The flags' `values` against option_checks' `table`: a UsageError in the table's wording
  ("--dupe_factor=0: must be >= 1") at the first one out of bounds."""
  try:
    checks.check(types.SimpleNamespace(**values), table)
  except ValueError as e:
    raise UsageError(str(e)) from None


def _validate(max_seq_length, masked_lm_prob, max_predictions_per_seq, short_seq_prob,
              dupe_factor):
  check_bounds({checks.AT_LEAST: {"max_seq_length": (5, "[CLS] a [SEP] b [SEP], a and b "
                                                       "non-empty")},
                checks.ABOVE_ZERO: ("masked_lm_prob",)},
               max_seq_length=max_seq_length, masked_lm_prob=masked_lm_prob)
  if not masked_lm_prob <= 1.0:
    raise UsageError("--masked_lm_prob=%r: must be in (0, 1]" % masked_lm_prob)
  check_bounds({checks.POSITIVE: ("max_predictions_per_seq", "dupe_factor"),
                checks.PROPORTION: ("short_seq_prob",)},
               max_predictions_per_seq=max_predictions_per_seq, dupe_factor=dupe_factor,
               short_seq_prob=short_seq_prob)


def document_order(corpus, words):
  """Draws the original's rng.shuffle(all_documents): returns the shuffled order (int64)."""
  num_docs = corpus.num_documents
  if num_docs == 0:
    return np.zeros(0, dtype=np.int64)
  return np.frombuffer(words.permutation(num_docs), dtype=np.int64)


def generate_instances(corpus, order, params, words, dupe_factor, store, progress=None,
                       words_for=None):
  """The original's create_instances_from_document for every document of every pass.

  `order` is the document shuffle (document_order), already drawn; draws come from
  `words` (a WordStream) in the original's order. Instances are appended to `store`
  in creation order (before the final shuffle). `words_for` (not in the original: a draw
  stream per document, so that a document's instances do not depend on the other documents):
  if given, `words_for(pass_index, document_index)` is called at the start of every document
  of every pass and returns the WordStream that document's draws come from (then `words` is
  unused); random-next documents are still drawn from the whole `corpus`.
  """
  random_replay.self_check()
  maker = _InstanceMaker(corpus, order, params, store)
  for pass_index in range(dupe_factor):
    for document_index in range(corpus.num_documents):
      if words_for is not None:
        words = words_for(pass_index, document_index)
      maker.create_instances_from_document(document_index, words)
      if progress is not None:
        progress.add_documents(1, len(store))
  return store


class _InstanceMaker(object):
  """The original's create_instances_from_document, truncate_seq_pair and
  create_masked_lm_predictions on token ids, every draw replayed on a WordStream.

  Hot loops read the words' top bits inline (see random_replay.WordStream); the
  comments name the original's draw each block replays.
  """

  def __init__(self, corpus, order, params, store):
    self.params = params
    self.store = store
    self.tokens = corpus.tokens
    self.seg_start = corpus.seg_start
    self.num_docs = corpus.num_documents
    # Segment ranges of the documents in the original's shuffled order.
    first_seg, end_seg = corpus.doc_start[order], corpus.doc_start[order + 1]
    if self.num_docs < (1 << 22):
      first_seg, end_seg = first_seg.tolist(), end_seg.tolist()
    self.first_seg, self.end_seg = first_seg, end_seg
    # Candidates are single tokens unless whole words are masked or the corpus holds
    # [CLS]/[SEP] tokens (never candidates): then _word_candidates groups them.
    self.single_token_candidates = not (params.do_whole_word_mask or bool(
        np.any((self.tokens == params.cls_id) | (self.tokens == params.sep_id))))
    vocab_size = len(params.vocab_word_ids)
    # randint(0, len(vocab_words) - 1) on the top 16 bits if they are enough.
    self.vocab_draw = ((random_replay.draw_step(vocab_size, 16),)
                       if vocab_size.bit_length() <= 16 else None)
    # Words one instance may use, reserved at its start (truncation reserves 2 more per
    # removed token): far above need (about 2 per token).
    self.reserve = 16 * params.max_seq_length + 4096
    self.shuffles = {}

  def create_instances_from_document(self, document_index, words):
    """Appends the instances of document `document_index` (in the shuffled order)."""
    d0, d1 = int(self.first_seg[document_index]), int(self.end_seg[document_index])
    offs = self.seg_start[d0:d1 + 1].tolist()  # token offsets of its segments, then its end
    max_num_tokens = self.params.max_num_tokens
    target_seq_length = max_num_tokens
    if words.random() < self.params.short_seq_prob:
      target_seq_length = words.randint(2, max_num_tokens)
    chunk_first = 0  # the current chunk is segments chunk_first .. i
    i = 0
    last = d1 - d0 - 1
    while i <= last:
      if i != last and offs[i + 1] - offs[chunk_first] < target_seq_length:
        i += 1
        continue
      words.reserve(self.reserve)
      n_chunk = i - chunk_first + 1
      a_end = 1 + words.randbelow(n_chunk - 1) if n_chunk >= 2 else 1  # randint(1, n - 1)
      a0, a1 = offs[chunk_first], offs[chunk_first + a_end]
      if n_chunk == 1:
        is_random_next = True
      else:  # random() < 0.5: the top bit of the first of its two words
        is_random_next = words.top8[words.pos] < 128
        words.pos += 2
      if is_random_next:
        b0, b1 = self.random_next_segments(words, document_index, target_seq_length - (a1 - a0))
        i -= n_chunk - a_end  # put the unused segments back
      else:
        b0, b1 = a1, offs[i + 1]
      self.add_instance(words, a0, a1 - a0, b0, b1 - b0, is_random_next)
      chunk_first = i + 1
      i += 1

  def random_next_segments(self, words, document_index, target_b_length):
    """Tokens b of a random next: segments of a random other document (10 tries), from a random
    segment on until target_b_length tokens. Returns token offsets (b_start, b_end)."""
    for _ in range(10):
      random_document_index = words.randbelow(self.num_docs)
      if random_document_index != document_index:
        break
    r0 = int(self.first_seg[random_document_index])
    r1 = int(self.end_seg[random_document_index])
    random_start = r0 + words.randbelow(r1 - r0)
    seg_start = self.seg_start
    b0 = int(seg_start[random_start])
    end = int(seg_start.searchsorted(b0 + target_b_length))
    end = min(max(end, random_start + 1), r1)
    return b0, int(seg_start[end])

  def add_instance(self, words, a0, la, b0, lb, is_random_next):
    """truncate_seq_pair, create_masked_lm_predictions, and the instance into the store."""
    excess = la + lb - self.params.max_num_tokens
    if excess > 0:
      words.reserve(self.reserve + 2 * excess)
      a0, la, b0, lb = self.truncate_seq_pair(words, a0, la, b0, lb)
    positions, replacements = self.create_masked_lm_predictions(words, a0, la, b0, lb)
    self.store.meta.extend((a0, la, b0, lb, int(is_random_next), len(positions)))
    self.store.masked.extend(positions)
    self.store.masked.extend(replacements)

  def truncate_seq_pair(self, words, a0, la, b0, lb):
    """Per removed token (from the longer of a and b): random() < 0.5 -> from the front."""
    max_num_tokens = self.params.max_num_tokens
    top8, p = words.top8, words.pos
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
    words.pos = p
    return a0, la, b0, lb

  def create_masked_lm_predictions(self, words, a0, la, b0, lb):
    """rng.shuffle(cand_indexes), then candidates in that order while they fit in
    num_to_predict. Returns (masked positions, in draw order; their new ids, -1: kept)."""
    num_to_predict = self.params.num_to_predict[la + lb + 3]
    if self.single_token_candidates:
      # Every position but [CLS] and the two [SEP]s; only the first num_to_predict are used.
      cand = list(range(1, la + 1))
      cand.extend(range(la + 2, la + lb + 2))
      words.pos = random_replay.replay_shuffle(cand, words.top16, words.top8, words.pos,
                                               self._shuffle_steps(len(cand), num_to_predict))
      positions = cand[:num_to_predict]
    else:
      groups = self._word_candidates(a0, la, b0, lb)
      words.pos = random_replay.replay_shuffle(groups, words.top16, words.top8, words.pos,
                                               self._shuffle_steps(len(groups)))
      positions = []
      for group in groups:  # groups never overlap: the original's covered-index check never fires
        if len(positions) >= num_to_predict:
          break
        if len(positions) + len(group) <= num_to_predict:
          positions.extend(group)
    return positions, self._replacements(words, len(positions))

  def _shuffle_steps(self, n, keep=None):
    steps = self.shuffles.get((n, keep))
    if steps is None:
      steps = self.shuffles[n, keep] = random_replay.shuffle_steps(n, keep)
    return steps

  def _word_candidates(self, a0, la, b0, lb):
    """The original's cand_indexes: every position but the [CLS]/[SEP] tokens, one group each;
    with whole-word masking a "##" piece joins the previous group (across a [SEP], as upstream)."""
    params = self.params
    cls_id, sep_id = params.cls_id, params.sep_id
    ids = ([cls_id] + self.tokens[a0:a0 + la].tolist() + [sep_id] +
           self.tokens[b0:b0 + lb].tolist() + [sep_id])
    subwords = params.subword_ids if params.do_whole_word_mask else ()
    groups = []
    for index, token in enumerate(ids):
      if token == cls_id or token == sep_id:
        continue
      if groups and token in subwords:
        groups[-1].append(index)
      else:
        groups.append([index])
    return groups

  def _replacements(self, words, count):
    """Per masked position: random() < 0.8 -> [MASK]; else random() < 0.5 -> kept (-1); else
    vocab_words[randint(0, len(vocab_words) - 1)]. Returns the new ids."""
    mask_id, vocab_ids = self.params.mask_id, self.params.vocab_word_ids
    vocab_draw = self.vocab_draw
    mask_threshold = 0.8 * random_replay.TWO53
    top8, top16, p = words.top8, words.top16, words.pos
    replacements = []
    for _ in range(count):
      w = top8[p]  # random() < 0.8 from the top 8 bits, or both words when they are 204
      if w < 204 or (w == 204 and (int(words.full[p]) >> 5) * 67108864.0 +
                     (int(words.full[p + 1]) >> 6) < mask_threshold):
        p += 2
        replacements.append(mask_id)
      elif top8[p + 2] < 128:
        p += 4
        replacements.append(-1)
      elif vocab_draw is not None:
        (index,), p = random_replay.randbelow_draws(top16, p + 4, vocab_draw)
        replacements.append(vocab_ids[index])
      else:
        words.pos = p + 4
        replacements.append(vocab_ids[words.randbelow(len(vocab_ids))])
        top8, top16, p = words.top8, words.top16, words.pos
    words.pos = p
    return replacements

# --------------------------------------------------------------------------
# Writing: the original's write_instance_to_example_files, from the store
# --------------------------------------------------------------------------


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
  has, positions, repl = _masked_positions(meta, offsets[idx], masked, seq, preds)
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


def _masked_positions(meta, offsets, masked, seq, preds):
  """Masked positions, sorted, and their new ids (-1: kept) of instances `meta` [B, 6] whose
  masked entries start at `offsets` [B] of `masked`: (has [B, preds] bool, positions [B,
  preds] int64 (0 where not has), new ids [B, preds])."""
  rows = len(meta)
  nm = meta[:, 5:6]
  k = np.arange(preds, dtype=np.int64)[None, :]
  has = k < nm
  if len(masked):
    off = offsets[:, None]
    positions = np.where(has, masked[np.where(has, off + k, 0)], seq)
    repl = np.where(has, masked[np.where(has, off + nm + k, 0)], -1)
    order = np.argsort(positions, axis=1, kind="stable")
    positions = np.take_along_axis(positions, order, axis=1)
    repl = np.take_along_axis(repl, order, axis=1)
    positions = np.where(has, positions, 0).astype(np.int64)
  else:
    positions = np.zeros((rows, preds), dtype=np.int64)
    repl = np.full((rows, preds), -1, dtype=np.int64)
  return has, positions, repl


def log_example(features, row, length, inv_vocab):
  """Logs instance `row` of instance_features (its real length `length`) as the original logs
  its first instances."""
  logging.info("*** Example ***")
  ids = features["input_ids"][row, :length].tolist()
  logging.info("tokens: %s" % " ".join(
      tokenization.printable_text(inv_vocab[x]) for x in ids))
  for name, _ in tfrecord_encoding.FEATURES:
    values = features[name][row].tolist()
    logging.info("%s: %s" % (name, " ".join(str(x) for x in values)))


def record_value_bytes(params):
  """Varint bytes enough for every value of each int feature (encode_records' value_bytes)."""
  max_id = max(params.vocab_word_ids + [params.cls_id, params.sep_id, params.mask_id])
  id_bytes = tfrecord_encoding.varint_bytes_for(max_id)
  return {"input_ids": id_bytes, "masked_lm_ids": id_bytes, "input_mask": 1,
          "segment_ids": 1, "next_sentence_labels": 1,
          "masked_lm_positions": tfrecord_encoding.varint_bytes_for(params.max_seq_length)}


def write_instances(store, order, tokens, params, output_files, inv_vocab, progress=None,
                    log_examples=20, batch_size=1024, commit=True, temp_tag=None):
  """Writes instances in `order` round-robin over output_files (instance k -> file k mod n).

  Each file is written to a temporary name and renamed when complete (unless
  not `commit`: then the temporary names are returned for the caller to
  rename); on an error no output (temporary or final) is left behind.
  Returns the number of instances written, or the temporary names.
  """
  temps = [file_io.temp_name(path, temp_tag) for path in output_files]
  writers = []
  try:
    for temp in temps:
      writers.append(file_io.open_write(temp))
    _write_records(writers, store, np.asarray(order, dtype=np.int64), tokens, params,
                   inv_vocab, progress, log_examples, batch_size)
    for writer in writers:
      writer.close()
    if not commit:
      return temps
    for temp, path in zip(temps, output_files):
      file_io.rename(temp, path)
  except BaseException:
    for writer in writers:
      try:
        writer.close()
      except Exception:
        pass
    for temp in temps:
      file_io.remove_quietly(temp)
    raise
  return len(order)


def _write_records(writers, store, order, tokens, params, inv_vocab, progress, log_examples,
                   batch_size):
  """The records of instances `order`, round-robin over `writers`, batch_size per file at once."""
  views = store.views()
  value_bytes = record_value_bytes(params)
  crc = tfrecord_encoding.Crc32c(1024)
  n_files = len(writers)
  step = batch_size * n_files
  for g0 in range(0, len(order), step):
    batch = order[g0:g0 + step]
    features, lengths = instance_features(views, tokens, batch, params)
    for row in range(max(0, min(log_examples - g0, len(batch)))):
      log_example(features, row, int(lengths[row]), inv_vocab)
    for f in range(n_files):
      rows = np.arange(f, len(batch), n_files)
      if not len(rows):
        continue
      if n_files > 1:
        sub = {name: value[rows] for name, value in features.items()}
        sub_lengths = lengths[rows]
      else:
        sub, sub_lengths = features, lengths
      writers[f].write(tfrecord_encoding.encode_records(sub, value_bytes, crc,
                                                        sub_lengths).tobytes())
    if progress is not None:
      progress.add_written(len(batch))


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
  params = InstanceParams(tokenizer, max_seq_length, short_seq_prob, masked_lm_prob,
                          max_predictions_per_seq, do_whole_word_mask)
  corpus = read_corpus(list(input_files), tokenizer)
  words = random_replay.RandomWords(rng)
  order = document_order(corpus, words)
  store = InstanceStore()
  generate_instances(corpus, order, params, words, dupe_factor, store)
  final = words.permutation(len(store))
  words.sync()
  inv_vocab = {v: k for k, v in tokenizer.vocab.items()}
  return to_training_instances(store, final, corpus.tokens, params, inv_vocab)


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
    check_bounds({checks.POSITIVE: ("num_workers",), checks.ABOVE_ZERO: ("part_size_mb",)},
                 num_workers=num_workers, part_size_mb=part_size_mb)
    if not self.input_files:
      raise UsageError("--input_file: no files match")
    if not self.output_files or not all(self.output_files):
      raise UsageError("--output_file %r: empty file name" % ",".join(self.output_files))
    for path in self.output_files:
      if not file_io.is_remote(path):
        directory = os.path.dirname(path) or "."
        if not os.path.isdir(directory):
          raise UsageError("--output_file %s: %s %s" % (
              path, directory, "is not a directory" if os.path.exists(directory)
              else "does not exist"))
        if os.path.isdir(path):
          raise UsageError("--output_file %s: is a directory, not a file name" % path)
    for path in self.input_files:
      if not file_io.is_remote(path) and not os.path.isfile(path):
        raise UsageError("--input_file %s: not a readable file" % path)


def make_tokenizer(config):
  """The FullTokenizer of config.vocab_file; a UsageError if it is unreadable or lacks
  [CLS], [SEP] or [MASK]."""
  try:
    tokenizer = tokenization.FullTokenizer(
        vocab_file=config.vocab_file, do_lower_case=config.do_lower_case)
  except (OSError, IOError, UnicodeDecodeError, ValueError) as e:
    raise UsageError("--vocab_file %s: %s" % (config.vocab_file, e)) from None
  _check_vocab(tokenizer, config.vocab_file)
  return tokenizer


def create_and_write(config, tokenizer, files, seed, output_files, progress, log_examples=20,
                     commit=True, total_bytes=1, temp_tag=None):
  """Reads `files`, creates the instances with Random(seed), writes them to output_files
  (under temporary names if not `commit`); returns the number of instances."""
  params = InstanceParams(tokenizer, config.max_seq_length, config.short_seq_prob,
                          config.masked_lm_prob, config.max_predictions_per_seq,
                          config.do_whole_word_mask)
  progress.begin_part(progress.part, total_bytes)
  corpus = read_corpus(files, tokenizer, progress)
  if corpus.num_documents == 0 and commit:
    raise UsageError("--input_file %s: the corpus is empty (no line tokenizes to anything)"
                     % ",".join(f if isinstance(f, str) else f[0] for f in files))
  words = random_replay.RandomWords(random.Random(seed))
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
  write_instances(store, final, corpus.tokens, params, output_files, inv_vocab, progress,
                  log_examples=log_examples, commit=commit, temp_tag=temp_tag)
  return len(store)


def remove_dead_temporaries(output_files):
  """Removes the .<output>[-<p>-of-<P>].tmp-<pid> files of `output_files` whose writer is gone
  (file_io.remove_stale_temporaries), with a log line each."""
  by_directory = {}
  for path in output_files:
    directory, name = os.path.split(path)
    by_directory.setdefault(directory or ".", set()).add(name)
  for directory, names in sorted(by_directory.items()):
    file_io.remove_stale_temporaries(directory, finals=names, log=logging.warning)


def run(config):
  """Runs create_pretraining_data; returns the number of instances written. First removes the
  temporaries of its output files that runs which died before finishing left."""
  random_replay.self_check()
  remove_dead_temporaries(config.output_files)
  tokenizer = make_tokenizer(config)
  logging.info("*** Reading from input files ***")
  for path in config.input_files:
    logging.info("  %s", path)
  total_bytes = sum(file_io.file_size(path) for path in config.input_files)
  if config.num_workers > 1:
    count = parallel_parts.run_parallel(config, tokenizer, total_bytes, create_and_write,
                                        make_tokenizer)
    if count == 0:
      raise UsageError("--input_file %s: the corpus is empty (no line tokenizes to anything)"
                       % ",".join(config.input_files))
    return count
  progress = progress_lib.Progress(total_bytes, enabled=config.progress)
  count = create_and_write(config, tokenizer, config.input_files, config.random_seed,
                           config.output_files, progress, total_bytes=total_bytes)
  progress.finish()
  logging.info("Wrote %d total instances", count)
  return count


# --------------------------------------------------------------------------
# Command line
# --------------------------------------------------------------------------

def define_original_flags():
  """Defines the original's flags (same names, defaults, meaning); returns absl's FLAGS."""
  from absl import flags
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
  from absl import flags
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
  with errors.one_line_errors():
    input_files = file_io.expand_input_patterns(FLAGS.input_file)
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


if __name__ == "__main__":
  from absl import app
  define_flags()
  app.run(main, flags_parser=errors.parse_flags)
