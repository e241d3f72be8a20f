"""The scripts' common option checks, written once as a table: required flags, files that must
exist, lower bounds, fractions, choices, flags that replace or need others. check(options,
table) raises the one-line ValueError naming the flag (utils/errors.py prints it as `error:
...`); a script keeps only its task-specific checks.

A table is a dict whose keys are the kinds below, checked in the table's order (a script's
order of messages when several flags are wrong), each kind's entries in their order:

  REQUIRED: {flag: None, or where else it may come from (e.g. MODEL_DIR)}
      "--flag is required" (+ " (or <where>)")
  EXISTING_FILES: (flag, ...)                  "--flag <path>: no such file" (unset: skipped)
  POSITIVE: (flag, ...)                        "--flag=<v>: must be >= 1"
  NON_NEGATIVE: (flag, ...)                    "--flag=<v>: must be >= 0"
  AT_LEAST: {flag: (minimum, why or None)}     "--flag=<v>: must be >= <minimum> (<why>)"
  ABOVE_ZERO: (flag, ...)                      "--flag=<v>: must be > 0" (a size, a scale)
  FRACTION: (flag, ...)                        "--flag=<v>: must be between 0 and 1" (open)
  PROPORTION: (flag, ...)                      "--flag=<v>: must be in [0, 1]" (closed)
  CHOICES: {flag: allowed values}              "--flag=<v>: one of a, b" (None allowed: unset)
  EXCLUSIVE: {flag: (flags it replaces, ...)}  "--flag replaces --a and --b: pass one or the
                                               other"
  REQUIRES: {flag: ((flags it needs, ...), why or None)}
      "--flag=<v> needs --a and --b (<why>)" ("--flag needs ..." for a boolean flag)
  SET_REQUIRES: {flag: (its default, (flags it needs, ...), why or None)}
      as REQUIRES, for a flag whose default is set (--threshold=0.5) and that does nothing
      without the others: checked when the flag was given (given_flags), whatever its value
      (--threshold=0.5 is refused as --threshold=0.7 is), and when its value is not None and
      differs from the default (a value that came from elsewhere)

A number flag whose value is None (not given, where the script allows that) is not checked;
an option the namespace lacks counts as None. NaN breaks every bound (it compares false with
every number, so it would pass a check written as `value < minimum`).

Which flags were given: parsed absl FLAGS know (a flag present on the command line); a
namespace says so in its GIVEN attribute (common_flags.make_options: the overrides;
runtime/model_dir.resolve_options: the command line's flags), else it is not known and only a
value other than the default counts as given.
"""

from bert_keras import tokenization
from bert_keras.utils import file_io

REQUIRED = "required"
EXISTING_FILES = "existing_files"
POSITIVE = "positive"
NON_NEGATIVE = "non_negative"
AT_LEAST = "at_least"
ABOVE_ZERO = "above_zero"
FRACTION = "fraction"
PROPORTION = "proportion"
CHOICES = "choices"
EXCLUSIVE = "exclusive"
REQUIRES = "requires"
SET_REQUIRES = "set_requires"

# The attribute of an options namespace holding the names of the flags given (a frozenset):
# the command line's, or make_options' overrides. Not an option (run_options.json skips it).
GIVEN = "_given"

# Where a model flag may come from instead (runtime/model_dir.py), for REQUIRED.
MODEL_DIR = "an --init_checkpoint or --output_dir that is a model directory"
MODEL_DIR_CHECKPOINT = "an --init_checkpoint that is a model directory"
# The REQUIRES entry of --eval_every_steps (run_classifier, run_ner).
EVAL_EVERY_STEPS = {"eval_every_steps": (("do_train", "do_eval"),
                                         "it evaluates on the dev set during training")}


def _flags(names):
  return " and ".join(f"--{name}" for name in names)


def _value(options, name):
  return getattr(options, name, None)


def _is_flag_values(options):
  return hasattr(options, "flag_values_dict") and hasattr(options, "__getitem__")


def given_flags(options):
  """The names of the flags given explicitly (a frozenset), or None when `options` does not
  say: parsed absl FLAGS, those present on the command line; a namespace, its GIVEN
  attribute."""
  if _is_flag_values(options):
    return frozenset(name for name in options if options[name].present)
  given = getattr(options, GIVEN, None)
  return None if given is None else frozenset(given)


def _required(options, name, where):
  if not _value(options, name):
    return f"--{name} is required" + (f" (or {where})" if where else "")


def _existing_file(options, name, _):
  value = _value(options, name)
  if value and not file_io.gfile.exists(value):
    return f"--{name} {value}: no such file"


def _at_least(options, name, spec):
  (minimum, why), value = spec, _value(options, name)
  if value is not None and not value >= minimum:
    return f"--{name}={value}: must be >= {minimum}" + (f" ({why})" if why else "")


def _above_zero(options, name, _):
  value = _value(options, name)
  if value is not None and not value > 0:
    return f"--{name}={value}: must be > 0"


def _fraction(options, name, _):
  value = _value(options, name)
  if value is not None and not 0 < value < 1:
    return f"--{name}={value}: must be between 0 and 1"


def _proportion(options, name, _):
  value = _value(options, name)
  if value is not None and not 0 <= value <= 1:
    return f"--{name}={value}: must be in [0, 1]"


def _choice(options, name, allowed):
  value = _value(options, name)
  if value not in allowed:
    return f"--{name}={value}: one of {', '.join(a for a in allowed if a is not None)}"


def _exclusive(options, name, others):
  if _value(options, name) and any(_value(options, other) for other in others):
    return f"--{name} replaces {_flags(others)}: pass one or the other"


def _needs(options, name, value, needed, why):
  if not all(_value(options, other) for other in needed):
    flag = f"--{name}" if value is True else f"--{name}={value}"
    return f"{flag} needs {_flags(needed)}" + (f" ({why})" if why else "")


def _requires(options, name, spec):
  (needed, why), value = spec, _value(options, name)
  if value:
    return _needs(options, name, value, needed, why)


def _set_requires(options, name, spec):
  default, needed, why = spec
  value, given = _value(options, name), given_flags(options)
  if (given is not None and name in given) or (value is not None and value != default):
    return _needs(options, name, value, needed, why)


# kind -> (its check of one flag: (options, name, spec) -> a message or None; None when the
# kind's entries are {flag: spec}, else the spec of every flag of its tuple).
_KINDS = {
    REQUIRED: (_required, None),
    EXISTING_FILES: (_existing_file, ()),
    POSITIVE: (_at_least, (1, None)),
    NON_NEGATIVE: (_at_least, (0, None)),
    AT_LEAST: (_at_least, None),
    ABOVE_ZERO: (_above_zero, ()),
    FRACTION: (_fraction, ()),
    PROPORTION: (_proportion, ()),
    CHOICES: (_choice, None),
    EXCLUSIVE: (_exclusive, None),
    REQUIRES: (_requires, None),
    SET_REQUIRES: (_set_requires, None),
}


def problems(options, table):
  """The messages of the entries of `table` that `options` (a namespace or parsed absl FLAGS)
  breaks, in the table's order (a generator: checks run as it is read)."""
  for kind, entries in table.items():
    if kind not in _KINDS:
      raise KeyError(f"not a kind of option check: {kind!r}")
    check_one, spec = _KINDS[kind]
    for name, entry in (entries.items() if spec is None else ((n, spec) for n in entries)):
      message = check_one(options, name, entry)
      if message:
        yield message


def check(options, table):
  """Raises the one-line ValueError of the first entry of `table` that `options` breaks."""
  for message in problems(options, table):
    raise ValueError(message)


def require_one(**jobs):
  """A ValueError in the original's words when none of the flags `jobs` ({flag: value}, in
  the script's order: do_train, do_eval, do_predict) is set."""
  if any(jobs.values()):
    return
  jobs = list(jobs)
  if len(jobs) == 3:  # (the original run_classifier's message, its quote marks as they are)
    raise ValueError(f"At least one of `{jobs[0]}`, `{jobs[1]}` or `{jobs[2]}' must be True.")
  raise ValueError(f"At least one of `{jobs[0]}` or `{jobs[1]}` must be True.")


# What a fine-tuning script requires (the model flags may come from a model directory).
FINE_TUNING_REQUIRED = dict(data_dir=None, vocab_file=MODEL_DIR, bert_config_file=MODEL_DIR,
                            output_dir=None)


def check_start(options, required=FINE_TUNING_REQUIRED, jobs=("do_train", "do_eval",
                                                              "do_predict")):
  """The checks a fine-tuning script's flags start with, in the original's order: the
  `required` flags (REQUIRED's entries), --do_lower_case against the checkpoint's name
  (tokenization.validate_case_matches_checkpoint) and at least one of `jobs` (require_one)."""
  check(options, {REQUIRED: required})
  tokenization.validate_case_matches_checkpoint(options.do_lower_case, options.init_checkpoint)
  require_one(**{job: getattr(options, job) for job in jobs})
