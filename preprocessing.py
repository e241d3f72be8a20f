"""Text to BERT's inputs: [CLS] text_a [SEP] (segment 0) [text_b [SEP]] (segment 1), padded.

The packing of the original's run_classifier.convert_single_example (and extract_features),
in two forms:
  * truncate_seq_pair, pack_tokens: Python, shared by run_classifier.py and
    extract_features.py (WordPieces of one or two texts -> lists of max_seq_length ints);
  * BertPreprocessor: a Keras layer that does the original FullTokenizer and the same packing
    on a batch of strings (or string pairs) with TensorFlow ops (and tensorflow-text's
    WordPiece op), no Python at run time, so it runs in tf.data,
    in a functional keras.Model and in a SavedModel, with the original's output.

How BertPreprocessor stays exact. Every character class and mapping comes from Python's own
unicodedata and str methods (the ones the original calls), computed once per process into one
int32 per code point (a two-level table: 4,352 blocks of 256 code points, identical blocks
stored once). No TensorFlow or ICU case-mapping, normalization or regex class is used, so
their Unicode versions and definitions (RE2's \\s, ICU's lower-casing) never enter. A text
of printable ASCII, \\t, \\n and \\r only takes a fast path where steps 1-4 reduce to ASCII
lower-casing and the splitting that tensorflow-text's WordPiece op does itself (exactly the
original's for these characters); any other text takes these steps in TF ops:
  1. UTF-8 bytes -> code points, invalid bytes dropped (as bytes.decode("utf-8", "ignore"));
  2. cleaning: NUL, U+FFFD and Cc/Cf characters other than \\t \\n \\r deleted, \\t \\n \\r and
     Zs -> " "; CJK ideographs become tokens of their own;
  3. do_lower_case: str.lower of each character, with Python's final-sigma rule for U+03A3
     (the previous character that is not case-ignorable is cased, and the next is not), then
     each character's NFD, canonical reordering of combining marks where a mark that stays
     (not Mn) could move, then every Mn character dropped;
  4. tokens: runs of characters that are neither whitespace (str.isspace) nor punctuation
     (printable non-alphanumeric ASCII, or Unicode category P*), and each punctuation
     character alone;
  5. WordPiece (tensorflow-text's FastWordpieceTokenizeWithOffsets op, the original's greedy
     longest match first with "##" continuations, [UNK] for the whole token when some
     position has no match): a token over 200 characters (code points) -> [UNK];
  6. packing: [CLS] a [SEP] (b [SEP]), the longer side truncated first (b on ties) to
     max_seq_length - 3 (a single text to max_seq_length - 2); zero padding.
A graph with this layer needs tensorflow-text's op registered (import tensorflow_text) to run,
e.g. before tf.saved_model.load; with core_ops_only=True it uses TensorFlow's own ops only (the
exact basic tokenizer on every text, then the WordPiece loop in TF ops below on every word).
Vocab entries over 256 bytes, which the op's builder refuses, are matched by that WordPiece
loop in TF ops (lookups after a binary search over 63-bit fingerprints), only for the words over
256 bytes and only with a vocab that has such entries.
"""

import functools
import json
import os
import unicodedata

import keras
import numpy as np
import tensorflow as tf
from tensorflow.core.framework import attr_value_pb2

from bert_keras import optimization
from bert_keras import task_registry
from bert_keras import tokenization
from bert_keras.utils import errors


def truncate_seq_pair(tokens_a, tokens_b, max_length):
  """Truncates the pair in place to at most max_length tokens in total, one token at a
  time from the end of the longer list (tokens_b on ties)."""
  while len(tokens_a) + len(tokens_b) > max_length:
    longer = tokens_a if len(tokens_a) > len(tokens_b) else tokens_b
    longer.pop()


def pack_tokens(tokens_a, tokens_b, max_seq_length, tokenizer):
  """Word pieces of text a (and of text b, or None) -> (tokens, input_ids, input_mask,
  segment_ids): tokens = [CLS] a [SEP] (segment 0) [b [SEP]] (segment 1) after truncation
  (a pair to max_seq_length - 3 tokens from the end of the longer side, a single text to
  its first max_seq_length - 2); the three id lists zero-padded to max_seq_length.
  tokens_a / tokens_b may be truncated in place."""
  if tokens_b:
    truncate_seq_pair(tokens_a, tokens_b, max_seq_length - 3)  # [CLS], [SEP], [SEP]
  elif len(tokens_a) > max_seq_length - 2:                       # [CLS], [SEP]
    tokens_a = tokens_a[:max_seq_length - 2]

  tokens = ["[CLS]"] + tokens_a + ["[SEP]"]
  segment_ids = [0] * len(tokens)
  if tokens_b:
    tokens += tokens_b + ["[SEP]"]
    segment_ids += [1] * (len(tokens_b) + 1)
  return (tokens,) + pad_inputs(tokens, segment_ids, max_seq_length, tokenizer)


def pad_inputs(tokens, segment_ids, max_seq_length, tokenizer):
  """Packed tokens and their segment ids -> (input_ids, input_mask, segment_ids), each a list
  of max_seq_length ints: ids of the tokens, 1 for each real token, zeros after them."""
  input_ids = tokenizer.convert_tokens_to_ids(tokens)
  padding = max_seq_length - len(input_ids)
  assert padding >= 0 and len(segment_ids) == len(input_ids)
  return (input_ids + [0] * padding, [1] * len(input_ids) + [0] * padding,
          segment_ids + [0] * padding)


# --- Per-code-point tables (built once per process from Python's unicodedata)

# Bits of the int32 that the table holds for each code point.
_DELETE = 1 << 0      # cleaning deletes it: NUL, U+FFFD, Cc/Cf other than \t \n \r
_TO_SPACE = 1 << 1    # cleaning makes it " ": \t \n \r " " and Zs
_CJK = 1 << 2         # a CJK ideograph: cleaning puts spaces around it
_IGNORABLE = 1 << 3   # case-ignorable: the final-sigma rule looks past it
_CASED = 1 << 4       # cased (what the final-sigma rule asks of the others)
_SPACE = 1 << 5       # str.isspace: separates tokens (the original's whitespace_tokenize)
_PUNCT = 1 << 6       # the original's _is_punctuation: a token of its own
_MN = 1 << 7          # category Mn: accent stripping drops it
_CCC_SHIFT = 8        # bits 8-15: canonical combining class
_MAPPING_SHIFT = 16   # bits 16-30: 1 + row of its lower-cased NFD in the mappings (0: itself)
_CAPITAL_SIGMA, _SMALL_SIGMA, _FINAL_SIGMA = 0x3A3, 0x3C3, 0x3C2
_BLOCK = 256
_MAX_INPUT_CHARS_PER_WORD = 200  # the original WordpieceTokenizer's limit, in code points


def _final_sigma_probes(cp):
  """(case-ignorable, cased) of one code point as Python's str.lower sees them: lower() of
  "a" + c + "Σ" ends in final sigma when c is case-ignorable or cased, of "1" + c + "Σ"
  only when c is cased and not case-ignorable."""
  char = chr(cp)
  after_cased = ("a" + char + "\u03a3").lower()[-1] == "\u03c2"
  cased = ("1" + char + "\u03a3").lower()[-1] == "\u03c2"
  return after_cased and not cased, cased


@functools.lru_cache(maxsize=None)
def _code_point_bits():
  """int32 [0x110000]: the bits above other than the mapping row, for every code point."""
  categories = np.array(tokenization.unicode_categories())
  cps = np.arange(len(categories))
  bits = np.zeros(len(categories), np.int32)
  control = np.isin(categories, ["Cc", "Cf"]) & ~np.isin(cps, [9, 10, 13])
  bits[control | np.isin(cps, [0, 0xFFFD])] |= _DELETE
  bits[np.isin(cps, [9, 10, 13, 32]) | (categories == "Zs")] |= _TO_SPACE
  for lo, hi in tokenization.CJK_RANGES:
    bits[lo:hi + 1] |= _CJK
  ascii_punct = ((33 <= cps) & (cps <= 47)) | ((58 <= cps) & (cps <= 64)) | (
      (91 <= cps) & (cps <= 96)) | ((123 <= cps) & (cps <= 126))
  bits[ascii_punct | np.char.startswith(categories, "P")] |= _PUNCT
  bits[categories == "Mn"] |= _MN
  for cp in np.flatnonzero(~np.isin(categories, ["Cn", "Cs", "Co"])):
    char = chr(cp)
    if char.isspace():
      bits[cp] |= _SPACE
    bits[cp] |= unicodedata.combining(char) << _CCC_SHIFT
    ignorable, cased = _final_sigma_probes(int(cp))
    bits[cp] |= (_IGNORABLE if ignorable else 0) | (_CASED if cased else 0)
  return bits


@functools.lru_cache(maxsize=None)
def _character_tables(do_lower_case):
  """The tables BertPreprocessor's graph reads, as numpy arrays:
    block_index int32 [0x110000 / 256], blocks int32 [distinct blocks * 256]: the bits of
      code point cp are blocks[block_index[cp // 256] * 256 + cp % 256];
    do_lower_case only, for the code points c with a mapping row r >= 1 (those that
    lower-casing, NFD or accent stripping change; row 0 is unused):
      full_starts, full_lengths int32 [rows], full_chars int32 [total]: NFD(c.lower());
      stripped_starts, stripped_lengths, stripped_chars: the same without its Mn characters;
      keeps_mark bool [rows]: NFD(c.lower()) has a combining mark that is not Mn."""
  bits = _code_point_bits().copy()
  rows = [[0]]
  if do_lower_case:
    categories = tokenization.unicode_categories()
    for cp in range(len(bits)):
      if categories[cp] in ("Cn", "Cs", "Co") or cp == _CAPITAL_SIGMA:
        continue  # (capital sigma is lower-cased by the final-sigma rule first)
      mapped = unicodedata.normalize("NFD", chr(cp).lower())
      if mapped != chr(cp) or categories[cp] == "Mn":
        bits[cp] |= len(rows) << _MAPPING_SHIFT
        rows.append([ord(c) for c in mapped])
  assert len(rows) < 1 << (31 - _MAPPING_SHIFT)
  blocks, block_index = np.unique(bits.reshape(-1, _BLOCK), axis=0, return_inverse=True)
  tables = dict(block_index=block_index.reshape(-1).astype(np.int32),
                blocks=blocks.reshape(-1).astype(np.int32),
                keeps_mark=np.array([any(bits[c] & _MN == 0 and unicodedata.combining(chr(c))
                                         for c in r) for r in rows]))
  stripped = [[0]] + [[c for c in r if not bits[c] & _MN] for r in rows[1:]]
  for kind, kind_rows in (("full", rows), ("stripped", stripped)):
    lengths = np.array([len(r) for r in kind_rows], np.int32)
    tables[kind + "_starts"] = np.concatenate([[0], np.cumsum(lengths)[:-1]]).astype(np.int32)
    tables[kind + "_lengths"] = lengths
    tables[kind + "_chars"] = np.array([c for r in kind_rows for c in r], np.int32)
  return tables


def _lookup_bits(code_points, tables):
  """int32 [N] code points -> int32 [N] their table bits."""
  block = tf.gather(tables["block_index"], code_points // _BLOCK)
  return tf.gather(tables["blocks"], block * _BLOCK + code_points % _BLOCK)


def _combining_class(bits):
  return tf.bitwise.right_shift(bits, _CCC_SHIFT) & 255


def _exclusive_cumsum(x):
  return tf.math.cumsum(x, exclusive=True)


def _shift_right(x, first):
  """x [N] -> [N]: x moved one place later, `first` in front (each element's predecessor)."""
  return tf.concat([tf.fill([1], first), x[:-1]], axis=0)[:tf.size(x)]


# --- The original BasicTokenizer, on flat code points

def _final_sigma(chars, bits, rows):
  """chars int32 [N] -> [N] with each U+03A3 lower-cased as Python's str.lower does it:
  final sigma when the closest character before it that is not case-ignorable is cased
  and the closest one after it (if any) is not; small sigma otherwise. Whitespace ends
  the search (it is neither), as the end of the original's whitespace token does; so does
  the start or end of the text (`rows`: the text of each character)."""
  sigma = tf.equal(chars, _CAPITAL_SIGMA)

  def lower_sigmas():
    anchors = tf.where(tf.equal(bits & _IGNORABLE, 0))[:, 0]  # int64, sigma included
    positions = tf.where(sigma)[:, 0]
    count = tf.size(anchors, out_type=tf.int64)
    before = tf.searchsorted(anchors, positions, side="left", out_type=tf.int64) - 1
    after = tf.searchsorted(anchors, positions, side="right", out_type=tf.int64)
    previous = tf.gather(anchors, tf.maximum(before, 0))
    following = tf.gather(anchors, tf.minimum(after, count - 1))
    row = tf.gather(rows, positions)

    def cased_in_row(neighbour, exists):
      return exists & tf.equal(tf.gather(rows, neighbour), row) & tf.not_equal(
          tf.gather(bits, neighbour) & _CASED, 0)
    final = cased_in_row(previous, before >= 0) & ~cased_in_row(following, after < count)
    return tf.tensor_scatter_nd_update(
        chars, positions[:, None], tf.where(final, _FINAL_SIGMA, _SMALL_SIGMA))
  return tf.cond(tf.reduce_any(sigma), lower_sigmas, lambda: chars)


def _canonical_order(chars, bits, sources, rows):
  """Canonical reordering (the last step of NFD) across the decompositions of neighbouring
  characters: each run of non-starters (combining class > 0) stably sorted by combining
  class, within one text. chars, bits, sources, rows: [N] -> the same, reordered."""
  combining = tf.cast(_combining_class(bits), tf.int64)
  text_start = tf.not_equal(rows, _shift_right(rows, tf.constant(-1, rows.dtype)))
  group = tf.math.cumsum(tf.cast(tf.equal(combining, 0) | text_start, tf.int64))
  order = tf.argsort(group * 256 + combining, stable=True)
  return [tf.gather(x, order) for x in (chars, bits, sources, rows)]


def _select(mask, *tensors):
  """The elements of each of `tensors` [N] where mask [N] is true."""
  indices = tf.where(mask)[:, 0]
  return [tf.gather(x, indices) for x in tensors]


def _apply_mapping(chars, mapping, tables, kind):
  """Replaces each character by its mapping row (kind "full" or "stripped"; row 0: itself):
  chars, mapping [N] -> (chars [M], sources [M] int32: the index in chars each came from)."""
  lengths = tf.where(mapping > 0, tf.gather(tables[kind + "_lengths"], mapping), 1)

  def one_to_one():  # (the common case: a batch where no character grows or disappears)
    mapped = tf.gather(tables[kind + "_chars"], tf.gather(tables[kind + "_starts"], mapping))
    return tf.where(mapping > 0, mapped, chars), tf.range(tf.size(chars))

  def expand():
    sources = tf.repeat(tf.range(tf.size(chars)), lengths)
    offsets = tf.range(tf.size(sources)) - tf.gather(_exclusive_cumsum(lengths), sources)
    row = tf.gather(mapping, sources)
    mapped = tf.gather(tables[kind + "_chars"], tf.gather(tables[kind + "_starts"], row) + offsets)
    return tf.where(row > 0, mapped, tf.gather(chars, sources)), sources
  return tf.cond(tf.reduce_all(tf.equal(lengths, 1)), one_to_one, expand)


def _lower_and_strip_accents(chars, bits, rows, tables):
  """do_lower_case's per-token work, per character: lower-case (final sigma included), NFD,
  drop Mn. chars, bits, rows: [N] cleaned characters -> (chars, bits, sources, rows) [M] of
  the result, sources [M] int32 being the index of the cleaned character each came from.

  NFD's canonical reordering moves combining marks among combining marks; with Mn dropped
  it can only matter where a mark that stays (Mc) is present: only then the slow path
  (decompositions with their Mn, reordering, then Mn dropped)."""
  chars = _final_sigma(chars, bits, rows)
  mapping = tf.bitwise.right_shift(bits, _MAPPING_SHIFT)
  kept_mark = (tf.not_equal(_combining_class(bits), 0) & tf.equal(bits & _MN, 0)
               | tf.gather(tables["keeps_mark"], mapping))

  def reordered():
    mapped, sources = _apply_mapping(chars, mapping, tables, "full")
    mapped_bits = _lookup_bits(mapped, tables)
    mapped, mapped_bits, sources, mapped_rows = _canonical_order(
        mapped, mapped_bits, sources, tf.gather(rows, sources))
    return tuple(_select(tf.equal(mapped_bits & _MN, 0), mapped, mapped_bits, sources,
                         mapped_rows))

  def stripped():
    mapped, sources = _apply_mapping(chars, mapping, tables, "stripped")
    return mapped, _lookup_bits(mapped, tables), sources, tf.gather(rows, sources)
  return tf.cond(tf.reduce_any(kept_mark), reordered, stripped)


def _basic_tokens(texts, tables, do_lower_case):
  """The original BasicTokenizer on a batch: texts [B] string (UTF-8) -> (tokens [T]
  string, token_lengths [T] int64 in code points, token_rows [T] int64: the text of each
  token, in order)."""
  decoded = tf.strings.unicode_decode(texts, "UTF-8", errors="ignore")
  chars, rows = decoded.flat_values, decoded.value_rowids()
  bits = _lookup_bits(chars, tables)
  chars, bits, rows = _select(tf.equal(bits & _DELETE, 0), chars, bits, rows)
  chars = tf.where(tf.not_equal(bits & _TO_SPACE, 0), 32, chars)  # (whitespace bits stay)
  cjk = tf.not_equal(bits & _CJK, 0)
  if do_lower_case:
    chars, bits, sources, rows = _lower_and_strip_accents(chars, bits, rows, tables)
    cjk = tf.gather(cjk, sources)
  else:
    sources = tf.range(tf.size(chars))
  space = tf.not_equal(bits & _SPACE, 0)
  punct = tf.not_equal(bits & _PUNCT, 0)
  # A token starts at a character that is not whitespace when the text starts, or the
  # character before is whitespace or punctuation, or it is punctuation itself, or it or
  # the character before came from a CJK ideograph (and not from the same one).
  starts = (tf.not_equal(rows, _shift_right(rows, tf.constant(-1, rows.dtype)))
            | _shift_right(space | punct, True) | punct
            | (tf.not_equal(sources, _shift_right(sources, -1))
               & (cjk | _shift_right(cjk, False))))
  chars, starts, rows = _select(~space, chars, starts, rows)
  token_index = tf.math.cumsum(tf.cast(starts, tf.int64)) - 1
  tokens = tf.RaggedTensor.from_value_rowids(
      chars, token_index, nrows=tf.reduce_sum(tf.cast(starts, tf.int64)), validate=False)
  return (tf.strings.unicode_encode(tokens, "UTF-8"), tokens.row_lengths(),
          tf.boolean_mask(rows, starts))


# --- WordPiece (tensorflow-text's FastWordpieceTokenizer op) and the two paths

# A text of only these characters takes the fast path: for them the original's cleaning,
# lower-casing, accent stripping and splitting are ASCII lower-casing and the splitting on
# ASCII whitespace and punctuation that FastWordpieceTokenizer's own pre-tokenization does.
_ASCII_TEXT = "[\t\n\r -~]*"
_MAX_WORD_BYTES = 4 * _MAX_INPUT_CHARS_PER_WORD  # (200 code points are at most 800 bytes)
_TOO_LONG = "x" * (_MAX_WORD_BYTES + 1)          # a word that the op makes one [UNK]
_MAX_OP_TOKEN_BYTES = 256                        # the op's longest vocab token (after "##")


def _gen_wordpiece():
  """tensorflow_text's generated op module (its kernels registered with TensorFlow)."""
  from bert_keras.utils import quiet_tensorflow
  with quiet_tensorflow.quietly():
    from tensorflow_text.python.ops import fast_wordpiece_tokenizer
  return fast_wordpiece_tokenizer.gen_fast_wordpiece_tokenizer


def _op_can_hold(token):
  """Whether the op's model takes the vocab token: not None (an id no token maps to), not
  "", no NUL or whitespace (the original's words never hold one), at most 256 UTF-8 bytes
  after its "##" (a longer one only matches a word over 256 bytes: _slow_path gives those
  to _long_words_wordpiece)."""
  return (token is not None and "\0" not in token and not any(c.isspace() for c in token)
          and 0 < len(_suffix_free(token).encode("utf-8")) <= _MAX_OP_TOKEN_BYTES)


def _ascii_word_token(token):
  """Whether the vocab token can match a word of ASCII text ([UNK] kept, the op needs it):
  one ASCII punctuation character, or ASCII letters and digits (after a "##")."""
  if token is None:
    return False
  if token == "[UNK]" or len(token) == 1 and token.isascii() and (
      _code_point_bits()[ord(token)] & _PUNCT):
    return True
  word = _suffix_free(token)
  # (over 200 characters it can never match: the op makes such a word one [UNK]; and the
  # op's builder refuses a token over 256 bytes)
  return word.isascii() and word.isalnum() and len(word) <= _MAX_INPUT_CHARS_PER_WORD


def _suffix_free(token):
  return token[2:] if token.startswith("##") else token


def _wordpiece_model(vocabulary, pretokenized):
  """The op's model (a flatbuffer) as numpy uint8 [bytes]. vocabulary: the token of each id
  (None for an id no token maps to). A token the op does not take (_op_can_hold) becomes a
  placeholder that can never match: "[placeholderN]" (a word with punctuation is one
  character long), made unique with "x"s.
  pretokenized: words in (the slow path's basic tokens; a word of over 800 bytes is one
  [UNK]); else ASCII texts, split as the original splits them (a word of over 200 bytes,
  i.e. 200 ASCII characters, is one [UNK]), with only the tokens that can match an ASCII
  word (the op's builder rejects some others, e.g. "." with "##.")."""
  from tensorflow_text.core.pybinds import pywrap_fast_wordpiece_tokenizer_model_builder
  keep = _op_can_hold if pretokenized else _ascii_word_token
  taken = set(vocabulary)
  tokens = []
  for index, token in enumerate(vocabulary):
    if not keep(token):
      token = f"[placeholder{index}]"
      while token in taken:
        token += "x"
    tokens.append(token)
  try:
    buffer = pywrap_fast_wordpiece_tokenizer_model_builder.build_fast_wordpiece_model(
        tokens, _MAX_WORD_BYTES if pretokenized else _MAX_INPUT_CHARS_PER_WORD, "##",
        "[UNK]", pretokenized, False)
  except RuntimeError as e:  # its message quotes the token (megabytes for a huge entry)
    raise ValueError("tensorflow-text's WordPiece builder refused the vocabulary: "
                     + errors.error_line(e, 300)) from None
  return np.frombuffer(buffer, np.uint8)


def _run_wordpiece(strings, model):
  """strings [N] string -> (ids int32 [P], splits int64 [N + 1]): the pieces of every string
  in order, those of string i being ids[splits[i]:splits[i + 1]]."""
  _, ids, splits, _, _ = _gen_wordpiece().fast_wordpiece_tokenize_with_offsets(
      input_values=strings, wp_model=model)
  return tf.cast(ids, tf.int32), splits


def _fast_path(texts, models, do_lower_case):
  """ASCII texts [N] (printable, \\t, \\n, \\r) -> (ids int32 [P], splits int64 [N + 1])."""
  if do_lower_case:
    texts = tf.strings.lower(texts)  # (ASCII letters only, as str.lower on ASCII)
  return _run_wordpiece(texts, models["texts"])


def _slow_path(texts, models, do_lower_case):
  """Any texts [N] -> (ids int32 [P], rows int64 [P]: the text of each): the exact basic
  tokens in TF ops, then WordPiece on each (a token over 200 code points is one [UNK]; one
  over 256 bytes goes to _long_words_wordpiece where the vocab has a token that long)."""
  tokens, lengths, token_rows = _basic_tokens(texts, models["tables"], do_lower_case)
  if "words" not in models:  # core TensorFlow ops only: every token through the TF-op loop
    ids, owners = _long_words_wordpiece(tokens, lengths, models["long_words"])
    return ids, tf.gather(token_rows, owners)
  tokens = tf.where(lengths > _MAX_INPUT_CHARS_PER_WORD, _TOO_LONG, tokens)
  if "long_words" not in models:
    ids, splits = _run_wordpiece(tokens, models["words"])
    return ids, tf.gather(token_rows, _row_ids(splits))
  long_word = tf.strings.length(tokens) > _MAX_OP_TOKEN_BYTES
  short, long = tf.where(~long_word)[:, 0], tf.where(long_word)[:, 0]
  short_ids, splits = _run_wordpiece(tf.gather(tokens, short), models["words"])
  long_ids, long_owners = _long_words_wordpiece(
      tf.gather(tokens, long), tf.gather(lengths, long), models["long_words"])
  owners = tf.concat([tf.gather(short, _row_ids(splits)), tf.gather(long, long_owners)], 0)
  order = tf.argsort(owners, stable=True)
  return (tf.gather(tf.concat([short_ids, long_ids], 0), order),
          tf.gather(token_rows, tf.gather(owners, order)))


def _row_ids(splits):
  """Row splits int64 [N + 1] -> int64 [splits[-1]]: the row of each value."""
  return tf.repeat(tf.range(tf.size(splits, out_type=tf.int64) - 1), splits[1:] - splits[:-1])


def _wordpiece_ids(texts, models, do_lower_case):
  """texts [B] string -> (ids int32 [P], splits int64 [B + 1]): the original FullTokenizer's
  ids of all texts in order, those of text i being ids[splits[i]:splits[i + 1]]. A batch of
  ASCII texts takes the fast path alone; otherwise its ASCII texts take it and the others
  the slow path. Without tensorflow-text's op (models without "texts"), every text takes
  the slow path."""
  if "texts" not in models:
    ids, rows = _slow_path(texts, models, do_lower_case)
    lengths = tf.math.unsorted_segment_sum(tf.ones_like(rows), rows, tf.size(texts))
    return ids, tf.concat([[0], tf.math.cumsum(lengths)], 0)
  ascii_text = tf.strings.regex_full_match(texts, _ASCII_TEXT)

  def mixed():
    fast, slow = tf.where(ascii_text)[:, 0], tf.where(~ascii_text)[:, 0]
    fast_ids, fast_splits = _fast_path(tf.gather(texts, fast), models, do_lower_case)
    fast_rows = _row_ids(fast_splits)
    slow_ids, slow_rows = _slow_path(tf.gather(texts, slow), models, do_lower_case)
    rows = tf.concat([tf.gather(fast, fast_rows), tf.gather(slow, slow_rows)], 0)
    order = tf.argsort(rows, stable=True)
    lengths = tf.math.unsorted_segment_sum(tf.ones_like(rows), rows, tf.size(texts))
    return (tf.gather(tf.concat([fast_ids, slow_ids], 0), order),
            tf.concat([[0], tf.math.cumsum(lengths)], 0))
  return _unlowered_cond(tf.reduce_all(ascii_text),
                         lambda: _fast_path(texts, models, do_lower_case), mixed)


def _unlowered_cond(pred, true_fn, false_fn):
  """tf.cond, kept as a functional If op in a graph: TensorFlow otherwise lowers it to
  Switch/Merge, where every op of the branch not taken still runs (on "dead" tensors); the
  slow path's hundreds of ops cost more than the fast path itself."""
  outputs = tf.cond(pred, true_fn, false_fn)
  if not tf.executing_eagerly():
    op = outputs[0].op
    while op.type not in ("If", "StatelessIf"):  # (the outputs are Identity ops of its)
      op = op.inputs[0].op
    op._set_attr("_lower_using_switch_merge", attr_value_pb2.AttrValue(b=False))
  return outputs


# --- WordPiece in TF ops, for the words over 256 bytes (only with a vocab token that long)

_FINGERPRINT_BUCKETS = (1 << 63) - 1


def _fingerprints(strings):
  return tf.strings.to_hash_bucket_fast(strings, _FINGERPRINT_BUCKETS)


def _lookup_table(keys, ids):
  """A resource-free string -> id table: (fingerprints int64 [n] sorted, keys string [n],
  ids int32 [n]) as numpy arrays."""
  keys = np.array(keys, dtype=object)
  with tf.init_scope():
    fingerprints = _fingerprints(tf.constant(keys, tf.string)).numpy()
  order = np.argsort(fingerprints, kind="stable")
  fingerprints = fingerprints[order]
  if np.any(fingerprints[1:] == fingerprints[:-1]):
    raise ValueError("two vocab entries share a 63-bit fingerprint")  # (never seen)
  return fingerprints, keys[order], np.array(ids, np.int32)[order]


def _lookup(strings, table):
  """strings string [...] -> int32 [...]: their ids, -1 for strings not in the table."""
  fingerprints, keys, ids = table
  flat = tf.reshape(strings, [-1])
  position = tf.searchsorted(fingerprints, _fingerprints(flat), out_type=tf.int64)
  position = tf.minimum(position, tf.size(fingerprints, out_type=tf.int64) - 1)
  found = tf.equal(tf.gather(keys, position), flat)
  return tf.reshape(tf.where(found, tf.gather(ids, position), -1), tf.shape(strings))


def _longest_matches(tokens, lengths, whole, continuation, max_chars):
  """Greedy longest-match-first WordPiece of tokens [R] string (lengths [R] code points):
  -> (owners int64 [P], ids int32 [P], failed bool [R]): the pieces of every token, in order
  (owners: the token of each piece), and the tokens where some position had no match (their
  pieces are to be ignored). Iteration i finds the i-th piece of each token still going."""
  candidate_lengths = tf.range(1, max_chars + 1, dtype=tf.int64)

  def body(i, done, failed, owners, ids):
    going = tf.where(done < lengths)[:, 0]
    token, start = tf.gather(tokens, going), tf.gather(done, going)
    shape = tf.stack([tf.size(going), max_chars])
    pieces = tf.strings.substr(tf.broadcast_to(token[:, None], shape),
                               tf.broadcast_to(start[:, None], shape),
                               tf.broadcast_to(candidate_lengths[None], shape),
                               unit="UTF8_CHAR")
    piece_ids = tf.cond(i > 0, lambda: _lookup(pieces, continuation),
                        lambda: _lookup(pieces, whole))
    fits = candidate_lengths[None] <= (tf.gather(lengths, going) - start)[:, None]
    longest = tf.reduce_max(tf.where(fits & (piece_ids >= 0), candidate_lengths[None], 0), 1)
    matched = longest > 0
    piece = tf.gather(piece_ids, tf.maximum(longest - 1, 0), batch_dims=1)
    # A token with no match here is finished (its done count jumps past its length).
    step = tf.where(matched, longest, tf.gather(lengths, going) + 1)
    done = tf.tensor_scatter_nd_add(done, going[:, None], step)
    failed = tf.tensor_scatter_nd_update(failed, going[:, None], ~matched)
    owners = owners.write(i + 1, tf.boolean_mask(going, matched))
    return i + 1, done, failed, owners, ids.write(i + 1, tf.boolean_mask(piece, matched))

  def array(dtype):  # (element 0 empty: an array with nothing written cannot concat)
    return tf.TensorArray(dtype, size=1, dynamic_size=True, element_shape=[None],
                          infer_shape=False).write(0, tf.zeros([0], dtype))
  _, _, failed, owners, ids = tf.while_loop(
      lambda i, done, *_: tf.reduce_any(done < lengths), body,
      [tf.constant(0), tf.zeros_like(lengths), tf.zeros_like(lengths, tf.bool),
       array(tf.int64), array(tf.int32)])
  return owners.concat(), ids.concat(), failed


def _long_words_wordpiece(tokens, lengths, vocab):
  """The original WordpieceTokenizer on every token: tokens [T] string (lengths [T] int64,
  code points) -> (ids int32 [P], owners int64 [P]): the word-piece ids of all tokens in
  order, owners the token of each. A token over 200 code points, or with a position that
  matches nothing, is one [UNK]."""
  whole_ids = _lookup(tokens, vocab["whole"])
  too_long = lengths > _MAX_INPUT_CHARS_PER_WORD
  in_vocab = (whole_ids >= 0) & ~too_long
  rest = tf.where(~in_vocab & ~too_long)[:, 0]
  owners, ids, failed = _longest_matches(
      tf.gather(tokens, rest), tf.gather(lengths, rest), vocab["whole"],
      vocab["continuation"], vocab["max_chars"])
  succeeded = ~tf.gather(failed, owners)
  single = tf.where(in_vocab | too_long | tf.scatter_nd(rest[:, None], failed, tf.shape(
      lengths, out_type=tf.int64)))[:, 0]
  single_ids = tf.where(tf.gather(in_vocab, single), tf.gather(whole_ids, single),
                        vocab["unk_id"])
  owners = tf.concat([single, tf.boolean_mask(tf.gather(rest, owners), succeeded)], 0)
  ids = tf.concat([single_ids, tf.boolean_mask(ids, succeeded)], 0)
  order = tf.argsort(owners, stable=True)  # (each token's pieces are already in order)
  return tf.gather(ids, order), tf.gather(owners, order)


def _long_words_vocab(vocabulary):
  """vocabulary (token of each id, None for an id whose token a later line took) -> what
  _long_words_wordpiece reads: the whole-token and "##"-continuation lookup tables (numpy),
  the longest entry in code points, the [UNK] id."""
  vocab = {token: index for index, token in enumerate(vocabulary) if token is not None}
  continuation = {token[2:]: index for token, index in vocab.items() if token.startswith("##")}
  max_chars = max(len(token) for token in list(vocab) + list(continuation))
  return dict(whole=_lookup_table(list(vocab), list(vocab.values())),
              continuation=_lookup_table(list(continuation), list(continuation.values())),
              max_chars=max(1, min(max_chars, _MAX_INPUT_CHARS_PER_WORD)),
              unk_id=vocab["[UNK]"])


# --- Packing (convert_single_example)

def _kept_lengths(length_a, length_b, max_seq_length):
  """Lengths [B] int64 of the word pieces of a and b (0: no text b) -> what truncation
  keeps of each: a single text its first max_seq_length - 2; a pair, popping one piece at a
  time from the longer side (b on ties) down to max_seq_length - 3 in total, keeps the
  shorter side whole when the longer still has as many left, else ceil and floor of half."""
  budget = max_seq_length - 3
  shorter = tf.minimum(length_a, length_b)
  over = length_a + length_b > budget
  shorter_whole = budget >= 2 * shorter
  pair_a = tf.where(~over, length_a, tf.where(
      shorter_whole, tf.where(length_a <= length_b, length_a, budget - length_b),
      (budget + 1) // 2))
  pair_b = tf.where(~over, length_b, tf.where(
      shorter_whole, tf.where(length_b < length_a, length_b, budget - length_a), budget // 2))
  single = tf.equal(length_b, 0)
  return (tf.where(single, tf.minimum(length_a, max_seq_length - 2), pair_a),
          tf.where(single, tf.zeros_like(pair_b), pair_b))


def _pack(ids, splits, count_a, pairs, max_seq_length, cls_id, sep_id):
  """Word-piece ids [P] int32 of the texts, those of text i being ids[splits[i]:splits[i + 1]]
  (splits int64 [texts + 1]; texts a are 0..count_a - 1, and when `pairs` texts b are
  count_a..2 count_a - 1) -> input_ids, input_mask, segment_ids: int32 [count_a,
  max_seq_length], each cell gathered from where it comes from: [CLS] a [SEP] (b [SEP]) 0..."""
  starts, lengths = splits[:-1], splits[1:] - splits[:-1]
  columns = tf.range(max_seq_length, dtype=tf.int64)[None]          # [1, L]
  if pairs:
    kept_a, kept_b = [k[:, None] for k in _kept_lengths(
        lengths[:count_a], lengths[count_a:], max_seq_length)]        # [B, 1]
  else:
    kept_a = tf.minimum(lengths, max_seq_length - 2)[:, None]
  # The index in ids of each cell's piece; size(ids) (a 0 appended) for the others.
  padding = tf.size(ids, out_type=tf.int64)
  source = tf.where((columns >= 1) & (columns <= kept_a), starts[:count_a, None] + columns - 1,
                    padding)
  length = kept_a + 2                                                # [CLS] a [SEP]
  sep = tf.equal(columns, kept_a + 1)
  segment = None
  if pairs:
    b_start = length
    in_b = (columns >= b_start) & (columns < b_start + kept_b)
    source = tf.where(in_b, starts[count_a:, None] + columns - b_start, source)
    length += kept_b + tf.cast(kept_b > 0, tf.int64)                # b [SEP]
    sep |= (kept_b > 0) & tf.equal(columns, length - 1)
    segment = (columns >= b_start) & (columns < length)
  input_ids = tf.gather(tf.concat([ids, [0]], 0), source)
  input_ids = tf.where(tf.equal(columns, 0), cls_id, tf.where(sep, sep_id, input_ids))
  segment_ids = tf.zeros_like(input_ids) if segment is None else tf.cast(segment, tf.int32)
  return dict(input_ids=input_ids, input_mask=tf.cast(columns < length, tf.int32),
              segment_ids=segment_ids)


# --- The Keras layer

# The asset of a BertPreprocessor in a .keras file: the token of each id, as a JSON list.
VOCABULARY_ASSET = "vocabulary.json"
_FROM_ASSETS = object()   # from_config's stand-in vocabulary: load_assets gives the real one


def _same_batch(text_a, text_b):
  """text_a, after checking that text_b has as many rows: an InvalidArgumentError saying so
  (tf.debugging, in the graph of a SavedModel signature too) instead of text_b broadcast or
  an opaque error deep in the packing."""
  check = tf.debugging.assert_equal(
      tf.shape(text_a)[0], tf.shape(text_b)[0],
      message="BertPreprocessor: text_a and text_b must have the same number of rows (one "
              "text_b per text_a; an empty string for a single segment)")
  with tf.control_dependencies([check] if check is not None else []):
    return tf.identity(text_a)


@keras.saving.register_keras_serializable(package="bert_keras")
class BertPreprocessor(keras.layers.Layer):
  """Raw text -> BERT's inputs, inside the TensorFlow graph, as the original computes them
  (FullTokenizer, then run_classifier.convert_single_example's packing).

  Args:
    vocab_file: a vocab.txt, read as the original reads it (tokenization.load_vocab).
    do_lower_case: lower-case and strip accents (uncased models).
    max_seq_length: the length of every output row (at least 3).
    vocabulary: instead of vocab_file, the token of each id in order (a list of str; None
      for an id that no token maps to). A .keras file holds it as an asset of the layer
      (save_assets: assets/.../vocabulary.json), not in the config, so a saved model needs
      no vocab file and its config stays small.
    core_ops_only: use TensorFlow's own ops only (no tensorflow-text op), so that a graph or
      SavedModel with this layer runs where tensorflow_text cannot be imported (TensorFlow
      Serving builds without it, saved_model_cli); the same outputs, several times slower.

  Call args:
    inputs: a string tensor [B] (single texts), a tuple/list (text_a, text_b) of two [B]
      string tensors, or a dict {"text_a": [B], "text_b": [B]} (text_b optional; as many
      rows as text_a, else an InvalidArgumentError); an empty text_b (or one without tokens)
      gives a single-segment row, as in the original. A scalar string (or pair of scalars)
      gives rows without the batch axis.

  Returns:
    a dict of int32 [B, max_seq_length] tensors: input_ids, input_mask, segment_ids.
  """

  def __init__(self, vocab_file=None, do_lower_case=True, max_seq_length=128,
               vocabulary=None, core_ops_only=False, **kwargs):
    super().__init__(**kwargs)
    if int(max_seq_length) < 3:
      raise ValueError(f"BertPreprocessor: max_seq_length {max_seq_length} is below 3 "
                       "([CLS] a [SEP] b [SEP] needs 3)")
    self.do_lower_case = bool(do_lower_case)
    self.max_seq_length = int(max_seq_length)
    self.core_ops_only = bool(core_ops_only)
    self._vocabulary = self._models = None
    self._convert_input_args = False
    self._allow_non_tensor_positional_args = True
    self.built = True
    if vocabulary is _FROM_ASSETS:   # from_config: load_assets gives the vocabulary
      return
    if (vocab_file is None) == (vocabulary is None):
      raise ValueError("BertPreprocessor: give vocab_file or vocabulary (one of the two)")
    if vocab_file is not None:
      vocab = tokenization.load_vocab(vocab_file)
    else:
      vocab = {token: index for index, token in enumerate(vocabulary) if token is not None}
    self._set_vocabulary(vocab, vocab_file or "(vocabulary)")

  def _set_vocabulary(self, vocab, source):
    """vocab {token: id} -> the layer's id tables (checked first: a ValueError naming source)."""
    tokenization.check_vocab(vocab, source, required=("[UNK]", "[CLS]", "[SEP]"))
    by_id = [None] * (max(vocab.values()) + 1)
    for token, index in vocab.items():
      by_id[index] = token
    self._vocabulary = tuple(by_id)
    self._cls_id, self._sep_id = vocab["[CLS]"], vocab["[SEP]"]
    models = dict(tables=_character_tables(self.do_lower_case))
    if self.core_ops_only:
      models["long_words"] = _long_words_vocab(self._vocabulary)
    else:
      _gen_wordpiece()  # (tensorflow_text's kernels registered before any tracing)
      models.update(texts=_wordpiece_model(self._vocabulary, False),
                    words=_wordpiece_model(self._vocabulary, True))
      if any(token and len(_suffix_free(token).encode("utf-8")) > _MAX_OP_TOKEN_BYTES
             for token in by_id):
        models["long_words"] = _long_words_vocab(self._vocabulary)
    # Eager tensors, which a traced function captures by reference: as constants in its
    # graph (megabytes), every tf.data iterator would copy and optimise them first.
    with tf.init_scope():
      self._models = tf.nest.map_structure(
          lambda x: tf.constant(x) if isinstance(x, np.ndarray) else x, models)

  @property
  def vocabulary(self):
    """The token of each id (None where no token maps to the id): a list of str."""
    return list(self._checked_vocabulary())

  def _checked_vocabulary(self):
    if self._vocabulary is None:
      raise ValueError("BertPreprocessor: no vocabulary yet (from_config without the "
                       "vocabulary: keras.saving.load_model reads it from the file's assets)")
    return self._vocabulary

  def get_config(self):
    """The settings only: the vocabulary is an asset of the .keras file (save_assets)."""
    config = super().get_config()
    config.update(do_lower_case=self.do_lower_case, max_seq_length=self.max_seq_length,
                  core_ops_only=self.core_ops_only)
    return config

  @classmethod
  def from_config(cls, config):
    """A config with "vocabulary" (as older files hold) is complete; without it, the layer
    waits for load_assets."""
    if "vocabulary" in config or "vocab_file" in config:
      return cls(**config)
    return cls(vocabulary=_FROM_ASSETS, **config)

  def save_assets(self, dir_path):
    """Writes the vocabulary (a JSON list: the token of each id, null where none) to
    dir_path/VOCABULARY_ASSET, as keras.saving.save_model does for each layer."""
    with open(os.path.join(dir_path, VOCABULARY_ASSET), "w", encoding="utf-8") as f:
      json.dump(list(self._checked_vocabulary()), f, ensure_ascii=False)

  def load_assets(self, dir_path):
    path = os.path.join(dir_path, VOCABULARY_ASSET)
    if not os.path.exists(path):
      if self._vocabulary is not None:   # (a file whose config held the vocabulary)
        return
      raise ValueError(f"BertPreprocessor: no {VOCABULARY_ASSET} among the file's assets")
    with open(path, encoding="utf-8") as f:
      by_id = json.load(f)
    self._set_vocabulary({t: i for i, t in enumerate(by_id) if t is not None}, path)

  @staticmethod
  def _texts(inputs):
    """inputs -> (text_a, text_b or None) as string tensors."""
    if isinstance(inputs, dict):
      unknown = set(inputs) - {"text_a", "text_b"}
      if unknown or "text_a" not in inputs:
        raise ValueError(f"BertPreprocessor: a dict input takes keys text_a and (optional) "
                         f"text_b, not {sorted(inputs)}")
      text_a, text_b = inputs["text_a"], inputs.get("text_b")
    elif isinstance(inputs, (tuple, list)):
      if len(inputs) not in (1, 2):
        raise ValueError("BertPreprocessor: a tuple/list input is (text_a, text_b), "
                         f"not {len(inputs)} tensors")
      text_a, text_b = inputs[0], inputs[1] if len(inputs) == 2 else None
    else:
      text_a, text_b = inputs, None
    texts = [tf.convert_to_tensor(t, tf.string) for t in (text_a, text_b) if t is not None]
    return texts[0], texts[1] if len(texts) == 2 else None

  def call(self, inputs):
    text_a, text_b = self._texts(inputs)
    scalar = text_a.shape.rank == 0
    if scalar or text_a.shape.rank == 2:  # a scalar, or [B, 1] (keras.Input(shape=(1,)))
      reshape = lambda t: None if t is None else tf.reshape(t, [-1])
      text_a, text_b = reshape(text_a), reshape(text_b)
    if text_b is not None:
      text_a = _same_batch(text_a, text_b)
    texts = text_a if text_b is None else tf.concat([text_a, text_b], 0)
    ids, splits = self._word_piece_ids(texts)
    features = _pack(ids, splits, tf.shape(text_a, out_type=tf.int64)[0], text_b is not None,
                     self.max_seq_length, self._cls_id, self._sep_id)
    if scalar:
      features = {name: value[0] for name, value in features.items()}
    return features

  def encode(self, texts):
    """The original FullTokenizer's ids: texts [B] string -> int32 [B, (pieces)] ragged."""
    texts = tf.convert_to_tensor(texts, tf.string)
    return tf.RaggedTensor.from_row_splits(*self._word_piece_ids(texts), validate=False)

  def _word_piece_ids(self, texts):
    """texts [B] string -> (ids int32 [P], splits int64 [B + 1]): the word-piece ids of all
    texts in order, those of text i being ids[splits[i]:splits[i + 1]]."""
    self._checked_vocabulary()
    return _wordpiece_ids(texts, self._models, self.do_lower_case)

  def compute_output_spec(self, inputs):
    text_a = (inputs["text_a"] if isinstance(inputs, dict) else
              inputs[0] if isinstance(inputs, (tuple, list)) else inputs)
    shape = tuple(text_a.shape)[:1] + (self.max_seq_length,)
    return {name: keras.KerasTensor(shape, dtype="int32")
            for name in ("input_ids", "input_mask", "segment_ids")}


# --- A task model over text: BertPreprocessor + the model, compiled as the original trains


@keras.saving.register_keras_serializable(package="bert_keras")
class TextModel(keras.Model):
  """A task model of modeling (BertClassifier, BertTokenClassifier, BertSquad,
  BertSentenceEncoder, BertModel) behind a BertPreprocessor: a functional keras.Model over
  text. Build one with checkpoints.load_model(..., text_input=True) or text_model().

  Inputs: {"text_a": string [B], "text_b": string [B]} (text_b "" for single texts); fit,
  evaluate and predict also take a list or 1-D array of B strings, a list of B (text_a,
  text_b) pairs or a [B, 2] array of strings (text_inputs()). task: a task_registry kind
  with text_input. Outputs by kind (the kind's probabilities applied to its logits):
    classifier   probabilities float32 [B, num_labels] (softmax of the logits)
    multi_label  probabilities float32 [B, num_labels] (sigmoid of each logit)
    regression   the score float32 [B, 1]
    tagger       probabilities float32 [B, max_seq_length, num_labels]
    squad        {"start_logits", "end_logits"}: float32 [B, max_seq_length]
    embeddings   float32 [B, hidden]
    encoder      {"sequence_output" [B, max_seq_length, hidden], "pooled_output" [B, hidden]}
  """

  def __init__(self, preprocessor, model, task, **kwargs):
    kind = task_registry.get(task)
    if not kind.text_input:
      raise ValueError(f"TextModel: task must be one of "
                       f"{', '.join(task_registry.names(text_input=True))}, got {task!r}")
    inputs = {name: keras.Input(shape=(), dtype="string", name=name)
              for name in ("text_a", "text_b")}
    outputs = model(preprocessor(inputs))
    if kind.probabilities == "softmax":
      outputs = keras.layers.Softmax(dtype="float32", name="probabilities")(outputs)
    elif kind.probabilities == "sigmoid":
      outputs = keras.layers.Activation("sigmoid", dtype="float32",
                                        name="probabilities")(outputs)
    super().__init__(inputs=inputs, outputs=outputs, **kwargs)
    self.preprocessor, self.task_model, self.task = preprocessor, model, task

  def get_config(self):
    return {"name": self.name, "task": self.task,
            "preprocessor": keras.saving.serialize_keras_object(self.preprocessor),
            "model": keras.saving.serialize_keras_object(self.task_model)}

  @classmethod
  def from_config(cls, config):
    config = dict(config)
    parts = [keras.saving.deserialize_keras_object(config.pop(k))
             for k in ("preprocessor", "model")]
    return cls(*parts, **config)

  def fit(self, x=None, y=None, batch_size=None, epochs=1, *args, validation_data=None,
          **kwargs):
    """keras.Model.fit, x as text_inputs() takes it. The first fit of a model compiled by
    text_model() sets its learning-rate schedule's length (warm-up over the first 10%, then
    linear decay to 0 at the end of this fit's epochs, as run_classifier); a later fit
    continues that schedule (compile again to train with a new one)."""
    x, y = text_inputs(x), np.asarray(y) if isinstance(y, list) else y
    if isinstance(validation_data, (tuple, list)):
      validation_data = (text_inputs(validation_data[0]),) + tuple(validation_data[1:])
    _set_schedule_length(self.optimizer, x, batch_size, epochs, kwargs.get("steps_per_epoch"))
    return super().fit(x, y, batch_size, epochs, *args, validation_data=validation_data,
                       **kwargs)

  def evaluate(self, x=None, *args, **kwargs):
    return super().evaluate(text_inputs(x), *args, **kwargs)

  def predict(self, x, *args, **kwargs):
    return super().predict(text_inputs(x), *args, **kwargs)

  def save(self, filepath, overwrite=True, zipped=None, include_optimizer=True, **kwargs):
    """keras.Model.save; include_optimizer=False leaves out the optimizer (its state, about
    twice the weights' bytes after fit, and the compile settings): a file of about the
    weights' size, which loads uncompiled."""
    if include_optimizer:
      return super().save(filepath, overwrite=overwrite, zipped=zipped, **kwargs)
    TextModel(self.preprocessor, self.task_model, self.task, name=self.name).save(
        filepath, overwrite=overwrite, zipped=zipped, **kwargs)   # the same layers, uncompiled


def _strings(values, what):
  """values (list, array or tensor of strings) -> a 1-D numpy object array of str or bytes
  (Keras's data adapters take object arrays of strings, not numpy's fixed-width ones)."""
  values = values.numpy() if isinstance(values, tf.Tensor) else values
  array = np.asarray(values)
  if array.ndim != 1 or array.dtype.kind not in "USO":
    raise ValueError(f"TextModel: {what} must be B strings, got an array of shape "
                     f"{array.shape} and dtype {array.dtype}")
  return array.astype(object)


def text_inputs(x):
  """x -> the TextModel's inputs {"text_a": [B], "text_b": [B]} (numpy arrays of strings).

  x: a list, tuple or 1-D array of B strings (single texts: text_b ""), a list of B (text_a,
  text_b) pairs or a [B, 2] array, or a dict with text_a (and text_b). Anything else (a
  tf.data.Dataset, a generator, None) is returned unchanged: its elements must already be
  such dicts."""
  if isinstance(x, dict):
    unknown = set(x) - {"text_a", "text_b"}
    if unknown or "text_a" not in x:
      raise ValueError(f"TextModel: a dict input takes keys text_a and (optional) text_b, "
                       f"not {sorted(x)}")
    text_a = _strings(x["text_a"], "text_a")
    text_b = (_strings(x["text_b"], "text_b") if x.get("text_b") is not None
              else np.full(text_a.shape, "", object))
    return {"text_a": text_a, "text_b": text_b}
  if not isinstance(x, (list, tuple, np.ndarray, tf.Tensor)):
    return x
  values = x.numpy() if isinstance(x, tf.Tensor) else x
  try:
    array = np.asarray(values)
  except ValueError:
    array = np.asarray(values, dtype=object)
  if array.ndim == 2 and array.shape[1] == 2:
    return text_inputs({"text_a": array[:, 0], "text_b": array[:, 1]})
  if array.ndim != 1 or array.dtype.kind not in "USO":
    raise ValueError("TextModel: expected a list of strings or of (text_a, text_b) pairs, "
                     f"got an array of shape {array.shape} and dtype {array.dtype}")
  return text_inputs({"text_a": array})


def _set_schedule_length(optimizer, x, batch_size, epochs, steps_per_epoch):
  """The first fit of text_model()'s optimizer: its WarmupLinearDecay's length (0 until then)
  set to this fit's steps, 10% of them warm-up; a ValueError when they cannot be counted."""
  schedule = getattr(optimizer, "_learning_rate", None)
  if not isinstance(schedule, optimization.WarmupLinearDecay) or schedule.num_train_steps:
    return
  if steps_per_epoch is None and isinstance(x, dict):
    steps_per_epoch = -(-len(x["text_a"]) // (batch_size or 32))
  elif steps_per_epoch is None and isinstance(x, tf.data.Dataset):
    steps_per_epoch = int(x.cardinality())
  if steps_per_epoch is None or steps_per_epoch <= 0:
    raise ValueError("TextModel.fit: the learning-rate schedule (warm-up, then linear decay, "
                     "as run_classifier) needs the number of steps: pass steps_per_epoch, or "
                     "compile with an optimizer of your own")
  schedule.num_train_steps = int(steps_per_epoch * epochs)
  schedule.num_warmup_steps = int(schedule.num_train_steps * 0.1)


def text_model(model, task, vocab_file, do_lower_case, max_seq_length=128,
               learning_rate=2e-5):
  """A compiled TextModel: `model` (modeling's model of `task`, a task_registry kind with
  text_input) behind a BertPreprocessor(vocab_file, do_lower_case, max_seq_length),
  compiled with the original's optimizer (optimization.create_optimizer: AdamWeightDecay,
  weight decay 0.01, gradients clipped to norm 1, warm-up then linear decay over the first
  fit's steps) at `learning_rate` and the kind's compile_options (task_registry: classifier
  cross-entropy and accuracy; tagger cross-entropy without labels -1; squad the mean of the
  start and end cross-entropies; none for embeddings and encoder). Compile again to change
  them."""
  positions = model.config.max_position_embeddings
  if max_seq_length > positions:
    raise ValueError(f"max_seq_length={max_seq_length} is longer than the model's "
                     f"max_position_embeddings ({positions})")
  text = TextModel(BertPreprocessor(vocab_file, do_lower_case, max_seq_length), model, task)
  text.compile(optimizer=optimization.create_optimizer(learning_rate, 0, 0),
               **task_registry.get(task).compile_options())
  return text
