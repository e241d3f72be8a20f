"""preprocessing.BertPreprocessor: the original's tokenization and packing, in TF ops.

The oracle is the original code (PyPI bert-tensorflow): FullTokenizer and
run_classifier.convert_single_example. Every differential test compares input_ids,
input_mask and segment_ids row by row and prints the share of identical rows ("parity",
shown with pytest -s); any difference fails. Tests that need ../shared skip without it.
"""

import json
import os
import random
import subprocess
import sys
import unicodedata

import keras
import numpy as np
import pytest
import tensorflow as tf

import oracle
from conftest import REPO, shared_path
from bert_keras import preprocessing
from test_tokenization import EDGE_CASES, SPECIALS, _build_vocab, _random_texts

FEATURES = ("input_ids", "input_mask", "segment_ids")
UNCASED_VOCAB = ("data", "vocab", "bert-base-uncased-vocab.txt")

# Beyond test_tokenization's EDGE_CASES: every whitespace and control character, the
# final-sigma rule, combining marks that NFD reorders (Mc ones stay after accent stripping),
# words of 199-201 code points that are longer or shorter after lower-casing and accent
# stripping, characters new in Unicode 13/14 (where TensorFlow's ICU may differ), Hangul
# (NFD to jamo), CJK compatibility ideographs (NFD to another ideograph), noncharacters.
_ALL_SPACES = [chr(cp) for cp in range(sys.maxunicode + 1) if chr(cp).isspace()
               or unicodedata.category(chr(cp)) in ("Zs", "Zl", "Zp")]
_CONTROLS = [chr(cp) for cp in range(sys.maxunicode + 1)
             if unicodedata.category(chr(cp)) in ("Cc", "Cf")]
EXTRA_CASES = [
    "".join(f"w{i}{c}x" for i, c in enumerate(_ALL_SPACES)),
    "".join(f"{c}c{i}" for i, c in enumerate(_CONTROLS)),
    "Σ ΑΣ ΑΣΑ ΑΣ' Α'Σ ΑΣ\u00ad ΑΣ\u0301 Α\u0301Σ ΑΣ.Β ΣΑ ΑΣΣ ΑΣΣΑ 1Σ ΑΣ1 ΑΣ\u02b0 \u02b0Σ",
    "ὈΔΥΣΣΕΎΣ ΌΣΟΣ ΣΊΣΥΦΟΣ Ἀ\u0345Σ a\u0345Σ ΑΣ\u2028Β ΑΣ\u4e00 ΑΣ\U0001F600",
    "a\U0001D16D\U0001D165b x\u0301\U0001D16D\u0327\U0001D165y \U0001D160\U0001D16D",
    "\u302e\u1b44 Ωa\u1b44\u0334\u302f \U0001D165\U0001D16D\U0001D16E z\u0334\u1b44\u0301",
    "é" * 200, "é" * 201, "e\u0301" * 150, "E\u0301" * 101, "İ" * 150, "İ" * 201,
    "\U0001F600" * 201, "x" * 199 + "é", "中" * 201, "ß" * 201, "ǅ" * 200 + "!",
    "\u2e5d \U0001E290 \U00010570\U00010597 \ua7c0\ua7c1 \u0870 \U0001DF00",
    "\U00011F00 \u08b5",
    "\u1e9e \u2c2f\u2c5f \ua7c7\ua7c8 \ua7d0 \U00010780 \u0d81 \u1ac1",
    "한국어 가각 \uac00\ud7a3 \u1100\u1161", "\uf900\ufa0e\U0002f800 \u2f00\u2e80",
    "\ufffe\uffff \ue000 \U000f0000 \U0010ffff", "ﬀ ﬃ ﬅ ǈ ǋ ǲ ϐ ϑ ϕ ϰ ϱ ϵ ẛ ẞ K Å Ω",
    "A\u030a\u0323 a\u0323\u030a \u00c5\u0323 \u1e08 \u01fa", "\u0130\u0307 I\u0307\u0301 ı\u0307",
    "מִשְׁפָּט عَرَبِيٌّ \u200f\u200erl",
    "\u0e01\u0e34\u0e48 \u0f40\u0f71\u0f72 \u0915\u094d\u0937",
]
BAD_UTF8 = [b"caf\xc3\xa9 \xff\xfe ok", b"\xed\xa0\x80x", b"\xe0\x80z", b"\xf4\x90\x80\x80r",
            b"\xc3", b"x\xe2\x82y", b"\xf0\x9f\x98\x80!", b"\xc0\xafk", b"a\x00b"]


@pytest.fixture(scope="module")
def original():
  return oracle.original("run_classifier"), oracle.original("tokenization")


def _corpus_lines(*parts, every=1):
  return shared_path(*parts).read_text(encoding="utf-8").split("\n")[::every]


def _book_lines(count):
  books = sorted(shared_path("data", "text", "gutenberg_sentence_per_line").glob("*.txt"))
  lines = [line for book in books for line in book.read_text(encoding="utf-8").split("\n")]
  return lines[::max(1, len(lines) // count)][:count]


def _glue_texts(task, columns):
  rows = [row.split("\t") for row in _corpus_lines("data", "glue", task, "dev.tsv") if row]
  return [[row[c] for row in rows if max(columns) < len(row)] for c in columns]


def _squad_texts(name, limit):
  data = json.loads(shared_path("data", "squad", name).read_text(encoding="utf-8"))["data"]
  pairs = [(qa["question"], paragraph["context"]) for article in data
           for paragraph in article["paragraphs"] for qa in paragraph["qas"]]
  pairs = pairs[::max(1, len(pairs) // limit)][:limit]
  return [q for q, _ in pairs], [c for _, c in pairs]


@pytest.fixture(scope="module")
def cased_vocab(tmp_path_factory):
  """A cased vocab for the test: words, characters, "##" characters and "##" words of all
  the corpora (test_tokenization's recipe), so WordPiece both matches and splits."""
  texts = EDGE_CASES + EXTRA_CASES + (REPO / "sample_text.txt").read_text().split("\n")
  try:
    texts += _book_lines(3000) + _glue_texts("MRPC", (3,))[0] + _squad_texts(
        "xquad.en.json", 200)[1]
  except pytest.skip.Exception:
    pass
  return _build_vocab(texts, tmp_path_factory.mktemp("cased") / "vocab.txt")


@pytest.fixture(scope="module")
def edge_vocab(tmp_path_factory):
  return _build_vocab(EDGE_CASES + EXTRA_CASES, tmp_path_factory.mktemp("edge") / "vocab.txt")


_CALLS = {}


def _features(layer, texts_a, texts_b=None, batch=256):
  """The layer's outputs for lists of texts (str or bytes), run as one traced function:
  {name: int32 numpy [len(texts_a), max_seq_length]}."""
  key = (id(layer), texts_b is None)
  if key not in _CALLS:
    spec = tf.TensorSpec([None], tf.string)
    _CALLS[key] = (tf.function(lambda a: layer(a), input_signature=[spec]) if texts_b is None
                   else tf.function(lambda a, b: layer((a, b)), input_signature=[spec, spec]))
  call = _CALLS[key]
  outputs = []
  for i in range(0, len(texts_a), batch):
    texts = [tf.constant(_raw(t[i:i + batch]), tf.string)
             for t in (texts_a, texts_b) if t is not None]
    outputs.append({k: v.numpy() for k, v in call(*texts).items()})
  return {k: np.concatenate([o[k] for o in outputs]) for k in FEATURES}


def _raw(texts):
  """Texts as UTF-8 bytes (a lone surrogate becomes the invalid bytes it encodes to)."""
  return [t if isinstance(t, bytes) else t.encode("utf-8", "surrogatepass") for t in texts]


def _expected(original, vocab_file, do_lower_case, max_seq_length, texts_a, texts_b=None):
  """The original convert_single_example's features, one row per text (pair)."""
  run_classifier, tokenization = original
  tokenizer = tokenization.FullTokenizer(vocab_file, do_lower_case=do_lower_case)
  rows = []
  for i, text_a in enumerate(_raw(texts_a)):
    text_b = None if texts_b is None else _raw([texts_b[i]])[0]
    example = run_classifier.InputExample(guid=str(i), text_a=text_a, text_b=text_b, label="0")
    feature = run_classifier.convert_single_example(10, example, ["0"], max_seq_length,
                                                    tokenizer)
    rows.append([feature.input_ids, feature.input_mask, feature.segment_ids])
  return {k: np.array([r[j] for r in rows], np.int32).reshape(-1, max_seq_length)
          for j, k in enumerate(FEATURES)}


def _assert_parity(name, original, vocab_file, do_lower_case, max_seq_length, texts_a,
                   texts_b=None):
  """Runs ours and the original on the same texts; prints the parity; fails on any
  difference (showing the first few texts that differ)."""
  layer = _layer(vocab_file, do_lower_case, max_seq_length)
  got = _features(layer, texts_a, texts_b)
  want = _expected(original, vocab_file, do_lower_case, max_seq_length, texts_a, texts_b)
  same = np.all([np.all(got[k] == want[k], axis=1) for k in FEATURES], axis=0)
  casing = "uncased" if do_lower_case else "cased"
  kind = "pairs" if texts_b is not None else "singles"
  print(f"\nparity {name} ({casing}, {kind}, max_seq_length {max_seq_length}): "
        f"{100 * same.mean():.2f}% of {len(same)} rows")
  differ = [i for i in np.flatnonzero(~same)[:5]]
  assert not differ, [(texts_a[i], texts_b[i] if texts_b else None,
                       got["input_ids"][i].tolist(), want["input_ids"][i].tolist())
                      for i in differ]


_LAYERS = {}


def _layer(vocab_file, do_lower_case, max_seq_length):
  key = (str(vocab_file), do_lower_case, max_seq_length)
  if key not in _LAYERS:
    _LAYERS[key] = preprocessing.BertPreprocessor(str(vocab_file), do_lower_case, max_seq_length)
  return _LAYERS[key]


def _pairs(lines):
  """Consecutive lines as pairs (a, b), some b empty or whitespace (a single segment)."""
  a, b = lines[0::2], lines[1::2]
  b = [t if i % 7 else ("" if i % 14 else " \t ") for i, t in enumerate(b)]
  return a[:len(b)], b


# ----------------------------------------------------------------------------
# Differential tests against the original
# ----------------------------------------------------------------------------

@pytest.mark.slow
@pytest.mark.parametrize("do_lower_case", [True, False])
def test_edge_cases_match_original(original, edge_vocab, do_lower_case):
  texts = EDGE_CASES + EXTRA_CASES + BAD_UTF8
  _assert_parity("edge cases", original, edge_vocab, do_lower_case, 128, texts)
  _assert_parity("edge cases, short", original, edge_vocab, do_lower_case, 8, texts)
  a, b = texts[::2], texts[1::2][:len(texts[::2])]
  _assert_parity("edge cases", original, edge_vocab, do_lower_case, 24, a[:len(b)], b)
  if do_lower_case:
    vocab = shared_path(*UNCASED_VOCAB)
    _assert_parity("edge cases, bert-base-uncased vocab", original, vocab, True, 128, texts)


@pytest.mark.slow
@pytest.mark.parametrize("do_lower_case", [True, False])
def test_core_ops_only_matches_original(original, edge_vocab, do_lower_case):
  """core_ops_only=True (no tensorflow-text op: every text through the exact basic tokenizer
  and the TF-op WordPiece loop) gives the original's rows too."""
  layer = preprocessing.BertPreprocessor(str(edge_vocab), do_lower_case, 48, core_ops_only=True)
  assert layer.get_config()["core_ops_only"]
  texts = EDGE_CASES + EXTRA_CASES + BAD_UTF8 + _random_texts(300, seed=5 + do_lower_case) + [
      "Plain ASCII, as most text is.", "x" * 200, "x" * 201, "a " * 30]
  for texts_a, texts_b in ((texts, None), _pairs(texts)):
    got = _features(layer, texts_a, texts_b)
    want = _expected(original, edge_vocab, do_lower_case, 48, texts_a, texts_b)
    for name in FEATURES:
      np.testing.assert_array_equal(got[name], want[name], err_msg=name)


@pytest.mark.slow
@pytest.mark.parametrize("do_lower_case", [True, False])
def test_random_unicode_matches_original(original, edge_vocab, do_lower_case):
  texts = _random_texts(1200, seed=77 + do_lower_case)
  _assert_parity("random Unicode", original, edge_vocab, do_lower_case, 48, texts)
  _assert_parity("random Unicode", original, edge_vocab, do_lower_case, 20, *_pairs(texts))


@pytest.mark.slow
@pytest.mark.parametrize("do_lower_case", [True, False])
def test_sample_text_and_books_match_original(original, cased_vocab, do_lower_case):
  vocab = shared_path(*UNCASED_VOCAB) if do_lower_case else cased_vocab
  sample = _corpus_lines("data", "text", "bert_sample_text.txt")
  _assert_parity("bert_sample_text", original, vocab, do_lower_case, 128, sample)
  _assert_parity("bert_sample_text", original, vocab, do_lower_case, 32, *_pairs(sample))
  books = _book_lines(2000)
  _assert_parity("gutenberg books", original, vocab, do_lower_case, 128, books)
  _assert_parity("gutenberg books", original, vocab, do_lower_case, 32, *_pairs(books))


@pytest.mark.parametrize("do_lower_case", [True, False])
def test_glue_sentences_match_original(original, cased_vocab, do_lower_case):
  vocab = shared_path(*UNCASED_VOCAB) if do_lower_case else cased_vocab
  for task, columns in (("CoLA", (3,)), ("SST-2", (0,))):
    _assert_parity(f"GLUE {task} dev", original, vocab, do_lower_case, 128,
                   _glue_texts(task, columns)[0])
  for task, columns in (("MRPC", (3, 4)), ("WNLI", (1, 2))):
    _assert_parity(f"GLUE {task} dev", original, vocab, do_lower_case, 64,
                   *_glue_texts(task, columns))


@pytest.mark.slow
@pytest.mark.parametrize("do_lower_case", [True, False])
def test_squad_questions_and_contexts_match_original(original, cased_vocab, do_lower_case):
  vocab = shared_path(*UNCASED_VOCAB) if do_lower_case else cased_vocab
  for name in ("xquad.en.json", "squad2_part_a.json"):
    questions, contexts = _squad_texts(name, 120)
    _assert_parity(f"SQuAD {name}", original, vocab, do_lower_case, 384, questions, contexts)
    _assert_parity(f"SQuAD {name}", original, vocab, do_lower_case, 64, questions, contexts)
    _assert_parity(f"SQuAD {name} contexts", original, vocab, do_lower_case, 384,
                   sorted(set(contexts))[:40])


# A vocab with what the WordPiece op's builder does not take or treats its own way: "" (an
# empty line), "##" alone, NUL, whitespace inside, "." with "##.", tokens over 256 UTF-8
# bytes (whole and "##"), words of 199-201 characters. (No duplicates: bert-tensorflow 1.0.4
# keeps a token's first line, tokenization.load_vocab its last, as google-research/bert.)
QUIRK_VOCAB = SPECIALS + [
    "x" * 200, "x" * 199, "x", "##x", "xx", "##xx", "a", "##b", "ab", "the", "##s", ".", "##.",
    ",", "#", "##", "###", "", "a b", "x\0", "é" * 150, "##" + "é" * 130, "é", "##é",
    "hello", "##ello", "Hello", "##" + "x" * 199]
ASCII_EDGES = ["x" * n for n in (199, 200, 201, 202)] + [
    "xx" * 100, "xx" * 100 + "x", "x" * 200 + "." + "x" * 201, "a.b ## ### #a the the",
    "Hello HELLO hello ab##b", " ", "\t \n\r", "", "".join(chr(c) for c in range(32, 127)),
    "a\x0bb a\x0cb", "x\x7fy a\x1fb \x00ab"] + [chr(c) + "ab" + chr(c) for c in range(128)]
NON_ASCII_EDGES = ["é" * 150, "é" * 200, "é" * 280, "é" * 151 + " x" + "é" * 131, "Éé" * 90,
                   "caf\u00e9 the", "\u00a0x\u2003the"]


@pytest.mark.slow
@pytest.mark.parametrize("do_lower_case", [True, False])
def test_ascii_fast_path_and_vocab_quirks_match_original(original, tmp_path, do_lower_case):
  """ASCII texts take the fast path (the WordPiece op splits them), the others the TF-op
  basic tokenizer; in batches of one kind or mixed, on a vocab of quirks and on
  bert-base-uncased: identical to the original."""
  vocab = tmp_path / "vocab.txt"
  vocab.write_text("".join(t + "\n" for t in QUIRK_VOCAB), encoding="utf-8")
  rng = random.Random(5 + do_lower_case)
  alphabet = [chr(c) for c in range(32, 127)] + ["\t", "\n", "\r"] + [
      "x", "xx", "the", "ab", "Hello", "a", "b", " "] * 4
  randoms = ["".join(rng.choice(alphabet) for _ in range(rng.randint(0, 60)))
             for _ in range(600)]
  mixed = ASCII_EDGES + NON_ASCII_EDGES + randoms
  rng.shuffle(mixed)
  for name, texts in (("ASCII edges", ASCII_EDGES), ("non-ASCII edges", NON_ASCII_EDGES),
                      ("random ASCII", randoms), ("mixed", mixed)):
    _assert_parity(name, original, vocab, do_lower_case, 64, texts)
  _assert_parity("mixed", original, vocab, do_lower_case, 48, *_pairs(mixed))
  if do_lower_case:
    _assert_parity("mixed, bert-base-uncased vocab", original, shared_path(*UNCASED_VOCAB),
                   True, 64, mixed)


def test_truncation_matches_original(original, tmp_path):
  """What truncation keeps of every pair of lengths 0-40 at every max_seq_length 3-40 is what
  the original's _truncate_seq_pair keeps; end to end (texts of n known words, through the
  original convert_single_example) at three max_seq_length."""
  run_classifier = original[0]
  grid = [(la, lb, m) for la in range(41) for lb in range(41) for m in range(3, 41)]
  kept_a, kept_b = preprocessing._kept_lengths(
      *[tf.constant([g[i] for g in grid], tf.int64) for i in range(2)],
      tf.constant([g[2] for g in grid], tf.int64))
  for (la, lb, m), got_a, got_b in zip(grid, kept_a.numpy(), kept_b.numpy()):
    a, b = ["w"] * la, ["w"] * lb
    if b:
      run_classifier._truncate_seq_pair(a, b, m - 3)
    assert (got_a, got_b) == (min(len(a), m - 2), len(b)), (la, lb, m)
  vocab = tmp_path / "vocab.txt"
  vocab.write_text("\n".join(SPECIALS + ["w"]) + "\n")
  lengths = [(la, lb) for la in range(9) for lb in range(9)]
  texts_a = [" ".join(["w"] * la) for la, _ in lengths]
  texts_b = [" ".join(["w"] * lb) for _, lb in lengths]
  for max_seq_length in (3, 8, 11):
    layer = _layer(vocab, True, max_seq_length)
    got = _features(layer, texts_a, texts_b)
    want = _expected(original, str(vocab), True, max_seq_length, texts_a, texts_b)
    for k in FEATURES:
      np.testing.assert_array_equal(got[k], want[k], err_msg=f"{k} {max_seq_length}")


# ----------------------------------------------------------------------------
# The layer: inputs, errors, config, tf.data, Keras models, SavedModel
# ----------------------------------------------------------------------------

TINY_VOCAB = SPECIALS + ["hello", "world", "##s", "un", "##want", "##ed", ",", "!", "the"]


def _tiny(**kwargs):
  return preprocessing.BertPreprocessor(vocabulary=TINY_VOCAB, max_seq_length=8, **kwargs)


def test_input_forms_and_outputs():
  layer = _tiny()
  a = tf.constant(["Hello worlds!", "unwanted", ""])
  b = tf.constant(["the world", "", "hello"])
  single = layer(a)
  assert set(single) == set(FEATURES)
  assert all(v.dtype == tf.int32 and v.shape == (3, 8) for v in single.values())
  assert single["input_ids"].numpy().tolist() == [
      [2, 5, 6, 7, 12, 3, 0, 0], [2, 8, 9, 10, 3, 0, 0, 0], [2, 3, 0, 0, 0, 0, 0, 0]]
  assert single["input_mask"].numpy().tolist()[0] == [1] * 6 + [0] * 2
  pair = layer((a, b))
  assert pair["input_ids"].numpy().tolist()[0] == [2, 5, 6, 7, 3, 13, 6, 3]  # a truncated
  assert pair["segment_ids"].numpy().tolist()[0] == [0, 0, 0, 0, 0, 1, 1, 1]
  assert pair["segment_ids"].numpy().tolist()[1] == [0] * 8  # empty b: one segment
  for same in (layer({"text_a": a, "text_b": b}), layer([a, b])):
    for k in FEATURES:
      np.testing.assert_array_equal(same[k], pair[k])
  np.testing.assert_array_equal(layer({"text_a": a})["input_ids"], single["input_ids"])
  np.testing.assert_array_equal(layer(tf.reshape(a, [3, 1]))["input_ids"], single["input_ids"])
  scalar = layer(tf.constant("Hello worlds!"))
  assert scalar["input_ids"].shape == (8,)
  np.testing.assert_array_equal(scalar["input_ids"], single["input_ids"][0])
  empty = layer(tf.constant([], tf.string))
  assert empty["input_ids"].shape == (0, 8)


def test_errors(tmp_path):
  with pytest.raises(ValueError, match="vocab_file or vocabulary"):
    preprocessing.BertPreprocessor()
  with pytest.raises(ValueError, match=r"has no \[CLS\]"):
    preprocessing.BertPreprocessor(vocabulary=["[UNK]", "[SEP]", "a"])
  with pytest.raises(ValueError, match="cannot read vocab file"):
    preprocessing.BertPreprocessor(str(tmp_path / "missing.txt"))
  with pytest.raises(ValueError, match="max_seq_length 2 is below 3"):
    preprocessing.BertPreprocessor(vocabulary=TINY_VOCAB, max_seq_length=2)
  with pytest.raises(ValueError, match="text_a and"):
    _tiny()({"first": tf.constant(["x"])})
  with pytest.raises(ValueError, match="not 3 tensors"):
    _tiny()([tf.constant(["x"])] * 3)


def test_vocab_file_duplicates_and_config_round_trip(tmp_path):
  vocab = tmp_path / "vocab.txt"
  vocab.write_text("\n".join(TINY_VOCAB + ["hello", "wor", "##ld"]) + "\n")  # later line wins
  layer = preprocessing.BertPreprocessor(str(vocab), do_lower_case=False, max_seq_length=8)
  assert layer.vocabulary[5] is None and layer.vocabulary[14] == "hello"
  texts = tf.constant(["hello world Hello", "worlds"])
  out = layer(texts)
  assert out["input_ids"].numpy().tolist()[0] == [2, 14, 6, 1, 3, 0, 0, 0]
  config = json.loads(json.dumps(layer.get_config()))
  assert "vocabulary" not in config   # an asset of the .keras file (save_assets)
  assert not config["do_lower_case"] and config["max_seq_length"] == 8
  waiting = preprocessing.BertPreprocessor.from_config(config)
  with pytest.raises(ValueError, match="no vocabulary yet"):
    waiting(texts)
  layer.save_assets(str(tmp_path))
  assert json.loads((tmp_path / "vocabulary.json").read_text())[14] == "hello"
  waiting.load_assets(str(tmp_path))
  # A config that holds the vocabulary (files saved before it became an asset) is complete.
  legacy = preprocessing.BertPreprocessor.from_config(dict(config, vocabulary=layer.vocabulary))
  for clone in (waiting, legacy):
    assert clone.get_config() == layer.get_config() and clone.vocabulary == layer.vocabulary
    for k in FEATURES:
      np.testing.assert_array_equal(clone(texts)[k], out[k])


def test_tf_data_and_keras_model(tmp_path):
  layer = _tiny()
  texts = ["Hello worlds!", "unwanted", "", "the the the the the the the the", "x"]
  expected = layer(tf.constant(texts))
  dataset = tf.data.Dataset.from_tensor_slices(texts).batch(2).map(layer)
  rows = {k: np.concatenate([batch[k] for batch in dataset]) for k in FEATURES}
  unbatched = tf.data.Dataset.from_tensor_slices(texts).map(layer).batch(5)
  for k in FEATURES:
    np.testing.assert_array_equal(rows[k], expected[k])
    np.testing.assert_array_equal(next(iter(unbatched))[k], expected[k])
  inputs = keras.Input(shape=(), dtype="string")
  features = layer(inputs)
  assert features["input_ids"].shape == (None, 8)
  outputs = keras.layers.Lambda(lambda f: f["input_ids"] + f["segment_ids"])(features)
  model = keras.Model(inputs, outputs)
  np.testing.assert_array_equal(model(tf.constant(texts)), expected["input_ids"])
  path = str(tmp_path / "model.keras")
  model.save(path)
  loaded = keras.models.load_model(path, safe_mode=False)
  np.testing.assert_array_equal(loaded(tf.constant(texts)), expected["input_ids"])


_LOAD_SCRIPT = """
import json, sys
import tensorflow as tf
import tensorflow_text  # noqa: F401  (registers the FastWordpieceTokenizeWithOffsets op)
loaded = tf.saved_model.load(sys.argv[1])
single = loaded.single(tf.constant(json.loads(sys.argv[2])))
pair = loaded.pair(tf.constant(json.loads(sys.argv[2])), tf.constant(json.loads(sys.argv[3])))
assert not [m for m in sys.modules if m.startswith("bert_keras")]
print("RESULT", json.dumps({k: v.numpy().tolist() for k, v in
                            [("single", single["input_ids"]), ("pair", pair["segment_ids"])]}))
"""


@pytest.mark.slow
def test_saved_model_loads_without_bert_keras(tmp_path, edge_vocab):
  """tf.saved_model.save of a tf.Module using the layer; loaded with tf.saved_model.load in
  a fresh process that imports only TensorFlow and tensorflow_text (for its WordPiece op),
  not bert_keras."""
  layer = preprocessing.BertPreprocessor(edge_vocab, do_lower_case=True, max_seq_length=16)
  spec = tf.TensorSpec([None], tf.string)
  module = tf.Module()
  module.single = tf.function(lambda a: layer(a), input_signature=[spec])
  module.pair = tf.function(lambda a, b: layer((a, b)), input_signature=[spec, spec])
  tf.saved_model.save(module, str(tmp_path / "saved"))
  texts_a = ["ΑΣ ΟΔΥΣΣΕΥΣ naïve", "x" * 201 + " café", "\u4e2d\u6587, İstanbul!", "Plain, ASCII."]
  texts_b = ["second text", "", "a\U0001D16D\U0001D165b", "x" * 200]
  proc = subprocess.run(
      [sys.executable, "-c", _LOAD_SCRIPT, str(tmp_path / "saved"), json.dumps(texts_a),
       json.dumps(texts_b)],
      capture_output=True, text=True, timeout=300, cwd=str(tmp_path),
      env=dict(os.environ, TF_CPP_MIN_LOG_LEVEL="2"))
  assert proc.returncode == 0, proc.stderr[-3000:]
  result = json.loads(proc.stdout.split("RESULT ", 1)[1])
  assert result["single"] == layer(tf.constant(texts_a))["input_ids"].numpy().tolist()
  assert result["pair"] == layer((tf.constant(texts_a), tf.constant(texts_b)))[
      "segment_ids"].numpy().tolist()


def test_character_tables_are_the_originals(original):
  """The table's classes are the original's _is_whitespace/_is_control/_is_punctuation and
  Python's unicodedata, on every code point."""
  tokenization = original[1]
  bits = preprocessing._code_point_bits()
  rng = random.Random(3)
  for cp in list(range(0x3400)) + rng.sample(range(0x3400, sys.maxunicode + 1), 20000):
    char = chr(cp)
    assert bool(bits[cp] & preprocessing._PUNCT) == tokenization._is_punctuation(char)
    cleaned = cp in (0, 0xFFFD) or tokenization._is_control(char)
    assert bool(bits[cp] & preprocessing._DELETE) == cleaned, hex(cp)
    assert bool(bits[cp] & preprocessing._TO_SPACE) == tokenization._is_whitespace(char)
    assert bool(bits[cp] & preprocessing._SPACE) == char.isspace()
    assert bool(bits[cp] & preprocessing._MN) == (unicodedata.category(char) == "Mn")


def test_long_vocab_entries_in_the_tensorflow_text_path(tmp_path, monkeypatch):
  pytest.importorskip("tensorflow_text")
  from bert_keras import preprocessing
  from bert_keras import tokenization
  vocab = tmp_path / "vocab.txt"
  vocab.write_text("".join(f"{t}\n" for t in [
      "[PAD]", "[UNK]", "[CLS]", "[SEP]", "[MASK]", "the", "dog", "##s", "a" * 300,
      "##" + "b" * 300, "é" * 200, "c" * 250]), encoding="utf-8")
  texts = ["the dogs", "a" * 300 + " the", "c" * 250, "é" * 200, "x " + "b" * 300]
  tokenizer = tokenization.FullTokenizer(str(vocab), True)
  expected = [tokenizer.convert_tokens_to_ids(tokenizer.tokenize(t)) for t in texts]
  preprocessor = preprocessing.BertPreprocessor(str(vocab), True, 16)
  ids = preprocessor(tf.constant(texts))["input_ids"].numpy()
  for row, want in zip(ids, expected):
    assert list(row[1:1 + len(want)]) == want
  # A refusal of tensorflow-text's builder quoting a huge entry: one capped line.
  from tensorflow_text.core.pybinds import pywrap_fast_wordpiece_tokenizer_model_builder as b

  def refuse(*args):
    raise RuntimeError("The vocab token is: " + "z" * 10_000_000)
  monkeypatch.setattr(b, "build_fast_wordpiece_model", refuse)
  with pytest.raises(ValueError) as info:
    preprocessing.BertPreprocessor(str(vocab), True, 16)
  assert str(info.value).startswith("tensorflow-text's WordPiece builder refused the vocabulary")
  assert len(str(info.value)) < 400
