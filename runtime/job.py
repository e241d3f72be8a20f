"""A run_* script's job, the skeleton the scripts share (run_classifier, run_ner, run_squad,
run_embeddings, run_reranker; run_pretraining uses started), on their typed settings
(runtime/settings.py); the flags' first checks are option_checks.check_start's:

  with started(run, config, kind, strategy) as run_dir:
                                 seeded, the strategy built, --output_dir made and locked, the
                                 model files written (model_dir.prepare)
  train_or_restore(run, trainer, train)
                                 --do_train trains; else the model is restored from
                                 --output_dir / --init_checkpoint; eval and predict use best/
  eval_during_training(training, evaluate, metric_name, chief, model)
                                 the Trainer.train arguments of --eval_every_steps"""

import collections
import contextlib
import os

import keras

from bert_keras import checkpoints
from bert_keras.runtime import distribution
from bert_keras.runtime import model_dir
from bert_keras.runtime import outputs
from bert_keras.runtime import training as training_lib
from bert_keras.runtime import training_checkpoints


# What started() yields: the strategy, where the chief's records go (a private temporary
# directory on the other workers) and whether this worker is the chief.
RunDir = collections.namedtuple("RunDir", ["strategy", "record_dir", "chief"])


@contextlib.contextmanager
def started(run, config, kind, strategy=None, labels=None, **task_options):
  """A run under way: the random seed set (--seed: the initial weights and dropout), the
  strategy built (distribution.strategy_for: `strategy` when given), --output_dir made and
  locked for the run, the model files written (model_dir.prepare: task.json of `kind` with
  `labels` and `task_options`). Yields a RunDir. run: a settings.RunSettings."""
  keras.utils.set_random_seed(run.training.seed)
  strategy = distribution.strategy_for(run.placement, strategy)
  with outputs.output_directory(strategy, run.output.output_dir) as record_dir:
    chief = distribution.is_chief(strategy)
    model_dir.prepare(run, chief, config, kind, labels, **task_options)
    yield RunDir(strategy, record_dir, chief)


def train_or_restore(run, trainer, train):
  """--do_train: train() (it trains the trainer); else the weights of --output_dir's newest
  checkpoint, or of --init_checkpoint. Then, for --do_eval or --do_predict, best/ when an
  evaluation during training kept one (training.restore_best)."""
  if run.training.do_train:
    train()
  else:
    training_checkpoints.restore_for_inference(trainer, run.output.output_dir,
                                               run.model.init_checkpoint)
  if run.evaluation.do_eval or run.evaluation.do_predict:
    training_lib.restore_best(run.training, trainer)


def eval_during_training(training, evaluate, metric_name, chief, model):
  """--eval_every_steps: the Trainer.train arguments that call evaluate(step) (the results
  dict) every so many steps, keep the best model by metric_name in output_dir/best (its
  weights under the original's names: checkpoints.save_tf1_checkpoint of `model`) and stop
  after --early_stopping_patience evaluations without improvement (training.EvalHook); {}
  when --eval_every_steps is 0. training: a settings.Training."""
  if not training.eval_every_steps:
    return {}
  hook = training_lib.EvalHook(
      evaluate, training.output_dir, metric_name=metric_name,
      patience=training.early_stopping_patience, chief=chief,
      save_best=lambda directory: checkpoints.save_tf1_checkpoint(
          model, os.path.join(directory, "model.ckpt")))
  return {"eval_every_steps": training.eval_every_steps, "eval_fn": hook}
