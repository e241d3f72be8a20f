"""The sentence-transformers layout of a bi-encoder, both ways (convert_checkpoint.py
--format=sentence_transformers; a sentence-transformers directory as a model directory).

The written directory's vectors are computed by an independent NumPy forward pass
(tests/numpy_bert.py) and the sentence-transformers pooling written here, from its files
alone; they must equal our model's within 1e-5. With ST_PYTHON naming the python of an
environment that has torch and sentence-transformers, the slow test runs that library on the
written directories (bench/st_layout_check.py)."""

import json
import os
import subprocess

import numpy as np
import pytest

from bert_keras import checkpoints
from bert_keras import huggingface_layout
from bert_keras import convert_checkpoint
from bert_keras import modeling
from bert_keras import preprocessing
from bert_keras import sentence_transformers_layout
from bert_keras.prediction import predictors
from conftest import randomize

import numpy_bert

safetensors_numpy = pytest.importorskip("safetensors.numpy")

VOCAB = ["[PAD]", "[UNK]", "[CLS]", "[SEP]", "[MASK]"] + [f"w{i}" for i in range(27)]
CASES = [("mean", False), ("mean", True), ("cls", False), ("cls", True), ("max", False),
         ("max", True)]


def _features():
  ids = np.array([[2, 7, 9, 11, 3, 20, 3, 0], [2, 5, 30, 3, 0, 0, 0, 0]], np.int32)
  return {"input_ids": ids, "input_mask": (ids != 0).astype(np.int32),
          "segment_ids": np.zeros_like(ids)}


@pytest.fixture(scope="module")
def source(tmp_path_factory):
  """A tiny encoder with random weights saved in Google's layout (no pooling said)."""
  root = tmp_path_factory.mktemp("st_source")
  vocab = root / "vocab.txt"
  vocab.write_text("".join(w + "\n" for w in VOCAB))
  config = modeling.BertConfig(vocab_size=len(VOCAB), hidden_size=32, num_hidden_layers=2,
                               num_attention_heads=4, intermediate_size=48,
                               max_position_embeddings=16, type_vocab_size=2)
  encoder = modeling.BertModel(config)
  encoder(_features())
  randomize(encoder, seed=11)
  directory = str(root / "encoder")
  checkpoints.save_pretrained(encoder, directory, vocab_file=str(vocab), do_lower_case=True)
  return directory


def _convert(source, out, **flags):
  convert_checkpoint.run(convert_checkpoint.options(
      init_checkpoint=source, output_dir=str(out), format="sentence_transformers", **flags))
  return str(out)


def _read(directory, *names):
  with open(os.path.join(directory, *names)) as f:
    return json.load(f)


def _numpy_vectors(directory, features):
  """The directory's vectors from its files alone: numpy_bert's forward pass over
  model.safetensors and config.json, then the modules.json pipeline (Pooling, Normalize)."""
  state = safetensors_numpy.load_file(os.path.join(directory, "model.safetensors"))
  out = numpy_bert.forward(state, _read(directory, "config.json"), features["input_ids"],
                           features["input_mask"], features["segment_ids"])
  tokens, mask = out["sequence_output"], features["input_mask"].astype(bool)
  modules = [m["type"].rsplit(".", 1)[1] for m in _read(directory, "modules.json")]
  pooling = _read(directory, "1_Pooling", "config.json")
  if pooling["pooling_mode_mean_tokens"]:
    vectors = (tokens * mask[..., None]).sum(1) / mask.sum(1, keepdims=True)
  elif pooling["pooling_mode_cls_token"]:
    vectors = tokens[:, 0]
  else:
    vectors = np.where(mask[..., None], tokens, -np.inf).max(1)
  if "Normalize" in modules:
    vectors = vectors / np.linalg.norm(vectors, axis=1, keepdims=True)
  return vectors


@pytest.mark.parametrize("pooling,normalize", CASES)
def test_written_layout_computes_our_vectors(source, tmp_path, pooling, normalize):
  directory = _convert(source, tmp_path / "st", pooling=pooling, normalize=normalize,
                       max_seq_length=12)
  names = sorted(os.listdir(directory))
  want = ["1_Pooling", "config.json", "config_sentence_transformers.json", "model.safetensors",
          "modules.json", "sentence_bert_config.json", "special_tokens_map.json",
          "tokenizer.json", "tokenizer_config.json", "vocab.txt"]
  assert names == sorted(want + (["2_Normalize"] if normalize else []))
  modules = _read(directory, "modules.json")
  assert [(m["idx"], m["path"], m["type"].rsplit(".", 1)[1]) for m in modules] == [
      (0, "", "Transformer"), (1, "1_Pooling", "Pooling")] + (
          [(2, "2_Normalize", "Normalize")] if normalize else [])
  assert _read(directory, "sentence_bert_config.json") == {"max_seq_length": 12,
                                                           "do_lower_case": False}
  config = _read(directory, "1_Pooling", "config.json")
  assert config["word_embedding_dimension"] == 32
  assert {k for k, v in config.items() if v is True and k.startswith("pooling_mode")} == {
      sentence_transformers_layout.ST_POOLING_KEYS[pooling]}
  assert _read(directory, "config.json")["architectures"] == ["BertModel"]
  tokenizer = _read(directory, "tokenizer_config.json")
  assert (tokenizer["do_lower_case"], tokenizer["model_max_length"]) == (True, 16)
  assert _read(directory, "config_sentence_transformers.json")["model_type"] == (
      "SentenceTransformer")
  ours = checkpoints.load_model(source, task="embeddings", pooling=pooling, normalize=normalize)
  features = _features()
  want_vectors = np.asarray(ours(features))
  np.testing.assert_allclose(_numpy_vectors(directory, features), want_vectors, atol=1e-5)
  # Read back: its pooling and normalize are taken over, the vectors the same.
  back = checkpoints.load_model(directory, task="embeddings")
  assert (back.pooling, back.normalize) == (pooling, normalize)
  np.testing.assert_allclose(np.asarray(back(features)), want_vectors, atol=1e-5)


def test_a_sentence_transformers_directory_is_an_embeddings_model_directory(source, tmp_path):
  directory = _convert(source, tmp_path / "st", pooling="max", normalize=True,
                       max_seq_length=10)
  description = sentence_transformers_layout.read_model_files(directory)
  assert (description["task"], description["pooling"], description["normalize"],
          description["max_seq_length"], description["do_lower_case"]) == (
              "embeddings", "max", True, 10, True)
  assert description["vocab_file"] == os.path.join(directory, "vocab.txt")
  assert predictors.is_embeddings_model_dir(directory)
  # Converting it again needs no flags: the same files come out.
  again = _convert(directory, tmp_path / "again")
  for name in ("modules.json", "sentence_bert_config.json", os.path.join("1_Pooling",
                                                                          "config.json")):
    assert _read(again, name) == _read(directory, name)
  # Flags given win over the directory's.
  assert checkpoints.load_model(directory, task="embeddings", pooling="cls").pooling == "cls"


def test_an_older_layout_with_0_transformer(source, tmp_path):
  directory = _convert(source, tmp_path / "st", pooling="cls", normalize=False,
                       max_seq_length=8)
  old = tmp_path / "old"
  (old / "0_Transformer").mkdir(parents=True)
  (old / "1_Pooling").mkdir()
  for name in ("config.json", "model.safetensors", "vocab.txt", "tokenizer_config.json",
               "sentence_bert_config.json"):
    os.rename(os.path.join(directory, name), old / "0_Transformer" / name)
  os.rename(os.path.join(directory, "1_Pooling", "config.json"), old / "1_Pooling" / "config.json")
  modules = _read(directory, "modules.json")
  modules[0]["path"] = "0_Transformer"
  (old / "modules.json").write_text(json.dumps(modules))
  model = checkpoints.load_model(str(old), task="embeddings")
  assert (model.pooling, model.normalize) == ("cls", False)
  assert model.vocab_file == str(old / "0_Transformer" / "vocab.txt")
  want = checkpoints.load_model(source, task="embeddings", pooling="cls")(_features())
  np.testing.assert_allclose(np.asarray(model(_features())), np.asarray(want), atol=1e-5)
  assert sentence_transformers_layout.read_model_files(str(old))["max_seq_length"] == 8


def test_without_pooling_from_flags_or_source_is_a_one_line_error(source, tmp_path):
  with pytest.raises(ValueError, match=r"^--pooling: .* does not say how its vectors"):
    _convert(source, tmp_path / "st")
  with pytest.raises(ValueError, match=r"for --format=sentence_transformers only"):
    convert_checkpoint.run(convert_checkpoint.options(
        init_checkpoint=source, output_dir=str(tmp_path / "hf"), pooling="mean"))


@pytest.mark.parametrize("name,content,message", [
    ("modules.json", "[{", r"modules\.json: not valid JSON"),
    ("modules.json", "{}", r"modules\.json: \"modules\" must be a non-empty list"),
    ("modules.json", json.dumps([{"type": "my_code.Module", "path": ""}]),
     r"modules\.json: module 0 is my_code\.Module: only sentence-transformers'"),
    ("modules.json", json.dumps([{"type": "sentence_transformers.models.Transformer",
                                  "path": "../elsewhere"}]),
     r"modules\.json: \"\[0\]\.path\" must be a path inside the directory"),
    ("1_Pooling/config.json", json.dumps({"word_embedding_dimension": 32,
                                          "pooling_mode_weightedmean_tokens": True}),
     r"1_Pooling/config\.json: expected exactly one of pooling_mode_mean_tokens"),
    ("1_Pooling/config.json", json.dumps({"pooling_mode_mean_tokens": "yes"}),
     r"1_Pooling/config\.json: \"pooling_mode_mean_tokens\" must be bool"),
    ("1_Pooling/config.json", json.dumps({"word_embedding_dimension": 31,
                                          "pooling_mode": "mean"}),
     r"1_Pooling: word_embedding_dimension 31, but the transformer's .*hidden_size 32"),
    ("sentence_bert_config.json", json.dumps({"max_seq_length": "long"}),
     r"sentence_bert_config\.json: \"max_seq_length\" must be a positive integer"),
])
def test_bad_files_are_one_line_errors(source, tmp_path, name, content, message):
  directory = _convert(source, tmp_path / "st", pooling="mean", normalize=True,
                       max_seq_length=12)
  with open(os.path.join(directory, name), "w") as f:
    f.write(content)
  for read in (sentence_transformers_layout.read_model_files,
               lambda d: checkpoints.load_model(d, task="embeddings")):
    with pytest.raises(ValueError, match=message) as e:
      read(directory)
    assert "\n" not in str(e.value)


def test_a_one_output_classifier_goes_out_for_cross_encoder(source, tmp_path):
  model = checkpoints.load_model(source, task="regression")
  written = huggingface_layout.save_huggingface(model, str(tmp_path / "cross"))
  config = _read(written, "config.json")
  assert config["architectures"] == ["BertForSequenceClassification"]
  assert config["id2label"] == {"0": "LABEL_0"}
  assert config["sentence_transformers"] == {"activation_fn": "torch.nn.modules.linear.Identity"}
  three = huggingface_layout.save_huggingface(checkpoints.load_model(source, task="classifier",
                                                                     num_labels=3),
                                              str(tmp_path / "three"))
  assert "sentence_transformers" not in _read(three, "config.json")


TEXTS = ["w1 w5 w7", "W3 w20", "w9", "w2 w2 w2 w11 w12 w13 w14 w15 w16 w17 w18 w19 w21 w22"]


@pytest.mark.slow
@pytest.mark.parametrize("pooling,normalize", [("mean", True), ("cls", False), ("max", False)])
def test_sentence_transformers_itself_reads_the_layouts(source, tmp_path, pooling, normalize):
  python = os.environ.get("ST_PYTHON")
  if not python:
    pytest.skip("ST_PYTHON is not set (a python with torch and sentence-transformers)")
  directory = _convert(source, tmp_path / "st", pooling=pooling, normalize=normalize,
                       max_seq_length=12)
  texts = tmp_path / "texts.txt"
  texts.write_text("".join(t + "\n" for t in TEXTS))
  model = checkpoints.load_model(directory, task="embeddings")
  features = preprocessing.BertPreprocessor(model.vocab_file, True, 12)(np.array(TEXTS))
  want = np.asarray(model({k: np.asarray(v) for k, v in features.items()}))
  got = _run_checker(python, directory, texts, "bi")
  np.testing.assert_allclose(np.array(got["vectors"]), want, atol=1e-5)
  cross = checkpoints.load_model(source, task="regression")
  cross_dir = huggingface_layout.save_huggingface(cross, str(tmp_path / "cross"))
  pairs = tmp_path / "pairs.tsv"
  pairs.write_text("".join(f"{a}\t{b}\n" for a, b in zip(TEXTS, TEXTS[1:] + TEXTS[:1])))
  features = preprocessing.BertPreprocessor(model.vocab_file, True, 16)(
      (np.array(TEXTS), np.array(TEXTS[1:] + TEXTS[:1])))
  want = np.asarray(cross({k: np.asarray(v) for k, v in features.items()}))[:, 0]
  got = _run_checker(python, cross_dir, pairs, "cross")
  np.testing.assert_allclose(np.array(got["scores"]), want, atol=1e-5)


def _run_checker(python, directory, texts, kind):
  script = os.path.join(os.path.dirname(os.path.dirname(os.path.abspath(__file__))), "bench",
                        "st_layout_check.py")
  done = subprocess.run([python, script, f"--kind={kind}", directory, str(texts)],
                        capture_output=True, text=True, timeout=600, check=False)
  assert done.returncode == 0, done.stderr[-2000:]
  return json.loads(done.stdout.strip().splitlines()[-1])


def test_predict_and_export_take_over_the_directorys_pooling(source, tmp_path):
  from bert_keras import export_saved_model
  directory = _convert(source, tmp_path / "st", pooling="max", normalize=True,
                       max_seq_length=12)
  texts = ["w1 w5 w7", "w9 w3"]
  predictor = predictors.load(directory)  # no --task: the directory is an embeddings model
  got = np.array([row["embedding"] for row in predictor.predict(texts, None)])
  model = checkpoints.load_model(source, task="embeddings", pooling="max", normalize=True)
  features = preprocessing.BertPreprocessor(model.vocab_file, True, 12)(np.array(texts))
  want = np.asarray(model({k: np.asarray(v) for k, v in features.items()}))
  np.testing.assert_allclose(got, want, atol=1e-5)
  options = export_saved_model.resolve_options(export_saved_model.options(
      init_checkpoint=directory, export_dir=str(tmp_path / "export")))
  assert (options.task, options.pooling, options.normalize, options.max_seq_length) == (
      "embeddings", "max", True, 12)
  options = export_saved_model.resolve_options(export_saved_model.options(
      init_checkpoint=directory, export_dir=str(tmp_path / "export"), pooling="cls"))
  assert (options.pooling, options.normalize) == ("cls", True)
