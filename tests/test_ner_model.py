"""modeling.BertTokenClassifier: logits [B, S, num_labels] from the sequence output and the
classifier head's weights, get_config and .keras round trips, TF1 names, Keras compile/fit with
ignore_class=-1, and checkpoints.load_model(dir, task="tagger") with its labels.txt."""

import json

import keras
import numpy as np
import pytest

from conftest import randomize
from bert_keras import checkpoints
from bert_keras import modeling

CONFIG = modeling.BertConfig(vocab_size=40, hidden_size=32, num_hidden_layers=2,
                             num_attention_heads=4, intermediate_size=64,
                             max_position_embeddings=16, type_vocab_size=2)


def _features():
  ids = np.array([[2, 7, 9, 11, 3, 0], [2, 5, 3, 0, 0, 0]], np.int32)
  return {"input_ids": ids, "input_mask": (ids != 0).astype(np.int32),
          "segment_ids": np.zeros_like(ids)}


def test_logits_are_the_head_on_every_position():
  model = randomize(modeling.BertTokenClassifier(CONFIG, 5))
  features = _features()
  logits = model(features).numpy()
  assert logits.shape == (2, 6, 5) and logits.dtype == np.float32
  sequence = model.bert(features)["sequence_output"].numpy()
  head = model.classifier
  want = sequence @ head.output_weights.numpy().T + head.output_bias.numpy()
  np.testing.assert_allclose(logits, want, rtol=1e-5, atol=1e-5)
  # Dropout only in training.
  np.testing.assert_array_equal(model(features, training=False), logits)
  assert not np.allclose(model(features, training=True), logits)
  names = checkpoints.tf1_variable_map(model)
  assert names["output_weights"] is head.output_weights and "output_bias" in names
  # A shared encoder.
  tagger = modeling.BertTokenClassifier(model.bert, 3)
  assert tagger.bert is model.bert and tagger.num_labels == 3


def test_get_config_and_keras_file_round_trip(tmp_path):
  model = randomize(modeling.BertTokenClassifier(CONFIG, 4))
  assert keras.saving.get_registered_object(
      "bert_keras>BertTokenClassifier") is modeling.BertTokenClassifier
  config = json.loads(json.dumps(model.get_config()))
  assert config["num_labels"] == 4
  clone = modeling.BertTokenClassifier.from_config(config)
  assert type(clone) is modeling.BertTokenClassifier and clone.config == CONFIG
  assert clone.num_labels == 4
  path = str(tmp_path / "tagger.keras")
  model.save(path)
  loaded = keras.models.load_model(path)
  assert type(loaded) is modeling.BertTokenClassifier
  np.testing.assert_array_equal(loaded(_features()), model(_features()))


@pytest.mark.slow
def test_compile_fit_with_ignored_positions():
  model = modeling.BertTokenClassifier(CONFIG, 3)
  model.compile(optimizer=keras.optimizers.Adam(1e-3),
                loss=keras.losses.SparseCategoricalCrossentropy(from_logits=True,
                                                                ignore_class=-1))
  features = _features()
  labels = np.where(features["input_mask"] == 1, 1, -1)
  labels[:, 0] = -1
  before = model.evaluate(features, labels, verbose=0)
  model.fit(features, labels, epochs=5, verbose=0)
  assert model.evaluate(features, labels, verbose=0) < before
  assert model.predict(features, verbose=0).shape == (2, 6, 3)


def test_tag_sentences_equals_the_windows_argmax(tmp_path):
  """ner.tag_sentences on words: the argmax of the model's logits at each word's first piece,
  long lists through windows, a word without pieces O."""
  from bert_keras import tokenization
  from bert_keras.tasks.ner import tagging as ner
  vocab = tmp_path / "vocab.txt"
  vocab.write_text("".join(t + "\n" for t in ["[PAD]", "[UNK]", "[CLS]", "[SEP]", "a", "b",
                                              "##c"]), encoding="utf-8")
  tokenizer = tokenization.FullTokenizer(str(vocab), do_lower_case=True)
  model = randomize(modeling.BertTokenClassifier(CONFIG, 3), seed=1)
  labels = ["O", "B-X", "I-X"]
  words = ["a", "bc", "\x07", "b", "a", "bc", "a", "b", "a", "b", "a", "bc"]
  short = ["b", "a"]
  tags = ner.tag_sentences(model, tokenizer, labels, [words, short], max_seq_length=8,
                           doc_stride=3, batch_size=2)
  assert len(tags[0]) == len(words) and tags[0][2] == "O"
  ids = [2] + [{"a": 4, "b": 5}[w] for w in short] + [3]
  logits = model({"input_ids": np.array([ids]), "input_mask": np.ones([1, 4], np.int32),
                  "segment_ids": np.zeros([1, 4], np.int32)}).numpy()[0]
  assert tags[1] == [labels[i] for i in np.argmax(logits[1:3], -1)]
  # A long list tagged alone gives the same tags as in a batch with the short one.
  assert ner.tag_sentences(model, tokenizer, labels, [words], 8, 3) == tags[:1]


def test_load_model_tagger(tmp_path):
  model = randomize(modeling.BertTokenClassifier(CONFIG, 3))
  checkpoints.save_tf1_checkpoint(model, str(tmp_path / "model.ckpt-7"))
  (tmp_path / "checkpoint").write_text('model_checkpoint_path: "model.ckpt-7"\n')
  (tmp_path / "bert_config.json").write_text(CONFIG.to_json_string())
  loaded = checkpoints.load_model(str(tmp_path), task="tagger")   # rows of output_weights
  assert loaded.num_labels == 3 and loaded.labels is None
  np.testing.assert_allclose(loaded(_features()), model(_features()), rtol=1e-5, atol=1e-5)
  (tmp_path / "labels.txt").write_text("O\nB-PER\nI-PER\n")
  loaded = checkpoints.load_model(str(tmp_path), task="tagger")
  assert loaded.labels == ["O", "B-PER", "I-PER"]
  with pytest.raises(ValueError, match="num_labels=4, but .*labels.txt lists 3 labels"):
    checkpoints.load_model(str(tmp_path), task="tagger", num_labels=4)
  (tmp_path / "labels.txt").write_text("O\nO\n")
  with pytest.raises(ValueError, match="labels.txt: expected distinct non-empty tags"):
    checkpoints.load_model(str(tmp_path), task="tagger")
