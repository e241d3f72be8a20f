"""The output directory of a run: created, locked against a second run, cleared of dead runs'
temporaries; the original's eval_results.txt lines (format_results); and an output refused
where it would overwrite the model it is made from (output_problem, check_output)."""

import contextlib
import os
import re
import socket

from absl import logging
import tensorflow as tf

from bert_keras import model_files
from bert_keras.runtime import distribution
from bert_keras.utils import file_io


def format_results(results):
  """The original eval_results.txt: sorted "key = value" lines."""
  return "".join("%s = %s\n" % (key, str(results[key])) for key in sorted(results))


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
  temporaries; a best/ that a dead run had moved aside to replace it is put back), each with a
  log line. On exit the lock is released (its file removed); after an
  error, a directory this call made is removed again when nothing but the model files
  (model_files.py) was written to it. Other
  workers of a multi-worker run neither lock nor clean (their files go to worker_dir)."""
  created = make_output_dir(output_dir, flag)
  lock = None
  try:
    if distribution.is_chief(strategy):
      lock = _OutputLock(output_dir, flag)
      file_io.remove_stale_temporaries(output_dir, is_stale=_UNOWNED_TEMPORARY.match,
                                       log=logging.warning, restore=True)
    with distribution.record_directory(strategy, output_dir) as record_dir:
      yield record_dir
  except BaseException:
    if lock is not None:
      lock.release()
      lock = None
    if created:
      with contextlib.suppress(Exception):
        if not [name for name in tf.io.gfile.listdir(output_dir)
                if name.rstrip("/") not in model_files.MODEL_FILES]:
          tf.io.gfile.rmtree(output_dir)
    raise
  finally:
    if lock is not None:
      lock.release()


@contextlib.contextmanager
def locked_output(path, flag):
  """Holds an output that is replaced as a whole (export_saved_model's SavedModel directory,
  written beside it under file_io.temp_name and renamed into place) for a run: the lock
  <parent>/.<name>.lock (as output_directory's: a second run writing `path` is refused with
  a one-line ValueError naming the holder's pid; a dead holder's lock is taken over), then
  the temporaries that dead runs left beside it (".<name>.tmp-<pid>", ".<name>.old.tmp-<pid>")
  removed, each with a log line. The parent directory is created; the lock is released (its
  file removed) on exit."""
  path = path.rstrip("/") or path
  parent, name = os.path.split(path)
  parent = parent or "."
  make_output_dir(parent, flag)
  lock = _OutputLock(parent, flag, lock_name=f".{name}.lock", subject=path)
  try:
    file_io.remove_stale_temporaries(parent, finals=[name, name + ".old"], log=logging.warning)
    yield
  finally:
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

  def __init__(self, directory, flag, lock_name=LOCK_NAME, subject=None):
    self.path = os.path.join(directory, lock_name)
    self.directory, self.flag = subject or directory, flag
    self.fd = None
    try:
      import fcntl  # POSIX only
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


# ----------------------------------------------------------------------------
# An output that would overwrite the model it is made from.

# What the readers of a model directory read there besides MODEL_FILES (HuggingFace's config
# and weights, multi-label thresholds, class weights, sentence-transformers' modules, the
# checkpoints and best/, a SavedModel's and a quantized model's files): an output written over
# one damages the model (output_problem).
READ_NAMES = model_files.MODEL_FILES + (
    model_files.HF_CONFIG_FILE, "thresholds.json", "class_weights.json", "checkpoint", "best",
    "model.safetensors", "pytorch_model.bin", "modules.json", "config_sentence_transformers.json",
    "saved_model.pb", "variables", "assets", "fingerprint.pb", "model_config.json",
    "quantization.json")
READ_PREFIXES = ("model.ckpt", "bert_model.ckpt", "ckpt-", "1_Pooling", "2_Normalize")


def _comparable(path):
  path = os.fspath(path).strip()
  return path.rstrip("/") if file_io.is_remote(path) else os.path.realpath(path)


def output_problem(output, model_path):
  """Why writing `output` (a file or a directory) would damage the model directory of
  `model_path` (model_files.model_dir_of): "is the model directory", "holds the model
  directory" or "is the model directory's <name>" (a name of READ_NAMES or READ_PREFIXES, or
  inside one); None when it is none of them (another file in the directory is fine)."""
  if not output or not model_path:
    return None
  directory = model_files.model_dir_of(os.fspath(model_path))
  if not file_io.gfile.isdir(directory or "."):
    return None  # (no model there: its reader says so)
  directory = _comparable(directory or ".")
  target = _comparable(output)
  if target == directory:
    return "is the model directory"
  if directory.startswith(target.rstrip("/") + "/"):
    return "holds the model directory"
  if not target.startswith(directory.rstrip("/") + "/"):
    return None
  name = target[len(directory.rstrip("/")) + 1:].split("/")[0]
  if name in READ_NAMES or name.startswith(READ_PREFIXES):
    return f"is the model directory's {name}"
  return None


def check_output(output, flag, model_path, model_flag):
  """A one-line ValueError naming both flags when writing `output` would damage the model
  directory of `model_path` (output_problem)."""
  problem = output_problem(output, model_path)
  if problem:
    raise ValueError(f"{flag} {output} {problem} of {model_flag} {model_path}: it would "
                     "overwrite the model; write elsewhere")
