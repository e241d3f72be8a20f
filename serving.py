"""Raw text in, predictions out: a TensorFlow SavedModel of a BERT task model with the
original's tokenization and packing in its graph (preprocessing.BertPreprocessor).

build_module(model, preprocessor, task) -> a tf.Module with two tf.functions, both taking
text_a and text_b (tf.string [B]; an empty text_b means a single segment, as in the original;
a scalar string is a batch of one, B = 1; a higher rank is refused):
  preprocess:      input_ids, input_mask, segment_ids   int32 [B, S]
  serving_default: classifier  probabilities [B, N], logits [B, N] float32, label
                               tf.string [B] (the name of the argmax of probabilities) and
                               label_names tf.string [B, N] (the N names in the order of the
                               outputs, the same row for every text: tiled to the batch so
                               that every output has the batch dimension, as TF Serving's
                               row format needs); the names are the module's `labels`, else
                               "0", "1", ... (regression, N = 1: predictions [B] and logits
                               [B, 1], no names; multi-label: sigmoid probabilities,
                               predicted int32 [B, N] (1 where a probability reaches its
                               threshold) and labels tf.string [B], the predicted label
                               names joined by the separator)
                   embeddings  pooled_output [B, H], sequence_output [B, S, H] float32, and
                               embeddings [B, H] (modeling.pool_embeddings with the module's
                               pooling and normalize: sentence embeddings)
                   squad       start_logits, end_logits [B, S] float32; the best span
                               (text_a = question, text_b = context): start_index,
                               end_index int32 [B] (-1: no context), answer tf.string [B]
Per-position outputs are 0 where input_mask is 0 (padding). The model runs on the batch's
columns up to its longest row only (trim_padding; the outputs are the same, the work is less
for short texts). save_atomic(module, export_dir) writes it (a temporary sibling directory,
then a rename).
Only TensorFlow's own ops are used: the SavedModel loads with tf.saved_model.load in a process
that imports neither bert_keras nor tensorflow_text.
tflite_model(module, S, quantize) converts the model with token ids in (serve_token_ids:
input_ids, input_mask, segment_ids int32 [B, S]) to TFLite, float32 or quantized, and
onnx_model(module, S) to ONNX (tf2onnx).
"""

import logging as py_logging
import re
import tempfile

import keras
import tensorflow as tf

from bert_keras import modeling
from bert_keras import task_registry
from bert_keras.utils import file_io
from bert_keras.utils import onnx_graph

# export_saved_model's --task values served by ServingModule (a multi-label or regression
# classifier is --task=classifier with its flags).
TASKS = tuple(kind.name for kind in task_registry.kinds(servable=True, variant_of=None)
              if kind.family.served_by == "serving")
SIGNATURES = ("serving_default", "preprocess")
PER_POSITION = ("sequence_output", "start_logits", "end_logits")


# The signatures' text inputs: tf.string [B], or a scalar (one text: a batch of one, B = 1).
# The rank is left open in the signature so that a scalar reaches _texts (a signature of
# shape [None] lets a scalar through from C++ or TF Serving, where TensorFlow then fails deep
# in the graph, and a rank that the graph knows cannot be checked in it).
TEXT_SPEC = tf.TensorSpec(None, tf.string)


def _texts(texts, name):
  """tf.string [B] of a signature input: a vector as it is, a scalar as [1]; another rank is
  an InvalidArgumentError naming the input."""
  check = tf.debugging.assert_less(tf.rank(texts), 2, message=(
      f"{name} must be a string or a vector [B] of strings (one text a row)"))
  with tf.control_dependencies([check]):
    return tf.reshape(texts, [-1])


class ServingModule(tf.Module):
  """The exported object: the task model, its preprocessor and the two signatures."""

  def __init__(self, model, preprocessor, task, max_answer_length=30, regression=False,
               trim_padding=True, pooling="mean", normalize=False, multi_label=None,
               labels=None):
    """task: a kind of task_registry whose family ServingModule serves (regression=True or
    multi_label make a "classifier" the regression or multi_label kind). multi_label: None,
    or (label names [N], thresholds [N], separator) of a multi-label classifier. labels: a
    (single-label) classifier's label names [N], or None."""
    super().__init__(name="bert_serving")
    self.thresholds = self.label_names = self.separator = None
    if multi_label is not None:
      names, thresholds, self.separator = multi_label
      self.label_names = tf.constant([str(n) for n in names], tf.string)
      self.thresholds = tf.constant(thresholds, tf.float32)
    kind = task_registry.get(task) if task in task_registry.names() else None
    if kind is not None and (regression or multi_label) and task_registry.kinds(
        variant_of=kind.name):  # its variant (task_registry)
      kind = next((k for k in task_registry.kinds(variant_of=kind.name)
                   if (k.family.thresholds if multi_label else k.num_labels == 1)), None)
    if kind is None or kind.family.served_by != "serving" or (
        kind.family.thresholds and multi_label is None):
      raise ValueError(f"task {task!r} is not one of {', '.join(TASKS)}")
    if pooling not in modeling.POOLINGS:
      raise ValueError(f"pooling {pooling!r} is not one of {', '.join(modeling.POOLINGS)}")
    self.pooling, self.normalize = pooling, bool(normalize)
    self.model = model
    self.preprocessor = preprocessor
    self.family = kind.family
    self.max_answer_length = int(max_answer_length)
    self._trim_padding = bool(trim_padding)
    self.labels = None if labels is None else [str(label) for label in labels]
    spec = TEXT_SPEC
    self.preprocess = tf.function(self._preprocess, input_signature=[spec, spec])
    self.serve = tf.function(self._serve, input_signature=[spec, spec])

  def _preprocess(self, text_a, text_b):
    return self.preprocessor({"text_a": _texts(text_a, "text_a"),
                              "text_b": _texts(text_b, "text_b")})

  def _serve(self, text_a, text_b):
    features = self._preprocess(text_a, text_b)
    return self._task_outputs(features, self._model_outputs(features, self._trim_padding))

  def serve_token_ids(self, input_ids, input_mask, segment_ids):
    """The task's outputs from token ids (int32 [B, S] each), without preprocessing: the
    serving_default of the TFLite model (tflite_model). SQuAD gives its logits only, a
    classifier its probabilities and logits (no label names: TFLite and ONNX outputs stay
    numeric; export_saved_model writes labels.txt beside them)."""
    features = {"input_ids": input_ids, "input_mask": input_mask, "segment_ids": segment_ids}
    return self._task_outputs(features, self._model_outputs(features, trim=False), spans=False)

  def _task_outputs(self, features, outputs, spans=True):
    """serving_default's outputs of the task from the model's `outputs` on `features`
    (spans False: the numeric outputs only, as TFLite and ONNX give them): its family's."""
    return self.family.serving_outputs(self, features, outputs, numeric=not spans)

  def _model_outputs(self, features, trim):
    """The model on features (int32 [B, S] each). With trim_padding, on their first L
    columns only, L = the longest row of the batch (the columns after it are padding in
    every row: attention never reads them, so the real positions' outputs are the same);
    per-position outputs are then padded back to S. Either way, per-position outputs are 0
    where input_mask is 0."""
    mask = features["input_mask"]
    if trim:
      length = tf.maximum(tf.reduce_max(tf.reduce_sum(mask, axis=1)), 1)
      outputs = self.model({k: v[:, :length] for k, v in features.items()}, training=False)
    else:
      outputs = self.model(features, training=False)
    if not isinstance(outputs, dict):
      return outputs

    def positions(x):  # [B, L, ...] -> [B, S, ...], zero where input_mask is 0
      padding = tf.shape(mask)[1] - tf.shape(x)[1]
      x = tf.pad(x, [[0, 0], [0, padding]] + [[0, 0]] * (len(x.shape) - 2))
      return x * tf.reshape(tf.cast(mask, x.dtype), tf.concat(
          [tf.shape(mask), tf.ones([len(x.shape) - 2], tf.int32)], 0))
    return {k: positions(outputs[k]) if k in PER_POSITION else outputs[k]
            for k in outputs if k in PER_POSITION or k in ("pooled_output", "logits")}

  def export_archive(self):
    """A keras.export.ExportArchive of the model's variables and the two endpoints. (Keras
    tracks the variables as TensorFlow variables there, so TF1-style loaders such as
    `saved_model_cli run` and TF Serving restore them too; a plain tf.saved_model.save of
    this module loads only with tf.saved_model.load.)"""
    archive = keras.export.ExportArchive()
    archive.track(self.model)
    spec = TEXT_SPEC
    archive.add_endpoint("serving_default", self.serve, input_signature=[spec, spec])
    archive.add_endpoint("preprocess", self.preprocess, input_signature=[spec, spec])
    return archive


QUANTIZATIONS = ("none", "dynamic", "float16")
FEATURES = ("input_ids", "input_mask", "segment_ids")


def tflite_model(module, max_seq_length, quantize="none"):
  """The TFLite flatbuffer (bytes) of module.serve_token_ids as its serving_default signature:
  input_ids, input_mask, segment_ids int32 [B, max_seq_length] in, the task's outputs out.
  quantize: "none" (float32), "dynamic" (int8 weights, dynamic-range quantization) or
  "float16" (float16 weights). The variables are frozen through a Keras ExportArchive."""
  if quantize not in QUANTIZATIONS:
    raise ValueError(f"quantize {quantize!r} is not one of {', '.join(QUANTIZATIONS)}")
  spec = [tf.TensorSpec([None, max_seq_length], tf.int32, name=n) for n in FEATURES]
  archive = keras.export.ExportArchive()
  archive.track(module.model)
  archive.add_endpoint("serving_default", tf.function(module.serve_token_ids),
                       input_signature=spec)
  with tempfile.TemporaryDirectory() as scratch:
    archive.write_out(scratch, verbose=False)
    converter = tf.lite.TFLiteConverter.from_saved_model(scratch,
                                                         signature_keys=["serving_default"])
    if quantize != "none":
      converter.optimizations = [tf.lite.Optimize.DEFAULT]
    if quantize == "float16":
      converter.target_spec.supported_types = [tf.float16]
    return converter.convert()


def onnx_model(module, max_seq_length, opset=17):
  """The ONNX model (bytes) of module.serve_token_ids: inputs input_ids, input_mask,
  segment_ids int32 [B, S] (both axes dynamic: S up to max_seq_length, the position table's
  length; a batch padded only to its longest row runs on that), the task's outputs by name.
  Converted by tf2onnx (the [onnx] extra, with onnxruntime), imported here on first use (a
  ValueError when it is not installed); then its LayerNorms, GELUs and self-attention blocks
  are one node each and its shape arithmetic constants (utils/onnx_graph.py), and ONNX
  Runtime's transformer optimizer fuses the biases into BiasGelu (the model runs in ONNX
  Runtime: com.microsoft ops)."""
  try:
    import onnxruntime  # noqa: F401  (optional: pip install 'bert-keras[onnx]')
    import sympy  # noqa: F401  (onnxruntime's symbolic shape inference)
    import tf2onnx  # noqa: F401
    from tf2onnx import convert
  except ImportError:
    raise ValueError("--format=onnx needs tf2onnx, onnxruntime and sympy: pip install "
                     "'bert-keras[onnx]'") from None
  from tf2onnx import optimizer
  spec = [tf.TensorSpec([None, None], tf.int32, name=n) for n in FEATURES]
  function = tf.function(module.serve_token_ids, input_signature=spec)
  # With a dynamic length, tf2onnx's reshape_optimizer and remove_back_to_back together feed
  # the attention's head split the shape of the flat [B * S, H] tensor ([B * S, H, heads,
  # size]: onnxruntime refuses the Reshape); without reshape_optimizer the graph is right.
  passes = optimizer._optimizers  # pylint: disable=protected-access
  kept = passes.copy()
  passes.pop("reshape_optimizer", None)
  log = py_logging.getLogger("tf2onnx.tfonnx")
  log.addFilter(_erfc_noise)
  try:
    proto, _ = convert.from_function(function, input_signature=spec, opset=opset)
  finally:
    passes.clear()
    passes.update(kept)
    log.removeFilter(_erfc_noise)
  _erfc_as_erf(proto.graph)
  onnx_graph.fuse(proto)
  onnx_graph.simplify_shapes(proto)
  onnx_graph.fuse_attention(proto)
  return _ort_fusions(proto).SerializeToString()


def _ort_fusions(proto):
  """ONNX Runtime's transformer optimizer (model type bert, its own fusions only: opt_level 0)
  on the ModelProto: bias + Gelu -> BiasGelu. Not its SkipLayerNormalization (residual add +
  LayerNormalization in one node): ONNX Runtime 1.32's CPU kernel of it took 3 to 5 times as
  long as the Add and LayerNormalization it replaces (52 against 18 us on [1, 24, 384], 2.5
  against 0.5 ms on [32, 40, 384]; bench/bench_cpu_inference.py's model has 13 of them)."""
  from onnxruntime.transformers import fusion_options
  from onnxruntime.transformers import optimizer
  log = py_logging.getLogger("onnxruntime.transformers")
  level = log.level
  log.setLevel(py_logging.ERROR)  # (its "producer not matched: tf2onnx" warning)
  options = fusion_options.FusionOptions("bert")
  options.enable_skip_layer_norm = False
  try:
    return optimizer.optimize_model(proto, model_type="bert", opt_level=0,
                                    optimization_options=options).model
  finally:
    log.setLevel(level)


def _erfc_noise(record):
  """False for tf2onnx's ERROR lines about Erfc ("Tensorflow op [...: Erfc] is not supported",
  "Unsupported ops: Counter({'Erfc': n})"): _erfc_as_erf rewrites those nodes, so they are no
  error of the user's model. Any other op's lines pass."""
  text = record.getMessage()
  return not (re.fullmatch(r"Tensorflow op \[[^\]]*: Erfc\] is not supported", text) or
              re.fullmatch(r"Unsupported ops: Counter\(\{'Erfc': \d+\}\)", text))


def _erfc_as_erf(graph):
  """Each Erfc node of an ONNX graph (tf2onnx passes TensorFlow's through: the exact GELU of
  HuggingFace's "gelu", 0.5 x erfc(-x / sqrt 2)) rewritten as 1 - Erf(x): ONNX has no Erfc, and
  onnxruntime refuses such a model."""
  from onnx import helper
  from onnx import TensorProto
  nodes = list(graph.node)
  if not any(node.op_type == "Erfc" for node in nodes):
    return
  one = "erfc_as_erf_one"
  graph.initializer.append(helper.make_tensor(one, TensorProto.FLOAT, [], [1.0]))
  rewritten = []
  for node in nodes:
    if node.op_type != "Erfc":
      rewritten.append(node)
      continue
    erf = node.output[0] + "_erf"
    rewritten.append(helper.make_node("Erf", [node.input[0]], [erf], name=node.name + "_erf"))
    rewritten.append(helper.make_node("Sub", [one, erf], [node.output[0]], name=node.name))
  del graph.node[:]
  graph.node.extend(rewritten)


def check_export_dir(export_dir, overwrite=False):
  """A ValueError (naming --export_dir) when export_dir exists, is not an empty directory and
  overwrite is off."""
  if tf.io.gfile.exists(export_dir):
    if not tf.io.gfile.isdir(export_dir):
      raise ValueError(f"--export_dir {export_dir} exists and is not a directory")
    if tf.io.gfile.listdir(export_dir) and not overwrite:
      raise ValueError(f"--export_dir {export_dir} exists and is not empty "
                       "(pass --overwrite to replace it)")


def save_atomic(module, export_dir, overwrite=False, write=None):
  """The module's ExportArchive (or what write(directory) writes) written into
  .<name>.tmp-<pid> beside export_dir, then renamed to export_dir (file_io.replaced_directory):
  a failed save leaves no directory behind (and a killed one a temporary that
  runtime/outputs.locked_output removes on the next export). An existing empty export_dir is
  replaced; a non-empty one only with overwrite (moved aside to .<name>.old.tmp-<pid>, then
  deleted once the new one is in place)."""
  check_export_dir(export_dir, overwrite)
  with file_io.replaced_directory(export_dir) as tmp:
    if write is None:
      module.export_archive().write_out(tmp, verbose=False)
    else:
      write(tmp)
