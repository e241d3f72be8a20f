"""Every registered task kind (task_registry) through every surface: build, get_config and
.keras round trip, TF1 names, HuggingFace names, load_model from a model directory, the
SavedModel export and predict.py. A kind that misses a surface fails here, not a user:
test_a_kind_that_omits_a_surface_fails plants such kinds and shows the checks catch them."""

import contextlib
import json
import os
import types

import keras
import numpy as np
import pytest

from bert_keras import checkpoints
from bert_keras import huggingface_layout
from bert_keras import export_saved_model
from bert_keras import modeling
from bert_keras import output_families
from bert_keras import preprocessing
from bert_keras import serving
from bert_keras.runtime import model_dir
from bert_keras import task_registry
from bert_keras.prediction import tagger
from bert_keras.prediction import predictors

WORDS = ["[PAD]", "[UNK]", "[CLS]", "[SEP]", "[MASK]", "the", "dog", "is", "hairy", ".", "who",
         "was", "jim", "henson", "?", "a", "puppet", "hello", "world", "b", "##ark", "##ed"]
LABELS = ["x", "y", "z"]
KINDS = task_registry.names()
S = 12


@pytest.fixture(scope="module")
def setup(tmp_path_factory):
  root = tmp_path_factory.mktemp("kinds")
  vocab = root / "vocab.txt"
  vocab.write_text("\n".join(WORDS) + "\n", encoding="utf-8")
  config = modeling.BertConfig(vocab_size=len(WORDS), hidden_size=32, num_hidden_layers=2,
                               num_attention_heads=2, intermediate_size=64,
                               max_position_embeddings=32)
  rng = np.random.default_rng(7)
  ids = rng.integers(5, len(WORDS), size=(2, S)).astype(np.int32)
  mask = np.ones((2, S), np.int32)
  mask[1, 8:] = 0
  segments = np.zeros((2, S), np.int32)
  segments[:, 5:] = 1
  inputs = {"input_ids": ids * mask, "input_mask": mask, "segment_ids": segments * mask}
  return types.SimpleNamespace(root=root, vocab=str(vocab), config=config, inputs=inputs,
                               models={})


def _labels(kind):
  return LABELS if kind.labels else None


def _model(kind, setup):
  """A model of `kind` with random weights (one per kind, cached)."""
  if kind.name not in setup.models:
    model = kind.build(setup.config, len(LABELS) if kind.labels else None)
    rng = np.random.default_rng(len(kind.name))
    for v in model.weights:
      v.assign(rng.normal(0, 0.2, v.shape).astype(np.float32))
    setup.models[kind.name] = model
  return setup.models[kind.name]


def _outputs(model, inputs):
  """The model's outputs as {name: numpy array} (a tensor output is "output"); a pretrainer
  also gets masked_lm_positions."""
  if isinstance(model, modeling.BertPretrainer):
    inputs = dict(inputs, masked_lm_positions=np.array([[1, 3], [2, 0]], np.int32))
  out = model(inputs, training=False)
  if not isinstance(out, dict):
    out = {"output": out}
  return {k: np.asarray(v) for k, v in out.items() if k != "hidden_states"}


def _assert_same(a, b, atol=1e-5):
  assert sorted(a) == sorted(b)
  for key in a:
    np.testing.assert_allclose(a[key], b[key], atol=atol, err_msg=key)


# The surfaces: each check takes a kind and the setup, and fails (an assertion or an error)
# where the kind's declaration and the code disagree.

def check_build(kind, setup):
  model = _model(kind, setup)
  assert task_registry.of_model(model) is kind
  assert [type(head) for head in modeling.heads_of(model)] == list(kind.model.HEADS)
  out = _outputs(model, setup.inputs)
  expected = {"sequence": {"sequence_output": (2, S, 32), "pooled_output": (2, 32)},
              "vectors": {"output": (2, 32)}, "classes": {"output": (2, 3)},
              "multi_label": {"output": (2, 3)}, "score": {"output": (2, 1)},
              "tags": {"output": (2, S, 3)},
              "spans": {"start_logits": (2, S), "end_logits": (2, S)}}.get(kind.outputs)
  if expected is not None:
    assert {k: out[k].shape for k in expected} == expected
  else:  # pretraining: the MLM and NSP outputs
    assert out and all(np.isfinite(v).all() for v in out.values())


def check_keras_round_trip(kind, setup):
  model = _model(kind, setup)
  clone = type(model).from_config(model.get_config())
  clone.set_weights(model.get_weights())
  assert task_registry.of_model(clone) is kind
  _assert_same(_outputs(clone, setup.inputs), _outputs(model, setup.inputs))
  path = setup.root / f"{kind.name}.keras"
  model.save(path)
  _assert_same(_outputs(keras.saving.load_model(path), setup.inputs),
               _outputs(model, setup.inputs))


def check_tf1_names(kind, setup):
  model = _model(kind, setup)
  prefix = setup.root / f"tf1_{kind.name}" / "model.ckpt"
  checkpoints.save_tf1_checkpoint(model, str(prefix))
  fresh = kind.build(setup.config, len(LABELS) if kind.labels else None)
  result = checkpoints.load_checkpoint(fresh, str(prefix))
  assert not result.missing, result.missing
  # (the checkpoint's head, by the names its model's heads declare)
  held, _ = checkpoints.checkpoint_head(checkpoints.checkpoint_shapes(str(prefix)))
  assert held == (kind.checkpoint_head or "encoder")
  _assert_same(_outputs(fresh, setup.inputs), _outputs(model, setup.inputs))


# A name each transformers architecture's state dict holds (transformers' own layout), and
# the outputs its head computes (a sequence classifier's head and a token classifier's have
# the same names: only what they compute tells them apart).
HF_NAMES = {"BertModel": "embeddings.word_embeddings.weight",
            "BertForSequenceClassification": "classifier.weight",
            "BertForTokenClassification": "classifier.weight",
            "BertForQuestionAnswering": "qa_outputs.weight",
            "BertForPreTraining": "cls.seq_relationship.weight"}
HF_OUTPUTS = {"BertModel": ("sequence", "vectors"),
              "BertForSequenceClassification": ("classes", "multi_label", "score"),
              "BertForTokenClassification": ("tags",), "BertForQuestionAnswering": ("spans",),
              "BertForPreTraining": ("pretraining",)}


def check_huggingface(kind, setup):
  model = _model(kind, setup)
  directory = setup.root / f"hf_{kind.name}"
  huggingface_layout.save_huggingface(model, str(directory), vocab_file=setup.vocab,
                                      do_lower_case=True, label_names=_labels(kind))
  config = json.loads((directory / "config.json").read_text())
  assert config["architectures"] == [kind.hf_architecture]
  assert kind.outputs in HF_OUTPUTS[kind.hf_architecture]
  assert HF_NAMES[kind.hf_architecture] in checkpoints.read_safetensors(
      str(directory / "model.safetensors"))
  loaded = checkpoints.load_model(str(directory), task=kind.name)
  _assert_same(_outputs(loaded, setup.inputs), _outputs(model, setup.inputs))


def model_directory(kind, setup):
  """A run_* style model directory of `kind` (task.json and the model files, a TF1
  checkpoint); a kind without a model-directory form: a checkpoint directory."""
  directory = setup.root / f"dir_{kind.name}"
  if directory.exists():
    return str(directory)
  directory.mkdir()
  model = _model(kind, setup)
  checkpoints.save_tf1_checkpoint(model, str(directory / "model.ckpt"))
  options = types.SimpleNamespace(vocab_file=setup.vocab, do_lower_case=True,
                                  max_seq_length=S)
  task, task_options = kind.task_file()
  if task is None:
    (directory / "bert_config.json").write_text(setup.config.to_json_string())
    (directory / "vocab.txt").write_text("\n".join(WORDS) + "\n", encoding="utf-8")
  else:
    model_dir.write_model_dir(str(directory), options, setup.config, task,
                                labels=_labels(kind), **task_options)
  return str(directory)


def check_model_directory(kind, setup):
  directory = model_directory(kind, setup)
  loaded = checkpoints.load_model(directory, task=kind.name)
  assert task_registry.of_model(loaded) is kind
  if kind.labels:
    assert loaded.labels == LABELS
  _assert_same(_outputs(loaded, setup.inputs), _outputs(_model(kind, setup), setup.inputs))
  task, _ = kind.task_file()
  if task is not None:
    description = model_dir.read_model_dir(directory)
    assert task_registry.of_description(description) is kind


def check_saved_model(kind, setup):
  """The SavedModel export of the model directory: its serving_default's outputs."""
  import tensorflow as tf
  served = task_registry.served(kind)
  export_dir = setup.root / f"saved_{kind.name}"
  export_saved_model.run(export_saved_model.options(
      init_checkpoint=model_directory(kind, setup), export_dir=str(export_dir),
      bert_config_file=os.path.join(model_directory(kind, setup), "bert_config.json"),
      vocab_file=setup.vocab, max_seq_length=S,
      task=served.variant_of or served.name))
  loaded = tf.saved_model.load(str(export_dir))
  signature = loaded.signatures["serving_default"]
  texts = {"text_a": tf.constant(["the dog is hairy"]), "text_b": tf.constant(["who was jim"])}
  out = signature(**{k: v for k, v in texts.items()
                     if k in signature.structured_input_signature[1]})
  assert sorted(out) == sorted(served.family.signature)
  assert output_families.of_outputs(out) is served.family


def check_predict(kind, setup):
  """predict.py's predictor of the model directory: each row's fields."""
  served = task_registry.served(kind)
  own = served is kind and kind.task_json  # a model directory says its own kind
  predictor = predictors.load(model_directory(kind, setup), task=None if own else served.name,
                              max_seq_length=S)
  rows = predictor.predict(["the dog is hairy", "who was jim"], ["hello world", "the dog"])
  assert len(rows) == 2 and all(sorted(row) == sorted(served.family.row_fields)
                                for row in rows), rows


def check_family(kind, setup):
  """The kind's outputs family against what its module serves: the SavedModel signature and
  the TFLite / ONNX outputs it declares, the family told from them, predict.py's row fields,
  the int8 measure of the outputs against themselves (agreement 1)."""
  import tensorflow as tf
  family = kind.family
  if not kind.servable:  # served as another kind (a pretrained encoder as embeddings)
    assert task_registry.served(kind).servable
    return
  labels = len(LABELS) if kind.labels else None
  model = export_saved_model.build_model(kind.name, setup.config, labels)
  preprocessor = preprocessing.BertPreprocessor(setup.vocab, True, S)
  texts_a, texts_b = ["the dog is hairy", "who was jim"], ["hello world", "the dog"]
  if family.served_by == "tagger":
    module = tagger.TaggerModule(model, preprocessor, ["O", "B-X", "I-X"])
    serve = lambda a, b: module.serve(a)  # noqa: E731
  else:
    assert family.served_by == "serving", family.served_by
    module = serving.ServingModule(
        model, preprocessor, kind.name, labels=LABELS if kind.labels else None,
        multi_label=(LABELS, [0.5] * 3, "|") if family.thresholds else None)
    serve = module.serve
  out = serve(tf.constant(texts_a), tf.constant(texts_b))
  assert sorted(out) == sorted(family.signature)
  assert output_families.of_outputs(out) is family
  predictor = predictors.GraphPredictor(serve, kind.name, labels=LABELS if kind.labels else None)
  rows = predictor.predict(texts_a, texts_b)
  assert len(rows) == 2 and all(sorted(row) == sorted(family.row_fields) for row in rows), rows
  # serve.py: the kind's HTTP API (server/apis.py), and a /predict family's answer of a row
  from bert_keras.server import apis
  assert kind.served_api in apis.ROOT, f"{kind.name}: no HTTP API ({kind.served_api})"
  if kind.served_api == "predict":
    assert all(json.dumps(family.http_answer(row)) for row in rows)
  numeric = {k: np.asarray(v) for k, v in out.items()}
  if hasattr(module, "serve_token_ids"):  # (the TFLite / ONNX export's outputs)
    ids = {k: tf.constant(v) for k, v in setup.inputs.items()}
    numeric = {k: np.asarray(v) for k, v in module.serve_token_ids(**ids).items()}
    assert sorted(numeric) == sorted(family.numeric)
    assert output_families.of_outputs(numeric, numeric=True) is family
  figures = family.measure(numeric, numeric, setup.inputs["input_mask"])
  assert figures["agreement"] == pytest.approx(1.0), figures


def check_text_model(kind, setup):
  """load_model(..., text_input=True): raw text in, the task model's outputs through its
  family's probabilities out (TextModel)."""
  if not kind.text_input:
    with pytest.raises(ValueError, match="text_input=True takes task"):
      checkpoints.load_model(model_directory(kind, setup), task=kind.name, text_input=True)
    return
  text_model = checkpoints.load_model(model_directory(kind, setup), task=kind.name,
                                      text_input=True, max_seq_length=S)
  texts = {"text_a": np.array(["the dog is hairy", "who was jim"]),
           "text_b": np.array(["hello world", ""])}
  got = text_model(texts)
  raw = text_model.task_model(text_model.preprocessor(texts), training=False)
  if isinstance(raw, dict):
    _assert_same({k: np.asarray(v) for k, v in got.items()},
                 {k: np.asarray(v) for k, v in raw.items() if k != "hidden_states"})
  else:  # (the model's own probabilities where it has them: what its logits mean)
    model = text_model.task_model
    want = (model.probabilities(raw) if kind.probabilities and hasattr(model, "probabilities")
            else kind.family.to_probabilities(np.asarray(raw)))
    np.testing.assert_allclose(np.asarray(got), np.asarray(want), atol=1e-5)


def check_convert(kind, setup):
  """convert_checkpoint.py --task=<the kind, or the kind it is a variant of> of the model
  directory into HuggingFace's layout (a kind without one: its TF1 layout), read back."""
  from bert_keras import convert_checkpoint
  fmt = "huggingface" if kind.hf_architecture else "tf1"
  output = setup.root / f"convert_{kind.name}"
  convert_checkpoint.run(convert_checkpoint.options(
      init_checkpoint=model_directory(kind, setup), output_dir=str(output), format=fmt,
      task=kind.variant_of or kind.name, vocab_file=setup.vocab,
      labels=",".join(LABELS) if kind.labels else None))
  loaded = checkpoints.load_model(str(output), task=kind.name,
                                  num_labels=len(LABELS) if kind.labels else None)
  _assert_same(_outputs(loaded, setup.inputs), _outputs(_model(kind, setup), setup.inputs))


def _assert_rows_close(got, want, where):
  """predict rows (dicts, lists, numbers, strings) equal, numbers within 1e-4."""
  if isinstance(want, dict):
    assert sorted(got) == sorted(want), (where, got, want)
    for key in want:
      _assert_rows_close(got[key], want[key], f"{where}.{key}")
  elif isinstance(want, list):
    assert len(got) == len(want), (where, got, want)
    for i, (g, w) in enumerate(zip(got, want)):
      _assert_rows_close(g, w, f"{where}[{i}]")
  elif isinstance(want, float):
    assert got == pytest.approx(want, abs=1e-4), (where, got, want)
  else:
    assert got == want, (where, got, want)


TEXTS = (["the dog is hairy", "who was jim"], ["hello world", "the dog"])


def _model_dir_rows(kind, setup):
  served = task_registry.served(kind)
  own = served is kind and kind.task_json
  predictor = predictors.load(model_directory(kind, setup), task=None if own else served.name,
                              max_seq_length=S)
  return predictor.predict(TEXTS[0], TEXTS[1] if served.pair != "no" else None)


def check_token_id_model(kind, setup):
  """export_saved_model.py --format=tflite of the model directory, read by predict.py's
  token-id runner (prediction/tflite_onnx.load): the model directory's rows; a family without
  TFLite outputs refuses the format, one that gives logits only refuses predict."""
  from bert_keras.prediction import tflite_onnx
  served = task_registry.served(kind)
  export_dir = setup.root / f"tflite_{kind.name}"
  export = lambda: export_saved_model.run(export_saved_model.options(  # noqa: E731
      init_checkpoint=model_directory(kind, setup), export_dir=str(export_dir),
      bert_config_file=os.path.join(model_directory(kind, setup), "bert_config.json"),
      vocab_file=setup.vocab, max_seq_length=S, task=served.variant_of or served.name,
      format="tflite"))
  if not served.family.numeric:
    with pytest.raises(ValueError, match="exports a SavedModel only"):
      export()
    return
  export()
  if served.family.answers:
    with pytest.raises(ValueError, match="gives logits only"):
      tflite_onnx.load(str(export_dir))
    return
  rows = tflite_onnx.load(str(export_dir)).predict(TEXTS[0],
                                                   TEXTS[1] if served.pair != "no" else None)
  _assert_rows_close(rows, _model_dir_rows(kind, setup), kind.name)


def check_serve(kind, setup):
  """serve.py on the model directory (no model flags): its API answers as predict.py
  predicts, through the family's http_answer."""
  from starlette.testclient import TestClient
  from bert_keras import serve
  served = task_registry.served(kind)
  directory = model_directory(kind, setup)
  predictor = predictors.load(directory, task=None if served is kind else served.name,
                              max_seq_length=S)
  with TestClient(serve.build(serve.options(model_dir=directory))) as client:
    if served.served_api == "embed":
      got = client.post("/embed", json={"inputs": TEXTS[0], "normalize": False})
      want = [r["embedding"] for r in predictor.predict(TEXTS[0], None)]
    elif served.served_api == "rerank":
      got = client.post("/rerank", json={"query": TEXTS[0][0], "texts": TEXTS[1],
                                         "raw_scores": True})
      scores = [r["score"] for r in predictor.predict([TEXTS[0][0]] * 2, TEXTS[1])]
      want = [{"index": int(i), "score": scores[i]} for i in np.argsort(scores)[::-1]]
    else:
      inputs = ([{"question": a, "context": b} for a, b in zip(*TEXTS)] if served.family.answers
                else [[a, b] for a, b in zip(*TEXTS)] if served.pair != "no" else TEXTS[0])
      got = client.post("/predict", json={"inputs": inputs})
      predictor.keep_scores = True
      want = [served.family.http_answer(row) for row in predictor.predict(
          TEXTS[0], TEXTS[1] if served.pair != "no" else None)]
    assert got.status_code == 200, got.text
    _assert_rows_close(got.json(), json.loads(json.dumps(want)), kind.name)


def check_predict_beam(kind, setup):
  """predict_beam.py (Beam's DirectRunner) on the model directory: predict.py's rows."""
  from bert_keras import predict_beam
  from bert_keras.runtime import beam_runner
  served = task_registry.served(kind)
  own = served is kind and kind.task_json
  inputs = setup.root / f"beam_in_{kind.name}.jsonl"
  inputs.write_text("".join(json.dumps({"id": str(i), "text_a": a, "text_b": b}) + "\n"
                            for i, (a, b) in enumerate(zip(*TEXTS))), encoding="utf-8")
  prefix = setup.root / f"beam_out_{kind.name}" / "pred"
  prefix.parent.mkdir()
  predict_beam.run(predict_beam.options(
      model_dir=model_directory(kind, setup), input_file=str(inputs), output_file=str(prefix),
      batch_size=4, max_seq_length=S, task=None if own else served.name,
      text_a_column="text_a", text_b_column="text_b" if served.pair != "no" else None),
      beam_runner.pipeline_options())
  rows = {}
  for shard in sorted(prefix.parent.glob("pred*")):
    for line in shard.read_text(encoding="utf-8").splitlines():
      row = json.loads(line)
      rows[row.pop("id")] = {k: v for k, v in row.items() if k in served.family.row_fields}
  _assert_rows_close([rows[str(i)] for i in range(len(TEXTS[0]))],
                     _model_dir_rows(kind, setup), kind.name)


FAST_SURFACES = (check_build, check_keras_round_trip, check_tf1_names, check_huggingface,
                 check_model_directory, check_family, check_text_model, check_convert)


@pytest.mark.parametrize("surface", FAST_SURFACES, ids=lambda f: f.__name__[6:])
@pytest.mark.parametrize("name", KINDS)
def test_every_kind_on_every_surface(setup, name, surface):
  surface(task_registry.get(name), setup)


@pytest.mark.slow
@pytest.mark.parametrize("surface", (check_saved_model, check_predict, check_token_id_model,
                                     check_predict_beam, check_serve),
                         ids=lambda f: f.__name__[6:])
@pytest.mark.parametrize("name", KINDS)
def test_every_kind_is_served(setup, name, surface):
  surface(task_registry.get(name), setup)


@keras.saving.register_keras_serializable(package="test_task_registry")
class PlantedHead(modeling.BertClassifier):
  """A classifier whose class no surface knows (its TF1 and HuggingFace names are
  BertClassifier's, its kind is declared below without some of what the surfaces need)."""


@keras.saving.register_keras_serializable(package="test_task_registry")
class PlantedExtraHead(modeling.BertClassifier):
  """A head with a layer of its own that the checkpoint name tables were never told of."""

  def build(self, input_shape=None):  # (BertClassifier builds itself in its __init__)
    super().build(input_shape)
    self.extra = keras.layers.Dense(self.num_labels, name="extra")
    self.extra.build((None, self.num_labels))

  def call(self, inputs, training=None):
    return self.extra(super().call(inputs, training=training))


@keras.saving.register_keras_serializable(package="test_task_registry")
class PlantedNamedLayer(keras.layers.Layer):
  """A head layer that declares its own checkpoint names, as modeling's heads do."""
  CHECKPOINT_NAMES = (("kernel", "cls/planted/output_weights", "planted.weight"),)
  CHECKPOINT_TASK = None

  def __init__(self, units, **kwargs):
    super().__init__(**kwargs)
    self.units = units
    self.kernel = self.add_weight(name="kernel", shape=(units, units))

  def get_config(self):
    return {**super().get_config(), "units": self.units}

  def call(self, x):
    return x @ self.kernel


@keras.saving.register_keras_serializable(package="test_task_registry")
class PlantedNamedHead(modeling.BertClassifier):
  """PlantedExtraHead's extra layer, with its names declared: no table is told of them."""
  HEADS = (modeling.ClassifierHead, PlantedNamedLayer)

  def build(self, input_shape=None):  # (BertClassifier builds itself in its __init__)
    super().build(input_shape)
    self.extra = PlantedNamedLayer(self.num_labels, name="extra")

  def call(self, inputs, training=None):
    return self.extra(super().call(inputs, training=training))


@contextlib.contextmanager
def planted_kind(setup, model=PlantedHead, outputs="classes",
                 hf_architecture="BertForSequenceClassification", **declaration):
  """A kind "planted" registered for the body (a labelled classifier unless told otherwise),
  then unregistered and its cached model dropped."""
  declaration.setdefault("labels", declaration.get("num_labels") is None)
  kind = task_registry.register(task_registry.TaskKind(
      "planted", model, outputs, hf_architecture, **declaration))
  try:
    yield kind
  finally:
    task_registry.unregister("planted")
    setup.models.pop("planted", None)


def test_a_head_that_declares_its_names_needs_no_table(setup):
  with planted_kind(setup, PlantedNamedHead) as kind:
    check_build(kind, setup)
    check_tf1_names(kind, setup)
    check_huggingface(kind, setup)


@pytest.mark.parametrize("planted, surface", [
    # an HuggingFace architecture that is not the one written
    (dict(hf_architecture="BertForMaskedLM"), check_huggingface),
    # one with the same weight names that computes something else
    (dict(hf_architecture="BertForTokenClassification"), check_huggingface),
    # a kind that says its outputs are a score, on a model with three
    (dict(outputs="score"), check_build),
    # a fixed number of outputs the model does not have
    (dict(num_labels=2, labels=False), check_build),
    # a head with weights no checkpoint name table knows: TF1 and HuggingFace lose them
    (dict(model=PlantedExtraHead), check_tf1_names),
    (dict(model=PlantedExtraHead), check_huggingface),
    (dict(model=PlantedExtraHead), check_convert),
    # a family whose probabilities are not what the model's logits mean (sigmoid for softmax)
    (dict(outputs="multi_label"), check_text_model),
])
def test_a_kind_that_omits_a_surface_fails(setup, planted, surface):
  with planted_kind(setup, **planted) as kind:
    try:
      surface(kind, setup)  # the same declaration without the omission passes (below)
    except (AssertionError, ValueError, TypeError, KeyError):
      return
    pytest.fail(f"{surface.__name__} accepted the planted kind {planted}")


def test_the_planted_kind_without_its_omission_passes(setup):
  with planted_kind(setup) as kind:
    check_build(kind, setup)
    check_keras_round_trip(kind, setup)


def _planted_family(omit):
  """The score family with one more output, named "planted", without `omit` (the base
  class's then)."""
  score = output_families.get("score")

  class Planted(output_families.OutputsFamily):
    name = "planted"
    signature = score.signature + ("planted",)
    numeric = score.numeric + ("planted",)
    served_by, row_fields = score.served_by, score.row_fields
    http_api = score.http_api

    def http_answer(self, row, raw_scores=False):
      return score.http_answer(row, raw_scores)

    def serving_outputs(self, module, features, outputs, numeric=False):
      served = score.serving_outputs(module, features, outputs, numeric)
      return dict(served, planted=served["predictions"])

    def rows(self, outputs, texts_a, texts_b, predictor):
      return score.rows(outputs, texts_a, texts_b, predictor)

    def measure(self, want, got, input_mask=None):
      return score.measure(want, got, input_mask)

  if omit is not None:
    delattr(Planted, omit)  # the base class's: empty, or NotImplementedError
  return Planted()


@pytest.mark.slow
@pytest.mark.parametrize("omit", ["signature", "numeric", "served_by", "row_fields",
                                  "serving_outputs", "rows", "measure", "http_api",
                                  "http_answer"])
def test_a_family_that_omits_its_behaviour_fails(setup, omit):
  """A new outputs family touches its declaration, its head, its reader and its tests: a
  family that leaves out any part of its declaration fails check_family; the whole one
  passes."""
  for omitted in (omit, None):
    output_families.register(_planted_family(omitted))
    try:
      with planted_kind(setup, outputs="planted", num_labels=1) as kind:
        if omitted is None:
          check_family(kind, setup)
          continue
        with pytest.raises((AssertionError, ValueError, NotImplementedError, KeyError)):
          check_family(kind, setup)
    finally:
      output_families.unregister("planted")


def test_families_must_be_told_apart():
  with pytest.raises(ValueError, match="its signature is 'score'"):
    output_families.register(type("Copy", (output_families.Score,), {"name": "copy"})())
  assert "copy" not in output_families.names()


def test_a_kind_without_a_huggingface_form(setup):
  """A kind may name no transformers class: it builds and round-trips through TF1 names, and
  writing it in HuggingFace's layout is one TypeError naming the kind."""
  from bert_keras import huggingface_layout
  with planted_kind(setup, hf_architecture=None) as kind:
    check_build(kind, setup)
    check_tf1_names(kind, setup)
    with pytest.raises(TypeError, match="a planted model has no HuggingFace form"):
      huggingface_layout.save_huggingface(_model(kind, setup), str(setup.root / "hf_none"),
                                          vocab_file=setup.vocab)
    assert not (setup.root / "hf_none").exists()


def test_names_and_aliases():
  assert task_registry.get("pretraining") is task_registry.get("pretrainer")
  with pytest.raises(ValueError, match="unknown task 'nope': one of encoder"):
    task_registry.get("nope")
  with pytest.raises(ValueError, match="registered already"):
    task_registry.register(task_registry.TaskKind("tagger", modeling.BertModel, "sequence",
                                                  "BertModel"))
  with pytest.raises(ValueError, match="outputs 'words'"):
    task_registry.TaskKind("x", modeling.BertModel, "words", "BertModel")
  description = {"task": "classifier", "multi_label": True, "labels": LABELS}
  assert task_registry.of_description(description).name == "multi_label"
  assert task_registry.get("multi_label").task_file() == ("classifier", {"multi_label": True})
  assert task_registry.get("regression").task_file() == ("regression", {})
  assert task_registry.get("encoder").task_file() == (None, {})
