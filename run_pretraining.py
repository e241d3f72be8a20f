# coding=utf-8
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

from bert_keras import quiet_tensorflow  # noqa: F401  (first: before TensorFlow is imported)
import os

from absl import app
from absl import flags
from absl import logging
import keras
import numpy as np
import tensorflow as tf

from bert_keras import checkpoints
from bert_keras import modeling
from bert_keras import optimization
from bert_keras import training

# Programmatic defaults = the flags' defaults (see define_flags).
DEFAULTS = dict(
    bert_config_file=None, input_file=None, output_dir=None, init_checkpoint=None,
    max_seq_length=128, max_predictions_per_seq=20, do_train=False, do_eval=False,
    train_batch_size=32, eval_batch_size=8, learning_rate=5e-5, num_train_steps=100000,
    num_warmup_steps=10000, save_checkpoints_steps=1000, iterations_per_loop=1000,
    max_eval_steps=100,
    **training.TPU_DEFAULTS, **training.TRAINING_DEFAULTS)


def options(**overrides):
  """A namespace of all run() options: DEFAULTS updated with `overrides`."""
  return training.make_options(DEFAULTS, overrides)


def define_flags():
  """The original's flags (same names, types and defaults) plus training.py's."""
  training.define_model_flags(max_seq_length=128, tokenizer=False,
                              max_seq_length_help=" Must match data generation.")
  flags.DEFINE_string("input_file", None,
                      "Input TF example files (can be a glob or comma separated).")
  flags.DEFINE_integer(
      "max_predictions_per_seq", 20,
      "Maximum number of masked LM predictions per sequence. Must match data generation.")
  flags.DEFINE_bool("do_train", False, "Whether to run training.")
  flags.DEFINE_bool("do_eval", False, "Whether to run eval on the dev set.")
  flags.DEFINE_integer("train_batch_size", 32, "Total batch size for training.")
  flags.DEFINE_integer("eval_batch_size", 8, "Total batch size for eval.")
  flags.DEFINE_float("learning_rate", 5e-5, "The initial learning rate for Adam.")
  flags.DEFINE_integer("num_train_steps", 100000, "Number of training steps.")
  flags.DEFINE_integer("num_warmup_steps", 10000, "Number of warmup steps.")
  flags.DEFINE_integer("save_checkpoints_steps", 1000,
                       "How often to save the model checkpoint.")
  flags.DEFINE_integer("iterations_per_loop", 1000,
                       "How many steps to make in each estimator call (here: training "
                       "steps per compiled loop, and per log line).")
  flags.DEFINE_integer("max_eval_steps", 100, "Maximum number of eval steps.")
  training.define_tpu_flags()
  training.define_training_flags()
  flags.mark_flag_as_required("input_file")
  flags.mark_flag_as_required("bert_config_file")
  flags.mark_flag_as_required("output_dir")
  flags.adopt_module_key_flags(training)  # --help lists them too, not only --helpfull


# ----------------------------------------------------------------------------
# Input (spec 5.3 / 6.2).


def decode_fn(max_seq_length, max_predictions_per_seq):
  """Serialized tf.train.Example -> dict of int32 / float32 tensors (int64 cast to int32)."""
  spec = {
      "input_ids": tf.io.FixedLenFeature([max_seq_length], tf.int64),
      "input_mask": tf.io.FixedLenFeature([max_seq_length], tf.int64),
      "segment_ids": tf.io.FixedLenFeature([max_seq_length], tf.int64),
      "masked_lm_positions": tf.io.FixedLenFeature([max_predictions_per_seq], tf.int64),
      "masked_lm_ids": tf.io.FixedLenFeature([max_predictions_per_seq], tf.int64),
      "masked_lm_weights": tf.io.FixedLenFeature([max_predictions_per_seq], tf.float32),
      "next_sentence_labels": tf.io.FixedLenFeature([1], tf.int64),
  }

  def decode(record):
    example = tf.io.parse_single_example(record, spec)
    return {k: tf.cast(v, tf.int32) if v.dtype == tf.int64 else v for k, v in example.items()}

  return decode


# ----------------------------------------------------------------------------
# Losses and metrics (spec 6.3).

class PretrainingTask(training.Task):
  """MLM loss sum(w * loss) / (sum(w) + 1e-5) plus the mean NSP loss, both over the
  GLOBAL batch (the original's single-device definition, whatever the replica count
  or accumulation); eval metrics as the original metric_fn."""

  train_stat_names = ("loss", "masked_lm_correct", "masked_lm_weight")
  eval_stat_names = ("masked_lm_loss_sum", "masked_lm_weight", "masked_lm_correct",
                     "next_sentence_loss_sum", "next_sentence_correct", "examples", "loss")

  def model_inputs(self, batch):
    return {k: batch[k] for k in
            ("input_ids", "input_mask", "segment_ids", "masked_lm_positions")}

  def denominators(self, batch):
    return {"masked_lm_weight": tf.reduce_sum(batch["masked_lm_weights"]),
            "examples": tf.cast(tf.shape(batch["input_ids"])[0], tf.float32)}

  @staticmethod
  def _per_example(outputs, batch):
    """-> masked-LM loss [B, P], weights [B, P], correct [B, P], NSP loss [B], correct [B]."""
    logits = tf.cast(outputs["masked_lm_logits"], tf.float32)
    ids = batch["masked_lm_ids"]
    mlm = tf.nn.sparse_softmax_cross_entropy_with_logits(labels=ids, logits=logits)
    mlm_correct = tf.cast(tf.equal(tf.argmax(logits, -1, output_type=tf.int32), ids),
                          tf.float32)
    ns_logits = tf.cast(outputs["next_sentence_logits"], tf.float32)
    labels = tf.reshape(batch["next_sentence_labels"], [-1])
    nsp = tf.nn.sparse_softmax_cross_entropy_with_logits(labels=labels, logits=ns_logits)
    nsp_correct = tf.cast(tf.equal(tf.argmax(ns_logits, -1, output_type=tf.int32), labels),
                          tf.float32)
    return mlm, batch["masked_lm_weights"], mlm_correct, nsp, nsp_correct

  def loss(self, outputs, batch, denominators):
    mlm, w, mlm_correct, nsp, _ = self._per_example(outputs, batch)
    loss = (tf.reduce_sum(w * mlm) / (denominators["masked_lm_weight"] + 1e-5) +
            tf.reduce_sum(nsp) / denominators["examples"])
    return loss, {"loss": loss, "masked_lm_correct": tf.reduce_sum(w * mlm_correct),
                  "masked_lm_weight": tf.reduce_sum(w)}

  def summarize_train(self, sums, steps):
    return {"loss": sums["loss"] / steps,
            "masked_lm_accuracy": sums["masked_lm_correct"] / max(sums["masked_lm_weight"], 1e-9)}

  def eval_stats(self, outputs, batch):
    mlm, w, mlm_correct, nsp, nsp_correct = self._per_example(outputs, batch)
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

def _validate(o):
  if not o.do_train and not o.do_eval:
    raise ValueError("At least one of `do_train` or `do_eval` must be True.")
  for name in ("bert_config_file", "input_file", "output_dir"):
    if not getattr(o, name):
      raise ValueError(f"--{name} is required")
  if not tf.io.gfile.exists(o.bert_config_file):
    raise ValueError(f"--bert_config_file {o.bert_config_file}: no such file")
  for name in ("train_batch_size", "eval_batch_size", "num_train_steps",
               "iterations_per_loop", "max_eval_steps", "gradient_accumulation_steps"):
    if getattr(o, name) < 1:
      raise ValueError(f"--{name}={getattr(o, name)}: must be >= 1")
  if o.num_warmup_steps < 0:
    raise ValueError(f"--num_warmup_steps={o.num_warmup_steps}: must be >= 0")


def build_model_and_optimizer(o, config, strategy):
  """Under strategy.scope(): BertPretrainer (built) and the optimizer (float16: loss scaled)."""
  training.set_dtype_policy(o.dtype)
  with strategy.scope():
    model = modeling.BertPretrainer(config)
    optimizer = optimization.create_optimizer(
        o.learning_rate, o.num_train_steps, o.num_warmup_steps, optimizer_type=o.optimizer)
    if o.dtype == "float16":
      optimizer = keras.optimizers.LossScaleOptimizer(optimizer)
  return model, optimizer


def run(o, strategy=None):
  """Trains and/or evaluates as the original main(); returns the eval results (or None).

  o: options(...) or the parsed FLAGS. strategy: a tf.distribute strategy (built from
  the options when None).
  """
  _validate(o)
  config = modeling.BertConfig.from_json_file(o.bert_config_file)
  if o.max_seq_length > config.max_position_embeddings:
    raise ValueError(f"--max_seq_length={o.max_seq_length} exceeds max_position_embeddings "
                     f"{config.max_position_embeddings} of {o.bert_config_file}")
  tf.io.gfile.makedirs(o.output_dir)
  # Seeds the initial weights and the dropout seed generators (the input order has its
  # own seeds in training_dataset), so that a run is reproducible.
  keras.utils.set_random_seed(o.seed)
  input_files = training.expand_input_files(o.input_file)
  logging.info("*** Input Files ***")
  for path in input_files:
    logging.info("  %s", path)
  strategy = training.strategy_for(o, strategy)
  accumulation = o.gradient_accumulation_steps
  per_replica_train = training.per_replica_batch_size(
      o.train_batch_size, strategy, accumulation, "--train_batch_size")
  per_replica_eval = training.per_replica_batch_size(
      o.eval_batch_size, strategy, 1, "--eval_batch_size")
  decode = decode_fn(o.max_seq_length, o.max_predictions_per_seq)

  model, optimizer = build_model_and_optimizer(o, config, strategy)
  task = PretrainingTask()
  trainer = training.Trainer(strategy, model, optimizer, task, accumulation_steps=accumulation,
                             use_xla=(training.default_use_xla(strategy) if o.use_xla is None
                                      else o.use_xla),
                             loss_scale=o.dtype == "float16",
                             variable_names=checkpoints.tf1_variable_map(model))
  chief = training.is_chief(strategy)

  def init_fn():
    training.warm_start(model, o.init_checkpoint)

  if o.do_train:
    logging.info("***** Running training *****")
    logging.info("  Batch size = %d", o.train_batch_size)
    flops = training.bert_training_flops_per_sequence(
        config, o.max_seq_length, o.max_predictions_per_seq)
    peak = training.measured_peak_flops("float32" if o.dtype == "float32" else o.dtype)

    def train_dataset(input_context, skip_records):
      return training.training_dataset(input_files, decode, per_replica_train, input_context,
                                       seed=o.seed, skip_records=skip_records)

    def log(step, stats):
      logging.info(
          "step = %d, loss = %.5f, masked_lm_accuracy = %.4f, learning_rate = %.4g, "
          "sequences/s = %.1f, mfu = %.2f%%", step, stats["loss"],
          stats["masked_lm_accuracy"], stats["learning_rate"], stats["sequences_per_sec"],
          100.0 * stats.get("mfu", 0.0))

    trainer.train(train_dataset, num_train_steps=o.num_train_steps,
                  steps_per_loop=o.iterations_per_loop, output_dir=o.output_dir,
                  save_checkpoints_steps=o.save_checkpoints_steps,
                  keep_checkpoint_max=o.keep_checkpoint_max, init_fn=init_fn,
                  global_batch_size=o.train_batch_size, flops_per_sequence=flops,
                  peak_flops=peak, log_fn=log)
    if chief:
      prefix = os.path.join(o.output_dir, "bert_model.ckpt")
      checkpoints.save_tf1_checkpoint(model, prefix)
      training.write_text_atomic(os.path.join(o.output_dir, "bert_config.json"),
                                 config.to_json_string())
      logging.info("Exported the final model with the original names to %s", prefix)
  elif not trainer.restore_latest(o.output_dir):
    if not o.init_checkpoint:
      raise ValueError(f"--output_dir {o.output_dir}: no checkpoint to evaluate (and no "
                       "--init_checkpoint)")
    init_fn()

  if not o.do_eval:
    return None
  logging.info("***** Running evaluation *****")
  logging.info("  Batch size = %d", o.eval_batch_size)

  def eval_dataset(input_context):
    return training.evaluation_dataset(input_files, decode, per_replica_eval, input_context)

  totals = trainer.evaluate(eval_dataset, o.max_eval_steps)
  results = task.eval_results(totals, o.max_eval_steps, int(trainer.global_step.numpy()))
  logging.info("***** Eval results *****")
  for key in sorted(results):
    logging.info("  %s = %s", key, results[key])
  if chief:
    training.write_text_atomic(os.path.join(o.output_dir, "eval_results.txt"),
                               training.format_results(results))
  return results


main = training.script_main(run)


if __name__ == "__main__":
  define_flags()
  app.run(main)
