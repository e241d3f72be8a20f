"""What a run_* script hands to the runtime: its flags turned, once, into small typed objects
(RunSettings.from_flags, and a script's own FromFlags dataclass). The runtime takes these,
never the flags namespace.

Each field bears its flag's name, so a runtime message names the flag the user gave
(f"--{field}"); option_checks.check reads these objects as it reads a namespace. A field with
a default belongs to a flag that some scripts do not define: the default is that script's
behaviour (no --trim_train_batches: batches stay padded)."""

import collections.abc
import dataclasses
import types
from typing import Mapping


def values_of(options):
  """{name: value} of parsed absl FLAGS, of a namespace (a script's options(), resolve_options)
  or of a mapping (a run's recorded options)."""
  if isinstance(options, collections.abc.Mapping):
    return options
  if hasattr(options, "flag_values_dict"):
    return options.flag_values_dict()
  return vars(options)


# The namespace attribute model_dir.check_rerun sets when --overwrite_output_dir moves the earlier
# run aside (OutputDir.from_flags reads it).
MOVE_ASIDE = "_move_aside"


def typed(kind, options, **more):
  """A `kind` dataclass (this module's, or a script's or a task's own) from the options' values
  of its fields' names (a field whose flag the script does not define keeps its default) and
  `more`: the one way flags become typed objects."""
  values = values_of(options)
  return kind(**{field.name: values[field.name] for field in dataclasses.fields(kind)
                 if field.name in values and field.name not in more}, **more)


class FromFlags:
  """A typed object's one way from flags: from_flags(options) takes each field from the flag of
  its name (typed). A script's own dataclass of its task flags inherits it too."""

  @classmethod
  def from_flags(cls, options):
    return typed(cls, options)


@dataclasses.dataclass(frozen=True)
class ModelSource(FromFlags):
  """Where the model comes from: --bert_config_file, --vocab_file (None where the script reads
  no text: run_pretraining), --do_lower_case, --init_checkpoint, --max_seq_length."""
  bert_config_file: str
  max_seq_length: int
  init_checkpoint: str | None = None
  vocab_file: str | None = None
  do_lower_case: bool = True


@dataclasses.dataclass(frozen=True)
class OutputDir:
  """--output_dir, and whether the earlier run there is moved aside first
  (--overwrite_output_dir, as model_dir.check_rerun decided)."""
  output_dir: str
  move_aside: bool = False

  @classmethod
  def from_flags(cls, options):
    values = values_of(options)
    return cls(values["output_dir"], move_aside=bool(values.get(MOVE_ASIDE, False)))


@dataclasses.dataclass(frozen=True)
class Placement(FromFlags):
  """Where the run computes: --distribution_strategy and the TPU flags
  (distribution.build_strategy)."""
  distribution_strategy: str | None = None
  use_tpu: bool = False
  tpu_name: str | None = None
  tpu_zone: str | None = None
  gcp_project: str | None = None
  master: str | None = None


@dataclasses.dataclass(frozen=True)
class Training(FromFlags):
  """How a run trains, evaluates during training and checkpoints (runtime/training.py)."""
  output_dir: str
  do_train: bool
  train_batch_size: int
  learning_rate: float
  optimizer: str
  dtype: str
  use_xla: bool | None
  gradient_accumulation_steps: int
  iterations_per_loop: int
  save_checkpoints_steps: int
  keep_checkpoint_max: int
  log_every_steps: int
  seed: int
  init_checkpoint: str | None = None
  num_train_epochs: float = 0.0        # (run_pretraining counts --num_train_steps instead)
  num_train_steps: int = 0
  warmup_proportion: float | None = None
  num_warmup_steps: int = 0
  trim_train_batches: bool = False
  eval_every_steps: int = 0
  early_stopping_patience: int = 0
  class_weights: str | None = None     # (named in a diverged run's advice)


@dataclasses.dataclass(frozen=True)
class Evaluation(FromFlags):
  """What a run evaluates and predicts after training, in batches of what size; with
  trim_eval_batches each batch cut to its longest row."""
  do_eval: bool = False              # (run_squad: predicts only)
  eval_batch_size: int | None = None
  do_predict: bool = False
  predict_batch_size: int | None = None
  trim_eval_batches: bool = False


@dataclasses.dataclass(frozen=True)
class RunSettings:
  """A run_* script's settings, by job, and its options as given (recorded: {flag: value},
  what run_options.json keeps: runtime/model_dir.prepare)."""
  model: ModelSource
  output: OutputDir
  placement: Placement
  training: Training
  evaluation: Evaluation
  recorded: Mapping

  @classmethod
  def from_flags(cls, options):
    """A training script's flags (after model_dir.resolve_options and its own checks)."""
    return cls(model=ModelSource.from_flags(options), output=OutputDir.from_flags(options),
               placement=Placement.from_flags(options),
               training=Training.from_flags(options),
               evaluation=Evaluation.from_flags(options),
               recorded=types.MappingProxyType(dict(values_of(options))))
