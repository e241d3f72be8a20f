# coding=utf-8
"""What the run_* scripts and extract_features share as command-line programs: the absl
flag definitions common to them (model, TPU, fine-tuning and training flags, with the
original's names, help texts and defaults), the options namespace that run() takes without
parsing flags, the absl main() wrapper that reports a user's mistake in one line, the
checks of a run's config before any model is built (load_and_check_config), the
--output_dir a run holds (output_directory: created, locked, cleared of dead runs'
temporaries) and the result files (eval_results.txt lines, written atomically under a
temporary name with the pid)."""

import contextlib
import csv
import os
import re
import socket
import sys
import types

from absl import flags
from absl import logging
import tensorflow as tf

from bert_keras import checkpoints
from bert_keras import distribution
from bert_keras import file_io
from bert_keras import modeling
from bert_keras import training_checkpoints

# The defaults of define_tpu_flags() and define_training_flags(), for callers of a script's
# run() that build its options without parsing flags (make_options).
TPU_DEFAULTS = dict(use_tpu=False, tpu_name=None, tpu_zone=None, gcp_project=None,
                    master=None, num_tpu_cores=8)
TRAINING_DEFAULTS = dict(distribution_strategy=None, dtype="float32", use_xla=None,
                         gradient_accumulation_steps=1, optimizer="adamw",
                         keep_checkpoint_max=5, seed=12345, log_every_steps=100)


def make_options(defaults, overrides):
  """A namespace of all of a script's run() options: `defaults` updated with `overrides`.

  An override that is not an option raises TypeError (a misspelt name would else be ignored).
  """
  unknown = set(overrides) - set(defaults)
  if unknown:
    raise TypeError(f"unknown options {sorted(unknown)}")
  return types.SimpleNamespace(**{**defaults, **overrides})


def define_tpu_flags():
  """The original's TPU/cluster flags, with the original defaults."""
  flags.DEFINE_bool("use_tpu", False, "Whether to use TPU or GPU/CPU.")
  flags.DEFINE_string(
      "tpu_name", None,
      "The Cloud TPU to use for training. This should be either the name used "
      "when creating the Cloud TPU, or a grpc://ip.address.of.tpu:8470 url.")
  flags.DEFINE_string(
      "tpu_zone", None,
      "[Optional] GCE zone where the Cloud TPU is located in. If not specified, "
      "we will attempt to automatically detect the GCE project from metadata.")
  flags.DEFINE_string(
      "gcp_project", None,
      "[Optional] Project name for the Cloud TPU-enabled project. If not "
      "specified, we will attempt to automatically detect the GCE project from "
      "metadata.")
  flags.DEFINE_string("master", None, "[Optional] TensorFlow master URL.")
  flags.DEFINE_integer(
      "num_tpu_cores", 8,
      "Only used if `use_tpu` is True. Total number of TPU cores to use.")


def define_model_flags(max_seq_length, tokenizer=True, output_dir=True,
                       max_seq_length_help=""):
  """The original scripts' model flags, with their help texts: bert_config_file,
  init_checkpoint, max_seq_length (the script's default), and output_dir, vocab_file and
  do_lower_case where the script has them."""
  flags.DEFINE_string(
      "bert_config_file", None,
      "The config json file corresponding to the pre-trained BERT model. "
      "This specifies the model architecture.")
  if tokenizer:
    flags.DEFINE_string("vocab_file", None,
                        "The vocabulary file that the BERT model was trained on.")
  if output_dir:
    flags.DEFINE_string("output_dir", None,
                        "The output directory where the model checkpoints will be written.")
  flags.DEFINE_string("init_checkpoint", None,
                      "Initial checkpoint (usually from a pre-trained BERT model).")
  if tokenizer:
    flags.DEFINE_bool(
        "do_lower_case", True,
        "Whether to lower case the input text. Should be True for uncased "
        "models and False for cased models.")
  flags.DEFINE_integer(
      "max_seq_length", max_seq_length,
      "The maximum total input sequence length after WordPiece tokenization. "
      "Sequences longer than this will be truncated, and sequences shorter "
      "than this will be padded." + max_seq_length_help)


def define_fine_tuning_flags():
  """The original fine-tuning scripts' (run_classifier, run_squad) common optimisation and
  loop flags, with their defaults."""
  flags.DEFINE_float("learning_rate", 5e-5, "The initial learning rate for Adam.")
  flags.DEFINE_float("num_train_epochs", 3.0, "Total number of training epochs to perform.")
  flags.DEFINE_float(
      "warmup_proportion", 0.1,
      "Proportion of training to perform linear learning rate warmup for. "
      "E.g., 0.1 = 10% of training.")
  flags.DEFINE_integer("save_checkpoints_steps", 1000,
                       "How often to save the model checkpoint.")
  define_iterations_per_loop_flag()


def define_trim_train_batches_flag():
  """--trim_train_batches (not in the original), for run_classifier and run_squad."""
  flags.DEFINE_bool(
      "trim_train_batches", False,
      "Cut each training batch to its longest sequence (rounded up to a multiple of 8): less "
      "work on the padding, so faster steps on CPU and GPU. The model's outputs at the real "
      "tokens are the same; dropout draws and, for run_squad, the span softmax (which the "
      "original takes over the padding positions too) differ, so losses are not bit-equal "
      "to an untrimmed run. Not on TPU (one shape per compiled program).")


def define_iterations_per_loop_flag():
  """The original's --iterations_per_loop (default 1000), here the most training steps per
  call of the compiled loop."""
  flags.DEFINE_integer("iterations_per_loop", 1000,
                       "How many steps to make in each estimator call (here: the most "
                       "training steps per call of the compiled loop; it also stops at "
                       "every --log_every_steps and --save_checkpoints_steps).")


def define_training_flags():
  """Flags added beyond the original (all optional, defaults = original behaviour)."""
  flags.DEFINE_enum(
      "distribution_strategy", None, distribution.STRATEGIES,
      "tf.distribute strategy. Default: tpu with --use_tpu, mirrored when more "
      "than one GPU is visible, else one_device. multi_worker_mirrored reads "
      "the cluster from TF_CONFIG.")
  flags.DEFINE_enum("dtype", "float32", ["float32", "bfloat16", "float16"],
                    "Compute dtype (Keras mixed-precision policy; variables stay "
                    "float32). float16 adds dynamic loss scaling.")
  flags.DEFINE_bool("use_xla", None,
                    "Compile the forward/backward pass with XLA. Default: on for GPU and TPU, "
                    "off on CPU (where XLA's backend is slower than TensorFlow's oneDNN kernels).")
  flags.DEFINE_integer(
      "gradient_accumulation_steps", 1,
      "Micro-batches per optimizer step; train_batch_size is the batch of one "
      "optimizer step and must be divisible by this times the replica count.")
  flags.DEFINE_enum("optimizer", "adamw", ["adamw", "lamb"],
                    "adamw = the original AdamWeightDecay; lamb = LAMB.")
  flags.DEFINE_integer("keep_checkpoint_max", 5,
                       "Number of most recent checkpoints kept in output_dir.")
  flags.DEFINE_integer("seed", 12345, "Seed of the input shuffles.")
  flags.DEFINE_integer("log_every_steps", 100,
                       "Log a progress line (step, loss, learning rate, examples/s, ETA) "
                       "every this many training steps, as the original's TPUEstimator "
                       "logged the loss every 100 steps; 0: once per --iterations_per_loop.")


def script_main(run):
  """The absl main() of a run_* script: run(FLAGS), with a user's mistake (a ValueError,
  which checkpoints.CheckpointError and tokenization.VocabError are) reported as one line
  `error: ...` and exit status 1 instead of a traceback; so are an out-of-memory error and,
  as a last net behind the scripts' own checks (which name the flag), a file that cannot be
  found, read or reached (file_io.file_error_text), named by its path."""

  def main(unused_argv):
    logging.set_verbosity(logging.INFO)
    try:
      run(flags.FLAGS)
    except ValueError as e:
      raise SystemExit("error: " + " ".join(str(e).split())) from None
    except (tf.errors.ResourceExhaustedError, MemoryError) as e:
      what = " ".join(str(getattr(e, "message", e) or type(e).__name__).split())
      raise SystemExit("error: out of memory (%s): use a smaller --train_batch_size, "
                       "--max_seq_length or model" % what[:300]) from None
    except (OSError, tf.errors.OpError) as e:
      text = file_io.file_error_text(e)
      if text is None:
        raise
      raise SystemExit("error: " + text) from None

  return main


def temp_path(path):
  """Where `path` is written until complete: .<name>.tmp-<pid> beside it (the pid tells a
  later run whether the writer is gone: file_io.remove_stale_temporaries)."""
  return file_io.temp_name(path)


def write_text_atomic(path, text):
  """Writes `text` to temp_path(path) then renames it over path (tf.io.gfile); the temporary
  is removed on an error."""
  tmp = temp_path(path)
  try:
    with tf.io.gfile.GFile(tmp, "w") as f:
      f.write(text)
    tf.io.gfile.rename(tmp, path, overwrite=True)
  except BaseException:
    with contextlib.suppress(Exception):
      tf.io.gfile.remove(tmp)
    raise


def format_results(results):
  """The original eval_results.txt: sorted "key = value" lines."""
  return "".join("%s = %s\n" % (key, str(results[key])) for key in sorted(results))


def load_bert_config(path):
  """--bert_config_file read and validated (modeling.BertConfig.from_json_file); every problem is
  a ValueError naming the flag and the file."""
  try:
    return modeling.BertConfig.from_json_file(path)
  except ValueError as e:
    raise ValueError(f"--bert_config_file {e}") from None


def allow_long_csv_fields():
  """Raises the csv module's field size limit (128 KiB) to the largest the platform takes, so
  that a TSV field of any length is read (a long text is then truncated by the tokenization
  to --max_seq_length, as any other)."""
  limit = sys.maxsize
  while limit > csv.field_size_limit():
    try:
      csv.field_size_limit(limit)
      return
    except OverflowError:  # the C long of this platform is narrower
      limit //= 2


# ----------------------------------------------------------------------------
# A run's config, checked before any model is built.

def load_and_check_config(options):
  """--bert_config_file read and validated (load_bert_config), then checked against what the
  run will load and the memory it needs, all before any model is built (a wrong config must not
  first allocate gigabytes): the sizes of --init_checkpoint and of the newest checkpoint in
  --output_dir (see checkpoints.check_config_matches), the --output_dir path (not below a
  regular file) and the float32 weights (plus gradients and two Adam slots with --do_train)
  against the memory available. Every problem is a ValueError naming the flags and files."""
  output_dir = getattr(options, "output_dir", None)
  if output_dir:
    check_output_dir(output_dir)
  config = load_bert_config(options.bert_config_file)
  sources = [("--init_checkpoint", getattr(options, "init_checkpoint", None))]
  if output_dir:
    sources.append(("--output_dir", training_checkpoints.latest_checkpoint(output_dir,
                                                                           warn=False)))
  for flag, path in sources:
    if not path:
      continue
    if flag == "--init_checkpoint":
      try:
        training_checkpoints.init_checkpoint_prefix(path)
      except ValueError as e:
        raise ValueError(f"--init_checkpoint {e}") from None
    try:
      shapes = checkpoints.checkpoint_shapes(path)
    except (ValueError, tf.errors.OpError):
      continue  # not a checkpoint: reported where the script loads it, in its own words
    try:
      checkpoints.check_config_matches(config, shapes)
    except ValueError as e:
      raise ValueError(f"--bert_config_file {options.bert_config_file} does not fit {flag} "
                       f"{path}: {e}") from None
  check_memory(config, options)
  return config


def _available_memory_bytes():
  """The memory a new allocation can get now: MemAvailable, bounded by the cgroup's limit
  (containers); physical memory where neither can be read."""
  available = []
  try:
    with open("/proc/meminfo") as f:
      for line in f:
        if line.startswith("MemAvailable:"):
          available.append(int(line.split()[1]) * 1024)
  except (OSError, ValueError, IndexError):
    pass
  try:
    with open("/sys/fs/cgroup/memory.max") as f:
      limit = f.read().strip()
    if limit != "max":
      with open("/sys/fs/cgroup/memory.current") as f:
        available.append(int(limit) - int(f.read().strip()))
  except (OSError, ValueError):
    pass
  if not available:
    return modeling._memory_bytes()  # pylint: disable=protected-access
  return min(available)


def _uses_accelerator(options):
  if getattr(options, "use_tpu", False):
    return True
  try:
    return bool(tf.config.list_physical_devices("GPU"))
  except Exception:  # pylint: disable=broad-except
    return False


def check_memory(config, options):
  """A ValueError when the model's float32 weights (times 4 with --do_train: gradients and the
  optimizer's two slots) exceed the host memory available now, on a CPU-only run (on a GPU
  or TPU an out-of-memory error of the device is reported by script_main in one line).
  Activations are not counted: this finds only the runs that cannot possibly fit."""
  training = bool(getattr(options, "do_train", False))
  need = config.num_parameters() * 4 * (4 if training else 1)
  available = _available_memory_bytes()
  if need <= available or _uses_accelerator(options):
    return
  raise ValueError(
      f"--bert_config_file {options.bert_config_file}: a model of {config.num_parameters():.3g} "
      f"parameters needs {need / 1e9:.3g} GB for its float32 weights"
      f"{', gradients and optimizer slots' if training else ''}, more than the "
      f"{available / 1e9:.3g} GB of memory available")


# ----------------------------------------------------------------------------
# The output directory of a run: created, locked, cleared of dead runs' temporaries.

LOCK_NAME = ".bert_keras.lock"

# The temporaries in a run's output directory that carry no pid: TensorFlow's (a checkpoint
# save's "model.ckpt-N_temp" directory and ".tempstate<n>" files, the "checkpoint" state
# file's "checkpoint.tmp<hex>") and the "<output>.tmp" names of earlier versions. Stale
# whenever the directory's lock is ours.
_UNOWNED_TEMPORARY = re.compile(
    r"^(?:model\.ckpt-\d+_temp(?:_[0-9a-f]+)?|model\.ckpt-\d+\..*\.tempstate\d+"
    r"|checkpoint\.tmp[0-9a-f]{32}|bert_model\.ckpt\.tmp-\d+\.(?:index|data-\d{5}-of-\d{5})"
    r"|(?:train|eval|predict)\.tf_record\.tmp|(?:eval_results\.txt|test_results\.tsv"
    r"|(?:nbest_)?predictions\.json|null_odds\.json|bert_config\.json)\.tmp)$")


def check_output_dir(path, flag="--output_dir"):
  """A ValueError naming `flag` when `path` (local) is, or is below, a regular file."""
  if file_io.is_remote(path):
    return
  probe = os.path.abspath(path)
  while not os.path.lexists(probe) and os.path.dirname(probe) != probe:
    probe = os.path.dirname(probe)
  if os.path.exists(probe) and not os.path.isdir(probe):
    where = "is a file" if probe == os.path.abspath(path) else f"is below the file {probe}"
    raise ValueError(f"{flag} {path}: {where}, not a directory")


def make_output_dir(path, flag="--output_dir"):
  """Creates directory `path` and its parents; returns whether it did not exist. A path below
  a regular file, or one tf.io.gfile cannot create (an unknown scheme, an unreachable
  bucket, no permission), is a one-line ValueError naming `flag`."""
  check_output_dir(path, flag)
  try:
    existed = tf.io.gfile.isdir(path)
    tf.io.gfile.makedirs(path)
  except tf.errors.OpError as e:
    message = " ".join(str(e.message).split())
    raise ValueError(f"{flag} {path}: cannot create the directory: {message[:300]}") from None
  return not existed


@contextlib.contextmanager
def output_directory(strategy, output_dir, flag="--output_dir"):
  """The output directory of a run_* script, held for the run; yields the directory for its
  TFRecords (distribution.record_directory: output_dir on the chief).

  Creates output_dir (make_output_dir). The chief then takes the directory's lock
  (<output_dir>/.bert_keras.lock, holding its pid and host): a second run into the same
  directory is refused with a one-line ValueError naming the holder's pid; a lock left by a
  process that is gone is taken over, with a log line. Holding it, the chief removes the
  temporaries of dead runs (file_io.remove_stale_temporaries, with TensorFlow's own checkpoint
  temporaries), each with a log line. On exit the lock is released (its file removed); after an
  error, a directory this call made is removed again when nothing was written to it. Other
  workers of a multi-worker run neither lock nor clean (their files go to worker_dir)."""
  created = make_output_dir(output_dir, flag)
  lock = None
  try:
    if distribution.is_chief(strategy):
      lock = _OutputLock(output_dir, flag)
      file_io.remove_stale_temporaries(output_dir, is_stale=_UNOWNED_TEMPORARY.match,
                                       log=logging.warning)
    with distribution.record_directory(strategy, output_dir) as record_dir:
      yield record_dir
  except BaseException:
    if lock is not None:
      lock.release()
      lock = None
    if created:
      with contextlib.suppress(Exception):
        if not tf.io.gfile.listdir(output_dir):
          tf.io.gfile.rmtree(output_dir)
    raise
  finally:
    if lock is not None:
      lock.release()


def _owner_text():
  return "%d %s\n" % (os.getpid(), socket.gethostname())


def _parse_owner(text):
  """(pid or None, host or "") of a lock file's text."""
  parts = text.split()
  pid = int(parts[0]) if parts and parts[0].isdigit() else None
  return pid, parts[1] if len(parts) > 1 else ""


class _OutputLock(object):
  """The lock of a run's output directory (see output_directory). On a local disk an flock on
  the lock file (released by the kernel when the process dies, so a crashed run never blocks
  the next); elsewhere (gs://) the file's pid and host, a dead pid on this host counting as
  gone."""

  def __init__(self, directory, flag):
    self.path = os.path.join(directory, LOCK_NAME)
    self.directory, self.flag = directory, flag
    self.fd = None
    try:
      import fcntl  # pylint: disable=g-import-not-at-top  (POSIX only)
    except ImportError:
      fcntl = None
    if fcntl is not None and not file_io.is_remote(directory):
      self._acquire_flock(fcntl)
    else:
      self._acquire_by_pid()

  def _refuse(self, text):
    pid, host = _parse_owner(text)
    holder = f"pid {pid}" + (f" on {host}" if host and host != socket.gethostname() else "")
    if pid is None:
      holder = "another process"
    if pid == os.getpid():
      holder += " (this process)"
    return ValueError(f"{self.flag} {self.directory}: another run ({holder}) is using this "
                      f"directory (lock {self.path}); wait for it to end or choose another "
                      f"{self.flag}")

  def _acquire_flock(self, fcntl):
    while True:
      fd = os.open(self.path, os.O_RDWR | os.O_CREAT | getattr(os, "O_CLOEXEC", 0), 0o644)
      try:
        fcntl.flock(fd, fcntl.LOCK_EX | fcntl.LOCK_NB)
      except BlockingIOError:
        text = os.read(fd, 4096).decode("utf-8", "replace")
        os.close(fd)
        raise self._refuse(text) from None
      except OSError:  # a file system without flock (some NFS mounts): the pid alone
        os.close(fd)
        return self._acquire_by_pid(take_empty=True)
      try:  # the holder may have removed the file between our open and flock: use the new one
        same = os.fstat(fd).st_ino == os.stat(self.path).st_ino
      except FileNotFoundError:
        same = False
      if same:
        break
      os.close(fd)
    previous = os.read(fd, 4096).decode("utf-8", "replace")
    if previous.strip():
      logging.warning("%s: taking over the lock of %s, a run that ended without releasing it",
                      self.directory, "pid %s" % _parse_owner(previous)[0])
    os.ftruncate(fd, 0)
    os.lseek(fd, 0, os.SEEK_SET)
    os.write(fd, _owner_text().encode("utf-8"))
    self.fd = fd

  def _acquire_by_pid(self, take_empty=False):
    gfile = tf.io.gfile
    if gfile.exists(self.path):
      with gfile.GFile(self.path, "r") as f:
        text = f.read()
      pid, host = _parse_owner(text)
      if pid is None and take_empty and not text.strip():
        pid, host = 0, socket.gethostname()  # the empty file our failed flock made
      if pid is None or host != socket.gethostname() or file_io.process_is_alive(pid):
        raise self._refuse(text)
      if pid:
        logging.warning("%s: taking over the lock of pid %d, a run that ended without "
                        "releasing it", self.directory, pid)
      gfile.remove(self.path)
    with gfile.GFile(self.path, "w") as f:
      f.write(_owner_text())

  def release(self):
    """Removes the lock file (then closes it: nobody can lock the removed file meanwhile)."""
    with contextlib.suppress(Exception):
      if self.fd is None:
        tf.io.gfile.remove(self.path)
      else:
        os.remove(self.path)
    if self.fd is not None:
      os.close(self.fd)
      self.fd = None
