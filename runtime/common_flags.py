"""The absl flags the run_* scripts and extract_features share (model, TPU, fine-tuning and
training flags, with the original's names, help texts and defaults), and the options namespace
that a script's run() takes without parsing flags (make_options, over flag_defaults).

Every define_* function here and each script's define_flags takes `fv`, the absl FlagValues to
define into: absl's global FLAGS by default (a script run from the command line),
a fresh one in flag_defaults (a flag's default is written once, in its definition)."""

import types

from absl import flags

from bert_keras.runtime import distribution
from bert_keras.runtime import option_checks


def flag_defaults(define_flags):
  """{flag name: default} of the flags that define_flags(fv) defines, in their order: what a
  script's DEFAULTS (its run()'s options) are. Defines into a fresh FlagValues, so absl's
  global FLAGS is neither read nor changed (a script imports without side effects, and beside
  the original's flags in tests); the defaults are absl's parsed values, as FLAGS holds them."""
  fv = flags.FlagValues()
  define_flags(fv=fv)
  return {name: fv[name].default for name in fv if fv[name].name == name}


def make_options(defaults, overrides):
  """A namespace of all of a script's run() options: `defaults` updated with `overrides`,
  the overrides' names recorded as the flags given (option_checks.GIVEN: an override equal
  to its default is given, as a flag on the command line is).

  Overrides copied from another namespace (`options(**{**vars(o), "x": 1})`) bring its GIVEN:
  then the names given are its GIVEN and the overrides whose values differ from the defaults.
  An override that is not an option raises TypeError (a misspelt name would else be ignored).
  """
  overrides = dict(overrides)
  copied = overrides.pop(option_checks.GIVEN, None)
  unknown = set(overrides) - set(defaults)
  if unknown:
    raise TypeError(f"unknown options {sorted(unknown)}")
  given = set(overrides) if copied is None else set(copied) | {
      name for name, value in overrides.items() if value != defaults[name]}
  return types.SimpleNamespace(**{**defaults, **overrides,
                                  option_checks.GIVEN: frozenset(given)})


def define_tpu_flags(fv=flags.FLAGS):
  """The original's TPU/cluster flags, with the original defaults."""
  flags.DEFINE_bool("use_tpu", False, "Whether to use TPU or GPU/CPU.", flag_values=fv)
  flags.DEFINE_string(
      "tpu_name", None,
      "The Cloud TPU to use for training. This should be either the name used "
      "when creating the Cloud TPU, or a grpc://ip.address.of.tpu:8470 url.", flag_values=fv)
  flags.DEFINE_string(
      "tpu_zone", None,
      "[Optional] GCE zone where the Cloud TPU is located in. If not specified, "
      "we will attempt to automatically detect the GCE project from metadata.", flag_values=fv)
  flags.DEFINE_string(
      "gcp_project", None,
      "[Optional] Project name for the Cloud TPU-enabled project. If not "
      "specified, we will attempt to automatically detect the GCE project from "
      "metadata.", flag_values=fv)
  flags.DEFINE_string("master", None, "[Optional] TensorFlow master URL.", flag_values=fv)
  flags.DEFINE_integer(
      "num_tpu_cores", 8,
      "Only used if `use_tpu` is True. Total number of TPU cores to use.", flag_values=fv)


# The help of the flags that a model directory (runtime/model_dir.py) supplies.
MODEL_DIR_HELP = (" Optional when --init_checkpoint (or --output_dir) is a model directory (a "
                  "run_* output_dir or its best/): its %s is used; given, it must agree.")


def define_model_flags(max_seq_length, tokenizer=True, output_dir=True,
                       max_seq_length_help="", fv=flags.FLAGS):
  """The original scripts' model flags, with their help texts: bert_config_file,
  init_checkpoint, max_seq_length (the script's default), and output_dir, vocab_file and
  do_lower_case where the script has them."""
  flags.DEFINE_string(
      "bert_config_file", None,
      "The config json file corresponding to the pre-trained BERT model. "
      "This specifies the model architecture." + MODEL_DIR_HELP % "bert_config.json",
      flag_values=fv)
  if tokenizer:
    flags.DEFINE_string("vocab_file", None,
                        "The vocabulary file that the BERT model was trained on."
                        + MODEL_DIR_HELP % "vocab.txt", flag_values=fv)
  if output_dir:
    flags.DEFINE_string("output_dir", None,
                        "The output directory where the model checkpoints will be written.",
                        flag_values=fv)
  flags.DEFINE_string("init_checkpoint", None,
                      "Initial checkpoint (usually from a pre-trained BERT model).", flag_values=fv)
  if tokenizer:
    flags.DEFINE_bool(
        "do_lower_case", True,
        "Whether to lower case the input text. Should be True for uncased "
        "models and False for cased models." + MODEL_DIR_HELP % "tokenizer_config.json",
        flag_values=fv)
  flags.DEFINE_integer(
      "max_seq_length", max_seq_length,
      "The maximum total input sequence length after WordPiece tokenization. "
      "Sequences longer than this will be truncated, and sequences shorter "
      "than this will be padded." + max_seq_length_help, flag_values=fv)


def define_job_flags(predict=True, fv=flags.FLAGS):
  """The original's --do_train, --do_eval, --do_predict and their batch sizes (run_classifier's
  names, help texts and defaults; without the predict pair when `predict` is False, as in
  run_pretraining)."""
  flags.DEFINE_bool("do_train", False, "Whether to run training.", flag_values=fv)
  flags.DEFINE_bool("do_eval", False, "Whether to run eval on the dev set.", flag_values=fv)
  if predict:
    flags.DEFINE_bool("do_predict", False,
                      "Whether to run the model in inference mode on the test set.",
                      flag_values=fv)
  flags.DEFINE_integer("train_batch_size", 32, "Total batch size for training.", flag_values=fv)
  flags.DEFINE_integer("eval_batch_size", 8, "Total batch size for eval.", flag_values=fv)
  if predict:
    flags.DEFINE_integer("predict_batch_size", 8, "Total batch size for predict.",
                         flag_values=fv)


def define_fine_tuning_flags(fv=flags.FLAGS):
  """The original fine-tuning scripts' common optimisation and loop flags (learning rate,
  epochs, warmup, checkpoint steps, ...), with their defaults."""
  flags.DEFINE_float("learning_rate", 5e-5, "The initial learning rate for Adam.", flag_values=fv)
  flags.DEFINE_float("num_train_epochs", 3.0, "Total number of training epochs to perform.",
                     flag_values=fv)
  flags.DEFINE_float(
      "warmup_proportion", 0.1,
      "Proportion of training to perform linear learning rate warmup for. "
      "E.g., 0.1 = 10% of training.", flag_values=fv)
  flags.DEFINE_integer("save_checkpoints_steps", 1000,
                       "How often to save the model checkpoint.", flag_values=fv)
  define_iterations_per_loop_flag(fv=fv)


def define_trim_train_batches_flag(fv=flags.FLAGS):
  """--trim_train_batches (not in the original): each training batch cut to its longest
  sequence."""
  flags.DEFINE_bool(
      "trim_train_batches", False,
      "Cut each training batch to its longest sequence (rounded up to a multiple of 8): less "
      "work on the padding, so faster steps on CPU and GPU. The model's outputs at the real "
      "tokens are the same; dropout draws and, for run_squad, the span softmax (which the "
      "original takes over the padding positions too) differ, so losses are not bit-equal "
      "to an untrimmed run. Not on TPU (one shape per compiled program).", flag_values=fv)


def define_iterations_per_loop_flag(fv=flags.FLAGS):
  """The original's --iterations_per_loop (default 1000), here the most training steps per
  call of the compiled loop."""
  flags.DEFINE_integer("iterations_per_loop", 1000,
                       "How many steps to make in each estimator call (here: the most "
                       "training steps per call of the compiled loop; it also stops at "
                       "every --log_every_steps and --save_checkpoints_steps).", flag_values=fv)


def define_device_flags(strategies=distribution.STRATEGIES, fv=flags.FLAGS):
  """--distribution_strategy (one of `strategies`), --dtype and --use_xla: how the model runs,
  for training and prediction alike (beyond the original; defaults = its behaviour)."""
  flags.DEFINE_enum(
      "distribution_strategy", None, strategies,
      "tf.distribute strategy. Default: tpu with --use_tpu, mirrored when more "
      "than one GPU is visible, else one_device."
      + (" multi_worker_mirrored reads the cluster from TF_CONFIG."
         if "multi_worker_mirrored" in strategies else ""), flag_values=fv)
  flags.DEFINE_enum("dtype", "float32", ["float32", "bfloat16", "float16"],
                    "Compute dtype (Keras mixed-precision policy; variables and outputs stay "
                    "float32). float16 adds dynamic loss scaling in training.", flag_values=fv)
  flags.DEFINE_bool("use_xla", None,
                    "Compile the model (and in training its backward pass) with XLA. Default: "
                    "on for GPU and TPU, off on CPU (where XLA's backend is slower than "
                    "TensorFlow's oneDNN kernels).", flag_values=fv)


def define_training_flags(fv=flags.FLAGS):
  """Flags added beyond the original (all optional, defaults = original behaviour)."""
  define_device_flags(fv=fv)
  flags.DEFINE_integer(
      "gradient_accumulation_steps", 1,
      "Micro-batches per optimizer step; train_batch_size is the batch of one "
      "optimizer step and must be divisible by this times the replica count.", flag_values=fv)
  flags.DEFINE_enum("optimizer", "adamw", ["adamw", "lamb"],
                    "adamw = the original AdamWeightDecay; lamb = LAMB.", flag_values=fv)
  flags.DEFINE_integer("keep_checkpoint_max", 5,
                       "Number of most recent checkpoints kept in output_dir.", flag_values=fv)
  flags.DEFINE_integer("seed", 12345, "Seed of the input shuffles.", flag_values=fv)
  flags.DEFINE_integer("log_every_steps", 100,
                       "Log a progress line (step, loss, learning rate, examples/s, ETA) "
                       "every this many training steps, as the original's TPUEstimator "
                       "logged the loss every 100 steps; 0: once per --iterations_per_loop.",
                       flag_values=fv)
  flags.DEFINE_bool(
      "overwrite_output_dir", False,
      "With --do_train: move what --output_dir holds aside (to <output_dir>.old-<time>) and "
      "start over. Without it, a --do_train run into a directory whose training run had other "
      "options (run_options.json; see runtime/model_dir.RESULT_NEUTRAL_OPTIONS for those that "
      "do not count) is refused; one with the same options resumes.", flag_values=fv)


def define_eval_during_training_flags(fv=flags.FLAGS):
  """Flags beyond the original: evaluation during training (every N steps, the best model
  kept) and trimmed eval batches."""
  flags.DEFINE_integer(
      "eval_every_steps", 0,
      "Evaluate on the dev set every this many training steps and at the end (needs "
      "--do_train and --do_eval): logged, written to TensorBoard (output_dir/eval) and to "
      "output_dir/eval_history.jsonl; the best model by the task's metric is kept in "
      "output_dir/best (a TF1 checkpoint and its eval_results.txt), which --do_eval and "
      "--do_predict then use. 0: no evaluation during training (the original's behaviour).",
      flag_values=fv)
  flags.DEFINE_integer(
      "early_stopping_patience", 0,
      "With --eval_every_steps: stop training when the task's metric has not improved for "
      "this many evaluations. 0: never stop early.", flag_values=fv)
  flags.DEFINE_bool(
      "trim_eval_batches", True,
      "Cut each eval/predict batch to its longest sequence (rounded up to a multiple of 8): "
      "the same results, less work on the padding. Ignored on TPU.", flag_values=fv)


# The shared flag groups a run_* script may define (define_shared_flags), by name.
GROUPS = {"jobs": define_job_flags,
          "train_and_eval_jobs": lambda fv: define_job_flags(predict=False, fv=fv),
          "fine_tuning": define_fine_tuning_flags, "tpu": define_tpu_flags,
          "training": define_training_flags, "trim_train_batches": define_trim_train_batches_flag,
          "eval_during_training": define_eval_during_training_flags,
          "iterations_per_loop": define_iterations_per_loop_flag}
# The groups of a fine-tuning script that evaluates during training.
FINE_TUNING = ("fine_tuning", "tpu", "training", "eval_during_training")


def define_shared_flags(groups, required=("output_dir",), fv=flags.FLAGS):
  """A run_* script's shared flags: the groups named in `groups` (GROUPS), and `required`
  marked as required (never the model flags: a model directory may give them). The script
  then adopts this module's flags as its key flags (absl's adopt_module_key_flags, called
  from the script itself), so its --help lists them, not only --helpfull."""
  for name in groups:
    GROUPS[name](fv=fv)
  for name in required:
    flags.mark_flag_as_required(name, flag_values=fv)
