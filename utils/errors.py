"""The one net of every script's main(): a user's mistake reported as one line `error: ...`
and exit status 1, never a traceback (one_line_errors; script_main for the scripts whose job
is a run(FLAGS))."""

import contextlib
import re
import sys

from absl import flags
from absl import logging

from bert_keras.utils import file_io


def error_line(text, limit=1000):
  """`text` folded onto one line, at most `limit` characters (user data it quotes may be huge)."""
  text = " ".join(str(text).split())
  return text if len(text) <= limit else text[:limit] + "..."


# A data error found by a TensorFlow assertion inside a graph (e.g. a tf.data check of each
# batch): its text between these marks, anywhere in the InvalidArgumentError's message, is the
# one line to show (data_error_text).
DATA_ERROR_START, DATA_ERROR_END = "<<data error: ", " :data error>>"


def data_error_text(message):
  """The text between DATA_ERROR_START and DATA_ERROR_END in `message` (a TensorFlow error's,
  which adds the graph's node names around it), or None."""
  found = re.search(re.escape(DATA_ERROR_START) + "(.*?)" + re.escape(DATA_ERROR_END),
                    str(message), re.S)
  return error_line(found.group(1)) if found else None


@contextlib.contextmanager
def one_line_errors():
  """Runs the body; turns a user's mistake into SystemExit("error: ...") (exit status 1):
  a ValueError (which checkpoints.CheckpointError, tokenization.VocabError and the scripts'
  UsageError are), an out-of-memory error and, as a last net behind the scripts' own checks
  (which name the flag), a file that cannot be found, read or reached
  (file_io.file_error_text), named by its path; a data error that a TensorFlow assertion
  marked (data_error_text) and a damaged record (DataLossError) as one line too. Any other
  error keeps its traceback.
  TensorFlow's errors are recognised only when TensorFlow is loaded (it is never imported
  here)."""
  tf_errors = getattr(sys.modules.get("tensorflow"), "errors", None)
  out_of_memory = (MemoryError,) + ((tf_errors.ResourceExhaustedError,) if tf_errors else ())
  keras = sys.modules.get("keras")
  if keras is not None and hasattr(keras, "backend") and keras.backend.backend() != "tensorflow":
    # modeling.py runs on any Keras backend; the scripts' loops, tf.data and tf.distribute do not
    raise SystemExit("error: the scripts run Keras on TensorFlow, but KERAS_BACKEND (or "
                     "keras.json) chose %s: unset KERAS_BACKEND or set it to tensorflow"
                     % keras.backend.backend())
  try:
    yield
  except ValueError as e:
    raise SystemExit("error: " + error_line(e)) from None
  except out_of_memory as e:
    what = error_line(getattr(e, "message", e) or type(e).__name__, 300)
    raise SystemExit(f"error: out of memory ({what}): use a smaller --train_batch_size, "
                     "--max_seq_length or model") from None
  except Exception as e:
    text = file_io.file_error_text(e)
    if text is None and tf_errors is not None and isinstance(e, tf_errors.OpError):
      text = data_error_text(e.message)
      if text is None and isinstance(e, tf_errors.DataLossError):
        record = re.search(r"corrupted record at \d+", str(e.message))
        text = "damaged data: " + (
            record.group(0) + " of a TFRecord file (its checksum does not match: the file "
            "is damaged)" if record else error_line(_without_node_names(e.message), 500))
    if text is None:
      raise
    raise SystemExit("error: " + text) from None


def parse_flags(argv, known_only=False):
  """The scripts' absl flag parser (app.run(main, flags_parser=parse_flags)): absl's, with a
  wrong flag (unknown, or a value its type refuses) as one line `error: ...` and exit status 1
  instead of absl's "FATAL Flags parsing error" and its second line. known_only: the
  arguments absl does not know are returned (a Beam pipeline's options), not refused."""
  try:
    return flags.FLAGS(argv, known_only=known_only)
  except flags.Error as e:
    sys.stderr.write(f"error: {error_line(e)} (--helpfull lists the flags)\n")
    sys.exit(1)


def _without_node_names(message):
  """A TensorFlow error message without its {{function_node ...}} and [Op:...] parts."""
  return re.sub(r"\{\{[^}]*\}\}|\[Op:[^\]]*\]( name: \S*)?", "", str(message)).strip()


def script_main(run):
  """The absl main() of a script whose job is run(FLAGS): INFO logging, TensorFlow's run-time
  noise filtered out of stderr (quiet_tensorflow.filter_run_noise, when app.run calls it with
  the command line and TensorFlow is loaded), then run(flags.FLAGS) under one_line_errors."""

  def main(argv):
    logging.set_verbosity(logging.INFO)
    if argv is not None and "tensorflow" in sys.modules:  # (from the command line: app.run)
      from bert_keras.utils import quiet_tensorflow
      quiet_tensorflow.filter_run_noise()
    with one_line_errors():
      run(flags.FLAGS)

  return main
