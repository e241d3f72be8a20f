"""Tokenization classes: the original BERT tokenizer, exact to the character, and fast.

The public API is the original's (google-research/bert tokenization.py):
convert_to_unicode, printable_text, load_vocab, convert_by_vocab,
convert_tokens_to_ids, convert_ids_to_tokens, whitespace_tokenize,
validate_case_matches_checkpoint, BasicTokenizer, WordpieceTokenizer and
FullTokenizer, with the same outputs for every input.

Speed comes from doing the per-character work of BasicTokenizer with a few
C-level string operations (bytes.translate, str.replace, regular expressions over
character classes precomputed from `unicodedata`, str.lower,
unicodedata.normalize) on a whole batch of lines joined by "\\n", instead of one
Python call per character; and from a cache of the tokens of each word. The
cache and the loop over the words are C (_word_table.c, built by pip install),
which also tokenizes pure-ASCII words itself (the original's punctuation split
and WordPiece); every other word goes through the Python code below. Without the
extension the same runs in pure Python.

Why each whole-string step equals the original per-token step:
  * The original lower-cases and strips accents per whitespace token. Python's
    str.lower is context sensitive only through the Greek final-sigma rule,
    whose context scan stops at whitespace; NFD reorders only runs of combining
    marks, which never span a whitespace character. So applying both to the
    whole cleaned line gives the same characters token by token.
  * Cleaning lower-cases the ASCII letters of every text, and each word is
    lower-cased again later: an ASCII letter's lower case is still a cased
    letter, so the final-sigma context (the one thing that could notice) is
    the same, and lower() of the word gives what the original gives.
  * The original splits on whitespace, splits each token on punctuation and
    splits again on whitespace; one regex, "one punctuation character, or a run
    of characters that are neither punctuation nor whitespace (str.isspace)",
    gives the same tokens. `re`'s \\s and str.split use the same whitespace
    definition (checked over all code points in tests).

The batch methods pause Python's cyclic garbage collector while they build
their output: a batch creates a list per line and a tuple per new word, and
each of the collector's passes would walk every one of them (and every other
object in the process) for nothing, since none is part of a reference cycle.
On the books corpus this is a third of a cold pass.
"""

import collections
import functools
import gc
import hashlib
import itertools
import logging
import os
import re
import sys
import unicodedata

import numpy as np

from bert_keras.utils import text_lines

# The C hot loop of the batch methods (_word_table.c, built by `pip install`); without it
# (no C compiler, or BERT_KERAS_PURE_PYTHON=1) the same runs in pure Python.
_word_table = None
if os.environ.get("BERT_KERAS_PURE_PYTHON", "") in ("", "0"):
  try:
    from bert_keras import _word_table
  except ImportError:
    pass


def _stale_extension(module):
  """True when `module` was built from another _word_table.c than the one beside this file
  (a `git pull` changed it and `pip install -e .` has not rebuilt it yet)."""
  source = os.path.join(os.path.dirname(os.path.abspath(__file__)), "_word_table.c")
  if module is None or not os.path.exists(source):
    return False  # no extension, or an installed wheel (it ships no source)
  with open(source, "rb") as f:
    digest = hashlib.sha256(f.read()).hexdigest()
  return getattr(module, "SOURCE_SHA256", None) != digest


if _stale_extension(_word_table):
  logging.getLogger(__name__).warning(
      "%s was built from an older _word_table.c: using the pure-Python tokenizer path "
      "(run `pip install -e .` to rebuild it)", _word_table.__file__)
  _word_table = None


def native_extension():
  """The C extension (_word_table, built by pip install from the _word_table.c beside this
  file), or None: not built, stale, or BERT_KERAS_PURE_PYTHON=1."""
  return _word_table


_MAX_UNICODE = sys.maxunicode + 1


class VocabError(ValueError):
  """A vocab file that cannot be used: missing, undecodable or lacking a token."""


class VocabDecodeError(VocabError, UnicodeDecodeError):
  """A vocab line that is not UTF-8: a UnicodeDecodeError, as the original raises, whose
  message names the file and the line."""

  def __init__(self, vocab_file, line_number, error):
    UnicodeDecodeError.__init__(self, error.encoding, error.object, error.start, error.end,
                                error.reason)
    self.message = (f"{text_lines.message(error, f'vocab file {vocab_file}', line_number)}; "
                    "pass lenient_decoding=True to drop such bytes")

  def __str__(self):
    return self.message


# Bumped by every change of something the tokenizers' caches depend on (a setting assigned, a
# Vocab edited): a tokenizer that has seen the current epoch knows, with one comparison, that
# its caches are current; otherwise it compares what its caches were built from.
_settings_epoch = [0]


def _settings_changed():
  _settings_epoch[0] += 1


class Vocab(collections.OrderedDict):
  """token -> id, in file order (the OrderedDict the original's load_vocab returns). It counts
  its changes (`version`), so a tokenizer whose vocab is edited in place starts its caches
  afresh instead of serving stale tokens."""

  version = 0

  def _changed(self):
    self.version += 1
    _settings_changed()

  def __setitem__(self, key, value):
    self._changed()
    super().__setitem__(key, value)

  def __delitem__(self, key):
    self._changed()
    super().__delitem__(key)

  def pop(self, *args):
    self._changed()
    return super().pop(*args)

  def popitem(self, last=True):
    self._changed()
    return super().popitem(last)

  def clear(self):
    self._changed()
    super().clear()

  def setdefault(self, key, default=None):
    self._changed()
    return super().setdefault(key, default)

  def update(self, *args, **kwargs):
    self._changed()
    super().update(*args, **kwargs)

  def __ior__(self, other):
    self.update(other)
    return self


# --------------------------------------------------------------------------
# Text and vocab helpers (the original API)
# --------------------------------------------------------------------------

def convert_to_unicode(text):
  """Returns `text` as str; bytes are decoded as UTF-8, ignoring errors."""
  if isinstance(text, str):
    return text
  if isinstance(text, bytes):
    return text.decode("utf-8", "ignore")
  raise ValueError("Unsupported string type: %s" % (type(text)))


def printable_text(text):
  """Returns text suitable for printing or logging (str in Python 3)."""
  return convert_to_unicode(text)


def _open_binary(path):
  """Opens a local path with open(), anything with a scheme (gs://) with tf.io.gfile."""
  if "://" in str(path):
    import tensorflow as tf  # Only for remote paths: keeps the tokenizer light to import.
    return tf.io.gfile.GFile(path, "rb")
  return open(path, "rb")


def load_vocab(vocab_file, strict=False, lenient_decoding=False):
  """Loads a vocabulary file into a Vocab (an OrderedDict token -> line number).

  As the original: every line is stripped (an empty line becomes the token ""
  and still takes an id); a token that appears twice maps to its later line; a
  line that is not UTF-8 raises a UnicodeDecodeError (a VocabDecodeError, which
  names the file and the line). `lenient_decoding` drops the undecodable bytes
  instead (with a warning). Duplicates are reported in the log (and are an error
  when `strict`).
  """
  try:
    with _open_binary(vocab_file) as reader:
      # As the original's tf.gfile readline(): only "\n" ends a line, and
      # text mode drops every "\r" (even inside a line).
      raw_lines = reader.read().replace(b"\r", b"").split(b"\n")
    if raw_lines[-1] == b"":
      raw_lines.pop()
  except (OSError, IOError) as e:
    raise VocabError(f"cannot read vocab file {vocab_file}: {e}") from None
  except Exception as e:  # tf.errors from gfile
    raise VocabError(f"cannot read vocab file {vocab_file}: {e}") from None
  vocab = Vocab()
  first_line = {}
  for index, raw in enumerate(raw_lines):
    try:
      token = raw.decode("utf-8")
    except UnicodeDecodeError as e:
      if not lenient_decoding:
        raise VocabDecodeError(vocab_file, index + 1, e) from None
      logging.warning("%s; dropping those bytes",
                      text_lines.message(e, f"vocab file {vocab_file}", index + 1))
      token = raw.decode("utf-8", "ignore")
    token = token.strip()
    if token in first_line:
      message = (f"vocab file {vocab_file}: token {token!r} on line {index + 1} "
                 f"duplicates line {first_line[token] + 1}")
      if strict:
        raise VocabError(message)
      logging.warning("%s; the later line wins, as in the original", message)
    else:
      first_line[token] = index
    vocab[token] = index
  return vocab


def check_vocab(vocab, vocab_file, required=("[UNK]", "[CLS]", "[SEP]", "[MASK]")):
  """Raises VocabError naming the file if any of the `required` tokens is missing."""
  missing = [token for token in required if token not in vocab]
  if missing:
    raise VocabError(f"vocab file {vocab_file} has no {', '.join(missing)} "
                     f"token{'s' if len(missing) > 1 else ''} ({len(vocab)} entries read)")


def convert_by_vocab(vocab, items):
  """Maps each item through `vocab`; an unknown item raises KeyError, as in the original."""
  return [vocab[item] for item in items]


def convert_tokens_to_ids(vocab, tokens):
  return convert_by_vocab(vocab, tokens)


def convert_ids_to_tokens(inv_vocab, ids):
  return convert_by_vocab(inv_vocab, ids)


def whitespace_tokenize(text):
  """Strips `text` and splits it on whitespace (Python's str.split definition)."""
  text = text.strip()
  if not text:
    return []
  return text.split()


_LOWER_CASED_MODELS = (
    "uncased_L-24_H-1024_A-16", "uncased_L-12_H-768_A-12",
    "multilingual_L-12_H-768_A-12", "chinese_L-12_H-768_A-12")
_CASED_MODELS = (
    "cased_L-12_H-768_A-12", "cased_L-24_H-1024_A-16", "multi_cased_L-12_H-768_A-12")
# Beyond the original's seven names: the whole-word-masking models (2019) and the
# 24 small uncased models (2020), which the original let through unchecked.
_LOWER_CASED_MODELS_EXTRA = ("wwm_uncased_L-24_H-1024_A-16",) + tuple(
    f"uncased_L-{layers}_H-{hidden}_A-{hidden // 64}"
    for layers in (2, 4, 6, 8, 10, 12) for hidden in (128, 256, 512, 768))
_CASED_MODELS_EXTRA = ("wwm_cased_L-24_H-1024_A-16",)


def validate_case_matches_checkpoint(do_lower_case, init_checkpoint, known_models="all"):
  """Raises ValueError if `do_lower_case` contradicts a released checkpoint's name.

  `known_models="original"` knows only the original's seven model names;
  the default "all" also knows the whole-word-masking and the 24 small models.
  Names that are not recognised (fine-tuned model.ckpt-N, ...) pass unchecked.
  """
  if not init_checkpoint:
    return
  m = re.match("^.*?([A-Za-z0-9_-]+)/bert_model.ckpt", init_checkpoint)
  if m is None:
    return
  model_name = m.group(1)
  lower_models, cased_models = _LOWER_CASED_MODELS, _CASED_MODELS
  if known_models == "all":
    lower_models += _LOWER_CASED_MODELS_EXTRA
    cased_models += _CASED_MODELS_EXTRA
  if model_name in lower_models and not do_lower_case:
    actual_flag, case_name, opposite_flag = "False", "lowercased", "True"
  elif model_name in cased_models and do_lower_case:
    actual_flag, case_name, opposite_flag = "True", "cased", "False"
  else:
    return
  raise ValueError(
      "You passed in `--do_lower_case=%s` with `--init_checkpoint=%s`. "
      "However, `%s` seems to be a %s model, so you "
      "should pass in `--do_lower_case=%s` so that the fine-tuning matches "
      "how the model was pre-training. If this error is wrong, please "
      "just comment out this check." % (actual_flag, init_checkpoint,
                                        model_name, case_name, opposite_flag))


# --------------------------------------------------------------------------
# Character classes (the original's definitions)
# --------------------------------------------------------------------------

def _is_whitespace(char):
  """Space, tab, newline, carriage return, or Unicode category Zs."""
  if char in (" ", "\t", "\n", "\r"):
    return True
  return unicodedata.category(char) == "Zs"


def _is_control(char):
  """Category Cc or Cf, except tab, newline and carriage return."""
  if char in ("\t", "\n", "\r"):
    return False
  return unicodedata.category(char) in ("Cc", "Cf")


def _is_punctuation(char):
  """Every non-alphanumeric printable ASCII character, or any Unicode category P*."""
  return _ascii_punctuation(ord(char)) or unicodedata.category(char).startswith("P")


CJK_RANGES = ((0x4E00, 0x9FFF), (0x3400, 0x4DBF), (0x20000, 0x2A6DF), (0x2A700, 0x2B73F),
               (0x2B740, 0x2B81F), (0x2B820, 0x2CEAF), (0xF900, 0xFAFF), (0x2F800, 0x2FA1F))


def _is_chinese_char(cp):
  """True for a code point in the CJK Unified Ideographs blocks the original splits on."""
  return any(lo <= cp <= hi for lo, hi in CJK_RANGES)


@functools.lru_cache(maxsize=None)
def unicode_categories():
  """unicodedata.category of every code point, computed once (about 0.3 s)."""
  return [unicodedata.category(chr(cp)) for cp in range(_MAX_UNICODE)]


def _char_class(predicate):
  """A regex character class '[...]' of the code points cp with predicate(cp, category)."""
  ranges, start = [], None
  for cp, category in enumerate(unicode_categories()):
    inside = predicate(cp, category)
    if inside and start is None:
      start = cp
    elif not inside and start is not None:
      ranges.append((start, cp - 1))
      start = None
  if start is not None:
    ranges.append((start, _MAX_UNICODE - 1))
  esc = lambda cp: "\\U%08x" % cp  # noqa: E731
  return "[" + "".join(esc(a) if a == b else esc(a) + "-" + esc(b) for a, b in ranges) + "]"


def _ascii_punctuation(cp):
  return 33 <= cp <= 47 or 58 <= cp <= 64 or 91 <= cp <= 96 or 123 <= cp <= 126


class _Patterns:
  """The compiled whole-string operations of BasicTokenizer (built once, lazily)."""

  def __init__(self):
    # _clean_text: delete NUL, U+FFFD and control characters; whitespace -> " ".
    # "\n" is kept here: it separates the lines of a batch (see _tokenize_joined).
    self.delete = re.compile(_char_class(
        lambda cp, cat: cp in (0, 0xFFFD) or (cat in ("Cc", "Cf") and cp not in (9, 10, 13))))
    self.to_space = re.compile(_char_class(lambda cp, cat: cp in (9, 13, 32) or cat == "Zs"))
    self.cjk = re.compile("([" + "".join(
        "\\U%08x-\\U%08x" % r for r in CJK_RANGES) + "])")
    self.nonspacing_mark = re.compile(_char_class(lambda cp, cat: cat == "Mn"))
    punctuation = _char_class(lambda cp, cat: _ascii_punctuation(cp) or cat[0] == "P")
    self.split_on_punc = re.compile(punctuation + "|[^\\s" + punctuation[1:] + "+")


@functools.lru_cache(maxsize=None)
def _patterns():
  return _Patterns()


# ASCII fast path: one bytes.translate cleans (and lower-cases) a whole batch.
_ASCII_CONTROL = bytes(b for b in range(128) if _is_control(chr(b)))
_ASCII_TO_SPACE = bytes.maketrans(b"\t\r", b"  ")
_ASCII_LOWER = bytes.maketrans(
    b"\t\rABCDEFGHIJKLMNOPQRSTUVWXYZ", b"  abcdefghijklmnopqrstuvwxyz")
_ASCII_SPLIT_ON_PUNC = re.compile(r"[!-/:-@\[-`{-~]|[^\s!-/:-@\[-`{-~]+")

# Marks the end of a text in a batch's word list: "\x01" is a control
# character, so cleaning has removed every one that was in the texts.
_TEXT_BREAK = "\x01"


@functools.lru_cache(maxsize=None)
def _latin1_to_ascii():
  """128 bytes, one per code point U+0080..U+00FF: the one ASCII character that
  lower-casing and accent stripping (BasicTokenizer, do_lower_case) make of it ("É" -> "e"),
  or 0 when it stays non-ASCII ("ß", "æ", "¿") or is something cleaning removes."""
  basic = BasicTokenizer(do_lower_case=True)
  table = bytearray(128)
  for cp in range(128, 256):
    char = chr(cp)
    if _non_ascii_cleaning(char) is not None:
      continue
    stripped = basic._run_strip_accents(char.lower())
    if len(stripped) == 1 and stripped.isascii():
      table[cp - 128] = ord(stripped)
  return bytes(table)


@functools.lru_cache(maxsize=4096)
def _non_ascii_cleaning(char):
  """What _clean_text and _tokenize_chinese_chars make of one non-ASCII character: ""
  (deleted), " " (whitespace), " c " (CJK) or None (kept as it is)."""
  cp = ord(char)
  if cp == 0xFFFD or _is_control(char):
    return ""
  if _is_whitespace(char):
    return " "
  if _is_chinese_char(cp):
    return " %s " % char
  return None


# --------------------------------------------------------------------------
# Tokenizers
# --------------------------------------------------------------------------

class BasicTokenizer(object):
  """Runs basic tokenization (punctuation splitting, lower casing, etc.).

  Two stages: `clean_batch` cleans whole texts, which are then split on whitespace
  (character-local work, done by C-level string operations on a whole batch);
  `tokenize_word` then lower-cases, strips accents and splits on punctuation
  one whitespace token at a time, exactly as the original does. Words repeat,
  so callers cache tokenize_word.

  The word cache is derived state: assigning `do_lower_case` starts it afresh, and
  pickling or copying a tokenizer leaves it out (it is rebuilt on first use).
  """

  def __init__(self, do_lower_case=True):
    self.do_lower_case = do_lower_case

  def __setattr__(self, name, value):
    object.__setattr__(self, name, value)
    if name == "do_lower_case":
      object.__setattr__(self, "_cache", None)  # its words were cased the old way
      _settings_changed()

  def __getstate__(self):
    return dict(self.__dict__, _cache=None)

  def _word_cache(self):
    if self._cache is None:
      self._cache = _WordCache(self._basic_tokens)
    return self._cache

  def _basic_tokens(self, word):
    return tuple(self.tokenize_word(word))

  def tokenize(self, text):
    """Tokenizes a piece of text into a list of str tokens."""
    return self.tokenize_batch([text])[0]

  def tokenize_batch(self, texts):
    """Tokenizes many texts at once; the same result as tokenize() for each."""
    if not texts:
      return []
    with _gc_paused(len(texts)):
      return self._word_cache().map_lines(self.clean_batch(texts))

  def clean_batch(self, texts):
    """All texts cleaned (_clean_text, _tokenize_chinese_chars) and joined by "\n".

    Every character is dealt with on its own here, so whole-string operations
    do it: a bytes.translate for ASCII texts, three regular expressions for the
    others (each run of consecutive ASCII or non-ASCII texts in one call).
    (Lower-casing is also done here for ASCII texts; tokenize_word repeats it.)
    """
    texts = list(map(convert_to_unicode, texts))
    joined = "\n".join(texts)
    if joined.count("\n") != len(texts) - 1:
      # A text holds a newline of its own, which would read as a separator:
      # it is whitespace to the tokenizer, so make it a space first.
      texts = [t.replace("\n", " ") for t in texts]
      joined = "\n".join(texts)
    if joined.isascii():
      return self._clean_ascii(joined)
    # The ASCII characters as for ASCII text (bytes.translate leaves the UTF-8 bytes of the
    # others alone), then each distinct non-ASCII character that cleaning changes with one
    # str.replace; the regular expressions (slower) only for texts with many such
    # characters (CJK). str.isascii is O(1): only the non-ASCII texts are scanned.
    text = joined.encode("utf-8", "surrogatepass").translate(
        _ASCII_LOWER if self.do_lower_case else _ASCII_TO_SPACE, _ASCII_CONTROL).decode(
            "utf-8", "surrogatepass")
    seen = set("".join(t for t in texts if not t.isascii()))
    changed = [c for c in seen if c >= "\x80" and _non_ascii_cleaning(c) is not None]
    if len(changed) > 64:
      p = _patterns()
      return p.cjk.sub(r" \1 ", p.to_space.sub(" ", p.delete.sub("", text)))
    for c in changed:
      text = text.replace(c, _non_ascii_cleaning(c))
    return text

  def _clean_ascii(self, text):
    return text.encode("ascii").translate(
        _ASCII_LOWER if self.do_lower_case else _ASCII_TO_SPACE, _ASCII_CONTROL).decode("ascii")

  def tokenize_word(self, word):
    """Basic tokens of one cleaned whitespace token (lower-case, strip accents, split)."""
    if word.isascii():
      return _ASCII_SPLIT_ON_PUNC.findall(word.lower() if self.do_lower_case else word)
    if self.do_lower_case:
      word = _patterns().nonspacing_mark.sub("", unicodedata.normalize("NFD", word.lower()))
    return _patterns().split_on_punc.findall(word)

  # The original's per-character helpers, kept for callers that use them.
  def _run_strip_accents(self, text):
    text = unicodedata.normalize("NFD", text)
    return "".join(c for c in text if unicodedata.category(c) != "Mn")

  def _run_split_on_punc(self, text):
    output, start_new_word = [], True
    for char in text:
      if _is_punctuation(char):
        output.append([char])
        start_new_word = True
      else:
        if start_new_word:
          output.append([])
        start_new_word = False
        output[-1].append(char)
    return ["".join(x) for x in output]

  def _tokenize_chinese_chars(self, text):
    return "".join(" %s " % c if _is_chinese_char(ord(c)) else c for c in text)

  def _is_chinese_char(self, cp):
    return _is_chinese_char(cp)

  def _clean_text(self, text):
    output = []
    for char in text:
      cp = ord(char)
      if cp == 0 or cp == 0xFFFD or _is_control(char):
        continue
      output.append(" " if _is_whitespace(char) else char)
    return "".join(output)


class WordpieceTokenizer(object):
  """Greedy longest-match-first WordPiece, as in the original.

  `vocab`, `unk_token` and `max_input_chars_per_word` may be changed (the vocab also in
  place): the tables derived from the vocab follow on the next call.
  """

  def __init__(self, vocab, unk_token="[UNK]", max_input_chars_per_word=200):
    self.vocab = vocab
    self.unk_token = unk_token
    self.max_input_chars_per_word = max_input_chars_per_word
    self._vocab_key = self._seen_epoch = None
    self._refresh()

  def __setattr__(self, name, value):
    object.__setattr__(self, name, value)
    if name in ("vocab", "unk_token", "max_input_chars_per_word"):
      _settings_changed()

  def __getstate__(self):
    return dict(self.__dict__, _seen_epoch=None)  # (epochs are counted per process)

  def settings_key(self):
    """What the word pieces depend on: changes whenever a setting or the vocab does."""
    vocab = self.vocab
    return (id(vocab), len(vocab), getattr(vocab, "version", None), self.unk_token,
            self.max_input_chars_per_word)

  def _refresh(self):
    epoch = _settings_epoch[0]
    if self._seen_epoch == epoch:
      return
    vocab = self.vocab
    key = (id(vocab), len(vocab), getattr(vocab, "version", None))
    if key != self._vocab_key:
      # Candidates longer than the longest vocab entry cannot match: skip them.
      self._max_chars = max((len(t) for t in vocab), default=0)
      self._suffixes = {t[2:] for t in vocab if t.startswith("##")}  # "##ing" -> "ing"
      self._max_suffix_chars = max((len(t) for t in self._suffixes), default=0)
      self._vocab_key = key
    # Published last (threads read it without a lock); a plain dict's in-place edits bump no
    # epoch, so such a vocab is compared on every call.
    self._seen_epoch = epoch if isinstance(vocab, Vocab) else None

  def tokenize(self, text):
    """Tokenizes a piece of text (already passed through BasicTokenizer) into word pieces."""
    output_tokens = []
    for token in whitespace_tokenize(convert_to_unicode(text)):
      output_tokens.extend(self.tokenize_word(token))
    return output_tokens

  def tokenize_word(self, word):
    """Word pieces of one whitespace-free word: a list of str.

    Greedy longest-match-first: the longest vocab entry that starts the word,
    then repeatedly the longest "##" entry that continues it; if some position
    has no match, the whole word is [UNK].
    """
    n = len(word)
    if n > self.max_input_chars_per_word:
      return [self.unk_token]
    self._refresh()
    vocab = self.vocab
    if word in vocab:
      return [word]
    end = n - 1 if n - 1 < self._max_chars else self._max_chars
    while end > 0 and word[:end] not in vocab:
      end -= 1
    if end == 0:
      return [self.unk_token]
    pieces, start = [word[:end]], end
    suffixes, max_suffix = self._suffixes, self._max_suffix_chars
    while start < n:
      end = start + max_suffix if start + max_suffix < n else n
      while end > start and word[start:end] not in suffixes:
        end -= 1
      if end == start:
        return [self.unk_token]
      pieces.append("##" + word[start:end])
      start = end
    return pieces


class FullTokenizer(object):
  """Runs end-to-end tokenization: BasicTokenizer, then WordPiece on every token.

  Args:
    vocab_file: path of a vocab.txt (gs:// works).
    do_lower_case: lower-case and strip accents (uncased models).
    strict: duplicate tokens in the vocab are errors instead of the later line
      winning, as in the original.
    lenient_decoding: drop a vocab line's undecodable bytes instead of raising
      (as the original does) a UnicodeDecodeError.

  The settings may be changed after first use and are followed from the next call:
  `vocab` (assigned, or edited in place; it is also the WordPiece vocab, and
  `inv_vocab` follows it), `basic_tokenizer.do_lower_case`,
  `wordpiece_tokenizer.unk_token` and `.max_input_chars_per_word`. A tokenizer can
  be pickled and deep-copied (its word caches are left out and rebuilt).
  """

  def __init__(self, vocab_file, do_lower_case=True, strict=False, lenient_decoding=False):
    vocab = load_vocab(vocab_file, strict=strict, lenient_decoding=lenient_decoding)
    self.basic_tokenizer = BasicTokenizer(do_lower_case=do_lower_case)
    self.wordpiece_tokenizer = WordpieceTokenizer(vocab=vocab)
    self.inv_vocab = {v: k for k, v in vocab.items()}
    self._caches_key = self._inv_vocab_key = self._seen_epoch = None
    self._refresh()

  def __setattr__(self, name, value):
    object.__setattr__(self, name, value)
    if name in ("basic_tokenizer", "wordpiece_tokenizer"):
      _settings_changed()

  @property
  def vocab(self):
    return self.wordpiece_tokenizer.vocab

  @vocab.setter
  def vocab(self, vocab):
    self.wordpiece_tokenizer.vocab = vocab

  def __getstate__(self):
    return dict(self.__dict__, _cache=None, _id_cache=None, _caches_key=None,
                _seen_epoch=None)

  def _refresh(self):
    """(Re)builds the word caches (cleaned whitespace token -> its word pieces, and -> their
    ids) when anything they depend on has changed since they were built."""
    epoch = _settings_epoch[0]
    if self._seen_epoch == epoch:
      return
    wordpiece_key = self.wordpiece_tokenizer.settings_key()
    key = (wordpiece_key, id(self.basic_tokenizer), self.basic_tokenizer.do_lower_case)
    if key != self._caches_key:
      self._rebuild_caches(key)
    # Published last (threads read it without a lock); see WordpieceTokenizer._refresh.
    self._seen_epoch = epoch if isinstance(self.vocab, Vocab) else None

  def _rebuild_caches(self, key):
    wordpiece_key = key[0]
    if wordpiece_key[:3] != self._inv_vocab_key:
      if self._inv_vocab_key is not None:
        self.inv_vocab = {v: k for k, v in self.vocab.items()}
      self._inv_vocab_key = wordpiece_key[:3]
    self._cache = _WordCache(self._word_pieces, wordpiece=self._wordpiece_settings(False))
    self._id_cache = _WordCache(self._word_ids, wordpiece=self._wordpiece_settings(True))
    self._caches_key = key

  def _word_ids(self, word):
    return tuple(map(self.vocab.__getitem__, self._word_pieces(word)))

  def _wordpiece_settings(self, ids):
    """What the native cache needs to tokenize pure-ASCII words itself: the same steps as
    _word_pieces."""
    lower = self.basic_tokenizer.do_lower_case
    wordpiece = self.wordpiece_tokenizer
    return dict(vocab=self.vocab, unk_token=wordpiece.unk_token,
                max_input_chars_per_word=wordpiece.max_input_chars_per_word,
                lower=lower, ids=ids, latin1=_latin1_to_ascii() if lower else b"")

  def tokenize(self, text):
    """Tokenizes one text as the original does.

    Args:
      text: str (or UTF-8 bytes).

    Returns:
      the WordPiece tokens, a list of str ([UNK] for a word with no pieces).
    """
    return self.tokenize_batch([text])[0]

  def tokenize_batch(self, texts):
    """Tokenizes a list of texts; the same as [tokenize(t) for t in texts], faster.

    Args:
      texts: a list of str (or UTF-8 bytes).

    Returns:
      a list of lists of str tokens, one list per text.
    """
    if not texts:
      return []
    self._refresh()
    with _gc_paused(len(texts)):
      return self._cache.map_lines(self.basic_tokenizer.clean_batch(texts))

  def encode_batch(self, texts):
    """Token ids of many texts, as flat arrays (like a RaggedTensor's components).

    Returns (ids, row_splits): int32 ids [total tokens] and int64 row_splits
    [len(texts) + 1]; text i has ids[row_splits[i]:row_splits[i + 1]], which
    equal convert_tokens_to_ids(tokenize(texts[i])). Raises KeyError if a word
    piece is not in the vocab (only possible when [UNK] is missing from it).
    """
    if not texts:
      return np.zeros([0], np.int32), np.zeros([1], np.int64)
    self._refresh()
    with _gc_paused(len(texts)):
      return self._encode_batch(texts)

  def _encode_batch(self, texts):
    ids, lengths = self._id_cache.map_ids(self.basic_tokenizer.clean_batch(texts))
    row_splits = np.zeros(len(lengths) + 1, dtype=np.int64)
    np.cumsum(lengths, out=row_splits[1:])
    return ids, row_splits

  def _word_pieces(self, word):
    """The word pieces of one cleaned whitespace token, as a tuple of str."""
    if word.isascii():
      if self.basic_tokenizer.do_lower_case:
        word = word.lower()
      if word.isalnum():  # no punctuation: one basic token
        if word in self.vocab and len(word) <= self.wordpiece_tokenizer.max_input_chars_per_word:
          return (word,)
        return tuple(self.wordpiece_tokenizer.tokenize_word(word))
      tokens = _ASCII_SPLIT_ON_PUNC.findall(word)
    else:
      tokens = self.basic_tokenizer.tokenize_word(word)
    wordpiece = self.wordpiece_tokenizer.tokenize_word
    return tuple(piece for token in tokens for piece in wordpiece(token))

  def convert_tokens_to_ids(self, tokens):
    """Args: tokens, a list of str in the vocab. Returns: their ids, a list of int (a
    KeyError for a token not in the vocab, as in the original)."""
    return convert_by_vocab(self.vocab, tokens)

  def convert_ids_to_tokens(self, ids):
    """Args: ids, a list of int. Returns: their tokens, a list of str."""
    self._refresh()  # (inv_vocab follows the vocab)
    return convert_by_vocab(self.inv_vocab, ids)


class _gc_paused(object):
  """`with _gc_paused(n):` the cyclic garbage collector is off inside, for batches of n > 1.

  Restores the collector's previous state on exit (a caller that had turned it off keeps it
  off). Reference counting still frees every object as usual.
  """

  def __init__(self, batch_size):
    self._pause = batch_size > 1 and gc.isenabled()

  def __enter__(self):
    if self._pause:
      gc.disable()

  def __exit__(self, *unused):
    if self._pause:
      gc.enable()


def _WordCache(compute, limit=1 << 20, wordpiece=None):
  """word -> tuple of tokens, computed by `compute(word)` on first use; the batch methods'
  cache. Native (_word_table.c) when built, else pure Python; both start afresh past `limit`
  words, so memory stays bounded on any corpus. `wordpiece`: None, or the settings with which
  the native cache computes pure-ASCII words itself, in C, as compute would
  (FullTokenizer._wordpiece_settings)."""
  if _word_table is None:
    return _PythonWordCache(compute, limit)
  return _NativeWordCache(compute, limit, wordpiece)


class _PythonWordCache(dict):
  """A dict subclass with __missing__: hits are a C-level dict lookup, so
  map(cache.__getitem__, words) runs at C speed once the words are known."""

  def __init__(self, compute, limit):
    super().__init__()
    self._compute, self._limit = compute, limit

  def __missing__(self, word):
    if len(self) >= self._limit:  # (no iteration: another thread may be adding words)
      text_break = self.get(_TEXT_BREAK)
      self.clear()
      if text_break is not None:
        self[_TEXT_BREAK] = text_break
    value = self[word] = self._compute(word)
    return value

  def map_lines(self, cleaned):
    """The tokens of every whitespace token of each "\n"-separated line: a list per line."""
    chain, lookup = itertools.chain.from_iterable, self.__getitem__
    return [list(chain(map(lookup, line.split()))) for line in cleaned.split("\n")]

  def map_ids(self, cleaned):
    """map_lines for ids, flat: (ids int32 [total], ids per line int64 [lines])."""
    self[_TEXT_BREAK] = (-1,)
    words = cleaned.replace("\n", " " + _TEXT_BREAK + " ").split()
    words.append(_TEXT_BREAK)
    # (a list, then one conversion, is faster than np.fromiter over the chain)
    ids = np.array(list(itertools.chain.from_iterable(map(self.__getitem__, words))),
                   dtype=np.int32)
    ends = np.flatnonzero(ids < 0)  # the -1 after each line
    return ids[ids >= 0], np.diff(ends, prepend=-1) - 1


class _NativeWordCache(object):
  """The same as _PythonWordCache, with the words read and looked up by C code
  (_word_table.WordTable) straight from the text: no str object per word."""

  def __init__(self, compute, limit, wordpiece=None):
    self._compute, self._table = compute, _word_table.WordTable(limit)
    if wordpiece is not None:
      self._table.set_wordpiece(**wordpiece)

  @property
  def _limit(self):
    return self._table.limit

  @_limit.setter
  def _limit(self, limit):
    self._table.limit = limit

  def __len__(self):
    return len(self._table)

  def map_lines(self, cleaned):
    return self._table.map_lines(cleaned, self._compute)

  def map_ids(self, cleaned):
    ids, lengths = self._table.map_ids(cleaned, self._compute)
    return np.frombuffer(ids, np.int32), np.frombuffer(lengths, np.int64)


# The original run_squad's projection of an answer back onto its text (SQuAD's
# post-processing and a SavedModel's answers share it).

@functools.lru_cache(maxsize=2)
def _squad_basic_tokenizer(do_lower_case):
  return BasicTokenizer(do_lower_case=do_lower_case)


def _strip_spaces(text):
  """-> (text without " ", for each of its characters the index in `text`)."""
  positions = [i for i, c in enumerate(text) if c != " "]
  return "".join(text[i] for i in positions), positions


def get_final_text(pred_text, orig_text, do_lower_case, verbose_logging=False):
  """The original run_squad's get_final_text: projects the normalised prediction pred_text
  (e.g. "steve smith") onto the original span orig_text ("Steve Smith's") -> "Steve Smith".
  Characters are aligned one to one between orig_text and its BasicTokenizer tokens, spaces
  aside; when that fails (the prediction is not found, or normalisation changed the character
  count, e.g. "İ" or ligatures) the whole orig_text is returned, as the original."""
  tok_text = " ".join(_squad_basic_tokenizer(bool(do_lower_case)).tokenize(orig_text))
  start = tok_text.find(pred_text)
  if start == -1:
    if verbose_logging:
      logging.info("Unable to find text: '%s' in '%s'", pred_text, orig_text)
    return orig_text
  end = start + len(pred_text) - 1

  orig_ns_text, orig_ns_to_s = _strip_spaces(orig_text)
  tok_ns_text, tok_ns_to_s = _strip_spaces(tok_text)
  if len(orig_ns_text) != len(tok_ns_text):
    if verbose_logging:
      logging.info("Length not equal after stripping spaces: '%s' vs '%s'", orig_ns_text,
                   tok_ns_text)
    return orig_text
  tok_s_to_ns = {s: ns for ns, s in enumerate(tok_ns_to_s)}

  def to_orig(position):
    ns = tok_s_to_ns.get(position)
    return None if ns is None or ns >= len(orig_ns_to_s) else orig_ns_to_s[ns]

  orig_start = to_orig(start)
  if orig_start is None:
    if verbose_logging:
      logging.info("Couldn't map start position")
    return orig_text
  orig_end = to_orig(end)
  if orig_end is None:
    if verbose_logging:
      logging.info("Couldn't map end position")
    return orig_text
  return orig_text[orig_start:orig_end + 1]
