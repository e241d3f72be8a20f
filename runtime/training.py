"""The training loop of the run_* scripts: what a script tells the loop (Task), ONE custom
training loop for every strategy (Trainer), and the fine-tuning scripts' use of it.

The loop serves every strategy (one_device, mirrored, multi_worker_mirrored,
tpu): up to `iterations_per_loop` steps run inside one tf.function (a tf.range loop
over a distributed iterator), cut at every `log_every_steps` (a progress line) and
`save_checkpoints_steps` (a checkpoint) boundary; each step runs `strategy.run` on the replicas,
optionally accumulating gradients over several micro-batches, and the optimizer
sums gradients across replicas before clipping them (see optimization.py).

Losses are normalised by GLOBAL denominators: a task first computes, from its
inputs only, local sums (e.g. the number of examples, the sum of the masked-LM
weights), the loop sums them over micro-batches and replicas, and the task's
loss divides by those global sums. The summed gradient over replicas and
micro-batches is then exactly the gradient of the loss on the global batch, so
a run gives the same weights on 1 device, on N replicas and with N accumulation
steps for the same global batch.

The other concerns of the scripts live beside it in bert_keras.runtime: distribution.py
(strategies, chief), input_pipeline.py (TFRecord datasets), training_checkpoints.py
(model.ckpt-N), inference.py, flops.py (MFU), common_flags.py (flags), run_checks.py (checks
before a model is built) and outputs.py (the locked output directory, result files).
"""

import abc
import json
import math
import os
import time

from absl import logging
import keras
import numpy as np
import tensorflow as tf
from tensorflow.core.framework import summary_pb2

from bert_keras import checkpoints
from bert_keras import model_files
from bert_keras import optimization
from bert_keras.runtime import distribution
from bert_keras.runtime import input_pipeline
from bert_keras.runtime import option_checks
from bert_keras.runtime import outputs
from bert_keras.runtime import training_checkpoints
from bert_keras.utils import file_io
from bert_keras.utils import progress as progress_lib


class Task(abc.ABC):
  """What the loop needs from a script. denominators, loss, model_inputs, eval_stats and
  per_batch_eval run per replica, in graph; summarize_train on the host.

  Subclasses give denominators and loss; the other methods have defaults. Attributes:
  train_stat_names, the keys of the stats of loss(); eval_stat_names, the keys of the totals
  of Trainer.evaluate; examples_name, what one row of a batch is called in the progress
  lines ("examples/s").
  """
  train_stat_names = ("loss",)
  eval_stat_names = ()
  examples_name = "examples"
  # False where neither the loss nor the outputs read the encoder's outputs at padding
  # positions: build_trainer then lets the encoder skip the padding (BertModel.skip_padding).
  reads_padding = True

  @abc.abstractmethod
  def denominators(self, batch):
    """-> dict of float32 scalars: LOCAL sums computed from the inputs only (e.g. the number
    of examples), summed by the loop over micro-batches and replicas before `loss` is
    called."""

  @abc.abstractmethod
  def loss(self, outputs, batch, denominators):
    """-> (loss, stats): `loss` (float32 scalar) is this batch's contribution to the
    global-batch loss (local sums divided by the GLOBAL `denominators`); `stats` a dict
    (keys train_stat_names, "loss" among them) of float32 scalars summed for logging."""

  def model_inputs(self, batch):
    """What the model is called on: the whole batch unless a task says otherwise."""
    return batch

  def summarize_train(self, sums, steps):
    """The sums of loss()'s stats over `steps` steps -> the logged values (floats): by
    default the mean per step of each."""
    return {name: sums[name] / steps for name in self.train_stat_names}

  def eval_stats(self, outputs, batch):
    """-> dict of LOCAL float32 sums for Trainer.evaluate (keys: eval_stat_names minus the
    ones per_batch_eval adds). Tasks that evaluate outside the loop need not give it."""
    raise NotImplementedError(f"{type(self).__name__} has no in-loop evaluation")

  def per_batch_eval(self, sums):
    """The eval_stats of one batch summed over the replicas -> the same dict with per-batch
    quantities added (e.g. the batch loss); by default unchanged."""
    return sums


class ExampleMeanTask(Task):
  """A fine-tuning task whose loss is the mean over the GLOBAL batch of a per-example loss
  (whatever the replica count or accumulation), as the original's single-device loss; the
  model sees input_ids, input_mask and segment_ids [b, S]. Subclasses give
  per_example_loss."""

  @abc.abstractmethod
  def per_example_loss(self, outputs, batch):
    """-> float32 [b]."""

  def model_inputs(self, batch):
    return {k: batch[k] for k in ("input_ids", "input_mask", "segment_ids")}

  def denominators(self, batch):
    return {"examples": tf.cast(tf.shape(batch["input_ids"])[0], tf.float32)}

  def loss(self, outputs, batch, denominators):
    loss = tf.reduce_sum(self.per_example_loss(outputs, batch)) / denominators["examples"]
    return loss, {"loss": loss}


class Diverged(ValueError):
  """Training stopped at a non-finite loss or non-finite weights (Trainer.train); a
  ValueError, so the scripts show it as one `error:` line and exit non-zero."""


# What Trainer.train's Diverged error advises by default (train_as_configured names the run's
# own flags: diverged_hint).
DIVERGED_HINT = "Try a lower learning rate."


class _HintedEval:
  """Trainer.train's eval_fn: a Diverged error of the evaluation (EvalHook's) gets the
  run's diverged_hint; the other attributes are eval_fn's."""

  def __init__(self, eval_fn, hint):
    self.eval_fn, self.hint = eval_fn, hint

  def __call__(self, step):
    try:
      return self.eval_fn(step)
    except Diverged as e:
      raise Diverged(f"{e} {self.hint}") from None

  def __getattr__(self, name):
    return getattr(self.eval_fn, name)


def _sum_dicts(a, b):
  return {k: a[k] + b[k] for k in a}


class Trainer:
  """One custom loop for every strategy.

  Build the model (with variables) and optimizer under strategy.scope() (build_trainer
  does), then call train(). The optimizer is built on model.trainable_variables here,
  before a checkpoint is restored.
  """

  def __init__(self, strategy, model, optimizer, task, *, accumulation_steps=1, use_xla=False,
               loss_scale=False, variable_names=None):
    self.strategy = strategy
    self.model = model
    self.optimizer = optimizer
    self.task = task
    self.accumulation_steps = int(accumulation_steps)
    self.use_xla = use_xla
    self.loss_scale = loss_scale
    self.variable_names = variable_names  # {name: variable}, see named_model_variables
    with strategy.scope():
      self.global_step = tf.Variable(
          0, dtype=tf.int64, trainable=False, name="global_step",
          aggregation=tf.VariableAggregation.ONLY_FIRST_REPLICA)
      self.optimizer.build(model.trainable_variables)
    self._train_loop = None
    self._eval_loop = None
    self._finite_check = None

  # -- per-replica computation ---------------------------------------------

  def _grads_and_stats(self, batch, denominators):
    tvars = self.model.trainable_variables
    with tf.GradientTape() as tape:
      outputs = self.model(self.task.model_inputs(batch), training=True)
      loss, stats = self.task.loss(outputs, batch, denominators)
      scaled = self.optimizer.scale_loss(loss) if self.loss_scale else loss
    grads = tape.gradient(scaled, tvars)
    # None stays None: a variable the loss does not read (the pooler under the span head)
    # is left alone by the optimizer, no weight decay either, as by the original's.
    grads = [tf.convert_to_tensor(g) if isinstance(g, tf.IndexedSlices) else g for g in grads]
    return grads, stats

  def _replica_train_step(self, micro_batches):
    """micro_batches: tuple (accumulation_steps) of dicts of per-replica batches."""
    ctx = tf.distribute.get_replica_context()
    dens = self.task.denominators(micro_batches[0])
    for b in micro_batches[1:]:
      dens = _sum_dicts(dens, self.task.denominators(b))
    dens = ctx.all_reduce(tf.distribute.ReduceOp.SUM, dens)
    grad_fn = self._grads_and_stats
    if self.use_xla:
      grad_fn = tf.function(grad_fn, jit_compile=True)

    def run(batch, present=None):
      """(gradients of the variables at `present`, stats); present: by default the indices
      of the variables that have a gradient (one the loss does not read has None)."""
      grads, stats = grad_fn(batch, dens)
      if present is None:
        present = [i for i, g in enumerate(grads) if g is not None]
      return [grads[i] for i in present], stats, present

    if len(micro_batches) == 1 or not all(v.shape.is_fully_defined()
                                          for b in micro_batches for v in b.values()):
      # One batch, or trimmed micro-batches (lengths known only when run): unrolled.
      grads, stats, present = run(micro_batches[0])
      for batch in micro_batches[1:]:
        more_grads, more_stats, _ = run(batch, present)
        grads = [g + h for g, h in zip(grads, more_grads)]
        stats = _sum_dicts(stats, more_stats)
    else:
      stacked = {k: tf.stack([b[k] for b in micro_batches]) for k in micro_batches[0]}
      grads, stats, present = run({k: v[0] for k, v in stacked.items()})
      for i in tf.range(1, len(micro_batches)):
        more_grads, more_stats, _ = run({k: v[i] for k, v in stacked.items()}, present)
        grads = [g + h for g, h in zip(grads, more_grads)]
        stats = _sum_dicts(stats, more_stats)
    tvars = self.model.trainable_variables
    self.optimizer.apply(grads, [tvars[i] for i in present])
    return stats

  def _replica_eval_step(self, batch):
    outputs = self.model(self.task.model_inputs(batch), training=False)
    return self.task.eval_stats(outputs, batch)

  # -- compiled loops -------------------------------------------------------

  def _build_train_loop(self):
    strategy = self.strategy

    @tf.function
    def train_loop(iterator, num_steps):
      """-> (the sums of the stats over the steps run, the first step whose loss is not
      finite or 0). The loop stops after that step: the loss, summed for logging anyway, is
      the one value checked each step (no extra pass over the gradients or a host sync)."""
      sums = {k: tf.constant(0.0) for k in self.task.train_stat_names}
      diverged = tf.constant(0, tf.int64)
      for _ in tf.range(num_steps):
        micro = tuple(next(iterator) for _ in range(self.accumulation_steps))
        per_replica = strategy.run(self._replica_train_step, args=(micro,))
        stats = {k: strategy.reduce(tf.distribute.ReduceOp.SUM, per_replica[k], axis=None)
                 for k in sums}
        sums = {k: sums[k] + stats[k] for k in sums}
        self.global_step.assign_add(1)
        if not tf.math.is_finite(stats["loss"]):
          diverged = tf.identity(self.global_step.read_value())
          break
      return sums, diverged

    return train_loop

  def _build_eval_loop(self):
    strategy = self.strategy

    @tf.function
    def eval_loop(iterator, num_steps):
      totals = {k: tf.constant(0.0) for k in self.task.eval_stat_names}
      for _ in tf.range(num_steps):
        per_replica = strategy.run(self._replica_eval_step, args=(next(iterator),))
        stats = {k: strategy.reduce(tf.distribute.ReduceOp.SUM, v, axis=None)
                 for k, v in per_replica.items()}
        stats = self.task.per_batch_eval(stats)
        totals = {k: totals[k] + stats[k] for k in totals}
      return totals

    return eval_loop

  # -- driver ---------------------------------------------------------------

  def train(self, dataset_fn, *, num_train_steps, steps_per_loop, output_dir,
            save_checkpoints_steps, keep_checkpoint_max=5, init_fn=None,
            global_batch_size, log_every_steps=100, flops_per_sequence=None, peak_flops=None,
            log_fn=None, eval_every_steps=0, eval_fn=None, diverged_hint=DIVERGED_HINT):
    """Trains to num_train_steps (global), resuming from output_dir.

    dataset_fn(input_context, skip_records_per_pipeline) -> per-replica batched
    dataset (see input_pipeline.training_dataset). init_fn() is called once when there is
    no checkpoint in output_dir (e.g. --init_checkpoint). The device runs at most
    steps_per_loop steps per call, and stops at every multiple of log_every_steps (0: no
    such stop) and of save_checkpoints_steps; after each call a progress line is logged
    (step, loss, the task's other stats, learning rate, examples/s, MFU when
    flops_per_sequence and peak_flops are given, ETA), the same values are written as
    TensorBoard scalars and passed to log_fn(step, stats) if given, and a checkpoint is
    saved at the save_checkpoints_steps multiples and at the end. Returns the final step.

    Evaluation during training (eval_every_steps > 0 and eval_fn given, e.g. an EvalHook):
    the device calls also stop at every multiple of eval_every_steps; there and at
    num_train_steps a checkpoint is saved, then eval_fn(step) is called, and training stops
    early when it returns True. On a resume, when eval_fn has them (EvalHook does), an
    evaluation that a kill skipped (a boundary step without eval_fn.evaluated(step)) is made
    first, and nothing is trained when eval_fn.stopped() (early stopping already happened).

    Divergence: the device call stops after the first step whose loss is not finite, and
    before every checkpoint the weights are checked (a finite loss with overflowing gradients
    makes them NaN). Either is a Diverged error (a ValueError: one `error:` line) naming the
    step, the last checkpoint kept and diverged_hint (what to change); nothing of the
    diverged weights is saved or evaluated.
    """
    if log_every_steps < 0:
      raise ValueError(f"--log_every_steps={log_every_steps}: must be >= 0")
    if eval_every_steps < 0:
      raise ValueError(f"--eval_every_steps={eval_every_steps}: must be >= 0")
    if eval_fn is None:
      eval_every_steps = 0
    else:
      eval_fn = _HintedEval(eval_fn, diverged_hint)
    chief = distribution.is_chief(self.strategy)
    directory = distribution.worker_dir(self.strategy, output_dir)
    tf.io.gfile.makedirs(directory)
    manager = training_checkpoints.make_checkpoint_manager(
        self._checkpoint(), directory, keep_checkpoint_max)
    # Every worker restores from the chief's directory.
    if not self.restore_latest(output_dir) and init_fn is not None:
      init_fn()
    step = int(self.global_step.numpy())
    if eval_every_steps and self._resume_evaluation(step, num_train_steps, eval_every_steps,
                                                    eval_fn):
      return step
    if step >= num_train_steps:
      logging.info("global step %d >= num_train_steps %d: nothing to train", step,
                   num_train_steps)
      return step
    iterator = iter(self._resumed_dataset(dataset_fn, step, global_batch_size))
    if self._train_loop is None:
      self._train_loop = self._build_train_loop()
    writer = (tf.summary.create_file_writer(output_dir) if chief
              else tf.summary.create_noop_writer())
    progress = Progress(step, num_train_steps, self.task.examples_name)
    seconds_per_step = None  # (of the last device call: a call is cut to about 30 s)
    while step < num_train_steps:
      n = steps_to_run(step, num_train_steps, steps_per_loop, log_every_steps,
                       save_checkpoints_steps, eval_every_steps)
      if seconds_per_step:
        n = max(1, min(n, int(progress_lib.Progress.LOG_INTERVAL_S // seconds_per_step)))
      start = time.perf_counter()
      with progress_lib.heartbeat(lambda s, first=step, n=n: (
          f"step {first}: a device call of {n} steps has run {s:.0f} s"
          + (" (tracing and compiling first)" if seconds_per_step is None else ""))):
        sums, diverged = self._train_loop(iterator, tf.constant(n, tf.int32))
      sums = {k: float(v.numpy()) for k, v in sums.items()}
      elapsed = time.perf_counter() - start
      previous, step = step, int(self.global_step.numpy())
      seconds_per_step = elapsed / max(step - previous, 1)
      stats = self._loop_stats(sums, step - previous, elapsed, global_batch_size,
                               flops_per_sequence, peak_flops)
      logging.info("%s", progress.line(step, stats))
      if int(diverged.numpy()):
        raise self._diverged(step, f"its loss is {sums['loss']}", output_dir, diverged_hint)
      if log_fn is not None:
        log_fn(step, stats)
      write_scalars(writer, step, stats)
      evaluate = _is_eval_step(step, num_train_steps, eval_every_steps)
      if evaluate or step == num_train_steps or (save_checkpoints_steps and
                                                 step % save_checkpoints_steps == 0):
        if not self._weights_finite():
          raise self._diverged(step, "its loss was finite but the weights after it are not "
                               "(its gradients overflowed)", output_dir, diverged_hint)
        path = manager.save(checkpoint_number=step)
        if chief:
          logging.info("Saved checkpoint %s", path)
      if evaluate and eval_fn(step):
        logging.info("Early stopping at step %d", step)
        break
    if not chief:
      tf.io.gfile.rmtree(directory)
    return step

  def _weights_finite(self):
    """Whether every trainable weight is finite (one pass over them, on the device; run
    before a checkpoint only, not every step)."""
    if self._finite_check is None:
      variables = self.model.trainable_variables

      @tf.function
      def finite():
        return tf.reduce_all(tf.stack([tf.reduce_all(tf.math.is_finite(v)) for v in variables]))

      self._finite_check = finite
    return bool(self._finite_check().numpy())

  @staticmethod
  def _diverged(step, what, directory, hint):
    """The Diverged error of a run that diverged at `step` (`what` happened there)."""
    last = training_checkpoints.latest_checkpoint(directory, warn=False)
    kept = (f"the last checkpoint, {os.path.basename(last)} in {directory}, is kept" if last
            else "no checkpoint was written")
    return Diverged(f"training diverged at step {step}: {what}. Its weights were not saved "
                    f"({kept}). {hint}")

  @staticmethod
  def _resume_evaluation(step, num_train_steps, eval_every_steps, eval_fn):
    """At the start of train(): makes the evaluation of `step` when it is an evaluation step
    that eval_fn has not recorded (a kill between the checkpoint and the evaluation); True
    when training must not go on (eval_fn says it stopped early)."""
    evaluated = getattr(eval_fn, "evaluated", lambda step: True)  # (a plain callable: no
    stopped = getattr(eval_fn, "stopped", lambda: False)            # memory of past runs)
    if (step and _is_eval_step(step, num_train_steps, eval_every_steps) and
        not evaluated(step)):
      logging.info("Evaluating step %d (its evaluation is missing)", step)
      if eval_fn(step):
        return True
    if stopped():
      logging.info("Early stopping already happened (see the history): nothing to train")
      return True
    return False

  def _checkpoint(self):
    """A tf.train.Checkpoint of model, optimizer and step (training_checkpoints)."""
    return training_checkpoints.make_checkpoint(self.model, self.optimizer, self.global_step,
                                                self.variable_names)

  def _resumed_dataset(self, dataset_fn, step, global_batch_size):
    """The distributed dataset of dataset_fn, each input pipeline skipping the records that
    the `step` steps before a resumed checkpoint consumed."""
    replicas = self.strategy.num_replicas_in_sync

    def distributed_fn(input_context):
      per_pipeline_replicas = replicas // input_context.num_input_pipelines
      per_replica = global_batch_size // (replicas * self.accumulation_steps)
      records = step * self.accumulation_steps * per_replica * per_pipeline_replicas
      if records:
        logging.info("Resuming the input at step %d: skipping %d records per input "
                     "pipeline", step, records)
      return dataset_fn(input_context, records)

    return self.strategy.distribute_datasets_from_function(distributed_fn)

  def _loop_stats(self, sums, steps, elapsed, global_batch_size, flops_per_sequence,
                  peak_flops):
    """The logged values of one device call of `steps` steps that took `elapsed` seconds:
    the task's summarize_train, learning_rate (of the next update), sequences_per_sec and,
    given the FLOPs figures, mfu (model FLOPs utilisation, a fraction)."""
    stats = self.task.summarize_train(sums, steps)
    stats["learning_rate"] = float(self.optimizer.learning_rate)
    seq_per_s = steps * global_batch_size / max(elapsed, 1e-9)
    stats["sequences_per_sec"] = seq_per_s
    if flops_per_sequence and peak_flops:
      stats["mfu"] = seq_per_s * flops_per_sequence / (
          peak_flops * self.strategy.num_replicas_in_sync)
    return stats

  def restore_latest(self, output_dir):
    """Restores model, optimizer and step from the newest checkpoint in output_dir;
    returns its path, or None when there is none. Weights that are not finite (a diverged
    run's) are a CheckpointError naming the checkpoint, for a resumed run as for evaluation."""
    latest = training_checkpoints.latest_checkpoint(output_dir)
    if latest:
      logging.info("Restoring from %s", latest)
      self._checkpoint().restore(latest).assert_existing_objects_matched()
      training_checkpoints.check_finite_weights(self.model, latest)
    return latest

  def evaluate(self, dataset_fn, num_steps):
    """Runs num_steps eval batches; returns the task's summed eval statistics."""
    dataset = self.strategy.distribute_datasets_from_function(dataset_fn)
    if self._eval_loop is None:
      self._eval_loop = self._build_eval_loop()
    totals = self._eval_loop(iter(dataset), tf.constant(num_steps, tf.int32))
    return {k: v.numpy() for k, v in totals.items()}


# ----------------------------------------------------------------------------
# Progress.

def steps_to_run(step, num_train_steps, steps_per_loop, log_every_steps,
                 save_checkpoints_steps, eval_every_steps=0):
  """The number of steps of the next device call from `step`: at most steps_per_loop, ending
  at num_train_steps or at the next multiple of log_every_steps, of save_checkpoints_steps
  or of eval_every_steps (0: no such boundary), whichever comes first."""
  end = min(num_train_steps, step + steps_per_loop)
  for every in (log_every_steps, save_checkpoints_steps, eval_every_steps):
    if every > 0:
      end = min(end, (step // every + 1) * every)
  return end - step


def _is_eval_step(step, num_train_steps, eval_every_steps):
  """Whether train() evaluates after `step`: a multiple of eval_every_steps or the last step
  (never when eval_every_steps is 0)."""
  return bool(eval_every_steps) and (step % eval_every_steps == 0 or step == num_train_steps)


# The stats that every progress line shows in its own place (the task's others follow loss).
_LOOP_STATS = ("loss", "learning_rate", "sequences_per_sec", "mfu")


class Progress(progress_lib.Progress):
  """The progress lines of one train() call. The ETA extrapolates the rate measured since
  the end of the first device call (which includes tracing and compilation), or that of the
  first call while it is the only one."""

  def __init__(self, step, num_train_steps, examples_name="examples"):
    super().__init__(num_train_steps, live=False)
    self.restart(step)
    self.examples_name = examples_name
    self._first = True

  def line(self, step, stats):
    """E.g. "step = 100, loss = 0.61234, learning_rate = 1.9e-05, examples/s = 45.1,
    ETA 0:01:23 (100 of 343 steps)"; the task's other stats (e.g. masked_lm_accuracy)
    follow the loss, and "mfu = 12.34%" the examples/s when measured."""
    parts = [f"step = {step}", f"loss = {stats['loss']:.5f}"]
    parts += [f"{k} = {v:.4f}" for k, v in stats.items() if k not in _LOOP_STATS]
    parts += [f"learning_rate = {stats['learning_rate']:.4g}",
              f"{self.examples_name}/s = {stats['sequences_per_sec']:.1f}"]
    if "mfu" in stats:
      parts.append(f"mfu = {100.0 * stats['mfu']:.2f}%")
    parts.append(f"ETA {self.eta(step)} ({step} of {self.total} steps)")
    if self._first:
      self._first = False
      self.restart(step)
    return ", ".join(parts)


def write_scalars(writer, step, values):
  """TensorBoard scalar summaries without needing the tensorboard package
  (tf.summary.write with the "scalars" plugin metadata, as tf.summary.scalar)."""
  metadata = summary_pb2.SummaryMetadata()
  metadata.plugin_data.plugin_name = "scalars"
  with writer.as_default(step=step):
    for key, value in values.items():
      tf.summary.write(key, tf.constant(float(value), tf.float32), metadata=metadata)
  writer.flush()


# ----------------------------------------------------------------------------
# Evaluation during training.

class EvalHook:
  """Trainer.train's eval_fn: evaluation every N steps with a history, the best model kept
  and early stopping.

  hook(step) calls evaluate(step) -> {name: number} (the metrics, e.g. eval_accuracy,
  eval_loss, global_step), logs them, and on the chief writes them as TensorBoard scalars
  under <output_dir>/eval (as the Estimator did) and appends them as one JSON object
  ({"global_step": step, name: value, ...}) to <output_dir>/eval_history.jsonl (rewritten
  atomically; an entry for a step at or after `step`, left by a killed run, is replaced).
  When metrics[metric_name] beats (>) the best so far, save_best(directory) writes the model
  into a temporary directory that also gets the metrics as eval_results.txt and is then
  renamed <output_dir>/best. Returns True (stop) when `patience` > 0 and the metric has not
  improved for `patience` evaluations. A resumed run reads the history back and the best
  value from best/eval_results.txt.
  """

  HISTORY = "eval_history.jsonl"
  BEST = "best"

  def __init__(self, evaluate, output_dir, *, metric_name="eval_accuracy", patience=0,
               save_best=None, chief=True):
    if patience < 0:
      raise ValueError(f"--early_stopping_patience={patience}: must be >= 0")
    self.evaluate, self.output_dir, self.metric_name = evaluate, output_dir, metric_name
    self.patience, self.save_best, self.chief = patience, save_best, chief
    self.best_dir = os.path.join(output_dir, self.BEST)
    self.history = read_eval_history(output_dir)
    if chief:
      _recover_best_dir(self.best_dir)
    self.best_value = best_metric(output_dir, metric_name)
    self._writer = None

  def evaluated(self, step):
    """Whether the history holds an evaluation of `step`."""
    return any(entry["global_step"] == step for entry in self.history)

  def stopped(self):
    """Whether the history ends with `patience` evaluations without improvement."""
    return bool(self.patience) and self._since_improvement() >= self.patience

  def _since_improvement(self):
    best, since = None, 0
    for entry in self.history:
      value = entry.get(self.metric_name)
      if value is not None and math.isfinite(value) and (best is None or value > best):
        best, since = value, 0
      else:
        since += 1
    return since

  def __call__(self, step):
    raw = {**self.evaluate(step), "global_step": int(step)}  # as eval_results.txt shows them
    metrics = {k: _json_number(v) for k, v in raw.items()}
    if self.metric_name not in metrics:
      raise ValueError(f"the evaluation gives no {self.metric_name} (it gives "
                       f"{sorted(metrics)})")
    value = metrics[self.metric_name]
    _refuse_non_finite(step, metrics)
    # A non-finite metric (e.g. a correlation of constant predictions) is never the best.
    improved = math.isfinite(value) and (self.best_value is None or value > self.best_value)
    logging.info("Evaluation at step %d: %s%s", step, ", ".join(
        f"{k} = {v:.6g}" for k, v in sorted(metrics.items()) if k != "global_step"),
        " (best so far)" if improved else " (best %s = %s)" % (
            self.metric_name, "none" if self.best_value is None else f"{self.best_value:.6g}"))
    self.history = [e for e in self.history if e["global_step"] < step] + [metrics]
    if self.chief:
      if self._writer is None:
        self._writer = tf.summary.create_file_writer(os.path.join(self.output_dir, "eval"))
      write_scalars(self._writer, step,
                    {k: v for k, v in metrics.items() if k != "global_step"})
      if improved and self.save_best is not None:
        self._write_best(raw)
      file_io.write_text_atomic(os.path.join(self.output_dir, self.HISTORY), "".join(
          json.dumps(e, sort_keys=True) + "\n" for e in self.history))
    if improved:
      self.best_value = value
    return self.stopped()

  def _write_best(self, metrics):
    with file_io.replaced_directory(self.best_dir) as tmp:
      self.save_best(tmp)
      model_files.copy_model_files(self.output_dir, tmp)  # best/ is a model directory too
      file_io.write_text_atomic(os.path.join(tmp, "eval_results.txt"),
                                outputs.format_results(metrics))
    metrics = {k: _json_number(v) for k, v in metrics.items()}
    logging.info("Saved the best model (step %d, %s = %.6g) in %s", metrics["global_step"],
                 self.metric_name, metrics[self.metric_name], self.best_dir)


def _refuse_non_finite(step, metrics):
  """A Diverged error when an evaluation's loss (a metric named loss or *_loss) is not
  finite: the model's outputs overflow (its weights were checked before the checkpoint)."""
  bad = {k: v for k, v in sorted(metrics.items()) if not math.isfinite(v)}
  if any(k == "loss" or k.endswith("_loss") for k in bad):
    raise Diverged(f"training diverged at step {step}: its evaluation gives "
                   f"{', '.join(f'{k} = {v}' for k, v in bad.items())} (the model's outputs "
                   "overflow); it is not kept as best/.")


def _json_number(value):
  """A metric (Python or NumPy number) -> int or float."""
  if isinstance(value, (int, np.integer)) and not isinstance(value, bool):
    return int(value)
  return float(value)


def _recover_best_dir(best_dir):
  """A kill while best/ was being replaced: file_io.recover_replaced_directory (the chief
  holds the output directory's lock)."""
  file_io.recover_replaced_directory(best_dir, log=logging.info)


def read_eval_history(output_dir):
  """The entries (dicts) of <output_dir>/eval_history.jsonl, in order; [] without it."""
  path = os.path.join(output_dir, EvalHook.HISTORY)
  if not tf.io.gfile.exists(path):
    return []
  with tf.io.gfile.GFile(path) as f:
    return [json.loads(line) for line in f if line.strip()]


def read_results(path):
  """An eval_results.txt ("key = value" lines) -> {key: value string}."""
  with tf.io.gfile.GFile(path) as f:
    return dict(line.rstrip("\n").split(" = ", 1) for line in f if " = " in line)


def best_metric(output_dir, metric_name):
  """metric_name's value (float) in <output_dir>/best/eval_results.txt, or None."""
  path = os.path.join(output_dir, EvalHook.BEST, "eval_results.txt")
  if not tf.io.gfile.exists(path):
    return None
  text = read_results(path).get(metric_name)
  if text is None:
    return None
  # A float32 metric (the original's) is written as its shortest repr: read it back as the
  # same float32, to compare equal to a re-evaluation (a float64 one is exact as it is).
  single = np.float32(text)
  value = float(single) if str(single) == text else float(text)
  return value if math.isfinite(value) else None  # (a NaN best: any finite value beats it)


# ----------------------------------------------------------------------------
# What the run_* scripts call.

def train_steps(training, count, rows="rows"):
  """(num_train_steps, num_warmup_steps) of --do_train over `count` training rows (called
  `rows` in the message: windows, pairs, queries), int(count / --train_batch_size x
  --num_train_epochs) and --warmup_proportion of them; (None, None) without --do_train; 0
  steps is a ValueError naming the flags."""
  if not training.do_train:
    return None, None
  num_train_steps = int(count / training.train_batch_size * training.num_train_epochs)
  if num_train_steps < 1:
    raise ValueError(
        f"--num_train_epochs={training.num_train_epochs}: {count} training {rows} / "
        f"--train_batch_size={training.train_batch_size} x epochs gives 0 training steps")
  return num_train_steps, int(num_train_steps * training.warmup_proportion)


def check_training_numbers(training):
  """The run_* scripts' training numbers, checked before a model is built: a ValueError naming
  the flag (a negative learning rate would train away from the data; a negative
  --save_checkpoints_steps would never reach a checkpoint boundary; --warmup_proportion
  outside [0, 1] would warm up past the end of training or not at all)."""
  if not training.learning_rate > 0:
    raise ValueError(f"--learning_rate={training.learning_rate}: must be > 0")
  option_checks.check(training, {option_checks.NON_NEGATIVE: (
      "save_checkpoints_steps", "log_every_steps", "keep_checkpoint_max", "eval_every_steps",
      "early_stopping_patience", "num_warmup_steps")})
  proportion = training.warmup_proportion
  if proportion is not None and not 0 <= proportion <= 1:
    raise ValueError(f"--warmup_proportion={proportion}: must be in [0, 1] (the fraction of "
                     "the training steps that warm the learning rate up)")


def build_trainer(training, strategy, make_model, task, num_train_steps, num_warmup_steps):
  """A run_* script's Trainer, as its options say: sets the Keras dtype policy
  (training.dtype), then under strategy.scope() builds make_model() and the optimizer
  (training.optimizer: AdamWeightDecay or LAMB, at training.learning_rate with
  num_warmup_steps of linear warmup then linear decay to 0 at num_train_steps; loss-scaled
  for float16). The Trainer accumulates training.gradient_accumulation_steps micro-batches
  per step, compiles with XLA as training.use_xla says (None: on GPU/TPU only) and saves
  the model variables under their TF1 names. Its .model and .optimizer are the built ones.
  When the task does not read the outputs at the padding (Task.reads_padding), the encoder
  skips the padding (BertModel.skip_padding), except under XLA or on TPUs."""
  check_training_numbers(training)
  if training.trim_train_batches and isinstance(
      strategy, tf.distribute.TPUStrategy):
    raise ValueError("--trim_train_batches: not on TPU, where every step must have one shape")
  distribution.set_dtype_policy(training.dtype)
  with strategy.scope():
    model = make_model()
    optimizer = optimization.create_optimizer(training.learning_rate, num_train_steps,
                                              num_warmup_steps,
                                              optimizer_type=training.optimizer)
    if training.dtype == "float16":
      optimizer = keras.optimizers.LossScaleOptimizer(optimizer)
  use_xla = training.use_xla
  if use_xla is None:
    use_xla = distribution.default_use_xla(strategy)
  if not task.reads_padding and not use_xla and not isinstance(
      strategy, tf.distribute.TPUStrategy):  # (XLA and TPUs need static shapes)
    model.bert.skip_padding = True
    logging.info("The encoder computes on the real tokens only (BertModel.skip_padding)")
  return Trainer(strategy, model, optimizer, task,
                 accumulation_steps=training.gradient_accumulation_steps, use_xla=use_xla,
                 loss_scale=training.dtype == "float16",
                 variable_names=checkpoints.tf1_variable_map(model))


def fine_tune(trainer, training, train_file, decode_fn, num_train_steps, **extra):
  """The fine-tuning scripts' training (run_classifier, run_squad): the records of
  train_file decoded by decode_fn, training.train_batch_size sequences a step (split over the
  replicas and training.gradient_accumulation_steps micro-batches), num_train_steps steps,
  warm-started from training.init_checkpoint, checkpoints in training.output_dir (resumed
  when there); a progress line every training.log_every_steps steps; with
  training.trim_train_batches each batch cut to its longest sequence
  (input_pipeline.trim_to_longest). extra: more Trainer.train arguments (eval_every_steps,
  eval_fn)."""
  per_replica = input_pipeline.per_replica_batch_size(
      training.train_batch_size, trainer.strategy, training.gradient_accumulation_steps,
      "--train_batch_size")
  trim = training.trim_train_batches

  def dataset(input_context, skip_records):
    return input_pipeline.training_dataset([train_file], decode_fn, per_replica, input_context,
                                           seed=training.seed, skip_records=skip_records,
                                           trim=trim)

  train_as_configured(trainer, dataset, training, num_train_steps, **extra)


def train_as_configured(trainer, dataset_fn, training, num_train_steps, **extra):
  """trainer.train on the scripts' training flags: training.iterations_per_loop steps a device
  call, checkpoints every training.save_checkpoints_steps in training.output_dir (resumed when
  there, else warm-started from training.init_checkpoint), training.train_batch_size sequences a
  step, a progress line every training.log_every_steps steps. extra: more Trainer.train
  arguments (run_pretraining's flops_per_sequence, peak_flops; eval_every_steps, eval_fn).
  A diverged run is a Diverged error naming the flags to change (diverged_hint)."""
  trainer.train(dataset_fn, num_train_steps=num_train_steps,
                steps_per_loop=training.iterations_per_loop, output_dir=training.output_dir,
                save_checkpoints_steps=training.save_checkpoints_steps,
                keep_checkpoint_max=training.keep_checkpoint_max,
                init_fn=lambda: training_checkpoints.warm_start(trainer.model,
                                                                training.init_checkpoint),
                global_batch_size=training.train_batch_size,
                log_every_steps=training.log_every_steps,
                diverged_hint=diverged_hint(training), **extra)


def diverged_hint(training):
  """What a diverged run of these settings should change: a lower --learning_rate, smaller
  --class_weights when given, --dtype=float32 for float16 (whose range overflows), and how to
  rerun into the same --output_dir (whose changed options are refused otherwise)."""
  changes = [f"a lower --learning_rate (now {training.learning_rate:g})"]
  if training.class_weights:
    changes.append(f"smaller --class_weights (now {training.class_weights})")
  if training.dtype == "float16":
    changes.append("--dtype=float32 or bfloat16")
  if len(changes) > 1:
    changes[-2:] = [f"{changes[-2]} or {changes[-1]}"]
  return (f"Try {', '.join(changes)}, rerunning with --overwrite_output_dir or another "
          "--output_dir.")


def restore_best(training, trainer):
  """--do_eval / --do_predict use output_dir/best (the best of the evaluations during
  training) when it exists: its weights and step are loaded into trainer. Logs which."""
  best = os.path.join(training.output_dir, EvalHook.BEST)
  results = os.path.join(best, "eval_results.txt")
  if not tf.io.gfile.exists(results):
    if training.eval_every_steps:
      logging.info("No %s: evaluating/predicting with the final weights", best)
    return
  checkpoints.load_checkpoint(trainer.model, best)
  step = int(read_results(results)["global_step"])
  trainer.global_step.assign(step)
  logging.info("Evaluating/predicting with the best model of the evaluations during training: "
               "%s (step %d)", best, step)
