# coding=utf-8
"""Files for create_pretraining_data: local paths with open(), paths with a scheme
(gs://, file://, ...) through tf.io.gfile; outputs under a temporary name, renamed when
complete. TensorFlow is imported only for paths with a scheme."""

import glob
import os


def is_remote(path):
  """Whether `path` has a scheme (gs://, file://, ...): it then goes through tf.io.gfile."""
  return "://" in path


def _gfile():
  import tensorflow as tf  # pylint: disable=g-import-not-at-top  (remote paths only)
  return tf.io.gfile


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
  except Exception:  # pylint: disable=broad-except
    pass


def temp_name(path, tag=None):
  """Where `path` is written until complete: .<name>.tmp-<tag or pid> beside it."""
  head, tail = path.rsplit("/", 1) if "/" in path else ("", path)
  name = ".%s.tmp-%s" % (tail, tag or os.getpid())
  return head + "/" + name if head else name
