"""A run's config, checked before any model is built: --bert_config_file read and validated,
matched against --init_checkpoint and the checkpoints of --output_dir, and the memory the
model needs against what the host has."""

import tensorflow as tf

from bert_keras import checkpoints
from bert_keras import model_files
from bert_keras import modeling
from bert_keras import tokenization
from bert_keras.runtime import outputs
from bert_keras.runtime import training
from bert_keras.runtime import training_checkpoints
from bert_keras.utils import memory


def load_bert_config(path):
  """--bert_config_file read and validated (modeling.BertConfig.from_json_file); every problem is
  a ValueError naming the flag and the file."""
  try:
    return modeling.BertConfig.from_json_file(path)
  except ValueError as e:
    raise ValueError(f"--bert_config_file {e}") from None


def load_and_check_config(model, output=None, do_train=False, use_tpu=False):
  """--bert_config_file read and validated (load_bert_config), then checked against what the
  run will load and the memory it needs, all before any model is built (a wrong config must not
  first allocate gigabytes): the sizes of --init_checkpoint and of the newest checkpoint in
  --output_dir (see checkpoints.check_config_matches), the --output_dir path (not below a
  regular file) and the float32 weights (plus gradients and two Adam slots with --do_train)
  against the memory available. Every problem is a ValueError naming the flags and files.
  model: a settings.ModelSource; output: the run's settings.OutputDir (None: it writes no
  model); do_train, use_tpu: as --do_train and --use_tpu say."""
  output_dir = output.output_dir if output else None
  if output_dir:
    outputs.check_output_dir(output_dir)
  config = load_bert_config(model.bert_config_file)
  sources = [("--init_checkpoint", model.init_checkpoint)]
  if output_dir and not output.move_aside:  # (--overwrite_output_dir)
    sources.append(("--output_dir", training_checkpoints.latest_checkpoint(output_dir,
                                                                           warn=False)))
  for flag, path in sources:
    if not path:
      continue
    if flag == "--init_checkpoint":
      try:
        training_checkpoints.init_checkpoint_prefix(path)
      except ValueError as e:
        raise ValueError(f"--init_checkpoint {e}") from None
    try:
      shapes = checkpoints.checkpoint_shapes(path)
    except (ValueError, tf.errors.OpError):
      continue  # not a checkpoint: reported where the script loads it, in its own words
    try:
      checkpoints.check_config_matches(config, shapes)
    except ValueError as e:
      raise ValueError(f"--bert_config_file {model.bert_config_file} does not fit {flag} "
                       f"{path}: {e}") from None
  check_memory(config, model, do_train, use_tpu)
  return config


def _uses_accelerator(use_tpu):
  if use_tpu:
    return True
  try:
    return bool(tf.config.list_physical_devices("GPU"))
  except Exception:
    return False


def check_memory(config, model, do_train=False, use_tpu=False):
  """A ValueError when the model's float32 weights (times 4 with --do_train: gradients and the
  optimizer's two slots) exceed the host memory available now, on a CPU-only run (on a GPU
  or TPU an out-of-memory error of the device is reported by script_main in one line).
  Activations are not counted: this finds only the runs that cannot possibly fit."""
  training = bool(do_train)
  need = config.num_parameters() * 4 * (4 if training else 1)
  available = memory.available_bytes()
  if need <= available or _uses_accelerator(use_tpu):
    return
  raise ValueError(
      f"--bert_config_file {model.bert_config_file}: a model of {config.num_parameters():.3g} "
      f"parameters needs {need / 1e9:.3g} GB for its float32 weights"
      f"{', gradients and optimizer slots' if training else ''}, more than the "
      f"{available / 1e9:.3g} GB of memory available")


def check_vocab_fits(config, vocab, model):
  """A ValueError naming --vocab_file and --bert_config_file when the vocabulary (a token ->
  id mapping, or its number of ids) has ids the model's embedding table lacks (vocab_size):
  on a CPU a traceback after the model is built, on a GPU tf.gather reads zeros silently.
  Called before any model is built. (model_files.check_vocab_fits, in the flags' words.)"""
  model_files.check_vocab_fits(config, vocab, f"--vocab_file {model.vocab_file}",
                               f"--bert_config_file {model.bert_config_file}")


def check_segments(config, model, pairs):
  """A ValueError naming --bert_config_file when the run's inputs are text pairs (their second
  text has segment id 1; `pairs` says whose, e.g. "the train examples of --task_name=MRPC")
  and the config's token type table has one row (type_vocab_size=1): on a CPU a GatherV2
  traceback in the first step, on a GPU zeros read silently. Called before any model is
  built."""
  if config.type_vocab_size < 2:
    raise ValueError(f"--bert_config_file {model.bert_config_file} has type_vocab_size="
                     f"{config.type_vocab_size}: {pairs} are text pairs (segment id 1), which "
                     "need type_vocab_size >= 2")


def check_max_seq_length(config, model):
  """The original's check: --max_seq_length at most the config's max_position_embeddings (its
  message, then the flag and the config file named)."""
  if model.max_seq_length > config.max_position_embeddings:
    raise ValueError(
        "Cannot use sequence length %d because the BERT model was only trained up to "
        "sequence length %d (--max_seq_length=%d; max_position_embeddings of %s)"
        % (model.max_seq_length, config.max_position_embeddings, model.max_seq_length,
           model.bert_config_file or "the model's config"))


def run_config(run):
  """A training script's config (load_and_check_config) from its settings.RunSettings, its
  training numbers checked first (training.check_training_numbers)."""
  training.check_training_numbers(run.training)
  return load_and_check_config(run.model, run.output, run.training.do_train,
                               run.placement.use_tpu)


def config_and_tokenizer(run):
  """What a fine-tuning script checks before reading its data: the config
  (load_and_check_config, check_max_seq_length) and the vocab (a FullTokenizer of
  --vocab_file with --do_lower_case, its special tokens, its size against the config).
  run: a settings.RunSettings. Returns (modeling.BertConfig, tokenization.FullTokenizer)."""
  model = run.model
  config = run_config(run)
  check_max_seq_length(config, model)
  tokenizer = tokenization.FullTokenizer(vocab_file=model.vocab_file,
                                         do_lower_case=model.do_lower_case)
  tokenization.check_vocab(tokenizer.vocab, model.vocab_file,
                           required=("[UNK]", "[CLS]", "[SEP]"))
  check_vocab_fits(config, tokenizer.vocab, model)
  return config, tokenizer
