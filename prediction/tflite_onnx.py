"""Token-id models (export_saved_model.py --format=tflite / onnx) for predict.py, and the
measure of a quantized export against its float model.

An export directory holds model.tflite or model.onnx (inputs input_ids, input_mask,
segment_ids int32 [B, S]; TFLite: S = model_config.json's max_seq_length; ONNX: any S up to it,
each batch trimmed to its longest row), vocab.txt,
model_config.json (task, max_seq_length, do_lower_case, labels, quantize) and, for a
classifier, labels.txt. load(path) turns it (or the model file inside it) into a
predictors.GraphPredictor: the texts are tokenized outside the model with the export's own
vocabulary and casing (preprocessing.BertPreprocessor, the SavedModel's tokenizer), the model
runs in TFLite's interpreter or ONNX Runtime, and the rows are read as the SavedModel's are.

measure(kind, float_outputs, quantized_outputs, input_mask) compares the two models' outputs
on one sample: label agreement (classifiers: the argmax; multi-label: the same label set),
mean cosine of the embeddings, min(Pearson, Spearman) of scores (regressions, rerankers), the
best span's agreement (squad), entity F1 against the float model's tags (taggers:
entity_f1). gate() writes it into the export directory as quantization.json and refuses an
export below --min_agreement.
"""

import hashlib
import json
import os
import warnings

from absl import logging
import numpy as np
import tensorflow as tf

from bert_keras import model_files
from bert_keras import output_families
from bert_keras import preprocessing
from bert_keras.runtime import model_dir
from bert_keras import serving
from bert_keras import task_registry
from bert_keras.tasks.classifier import data as classifier_data
from bert_keras.tasks.classifier import options as classifier_options
from bert_keras.prediction import row_io
from bert_keras.prediction import predictors
from bert_keras import tokenization

MODEL_FILES = ("model.tflite", "model.onnx")
CONFIG_FILE = "model_config.json"
QUANTIZATION_FILE = "quantization.json"
# The most rows of a sample a quantized export is measured on.
SAMPLE_ROWS = 256


def model_file(path):
  """The model.tflite / model.onnx of `path` (such a file, or a directory holding one), else
  None."""
  path = os.fspath(path)
  if path.endswith((".tflite", ".onnx")) and tf.io.gfile.exists(path) and not (
      tf.io.gfile.isdir(path)):
    return path
  if tf.io.gfile.isdir(path):
    for name in MODEL_FILES:
      if tf.io.gfile.exists(os.path.join(path, name)):
        return os.path.join(path, name)
  return None


def is_token_id_model(path):
  return bool(path) and model_file(path) is not None


class TFLiteRunner(object):
  """model.tflite's serving_default: runner(features) -> {output: np.ndarray}."""

  def __init__(self, path, threads=None):
    with warnings.catch_warnings():
      warnings.simplefilter("ignore")  # tf.lite.Interpreter's deprecation notice
      self._interpreter = tf.lite.Interpreter(path, num_threads=threads)
    self._runner = self._interpreter.get_signature_runner("serving_default")
    self.output_names = tuple(
        self._interpreter.get_signature_list()["serving_default"]["outputs"])

  def __call__(self, features):
    return dict(self._runner(**{k: np.asarray(features[k], np.int32)
                                for k in serving.FEATURES}))


class OnnxRunner(object):
  """model.onnx in ONNX Runtime (CPU): runner(features) -> {output: np.ndarray}. A model whose
  length axis is dynamic (export_saved_model's since it takes [B, S] of any S) runs each batch
  on its first L columns only, L = its longest row (the columns after it are padding in every
  row: attention never reads them, so the real positions' outputs are the same, as the
  SavedModel's trim_padding); per-position outputs come back padded to the batch's S with 0."""

  def __init__(self, path, threads=None):
    try:
      import onnxruntime
    except ImportError:
      raise ValueError(f"{path}: running an ONNX model needs onnxruntime: pip install "
                       "'bert-keras[onnx]'") from None
    session_options = onnxruntime.SessionOptions()
    if threads:
      session_options.intra_op_num_threads = threads
    # Threads that sleep between ops rather than spin: on a CPU shared with other work, the
    # spinning default ran all-MiniLM-L6-v2 2 to 3 times slower (batch 1 and 32, 2 cores).
    session_options.add_session_config_entry("session.intra_op.allow_spinning", "0")
    # Nor fusing each residual add and LayerNormalization into one SkipLayerNormalization
    # at session start: ONNX Runtime 1.32's CPU kernel of it is 3-5 times slower than the
    # two nodes (serving._ort_fusions).
    self._session = onnxruntime.InferenceSession(path, session_options,
                                                 providers=["CPUExecutionProvider"],
                                                 disabled_optimizers=["SkipLayerNormFusion"])
    self.output_names = tuple(o.name for o in self._session.get_outputs())
    inputs = self._session.get_inputs()
    self._inputs = [i.name for i in inputs]
    self.dynamic_length = all(not isinstance(i.shape[1], int) for i in inputs)

  def __call__(self, features):
    feeds = {name: np.asarray(features[name], np.int32) for name in self._inputs}
    width = feeds["input_mask"].shape[1]
    if self.dynamic_length and width:
      length = max(int(feeds["input_mask"].sum(1).max()), 1)
      feeds = {name: x[:, :length] for name, x in feeds.items()}
    outputs = dict(zip(self.output_names, self._session.run(None, feeds)))
    for name in serving.PER_POSITION:
      if name in outputs and outputs[name].shape[1] < width:
        x = outputs[name]
        outputs[name] = np.pad(x, [(0, 0), (0, width - x.shape[1])] + [(0, 0)] * (x.ndim - 2))
    return outputs


def runner(path, threads=None):
  """TFLiteRunner or OnnxRunner of a model file, by its extension. A file the runtime cannot
  read is a ValueError naming it (not the runtime's traceback)."""
  try:
    return (TFLiteRunner if path.endswith(".tflite") else OnnxRunner)(path, threads)
  except ValueError:
    raise
  except Exception as e:  # (TFLite's and ONNX Runtime's own errors of a damaged file)
    why = str(e).strip().splitlines()[0][:200] if str(e).strip() else type(e).__name__
    raise ValueError(f"--model_dir {path}: the runtime cannot read it ({why}): damaged? "
                     "export it again") from None


def file_record(path):
  """{"name", "bytes", "sha256"} of an exported model file: model_config.json's record, which
  check_file holds the file against before a runtime parses it."""
  digest, size = hashlib.sha256(), 0
  with tf.io.gfile.GFile(path, "rb") as f:
    for chunk in iter(lambda: f.read(1 << 20), b""):
      digest.update(chunk)
      size += len(chunk)
  return {"name": os.path.basename(path), "bytes": size, "sha256": digest.hexdigest()}


# The first bytes of a FlatBuffer TFLite model: a 4-byte root offset, then its identifier.
_TFLITE_IDENTIFIER = b"TFL3"


def check_file(path, config):
  """A ValueError naming `path` when the model file is damaged, before any runtime parses it
  (a truncated model.tflite crashes the TFLite interpreter): its size and SHA-256 against
  model_config.json's record (file_record), or, for an export without one, a TFLite file's
  identifier."""
  record = config.get("model_file")
  found = tf.io.gfile.stat(path).length
  if isinstance(record, dict) and record.get("name") == os.path.basename(path):
    if found != record.get("bytes") or file_record(path)["sha256"] != record.get("sha256"):
      raise ValueError(f"--model_dir {path}: damaged ({found:,} bytes; {CONFIG_FILE} records "
                       f"{record.get('bytes')} bytes and their SHA-256): export it again")
    return
  if path.endswith(".tflite"):
    with tf.io.gfile.GFile(path, "rb") as f:
      head = f.read(8)
    if len(head) < 8 or head[4:8] != _TFLITE_IDENTIFIER:
      raise ValueError(f"--model_dir {path}: not a TFLite model (damaged?): export it again")


def read_config(directory):
  """model_config.json of an export directory (a ValueError naming it when absent)."""
  path = os.path.join(directory, CONFIG_FILE)
  if not tf.io.gfile.exists(path):
    raise ValueError(f"--model_dir {directory}: no {CONFIG_FILE} beside the model "
                     "(export_saved_model.py --format=tflite / onnx writes one)")
  return model_files.read_json_object(path)


def kind_of(output_names):
  """The task_registry kind a token-id model's outputs serve (None: not export's)."""
  family = output_families.of_outputs(output_names, numeric=True)
  return task_registry.kinds(outputs=family.name, servable=True)[0] if family else None


class TokenIds(object):
  """Texts -> features: the export's tokenizer (its vocab.txt and do_lower_case), packed to
  its max_seq_length by preprocessing.pack_tokens (as BertPreprocessor packs: an empty text b
  gives a single-segment row), as numpy int32 [B, S] arrays. In Python, not a TensorFlow
  call: at batch 1 the graph's call cost 0.5 ms, a tenth of the int8 model's whole run."""

  def __init__(self, vocab_file, do_lower_case, max_seq_length):
    self.tokenizer = tokenization.FullTokenizer(vocab_file, do_lower_case)
    self.max_seq_length = int(max_seq_length)

  def __call__(self, texts_a, texts_b=None):
    texts_b = texts_b if texts_b is not None else [""] * len(texts_a)
    arrays = {k: np.zeros((len(texts_a), self.max_seq_length), np.int32)
              for k in serving.FEATURES}
    for row, (a, b) in enumerate(zip(texts_a, texts_b)):
      _, ids, mask, segments = preprocessing.pack_tokens(
          self.tokenizer.tokenize(a), self.tokenizer.tokenize(b) or None,
          self.max_seq_length, self.tokenizer)
      arrays["input_ids"][row], arrays["input_mask"][row] = ids, mask
      arrays["segment_ids"][row] = segments
    return arrays


def load(path, pooling=None, normalize=False, threshold=None, threads=None):
  """The predictors.GraphPredictor of a token-id model (a model.tflite / model.onnx file or
  its export directory): rows as the SavedModel of the same export gives them."""
  path = model_file(path)
  directory = os.path.dirname(path)
  config = read_config(directory)
  check_file(path, config)
  run = runner(path, threads)
  kind = kind_of(run.output_names)
  if kind is None:
    raise ValueError(f"--model_dir {path}: outputs {', '.join(run.output_names)} are not "
                     "export_saved_model.py's")
  if kind.family.answers:
    raise ValueError(f"--model_dir {path}: a squad TFLite / ONNX model gives logits only; "
                     "predict.py answers with its SavedModel or model directory")
  vocab_file = os.path.join(directory, model_files.VOCAB_FILE)
  tokens = TokenIds(vocab_file, bool(config.get("do_lower_case", True)),
                    int(config["max_seq_length"]))

  def fn(a, b):
    return {k: tf.constant(v) for k, v in run(tokens(_strings(a), _strings(b))).items()}

  preprocess = None
  if kind.family.pooled and (pooling is not None or normalize):
    preprocess = lambda a, b: {k: tf.constant(v) for k, v in  # noqa: E731
                               tokens(_strings(a), _strings(b)).items()}
  labels = config.get("labels") or model_files.read_labels(directory)
  logging.info("predict: %s model %s (max_seq_length %s, quantize %s)", kind.name, path,
               config.get("max_seq_length"), config.get("quantize", "none"))
  predictor = predictors.GraphPredictor(
      fn, kind.name, pooling=pooling or "mean", normalize=normalize, preprocess=preprocess,
      labels=labels if kind.labels else None, multi_label=kind.family.thresholds,
      thresholds=None if threshold is None else [threshold], pair=kind.pair)
  predictor.runner, predictor.token_ids = run, tokens
  predictor.max_seq_length = tokens.max_seq_length
  predictor.dtype = "int8" if config.get("quantize", "none") != "none" else "float32"
  return predictor


def _strings(tensor):
  return [x.decode("utf-8") for x in tensor.numpy()]


# ----------------------------------------------------------------------------------------------
# The measure of a quantized model against its float model.

def measure(outputs, want, got, input_mask=None):
  """How far the quantized outputs `got` stay from the float `want` (dicts of arrays of the
  outputs family `outputs`): its family's measure, {"measure": name, "agreement": value,
  ...more figures}."""
  return output_families.get(outputs).measure(want, got, input_mask)


def sample_texts(init_checkpoint, calibration_file=None, limit=SAMPLE_ROWS):
  """The sample a quantized export is measured on: (texts_a, texts_b or None, where) from the
  dev file the model directory's run_options.json names (data_dir's dev.tsv / dev.jsonl, or a
  dev_file / eval_file option), else --calibration_file (TSV / CSV with a header, JSON Lines),
  its first `limit` rows; a ValueError when there is neither. A run_classifier directory's
  dev examples are read by its task's processor (GLUE's columns, a custom task's)."""
  path, columns = None, (None, None)
  try:
    description = model_dir.read_model_dir(init_checkpoint)
  except (ValueError, tf.errors.OpError):
    description = None
  if description:
    options = description.get("options") or {}
    dev = _classifier_dev_examples(options, limit)
    if dev is not None:
      return dev
    columns = (options.get("text_a_column"), options.get("text_b_column"))
    candidates = [options.get(k) for k in ("dev_file", "eval_file")]
    if options.get("data_dir"):
      candidates += [os.path.join(options["data_dir"], n) for n in ("dev.tsv", "dev.jsonl")]
    path = next((c for c in candidates if c and tf.io.gfile.exists(c)), None)
  if path is None:
    path = calibration_file
  if not path:
    raise ValueError("a quantized export is measured against the float model on a sample: "
                     "give --calibration_file (texts as predict.py reads them), or export a "
                     "model directory whose run_options.json names its dev data")
  if not tf.io.gfile.exists(path):
    raise ValueError(f"--calibration_file {path}: no such file")
  return _read_texts(path, columns, limit) + (path,)


def _classifier_dev_examples(options, limit):
  """(texts_a, texts_b or None, where) of a run_classifier run's dev examples (its
  --task_name's processor on its --data_dir), None when the options name none that read."""
  if not (options.get("task_name") and options.get("data_dir")):
    return None
  task = classifier_options.Classification.from_flags(options)
  try:
    examples = classifier_data.get_processor(task).get_dev_examples(options["data_dir"])
  except (ValueError, OSError, KeyError, IndexError, tf.errors.OpError) as e:
    logging.info("quantized: the run's dev examples do not read (%s)", e)
    return None
  examples = examples[:limit]
  if not examples:
    return None
  texts_b = [e.text_b or "" for e in examples]
  return ([e.text_a for e in examples], texts_b if any(texts_b) else None,
          f"{options['task_name']} dev examples in {options['data_dir']}")


def _read_texts(path, columns, limit):
  """(texts_a, texts_b or None) of the first `limit` good rows of `path`."""
  reader = row_io.Reader(path, row_io.format_of(path))
  a_name, b_name = columns
  texts_a, texts_b = [], []
  for row in reader:
    if row.error is not None:
      continue
    fields = row.fields
    if a_name is None:
      a_name = next((n for n in predictors.TEXT_A_FIELDS if n in fields), None)
      if a_name is None:
        raise ValueError(f"{path}: no text field ({' or '.join(predictors.TEXT_A_FIELDS)}) "
                         f"among {list(fields)}")
      if b_name is None:
        b_name = next((n for n in predictors.TEXT_B_FIELDS if n in fields), "")
    if not isinstance(fields.get(a_name), str):
      continue
    texts_a.append(fields[a_name])
    texts_b.append(fields.get(b_name) or "" if b_name else "")
    if len(texts_a) == limit:
      break
  if not texts_a:
    raise ValueError(f"{path}: no rows with a text to measure the quantized model on")
  return texts_a, (texts_b if any(texts_b) else None)


def compare(float_fn, path, token_ids, texts_a, texts_b, batch_size=32):
  """measure() of the model file `path` against float_fn(input_ids, input_mask, segment_ids)
  (-> dict of tensors) on the texts, in batches (the kind of outputs told by the model's);
  with "examples" added."""
  quantized = runner(path)
  outputs = kind_of(quantized.output_names).outputs
  want, got, masks = {}, {}, []
  for start in range(0, len(texts_a), batch_size):
    features = token_ids(texts_a[start:start + batch_size],
                         texts_b[start:start + batch_size] if texts_b else None)
    masks.append(features["input_mask"])
    reference = float_fn(**{k: tf.constant(features[k], tf.int32) for k in serving.FEATURES})
    result = quantized(features)
    for name in result:
      want.setdefault(name, []).append(np.asarray(reference[name]))
      got.setdefault(name, []).append(result[name])
  want = {k: np.concatenate(v) for k, v in want.items()}
  got = {k: np.concatenate(v) for k, v in got.items()}
  figures = measure(outputs, want, got, np.concatenate(masks))
  figures["examples"] = len(texts_a)
  return figures


def gate(figures, directory, min_agreement, force, what):
  """Writes quantization.json (figures, with min_agreement) into `directory` and prints it;
  a ValueError with the figure when the agreement is below min_agreement, unless force
  (then "forced": true in the record)."""
  passed = bool(figures["agreement"] >= min_agreement)
  record = dict(figures, min_agreement=min_agreement, accepted=passed or bool(force),
                forced=not passed and bool(force))
  with tf.io.gfile.GFile(os.path.join(directory, QUANTIZATION_FILE), "w") as f:
    f.write(json.dumps(record, indent=2) + "\n")
  print(f"{what}: {figures['measure']} {figures['agreement']:.6f} against the float model on "
        f"{figures['examples']} rows ({QUANTIZATION_FILE})")
  if figures["agreement"] < min_agreement:
    if not force:
      raise ValueError(f"{what}: {figures['measure']} {figures['agreement']:.6f} against the "
                       f"float model on {figures['examples']} rows is below --min_agreement "
                       f"{min_agreement:g}; not exported (--force_quantized exports it anyway)")
    logging.warning("%s: %s %.6f is below --min_agreement %g; exported (--force_quantized)",
                    what, figures["measure"], figures["agreement"], min_agreement)
  return record


def onnx_int8(float_path, int8_path):
  """ONNX Runtime's dynamic quantization of the ONNX model `float_path` into `int8_path`:
  weights int8 (QInt8), one scale per output channel, activations quantized per batch at run
  time (MatMulInteger / DynamicQuantizeMatMul). (Per channel: all-MiniLM-L6-v2's mean cosine to
  its float model on MRPC sentences is 0.993; one scale per tensor gives 0.960.)"""
  try:
    from onnxruntime import quantization
  except ImportError:
    raise ValueError("--format=onnx --quantize=dynamic needs onnxruntime: pip install "
                     "'bert-keras[onnx]'") from None
  # (DefaultTensorType: ONNX's shape inference does not type the outputs of ONNX Runtime's
  # Gelu, which the float model has; they are float32.)
  quantization.quantize_dynamic(float_path, int8_path, per_channel=True,
                                weight_type=quantization.QuantType.QInt8,
                                extra_options={"DefaultTensorType": 1})  # onnx.TensorProto.FLOAT
