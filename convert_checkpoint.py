r"""Converts a BERT checkpoint between layouts: Google's TF1 layout and HuggingFace's.

  python convert_checkpoint.py --init_checkpoint=$BERT_BASE_DIR --output_dir=/tmp/bert_hf \
      --format=huggingface

--init_checkpoint is anything checkpoints.load_model reads: Google's TF1 checkpoint prefix
(with --bert_config_file and --vocab_file) or its unzipped directory, a directory this script
or checkpoints.save_pretrained wrote, a HuggingFace directory, a run_* --output_dir (its newest
model.ckpt-N) or its best/. The head travels with the model (--task, found from the
checkpoint's names by default): the MLM and NSP heads (BertForPreTraining), a classifier
(BertForSequenceClassification, with --labels as id2label), run_ner's tagger
(BertForTokenClassification, its labels.txt as id2label), SQuAD's span head
(BertForQuestionAnswering), or the encoder alone (BertModel). A --task whose head the
checkpoint lacks (--task=classifier from an encoder-only checkpoint) is refused: its head would
be written untrained; --allow_untrained_head writes it so on purpose.

--format=huggingface writes config.json, model.safetensors (float32), vocab.txt and
tokenizer_config.json, which transformers' from_pretrained reads; --format=tf1 writes
bert_config.json, bert_model.ckpt (the original's variable names) and vocab.txt, which the
original code reads. --format=sentence_transformers writes a bi-encoder (--task=embeddings;
--init_checkpoint a run_embeddings model directory, a sentence-transformers directory, or
any checkpoint with --pooling and --normalize) in sentence-transformers' layout: the
HuggingFace files above plus modules.json, config_sentence_transformers.json,
sentence_bert_config.json, 1_Pooling/config.json and, normalized, 2_Normalize/
(SentenceTransformer(dir) reads it). A cross-encoder (a one-output classifier: a regression or
a reranker) goes out as --format=huggingface: CrossEncoder(dir) reads it (num_labels 1, and
config.json's sentence_transformers.activation_fn the identity: its scores are our logits).
The activation keeps its function across the two: the original's "gelu"
(tanh form) is HuggingFace's "gelu_new", HuggingFace's "gelu" (erf) our "gelu_exact". The
directory is written under a temporary name and renamed when complete.
"""

try:  # outside the venv: a one-line hint, not a traceback
  from bert_keras.utils import quiet_tensorflow  # noqa: F401  (first, before TensorFlow)
except ImportError as e:
  raise SystemExit(f"error: {e} (activate .venv: source .venv/bin/activate, or pip install -e .)")
import os

from absl import app
from absl import flags
from absl import logging
import tensorflow as tf

from bert_keras import checkpoints
from bert_keras import huggingface_layout
from bert_keras import model_files
from bert_keras import modeling
from bert_keras import sentence_transformers_layout
from bert_keras import task_registry
from bert_keras.runtime import common_flags
from bert_keras.runtime import option_checks as checks
from bert_keras.runtime import outputs
from bert_keras.utils import errors

FORMATS = ("huggingface", "tf1", "sentence_transformers")
# auto: the head the checkpoint holds; else a kind of task_registry (not another's variant).
TASKS = ("auto",) + task_registry.names(variant_of=None)


def options(**overrides):
  """A namespace of all run() options: DEFAULTS updated with `overrides`."""
  return common_flags.make_options(DEFAULTS, overrides)


def define_flags(fv=flags.FLAGS):
  flags.DEFINE_string("init_checkpoint", None,
                      "The checkpoint to convert: a TF1 prefix, a checkpoint directory "
                      "(Google's, HuggingFace's, ours) or a run_* output directory.",
                      flag_values=fv)
  flags.DEFINE_string("output_dir", None, "The directory to write (replaced only when it holds "
                      "nothing but a previous conversion's files).", flag_values=fv)
  flags.DEFINE_enum("format", "huggingface", FORMATS, "The layout to write.", flag_values=fv)
  flags.DEFINE_enum("task", "auto", TASKS, "The head to convert with the encoder; auto: the "
                    "one the checkpoint holds.", flag_values=fv)
  flags.DEFINE_string("bert_config_file", None, "The config, when none lies beside the "
                      "checkpoint (bert_config.json or config.json).", flag_values=fv)
  flags.DEFINE_string("vocab_file", None, "The vocab, when no vocab.txt lies beside it.",
                      flag_values=fv)
  flags.DEFINE_bool("do_lower_case", None, "Written to tokenizer_config.json; default: the "
                    "source's tokenizer_config.json, else what the vocab suggests.", flag_values=fv)
  flags.DEFINE_string("labels", None, "A classifier's label names in order, comma-separated "
                      "(config.json's id2label), distinct and non-empty; default LABEL_0, "
                      "LABEL_1, ...", flag_values=fv)
  flags.DEFINE_bool("allow_untrained_head", False, "Write a --task whose head the checkpoint "
                    "lacks (e.g. --task=classifier from an encoder-only checkpoint) with that "
                    "head newly initialised, untrained; without it such a --task is an error.",
                    flag_values=fv)
  flags.DEFINE_enum("pooling", None, modeling.POOLINGS, "--format=sentence_transformers: the "
                    "Pooling module (mean, cls or max); default: the source's (a run_embeddings "
                    "task.json, a sentence-transformers directory).", flag_values=fv)
  flags.DEFINE_bool("normalize", None, "--format=sentence_transformers: add the Normalize "
                    "module (L2-normalised vectors); default: the source's, else false.",
                    flag_values=fv)
  flags.DEFINE_integer("max_seq_length", None, "--format=sentence_transformers: the "
                       "Transformer module's truncation length in word pieces; default: the "
                       "source's, else the model's max_position_embeddings.", flag_values=fv)
  flags.mark_flag_as_required("init_checkpoint", flag_values=fv)
  flags.mark_flag_as_required("output_dir", flag_values=fv)


# The options of run() (options(), model_dir.resolve_options): the flags' names and defaults,
# read from define_flags without parsing or touching absl's FLAGS.
DEFAULTS = common_flags.flag_defaults(define_flags)


def run(options):
  """Loads --init_checkpoint with its head and writes it in --format to --output_dir; returns
  {file name: bytes} of what was written. A user's mistake is a ValueError naming the flag."""
  checks.check(options, {checks.CHOICES: {"format": FORMATS, "task": TASKS},
                         checks.EXISTING_FILES: ("bert_config_file", "vocab_file")})
  outputs.check_output(options.output_dir, "--output_dir", options.init_checkpoint,
                           "--init_checkpoint")
  bi_encoder = _bi_encoder_options(options)
  try:
    task = (checkpoints.checkpoint_task(options.init_checkpoint) if options.task == "auto"
            else options.task)
  except checkpoints.CheckpointError as e:
    raise ValueError(f"--init_checkpoint {e}") from None
  if bi_encoder is not None:
    if not task_registry.get(task).family.headless:  # (an encoder's)
      raise ValueError(f"--format=sentence_transformers writes a bi-encoder (--task=embeddings)"
                       f"; --init_checkpoint holds a {task} model (a cross-encoder goes out "
                       "as --format=huggingface)")
    task = "embeddings"
    max_seq_length = bi_encoder.pop("max_seq_length")
  labels = _labels(options.labels)
  _check_head(options, task)
  if labels is not None and not task_registry.get(task).labels:
    raise ValueError(f"--labels is for a classifier or a tagger; --init_checkpoint holds a "
                     f"{task} model")
  if labels is not None:
    _check_label_count(options.init_checkpoint, labels)
  # One conversion at a time into --output_dir (a lock beside it), a killed one's temporary
  # (.<name>.tmp-<pid>) removed.
  with outputs.locked_output(options.output_dir, "--output_dir"):
    model = checkpoints.load_model(
        options.init_checkpoint, task, num_labels=len(labels) if labels else None,
        bert_config_file=options.bert_config_file, vocab_file=options.vocab_file,
        do_lower_case=options.do_lower_case, **(bi_encoder or {}))
    logging.info("Loaded a %s model from %s (%s)", task, options.init_checkpoint,
                 model.load_result)
    if bi_encoder is not None:
      huggingface_layout.save_sentence_transformers(
          model, options.output_dir, max_seq_length or model.config.max_position_embeddings)
    elif options.format == "huggingface":
      # (model_max_length: the length the model was trained at, where its task.json says)
      trained = (sentence_transformers_layout.read_model_files(options.init_checkpoint) or {}).get(
          "max_seq_length")
      huggingface_layout.save_huggingface(model, options.output_dir, label_names=labels,
                                          max_seq_length=trained)
    else:
      checkpoints.save_pretrained(model, options.output_dir)
  written = {name: tf.io.gfile.stat(os.path.join(options.output_dir, name)).length
             for name in sorted(tf.io.gfile.listdir(options.output_dir))}
  for name, size in written.items():
    logging.info("Wrote %s (%s bytes)", os.path.join(options.output_dir, name),
                 format(size, ","))
  return written


def _labels(text):
  """--labels as a list (None when not given); an empty or repeated name is a ValueError."""
  if text is None:
    return None
  labels = [x.strip() for x in text.split(",")]
  problem = model_files.names_problem(labels)
  if problem:
    raise ValueError(f"--labels={text}: {problem} (distinct non-empty names, comma-separated)")
  return labels


def _check_label_count(path, labels):
  """--labels of another number than the rows of the checkpoint's head: a ValueError naming
  both and the checkpoint's file (before a model is built)."""
  try:
    _, resolved = checkpoints.checkpoint_source(path)
    _, rows = checkpoints.checkpoint_head(checkpoints.checkpoint_shapes(path))
  except checkpoints.CheckpointError as e:
    raise ValueError(f"--init_checkpoint {e}") from None
  if rows is not None and rows != len(labels):
    raise ValueError(f"--labels names {len(labels)} labels, the checkpoint's head has {rows} "
                     f"({resolved})")


def _check_head(options, task):
  """A --task whose head (task_registry's checkpoint_head) --init_checkpoint does not hold would
  be written with that head untrained: a ValueError unless --allow_untrained_head."""
  wanted = task_registry.get(task).checkpoint_head
  if wanted is None or options.task == "auto" or options.allow_untrained_head:
    return
  try:
    held, _ = checkpoints.checkpoint_head(checkpoints.checkpoint_shapes(options.init_checkpoint))
  except checkpoints.CheckpointError as e:
    raise ValueError(f"--init_checkpoint {e}") from None
  if held != wanted:
    raise ValueError(
        f"--task={options.task}: --init_checkpoint {options.init_checkpoint} holds "
        f"{'no head (an encoder)' if held == 'encoder' else 'a ' + held + ' head'}, not a "
        f"{wanted} head: the {task} head would be written untrained (give "
        "--allow_untrained_head to write it so)")


def _bi_encoder_options(options):
  """--format=sentence_transformers: {"pooling", "normalize", "max_seq_length"} (load_model's
  pooling and normalize; the last None when neither the flag nor the source says), each the
  flag's, else what the source says (sentence_transformers_layout.read_model_files: a
  run_embeddings task.json, a sentence-transformers directory); a ValueError when the pooling
  is known from neither.
  None for the other formats (where these flags are a ValueError)."""
  given = [f"--{name}" for name in ("pooling", "normalize", "max_seq_length")
           if getattr(options, name) is not None]
  if options.format != "sentence_transformers":
    if given:
      raise ValueError(f"{', '.join(given)}: for --format=sentence_transformers only")
    return None
  checks.check(options, {checks.CHOICES: {"pooling": (None,) + modeling.POOLINGS},
                         checks.POSITIVE: ("max_seq_length",)})
  source = sentence_transformers_layout.read_model_files(options.init_checkpoint) or {}
  if source.get("task") not in (None, "embeddings"):
    source = {}  # (another task's directory says nothing about pooling)
  pooling = options.pooling or source.get("pooling")
  if pooling is None:
    raise ValueError(f"--pooling: --init_checkpoint {options.init_checkpoint} does not say how "
                     "its vectors are pooled (no run_embeddings task.json or sentence-"
                     "transformers modules): give --pooling (mean, cls or max) and --normalize")
  normalize = (options.normalize if options.normalize is not None
               else bool(source.get("normalize")))
  return {"pooling": pooling, "normalize": normalize,
          "max_seq_length": options.max_seq_length or source.get("max_seq_length")}


main = errors.script_main(run)

if __name__ == "__main__":
  define_flags()
  app.run(main, flags_parser=errors.parse_flags)
