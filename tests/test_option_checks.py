"""runtime/option_checks.py: each kind's one-line message, the table's order, unset values."""

import types

import pytest

from bert_keras.runtime import option_checks as checks


def error(table, **options):
  with pytest.raises(ValueError) as e:
    checks.check(types.SimpleNamespace(**options), table)
  return str(e.value)


def test_each_kind_names_the_flag_in_one_line(tmp_path):
  there = tmp_path / "vocab.txt"
  there.write_text("[CLS]\n")
  missing = tmp_path / "none.txt"
  assert error({checks.REQUIRED: {"data_dir": None}}, data_dir=None) == "--data_dir is required"
  assert error({checks.REQUIRED: {"vocab_file": checks.MODEL_DIR}}, vocab_file="") == (
      "--vocab_file is required (or an --init_checkpoint or --output_dir that is a model "
      "directory)")
  assert error({checks.EXISTING_FILES: ("a", "b")}, a=str(there), b=str(missing)) == (
      f"--b {missing}: no such file")
  assert error({checks.POSITIVE: ("batch_size",)}, batch_size=0) == (
      "--batch_size=0: must be >= 1")
  assert error({checks.NON_NEGATIVE: ("steps",)}, steps=-2) == "--steps=-2: must be >= 0"
  assert error({checks.AT_LEAST: {"max_seq_length": (3, "[CLS] a [SEP]")}},
               max_seq_length=2) == "--max_seq_length=2: must be >= 3 ([CLS] a [SEP])"
  for value in (0, 1, 1.5):
    assert error({checks.FRACTION: ("threshold",)}, threshold=value) == (
        f"--threshold={value}: must be between 0 and 1")
  assert error({checks.CHOICES: {"format": (None, "a", "b")}}, format="c") == (
      "--format=c: one of a, b")
  assert error({checks.EXCLUSIVE: {"tfds_name": ("train_file", "predict_file")}},
               tfds_name="squad", train_file=None, predict_file="p.json") == (
      "--tfds_name replaces --train_file and --predict_file: pass one or the other")
  assert error({checks.REQUIRES: checks.EVAL_EVERY_STEPS}, eval_every_steps=2, do_train=True,
               do_eval=False) == ("--eval_every_steps=2 needs --do_train and --do_eval (it "
                                  "evaluates on the dev set during training)")
  assert error({checks.REQUIRES: {"tune": (("do_eval",), None)}}, tune=True) == (
      "--tune needs --do_eval")
  assert error({checks.SET_REQUIRES: {"threshold": (0.5, ("multi_label",), "why")}},
               threshold=0.7, multi_label=False) == "--threshold=0.7 needs --multi_label (why)"


def test_nan_breaks_every_bound():
  """NaN compares false with every number: a bound written as `value < minimum` let it pass
  (--min_agreement=nan switched the int8 gate off). Every bound kind refuses it."""
  nan = float("nan")
  assert error({checks.POSITIVE: ("n",)}, n=nan) == "--n=nan: must be >= 1"
  assert error({checks.NON_NEGATIVE: ("n",)}, n=nan) == "--n=nan: must be >= 0"
  assert error({checks.FRACTION: ("f",)}, f=nan) == "--f=nan: must be between 0 and 1"
  for value in (nan, -0.5, 1.01):
    assert error({checks.PROPORTION: ("p",)}, p=value) == f"--p={value}: must be in [0, 1]"
  checks.check(types.SimpleNamespace(p=0.0, q=1.0), {checks.PROPORTION: ("p", "q")})
  for value in (nan, 0, -1e-9):
    assert error({checks.ABOVE_ZERO: ("s",)}, s=value) == f"--s={value}: must be > 0"
  checks.check(types.SimpleNamespace(s=1e-9, t=None), {checks.ABOVE_ZERO: ("s", "t")})


def test_what_passes():
  options = types.SimpleNamespace(
      a="x", n=1, z=0, f=0.5, unset=None, choice=None, tfds_name=None, data_dir="d",
      eval_every_steps=0, do_train=True, do_eval=True, tune=True)
  checks.check(options, {
      checks.REQUIRED: {"a": None}, checks.EXISTING_FILES: ("unset", "absent"),
      checks.POSITIVE: ("n", "unset", "absent"), checks.NON_NEGATIVE: ("z",),
      checks.FRACTION: ("f", "unset"), checks.CHOICES: {"choice": (None, "x")},
      checks.EXCLUSIVE: {"tfds_name": ("data_dir",)}, checks.REQUIRES: {
          "eval_every_steps": (("absent",), None), "tune": (("do_train", "do_eval"), None)},
      checks.SET_REQUIRES: {"f": (0.5, ("absent",), None), "unset": (1, ("absent",), None),
                            "a": ("y", ("n",), None)}})
  assert list(checks.problems(options, {})) == []


def test_a_flag_given_at_its_default_is_judged_as_given():
  """SET_REQUIRES: a flag given (on the command line: absl's `present`; a namespace of
  make_options: its overrides) is checked whatever its value, its default included; a flag
  not given is checked only when its value differs from the default."""
  from absl import flags

  from bert_keras.runtime import common_flags

  def define(fv=flags.FLAGS):
    flags.DEFINE_float("threshold", 0.5, "", flag_values=fv)
    flags.DEFINE_bool("multi_label", False, "", flag_values=fv)
    flags.DEFINE_string("label_separator", ",", "", flag_values=fv)

  table = {checks.SET_REQUIRES: {"threshold": (0.5, ("multi_label",), "why"),
                                 "label_separator": (",", ("multi_label",), None)}}
  for argv, expected in ((["--threshold=0.5"], ["--threshold=0.5 needs --multi_label (why)"]),
                         (["--label_separator=,", "--threshold=0.5"],
                          ["--threshold=0.5 needs --multi_label (why)",
                           "--label_separator=, needs --multi_label"]),
                         (["--threshold=0.5", "--multi_label"], []), ([], [])):
    fv = flags.FlagValues()
    define(fv=fv)
    fv(["prog"] + argv)
    assert checks.given_flags(fv) == {a[2:].split("=")[0] for a in argv}
    assert list(checks.problems(fv, table)) == expected
  defaults = common_flags.flag_defaults(define)
  given = common_flags.make_options(defaults, {"threshold": 0.5})
  assert checks.given_flags(given) == {"threshold"}
  assert list(checks.problems(given, table)) == ["--threshold=0.5 needs --multi_label (why)"]
  assert list(checks.problems(common_flags.make_options(defaults, {}), table)) == []
  # Options copied from another namespace (options(**vars(o), ...)) keep what it was given,
  # plus the values changed: copied defaults are not given.
  copied = common_flags.make_options(defaults, {**vars(common_flags.make_options(
      defaults, {"label_separator": ","})), "multi_label": True})
  assert checks.given_flags(copied) == {"label_separator", "multi_label"}
  assert list(checks.problems(common_flags.make_options(
      defaults, dict(vars(common_flags.make_options(defaults, {})))), table)) == []
  # A namespace that does not say what was given: only a value off its default counts.
  assert list(checks.problems(types.SimpleNamespace(**defaults), table)) == []
  assert checks.given_flags(types.SimpleNamespace(**defaults)) is None


def test_the_first_breach_in_the_table_order_is_raised():
  options = types.SimpleNamespace(a=None, n=0, m=-1)
  table = {checks.POSITIVE: ("m", "n"), checks.REQUIRED: {"a": None}}
  assert list(checks.problems(options, table)) == [
      "--m=-1: must be >= 1", "--n=0: must be >= 1", "--a is required"]
  assert error(table, **vars(options)) == "--m=-1: must be >= 1"
  assert error(dict(reversed(table.items())), **vars(options)) == "--a is required"


def test_an_unknown_kind_is_a_programming_error():
  with pytest.raises(KeyError, match="positiv"):
    checks.check(types.SimpleNamespace(), {"positiv": ("n",)})


def test_flag_defaults_come_from_the_definitions_without_touching_absl_flags():
  """common_flags.flag_defaults: the parsed defaults, in order, from a fresh FlagValues."""
  from absl import flags

  from bert_keras.runtime import common_flags

  def define(fv=flags.FLAGS):
    flags.DEFINE_integer("checks_steps", 8, "", flag_values=fv)
    flags.DEFINE_float("checks_rate", 1, "", flag_values=fv)
    flags.DEFINE_enum("checks_kind", None, ["a", "b"], "", flag_values=fv)
    flags.DEFINE_bool("checks_flag", True, "", short_name="checks_f", flag_values=fv)
    flags.mark_flag_as_required("checks_kind", flag_values=fv)

  for _ in range(2):  # (a fresh FlagValues each time: no duplicate flags)
    defaults = common_flags.flag_defaults(define)
    assert list(defaults.items()) == [("checks_steps", 8), ("checks_rate", 1.0),
                                      ("checks_kind", None), ("checks_flag", True)]
    assert type(defaults["checks_rate"]) is float
  assert "checks_steps" not in flags.FLAGS


_IMPORT_SCRIPTS = """
from absl import flags
import importlib
names = set()
for script in {scripts!r}:
  names |= set(importlib.import_module("bert_keras." + script).DEFAULTS)
print(sorted(names & set(flags.FLAGS)), len(names))
"""


def test_importing_the_scripts_defines_no_absl_flag():
  """Each script's DEFAULTS come from its define_flags through a fresh FlagValues: a definition
  that missed `fv` would land in absl's FLAGS on import (and clash with the original's)."""
  import subprocess
  import sys
  scripts = ["run_classifier", "run_ner", "run_pretraining", "run_squad", "extract_features",
             "export_saved_model", "predict", "convert_checkpoint"]
  proc = subprocess.run([sys.executable, "-c", _IMPORT_SCRIPTS.format(scripts=scripts)],
                        capture_output=True, text=True, timeout=300)
  assert proc.returncode == 0, proc.stderr[-3000:]
  leaked, count = proc.stdout.strip().splitlines()[-1].rsplit(" ", 1)
  assert leaked == "[]" and int(count) > 60
