"""tasks/ner/tagging.py: the CoNLL reader (both layouts, -DOCSTART-, IOB1, its one-line errors),
the tag set, the BERT paper's alignment and the windows of long sentences (every word back once, in
order, for sentences up to 5,000 words), and the token loss (losses.token_classifier_loss)."""

import random

import numpy as np
import pytest
import tensorflow as tf

from bert_keras import losses
from bert_keras import tokenization
from bert_keras.tasks.ner import tagging as ner

VOCAB = ["[PAD]", "[UNK]", "[CLS]", "[SEP]", "john", "smith", "lives", "in", "paris", "new",
         "york", "un", "##believ", "##able", ".", ",", "the", "a", "b", "c"]


@pytest.fixture(scope="module")
def tokenizer(tmp_path_factory):
  path = tmp_path_factory.mktemp("vocab") / "vocab.txt"
  path.write_text("".join(t + "\n" for t in VOCAB), encoding="utf-8")
  return tokenization.FullTokenizer(str(path), do_lower_case=True)


CONLL_2003 = """-DOCSTART- -X- -X- O

John NNP B-NP B-PER
Smith NNP I-NP I-PER
lives VBZ B-VP O

in IN B-PP O
Paris NNP B-NP B-LOC
. . O O
"""


def test_read_conll_layouts(tmp_path):
  spaces = tmp_path / "spaces.txt"
  spaces.write_text(CONLL_2003, encoding="utf-8")
  tabs = tmp_path / "tabs.txt"
  tabs.write_text(CONLL_2003.replace(" ", "\t").replace("\n", "\r\n"), encoding="utf-8")
  for path in (spaces, tabs):
    sentences = ner.read_conll(str(path))
    assert [s.words for s in sentences] == [["John", "Smith", "lives"], ["in", "Paris", "."]]
    assert [s.tags for s in sentences] == [["B-PER", "I-PER", "O"], ["O", "B-LOC", "O"]]
    assert [s.lines for s in sentences] == [[3, 4, 5], [7, 8, 9]]
  # Two columns, IOB1 tags, no DOCSTART, no final newline, several blank lines.
  two = tmp_path / "two.txt"
  two.write_text("a I-ORG\nb I-ORG\nc B-ORG\n\n\n\nthe O", encoding="utf-8")
  sentences = ner.read_conll(str(two))
  assert [s.tags for s in sentences] == [["I-ORG", "I-ORG", "B-ORG"], ["O"]]
  # An untagged test file.
  untagged = tmp_path / "untagged.txt"
  untagged.write_text("John\nSmith\n\nParis\n", encoding="utf-8")
  sentences = ner.read_conll(str(untagged), tags_required=False)
  assert [s.words for s in sentences] == [["John", "Smith"], ["Paris"]]
  assert sentences[0].tags is None


@pytest.mark.parametrize("content, tags_required, message", [
    (b"John B-PER\nSmith\n", True, r"bad.txt line 2: 'Smith' has no tag"),
    (b"John\n", True, r"bad.txt line 1: 'John' has no tag"),
    (b"John\nSmith I-PER\n", False, r"bad.txt line 2: .* has a tag, but the file's first"),
    (b"John B-PER\n\xe9 O\n", True, r"bad.txt, line 2: not UTF-8 \(byte 1"),
    (b"", True, r"bad.txt has no tokens"),
    (b"-DOCSTART- O\n\n \n", True, r"bad.txt has no tokens"),
])
def test_read_conll_errors(tmp_path, content, tags_required, message):
  path = tmp_path / "bad.txt"
  path.write_bytes(content)
  with pytest.raises(ValueError, match=message) as error:
    ner.read_conll(str(path), tags_required)
  assert "\n" not in str(error.value)


def test_tag_set(tmp_path):
  sentences = [ner.Sentence(["a", "b"], ["I-PER", "B-LOC"], [1, 2], "x"),
               ner.Sentence(["c"], ["O"], [4], "x")]
  assert ner.tag_list(sentences) == ["O", "B-LOC", "I-PER"]
  assert ner.parse_labels("O, B-PER ,I-PER") == ["O", "B-PER", "I-PER"]
  with pytest.raises(ValueError, match="distinct"):
    ner.parse_labels("O,O")
  ner.check_tags(sentences, ["O", "B-LOC", "I-PER"], "train.txt")
  with pytest.raises(ValueError, match=r"^x line 2: tag 'B-LOC' is not in the tag set of "
                                       r"--labels \(O, I-PER\)$"):
    ner.check_tags(sentences, ["O", "I-PER"], "--labels")


def test_alignment(tokenizer):
  """A word's tag on its first piece; other pieces, [CLS], [SEP] and padding -1; a word
  without pieces (a control character) is predicted O."""
  sentence = ner.Sentence(["John", "unbelievable", "\x07", "Paris", "."],
                          ["B-PER", "O", "B-MISC", "B-LOC", "O"], [1, 2, 3, 4, 5], "x")
  labels = ["O", "B-LOC", "B-MISC", "B-PER"]
  windows = ner.convert_sentences([sentence], tokenizer, labels, 16, 8)
  assert len(windows) == 1
  w = windows[0]
  assert tokenizer.convert_ids_to_tokens(w.input_ids) == [
      "[CLS]", "john", "un", "##believ", "##able", "paris", ".", "[SEP]"]
  assert w.tag_ids == [-1, 3, 0, -1, -1, 1, 0, -1]
  assert w.predicts == [-1, 0, 1, -1, -1, 3, 4, -1]
  arrays = ner.window_arrays(windows, 16)
  assert arrays["tag_ids"][0].tolist() == w.tag_ids + [-1] * 8
  assert arrays["input_mask"][0].tolist() == [1] * 8 + [0] * 8
  # Predict the tag ids the windows hold: every word gets its tag back, the empty word O.
  predicted = ner.assemble_tags([sentence], windows, np.maximum(arrays["tag_ids"], 0), labels)
  assert predicted == [["B-PER", "O", "O", "B-LOC", "O"]]


def test_spans_and_max_context():
  assert ner.spans(0, 4, 2) == []
  assert ner.spans(3, 4, 2) == [(0, 3)]
  assert ner.spans(10, 4, 2) == [(0, 4), (2, 4), (4, 4), (6, 4)]
  assert ner.spans(5, 4, 10) == [(0, 4), (4, 1)]
  windows = ner.spans(10, 4, 2)
  # Position 3: window 0 (context 0), window 1 (start 2: min(1, 1)) -> window 1; ties go to
  # the first window (position 2: windows 0 and 1 both give min(2,1)=1 and min(0, 3)=0).
  assert ner.best_windows(windows, 10) == [0, 0, 0, 1, 1, 2, 2, 3, 3, 3]


@pytest.mark.parametrize("seed, length, max_seq_length, stride", [
    (0, 5000, 32, 7), (1, 5000, 128, 64), (2, 300, 10, 1), (3, 40, 9, 100), (4, 1, 3, 1)])
def test_long_sentences_every_word_back_once(tokenizer, seed, length, max_seq_length, stride):
  rng = random.Random(seed)
  vocabulary = ["john", "unbelievable", "\x07", "paris", "a,b", "new"]
  words = [rng.choice(vocabulary) for _ in range(length)]
  labels = ["O"] + [f"T{i}" for i in range(length)]  # word i's tag is T<i>: order visible
  sentence = ner.Sentence(words, [f"T{i}" for i in range(length)], list(range(length)), "x")
  other = ner.Sentence(["a"], ["O"], [0], "x")
  windows = ner.convert_sentences([other, sentence, other], tokenizer, labels,
                                  max_seq_length, stride)
  assert all(len(w.input_ids) <= max_seq_length for w in windows)
  predicts = [word for w in windows if w.sentence == 1 for word in w.predicts if word >= 0]
  with_pieces = [i for i, word in enumerate(words) if word != "\x07"]
  assert predicts == with_pieces           # each word with pieces predicted once, in order
  arrays = ner.window_arrays(windows, max_seq_length)
  predicted = ner.assemble_tags([other, sentence, other], windows,
                                np.maximum(arrays["tag_ids"], 0), labels)
  assert predicted[1] == [f"T{i}" if i in set(with_pieces) else "O" for i in range(length)]
  assert predicted[0] == predicted[2] == ["O"]


def test_prediction_text_and_results():
  sentences = [ner.Sentence(["John", "Smith"], ["B-PER", "I-PER"], [1, 2], "x"),
               ner.Sentence(["Paris"], ["B-LOC"], [4], "x")]
  predicted = [["B-PER", "I-PER"], ["O"]]
  assert ner.prediction_text(sentences, predicted) == (
      "John B-PER B-PER\nSmith I-PER I-PER\n\nParis B-LOC O\n\n")
  results = ner.eval_results(sentences, predicted, 3.0, 4, 7)
  assert results["eval_precision"] == 1.0 and results["eval_recall"] == 0.5
  assert results["eval_f1"] == pytest.approx(2 / 3)
  assert results["eval_accuracy"] == pytest.approx(2 / 3)
  assert results["eval_f1_PER"] == 1.0 and results["eval_f1_LOC"] == 0.0
  assert results["loss"] == results["eval_loss"] == 0.75 and results["global_step"] == 7
  untagged = [ner.Sentence(["John"], None, [1], "x")]
  assert ner.prediction_text(untagged, [["B-PER"]]) == "John B-PER\n\n"


def test_token_classifier_loss():
  rng = np.random.default_rng(0)
  logits = rng.normal(size=(2, 5, 3)).astype(np.float32)
  labels = np.array([[-1, 0, 2, -1, 1], [-1, 1, -1, -1, -1]])
  loss = losses.token_classifier_loss(tf.constant(logits), tf.constant(labels)).numpy()
  log_probs = logits - np.log(np.exp(logits).sum(-1, keepdims=True))
  for b in range(2):
    for s in range(5):
      want = 0.0 if labels[b, s] < 0 else -log_probs[b, s, labels[b, s]]
      assert loss[b, s] == pytest.approx(want, abs=1e-5)
  task = ner.TaggerTask()
  batch = {"tag_ids": tf.constant(labels)}
  denominators = task.denominators(batch)
  assert float(denominators["tokens"]) == 4
  total, _ = task.loss(tf.constant(logits), batch, denominators)
  assert float(total) == pytest.approx(loss.sum() / 4, rel=1e-5)
