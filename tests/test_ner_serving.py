"""prediction/tagger.py and export_saved_model.py --task=tagger: the words and byte offsets of
raw text against the original BasicTokenizer, the tags against ner.tag_sentences (run_ner's
path) on sentences of plain words, the entities against conlleval's chunk rules in Python,
and the SavedModel loaded back."""

import random

import numpy as np
import pytest
import tensorflow as tf

from bert_keras import checkpoints
from bert_keras import export_saved_model
from bert_keras import modeling
from bert_keras import preprocessing
from bert_keras.tasks.ner import tagging as ner
from bert_keras.prediction import tagger
from bert_keras import tokenization
from bert_keras.utils import conlleval

VOCAB = ["[PAD]", "[UNK]", "[CLS]", "[SEP]", "john", "smith", "lives", "in", "paris", "un",
         "##believ", "##able", ".", "mary", "the", "city"]
LABELS = ["O", "B-LOC", "B-PER", "I-LOC", "I-PER"]
MAX_SEQ_LENGTH = 24


@pytest.fixture(scope="module")
def setup(tmp_path_factory):
  root = tmp_path_factory.mktemp("tagger")
  (root / "vocab.txt").write_text("".join(t + "\n" for t in VOCAB), encoding="utf-8")
  config = modeling.BertConfig(vocab_size=len(VOCAB), hidden_size=32, num_hidden_layers=2,
                               num_attention_heads=2, intermediate_size=64,
                               max_position_embeddings=32)
  (root / "bert_config.json").write_text(config.to_json_string())
  model = modeling.BertTokenClassifier(config, len(LABELS))
  rng = np.random.default_rng(0)
  for variable in model.weights:   # random weights; a head that favours entity tags
    variable.assign(rng.normal(0, 0.5, variable.shape).astype(np.float32))
  tokenizer = tokenization.FullTokenizer(str(root / "vocab.txt"), do_lower_case=True)
  preprocessor = preprocessing.BertPreprocessor(str(root / "vocab.txt"), True, MAX_SEQ_LENGTH,
                                                core_ops_only=True)
  module = tagger.TaggerModule(model, preprocessor, LABELS)
  return root, model, tokenizer, module


def _strings(tensor):
  return [[x.decode("utf-8", "surrogateescape") for x in row] for row in tensor.numpy()]


def test_words_and_offsets_are_the_basic_tokenizers():
  rng = random.Random(0)
  pieces = ["John", "smith", "Café", "e\u0301", "北京", ",", "!", "(x)", "\x00", "\u200b", "  ",
            "\t", "\n", "\u3000", "\u2028", "Ωμέγα", "don't", "a.b", "\x7f", "-", "\ufffd"]
  texts = ["", "   ", "John Smith lives in Paris.", "\x00\x01"]
  texts += ["".join(rng.choice(pieces + [" "] * 4) for _ in range(rng.randint(1, 15)))
            for _ in range(60)]
  table = tuple(tf.constant(x) for x in tagger.character_table())
  words, starts, ends = tagger.split_words(tf.constant(texts), table)
  basic = tokenization.BasicTokenizer(do_lower_case=False)
  for text, row, row_starts, row_ends in zip(texts, words.to_list(), starts.to_list(),
                                             ends.to_list()):
    data = text.encode("utf-8")
    # Each word is one basic token, and together they are the text's basic tokens.
    assert [basic.tokenize(w.decode()) for w in row] == [[t] for t in basic.tokenize(text)], text
    for word, start, end in zip(row, row_starts, row_ends):
      assert data[start:end] == word.strip(b"\x00\x01\x7f") or (
          basic.tokenize(data[start:end].decode()) == basic.tokenize(word.decode())), text


def chunks(tags):
  """[(type, first word, last word)] by conlleval's rules, in Python."""
  result, previous = [], ("O", "")
  for i, tag in enumerate(tags):
    prefix, kind = conlleval.split_tag(tag)
    if result and result[-1][2] == i - 1 and not (
        conlleval.chunk_ends(previous[0], prefix, previous[1], kind)
        or conlleval.chunk_starts(previous[0], prefix, previous[1], kind)):
      result[-1] = (result[-1][0], result[-1][1], i)
    elif conlleval.chunk_starts(previous[0], prefix, previous[1], kind):
      result.append((kind, i, i))
    previous = (prefix, kind)
  return result


def test_tags_and_entities_equal_run_ners(setup):
  _, model, tokenizer, module = setup
  rng = random.Random(1)
  words = ["john", "Smith", "lives", "in", "Paris", "mary", "the", "city", "unbelievable",
           "zebra"]
  texts = [" ".join(rng.choice(words) for _ in range(rng.randint(1, 12))) for _ in range(12)]
  texts += ["", "  Mary  lives in the city  "]
  out = module.serve(tf.constant(texts))
  word_lists = [text.split() for text in texts]
  expected = ner.tag_sentences(model, tokenizer, LABELS, word_lists, MAX_SEQ_LENGTH)
  tags, found_words = _strings(out["tags"]), _strings(out["words"])
  for i, text in enumerate(texts):
    n = len(word_lists[i])
    assert found_words[i][:n] == word_lists[i] and set(found_words[i][n:]) <= {""}
    assert tags[i][:n] == expected[i] and set(tags[i][n:]) <= {""}
    starts, ends = out["starts"].numpy()[i][:n], out["ends"].numpy()[i][:n]
    assert [text[s:e] for s, e in zip(starts, ends)] == word_lists[i]   # ASCII: bytes = chars
    want = [(kind, int(starts[a]), int(ends[b])) for kind, a, b in chunks(expected[i])]
    types = _strings(out["entity_types"])[i]
    got = [(t, int(s), int(e)) for t, s, e in zip(types, out["entity_starts"].numpy()[i],
                                                   out["entity_ends"].numpy()[i]) if t]
    assert got == want
  assert any(t for row in _strings(out["entity_types"]) for t in row)   # some entities found
  scores = out["scores"].numpy()
  assert ((scores > 0) == (out["starts"].numpy() >= 0)).all() and (scores <= 1).all()


def test_words_past_the_window_are_outside(setup):
  _, _, _, module = setup
  text = " ".join(["unbelievable"] * 12)   # 36 pieces, 22 fit
  out = module.serve(tf.constant([text]))
  scores = out["scores"].numpy()[0]
  assert len(scores) == 12 and (scores[:7] > 0).all() and (scores[8:] == 0).all()
  assert _strings(out["tags"])[0][8:] == ["O"] * 4


@pytest.mark.slow
def test_export_and_load(setup, tmp_path):
  root, model, _, module = setup
  output_dir = tmp_path / "ner_output"
  output_dir.mkdir()
  checkpoints.save_tf1_checkpoint(model, str(output_dir / "model.ckpt-3"))
  (output_dir / "checkpoint").write_text('model_checkpoint_path: "model.ckpt-3"\n')
  (output_dir / "labels.txt").write_text("".join(t + "\n" for t in LABELS))
  options = export_saved_model.options(
      task="tagger", bert_config_file=str(root / "bert_config.json"),
      init_checkpoint=str(output_dir), vocab_file=str(root / "vocab.txt"),
      max_seq_length=MAX_SEQ_LENGTH, export_dir=str(tmp_path / "export"))
  export_saved_model.run(options)
  loaded = tf.saved_model.load(str(tmp_path / "export"))
  texts = tf.constant(["John Smith lives in Paris.", "the city"])
  got = loaded.signatures["serving_default"](text_a=texts)
  want = module.serve(texts)
  for key in want:
    if want[key].dtype == tf.string:
      assert (got[key].numpy() == want[key].numpy()).all(), key
    else:
      np.testing.assert_allclose(got[key].numpy(), want[key].numpy(), rtol=1e-5, err_msg=key)
  assert got["label_names"].numpy().astype(str).tolist() == [LABELS] * 2
  with pytest.raises(ValueError, match="--format=tflite: --task=tagger exports a SavedModel"):
    export_saved_model.run(export_saved_model.options(**{**vars(options), "format": "tflite"}))
  (output_dir / "labels.txt").unlink()
  with pytest.raises(ValueError, match="--task=tagger needs --labels, or a labels.txt"):
    export_saved_model.run(export_saved_model.options(
        **{**vars(options), "export_dir": str(tmp_path / "other")}))
