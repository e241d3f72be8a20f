r"""A fine-tuned (or pre-trained) BERT as a TensorFlow SavedModel that takes raw text.

  python export_saved_model.py --task=classifier --task_name=MRPC \
    --bert_config_file=$BERT_BASE_DIR/bert_config.json --vocab_file=$BERT_BASE_DIR/vocab.txt \
    --init_checkpoint=/tmp/mrpc_output/ --max_seq_length=128 --export_dir=/tmp/mrpc_saved_model

--init_checkpoint: Google's TF1 checkpoint, a run_classifier / run_squad --output_dir (its
newest model.ckpt-N) or a HuggingFace directory (training_checkpoints.warm_start). A run_*
output_dir (or its best/) is a model directory: --init_checkpoint and --export_dir are then
all it takes (the task, config, vocabulary, casing, max_seq_length and label names are its).
The SavedModel (serving.py) has two signatures, both taking text_a and text_b (tf.string [B];
an empty text_b: a single segment): `preprocess` (input_ids, input_mask, segment_ids) and
`serving_default` (classifier: probabilities, logits, label (the argmax's name, tf.string
[B]) and label_names [B, N] (the names from --labels or labels.txt, else "0", "1", ...;
--format=tflite/onnx stay numeric); embeddings: embeddings [B, H] pooled
as --pooling says and --normalize, pooled_output, sequence_output; squad, text_a = question
and text_b = context: start_logits, end_logits and the best span's start_index, end_index and
answer text). --task=tagger (a run_ner model; its tags from --labels or the labels.txt beside
--init_checkpoint; --format=saved_model only) has one signature, serving_default, taking
text_a only: words, starts, ends, tags, scores and the entities (prediction/tagger.py). It
loads with tf.saved_model.load
in a process that imports only TensorFlow. Written to a temporary sibling directory and
renamed when complete, holding a lock beside --export_dir (runtime/outputs.locked_output): a
second export into the same directory is refused, and temporaries of killed exports removed.
"""

try:  # outside the venv: a one-line hint, not a traceback
  from bert_keras.utils import quiet_tensorflow  # noqa: F401  (first, before TensorFlow)
except ImportError as e:
  raise SystemExit(f"error: {e} (activate .venv: source .venv/bin/activate, or pip install -e .)")
import json
import os

from absl import app
from absl import flags
from absl import logging
import numpy as np
import tensorflow as tf

from bert_keras import checkpoints
from bert_keras import huggingface_layout
from bert_keras import modeling
from bert_keras import preprocessing
from bert_keras import serving
from bert_keras import task_registry
from bert_keras.runtime import common_flags
from bert_keras.runtime import model_dir
from bert_keras.runtime import option_checks as checks
from bert_keras.runtime import outputs
from bert_keras.runtime import run_checks
from bert_keras.runtime import settings
from bert_keras.runtime import training_checkpoints
from bert_keras.tasks.classifier import multi_label as multi_label_lib
from bert_keras.tasks.ner import tagging as ner
from bert_keras.prediction import tagger
from bert_keras.prediction import tflite_onnx
from bert_keras.utils import errors

# run_classifier's GLUE tasks -> their number of labels (len(processor.get_labels()); STS-B
# is a regression: one output).
NUM_LABELS = {"cola": 2, "mnli": 3, "mrpc": 2, "xnli": 3, "sst-2": 2, "sst2": 2, "qqp": 2,
              "qnli": 2, "rte": 2, "wnli": 2, "sts-b": 1, "stsb": 1}

FORMATS = ("saved_model", "tflite", "onnx")
# The --task values: the servable kinds of task_registry that are not another's variant.
TASKS = task_registry.names(servable=True, variant_of=None)


def options(**overrides):
  """A namespace of all run() options: DEFAULTS updated with `overrides`."""
  return common_flags.make_options(DEFAULTS, overrides)


def define_flags(fv=flags.FLAGS):
  common_flags.define_model_flags(max_seq_length=128, output_dir=False, fv=fv)
  flags.DEFINE_enum("task", "classifier", TASKS,
                    "classifier (run_classifier's model), squad (run_squad's), tagger "
                    "(run_ner's) or embeddings (the encoder alone).", flag_values=fv)
  flags.DEFINE_integer("num_labels", None, "--task=classifier: the number of labels "
                       "(1: a regression such as STS-B).", flag_values=fv)
  flags.DEFINE_string("task_name", None, "--task=classifier: a GLUE task name of "
                      "run_classifier (gives --num_labels): " + ", ".join(sorted(NUM_LABELS)),
                      flag_values=fv)
  flags.DEFINE_integer("max_answer_length", 30,
                       "--task=squad: the longest answer span, in word pieces.", flag_values=fv)
  flags.DEFINE_enum("pooling", "mean", modeling.POOLINGS,
                    "--task=embeddings: how the `embeddings` output pools the tokens' vectors: "
                    "mean or max over the real tokens, or the [CLS] position's (cls).",
                    flag_values=fv)
  flags.DEFINE_bool("normalize", False, "--task=embeddings: divide each embedding by its L2 "
                    "norm (with --pooling=mean: what sentence-transformers' all-MiniLM-L6-v2 "
                    "returns).", flag_values=fv)
  flags.DEFINE_enum("format", "saved_model", FORMATS,
                    "saved_model: raw text in (the two signatures); tflite: model.tflite with "
                    "token ids in (input_ids, input_mask, segment_ids int32 [B, "
                    "max_seq_length]), with vocab.txt, tokenizer.json, labels.txt and "
                    "model_config.json; onnx: model.onnx (tf2onnx, the [onnx] extra), the same "
                    "inputs and files.",
                    flag_values=fv)
  flags.DEFINE_enum("quantize", "none", serving.QUANTIZATIONS,
                    "--format=tflite: none (float32), dynamic (int8 weights) or float16; "
                    "--format=onnx: none or dynamic (ONNX Runtime's int8 weights). A quantized "
                    "export is measured against the float model (quantization.json) and "
                    "refused below --min_agreement.", flag_values=fv)
  define_quantization_flags(fv)
  flags.DEFINE_string("labels", None, "--task=classifier: the label names in order, "
                      "comma-separated (labels.txt of --format=tflite). --task=tagger: its "
                      "tags in order (default: labels.txt beside --init_checkpoint).",
                      flag_values=fv)
  flags.DEFINE_bool("multi_label", False,
                    "--task=classifier: a run_classifier --multi_label model: sigmoid "
                    "probabilities, and the labels reaching their thresholds (thresholds.json "
                    "beside --init_checkpoint, else --threshold).", flag_values=fv)
  flags.DEFINE_float("threshold", None, "--multi_label: one threshold for every label "
                     "(default: the tuned ones of thresholds.json, else 0.5).", flag_values=fv)
  flags.DEFINE_string("export_dir", None, "The SavedModel directory to write (it must not "
                      "exist, or be empty).", flag_values=fv)
  flags.DEFINE_bool("overwrite", False, "Replace an existing non-empty --export_dir.",
                    flag_values=fv)
  flags.DEFINE_bool(
      "tensorflow_text_ops", False,
      "Tokenize with tensorflow-text's WordPiece op (faster; the loading process must `import "
      "tensorflow_text` first, and a TensorFlow Serving build must include its ops). Off: "
      "TensorFlow's own ops only, loadable anywhere TensorFlow is; the same outputs.",
      flag_values=fv)
  for name in ("init_checkpoint", "export_dir"):  # (the others: also from a model directory)
    flags.mark_flag_as_required(name, flag_values=fv)
  flags.adopt_module_key_flags(common_flags, flag_values=fv)


def define_quantization_flags(fv):
  """The flags of the quantized exports' measure (prediction/tflite_onnx.py)."""
  flags.DEFINE_string("calibration_file", None, "--quantize: the texts (TSV / CSV with a "
                      "header, JSON Lines; the fields as predict.py reads them) whose first "
                      f"{tflite_onnx.SAMPLE_ROWS} rows the quantized model is measured on against "
                      "the float one (default: the dev data the model directory's "
                      "run_options.json names).", flag_values=fv)
  flags.DEFINE_float("min_agreement", 0.99, "--quantize: the least agreement with the float "
                     "model (label agreement, mean cosine, min(Pearson, Spearman)) exported.",
                     flag_values=fv)
  flags.DEFINE_bool("force_quantized", False, "--quantize: export below --min_agreement too.",
                    flag_values=fv)


# The options of run() (options(), model_dir.resolve_options): the flags' names and defaults,
# read from define_flags without parsing or touching absl's FLAGS.
DEFAULTS = common_flags.flag_defaults(define_flags)


def num_labels(options):
  """--num_labels / --task_name / --labels -> the classifier's number of labels (ValueError
  naming the flag when none, two disagreeing, or an unknown task name)."""
  if options.labels:
    count = len(options.labels.split(","))
    if options.num_labels is not None and options.num_labels != count:
      raise ValueError(f"--labels names {count} labels, --num_labels says {options.num_labels}")
    if options.num_labels is None and options.task_name is None:
      return count
  from_name = None
  if options.task_name is not None:
    from_name = NUM_LABELS.get(options.task_name.lower())
    if from_name is None:
      raise ValueError(f"--task_name {options.task_name}: not a known task ("
                       f"{', '.join(sorted(NUM_LABELS))}); give --num_labels instead")
  if options.num_labels is not None:
    checks.check(options, {checks.POSITIVE: ("num_labels",)})
    if from_name is not None and from_name != options.num_labels:
      raise ValueError(f"--num_labels {options.num_labels} disagrees with --task_name "
                       f"{options.task_name} ({from_name} labels)")
    return options.num_labels
  if from_name is None:
    raise ValueError("--task=classifier needs --num_labels or --task_name")
  return from_name


def _check_options(options, config):
  """Every flag problem as a one-line ValueError, before anything is built."""
  if options.max_seq_length > config.max_position_embeddings:
    raise ValueError(f"--max_seq_length {options.max_seq_length} is longer than the model's "
                     f"max_position_embeddings {config.max_position_embeddings}")
  family = task_registry.get(options.task).family
  checks.check(options, {checks.AT_LEAST: {"max_seq_length": (3, "[CLS] a piece [SEP]")},
                         checks.POSITIVE: ("max_answer_length",) if family.answers else ()})
  checks.check(options, {checks.CHOICES: {"pooling": modeling.POOLINGS}})
  if not family.pooled and (options.pooling != "mean" or options.normalize):
    raise ValueError(f"--pooling / --normalize are for --task=embeddings, not "
                     f"--task={options.task}")
  checks.check(options, {checks.CHOICES: {"format": FORMATS, "quantize": serving.QUANTIZATIONS}})
  checks.check(options, {checks.PROPORTION: ("min_agreement",)})  # (before a long export)
  if options.quantize != "none" and options.format == "saved_model":
    raise ValueError("--quantize is for --format=tflite or onnx")
  if options.format == "onnx" and options.quantize not in ("none", "dynamic"):
    raise ValueError(f"--quantize={options.quantize}: --format=onnx has none or dynamic")
  if not family.numeric and options.format != "saved_model":
    raise ValueError(f"--format={options.format}: --task={options.task} exports a SavedModel "
                     "only")
  if not _has_variants(options.task) and (options.num_labels or options.task_name):
    raise ValueError(f"--num_labels / --task_name are for --task=classifier, not "
                     f"--task={options.task}")
  checkpoint = options.init_checkpoint
  if not (tf.io.gfile.exists(checkpoint) or tf.io.gfile.exists(checkpoint + ".index")):
    raise ValueError(f"--init_checkpoint {checkpoint}: no such file, directory or checkpoint "
                     "prefix")
  checks.check(options, {checks.EXISTING_FILES: ("vocab_file",)})
  outputs.check_output_dir(options.export_dir, "--export_dir")
  try:
    serving.check_export_dir(options.export_dir, options.overwrite)
  except tf.errors.OpError as e:  # an unknown scheme, an unreachable bucket
    raise ValueError(f"--export_dir {options.export_dir}: "
                     f"{' '.join(str(e.message).split())[:300]}") from None


def tagger_labels(options):
  """--task=tagger's tags: --labels, else labels.txt in --init_checkpoint (a run_ner
  output_dir) or beside it; a ValueError naming the flags without either."""
  if options.labels:
    return ner.parse_labels(options.labels)
  path = options.init_checkpoint.rstrip("/")
  directory = path if tf.io.gfile.isdir(path) else os.path.dirname(path)
  labels = checkpoints.read_labels(directory)
  if labels is None:
    raise ValueError(f"--task=tagger needs --labels, or a {checkpoints.LABELS_FILE} in "
                     f"{directory} (run_ner writes one into its output_dir)")
  return labels


def multi_label_head(options):
  """--multi_label: (label names, thresholds float32 [N], separator). Names: --labels, else
  thresholds.json's or labels.txt beside --init_checkpoint; thresholds: --threshold for
  every label, else thresholds.json's, else 0.5. A ValueError naming the flags when no names
  are found."""
  path = options.init_checkpoint.rstrip("/")
  directory = path if tf.io.gfile.isdir(path) else os.path.dirname(path)
  record = multi_label_lib.read_record(directory) or {}
  names = ([x.strip() for x in options.labels.split(",")] if options.labels else
           record.get("labels") or checkpoints.read_labels(directory))
  if not names:
    raise ValueError("--multi_label needs --labels, or a thresholds.json (run_classifier "
                     f"--multi_label) or labels.txt in {directory}")
  if options.threshold is not None:
    checks.check(options, {checks.FRACTION: ("threshold",)})
    thresholds = [options.threshold] * len(names)
  elif record and list(record["labels"]) == list(names):
    thresholds = record["thresholds"]
  else:
    thresholds = [0.5] * len(names)
  where = os.path.join(directory, multi_label_lib.THRESHOLDS_FILE)
  bad = next((t for t in thresholds if isinstance(t, bool)
              or not isinstance(t, (int, float)) or not 0 <= t <= 1), None)
  if bad is not None or len(thresholds) != len(names):
    raise ValueError(f"{where}: \"thresholds\" must be {len(names)} numbers in [0, 1] (one a "
                     f"label), not {errors.error_line(json.dumps(bad), 60)}" if bad is not None
                     else f"{where}: {len(thresholds)} \"thresholds\" for {len(names)} labels")
  separator = record.get("label_separator", ",")
  if not isinstance(separator, str):
    raise ValueError(f"{where}: \"label_separator\" must be a string, not "
                     f"{errors.error_line(json.dumps(separator), 60)}")
  logging.info("Multi-label: %s", ", ".join(f"{n} >= {t:.6g}" for n, t in zip(names,
                                                                              thresholds)))
  return names, np.asarray(thresholds, np.float32), separator


def _has_variants(task):
  """Whether the kind `task` has variants made by flags (a classifier's --multi_label, its
  one-output regression): the flags that make them are its."""
  return bool(task_registry.kinds(variant_of=task))


def build_model(task, config, labels=None):
  """The Keras model of the kind `task` (task_registry): BertClassifier or
  BertTokenClassifier (`labels` outputs), BertSquad; embeddings are pooled from a BertModel's
  outputs by the SavedModel, so their model is the encoder's."""
  kind = task_registry.get(task)
  if kind.family.pooled:
    kind = task_registry.get("encoder")
  return kind.build(config, labels if kind.labels else None)  # (a fixed count: its own)


def _head(model):
  """The task head layer of `model` (None for the bare encoder)."""
  return getattr(model, "classifier", None) or getattr(model, "squad", None)


def model_dir_task(description):
  """The --task that exports a model directory (its task.json's kind, served as
  task_registry.served says, a variant as the kind it is a variant of)."""
  kind = task_registry.served(task_registry.get(description["task"]))
  return kind.variant_of or kind.name


def resolve_options(options):
  """The options completed from --init_checkpoint when it is a model directory (a run_*
  output_dir or its best/: runtime/model_dir.py): --bert_config_file, --vocab_file,
  --do_lower_case, --max_seq_length, --task, --labels (or --num_labels 1 for a regression),
  --max_answer_length, and an embeddings model's --pooling and --normalize (a run_embeddings
  task.json's, a sentence-transformers directory's modules), each where not given; given
  and in conflict with the directory (--multi_label too), a one-line ValueError naming the
  flag and the directory."""
  options, model = model_dir.resolve_options(
      options, DEFAULTS, fill=("max_answer_length", "pooling", "normalize"))
  if model is None:
    return options
  given = model["given"]
  if "task" not in given:
    options.task = model_dir_task(model)
  kind = task_registry.of_description(model)
  if not (task_registry.get(options.task).takes_num_labels and kind.takes_num_labels):
    return options  # (the checks below are of the label flags)
  labels = model.get("labels")
  values = {"num_labels": options.num_labels} if "num_labels" in given else {}
  if "labels" in given and options.labels:
    values["labels"] = [x.strip() for x in options.labels.split(",")]
  if kind.num_labels is not None and options.num_labels not in (None, kind.num_labels):
    raise model_dir.conflict_error("num_labels", options.num_labels, model,
                                   f"the model is a {kind.name} ({kind.num_labels} output(s))")
  model_dir.raise_conflicts(values, model)
  count = len(labels) if labels else 1
  if options.task_name and NUM_LABELS.get(options.task_name.lower(), count) != count:
    raise model_dir.conflict_error("task_name", options.task_name, model,
                                   f"the model has {count} output(s)")
  if _has_variants(options.task) and hasattr(options, "multi_label"):
    # (a run_classifier --multi_label directory's sigmoid head, else its softmax)
    model_dir.pin_options(options, model, DEFAULTS, ("multi_label",))
  if _has_variants(options.task) and not options.labels:
    if labels:
      options.labels = ",".join(labels)
    elif not (options.num_labels or options.task_name):
      options.num_labels = 1
  return options


def run(options):
  """Checks the options, builds the model, loads --init_checkpoint, writes the SavedModel.
  With a model directory as --init_checkpoint, --export_dir is the only other flag needed
  (resolve_options)."""
  options = resolve_options(options)
  checks.check(options, {checks.REQUIRED: dict(
      bert_config_file=checks.MODEL_DIR_CHECKPOINT, vocab_file=checks.MODEL_DIR_CHECKPOINT,
      init_checkpoint=None, export_dir=None)})
  if options.task not in TASKS:
    raise ValueError(f"--task {options.task}: not one of {', '.join(TASKS)}")
  outputs.check_output(options.export_dir, "--export_dir", options.init_checkpoint,
                           "--init_checkpoint")
  model_source = settings.ModelSource.from_flags(options)
  config = run_checks.load_and_check_config(model_source)
  if (options.multi_label or options.threshold is not None) and not _has_variants(options.task):
    raise ValueError(f"--multi_label / --threshold are for --task=classifier, not "
                     f"--task={options.task}")
  head = multi_label_head(options) if options.multi_label else None
  if head and not (options.labels or options.num_labels or options.task_name):
    labels = len(head[0])
  else:
    labels = num_labels(options) if _has_variants(options.task) else None
  if head and labels != len(head[0]):
    raise ValueError(f"--multi_label: {len(head[0])} labels ({', '.join(head[0])}), the "
                     f"flags say {labels}")
  _check_options(options, config)
  tags = tagger_labels(options) if task_registry.get(options.task).family.tagged else None
  preprocessor = preprocessing.BertPreprocessor(
      options.vocab_file, options.do_lower_case, options.max_seq_length,
      core_ops_only=not options.tensorflow_text_ops)
  run_checks.check_vocab_fits(config, len(preprocessor.vocabulary), model_source)
  with outputs.locked_output(options.export_dir, "--export_dir"):  # one export at a time
    serving.check_export_dir(options.export_dir, options.overwrite)  # (again, holding it)
    _export(options, config, labels, tags, preprocessor, head)


def _export(options, config, labels, tags, preprocessor, multi_label=None):
  """run() after the checks, holding --export_dir. multi_label: multi_label_head's, or
  None."""
  model = build_model(options.task, config, len(tags) if tags else labels)
  head = _head(model)
  initial = [w.numpy() for w in head.weights] if head is not None else []
  training_checkpoints.warm_start(model, options.init_checkpoint)
  if head is not None and all(np.array_equal(a, w.numpy())
                              for a, w in zip(initial, head.weights)):
    logging.warning("--init_checkpoint %s has no %s head: the exported head is randomly "
                    "initialised", options.init_checkpoint, options.task)
  if options.format == "saved_model":  # (its outputs are 0 at the padding anyway)
    getattr(model, "bert", model).skip_padding = True
  if task_registry.get(options.task).family.tagged:
    module = tagger.TaggerModule(model, preprocessor, tags)
    serving.save_atomic(module, options.export_dir, options.overwrite)
    logging.info("Wrote the SavedModel %s (task tagger, signature serving_default)",
                 options.export_dir)
    return
  names = None
  if _has_variants(options.task) and labels > 1:
    names = [x.strip() for x in options.labels.split(",")] if options.labels else None
    if names is None:
      logging.info("No label names (--labels, or a model directory's labels.txt): the "
                   "SavedModel's label outputs are the output numbers 0..%d", labels - 1)
  module = serving.ServingModule(model, preprocessor, options.task, options.max_answer_length,
                                 regression=labels == 1 and multi_label is None,
                                 pooling=options.pooling, normalize=options.normalize,
                                 multi_label=multi_label, labels=names)
  if options.format != "saved_model":
    serving.save_atomic(module, options.export_dir, options.overwrite,
                        write=lambda directory: write_token_id_model(module, options, labels,
                                                                     directory))
    logging.info("Wrote %s (task %s, %s weights)", os.path.join(
        options.export_dir, "model." + options.format), options.task, options.quantize)
    return
  serving.save_atomic(module, options.export_dir, options.overwrite)
  logging.info("Wrote the SavedModel %s (task %s, signatures %s)", options.export_dir,
               options.task, ", ".join(serving.SIGNATURES))


def write_token_id_model(module, options, num_labels, directory):
  """--format=tflite's or onnx's files in `directory`: model.tflite (serving.tflite_model) or
  model.onnx (serving.onnx_model), vocab.txt, tokenizer.json (huggingface_layout.tokenizer_json:
  the same tokenizer for HuggingFace's `tokenizers`), labels.txt (a classifier's label names,
  one a line) and model_config.json (task, inputs, max_seq_length, do_lower_case, labels,
  quantize; for TFLite also outputs, and input_tensors and output_tensors: the inputs and
  outputs in the interpreter's order (get_input_details / get_output_details) with their
  tensor names, so that an app without the signature runner knows which is which), what an
  app needs to tokenize and read."""
  if options.format == "tflite":
    data = serving.tflite_model(module, options.max_seq_length, options.quantize)
  else:
    data = serving.onnx_model(module, options.max_seq_length)
  path = os.path.join(directory, "model." + options.format)
  float_path = path + ".float" if options.format == "onnx" and options.quantize != "none" else path
  with tf.io.gfile.GFile(float_path, "wb") as f:
    f.write(data)
  if float_path != path:
    tflite_onnx.onnx_int8(float_path, path)
    tf.io.gfile.remove(float_path)
  tf.io.gfile.copy(options.vocab_file, os.path.join(directory, "vocab.txt"))
  # The same tokenizer for HuggingFace's `tokenizers` (ONNX Runtime servers, transformers.js).
  huggingface_layout.write_tokenizer_json(directory, options.vocab_file, options.do_lower_case,
                                          options.max_seq_length)
  names = None
  if _has_variants(options.task) and num_labels > 1:
    names = ([x.strip() for x in options.labels.split(",")] if options.labels
             else [str(i) for i in range(num_labels)])
    with tf.io.gfile.GFile(os.path.join(directory, "labels.txt"), "w") as f:
      f.write("".join(name + "\n" for name in names))
  config = {"task": options.task, "inputs": list(serving.FEATURES),
            "max_seq_length": options.max_seq_length,
            "do_lower_case": bool(options.do_lower_case), "labels": names,
            "quantize": options.quantize}
  if options.format == "tflite":
    config.update(tflite_tensors(data))
  # (what a reader checks the model file against before a runtime parses it: a damaged file)
  config["model_file"] = tflite_onnx.file_record(path)
  with tf.io.gfile.GFile(os.path.join(directory, "model_config.json"), "w") as f:
    f.write(json.dumps(config, indent=2) + "\n")
  if options.quantize != "none":
    measure_quantized(module, options, path, directory)


def measure_quantized(module, options, path, directory):
  """The quantized model `path` against the float model (module.serve_token_ids) on the
  sample (prediction/tflite_onnx.sample_texts): quantization.json in `directory`; a ValueError below
  --min_agreement unless --force_quantized (the export is then not written)."""
  texts_a, texts_b, source = tflite_onnx.sample_texts(options.init_checkpoint,
                                                      options.calibration_file)
  token_ids = tflite_onnx.TokenIds(options.vocab_file, options.do_lower_case,
                                   options.max_seq_length)
  figures = tflite_onnx.compare(module.serve_token_ids, path, token_ids, texts_a, texts_b)
  figures.update(format=options.format, quantize=options.quantize, sample=source)
  tflite_onnx.gate(figures, directory, options.min_agreement, options.force_quantized,
                   f"--format={options.format} --quantize={options.quantize}")


def tflite_tensors(data):
  """The TFLite flatbuffer `data`'s serving_default inputs and outputs in the interpreter's
  order: {"inputs": [signature names], "outputs": [...], "input_tensors": [{"name", "tensor",
  "index"}], "output_tensors": [...]} (tensor: the interpreter's tensor name)."""
  interpreter = tf.lite.Interpreter(model_content=data)
  runner = interpreter.get_signature_runner("serving_default")
  result = {}
  for side, signature, details in (
      ("input", runner.get_input_details(), interpreter.get_input_details()),
      ("output", runner.get_output_details(), interpreter.get_output_details())):
    by_index = {d["index"]: name for name, d in signature.items()}
    result[side + "s"] = [by_index[d["index"]] for d in details]
    result[side + "_tensors"] = [{"name": by_index[d["index"]], "tensor": d["name"],
                                  "index": int(d["index"])} for d in details]
  return result


main = errors.script_main(run)


if __name__ == "__main__":
  define_flags()
  app.run(main, flags_parser=errors.parse_flags)
