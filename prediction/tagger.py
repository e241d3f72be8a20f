"""export_saved_model.py --task=tagger: a BertTokenClassifier as a SavedModel over raw text, in
TensorFlow's own ops (it loads with tf.saved_model.load in a process that imports only
TensorFlow).

TaggerModule(model, preprocessor, labels).serve(text_a) takes tf.string [B] and returns
  words     tf.string [B, W]  the BasicTokenizer's words of each text ("" padding)
  starts    int64 [B, W]      each word's first byte in the UTF-8 text (-1 padding)
  ends      int64 [B, W]      the byte after its last one, so text[start:end] is the word
  tags      tf.string [B, W]  the tag of its first WordPiece ("O" for a word without pieces or
                              past max_seq_length - 2 pieces; "" padding)
  scores    float32 [B, W]    that tag's softmax probability (0 where the tag is a fallback)
  label_names tf.string [B, N]  the N tags in the order of the model's outputs (the same row
                              for every text, tiled to the batch as serving.py's classifier)
  entity_types, entity_starts, entity_ends, entity_scores  [B, E]: the chunks of the tags
                              (conlleval's rules, utils/conlleval.py): type, first byte,
                              byte after the last, the mean score of their words ("", -1, 0
                              padding)
Words: the text's characters (invalid UTF-8 bytes skipped) split as the original BasicTokenizer
splits them: at whitespace (its whitespace and str.isspace), with each punctuation character
(its definition) and each CJK ideograph a word of its own; control characters (which its
cleaning deletes) join the word around them but are not part of its offsets. Each word's
WordPieces are the preprocessor's (the original FullTokenizer's) of that word; the model sees
[CLS] the pieces [SEP] of the text (one window; run_ner.py splits longer sentences into
windows instead).
"""

import functools
import sys
import unicodedata

import keras
import numpy as np
import tensorflow as tf

from bert_keras.utils import conlleval

SPACE, WORD, SINGLE, CONTROL = 0, 1, 2, 3
OUTSIDE = "O"
_CJK = ((0x4E00, 0x9FFF), (0x3400, 0x4DBF), (0x20000, 0x2A6DF), (0x2A700, 0x2B73F),
        (0x2B740, 0x2B81F), (0x2B820, 0x2CEAF), (0xF900, 0xFAFF), (0x2F800, 0x2FA1F))


def character_class(cp):
  """The BasicTokenizer's view of code point cp: CONTROL (deleted by its cleaning: NUL,
  U+FFFD, Cc/Cf but tab and newlines), SPACE (its whitespace, or str.isspace), SINGLE
  (punctuation: non-alphanumeric printable ASCII or Unicode P*; or a CJK ideograph) or WORD."""
  char = chr(cp)
  category = unicodedata.category(char)
  if cp in (0, 0xFFFD) or (char not in "\t\n\r" and category in ("Cc", "Cf")):
    return CONTROL
  if char in " \t\n\r" or category == "Zs" or char.isspace():
    return SPACE
  if ((33 <= cp <= 47) or (58 <= cp <= 64) or (91 <= cp <= 96) or (123 <= cp <= 126)
      or category.startswith("P") or any(a <= cp <= b for a, b in _CJK)):
    return SINGLE
  return WORD


@functools.lru_cache(maxsize=1)
def character_table():
  """(range starts int32 [R], classes int32 [R]): code point c has the class of the last range
  starting at or before c."""
  starts, classes, last = [], [], None
  for cp in range(sys.maxunicode + 1):
    if 0xD800 <= cp <= 0xDFFF:  # surrogates: never decoded from UTF-8
      continue
    kind = character_class(cp)
    if kind != last:
      starts.append(cp)
      classes.append(kind)
      last = kind
  return np.array(starts, np.int32), np.array(classes, np.int32)


def split_words(texts, table):
  """texts tf.string [B] -> (words tf.string, starts int64, ends int64), each ragged
  [B, (W)] (see the module docstring). table: character_table() as tensors."""
  chars, offsets = tf.strings.unicode_decode_with_offsets(texts, "UTF-8", errors="ignore")
  cp, offset = chars.flat_values, offsets.flat_values
  rows = chars.value_rowids()
  first_in_row = tf.range(tf.shape(cp, out_type=tf.int64)[0]) == tf.gather(
      chars.row_splits, rows)
  kind = tf.gather(table[1], tf.searchsorted(table[0], cp, side="right") - 1)
  joins = (kind == WORD) | (kind == CONTROL)
  after_join = tf.concat([[False], joins[:-1]], 0) & ~first_in_row
  begins = (kind == SINGLE) | (joins & ~after_join)
  word_of = tf.cumsum(tf.cast(begins, tf.int64)) - 1
  count = tf.reduce_sum(tf.cast(begins, tf.int64))
  shown = (kind == WORD) | (kind == SINGLE)   # the characters that make its offsets
  length = (1 + tf.cast(cp >= 0x80, tf.int64) + tf.cast(cp >= 0x800, tf.int64)
            + tf.cast(cp >= 0x10000, tf.int64))
  big = tf.constant(np.iinfo(np.int64).max, tf.int64)
  start = tf.math.unsorted_segment_min(tf.where(shown, offset, big), tf.maximum(word_of, 0),
                                       count)
  end = tf.math.unsorted_segment_max(tf.where(shown, offset + length, -1),
                                     tf.maximum(word_of, 0), count)
  real = end >= 0   # words of control characters only are none
  word_rows = tf.boolean_mask(tf.boolean_mask(rows, begins), real)
  start, end = tf.boolean_mask(start, real), tf.boolean_mask(end, real)
  words = tf.strings.substr(tf.gather(texts, word_rows), start, end - start, unit="BYTE")
  nrows = tf.shape(texts, out_type=tf.int64)[0]

  def ragged(values):
    return tf.RaggedTensor.from_value_rowids(values, word_rows, nrows=nrows)
  return ragged(words), ragged(start), ragged(end)


def chunk_tables(labels):
  """(tags, types, starts, ends): the tags with "O" appended when absent (the fallback tag),
  each tag's chunk type, and bool [T, T] tables of conlleval's rules: starts[p, t] = a chunk
  starts at tag t after tag p; ends[p, t] = the chunk of p ends before t."""
  tags = list(labels) + ([] if OUTSIDE in labels else [OUTSIDE])
  split = [conlleval.split_tag(tag) for tag in tags]
  starts = np.array([[conlleval.chunk_starts(p[0], t[0], p[1], t[1]) for t in split]
                     for p in split])
  ends = np.array([[conlleval.chunk_ends(p[0], t[0], p[1], t[1]) for t in split]
                   for p in split])
  return tags, [kind for _, kind in split], starts, ends


class TaggerModule(tf.Module):
  """The exported object: a BertTokenClassifier, a preprocessing.BertPreprocessor (its
  WordPiece step, core ops) and the tag set; serve(text_a) as the module docstring says."""

  def __init__(self, model, preprocessor, labels):
    super().__init__(name="bert_tagger")
    if len(labels) != model.num_labels:
      raise ValueError(f"{len(labels)} tags for a model of {model.num_labels} outputs")
    self.model = model
    self.preprocessor = preprocessor
    tags, types, starts, ends = chunk_tables(labels)
    table = character_table()
    with tf.init_scope():
      self._table = (tf.constant(table[0]), tf.constant(table[1]))
      self._tags = tf.constant(tags)
      self._types = tf.constant(types)
      self._starts, self._ends = tf.constant(starts), tf.constant(ends)
      self._label_names = tf.constant([str(label) for label in labels])
    self._outside = tags.index(OUTSIDE)
    vocabulary = preprocessor.vocabulary
    self._cls, self._sep = vocabulary.index("[CLS]"), vocabulary.index("[SEP]")
    self.serve = tf.function(self._serve,
                             input_signature=[tf.TensorSpec([None], tf.string)])

  def _pieces(self, words):
    """words ragged [B, (W)] -> (input_ids, input_mask int32 [B, L], first piece position of
    each word int64 [W total] (-1: none in the window))."""
    max_pieces = self.preprocessor.max_seq_length - 2
    ids = self.preprocessor.encode(words.flat_values)   # [W total, (pieces)]
    counts = ids.row_lengths()
    before = tf.concat([[0], tf.cumsum(counts)], 0)
    offset = before[:-1] - tf.gather(before, tf.gather(words.row_splits, words.value_rowids()))
    position = tf.where((counts > 0) & (offset < max_pieces), offset + 1, -1)
    pieces = tf.RaggedTensor.from_row_splits(ids, words.row_splits).merge_dims(1, 2)
    pieces = pieces[:, :max_pieces]
    rows = tf.shape(pieces.row_splits, out_type=tf.int64)[0] - 1
    edge = lambda token: tf.RaggedTensor.from_tensor(tf.fill([rows, 1], token))
    tokens = tf.concat([edge(self._cls), pieces, edge(self._sep)], axis=1)
    input_ids = tokens.to_tensor(0)
    input_mask = tf.sequence_mask(tokens.row_lengths(), tf.shape(input_ids)[1], tf.int32)
    return input_ids, input_mask, position

  def _serve(self, text_a):
    words, starts, ends = split_words(text_a, self._table)
    input_ids, input_mask, position = self._pieces(words)
    logits = self.model({"input_ids": input_ids, "input_mask": input_mask,
                         "segment_ids": tf.zeros_like(input_ids)}, training=False)
    probabilities = tf.nn.softmax(tf.cast(logits, tf.float32), axis=-1)
    rows = words.value_rowids()
    at = tf.stack([rows, tf.maximum(position, 0)], axis=1)
    word_probabilities = tf.gather_nd(probabilities, at)   # [W total, N]
    valid = position >= 0
    tag_ids = tf.where(valid, tf.argmax(word_probabilities, axis=-1), self._outside)
    scores = tf.where(valid, tf.reduce_max(word_probabilities, axis=-1), 0.0)
    entities = self._entities(words, tag_ids, scores, starts.flat_values, ends.flat_values)
    dense = lambda values, fill: words.with_flat_values(values).to_tensor(fill)
    return {"words": words.to_tensor(""), "starts": starts.to_tensor(-1),
            "ends": ends.to_tensor(-1), "tags": dense(tf.gather(self._tags, tag_ids), ""),
            "scores": dense(scores, 0.0), **entities,
            "label_names": tf.tile(self._label_names[None], [tf.shape(text_a)[0], 1])}

  def _entities(self, words, tag_ids, scores, starts, ends):
    """The chunks of the tags (conlleval's rules; a text starts after an O) as padded
    [B, E] entity_types, entity_starts, entity_ends, entity_scores."""
    first = tf.range(tf.shape(tag_ids, out_type=tf.int64)[0]) == tf.gather(
        words.row_splits, words.value_rowids())
    previous = tf.where(first, tf.cast(self._outside, tf.int64),
                        tf.concat([[0], tag_ids[:-1]], 0))
    pairs = tf.stack([previous, tag_ids], axis=1)
    begins = tf.gather_nd(self._starts, pairs)
    boundary = begins | tf.gather_nd(self._ends, pairs) | first
    segment = tf.cumsum(tf.cast(boundary, tf.int64)) - 1
    count = tf.reduce_sum(tf.cast(boundary, tf.int64))
    is_entity = tf.boolean_mask(begins, boundary)        # per segment
    total = tf.math.unsorted_segment_sum(scores, segment, count)
    size = tf.math.unsorted_segment_sum(tf.ones_like(scores), segment, count)
    last_end = tf.math.unsorted_segment_max(ends, segment, count)
    pick = lambda values: tf.boolean_mask(values, is_entity)
    rows = pick(tf.boolean_mask(words.value_rowids(), boundary))
    nrows = words.nrows()

    def dense(values, fill):
      return tf.RaggedTensor.from_value_rowids(values, rows, nrows=nrows).to_tensor(fill)
    return {"entity_types": dense(pick(tf.gather(self._types, tf.boolean_mask(
                tag_ids, boundary))), ""),
            "entity_starts": dense(pick(tf.boolean_mask(starts, boundary)), -1),
            "entity_ends": dense(pick(last_end), -1),
            "entity_scores": dense(pick(total / size), 0.0)}

  def export_archive(self):
    """A keras.export.ExportArchive of the model's variables and serving_default (as
    serving.ServingModule's)."""
    archive = keras.export.ExportArchive()
    archive.track(self.model)
    archive.add_endpoint("serving_default", self.serve,
                         input_signature=[tf.TensorSpec([None], tf.string)])
    return archive
