r"""Masked-LM and next-sentence pre-training of BERT (the original run_pretraining.py).

Same flags, defaults, input files (create_pretraining_data's TFRecords), losses and
eval_results.txt as the original; the TPUEstimator is replaced by training.py's
custom loop (one_device / mirrored / multi_worker_mirrored / tpu strategies), with
checkpoints of model, optimizer and step in --output_dir and automatic resume.

  python run_pretraining.py --input_file=/tmp/tf_examples.tfrecord \
    --output_dir=/tmp/pretraining_output --do_train=True --do_eval=True \
    --bert_config_file=$BERT_BASE_DIR/bert_config.json \
    --init_checkpoint=$BERT_BASE_DIR/bert_model.ckpt --train_batch_size=32 \
    --max_seq_length=128 --max_predictions_per_seq=20 --num_train_steps=20 \
    --num_warmup_steps=10 --learning_rate=2e-5
"""

try:  # outside the venv: a one-line hint, not a traceback
  from bert_keras.utils import quiet_tensorflow  # noqa: F401  (first, before TensorFlow)
except ImportError as e:
  raise SystemExit(f"error: {e} (activate .venv: source .venv/bin/activate, or pip install -e .)")
import dataclasses
import os
import re

from absl import app
from absl import flags
from absl import logging
import numpy as np
import tensorflow as tf

from bert_keras import checkpoints
from bert_keras import losses
from bert_keras import modeling
from bert_keras.pretraining_data import tfrecord_encoding
from bert_keras.runtime import common_flags
from bert_keras.runtime import distribution
from bert_keras.runtime import flops
from bert_keras.runtime import input_pipeline
from bert_keras.runtime import job
from bert_keras.runtime import model_dir
from bert_keras.runtime import option_checks as checks
from bert_keras.runtime import outputs
from bert_keras.runtime import run_checks
from bert_keras.runtime import settings
from bert_keras.runtime import training
from bert_keras.runtime import training_checkpoints
from bert_keras.utils import errors
from bert_keras.utils import file_io


def options(**overrides):
  """A namespace of all run() options: DEFAULTS updated with `overrides`."""
  return common_flags.make_options(DEFAULTS, overrides)


def define_flags(fv=flags.FLAGS):
  """The original's flags (same names, types and defaults) plus training.py's."""
  common_flags.define_model_flags(max_seq_length=128, tokenizer=False,
                                  max_seq_length_help=" Must match data generation.", fv=fv)
  flags.DEFINE_string("input_file", None,
                      "Input TF example files (can be a glob or comma separated).", flag_values=fv)
  flags.DEFINE_integer(
      "max_predictions_per_seq", 20,
      "Maximum number of masked LM predictions per sequence. Must match data generation.",
      flag_values=fv)
  flags.DEFINE_float("learning_rate", 5e-5, "The initial learning rate for Adam.", flag_values=fv)
  flags.DEFINE_integer("num_train_steps", 100000, "Number of training steps.", flag_values=fv)
  flags.DEFINE_integer("num_warmup_steps", 10000, "Number of warmup steps.", flag_values=fv)
  flags.DEFINE_integer("save_checkpoints_steps", 1000,
                       "How often to save the model checkpoint.", flag_values=fv)
  flags.DEFINE_integer("max_eval_steps", 100, "Maximum number of eval steps.", flag_values=fv)
  common_flags.define_shared_flags(
      ("train_and_eval_jobs", "iterations_per_loop", "tpu", "training"),
      ("input_file", "output_dir"), fv)
  flags.adopt_module_key_flags(common_flags, flag_values=fv)  # (--help lists them)


# The options of run() (options(), model_dir.resolve_options): the flags' names and defaults,
# read from define_flags without parsing or touching absl's FLAGS.
DEFAULTS = common_flags.flag_defaults(define_flags)


# ----------------------------------------------------------------------------
# Input.


def decode_fn(max_seq_length, max_predictions_per_seq):
  """Serialized tf.train.Example -> dict of int32 / float32 tensors (int64 cast to int32)."""
  feature_types = tfrecord_encoding.parsing_features(max_seq_length, max_predictions_per_seq)

  def decode(record):
    example = tf.io.parse_single_example(record, feature_types)
    return {k: tf.cast(v, tf.int32) if v.dtype == tf.int64 else v for k, v in example.items()}

  return decode


# ----------------------------------------------------------------------------
# Losses and metrics.

class PretrainingTask(training.Task):
  """losses.pretraining_loss (MLM loss sum(w * loss) / (sum(w) + 1e-5) plus the mean NSP
  loss) over the GLOBAL batch (the original's single-device definition, whatever the replica
  count or accumulation); eval metrics as the original metric_fn."""

  train_stat_names = ("loss", "masked_lm_correct", "masked_lm_weight")
  eval_stat_names = ("masked_lm_loss_sum", "masked_lm_weight", "masked_lm_correct",
                     "next_sentence_loss_sum", "next_sentence_correct", "examples", "loss")
  examples_name = "sequences"

  def model_inputs(self, batch):
    return {k: batch[k] for k in
            ("input_ids", "input_mask", "segment_ids", "masked_lm_positions")}

  def denominators(self, batch):
    return {"masked_lm_weight": tf.reduce_sum(batch["masked_lm_weights"]),
            "examples": tf.cast(tf.shape(batch["input_ids"])[0], tf.float32)}

  @staticmethod
  def _correct(logits, labels):
    """1.0 where argmax(logits) == labels: logits [..., C], labels int32 [...] -> float32."""
    predictions = tf.argmax(tf.cast(logits, tf.float32), -1, output_type=tf.int32)
    return tf.cast(tf.equal(predictions, labels), tf.float32)

  def loss(self, outputs, batch, denominators):
    loss = losses.pretraining_loss(outputs, batch, denominators["masked_lm_weight"],
                                     denominators["examples"])
    w = batch["masked_lm_weights"]
    mlm_correct = self._correct(outputs["masked_lm_logits"], batch["masked_lm_ids"])
    return loss, {"loss": loss, "masked_lm_correct": tf.reduce_sum(w * mlm_correct),
                  "masked_lm_weight": tf.reduce_sum(w)}

  def summarize_train(self, sums, steps):
    return {"loss": sums["loss"] / steps,
            "masked_lm_accuracy": sums["masked_lm_correct"] / max(sums["masked_lm_weight"], 1e-9)}

  def eval_stats(self, outputs, batch):
    w = batch["masked_lm_weights"]
    mlm = losses.masked_lm_per_position_loss(outputs["masked_lm_logits"],
                                               batch["masked_lm_ids"])
    labels = tf.reshape(batch["next_sentence_labels"], [-1])
    nsp = losses.next_sentence_per_example_loss(outputs["next_sentence_logits"], labels)
    mlm_correct = self._correct(outputs["masked_lm_logits"], batch["masked_lm_ids"])
    nsp_correct = self._correct(outputs["next_sentence_logits"], labels)
    return {"masked_lm_loss_sum": tf.reduce_sum(w * mlm),
            "masked_lm_weight": tf.reduce_sum(w),
            "masked_lm_correct": tf.reduce_sum(w * mlm_correct),
            "next_sentence_loss_sum": tf.reduce_sum(nsp),
            "next_sentence_correct": tf.reduce_sum(nsp_correct),
            "examples": tf.cast(tf.shape(nsp)[0], tf.float32)}

  def per_batch_eval(self, sums):
    sums = dict(sums)
    sums["loss"] = (sums["masked_lm_loss_sum"] / (sums["masked_lm_weight"] + 1e-5) +
                    sums["next_sentence_loss_sum"] / sums["examples"])
    return sums

  def eval_results(self, totals, steps, global_step):
    f = lambda x: np.float32(x)  # noqa: E731  (str() like the original's numpy values)
    return {
        "global_step": np.int64(global_step),
        "loss": f(totals["loss"] / steps),
        "masked_lm_accuracy": f(totals["masked_lm_correct"] / totals["masked_lm_weight"]),
        "masked_lm_loss": f(totals["masked_lm_loss_sum"] / totals["masked_lm_weight"]),
        "next_sentence_accuracy": f(totals["next_sentence_correct"] / totals["examples"]),
        "next_sentence_loss": f(totals["next_sentence_loss_sum"] / totals["examples"]),
    }


# ----------------------------------------------------------------------------

@dataclasses.dataclass(frozen=True)
class Pretraining(settings.FromFlags):
  """run_pretraining's own flags, typed (settings.FromFlags): the records and their masked
  positions, and the evaluation's length."""
  input_file: str
  max_predictions_per_seq: int
  max_eval_steps: int


def _validate(options):
  checks.require_one(do_train=options.do_train, do_eval=options.do_eval)
  checks.check(options, {
      checks.REQUIRED: dict(bert_config_file=checks.MODEL_DIR, input_file=None, output_dir=None),
      checks.EXISTING_FILES: ("bert_config_file",),
      checks.POSITIVE: ("train_batch_size", "eval_batch_size", "num_train_steps",
                        "iterations_per_loop", "max_eval_steps", "gradient_accumulation_steps"),
      checks.NON_NEGATIVE: ("num_warmup_steps",)})


def run(options, strategy=None):
  """Trains and/or evaluates as the original main(); returns the eval results (or None).

  options: a namespace from options(...), or the parsed FLAGS. strategy: a tf.distribute
  strategy (built from the options when None). With a model directory as --output_dir or
  --init_checkpoint (runtime/model_dir.py), --bert_config_file may be left out.
  """
  options, _ = model_dir.resolve_options(options, DEFAULTS, writes=("pretraining",))
  _validate(options)
  flags = settings.values_of(options)
  run_settings = settings.RunSettings(**settings.parts(flags))
  pretraining = Pretraining(**settings.fields(Pretraining, flags))
  return _run(run_settings, pretraining, strategy)


def _run(run, pretraining, strategy):
  """run() on the typed settings: the config and the records checked, then the output
  directory made and locked, and the work done."""
  config = run_checks.run_config(run)
  if run.model.max_seq_length > config.max_position_embeddings:
    raise ValueError(f"--max_seq_length={run.model.max_seq_length} exceeds "
                     f"max_position_embeddings {config.max_position_embeddings} of "
                     f"{run.model.bert_config_file}")
  input_files = input_pipeline.expand_input_files(pretraining.input_file)
  logging.info("*** Input Files ***")
  for path in input_files:
    logging.info("  %s", path)
  input_pipeline.check_record_files(
      input_files, "--input_file",
      tfrecord_encoding.feature_lengths(run.model.max_seq_length,
                                        pretraining.max_predictions_per_seq),
      vocab_size=config.vocab_size, id_features=("input_ids", "masked_lm_ids"),
      vocab_source=f"--bert_config_file {run.model.bert_config_file}")
  # (--seed seeds the initial weights and the dropout, so that a run is reproducible; the
  # input order has its own seeds in training_dataset.)
  with job.started(run, config, "pretraining", strategy,
                           max_predictions_per_seq=pretraining.max_predictions_per_seq) as run_dir:
    try:
      return _train_evaluate(run, pretraining, config, input_files, run_dir.strategy)
    except tf.errors.DataLossError as e:
      text = damaged_record_text(str(e.message), input_files)
      if text is None:
        raise
      raise ValueError(text) from None


def _crc32c_table():
  table = []
  for byte in range(256):
    crc = byte
    for _ in range(8):
      crc = (crc >> 1) ^ (0x82F63B78 if crc & 1 else 0)
    table.append(crc)
  return table


_CRC32C_TABLE = _crc32c_table()


def masked_crc32c(data):
  """The masked CRC-32C of bytes `data`, as a TFRecord frame stores it."""
  crc = 0xFFFFFFFF
  for byte in data:
    crc = _CRC32C_TABLE[(crc ^ byte) & 0xFF] ^ (crc >> 8)
  crc ^= 0xFFFFFFFF
  return ((((crc >> 15) | (crc << 17)) & 0xFFFFFFFF) + 0xA282EAD8) & 0xFFFFFFFF


def _damaged_record_start(path, offset):
  """The start of the record of the local TFRecord file `path` that TensorFlow reports as
  "corrupted record at `offset`" (its length's checksum wrong: the record's start; its data's:
  the data's start, 12 bytes on), or False where no such record is damaged; None where it
  cannot be told (a remote file)."""
  if file_io.is_remote(path):
    return None
  with open(path, "rb") as f:
    position = 0
    while position < offset - 12:  # the record boundaries up to `offset`
      f.seek(position)
      header = f.read(8)
      if len(header) < 8:
        return False
      position += 16 + int.from_bytes(header, "little")
    if position not in (offset, offset - 12):
      return False
    f.seek(position)
    header = f.read(12)
    if len(header) < 12 or masked_crc32c(header[:8]) != int.from_bytes(header[8:], "little"):
      return position if position == offset else False
    data = f.read(int.from_bytes(header[:8], "little") + 4)
    damaged = len(data) < 4 or masked_crc32c(data[:-4]) != int.from_bytes(data[-4:], "little")
    return position if damaged and position == offset - 12 else False


def damaged_record_text(message, input_files):
  """The one-line error of TensorFlow's "corrupted record at N" (a TFRecord checksum that
  does not match) naming the --input_file that holds it; None for another message."""
  found = re.search(r"corrupted record at (\d+)", message)
  if not found:
    return None
  offset = int(found.group(1))
  starts = {path: _damaged_record_start(path, offset) for path in input_files}
  damaged = [path for path in input_files if starts[path] is not False]
  named = damaged or input_files
  if len(named) == 1 and starts[named[0]]:
    offset = starts[named[0]]
  where = named[0] if len(named) == 1 else "one of " + ", ".join(named[:5]) + (
      f" (and {len(named) - 5} more)" if len(named) > 5 else "")
  return (f"--input_file {where}: corrupted record at byte {offset} (its checksum does not "
          "match: the file is damaged)")


def _train_evaluate(run, pretraining, config, input_files, strategy):
  """run() after the checks, holding --output_dir."""
  per_replica_train = input_pipeline.per_replica_batch_size(
      run.training.train_batch_size, strategy, run.training.gradient_accumulation_steps,
      "--train_batch_size")
  per_replica_eval = input_pipeline.per_replica_batch_size(
      run.evaluation.eval_batch_size, strategy, 1, "--eval_batch_size")
  decode = decode_fn(run.model.max_seq_length, pretraining.max_predictions_per_seq)
  id_check = input_pipeline.IdCheck(config.vocab_size, ("input_ids", "masked_lm_ids"),
                                    f"--bert_config_file {run.model.bert_config_file}",
                                    "--input_file")
  trainer = training.build_trainer(run.training, strategy, lambda: modeling.BertPretrainer(config),
                                   PretrainingTask(), run.training.num_train_steps,
                                   run.training.num_warmup_steps)

  if run.training.do_train:
    def train_dataset(input_context, skip_records):
      return input_pipeline.training_dataset(input_files, decode, per_replica_train,
                                             input_context, seed=run.training.seed,
                                             skip_records=skip_records, id_check=id_check)

    _train(run, pretraining, config, trainer, train_dataset)
  elif not trainer.restore_latest(run.output.output_dir):
    if not run.model.init_checkpoint:
      raise ValueError(f"--output_dir {run.output.output_dir}: no checkpoint to evaluate (and no "
                       "--init_checkpoint)")
    training_checkpoints.warm_start(trainer.model, run.model.init_checkpoint)
  if not run.evaluation.do_eval:
    return None

  def eval_dataset(input_context):
    return input_pipeline.evaluation_dataset(input_files, decode, per_replica_eval,
                                             input_context, id_check=id_check)

  return _evaluate(run, pretraining, trainer, eval_dataset)


def _train(run, pretraining, config, trainer, train_dataset):
  """--do_train: trains to --num_train_steps (resuming from --output_dir, else warm-started
  from --init_checkpoint), then the chief exports the model with the original's names
  (bert_model.ckpt) and its bert_config.json."""
  logging.info("***** Running training *****")
  logging.info("  Batch size = %d", run.training.train_batch_size)
  flops_per_sequence = flops.bert_training_flops_per_sequence(
      config, run.model.max_seq_length, pretraining.max_predictions_per_seq)
  peak = flops.measured_peak_flops(run.training.dtype)
  training.train_as_configured(trainer, train_dataset, run.training, run.training.num_train_steps,
                               flops_per_sequence=flops_per_sequence, peak_flops=peak)
  if distribution.is_chief(trainer.strategy):
    prefix = os.path.join(run.output.output_dir, "bert_model.ckpt")
    checkpoints.save_tf1_checkpoint(trainer.model, prefix)
    file_io.write_text_atomic(os.path.join(run.output.output_dir, "bert_config.json"),
                              config.to_json_string())
    logging.info("Exported the final model with the original names to %s", prefix)


def _evaluate(run, pretraining, trainer, eval_dataset):
  """--do_eval: --max_eval_steps batches of eval_dataset; logs the original's eval results,
  writes them to eval_results.txt (chief) and returns them."""
  logging.info("***** Running evaluation *****")
  logging.info("  Batch size = %d", run.evaluation.eval_batch_size)
  totals = trainer.evaluate(eval_dataset, pretraining.max_eval_steps)
  results = trainer.task.eval_results(totals, pretraining.max_eval_steps,
                                      int(trainer.global_step.numpy()))
  logging.info("***** Eval results *****")
  for key in sorted(results):
    logging.info("  %s = %s", key, results[key])
  if distribution.is_chief(trainer.strategy):
    file_io.write_text_atomic(os.path.join(run.output.output_dir, "eval_results.txt"),
                              outputs.format_results(results))
  return results


main = errors.script_main(run)


if __name__ == "__main__":
  define_flags()
  app.run(main, flags_parser=errors.parse_flags)
