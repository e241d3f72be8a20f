"""export_saved_model.py --format=tflite and --format=onnx: model.tflite (float32 and
quantized) and model.onnx with token ids in, against the raw-text SavedModel of the same
checkpoint."""

import json
import os
import warnings

import numpy as np
import pytest
import tensorflow as tf

from bert_keras import checkpoints
from bert_keras import export_saved_model
from bert_keras import modeling
from conftest import randomize

WORDS = [f"w{i}" for i in range(995)]
SEQ = 24


@pytest.fixture(scope="module")
def exports(tmp_path_factory):
  """A classifier checkpoint (random weights; most parameters in weight matrices, as in a real
  BERT), its SavedModel and its TFLite files: {name: directory}."""
  root = tmp_path_factory.mktemp("tflite")
  vocab = root / "vocab.txt"
  vocab.write_text("".join(t + "\n" for t in ["[PAD]", "[UNK]", "[CLS]", "[SEP]", "[MASK]"]
                           + WORDS))
  config = modeling.BertConfig(vocab_size=len(WORDS) + 5, hidden_size=128, num_hidden_layers=2,
                               num_attention_heads=4, intermediate_size=512,
                               max_position_embeddings=64, type_vocab_size=2)
  model = modeling.BertClassifier(config, 3)
  randomize(model, seed=5)
  source = checkpoints.save_pretrained(model, str(root / "ckpt"), vocab_file=str(vocab),
                                       do_lower_case=True)
  common = dict(task="classifier", init_checkpoint=source, vocab_file=str(vocab),
                bert_config_file=os.path.join(source, "bert_config.json"),
                max_seq_length=SEQ, labels="neg,neutral,pos")
  calibration = root / "calibration.tsv"  # (the quantized exports' measure: test_quantized.py)
  calibration.write_text("sentence\n" + "".join(t + "\n" for t in _texts(64, seed=9)))
  out = {}
  for name, extra in (("saved_model", {}), ("none", dict(format="tflite")),
                      ("dynamic", dict(format="tflite", quantize="dynamic")),
                      ("float16", dict(format="tflite", quantize="float16"))):
    out[name] = str(root / name)
    if "quantize" in extra:
      extra.update(calibration_file=str(calibration), min_agreement=0.0)
    export_saved_model.run(export_saved_model.options(export_dir=out[name], **common, **extra))
  return out


def _texts(n=200, seed=0):
  rng = np.random.RandomState(seed)
  return [" ".join(rng.choice(WORDS, rng.randint(3, 20))) for _ in range(n)]


def _saved_model(directory, texts):
  loaded = tf.saved_model.load(directory)
  a, b = tf.constant(texts), tf.constant([""] * len(texts))
  features = {k: v.numpy() for k, v in loaded.signatures["preprocess"](text_a=a,
                                                                       text_b=b).items()}
  return features, loaded.signatures["serving_default"](text_a=a, text_b=b)


def _tflite(directory, features):
  with warnings.catch_warnings():
    warnings.simplefilter("ignore")  # tf.lite.Interpreter's deprecation notice
    interpreter = tf.lite.Interpreter(os.path.join(directory, "model.tflite"))
  runner = interpreter.get_signature_runner("serving_default")
  return runner(**{k: features[k].astype(np.int32) for k in ("input_ids", "input_mask",
                                                             "segment_ids")})


@pytest.mark.slow
def test_float_tflite_equals_the_saved_model(exports):
  features, want = _saved_model(exports["saved_model"], _texts())
  assert features["input_ids"].shape == (200, SEQ)
  got = _tflite(exports["none"], features)
  np.testing.assert_allclose(got["probabilities"], want["probabilities"].numpy(), atol=1e-4)
  np.testing.assert_allclose(got["logits"], want["logits"].numpy(), atol=1e-4)
  got16 = _tflite(exports["float16"], features)
  assert (got16["probabilities"].argmax(1) == want["probabilities"].numpy().argmax(1)).mean() > .95


@pytest.mark.slow
def test_int8_keeps_the_label_where_the_margin_is_clear_in_a_third_of_the_size(exports):
  features, want = _saved_model(exports["saved_model"], _texts(seed=1))
  p = want["probabilities"].numpy()
  top2 = np.sort(p, axis=1)[:, -2:]
  clear = top2[:, 1] - top2[:, 0] > 0.1
  assert clear.sum() >= 100
  got = _tflite(exports["dynamic"], features)["probabilities"]
  agree = (got.argmax(1) == p.argmax(1))[clear].mean()
  assert agree >= 0.99, agree
  sizes = {k: os.path.getsize(os.path.join(exports[k], "model.tflite"))
           for k in ("none", "dynamic", "float16")}
  assert sizes["dynamic"] <= 0.30 * sizes["none"], sizes
  assert sizes["float16"] <= 0.55 * sizes["none"], sizes


@pytest.mark.slow
def test_tflite_directory_holds_what_an_app_needs(exports):
  directory = exports["dynamic"]
  assert sorted(os.listdir(directory)) == ["labels.txt", "model.tflite", "model_config.json",
                                           "quantization.json", "tokenizer.json", "vocab.txt"]
  assert open(os.path.join(directory, "labels.txt")).read() == "neg\nneutral\npos\n"
  with open(os.path.join(directory, "model_config.json")) as f:
    config = json.load(f)
  tensors = {k: config.pop(k) for k in ("inputs", "outputs", "input_tensors",
                                         "output_tensors")}
  assert config.pop("model_file")["name"] == "model.tflite"  # (its bytes and SHA-256)
  assert config == {"max_seq_length": SEQ, "do_lower_case": True, "task": "classifier",
                    "labels": ["neg", "neutral", "pos"], "quantize": "dynamic"}
  with warnings.catch_warnings():
    warnings.simplefilter("ignore")
    interpreter = tf.lite.Interpreter(os.path.join(directory, "model.tflite"))
  signature = interpreter.get_signature_list()
  assert signature == {"serving_default": {"inputs": ["input_ids", "input_mask", "segment_ids"],
                                           "outputs": ["logits", "probabilities"]}}
  # model_config.json: the inputs and outputs in the interpreter's order, with its tensor
  # names: an app that reads get_output_details() by position knows which is which.
  assert sorted(tensors["inputs"]) == ["input_ids", "input_mask", "segment_ids"]
  assert sorted(tensors["outputs"]) == ["logits", "probabilities"]
  for side, details in (("input", interpreter.get_input_details()),
                        ("output", interpreter.get_output_details())):
    assert [t["tensor"] for t in tensors[side + "_tensors"]] == [d["name"] for d in details]
    assert [t["index"] for t in tensors[side + "_tensors"]] == [d["index"] for d in details]
    assert [t["name"] for t in tensors[side + "_tensors"]] == tensors[side + "s"]
  interpreter.allocate_tensors()
  features, _ = _saved_model(exports["saved_model"], _texts(n=1, seed=3))
  for name, detail in zip(tensors["inputs"], interpreter.get_input_details()):
    interpreter.set_tensor(detail["index"], features[name].astype(np.int32))
  interpreter.invoke()
  want = _tflite(directory, features)  # by name, through the signature runner
  for name, detail in zip(tensors["outputs"], interpreter.get_output_details()):
    np.testing.assert_array_equal(interpreter.get_tensor(detail["index"]), want[name])


@pytest.mark.slow
def test_onnx_equals_the_saved_model(exports, tmp_path):
  pytest.importorskip("tf2onnx")
  onnxruntime = pytest.importorskip("onnxruntime")
  root = os.path.dirname(exports["saved_model"])
  export_dir = str(tmp_path / "onnx")
  export_saved_model.run(export_saved_model.options(
      task="classifier", format="onnx", init_checkpoint=os.path.join(root, "ckpt"),
      vocab_file=os.path.join(root, "vocab.txt"), labels="neg,neutral,pos",
      bert_config_file=os.path.join(root, "ckpt", "bert_config.json"), max_seq_length=SEQ,
      export_dir=export_dir))
  assert sorted(os.listdir(export_dir)) == ["labels.txt", "model.onnx", "model_config.json",
                                            "tokenizer.json", "vocab.txt"]
  features, want = _saved_model(exports["saved_model"], _texts(n=50, seed=2))
  session = onnxruntime.InferenceSession(os.path.join(export_dir, "model.onnx"))
  names = [o.name for o in session.get_outputs()]
  got = dict(zip(names, session.run(None, {k: features[k].astype(np.int32) for k in
                                           ("input_ids", "input_mask", "segment_ids")})))
  np.testing.assert_allclose(got["probabilities"], want["probabilities"].numpy(), atol=1e-4)


def test_bad_tflite_flags_are_one_line_errors(tmp_path):
  with pytest.raises(ValueError, match="--quantize is for --format=tflite"):
    export_saved_model._check_options(
        export_saved_model.options(quantize="dynamic", export_dir=str(tmp_path / "e"),
                                   init_checkpoint=str(tmp_path), vocab_file="v"),
        modeling.BertConfig(vocab_size=10))
  with pytest.raises(ValueError, match="--labels names 2 labels, --num_labels says 3"):
    export_saved_model.num_labels(export_saved_model.options(labels="a,b", num_labels=3))


@pytest.mark.slow
def test_a_damaged_model_file_is_named_before_the_runtime_reads_it(exports, tmp_path):
  """A truncated model.tflite crashed predict.py in the TFLite interpreter (a segmentation
  fault): the file is held against model_config.json's record (its bytes and SHA-256) first;
  an export without a record is checked for TFLite's identifier."""
  import shutil
  from bert_keras.prediction import tflite_onnx
  directory = tmp_path / "export"
  shutil.copytree(exports["none"], directory)
  model = directory / "model.tflite"
  good = model.read_bytes()
  assert json.loads((directory / "model_config.json").read_text())["model_file"] == {
      "name": "model.tflite", "bytes": len(good),
      "sha256": __import__("hashlib").sha256(good).hexdigest()}
  for damaged in (good[:len(good) // 2], good[:-1] + bytes([good[-1] ^ 1])):
    model.write_bytes(damaged)
    with pytest.raises(ValueError, match=r"model.tflite: damaged \(.* bytes; model_config.json "
                       r"records \d+ bytes and their SHA-256\): export it again"):
      tflite_onnx.load(str(directory))
  config = json.loads((directory / "model_config.json").read_text())
  del config["model_file"]
  (directory / "model_config.json").write_text(json.dumps(config))
  model.write_bytes(b"\x00" * 64)
  with pytest.raises(ValueError, match="model.tflite: not a TFLite model"):
    tflite_onnx.load(str(directory))
  model.write_bytes(good)
  assert tflite_onnx.load(str(directory)).predict(["w1 w2"], None)[0]["label"]
