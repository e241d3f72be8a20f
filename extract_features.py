r"""Per-token activations of BERT's encoder layers, as JSON Lines (the original
extract_features.py).

  python extract_features.py --input_file=/tmp/input.txt --output_file=/tmp/output.jsonl \
    --vocab_file=$BERT_BASE_DIR/vocab.txt --bert_config_file=$BERT_BASE_DIR/bert_config.json \
    --init_checkpoint=$BERT_BASE_DIR/bert_model.ckpt --layers=-1,-2,-3,-4 \
    --max_seq_length=128 --batch_size=8

Same flags, input lines ("text a ||| text b") and output lines as the original; its
TPUEstimator is replaced by one tf.function per batch under a tf.distribute strategy
(training.py). The output is written to .<output_file>.tmp-<pid> and renamed when complete.
"""

try:  # outside the venv: a one-line hint, not a traceback
  from bert_keras.utils import quiet_tensorflow  # noqa: F401  (first, before TensorFlow)
except ImportError as e:
  raise SystemExit(f"error: {e} (activate .venv: source .venv/bin/activate, or pip install -e .)")
import json
import os
import time

from absl import app
from absl import flags
from absl import logging
import numpy as np
import tensorflow as tf

from bert_keras import checkpoints
from bert_keras import modeling
from bert_keras import preprocessing
from bert_keras import tokenization
from bert_keras.runtime import common_flags
from bert_keras.runtime import settings
from bert_keras.runtime import distribution
from bert_keras.runtime import inference
from bert_keras.runtime import model_dir
from bert_keras.runtime import option_checks as checks
from bert_keras.runtime import outputs
from bert_keras.runtime import run_checks
from bert_keras.utils import errors
from bert_keras.utils import file_io
from bert_keras.utils import text_lines

SEPARATOR = " ||| "


def options(**overrides):
  """A namespace of all run() options: DEFAULTS updated with `overrides`."""
  return common_flags.make_options(DEFAULTS, overrides)


def define_flags(fv=flags.FLAGS):
  """The original's flags (same names, types and defaults) plus strategy/dtype/XLA."""
  flags.DEFINE_string("input_file", None,
                      "Text file, one example per line: `text` or `text a ||| text b`.",
                      flag_values=fv)
  flags.DEFINE_string("output_file", None, "JSON Lines output, one line per input line.",
                      flag_values=fv)
  flags.DEFINE_string("layers", "-1,-2,-3,-4",
                      "Comma-separated encoder layer indexes (-1 = last layer).", flag_values=fv)
  common_flags.define_model_flags(max_seq_length=128, output_dir=False, fv=fv)
  flags.DEFINE_integer("batch_size", 32, "Batch size for predictions.", flag_values=fv)
  common_flags.define_tpu_flags(fv=fv)
  flags.DEFINE_bool("use_one_hot_embeddings", False,
                    "Accepted for the original's command lines; the embedding lookup is "
                    "the same either way here.", flag_values=fv)
  common_flags.define_device_flags(strategies=("one_device", "mirrored", "tpu"), fv=fv)
  # (--vocab_file, --bert_config_file: also from a model directory as --init_checkpoint)
  for name in ("input_file", "init_checkpoint", "output_file"):
    flags.mark_flag_as_required(name, flag_values=fv)
  flags.adopt_module_key_flags(common_flags,
                               flag_values=fv)  # --help lists them too, not only --helpfull


# The options of run() (options(), model_dir.resolve_options): the flags' names and defaults,
# read from define_flags without parsing or touching absl's FLAGS.
DEFAULTS = common_flags.flag_defaults(define_flags)


# ----------------------------------------------------------------------------
# Examples and features.

# Errors of file systems (local, gs://) that mean "this path cannot be used".
_FILE_ERRORS = (tf.errors.NotFoundError, tf.errors.PermissionDeniedError,
                tf.errors.FailedPreconditionError, tf.errors.UnimplementedError,
                tf.errors.AlreadyExistsError, tf.errors.DataLossError)


def _file_error(flag, path, e):
  """A tf.errors.OpError of a file operation -> ValueError naming the flag and path."""
  if isinstance(e, tf.errors.NotFoundError):
    return ValueError(f"{flag} {path}: no such file")
  message = (e.message or type(e).__name__).strip().splitlines()[0]
  return ValueError(f"{flag} {path}: {message}")


class InputExample(object):
  """One input line: unique_id (0-based line number), text_a, text_b (None if no pair)."""

  def __init__(self, unique_id, text_a, text_b):
    self.unique_id = unique_id
    self.text_a = text_a
    self.text_b = text_b


class InputFeatures(object):
  """The features of one line: its word pieces with [CLS]/[SEP] (`tokens`, no padding)
  and input_ids, input_mask, input_type_ids (lists of max_seq_length ints)."""

  def __init__(self, unique_id, tokens, input_ids, input_mask, input_type_ids):
    self.unique_id = unique_id
    self.tokens = tokens
    self.input_ids = input_ids
    self.input_mask = input_mask
    self.input_type_ids = input_type_ids


def read_examples(input_file):
  """Every line of input_file as an InputExample, blank lines included.

  Lines are read as the original's text-mode GFile reads them: only "\\n" ends a line and
  every "\\r" is dropped. Each line is stripped, then split at its LAST " ||| " into
  text_a and text_b. Raises ValueError naming the file (and line) if it is missing or
  not UTF-8.
  """
  try:
    with tf.io.gfile.GFile(input_file, "rb") as reader:
      lines = reader.read().replace(b"\r", b"").split(b"\n")
  except tf.errors.OpError as e:
    raise _file_error("--input_file", input_file, e) from None
  if lines[-1] == b"":
    lines.pop()
  examples = []
  for unique_id, raw in enumerate(lines):
    line = text_lines.decode(raw, f"--input_file {input_file}", unique_id + 1).strip()
    text_a, separator, text_b = line.rpartition(SEPARATOR)
    if not separator:
      text_a, text_b = line, None
    examples.append(InputExample(unique_id=unique_id, text_a=text_a, text_b=text_b))
  return examples


def convert_single_example(ex_index, example, seq_length, tokenizer):
  """InputExample -> InputFeatures, packed as run_classifier packs (preprocessing.pack_tokens); logs
  the first 5 examples."""
  tokens_a = tokenizer.tokenize(example.text_a)
  tokens_b = tokenizer.tokenize(example.text_b) if example.text_b else None
  tokens, input_ids, input_mask, input_type_ids = preprocessing.pack_tokens(
      tokens_a, tokens_b, seq_length, tokenizer)
  if ex_index < 5:
    logging.info("*** Example ***")
    logging.info("unique_id: %s", example.unique_id)
    logging.info("tokens: %s", " ".join(tokenization.printable_text(t) for t in tokens))
    logging.info("input_ids: %s", " ".join(str(x) for x in input_ids))
    logging.info("input_mask: %s", " ".join(str(x) for x in input_mask))
    logging.info("input_type_ids: %s", " ".join(str(x) for x in input_type_ids))
  return InputFeatures(unique_id=example.unique_id, tokens=tokens, input_ids=input_ids,
                       input_mask=input_mask, input_type_ids=input_type_ids)


def convert_examples_to_features(examples, seq_length, tokenizer):
  """A list of InputFeatures, one per example (the original's API)."""
  return [convert_single_example(i, example, seq_length, tokenizer)
          for i, example in enumerate(examples)]


def parse_layers(layers, num_hidden_layers):
  """--layers "-1,-2" -> [-1, -2]: Python indexes into the num_hidden_layers outputs.
  Raises ValueError naming the flag for an empty list, a non-integer or an index out of
  range (the original would crash)."""
  try:
    indexes = [int(x) for x in (layers or "").split(",")]
  except ValueError:
    raise ValueError(f"--layers={layers!r}: expected comma-separated integers, "
                     "e.g. -1,-2,-3,-4") from None
  for index in indexes:
    if not -num_hidden_layers <= index < num_hidden_layers:
      raise ValueError(
          f"--layers={layers}: layer {index} out of range: --bert_config_file has "
          f"num_hidden_layers={num_hidden_layers} (indexes {-num_hidden_layers} to "
          f"{num_hidden_layers - 1})")
  return indexes


# ----------------------------------------------------------------------------
# Model and output.

def make_extract_fn(model, layer_indexes, strategy, use_xla=False):
  """-> extract(arrays) for a padded batch of numpy int32 arrays: unique_ids [B],
  input_ids, input_mask, input_type_ids [B, S] (B divisible by the replica count). Runs
  `model` (a BertModel) once on the batch, split over the strategy's replicas
  (inference.make_inference_fn), and returns (unique_ids [B], [float32 [B, S, H] for each of
  layer_indexes]) as numpy. Only the requested layers leave the tf.function (the pooler and
  later layers are pruned from its graph)."""

  def forward(batch):
    outputs = model({"input_ids": batch["input_ids"], "input_mask": batch["input_mask"],
                     "segment_ids": batch["input_type_ids"]}, training=False,
                    output_hidden_states=True)
    layers = outputs["encoder_outputs"]
    return batch["unique_ids"], [tf.cast(layers[i], tf.float32) for i in layer_indexes]

  return inference.make_inference_fn(strategy, forward, use_xla)


def round6(values):
  """round(float(x), 6) for every x of a float32 array, as (nested) lists of Python floats.

  Vectorised and exactly equal: for a float32 x, x * 1e6 is exact in float64 (24 + 14
  significant bits), np.round rounds it half to even as round() does, and the division by
  1e6 gives the float nearest to that decimal, as round() does (tests check it)."""
  return np.round(np.asarray(values, np.float32).astype(np.float64), 6).tolist()


def json_line(feature, layer_values, layer_indexes):
  """The original's output line for one feature: {"linex_index": unique_id (sic),
  "features": [{"token": t, "layers": [{"index": i, "values": [H floats rounded to 6
  decimals]} for each i of layer_indexes]} for each REAL token t]}, json.dumps' default
  separators and ASCII escapes, "\\n"-terminated. layer_values: float32 [S, H] per layer."""
  n = len(feature.tokens)
  rows = [round6(values[:n]) for values in layer_values]
  features = [{"token": token,
               "layers": [{"index": index, "values": rows[j][i]}
                          for j, index in enumerate(layer_indexes)]}
              for i, token in enumerate(feature.tokens)]
  return json.dumps({"linex_index": feature.unique_id, "features": features}) + "\n"


def _batch_arrays(features, batch_size, seq_length):
  """features -> int32 arrays of batch_size rows (unique_ids [B], the rest [B, S]); rows
  past the features are padding (unique_id -1, all zeros)."""
  arrays = {"unique_ids": np.full([batch_size], -1, np.int32)}
  for name in ("input_ids", "input_mask", "input_type_ids"):
    arrays[name] = np.zeros([batch_size, seq_length], np.int32)
  for row, f in enumerate(features):
    arrays["unique_ids"][row] = f.unique_id
    arrays["input_ids"][row] = f.input_ids
    arrays["input_mask"][row] = f.input_mask
    arrays["input_type_ids"][row] = f.input_type_ids
  return arrays


def _check_ids(features, config, input_file):
  """Token/type ids the embedding tables lack would fail deep in TensorFlow (or, on GPU,
  read zeros): ValueError naming the line instead."""
  for f in features:
    if max(f.input_ids) >= config.vocab_size:
      raise ValueError(f"--input_file {input_file}, line {f.unique_id + 1}: token id "
                       f"{max(f.input_ids)} >= vocab_size={config.vocab_size} of "
                       "--bert_config_file (does --vocab_file belong to this model?)")
    if max(f.input_type_ids) >= config.type_vocab_size:
      raise ValueError(f"--input_file {input_file}, line {f.unique_id + 1}: a sentence pair, "
                       f"but --bert_config_file has type_vocab_size={config.type_vocab_size}")


# ----------------------------------------------------------------------------

def run(options, strategy=None):
  """Writes options.output_file as the original main() does; returns the number of lines.

  options: a namespace from options(...), or the parsed FLAGS. strategy: a tf.distribute
  strategy (built from the options when None). With a model directory (a run_* output_dir
  or its best/) as --init_checkpoint, --bert_config_file, --vocab_file, --do_lower_case and
  --max_seq_length default to its own (runtime/model_dir.py).
  """
  options, _ = model_dir.resolve_options(options, DEFAULTS)
  checks.check(options, {checks.REQUIRED: dict(
      input_file=None, output_file=None, bert_config_file=checks.MODEL_DIR_CHECKPOINT,
      init_checkpoint=None, vocab_file=checks.MODEL_DIR_CHECKPOINT)})
  model_source = settings.ModelSource.from_flags(options)
  placement = settings.Placement.from_flags(options)
  config = run_checks.load_and_check_config(model_source, use_tpu=placement.use_tpu)
  layer_indexes = parse_layers(options.layers, config.num_hidden_layers)
  checks.check(options, {checks.AT_LEAST: {"max_seq_length": (3, "[CLS] a [SEP] b [SEP]")}})
  if options.max_seq_length > config.max_position_embeddings:
    raise ValueError(
        f"--max_seq_length={options.max_seq_length}: cannot use sequence length "
        f"{options.max_seq_length} because the BERT model was only trained up to sequence length "
        f"{config.max_position_embeddings} (max_position_embeddings of --bert_config_file)")
  checks.check(options, {checks.POSITIVE: ("batch_size",),
                         checks.EXISTING_FILES: ("vocab_file",)})
  tokenizer = tokenization.FullTokenizer(vocab_file=options.vocab_file,
                                         do_lower_case=options.do_lower_case)
  tokenization.check_vocab(tokenizer.vocab, options.vocab_file,
                           required=("[UNK]", "[CLS]", "[SEP]"))
  run_checks.check_vocab_fits(config, tokenizer.vocab, model_source)
  if tf.io.gfile.isdir(options.output_file):
    raise ValueError(f"--output_file {options.output_file}: is a directory")
  if os.path.dirname(options.output_file):  # not below a regular file (before the model)
    try:
      outputs.check_output_dir(os.path.dirname(options.output_file), "--output_file")
    except ValueError:
      raise ValueError(f"--output_file {options.output_file}: its directory "
                       f"{os.path.dirname(options.output_file)} is, or is below, a file") from None
  examples = read_examples(options.input_file)

  strategy = distribution.strategy_for(placement, strategy)
  distribution.set_dtype_policy(options.dtype)
  with strategy.scope():
    model = modeling.BertModel(config)
  try:
    checkpoints.load_checkpoint(model, options.init_checkpoint)
  except tf.errors.OpError as e:
    raise _file_error("--init_checkpoint", options.init_checkpoint, e) from None
  except checkpoints.CheckpointError as e:
    raise ValueError(f"--init_checkpoint: {e}") from None
  use_xla = distribution.default_use_xla(strategy) if options.use_xla is None else options.use_xla
  extract = make_extract_fn(model, layer_indexes, strategy, use_xla)
  return _write(options, examples, tokenizer, config, layer_indexes, extract)


def _write(options, examples, tokenizer, config, layer_indexes, extract):
  """Converts, runs and writes the examples batch by batch to file_io.temp_name(output_file),
  renamed to options.output_file at the end (removed on any error)."""
  directory = os.path.dirname(options.output_file)
  try:
    if directory:
      tf.io.gfile.makedirs(directory)
  except tf.errors.OpError as e:
    raise _file_error("--output_file", directory, e) from None
  file_io.remove_stale_temporaries(directory or ".", log=logging.warning,
                                   finals={os.path.basename(options.output_file)})
  started = last_log = time.monotonic()
  try:
    with file_io.atomic_output(options.output_file) as tmp, tf.io.gfile.GFile(tmp, "w") as writer:
      writer.write("")  # fail now, not after the first batch, if it cannot be written
      for start in range(0, len(examples), options.batch_size):
        features = [convert_single_example(i, examples[i], options.max_seq_length, tokenizer)
                    for i in range(start, min(start + options.batch_size, len(examples)))]
        _check_ids(features, config, options.input_file)
        unique_ids, layers = extract(_batch_arrays(features, options.batch_size,
                                                   options.max_seq_length))
        assert unique_ids[:len(features)].tolist() == [f.unique_id for f in features]
        for row, feature in enumerate(features):
          writer.write(json_line(feature, [layer[row] for layer in layers], layer_indexes))
        now, done = time.monotonic(), start + len(features)
        if now - last_log >= 30 and done < len(examples):  # progress of long inputs
          rate = done / (now - started)
          logging.info("%d of %d lines written, %.1f lines/s, ETA %.0f s", done,
                       len(examples), rate, (len(examples) - done) / rate)
          last_log = now
  except _FILE_ERRORS as e:
    raise _file_error("--output_file", options.output_file, e) from None
  logging.info("Wrote %d lines to %s", len(examples), options.output_file)
  return len(examples)


main = errors.script_main(run)


if __name__ == "__main__":
  define_flags()
  app.run(main, flags_parser=errors.parse_flags)
