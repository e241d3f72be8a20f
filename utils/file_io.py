# coding=utf-8
"""Files of every script: local paths with open(), paths with a scheme (gs://, file://, ...)
through tf.io.gfile; outputs under a temporary name (.<name>.tmp-<pid>), renamed when complete
(write_text_atomic), the temporaries of dead runs removed (remove_stale_temporaries), and the
one-line text of a file error. TensorFlow is imported only for paths with a scheme."""

import contextlib
import csv
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


def remove_stale_temporaries(directory, finals=None, is_stale=None, log=None):
  """Removes the temporaries of dead runs from `directory` (not its subdirectories); returns
  the removed names.

  A temporary of temp_name (".<final>.tmp-<pid>", also a TF checkpoint prefix
  "<final>.tmp-<pid>.index/.data-*") is removed when process <pid> is gone: only on a
  local disk, where that can be told (a live concurrent writer's temporary stays).
  finals: only the temporaries of these final names (with or without a
  "-<p:05d>-of-<P:05d>" part suffix); None: all. is_stale(name): more names to remove (a
  caller that holds the directory's lock knows, e.g., that TensorFlow's own checkpoint
  temporaries, which carry no pid, are stale). log(message): told of each removal."""
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
      _remove_tree_or_file(path)
    except Exception as e:  # removed meanwhile, or read-only
      if log:
        log("could not remove the stale temporary %s: %s" % (path, e))
      continue
    removed.append(name)
    if log:
      log("removed %s, a temporary left by a run that ended before it finished" % path)
  return removed


def write_text_atomic(path, text):
  """Writes `text` to temp_name(path) then renames it over path (tf.io.gfile for a remote
  path; a local one does not import TensorFlow); the temporary is removed on an error."""
  tmp = temp_name(path)
  if not is_remote(path):
    try:
      with open(tmp, "w", encoding="utf-8", newline="") as f:
        f.write(text)
      os.replace(tmp, path)
    except BaseException:
      remove_quietly(tmp)
      raise
    return
  gfile = _gfile()
  try:
    with gfile.GFile(tmp, "w") as f:
      f.write(text)
    gfile.rename(tmp, path, overwrite=True)
  except BaseException:
    with contextlib.suppress(Exception):
      gfile.remove(tmp)
    raise


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
