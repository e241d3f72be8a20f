"""What a run_* script hands to the runtime: its flags turned, once, into small typed objects.
The script builds them itself from its flags' values:

  flags = settings.values_of(options)
  run = settings.RunSettings(**settings.parts(flags))
  tagging = Tagging(**settings.fields(Tagging, flags))

(from_flags(options) does the same in one call, for tests and benchmarks). The runtime takes
these, never the flags namespace.

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


def fields(kind, flags):
  """{field: value} of a `kind` dataclass (this module's, or a script's own) from the flags'
  values, {flag: value}: each field from the flag of its name; a field whose flag the script
  does not define keeps its default. The one way flags become typed objects:
  kind(**fields(kind, flags))."""
  return {field.name: flags[field.name] for field in dataclasses.fields(kind)
          if field.name in flags}


class FromFlags:
  """from_flags(options): kind(**fields(kind, values_of(options))) in one call. A script's own
  dataclass of its task flags inherits it too."""

  @classmethod
  def from_flags(cls, options):
    return cls(**fields(cls, values_of(options)))


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
    flags = values_of(options)
    return cls(flags["output_dir"], move_aside=bool(flags.get(MOVE_ASIDE, False)))


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
    return cls(**parts(values_of(options)))


def parts(flags):
  """RunSettings' parts from a training script's flags' values, {flag: value}:
  RunSettings(**parts(flags))."""
  return dict(model=ModelSource.from_flags(flags), output=OutputDir.from_flags(flags),
              placement=Placement.from_flags(flags), training=Training.from_flags(flags),
              evaluation=Evaluation.from_flags(flags),
              recorded=types.MappingProxyType(dict(flags)))
