"""tokenization.py: the original's behaviour to the character, by differential tests.

The oracle is the original FullTokenizer (PyPI bert-tensorflow). Every test
tokenizes the same text with both and requires identical output; tests that
need ../shared skip without it.
"""

import collections
import os
import random
import re
import sys
import unicodedata

import numpy as np
import pytest

import oracle
from conftest import REPO, shared_path
from bert_keras import tokenization

SPECIALS = ["[PAD]", "[UNK]", "[CLS]", "[SEP]", "[MASK]"]

# Hand-written edge cases: accents, CJK, Greek final sigma, Turkish dotted I,
# ligatures, control and zero-width characters, U+FFFD, NBSP and other spaces,
# emoji, very long words, empty and whitespace-only lines, and more.
EDGE_CASES = [
    "", " ", "\t \n\r ", "\u3000\u00a0", "\n\n", "a\nb", "x\r\ny",
    " \tHeLLo!how  \n Are yoU?  ", "Héllo", "H\u00e9llo", "He\u0301llo", "ah\u535a\u63a8zz",
    "UNwant\u00e9d,running", "John Johanson's, house", "naïve café Ångström",
    "don't $5.00 a^b `x` ~y", "¿Qué? «hola»", "x\x00y\ufffdz\x05w\u200bv",
    "a\u00a0b\u3000c\u2028d\u2029e\x1cf\x1fg\x85h\x0bi\x0cj",
    "💩 emoji😀! 👨‍👩‍👧 🇫🇷 ✈️", "こんにちは世界", "İstanbul ß ﬁ ﬂ ǅ Ǆ", "… — · § ¶ ‰ ※",
    "a§b©c€d·e…f", "ΟΔΥΣΣΕΥΣ ΣΊΣΥΦΟΣ όσος Σ ΑΣ. ΑΣ, ΑΣ'Σ", "ΑΣ\u0301 ΑΣ\u0301Β",
    "I\u0307 ı İ i̇ ŞĞÜÖÇ şğüöç", "Ǆemal ǅemal ǆemal", "ẞ ß SS", "\u1fef\u037e\u0387\u1fee",
    "Ａｂｃ　ＤＥＦ！？", "①②③ ⅠⅡⅢ ¹²³ ½", "\u0301abc \u0301 \u0300\u0301",
    "e\u0301\u0327 e\u0327\u0301", "ﷺ ﷽", "한국어 텍스트 입니다", "ไทย ภาษา", "עברית שלום",
    "العربية، نص؟", "हिन्दी पाठ।", "Ελληνικά: αβγ; δεζ.", "Русский текст, «кавычки».",
    "𠀀𠀁 𪜀 𫝀 𫠠 𬺰 丽 丽 \U0002ebf0", "\u3400\u4dbf\u4e00\u9fff\uf900\ufaff",
    "soft\u00adhyphen zero\u200bwidth joiner\u200dnon\u200cjoiner bom\ufeffhere",
    "\u202fnarrow\u2009thin\u200ahair\u205fmath\u1680ogham", "tab\there", "\x7fdel\x80c1",
    "x" * 199, "y" * 200, "z" * 201, "a" * 150 + "é" * 60, "supercalifragilisticexpialidocious" * 5,
    "unwanted running", "unwantedX running", "##ing", "un##want", "[UNK] [CLS] [MASK]",
    "[unused0] [unused1]", "3.14159 -2e10 1,000,000 $1,000.00", "http://example.com/a?b=c&d=e",
    "e-mail: someone@example.org", "C++ C# F# .NET", "<html><body>Hi</body></html>",
    "\"quoted\" 'single' `back` “curly” ‘curly’", "mixed日本語English한국어text",
    "\ud800 lone surrogate", "end with space ", " start with space", "many     spaces",
]


def _build_vocab(texts, path):
  """A vocab exercising WordPiece: specials, every other word, every character and ##character."""
  words, chars = set(), set()
  for text in texts:
    for variant in (text, text.lower(), unicodedata.normalize("NFD", text.lower())):
      words.update(w for w in re.split(r"\W+", variant) if w)
      chars.update(c for c in variant if not c.isspace())
  words = sorted(words)[::2]
  chars = sorted(chars)
  tokens = SPECIALS + words + chars + ["##" + c for c in chars] + ["##" + w for w in words[::3]]
  seen, unique = set(), []
  for t in tokens:
    if (t not in seen and len(t.split()) == 1 and t.strip() == t
        and not re.search("[\ud800-\udfff]", t)):
      seen.add(t)
      unique.append(t)
  path.write_text("".join(t + "\n" for t in unique), encoding="utf-8")
  return str(path)


def _sample_lines():
  return (REPO / "sample_text.txt").read_text(encoding="utf-8").split("\n")


@pytest.fixture(scope="module")
def original():
  return oracle.original("tokenization")


@pytest.fixture(scope="module")
def small_vocab(tmp_path_factory):
  return _build_vocab(EDGE_CASES + _sample_lines(), tmp_path_factory.mktemp("vocab") / "vocab.txt")


def _random_texts(n, seed):
  """Random strings drawn from every kind of character the tokenizer treats specially."""
  rng = random.Random(seed)
  pools = [
      "abcdefghijklmnopqrstuvwxyzABCDEFGHIJKLMNOPQRSTUVWXYZ0123456789",
      " \t\n\r\x0b\x0c\x1c\x1d\x1e\x1f\x85\xa0\u1680\u2000\u2007\u200a"
      "\u2028\u2029\u202f\u205f\u3000",
      "!\"#$%&'()*+,-./:;<=>?@[\\]^_`{|}~¡§«¶·»¿‐–—―‘’“”•…‰※、。「」",
      "\x00\x01\x05\x7f\x80\x9f\u00ad\u200b\u200c\u200d\u200e\u2060\ufeff\ufffd\ufff9",
      "àáâãäåæçèéêëìíîïñòóôõöøùúûüýÿĀāĂăĄąŁłŒœŠšŸŽžǅǄǆİıŞşẞß",
      "\u0300\u0301\u0302\u0303\u0308\u0327\u0328\u0332\u0345\u05b0\u064b\u093c\u0e31\u20d0",
      "ΑΒΓΔΕΖΗΘΣσςαβγΆΈΉΊΌΎΏάέήίόύώΐΰ\u1fef\u037e\u0387",
      "一二三中国語日本字\u3400\u4dbf\u9fff\uf900\ufaff\U00020000\U0002a6df\U0002b740\U0002f800",
      "ぁあかさたなアカサタナ한국어ㄱㄴ가나다ไทยעבריתالعربيةहिन्दी",
      "ﬁﬂﬀﬃ①②ⅠⅡ¹²½Ａｂｃ！？℃™©®€£¥°±×÷",
      "😀💩👍🏽🇫🇷\u200d\ufe0f✈☃♥",
  ]
  texts = []
  for _ in range(n):
    length = rng.randint(0, 40)
    pool_weights = [rng.random() for _ in pools]
    texts.append("".join(rng.choice(rng.choices(pools, pool_weights)[0]) for _ in range(length)))
  return texts


def _assert_same(ours, theirs, texts):
  for text in texts:
    expected = theirs.tokenize(text)
    assert ours.tokenize(text) == expected, repr(text)
  batch = ours.tokenize_batch(texts)
  assert len(batch) == len(texts)
  for text, got in zip(texts, batch):
    assert got == theirs.tokenize(text), repr(text)


# ----------------------------------------------------------------------------
# The original's own unit tests (its tokenization_test.py cases)
# ----------------------------------------------------------------------------

def test_original_full_tokenizer_case(tmp_path):
  vocab_file = tmp_path / "vocab.txt"
  vocab_file.write_text("\n".join(
      ["[UNK]", "[CLS]", "[SEP]", "want", "##want", "##ed", "wa", "un", "runn", "##ing", ","])
      + "\n")
  tok = tokenization.FullTokenizer(str(vocab_file))
  tokens = tok.tokenize("UNwant\u00E9d,running")
  assert tokens == ["un", "##want", "##ed", ",", "runn", "##ing"]
  assert tok.convert_tokens_to_ids(tokens) == [7, 4, 5, 10, 8, 9]
  ids, splits = tok.encode_batch(["UNwant\u00E9d,running", "", "want"])
  assert ids.tolist() == [7, 4, 5, 10, 8, 9, 3] and splits.tolist() == [0, 6, 6, 7]


def test_original_basic_and_wordpiece_cases():
  assert tokenization.BasicTokenizer().tokenize("ah\u535A\u63A8zz") == [
      "ah", "\u535A", "\u63A8", "zz"]
  lower = tokenization.BasicTokenizer(do_lower_case=True)
  assert lower.tokenize(" \tHeLLo!how  \n Are yoU?  ") == ["hello", "!", "how", "are", "you", "?"]
  assert lower.tokenize("H\u00E9llo") == ["hello"]
  cased = tokenization.BasicTokenizer(do_lower_case=False)
  assert cased.tokenize(" \tHeLLo!how  \n Are yoU?  ") == ["HeLLo", "!", "how", "Are", "yoU", "?"]
  vocab = {t: i for i, t in enumerate(
      ["[UNK]", "[CLS]", "[SEP]", "want", "##want", "##ed", "wa", "un", "runn", "##ing"])}
  wordpiece = tokenization.WordpieceTokenizer(vocab=vocab)
  assert wordpiece.tokenize("") == []
  assert wordpiece.tokenize("unwanted running") == ["un", "##want", "##ed", "runn", "##ing"]
  assert wordpiece.tokenize("unwantedX running") == ["[UNK]", "runn", "##ing"]
  assert tokenization.convert_tokens_to_ids(
      vocab, ["un", "##want", "##ed", "runn", "##ing"]) == [7, 4, 5, 8, 9]
  with pytest.raises(KeyError):  # quirk 21: no [UNK] fallback at this level
    tokenization.convert_tokens_to_ids(vocab, ["nope"])


def test_character_classes_match_the_original(original):
  for name in ("_is_whitespace", "_is_control", "_is_punctuation"):
    ours, theirs = getattr(tokenization, name), getattr(original, name)
    for cp in list(range(0x3000)) + list(range(0xFE00, 0x10000)) + [0x1F4A9, 0xE0001, 0x10FFFF]:
      assert ours(chr(cp)) == theirs(chr(cp)), (name, hex(cp))


def test_regex_whitespace_is_str_split_whitespace():
  # The fast path relies on re's \s and str.split() agreeing on every code point.
  pattern = re.compile(r"\s")
  for cp in range(sys.maxunicode + 1):
    assert bool(pattern.match(chr(cp))) == chr(cp).isspace(), hex(cp)


# ----------------------------------------------------------------------------
# Differential tests against the original FullTokenizer
# ----------------------------------------------------------------------------

@pytest.mark.parametrize("do_lower_case", [True, False])
def test_edge_cases_match_original(original, small_vocab, do_lower_case):
  ours = tokenization.FullTokenizer(small_vocab, do_lower_case=do_lower_case)
  theirs = original.FullTokenizer(small_vocab, do_lower_case=do_lower_case)
  _assert_same(ours, theirs, EDGE_CASES)
  basic = tokenization.BasicTokenizer(do_lower_case=do_lower_case)
  their_basic = original.BasicTokenizer(do_lower_case=do_lower_case)
  assert basic.tokenize_batch(EDGE_CASES) == [their_basic.tokenize(t) for t in EDGE_CASES]
  # bytes input is decoded as UTF-8 with errors ignored, as in the original
  raw = [t.encode("utf-8", "surrogatepass") for t in EDGE_CASES] + [b"caf\xc3\xa9 \xff\xfe ok"]
  assert ours.tokenize_batch(raw) == [theirs.tokenize(r) for r in raw]


@pytest.mark.parametrize("do_lower_case", [True, False])
def test_random_unicode_matches_original(original, small_vocab, do_lower_case):
  texts = _random_texts(1500, seed=1234 + do_lower_case)
  ours = tokenization.FullTokenizer(small_vocab, do_lower_case=do_lower_case)
  theirs = original.FullTokenizer(small_vocab, do_lower_case=do_lower_case)
  _assert_same(ours, theirs, texts)
  ids, splits = ours.encode_batch(texts)
  for i, text in enumerate(texts):
    expected = theirs.convert_tokens_to_ids(theirs.tokenize(text))
    assert ids[splits[i]:splits[i + 1]].tolist() == expected, repr(text)


def test_sample_text_matches_original(original, small_vocab):
  lines = _sample_lines()
  for lower in (True, False):
    _assert_same(tokenization.FullTokenizer(small_vocab, do_lower_case=lower),
                 original.FullTokenizer(small_vocab, do_lower_case=lower), lines)


@pytest.mark.parametrize("do_lower_case", [True, False])
def test_books_match_original(original, do_lower_case):
  vocab = str(shared_path("data", "vocab", "bert-base-uncased-vocab.txt"))
  books = sorted(shared_path("data", "text", "gutenberg_sentence_per_line").glob("*.txt"))
  lines = []
  for book in books:
    lines.extend(book.read_text(encoding="utf-8").split("\n")[::25])  # every 25th line
  theirs = original.FullTokenizer(vocab, do_lower_case=do_lower_case)
  expected = [theirs.tokenize(line) for line in lines]
  ours = tokenization.FullTokenizer(vocab, do_lower_case=do_lower_case)
  assert ours.tokenize_batch(lines) == expected
  ids, splits = ours.encode_batch(lines)
  assert np.array_equal(ids, np.array(
      [i for tokens in expected for i in theirs.convert_tokens_to_ids(tokens)], np.int32))
  assert splits.tolist() == np.cumsum([0] + [len(t) for t in expected]).tolist()


@pytest.mark.parametrize("task,columns", [("MRPC", (3, 4)), ("CoLA", (3,)), ("SST-2", (0,)),
                                          ("WNLI", (1, 2))])
def test_glue_sentences_match_original(original, task, columns):
  vocab = str(shared_path("data", "vocab", "bert-base-uncased-vocab.txt"))
  rows = shared_path("data", "glue", task, "dev.tsv").read_text(encoding="utf-8").split("\n")[1:]
  texts = [row.split("\t")[c] for row in rows if row for c in columns
           if c < len(row.split("\t"))]
  for lower in (True, False):
    theirs = original.FullTokenizer(vocab, do_lower_case=lower)
    ours = tokenization.FullTokenizer(vocab, do_lower_case=lower)
    assert ours.tokenize_batch(texts) == [theirs.tokenize(t) for t in texts]


def test_batch_edge_cases(small_vocab):
  tok = tokenization.FullTokenizer(small_vocab)
  assert tok.tokenize_batch([]) == []
  ids, splits = tok.encode_batch([])
  assert ids.shape == (0,) and splits.tolist() == [0]
  # a text holding its own newlines is still one text
  assert tok.tokenize_batch(["a\nb", "c"]) == [tok.tokenize("a b"), tok.tokenize("c")]
  # a batch mixing ASCII and non-ASCII texts
  texts = ["plain", "café", "", "x\x01y"]
  assert tok.tokenize_batch(texts) == [tok.tokenize(t) for t in texts]


def test_word_cache_is_bounded(small_vocab):
  tok = tokenization.FullTokenizer(small_vocab)
  tok._cache._limit = 50
  texts = [f"word{i} w{i}x" for i in range(200)]
  first = tok.tokenize_batch(texts)
  assert len(tok._cache) <= 50
  assert tok.tokenize_batch(texts) == first == [tok.tokenize(t) for t in texts]


def _python_only(make):
  """make() with tokenization's pure-Python caches (as without the C extension)."""
  native, tokenization._word_table = tokenization._word_table, None
  try:
    return make()
  finally:
    tokenization._word_table = native


def test_native_word_table_is_built():
  if os.environ.get("BERT_KERAS_PURE_PYTHON", "") not in ("", "0"):
    pytest.skip("BERT_KERAS_PURE_PYTHON is set: the pure-Python path is under test")
  assert tokenization._word_table is not None, (
      "the C extension _word_table.c was not built: `pip install -e .` needs a C compiler")


@pytest.mark.parametrize("do_lower_case", [True, False])
def test_native_and_python_paths_agree(small_vocab, do_lower_case):
  if tokenization._word_table is None:
    pytest.skip("the C extension is not built")
  # Words the C WordPiece of ASCII words sees: 200/201/300 characters, longer than its stack
  # buffer with punctuation inside, cased, "##", greedy matches failing half-way.
  ascii_words = ["x" * 200, "x" * 201, "a" * 300 + ",b", "ab,cd.ef!" * 40, "UnAffable,RUNNING",
                 "##ing", "#", "[UNK]", "qqqzzz,the", "the" * 70, "THE" * 80 + "!", "a-b-c-",
                 "don't", "...", "x9Y8"]
  texts = (EDGE_CASES + _random_texts(400, seed=11) + _sample_lines() + ["a\nb", "x" * 300] +
           ascii_words + [" ".join(ascii_words), "caf\xe9 " + " ".join(ascii_words)])
  original = oracle.original("tokenization").FullTokenizer(small_vocab,
                                                           do_lower_case=do_lower_case)
  native = tokenization.FullTokenizer(small_vocab, do_lower_case=do_lower_case)
  assert native.tokenize_batch(ascii_words) == [original.tokenize(w) for w in ascii_words]
  python = _python_only(lambda: tokenization.FullTokenizer(small_vocab,
                                                           do_lower_case=do_lower_case))
  assert type(native._cache).__name__ == "_NativeWordCache"
  assert type(python._cache).__name__ == "_PythonWordCache"
  for tok in (native, python):  # twice: a cold and a warm cache
    assert tok.tokenize_batch(texts) == python.tokenize_batch(texts) == native.tokenize_batch(
        texts)
  for a, b in zip(native.encode_batch(texts), python.encode_batch(texts)):
    assert a.dtype == b.dtype and np.array_equal(a, b)
  ids, _ = native.encode_batch(texts)
  ids[:1] = 0  # the arrays are the caller's to change
  basic = tokenization.BasicTokenizer(do_lower_case=do_lower_case)
  basic_python = _python_only(lambda: tokenization.BasicTokenizer(do_lower_case=do_lower_case))
  assert basic.tokenize_batch(texts) == basic_python.tokenize_batch(texts)


def test_native_word_table_edge_cases():
  if tokenization._word_table is None:
    pytest.skip("the C extension is not built")
  table = tokenization._word_table.WordTable(limit=2)
  calls = []

  def compute(word):
    calls.append(word)
    return (word.upper(), "#" + word)
  # The table starts afresh every 2 words, in the middle of lines: tokens stay right.
  text = "ab cd ef\n\u3000gh\u2028ab  \n\n ij kl mn op"
  expected = [[t for w in line.split() for t in compute(w)] for line in text.split("\n")]
  calls.clear()
  assert table.map_lines(text, compute) == expected
  assert len(table) <= 2 and len(calls) == 9
  assert table.map_lines("", compute) == [[]]
  assert table.map_lines("\n", compute) == [[], []]
  # Words of texts of every str kind (1, 2 and 4 bytes a character).
  table = tokenization._word_table.WordTable()
  for text in ("caf\xe9 x", "\u0101b x", "\U0001f600y x", "x \xe9"):
    assert table.map_lines(text, compute) == [[t for w in text.split() for t in compute(w)]]
  # Errors: compute's own, a compute that does not return a tuple, bad arguments.
  with pytest.raises(ZeroDivisionError):
    table.map_lines("new words", lambda word: 1 / 0)
  with pytest.raises(TypeError, match="tuple"):
    table.map_lines("other", lambda word: [word])
  with pytest.raises(TypeError):
    table.map_lines(b"bytes", compute)
  with pytest.raises(OverflowError):
    table.map_ids("big", lambda word: (2 ** 40,))
  # A compute that uses the same table (re-entrant) gets consistent results.

  def nested(word):
    return tuple(x for line in table.map_lines(word + "s", compute) for x in line)
  assert table.map_lines("zz zz", nested) == [["ZZS", "#zzs", "ZZS", "#zzs"]]
  ids, lengths = table.map_ids("p q\n\nr", lambda word: (ord(word), 7))
  assert np.frombuffer(ids, np.int32).tolist() == [112, 7, 113, 7, 114, 7]
  assert np.frombuffer(lengths, np.int64).tolist() == [4, 0, 2]


def test_batches_leave_the_garbage_collector_as_they_found_it(small_vocab):
  import gc
  tok = tokenization.FullTokenizer(small_vocab)
  texts = ["hello world", "café"] * 10
  seen = []
  real_map_lines = tok._cache.map_lines

  def spy(cleaned):  # the collector's state while the batch is being built
    seen.append(gc.isenabled())
    return real_map_lines(cleaned)
  tok._cache.map_lines = spy
  assert gc.isenabled()
  try:
    tok.tokenize_batch(texts)
    assert seen == [False] and gc.isenabled()  # paused inside, back on after
    gc.disable()  # a caller that turned it off keeps it off
    tok.tokenize_batch(texts)
    tok.encode_batch(texts)
    assert not gc.isenabled()
    gc.enable()
    # an error inside a batch still turns it back on: a vocab without [UNK]
    lacking = tokenization.FullTokenizer(small_vocab)
    del lacking.vocab["[UNK]"]
    with pytest.raises(KeyError):
      lacking.encode_batch(["x" * 201] * 3)  # longer than 200 characters: [UNK]
    assert gc.isenabled()
  finally:
    gc.enable()

# ----------------------------------------------------------------------------
# Vocab files and casing checks
# ----------------------------------------------------------------------------


def test_load_vocab_matches_original(original, tmp_path):
  path = tmp_path / "v.txt"
  path.write_bytes(b"[PAD]\n  spaced  \n\n[UNK]\ncaf\xc3\xa9\nin\rside\nlast-no-newline")
  assert tokenization.load_vocab(str(path)) == original.load_vocab(str(path))


def test_vocab_errors(tmp_path, caplog, original):
  with pytest.raises(tokenization.VocabError, match="cannot read vocab file .*missing.txt"):
    tokenization.FullTokenizer(str(tmp_path / "missing.txt"))
  dup = tmp_path / "dup.txt"
  dup.write_text("[UNK]\nhello\nworld\nhello\n")
  vocab = tokenization.load_vocab(str(dup))
  assert vocab["hello"] == 3  # the later line wins, as in the original
  assert "line 4 duplicates line 2" in caplog.text
  with pytest.raises(tokenization.VocabError,
                     match=r"dup.txt: token 'hello' on line 4 duplicates line 2"):
    tokenization.load_vocab(str(dup), strict=True)
  bad = tmp_path / "bad.txt"
  bad.write_bytes(b"[UNK]\nok\nbad\xff\n\xfe\n")
  # A line that is not UTF-8: the original raises UnicodeDecodeError; ours too, naming the
  # file and the line.
  with pytest.raises(UnicodeDecodeError):
    original.load_vocab(str(bad))
  with pytest.raises(UnicodeDecodeError, match=r"bad.txt, line 3: not UTF-8 \(byte 4"):
    tokenization.load_vocab(str(bad))
  with pytest.raises(tokenization.VocabError, match=r"bad.txt, line 3: not UTF-8 \(byte 4"):
    tokenization.FullTokenizer(str(bad))
  lenient = tokenization.load_vocab(str(bad), lenient_decoding=True)  # bytes dropped
  assert list(lenient) == ["[UNK]", "ok", "bad", ""] and "line 4: not UTF-8 (byte" in caplog.text
  with pytest.raises(tokenization.VocabError,
                     match=r"bad.txt has no \[CLS\], \[SEP\], \[MASK\] tokens"):
    tokenization.check_vocab(lenient, str(bad))


def test_validate_case_matches_checkpoint(original):
  cases = [
      (False, "/m/uncased_L-12_H-768_A-12/bert_model.ckpt"),
      (True, "gs://b/cased_L-12_H-768_A-12/bert_model.ckpt"),
      (True, "/x/wwm_uncased_L-24_H-1024_A-16/bert_model.ckpt"),
      (False, "/x/wwm_uncased_L-24_H-1024_A-16/bert_model.ckpt"),
      (True, "/x/wwm_cased_L-24_H-1024_A-16/bert_model.ckpt"),
      (False, "/x/uncased_L-4_H-256_A-4/bert_model.ckpt"),
      (True, "/out/model.ckpt-100"), (False, ""), (True, None),
      (True, "/m/multi_cased_L-12_H-768_A-12/bert_model.ckpt"),
      (False, "/m/chinese_L-12_H-768_A-12/bert_modelXckpt"),
  ]
  for lower, path in cases:
    def outcome(fn, **kw):
      try:
        fn(lower, path, **kw)
        return None
      except ValueError as e:
        return str(e)
    # With the original's seven names: the original's behaviour and messages.
    ours = outcome(tokenization.validate_case_matches_checkpoint, known_models="original")
    assert ours == outcome(original.validate_case_matches_checkpoint), path
  # Beyond the original: the whole-word-masking and small models are checked too.
  with pytest.raises(ValueError, match="wwm_uncased_L-24_H-1024_A-16` seems to be a lowercased"):
    tokenization.validate_case_matches_checkpoint(
        False, "/x/wwm_uncased_L-24_H-1024_A-16/bert_model.ckpt")
  with pytest.raises(ValueError, match="wwm_cased_L-24_H-1024_A-16` seems to be a cased"):
    tokenization.validate_case_matches_checkpoint(
        True, "/x/wwm_cased_L-24_H-1024_A-16/bert_model.ckpt")
  with pytest.raises(ValueError, match="uncased_L-4_H-256_A-4"):
    tokenization.validate_case_matches_checkpoint(False, "/x/uncased_L-4_H-256_A-4/bert_model.ckpt")
  tokenization.validate_case_matches_checkpoint(True, "/x/uncased_L-4_H-256_A-4/bert_model.ckpt")


def test_convert_helpers_match_original(original):
  for text in ["abc", b"abc", "caf\u00e9".encode(), b"\xff\xfeok"]:
    assert tokenization.convert_to_unicode(text) == original.convert_to_unicode(text)
    assert tokenization.printable_text(text) == original.printable_text(text)
  with pytest.raises(ValueError, match="Unsupported string type"):
    tokenization.convert_to_unicode(3)
  for text in ["", "  ", " a  b\u2028c ", "x\u3000y"]:
    assert tokenization.whitespace_tokenize(text) == original.whitespace_tokenize(text)


@pytest.mark.parametrize("do_lower_case", [True, False])
def test_random_vocab_and_ascii_text_match_original(original, tmp_path, do_lower_case):
  """A random vocab (mixed-case pieces, "##" pieces, punctuation, "#"/"##"/"###") and random
  mostly-ASCII lines (punctuation runs, 190-420 character words, a few non-ASCII and control
  characters): the WordPiece of ASCII words done by the C extension (or the Python path)
  gives the original's tokens and ids."""
  import string
  rng = random.Random(7)
  alphabet = string.ascii_letters + string.digits
  pieces = set(string.punctuation) | {"#", "##", "###"}
  for _ in range(1500):
    piece = "".join(rng.choice(alphabet[:rng.choice([6, 20, 62])])
                    for _ in range(rng.randint(1, 6)))
    pieces |= {piece, "##" + piece}
  vocab = tmp_path / "vocab.txt"
  vocab.write_text("\n".join(SPECIALS + sorted(pieces)) + "\n", encoding="utf-8")
  chars = alphabet[:12] + alphabet[26:29] + string.punctuation + "    \t" + "éü\u00a0\u2028\x01\x0b"

  def line():
    n = rng.randint(190, 420) if rng.random() < 0.05 else rng.randint(0, 60)
    pool = chars if rng.random() < 0.7 else string.ascii_letters + " ,.-'"
    return "".join(rng.choice(pool) for _ in range(n))
  texts = [line() for _ in range(1500)]
  theirs = original.FullTokenizer(str(vocab), do_lower_case=do_lower_case)
  ours = tokenization.FullTokenizer(str(vocab), do_lower_case=do_lower_case)
  expected = [theirs.tokenize(t) for t in texts]
  assert ours.tokenize_batch(texts) == expected
  ids, splits = ours.encode_batch(texts)
  assert ids.tolist() == [i for e in expected for i in theirs.convert_tokens_to_ids(e)]
  assert splits.tolist() == np.cumsum([0] + [len(e) for e in expected]).tolist()


def test_one_tokenizer_shared_by_threads(small_vocab):
  """Four threads use one FullTokenizer (from its first call on, its cache restarting every
  200 words): every thread gets the tokens and ids of a tokenizer of its own."""
  import threading
  texts = (EDGE_CASES + _random_texts(600, seed=3) + _sample_lines()) * 2
  expected = tokenization.FullTokenizer(small_vocab).tokenize_batch(texts)
  expected_ids = tokenization.FullTokenizer(small_vocab).encode_batch(texts)[0].tolist()
  shared = tokenization.FullTokenizer(small_vocab)
  shared._cache._limit = shared._id_cache._limit = 200
  results, errors = {}, []

  def work(i):
    try:
      chunk = texts[i::4]
      results[i] = [row for j in range(0, len(chunk), 25)
                    for row in shared.tokenize_batch(chunk[j:j + 25])]
      shared.encode_batch(chunk)
    except Exception as e:
      errors.append(repr(e))
  interval = sys.getswitchinterval()
  sys.setswitchinterval(1e-6)
  try:
    threads = [threading.Thread(target=work, args=(i,)) for i in range(4)]
    for t in threads:
      t.start()
    for t in threads:
      t.join()
  finally:
    sys.setswitchinterval(interval)
  assert not errors
  for i in range(4):
    assert results[i] == expected[i::4]
  assert shared.encode_batch(texts)[0].tolist() == expected_ids


@pytest.mark.parametrize("do_lower_case", [True, False])
def test_batches_with_many_distinct_cleaned_characters(original, small_vocab, do_lower_case):
  """clean_batch replaces each distinct non-ASCII character that cleaning changes, or, past
  64 of them (CJK text), runs its regular expressions: both ways give the original's tokens."""
  rng = random.Random(5)
  cjk = [chr(cp) for cp in rng.sample(range(0x4E00, 0x9FFF), 150)]
  spaces = ["\u00a0", "\u2003", "\u3000", "\u202f"]
  deleted = ["\u200b", "\ufeff", "\x85", "\ufffd", "\x9f", "\u00ad"]
  few = ["Caf\u00e9\u00a0au lait\u200b, \u201cquoted\u201d\x85 EMMA\u3000i\u0307",
         "plain ASCII line, Mixed Case!", "\u4e2d\u6587Text \u00ad soft\u00adhyphen"]
  many = ["".join(rng.choice(cjk + spaces + deleted + list("AbC dEf,.")) for _ in range(60))
          for _ in range(40)]
  theirs = original.FullTokenizer(small_vocab, do_lower_case=do_lower_case)
  ours = tokenization.FullTokenizer(small_vocab, do_lower_case=do_lower_case)
  for texts in (few, many, few + many, ["ascii only"] + few):
    assert ours.tokenize_batch(texts) == [theirs.tokenize(t) for t in texts]
    assert ours.basic_tokenizer.tokenize_batch(texts) == [
        theirs.basic_tokenizer.tokenize(t) for t in texts]


@pytest.mark.parametrize("do_lower_case", [True, False])
def test_latin1_accented_words_match_original(original, do_lower_case):
  """Words of ASCII and accented Latin-1 letters ("Café", "NAÏVE-ÉLAN!"), which the C
  extension tokenizes itself when lower-casing (its table: "É" -> "e"), in Latin-1 texts and
  in texts with wider characters; the same tokens and ids as the original."""
  vocab = str(shared_path("data", "vocab", "bert-base-uncased-vocab.txt"))
  words = ["Café", "NAÏVE-ÉLAN!", "crème", "brûlée,", "Ångström", "façade", "jalapeño",
           "Zoë's", "déjà-vu", "ÀÉÎÕÜ", "résumé" * 40, "ÿes", "naïve", "Straße", "Æsir", "½é"]
  rng = random.Random(9)
  texts = [" ".join(rng.sample(words, 5)) for _ in range(40)]
  texts += [t + " \u201cquoted\u201d" for t in texts[:10]] + ["\U0001f600 " + texts[0]]
  theirs = original.FullTokenizer(vocab, do_lower_case=do_lower_case)
  ours = tokenization.FullTokenizer(vocab, do_lower_case=do_lower_case)
  seen = []
  compute = ours._cache._compute
  ours._cache._compute = lambda word: seen.append(word) or compute(word)
  expected = [theirs.tokenize(t) for t in texts]
  assert ours.tokenize_batch(texts) == expected
  ids, _ = ours.encode_batch(texts)
  assert ids.tolist() == [i for e in expected for i in theirs.convert_tokens_to_ids(e)]
  if tokenization._word_table is not None and do_lower_case:
    # only words keeping a non-ASCII character after accent stripping reach Python
    assert seen and all(not tokenization.BasicTokenizer()._run_strip_accents(w.lower()).isascii()
                        for w in seen), seen


# ----------------------------------------------------------------------------
# Tokenizers as Python objects: pickling, copying, settings changed after first use
# ----------------------------------------------------------------------------

def _texts():
  return EDGE_CASES + _sample_lines()[:50] + ["Unaffable runners RUNNING héllo"]


def test_tokenizers_pickle_and_deepcopy(small_vocab):
  import copy
  import pickle
  full = tokenization.FullTokenizer(str(small_vocab), do_lower_case=True)
  basic = tokenization.BasicTokenizer(do_lower_case=False)
  texts = _texts()
  expected_full, expected_basic = full.tokenize_batch(texts), basic.tokenize_batch(texts)
  expected_ids = full.encode_batch(texts)
  for clone in (pickle.loads(pickle.dumps(full)), copy.deepcopy(full), copy.copy(full)):
    assert clone.tokenize_batch(texts) == expected_full
    np.testing.assert_array_equal(clone.encode_batch(texts)[0], expected_ids[0])
    assert clone.vocab == full.vocab
  for clone in (pickle.loads(pickle.dumps(basic)), copy.deepcopy(basic)):
    assert clone.tokenize_batch(texts) == expected_basic
  # Through a process pool (the tokenizer is pickled to the workers).
  import multiprocessing
  with multiprocessing.get_context("spawn").Pool(1) as pool:
    assert pool.map(full.tokenize, texts[:20]) == expected_full[:20]


def test_settings_changed_after_first_use_are_followed(original, small_vocab):
  """The original has no caches: the same change made to it and to ours, after both were
  used, must give the same tokens (and ids) from then on, on the C and Python paths."""
  texts = _texts()
  ours = tokenization.FullTokenizer(str(small_vocab), do_lower_case=True)
  theirs = original.FullTokenizer(str(small_vocab), do_lower_case=True)

  def same():
    assert ours.tokenize_batch(texts) == [theirs.tokenize(t) for t in texts]
    ids, splits = ours.encode_batch(texts)
    expected = [theirs.convert_tokens_to_ids(theirs.tokenize(t)) for t in texts]
    assert [list(ids[a:b]) for a, b in zip(splits[:-1], splits[1:])] == expected

  same()
  for tokenizer in (ours, theirs):
    tokenizer.basic_tokenizer.do_lower_case = False
  same()
  for tokenizer in (ours, theirs):  # a token added in place, then a new max length
    tokenizer.vocab["runners"] = len(tokenizer.vocab)
    tokenizer.wordpiece_tokenizer.max_input_chars_per_word = 5
  same()
  for tokenizer in (ours, theirs):
    tokenizer.wordpiece_tokenizer.unk_token = "[SEP]"
  same()
  # Assigning a whole new vocab (the original's FullTokenizer keeps two references).
  new_vocab = tokenization.load_vocab(str(small_vocab))
  del new_vocab["##s"]
  ours.vocab = new_vocab
  theirs.vocab = theirs.wordpiece_tokenizer.vocab = collections.OrderedDict(new_vocab)
  same()
  new_vocab["zzz"] = 99999  # inv_vocab follows too
  assert ours.convert_ids_to_tokens([99999]) == ["zzz"]


def test_token_added_before_first_use(small_vocab, monkeypatch):
  """The C and Python paths agree on a vocab edited before the first call (they did not)."""
  results = []
  for word_table in (tokenization._word_table, None):  # the C cache (if built), then Python
    monkeypatch.setattr(tokenization, "_word_table", word_table)
    tokenizer = tokenization.FullTokenizer(str(small_vocab), do_lower_case=True)
    tokenizer.vocab["unaffable"] = len(tokenizer.vocab)
    results.append(tokenizer.tokenize("Unaffable runners"))
  assert results[0] == results[1]
  assert results[0][0] == "unaffable"
