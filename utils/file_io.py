"""Files of every script: local paths with open(), paths with a scheme (gs://, file://, ...)
through tf.io.gfile; outputs under a temporary name (.<name>.tmp-<pid>), renamed when complete
(write_text_atomic); a directory replaced as a whole (replaced_directory: the new one written
under .<name>.tmp-<pid>, the old one kept as .<name>.old.tmp-<pid> until the new one is in
place); the temporaries of dead runs removed (remove_stale_temporaries), and the one-line text
of a file error. TensorFlow is imported only for paths with a scheme."""

import contextlib
import csv
import errno
import glob
import os
import re
import shutil
import sys


def is_remote(path):
  """Whether `path` has a scheme (gs://, file://, ...): it then goes through tf.io.gfile."""
  return "://" in path


def _gfile():
  import tensorflow as tf  # remote paths only
  return tf.io.gfile


def file_error_text(error):
  """One line telling `error` when it is a file the user named being absent, unreadable or
  unreachable: an OSError, or (when TensorFlow is loaded) its NotFound / PermissionDenied, an
  unknown file system scheme, or a remote file system's failure (a gs:// bucket that cannot be
  reached); None for any other error, which keeps its traceback."""
  if isinstance(error, OSError):
    if error.filename is not None:
      text = f"{error.filename}: {error.strerror or type(error).__name__}"
    else:
      text = str(error) or type(error).__name__
  else:
    tf = sys.modules.get("tensorflow")
    errors = getattr(tf, "errors", None)
    if errors is None or not isinstance(error, errors.OpError):
      return None
    text = str(error.message or type(error).__name__)
    if not (isinstance(error, (errors.NotFoundError, errors.PermissionDeniedError))
            or (isinstance(error, errors.UnimplementedError) and "File system scheme" in text)
            or "://" in text or "HTTP request" in text):
      return None
  return " ".join(text.split())[:500]


def expand_input_patterns(input_file):
  """Expands a comma-separated list of globs like the original's tf.gfile.Glob.

  Local patterns use Python's glob, which lists in directory order like
  TensorFlow's (unsorted; hidden files included, as TensorFlow does).
  """
  files = []
  for pattern in input_file.split(","):
    if is_remote(pattern):
      files.extend(_gfile().glob(pattern))
    elif pattern:
      try:
        matches = glob.glob(pattern, include_hidden=True)
      except TypeError:  # Python < 3.11: add the hidden files a leading wildcard skips
        matches = glob.glob(pattern)
        if os.path.basename(pattern)[:1] in ("*", "?", "["):
          matches += glob.glob(os.path.join(os.path.dirname(pattern),
                                            "." + os.path.basename(pattern)))
      files.extend(matches)
  return files


def file_size(path):
  """Size in bytes."""
  if is_remote(path):
    return _gfile().stat(path).length
  return os.path.getsize(path)


def open_read(path):
  """A binary reader (seek, read)."""
  if is_remote(path):
    return _gfile().GFile(path, "rb")
  return open(path, "rb")


def open_write(path):
  """A binary writer."""
  if is_remote(path):
    return _gfile().GFile(path, "wb")
  return open(path, "wb")


def rename(src, dst):
  """Renames src to dst, replacing dst."""
  if is_remote(src):
    _gfile().rename(src, dst, overwrite=True)
  else:
    os.replace(src, dst)


def remove_quietly(path):
  """Removes `path` if it can (cleaning up after an error)."""
  try:
    if is_remote(path):
      _gfile().remove(path)
    else:
      os.remove(path)
  except Exception:
    pass


def temp_name(path, tag=None):
  """Where `path` is written until complete: .<name>.tmp-<tag or pid> beside it."""
  head, tail = path.rsplit("/", 1) if "/" in path else ("", path)
  name = ".%s.tmp-%s" % (tail, tag or os.getpid())
  return head + "/" + name if head else name


# A temporary of temp_name: ".<final name>.tmp-<pid>", or the files of a TF checkpoint written
# under such a prefix (".<final>.tmp-<pid>.index", ".data-00000-of-00001", TensorFlow's own
# "_temp" directory and ".tempstate<n>" files beside them).
_PID_TEMPORARY = re.compile(r"^\.(?P<final>.+)\.tmp-(?P<pid>\d+)"
                            r"(?:\.index|\.data-\d{5}-of-\d{5}|_temp[^/]*)?(?:\.tempstate\d+)?$")


def process_is_alive(pid):
  """Whether process `pid` runs on this machine (a zombie counts as gone)."""
  if pid <= 0:
    return False
  try:
    os.kill(pid, 0)
  except ProcessLookupError:
    return False
  except PermissionError:  # another user's process
    return True
  except OSError:
    return False
  try:
    with open("/proc/%d/stat" % pid, "rb") as f:
      return f.read().rsplit(b")", 1)[1].split()[0] != b"Z"
  except (OSError, IndexError):
    return True


def _listdir(directory):
  if is_remote(directory):
    return [name.rstrip("/") for name in _gfile().listdir(directory)]
  return os.listdir(directory)


def _remove_tree_or_file(path):
  if is_remote(path):
    if _gfile().isdir(path):
      _gfile().rmtree(path)
    else:
      _gfile().remove(path)
  elif os.path.isdir(path) and not os.path.islink(path):
    shutil.rmtree(path)
  else:
    os.remove(path)


def remove_stale_temporaries(directory, finals=None, is_stale=None, log=None, restore=False):
  """Removes the temporaries of dead runs from `directory` (not its subdirectories); returns
  the removed names.

  A temporary of temp_name (".<final>.tmp-<pid>", also a TF checkpoint prefix
  "<final>.tmp-<pid>.index/.data-*") is removed when process <pid> is gone: only on a
  local disk, where that can be told (a live concurrent writer's temporary stays).
  finals: only the temporaries of these final names (with or without a
  "-<p:05d>-of-<P:05d>" part suffix); None: all. is_stale(name): more names to remove (a
  caller that holds the directory's lock knows, e.g., that TensorFlow's own checkpoint
  temporaries, which carry no pid, are stale). log(message): told of each removal.
  restore: the previous version of a directory that replaced_directory was replacing when its
  run died (".<final>.old.tmp-<pid>") is renamed back to <final> when <final> is missing,
  rather than removed."""
  try:
    names = _listdir(directory)
  except Exception:  # no such directory: nothing to clean
    return []
  removed = []
  for name in sorted(names):
    match = _PID_TEMPORARY.match(name)
    stale = False
    if match and not is_remote(directory):
      final = re.sub(r"-\d{5}-of-\d{5}$", "", match.group("final"))
      wanted = finals is None or match.group("final") in finals or final in finals
      stale = wanted and not process_is_alive(int(match.group("pid")))
    if not stale and is_stale is not None:
      stale = is_stale(name)
    if not stale:
      continue
    path = directory.rstrip("/") + "/" + name
    try:
      if restore and _put_back(directory, name, log):
        continue
      _remove_tree_or_file(path)
    except Exception as e:  # removed meanwhile, or read-only
      if log:
        log("could not remove the stale temporary %s: %s" % (path, e))
      continue
    removed.append(name)
    if log:
      log("removed %s, a temporary left by a run that ended before it finished" % path)
  return removed


def _put_back(directory, name, log):
  """Renames the replaced_directory's old version `name` (".<final>.old.tmp-<pid>") back to
  <final> when <final> is missing; whether it did."""
  match = _PID_TEMPORARY.match(name)
  if not (match and match.group("final").endswith(".old")):
    return False
  final = directory.rstrip("/") + "/" + match.group("final")[:-len(".old")]
  if _exists(final):
    return False
  _rename_directory(directory.rstrip("/") + "/" + name, final)
  if log:
    log("put back %s, moved aside by a run that ended while replacing it" % final)
  return True


def _exists(path):
  return _gfile().exists(path) if is_remote(path) else os.path.lexists(path)


def _rename_directory(src, dst):
  """Renames src to dst, which must not exist."""
  if is_remote(src):
    _gfile().rename(src, dst)
  else:
    os.rename(src, dst)


def _make_directory(path):
  if is_remote(path):
    _gfile().makedirs(path)
  else:
    os.makedirs(path)


@contextlib.contextmanager
def replaced_directory(path):
  """Replaces the directory `path` as a whole: yields a new empty directory (temp_name(path),
  ".<name>.tmp-<pid>" beside it; one a dead run left there is removed first) for the body to
  fill, and when the body ends puts it in `path`'s place. An existing `path` is renamed aside
  to temp_name(path + ".old") (".<name>.old.tmp-<pid>") first, renamed back if the new one
  cannot take its place, and removed once it has. When the body raises, the temporary is
  removed and `path` is left as it was. The parent directory is created.

  A killed run leaves at most these two names: remove_stale_temporaries(parent, finals=[name,
  name + ".old"]) removes them, with restore=True putting the old version back."""
  path = path.rstrip("/") or path
  tmp, old = temp_name(path), temp_name(path + ".old")
  if _exists(tmp):
    _remove_tree_or_file(tmp)
  _make_directory(tmp)
  try:
    yield tmp
    moved = _exists(path)
    if moved:
      _rename_directory(path, old)
    try:
      _rename_directory(tmp, path)
    except BaseException:
      if moved:
        _rename_directory(old, path)  # (the previous version back in place)
      raise
  except BaseException:
    if _exists(tmp):
      _remove_tree_or_file(tmp)
    raise
  if moved:
    _remove_tree_or_file(old)


def recover_replaced_directory(path, log=None):
  """After a run was killed inside replaced_directory(path), by one that holds `path`'s lock
  (no other process writes it): puts the old version back when `path` is missing and
  removes the temporaries, whatever their pid. Returns the removed names."""
  path = path.rstrip("/") or path
  parent, name = path.rsplit("/", 1) if "/" in path else (".", path)
  ours = re.compile(r"^\.%s(?:\.old)?\.tmp-\d+$" % re.escape(name))
  return remove_stale_temporaries(parent or "/", finals=[], is_stale=ours.match, log=log,
                                  restore=True)


@contextlib.contextmanager
def atomic_output(path):
  """Yields temp_name(path) for the body to write; renames it to `path` when the body ends,
  removes it when the body or the rename raises (a run that fails leaves no temporary; a
  killed one leaves it for remove_stale_temporaries)."""
  tmp = temp_name(path)
  try:
    yield tmp
    rename(tmp, path)
  except BaseException as e:
    remove_quietly(tmp)
    _raise_naming(e, tmp, path)


def write_text_atomic(path, text):
  """Writes `text` (UTF-8) to temp_name(path) then renames it over path (open() for a local
  path, tf.io.gfile for one with a scheme): atomic_output's; the temporary is removed on an
  error."""
  if not is_remote(path) and os.path.isdir(path):
    raise IsADirectoryError(errno.EISDIR, os.strerror(errno.EISDIR), path)
  with atomic_output(path) as tmp:
    if is_remote(path):
      with _gfile().GFile(tmp, "w") as f:
        f.write(text)
    else:
      with open(tmp, "w", encoding="utf-8", newline="") as f:
        f.write(text)


def copy_atomic(source, target):
  """`source` copied to `target` under a temporary name, then renamed (atomic_output's)."""
  with atomic_output(target) as tmp:
    _gfile().copy(source, tmp, overwrite=True)


def _raise_naming(error, tmp, path):
  """Raises `error`, a file error about the temporary `tmp` reading as one about `path`, the
  file the user named (an OSError's filename; a TensorFlow error's message)."""
  if isinstance(error, OSError):
    if error.filename == tmp:
      error.filename = path
    raise error
  tf = sys.modules.get("tensorflow")
  errors = getattr(tf, "errors", None)
  if errors is not None and isinstance(error, errors.OpError) and tmp in (error.message or ""):
    try:
      renamed = type(error)(error.node_def, error.op, error.message.replace(tmp, path))
    except TypeError:  # (a class of another signature: as it is)
      raise error from None
    raise renamed from None
  raise error


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


class _Gfile(object):
  """tf.io.gfile's calls that checkpoints.py and model_files.py make, for local paths with the
  standard library (no TensorFlow: Keras on JAX and PyTorch loads models without it) and for
  paths with a scheme through tf.io.gfile."""

  @staticmethod
  def exists(path):
    return _gfile().exists(path) if is_remote(path) else os.path.exists(path)

  @staticmethod
  def isdir(path):
    return _gfile().isdir(path) if is_remote(path) else os.path.isdir(path)

  @staticmethod
  def glob(pattern):
    return _gfile().glob(pattern) if is_remote(pattern) else sorted(glob.glob(pattern))

  @staticmethod
  def listdir(path):
    return _gfile().listdir(path) if is_remote(path) else os.listdir(path)

  @staticmethod
  def makedirs(path):
    return _gfile().makedirs(path) if is_remote(path) else os.makedirs(path, exist_ok=True)

  @staticmethod
  def GFile(path, mode="r"):  # noqa: N802  (tf.io.gfile's name)
    if is_remote(path):
      return _gfile().GFile(path, mode)
    return open(path, mode) if "b" in mode else open(path, mode, encoding="utf-8")

  @staticmethod
  def rename(src, dst, overwrite=False):
    if is_remote(src) or is_remote(dst):
      return _gfile().rename(src, dst, overwrite=overwrite)
    if not overwrite and os.path.exists(dst):
      raise FileExistsError(errno.EEXIST, "exists", dst)
    os.replace(src, dst)

  @staticmethod
  def copy(src, dst, overwrite=False):
    if is_remote(src) or is_remote(dst):
      return _gfile().copy(src, dst, overwrite=overwrite)
    if not overwrite and os.path.exists(dst):
      raise FileExistsError(errno.EEXIST, "exists", dst)
    shutil.copyfile(src, dst)


gfile = _Gfile()
