"""tokenizer.json (huggingface_layout.tokenizer_json): HuggingFace's own `tokenizers`, reading
the file we write, gives the word-piece ids of our FullTokenizer ([CLS] and [SEP] added) on the
texts of test_tokenization.py, the sample text and the books of ../shared; the HuggingFace
layout and the TFLite / ONNX exports write it."""

import json
import os

import numpy as np
import pytest

from conftest import shared_path
from bert_keras import huggingface_layout
from bert_keras import modeling
from bert_keras import preprocessing
from bert_keras import tokenization
import test_tokenization

tokenizers = pytest.importorskip("tokenizers")

SPECIALS = ("[PAD]", "[UNK]", "[CLS]", "[SEP]", "[MASK]")
NO_LIMIT = 1 << 20  # (a truncation length no text here reaches)


def _texts():
  """test_tokenization's texts: its edge cases, random texts of every kind of character the
  tokenizer treats specially, and sample_text.txt's lines; without those holding a lone
  surrogate (not UTF-8: no server receives one, and `tokenizers` takes none)."""
  texts = (test_tokenization.EDGE_CASES + test_tokenization._random_texts(1500, seed=7)
           + test_tokenization._sample_lines())
  return [t for t in texts if not any("\ud800" <= c <= "\udfff" for c in t)]


@pytest.fixture(scope="module")
def small_vocab(tmp_path_factory):
  return test_tokenization._build_vocab(test_tokenization.EDGE_CASES
                                        + test_tokenization._sample_lines(),
                                        tmp_path_factory.mktemp("vocab") / "vocab.txt")


def _theirs(vocab_file, do_lower_case, max_seq_length=NO_LIMIT, encode_special_tokens=True):
  """`tokenizers` reading our tokenizer.json. encode_special_tokens (a runtime setting, not in
  the file): a "[MASK]" written in the text is text, as in our tokenizer."""
  tokenizer = tokenizers.Tokenizer.from_str(
      huggingface_layout.tokenizer_json(vocab_file, do_lower_case, max_seq_length))
  tokenizer.encode_special_tokens = encode_special_tokens
  return tokenizer


def _ours(tokenizer, a, b=None):
  """(ids, type ids) of [CLS] a [SEP] (b [SEP]) by FullTokenizer, untruncated."""
  tokens = ["[CLS]"] + tokenizer.tokenize(a) + ["[SEP]"]
  types = [0] * len(tokens)
  if b is not None:
    tokens_b = tokenizer.tokenize(b) + ["[SEP]"]
    tokens += tokens_b
    types += [1] * len(tokens_b)
  return tokenizer.convert_tokens_to_ids(tokens), types


def _assert_equal_ids(vocab_file, do_lower_case, texts):
  """Every text alone, and each with the next as a pair: the same ids (and type ids)."""
  ours = tokenization.FullTokenizer(vocab_file, do_lower_case)
  theirs = _theirs(vocab_file, do_lower_case)
  got = theirs.encode_batch(texts)
  differ = [t for t, e in zip(texts, got) if e.ids != _ours(ours, t)[0]]
  assert not differ, (len(differ), differ[:5])
  pairs = list(zip(texts, texts[1:]))
  got = theirs.encode_batch(pairs)
  differ = [p for p, e in zip(pairs, got) if (e.ids, e.type_ids) != _ours(ours, *p)]
  assert not differ, (len(differ), differ[:5])
  return len(texts)


@pytest.mark.parametrize("do_lower_case", [True, False])
def test_the_tokenization_suites_texts_give_our_ids(small_vocab, do_lower_case):
  texts = _texts()
  assert _assert_equal_ids(small_vocab, do_lower_case, texts) > 1600
  # (what they hold: accents, CJK, control characters, punctuation, words past
  # max_input_chars_per_word, unknown words, mixed case, Greek capital sigmas)
  assert any(len(t) > 200 and " " not in t for t in texts)
  assert any("\u03a3" in t for t in texts) and any("\x00" in t for t in texts)


def test_greek_final_sigma_is_pythons(tmp_path):
  """str.lower's final sigma (which BertNormalizer alone lacks) in its contexts: accents and
  apostrophes skipped, controls (which cleaning deletes) skipped, a space or CJK ending it."""
  texts = ["ΟΔΟΣ", "ΑΣ.", "ΑΣ'Σ", "Α\u0301Σ", "ΑΣ\u0301Β", "ΑΣ\u0301", "Σ", "ΣΑ", "aΣ", "Α.Σ",
           "ΑΣ\x05Β", "Α\x00Σ", "Α\ufffdΣ", "ΑΣ\u200bΒ", "ΟΔΟΣ ΟΔΟΣ", "ΑΣ中", "ΑΣ\tΒ", "ΑΣ-Β",
           "Α\u0345Σ", "•\u0345Σ", "\u0345Σ", "ΑΣ\u0345", "ΑΣ\u0345Β", "\u1fbcΣ"]
  letters = sorted({c for t in texts for c in t.lower() if not c.isspace()} | {"ς", "σ"})
  vocab = tmp_path / "vocab.txt"
  vocab.write_text("".join(t + "\n" for t in SPECIALS + tuple(letters)
                           + tuple("##" + c for c in letters)), encoding="utf-8")
  _assert_equal_ids(str(vocab), True, texts)


@pytest.mark.parametrize("do_lower_case", [True, False])
def test_books_give_our_ids(do_lower_case):
  """The first 2,000 lines of the books, the same number from each."""
  vocab = str(shared_path("data", "vocab", "bert-base-uncased-vocab.txt"))
  books = sorted(shared_path("data", "text", "gutenberg_sentence_per_line").glob("*.txt"))
  lines = []
  for book in books:
    with open(book, encoding="utf-8") as f:
      lines.extend(line.rstrip("\n") for _, line in zip(range(-(-2000 // len(books))), f))
  assert _assert_equal_ids(vocab, do_lower_case, lines[:2000]) == 2000


def test_a_special_token_written_in_the_text(small_vocab):
  """The one difference the file cannot carry: by default `tokenizers` reads "[MASK]" in the
  text as the token (our tokenizer, as the original, splits it); encode_special_tokens, a
  setting of the loading program, does as we do."""
  ours = tokenization.FullTokenizer(small_vocab, True)
  text = "a [MASK] b"
  assert _theirs(small_vocab, True).encode(text).ids == _ours(ours, text)[0]
  default = _theirs(small_vocab, True, encode_special_tokens=False).encode(text).tokens
  assert default == ["[CLS]", "a", "[MASK]", "b", "[SEP]"]


@pytest.mark.parametrize("max_seq_length", [5, 6, 9, 16, 17])
def test_truncation_is_our_packings(tmp_path, max_seq_length):
  """The first max_seq_length - 2 word pieces of a single text; a pair cut from the end of the
  longer text, as preprocessing.pack_tokens, but for where `tokenizers` puts the odd piece
  (its LongestFirst: to the longer text, b on ties; ours: to a)."""
  vocab = tmp_path / "vocab.txt"
  vocab.write_text("".join(t + "\n" for t in SPECIALS + ("a", "b")))
  ours = tokenization.FullTokenizer(str(vocab), True)
  theirs = _theirs(str(vocab), True, max_seq_length)
  budget, checked, odd_to_b = max_seq_length - 3, 0, []
  for la in range(0, 14):
    text_a = " ".join("a" * la)
    _, ids, mask, _ = preprocessing.pack_tokens(ours.tokenize(text_a), None, max_seq_length,
                                                ours)
    assert theirs.encode(text_a).ids == ids[:sum(mask)]
    for lb in range(1, 14):
      text_b = " ".join("b" * lb)
      _, ids, mask, segments = preprocessing.pack_tokens(
          ours.tokenize(text_a), ours.tokenize(text_b), max_seq_length, ours)
      want = ids[:sum(mask)], segments[:sum(mask)]
      got = theirs.encode(text_a, text_b)
      if budget % 2 == 1 and min(la, lb) > budget // 2 and lb >= la:
        # Both cut to the middle, b the longer or as long: the odd piece is a's in ours, b's
        # in theirs ([CLS] = 2, [SEP] = 3, a = 5, b = 6).
        half = budget // 2
        assert want[0].count(5) == half + 1
        want = ([2] + [5] * half + [3] + [6] * (half + 1) + [3],
                [0] * (half + 2) + [1] * (half + 2))
        odd_to_b.append((la, lb))
      assert (got.ids, got.type_ids) == (list(want[0]), list(want[1])), (la, lb)
      checked += 1
  assert checked == 14 * 13 and bool(odd_to_b) == (budget % 2 == 1)


def test_the_document(tmp_path):
  """BERT's components, with our settings: the vocab's special tokens only, our
  WordpieceTokenizer's unknown token and word limit, the case as given."""
  vocab = tmp_path / "vocab.txt"
  vocab.write_text("[PAD]\n[UNK]\n[CLS]\n[SEP]\nhello\n##s\n")  # (no [MASK])
  for lower in (True, False):
    document = json.loads(huggingface_layout.tokenizer_json(str(vocab), lower, 32))
    assert [t["content"] for t in document["added_tokens"]] == ["[PAD]", "[UNK]", "[CLS]",
                                                                 "[SEP]"]
    assert all(t["special"] for t in document["added_tokens"])
    normalizer = document["normalizer"]
    if lower:
      assert [n["type"] for n in normalizer["normalizers"]] == ["Replace", "BertNormalizer"]
      normalizer = normalizer["normalizers"][1]
    assert normalizer == {"type": "BertNormalizer", "clean_text": True,
                          "handle_chinese_chars": True, "strip_accents": lower,
                          "lowercase": lower}
    assert document["pre_tokenizer"] == {"type": "BertPreTokenizer"}
    wordpiece = tokenization.WordpieceTokenizer({})
    assert document["model"] == {
        "type": "WordPiece", "unk_token": wordpiece.unk_token, "continuing_subword_prefix": "##",
        "max_input_chars_per_word": wordpiece.max_input_chars_per_word,
        "vocab": {"[PAD]": 0, "[UNK]": 1, "[CLS]": 2, "[SEP]": 3, "hello": 4, "##s": 5}}
    assert document["truncation"]["max_length"] == 32
    assert document["decoder"]["type"] == "WordPiece"
  theirs = _theirs(str(vocab), True, 32)
  assert theirs.encode("Hellos", "hello").tokens == ["[CLS]", "hello", "##s", "[SEP]", "hello",
                                                     "[SEP]"]
  assert theirs.decode(theirs.encode("Hellos hello").ids) == "hellos hello"
  vocab.write_text("[UNK]\n[SEP]\nhello\n")
  with pytest.raises(tokenization.VocabError, match=r"\[CLS\]"):
    huggingface_layout.tokenizer_json(str(vocab), True, 32)


def _tiny_encoder():
  config = modeling.BertConfig(vocab_size=10, hidden_size=8, num_hidden_layers=1,
                               num_attention_heads=2, intermediate_size=16,
                               max_position_embeddings=32, type_vocab_size=2)
  model = modeling.BertModel(config)
  model({"input_ids": np.zeros((1, 4), np.int32), "input_mask": np.ones((1, 4), np.int32),
         "segment_ids": np.zeros((1, 4), np.int32)})  # builds it
  return model


def _vocab(tmp_path):
  path = tmp_path / "vocab.txt"
  path.write_text("".join(t + "\n" for t in SPECIALS + ("hello", "world", "##s", "!", ".")))
  return str(path)


def test_the_huggingface_layouts_write_it(tmp_path):
  model, vocab = _tiny_encoder(), _vocab(tmp_path)
  directory = str(tmp_path / "hf")
  for _ in range(2):  # (the second replaces the first: tokenizer.json is one of its files)
    huggingface_layout.save_huggingface(model, directory, vocab_file=vocab, do_lower_case=False,
                                        max_seq_length=16)
  assert sorted(os.listdir(directory)) == ["config.json", "model.safetensors", "tokenizer.json",
                                           "tokenizer_config.json", "vocab.txt"]
  theirs = tokenizers.Tokenizer.from_file(os.path.join(directory, "tokenizer.json"))
  assert theirs.encode("Hello worlds!").tokens == ["[CLS]", "[UNK]", "world", "##s", "!",
                                                   "[SEP]"]
  assert theirs.truncation["max_length"] == 16
  directory = str(tmp_path / "st")
  for _ in range(2):
    huggingface_layout.save_sentence_transformers(model, directory, 12, "mean", True,
                                                  vocab_file=vocab, do_lower_case=True)
  theirs = tokenizers.Tokenizer.from_file(os.path.join(directory, "tokenizer.json"))
  assert theirs.encode("Hello worlds!").tokens == ["[CLS]", "hello", "world", "##s", "!",
                                                   "[SEP]"]
  assert theirs.truncation["max_length"] == 12  # (sentence_bert_config.json's)


@pytest.mark.parametrize("export_format", ["onnx", "tflite"])
def test_the_token_id_exports_write_it(tmp_path, monkeypatch, export_format):
  """export_saved_model.write_token_id_model (--format=onnx / tflite) writes tokenizer.json
  beside vocab.txt; the model file itself stubbed (test_tflite.py makes real ones)."""
  from bert_keras import export_saved_model
  from bert_keras import serving
  monkeypatch.setattr(serving, "onnx_model", lambda module, length: b"onnx")
  monkeypatch.setattr(serving, "tflite_model", lambda module, length, quantize: b"tflite")
  monkeypatch.setattr(export_saved_model, "tflite_tensors", lambda data: {})
  options = export_saved_model.options(
      task="classifier", format=export_format, vocab_file=_vocab(tmp_path), do_lower_case=True,
      max_seq_length=24, labels="neg,pos", init_checkpoint="unused", export_dir="unused")
  directory = tmp_path / "export"
  directory.mkdir()
  export_saved_model.write_token_id_model(None, options, 2, str(directory))
  assert sorted(os.listdir(directory)) == ["labels.txt", "model." + export_format,
                                           "model_config.json", "tokenizer.json", "vocab.txt"]
  with open(directory / "tokenizer.json", encoding="utf-8") as f:
    assert f.read() == huggingface_layout.tokenizer_json(options.vocab_file, True, 24)
