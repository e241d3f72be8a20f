"""predict.py on TFLite and ONNX exports (prediction/tflite_onnx.py) against the SavedModel's rows,
and the quantized exports' measure and gate (quantization.json, --min_agreement)."""

import json
import os
import re

import numpy as np
import pytest

from bert_keras import checkpoints
from bert_keras import export_saved_model
from bert_keras import modeling
from bert_keras import output_families
from bert_keras import predict
from bert_keras.prediction import tflite_onnx
from conftest import randomize

WORDS = [f"w{i}" for i in range(995)]
SEQ = 24
LABELS = ["neg", "neutral", "pos"]


def _write_texts(path, n, seed):
  rng = np.random.RandomState(seed)
  with open(path, "w") as f:
    f.write("id\tsentence\n")
    for i in range(n):
      f.write(f"{i}\t{' '.join(rng.choice(WORDS, rng.randint(3, 20)))}\n")
  return str(path)


@pytest.fixture(scope="module")
def source(tmp_path_factory):
  """A classifier checkpoint (random weights), the export options and a calibration file."""
  root = tmp_path_factory.mktemp("quantized")
  vocab = root / "vocab.txt"
  vocab.write_text("".join(t + "\n" for t in ["[PAD]", "[UNK]", "[CLS]", "[SEP]", "[MASK]"]
                           + WORDS))
  config = modeling.BertConfig(vocab_size=len(WORDS) + 5, hidden_size=64, num_hidden_layers=2,
                               num_attention_heads=4, intermediate_size=256,
                               max_position_embeddings=64, type_vocab_size=2,
                               hidden_act="gelu_exact")  # (HuggingFace's gelu: Erfc in ONNX)
  model = modeling.BertClassifier(config, len(LABELS))
  randomize(model, seed=3)
  for variable in model.weights:  # LayerNorm near its usual scale: a model that is not chaos
    if "gamma" in variable.path:
      variable.assign(np.ones(variable.shape, np.float32))
  checkpoint = checkpoints.save_pretrained(model, str(root / "ckpt"), vocab_file=str(vocab),
                                           do_lower_case=True)
  common = dict(task="classifier", init_checkpoint=checkpoint, vocab_file=str(vocab),
                bert_config_file=os.path.join(checkpoint, "bert_config.json"),
                max_seq_length=SEQ, labels=",".join(LABELS),
                calibration_file=_write_texts(root / "calibration.tsv", 200, seed=1))
  return {"root": root, "common": common, "input": _write_texts(root / "input.tsv", 120, 2)}


@pytest.fixture(scope="module")
def exports(source):
  """{name: export directory}: the SavedModel, TFLite and ONNX, float and int8."""
  pytest.importorskip("tf2onnx")
  pytest.importorskip("onnxruntime")
  out = {}
  for name, extra in (("saved_model", {}), ("tflite", dict(format="tflite")),
                      ("tflite_int8", dict(format="tflite", quantize="dynamic")),
                      ("onnx", dict(format="onnx")),
                      ("onnx_int8", dict(format="onnx", quantize="dynamic"))):
    out[name] = str(source["root"] / name)
    export_saved_model.run(export_saved_model.options(export_dir=out[name], min_agreement=0.9,
                                                      **source["common"], **extra))
  return out


@pytest.mark.parametrize("max_seq_length", [5, 16, 64])
def test_token_ids_equal_the_graph_preprocessor(tmp_path, max_seq_length):
  """TokenIds (numpy, outside the model) packs texts and pairs as BertPreprocessor (in the
  graph, tested against the original) does: cut pairs, empty second texts, accents, CJK,
  control characters, unknown words, texts longer than the window."""
  import tensorflow as tf
  from bert_keras import preprocessing
  words = ["the", "cat", "sat", "on", "mat", "naive", "cafe", "##s", "##ing", "!", ",", "\u65e5",
           "\u672c", "run"]
  vocab = tmp_path / "vocab.txt"
  vocab.write_text("".join(t + "\n" for t in ["[PAD]", "[UNK]", "[CLS]", "[SEP]", "[MASK]"]
                           + words), encoding="utf-8")
  texts_a = ["The cats sat!", "", "Na\u00efve caf\u00e9s, running", "\u65e5\u672c\u8a9e the",
             "cat " * 40, "\x00odd\u200b\tmat\r\n", "unknownword mat"]
  texts_b = ["mat", "the cat", "", "sat " * 30, "on", "", "cat\u65e5"]
  tokens = tflite_onnx.TokenIds(str(vocab), True, max_seq_length)
  graph = preprocessing.BertPreprocessor(str(vocab), True, max_seq_length)
  for b in (None, texts_b):
    got = tokens(texts_a, b)
    want = graph({"text_a": tf.constant(texts_a),
                  "text_b": tf.constant(b if b is not None else [""] * len(texts_a))})
    for name in ("input_ids", "input_mask", "segment_ids"):
      assert got[name].dtype == np.int32
      np.testing.assert_array_equal(got[name], want[name].numpy(), err_msg=name)


def _rows(model_dir, input_file, tmp_path, name):
  output = str(tmp_path / f"{name}.jsonl")
  predict.run(predict.options(model_dir=model_dir, input_file=input_file, output_file=output))
  with open(output) as f:
    return [json.loads(line) for line in f]


def _probabilities(rows):
  return np.array([[row["probabilities"][n] for n in LABELS] for row in rows])


@pytest.mark.slow
def test_float_tflite_and_onnx_rows_equal_the_saved_model_rows(exports, source, tmp_path):
  want = _rows(exports["saved_model"], source["input"], tmp_path, "saved_model")
  assert len(want) == 120 and len({row["label"] for row in want}) > 1
  for name in ("tflite", "onnx"):
    for where in (exports[name], os.path.join(exports[name], f"model.{name}")):  # dir or file
      got = _rows(where, source["input"], tmp_path, name)
      assert [row["label"] for row in got] == [row["label"] for row in want], name
      assert [row["sentence"] for row in got] == [row["sentence"] for row in want]
      np.testing.assert_allclose(_probabilities(got), _probabilities(want), atol=1e-5,
                                 err_msg=name)


@pytest.mark.slow
def test_one_onnx_model_runs_batches_of_different_lengths(exports, source):
  """model.onnx takes [B, S] of any S: two batches of different lengths through one session,
  each equal to the same rows padded to max_seq_length; the runner trims each batch to its
  longest row. Its LayerNorms, GELUs (fused with the bias) and self-attention blocks are one
  node each; the residual adds stay apart from the LayerNorms (serving._ort_fusions)."""
  onnx = pytest.importorskip("onnx")
  path = os.path.join(exports["onnx"], "model.onnx")
  ops = [node.op_type for node in onnx.load(path).graph.node]
  assert {"LayerNormalization", "BiasGelu"} <= set(ops), ops
  assert ops.count("Attention") == 2 and ops.count("Softmax") == 1, ops  # (the head's)
  assert not set(ops) & {"GlobalAveragePool", "Erf", "Gelu", "SkipLayerNormalization"}, ops
  runner = tflite_onnx.runner(path)
  assert runner.dynamic_length
  config = tflite_onnx.read_config(exports["onnx"])
  tokens = tflite_onnx.TokenIds(os.path.join(exports["onnx"], "vocab.txt"), True, SEQ)
  short, longer = ["w1 w2", "w3"], ["w4 " * 15, "w5 w6 w7", "w8"]
  for texts in (short, longer):
    features = tokens(texts)
    length = int(features["input_mask"].sum(1).max())
    assert length < SEQ == config["max_seq_length"]
    padded = runner.__class__(path)  # the same model fed the full width, untrimmed
    padded.dynamic_length = False
    want = padded(features)
    trimmed = {k: v[:, :length] for k, v in features.items()}
    got = dict(zip(runner.output_names, runner._session.run(None, trimmed)))
    for name in ("probabilities", "logits"):
      np.testing.assert_allclose(got[name], want[name], atol=1e-5, err_msg=name)
      np.testing.assert_allclose(runner(features)[name], want[name], atol=1e-5, err_msg=name)


@pytest.mark.slow
def test_int8_rows_agree_with_the_saved_model_as_export_measured(exports, source, tmp_path):
  calibration = source["common"]["calibration_file"]
  want = [row["label"] for row in _rows(exports["saved_model"], calibration, tmp_path, "sm")]
  for name in ("tflite_int8", "onnx_int8"):
    with open(os.path.join(exports[name], tflite_onnx.QUANTIZATION_FILE)) as f:
      record = json.load(f)
    assert record["measure"] == "label_agreement" and record["examples"] == 200
    assert record["accepted"] and record["min_agreement"] == 0.9
    assert record["format"] == name.split("_")[0] and record["quantize"] == "dynamic"
    assert 0.9 <= record["agreement"] <= 1.0
    got = [row["label"] for row in _rows(exports[name], calibration, tmp_path, name)]
    agreement = np.mean([a == b for a, b in zip(got, want)])
    assert agreement >= record["agreement"] - 1e-9, (name, agreement, record)
  sizes = {k: os.path.getsize(os.path.join(exports[k], tflite_onnx.model_file(exports[k])))
           for k in ("tflite", "tflite_int8", "onnx", "onnx_int8")}
  assert sizes["onnx_int8"] < 0.5 * sizes["onnx"], sizes
  assert not os.path.exists(os.path.join(exports["tflite"], tflite_onnx.QUANTIZATION_FILE))


@pytest.mark.slow
def test_the_gate_refuses_a_corrupted_quantization_and_leaves_nothing(source, monkeypatch,
                                                                      tmp_path):
  pytest.importorskip("tf2onnx")
  onnx = pytest.importorskip("onnx")
  from onnx import numpy_helper

  def corrupt(float_path, int8_path):  # every weight matrix scrambled
    model = onnx.load(float_path)
    rng = np.random.RandomState(0)
    for i, tensor in enumerate(model.graph.initializer):
      array = numpy_helper.to_array(tensor)
      if array.ndim == 2 and array.size > 1000:
        scrambled = rng.permutation(array.ravel()).reshape(array.shape)
        model.graph.initializer[i].CopyFrom(numpy_helper.from_array(scrambled, tensor.name))
    onnx.save(model, int8_path)

  monkeypatch.setattr(tflite_onnx, "onnx_int8", corrupt)
  export_dir = tmp_path / "bad"
  options = dict(source["common"], format="onnx", quantize="dynamic", export_dir=str(export_dir))
  with pytest.raises(ValueError, match=r"label_agreement 0\.\d+ against the float model on "
                     r"200 rows is below --min_agreement 0.99; not exported"):
    export_saved_model.run(export_saved_model.options(**options))
  assert os.listdir(tmp_path) == []  # no export, no temporary, no lock left
  export_saved_model.run(export_saved_model.options(force_quantized=True, **options))
  with open(export_dir / tflite_onnx.QUANTIZATION_FILE) as f:
    record = json.load(f)
  assert record["accepted"] and record["agreement"] < 0.9, record


@pytest.mark.parametrize("value", [1.01, -1.0, float("nan")])
def test_an_impossible_min_agreement_is_refused_before_the_export(source, tmp_path, value):
  """--min_agreement outside [0, 1] (NaN too, which would switch the gate off) is refused
  before any export is built (an int8 export takes minutes on a real model)."""
  export_dir = tmp_path / "refused"
  with pytest.raises(ValueError, match=re.escape(f"--min_agreement={value}: must be in [0, 1]")):
    export_saved_model.run(export_saved_model.options(
        export_dir=str(export_dir), format="tflite", quantize="dynamic", min_agreement=value,
        **source["common"]))
  assert not export_dir.exists() and os.listdir(tmp_path) == []


def test_a_quantized_export_needs_a_sample(tmp_path):
  with pytest.raises(ValueError, match="give --calibration_file"):
    tflite_onnx.sample_texts(str(tmp_path))
  with pytest.raises(ValueError, match="--calibration_file .*: no such file"):
    tflite_onnx.sample_texts(str(tmp_path), str(tmp_path / "missing.tsv"))


def test_sample_texts_reads_pairs_up_to_the_limit(tmp_path):
  path = tmp_path / "dev.tsv"
  path.write_text("sentence1\tsentence2\tlabel\n" + "".join(f"a{i}\tb{i}\t1\n"
                                                            for i in range(9)))
  texts_a, texts_b, where = tflite_onnx.sample_texts(str(tmp_path), str(path), limit=5)
  assert texts_a == [f"a{i}" for i in range(5)] and texts_b == [f"b{i}" for i in range(5)]
  assert where == str(path)


def test_measures_of_each_kind():
  rng = np.random.RandomState(0)
  p = rng.rand(10, 3)
  q = p.copy()
  q[0] = q[0][::-1] if q[0].argmax() != 1 else q[0][[1, 0, 2]]
  assert tflite_onnx.measure("classes", {"probabilities": p}, {"probabilities": q}) == {
      "measure": "label_agreement", "agreement": 0.9}
  v = rng.randn(4, 8)
  figures = tflite_onnx.measure("vectors", {"embeddings": v}, {"embeddings": -v})
  assert figures["measure"] == "mean_cosine" and figures["agreement"] == pytest.approx(-1)
  s = rng.randn(50)
  figures = tflite_onnx.measure("score", {"predictions": s}, {"predictions": np.exp(s)})
  assert figures["spearman"] == pytest.approx(1) and figures["pearson"] < 0.99
  assert figures["agreement"] == figures["pearson"]
  tags = [["B-PER", "I-PER", "O", "B-LOC"], ["O", "B-ORG"]]
  assert output_families.entity_f1(tags, tags) == 1.0
  assert output_families.entity_f1(tags, [["B-PER", "O", "O", "B-LOC"], ["O", "B-ORG"]]) == (
      pytest.approx(2 / 3))
  predicted = np.array([[1, 0], [0, 1]])
  assert tflite_onnx.measure("multi_label", {"predicted": predicted},
                             {"predicted": np.array([[1, 0], [1, 1]])})["agreement"] == 0.5


def test_gate_writes_the_record_and_refuses_below_the_minimum(tmp_path, capsys):
  figures = {"measure": "mean_cosine", "agreement": 0.95, "examples": 7}
  with pytest.raises(ValueError, match=r"mean_cosine 0.950000 .* 7 rows is below "
                     r"--min_agreement 0.99"):
    tflite_onnx.gate(figures, str(tmp_path), 0.99, False, "x")
  record = tflite_onnx.gate(figures, str(tmp_path), 0.99, True, "x")
  assert json.loads((tmp_path / tflite_onnx.QUANTIZATION_FILE).read_text()) == record == dict(
      figures, min_agreement=0.99, accepted=True, forced=True)
  assert tflite_onnx.gate(figures, str(tmp_path), 0.9, True, "x")["forced"] is False
  assert "mean_cosine 0.950000 against the float model on 7 rows" in capsys.readouterr().out


def test_a_classifier_directory_is_measured_on_its_dev_examples(tmp_path):
  pairs = os.path.join(os.path.dirname(os.path.dirname(os.path.abspath(__file__))),
                       "sample_tasks", "pairs")
  (tmp_path / "task.json").write_text(json.dumps({"task": "classifier", "max_seq_length": 32,
                                                  "labels": ["other_topic", "same_topic"]}))
  (tmp_path / "run_options.json").write_text(json.dumps({"task_name": "custom",
                                                         "data_dir": pairs}))
  texts_a, texts_b, where = tflite_onnx.sample_texts(str(tmp_path), "ignored.tsv", limit=10)
  with open(os.path.join(pairs, "dev.tsv")) as f:
    rows = [line.rstrip("\n").split("\t") for line in f][1:11]
  assert texts_a == [r[0] for r in rows] and texts_b == [r[1] for r in rows]
  assert where == f"custom dev examples in {pairs}"


def test_only_tf2onnx_erfc_lines_are_dropped():
  """serving rewrites Erfc itself, so tf2onnx's ERROR lines about it are noise; another
  unsupported op's lines still reach the user."""
  import logging
  from bert_keras import serving

  def record(text):
    return logging.LogRecord("tf2onnx.tfonnx", logging.ERROR, __file__, 1, text, None, None)

  for text in ("Tensorflow op [bert/layer_0/ffn/Gelu/Erfc: Erfc] is not supported",
               "Unsupported ops: Counter({'Erfc': 6})"):
    assert not serving._erfc_noise(record(text)), text
  for text in ("Tensorflow op [bert/x/Foo: Foo] is not supported",
               "Unsupported ops: Counter({'Erfc': 6, 'Foo': 1})", "Failed to convert node"):
    assert serving._erfc_noise(record(text)), text
