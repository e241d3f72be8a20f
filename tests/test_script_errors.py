"""A user's mistake found while a script runs is one `error:` line (utils/errors.py's
script_main): out of memory, file errors the checks did not catch, a damaged TFRecord, an
unreachable input or unknown file system on the command line; other errors keep their
traceback."""

import os
import re
import subprocess
import sys

import pytest
import tensorflow as tf

from conftest import REPO, config_file
from test_run_pretraining import ENV
from bert_keras.runtime import input_pipeline
from bert_keras.utils import errors
from bert_keras.utils import file_io


def test_out_of_memory_during_the_run_is_one_line():
  def run(options):
    raise tf.errors.ResourceExhaustedError(None, None, "OOM when allocating tensor with "
                                           "shape[4096,30522]\nand more lines")
  with pytest.raises(SystemExit) as info:
    errors.script_main(run)(None)
  assert str(info.value.code) == (
      "error: out of memory (OOM when allocating tensor with shape[4096,30522] and more "
      "lines): use a smaller --train_batch_size, --max_seq_length or model")


@pytest.mark.parametrize("error, expected", [
    (FileNotFoundError(2, "No such file or directory", "/data/x.txt"),
     "error: /data/x.txt: No such file or directory"),
    (IsADirectoryError(21, "Is a directory", "out"), "error: out: Is a directory"),
    (tf.errors.UnimplementedError(None, None, "File system scheme 'foo' not implemented "
                                  "(file: 'foo://x/train.tsv')"),
     "error: File system scheme 'foo' not implemented (file: 'foo://x/train.tsv')"),
    (tf.errors.NotFoundError(None, None, "gs://b/x.json; No such file\nmore"),
     "error: gs://b/x.json; No such file more"),
    (tf.errors.FailedPreconditionError(None, None, "Error executing an HTTP request: libcurl "
                                       "code 6\n when reading gs://b/"),
     "error: Error executing an HTTP request: libcurl code 6 when reading gs://b/"),
])
def test_file_errors_missed_by_the_checks_are_one_line(error, expected):
  def run(options):
    raise error
  with pytest.raises(SystemExit) as info:
    errors.script_main(run)(None)
  assert str(info.value.code) == expected


@pytest.mark.parametrize("error", [
    tf.errors.UnimplementedError(None, None, "an op this build lacks"),
    tf.errors.FailedPreconditionError(None, None, "uninitialized value x"),
    KeyError("a bug"),
])
def test_other_errors_keep_their_traceback(error):
  def run(options):
    raise error
  with pytest.raises(type(error)):
    errors.script_main(run)(None)
  assert file_io.file_error_text(error) is None


def test_an_output_that_cannot_be_written_is_named_as_given(tmp_path):
  """file_io's atomic writers write a temporary beside the output: an error names the output
  the user gave, not the temporary."""
  (tmp_path / "plain").write_text("a file, not a directory")
  out = str(tmp_path / "plain" / "out.jsonl")

  def run(options):
    with file_io.atomic_output(out) as tmp:
      with open(tmp, "w") as f:
        f.write("x")
  for main in (errors.script_main(run),
               errors.script_main(lambda options: file_io.write_text_atomic(out, "x"))):
    with pytest.raises(SystemExit) as info:
      main(None)
    assert str(info.value.code) == f"error: {out}: Not a directory"


def test_damaged_record_mid_run_is_one_line(tmp_path):
  from test_run_pretraining import _write_records
  path = tmp_path / "damaged.tfrecord"
  _write_records(path, 10, seed=4)
  raw = bytearray(path.read_bytes())
  raw[len(raw) * 3 // 4] ^= 0xFF
  path.write_bytes(bytes(raw))

  def run(options):
    for _ in tf.data.TFRecordDataset(str(path)):
      pass
  with pytest.raises(SystemExit) as info:
    errors.script_main(run)(None)
  assert str(info.value.code).startswith("error: damaged data: corrupted record at ")
  assert str(info.value.code).endswith(" of a TFRecord file (its checksum does not match: the "
                                       "file is damaged)")


def test_directory_or_unreadable_file_as_input_file(tmp_path):
  folder = tmp_path / "records"
  folder.mkdir()
  with pytest.raises(ValueError, match=f"^--input_file {folder}: a directory, not a TFRecord"):
    input_pipeline.check_record_files([str(folder)], "--input_file", {})


@pytest.mark.slow
def test_command_line_unreachable_input_of_pretraining_data(tmp_path):
  vocab = tmp_path / "vocab.txt"
  vocab.write_text("[PAD]\n[UNK]\n[CLS]\n[SEP]\n[MASK]\na\n")
  proc = subprocess.run(
      [sys.executable, str(REPO / "create_pretraining_data.py"), "--input_file=foo://x/in.txt",
       f"--output_file={tmp_path / 'out.tfrecord'}", f"--vocab_file={vocab}"],
      env=ENV, capture_output=True, text=True, timeout=300)
  assert proc.returncode == 1
  assert proc.stderr.strip().splitlines()[-1].startswith(
      "error: File system scheme 'foo' not implemented")
  assert "Traceback" not in proc.stderr
  assert os.listdir(tmp_path) == ["vocab.txt"]


@pytest.mark.slow
def test_command_line_unknown_scheme_is_one_line(tmp_path):
  vocab = tmp_path / "vocab.txt"
  vocab.write_text("[PAD]\n[UNK]\n[CLS]\n[SEP]\nthe\n")
  config = config_file(tmp_path, "config.json")
  proc = subprocess.run(
      [sys.executable, str(REPO / "run_classifier.py"), "--task_name=CoLA", "--do_train",
       "--data_dir=foo://x", f"--vocab_file={vocab}", f"--bert_config_file={config}",
       "--max_seq_length=16", f"--output_dir={tmp_path / 'out'}"],
      env=ENV, capture_output=True, text=True, timeout=300)
  assert proc.returncode == 1
  assert proc.stderr.strip().splitlines()[-1] == (
      "error: File system scheme 'foo' not implemented (file: 'foo://x/train.tsv')")
  assert "Traceback" not in proc.stderr
  assert not (tmp_path / "out").exists()


def _scripts():
  return sorted(path.name for path in REPO.glob("*.py")
                if 'if __name__ == "__main__":' in path.read_text(encoding="utf-8"))


HINT = "(activate .venv: source .venv/bin/activate, or pip install -e .)"


@pytest.mark.parametrize("script", _scripts())
def test_a_script_outside_the_venv_prints_a_one_line_hint(script, tmp_path):
  """Run by a Python without the package (no site-packages, PYTHONPATH ignored: -S -E), then
  with the package but without TensorFlow and absl: one `error:` line naming the missing
  module and how to get it, not a ModuleNotFoundError traceback."""
  proc = subprocess.run([sys.executable, "-S", "-E", str(REPO / script), "--help"],
                        cwd=tmp_path, capture_output=True, text=True, timeout=60)
  assert proc.returncode == 1
  assert proc.stderr == f"error: No module named 'bert_keras' {HINT}\n"
  (tmp_path / "bert_keras").symlink_to(REPO, target_is_directory=True)
  code = ("import runpy, sys; sys.path.insert(0, sys.argv[1]); sys.argv = sys.argv[2:]; "
          "runpy.run_path(sys.argv[0], run_name='__main__')")
  proc = subprocess.run([sys.executable, "-S", "-E", "-c", code, str(tmp_path),
                         str(REPO / script), "--help"],
                        cwd=tmp_path, capture_output=True, text=True, timeout=60)
  assert proc.returncode == 1
  assert re.fullmatch(r"error: No module named '(tensorflow|absl)' " + re.escape(HINT) + "\n",
                      proc.stderr), proc.stderr


def test_the_run_noise_filter_drops_tensorflow_s_lines_only():
  """utils/quiet_tensorflow's filter process: TensorFlow's end-of-iterator and generator
  dataset lines (and their indented node lines) and oneDNN's AVX-512 fallback note (any
  type's) dropped; real errors, our log lines and a progress line rewritten in place (no
  newline yet) passed on."""
  from bert_keras.utils import quiet_tensorflow
  text = (
      "I1126 18:24:21.748773 1 run_classifier.py:561] ***** Running training *****\n"
      "W0000 00:00:1795717461.880762   20470 dataset.cc:997] Input of "
      "GeneratorDatasetOp::Dataset will not be optimized because the dataset does not "
      "implement the AsGraphDefInternal() method needed to apply optimizations.\n"
      "2024-06-03 23:14:56.522118: W tensorflow/core/framework/local_rendezvous.cc:404] Local "
      "rendezvous is aborting with status: OUT_OF_RANGE: End of sequence\n"
      "\t [[{{node IteratorGetNext}}]]\n"
      "W tensorflow/core/kernels/data/generator_dataset_op.cc:103] Error occurred when "
      "finalizing GeneratorDataset iterator: Cancelled: Operation was cancelled\n"
      "E0000 00:00:1.2 1 local_rendezvous.cc:404] Local rendezvous is aborting with status: "
      "INVALID_ARGUMENT: Received a label value of 7\n"
      "\t [[{{node SparseSoftmaxCrossEntropyWithLogits}}]]\n"
      "E0000 00:00:1764168261.748773    2046 util.cc:131] oneDNN supports DT_INT64 only on "
      "platforms with AVX-512. Falling back to the default Eigen-based implementation if "
      "present.\n"
      "2025-11-01 10:50:29.061816: E tensorflow/core/util/util.cc:131] oneDNN supports DT_BOOL "
      "only on platforms with AVX-512. Falling back to the default Eigen-based implementation "
      "if present.\n"
      "E0000 00:00:1.3 1 mkl_util.h:99] oneDNN failed: an error of the same library\n"
      "error: --data_dir: no such file\n"
      "\r\033[Kstep 3 of 8")
  kept = subprocess.run(
      [sys.executable, "-S", "-E", "-c", quiet_tensorflow._FILTER, quiet_tensorflow.RUN_NOISE],
      input=text.encode(), capture_output=True, timeout=60)
  assert kept.returncode == 0, kept.stderr
  lines = text.split("\n")
  assert kept.stdout.decode() == "\n".join([lines[0]] + lines[5:7] + lines[9:])


@pytest.mark.slow
def test_a_run_s_stderr_has_no_tensorflow_iterator_noise(tmp_path):
  """A tiny run_classifier run from the command line (TensorFlow's own log level): no
  GeneratorDataset or rendezvous lines on stderr, our log lines all there."""
  vocab = tmp_path / "vocab.txt"
  vocab.write_text("".join(f"{t}\n" for t in ["[PAD]", "[UNK]", "[CLS]", "[SEP]", "the", "a"]))
  env = {k: v for k, v in ENV.items() if k not in ("TF_CPP_MIN_LOG_LEVEL",
                                                    "BERT_KERAS_TF_NOISE")}
  proc = subprocess.run(
      [sys.executable, str(REPO / "run_classifier.py"), "--task_name=custom", "--do_train",
       "--do_eval", f"--data_dir={REPO / 'sample_tasks' / 'pairs'}", f"--vocab_file={vocab}",
       f"--bert_config_file={config_file(tmp_path, vocab_size=6)}", "--max_seq_length=16",
       "--train_batch_size=16", "--num_train_epochs=1", f"--output_dir={tmp_path / 'out'}"],
      env=env, cwd=tmp_path, capture_output=True, text=True, timeout=300)
  assert proc.returncode == 0, proc.stderr[-3000:]
  assert "***** Eval results *****" in proc.stderr
  for noise in ("GeneratorDataset", "rendezvous"):
    assert noise not in proc.stderr


@pytest.mark.parametrize("script", [s for s in _scripts() if "app.run(" in (REPO / s).read_text(
    encoding="utf-8")])  # (evaluate_squad.py and evaluate_ner.py take argparse's arguments)
def test_every_script_parses_its_flags_with_the_one_line_parser(script):
  """absl's own parser prints "FATAL Flags parsing error" and a second line; every script's
  app.run takes a flags_parser that says a wrong flag in one `error:` line."""
  runs = re.findall(r"app\.run\(main(.*)\)", (REPO / script).read_text(encoding="utf-8"))
  assert runs and all("flags_parser=" in run for run in runs), (script, runs)


@pytest.mark.parametrize("argument, expected", [
    ("--no_such_flag=1", "error: Unknown command line flag 'no_such_flag' (--helpfull lists "
                         "the flags)"),
    ("--vocab_size=abc", "error: flag --vocab_size=abc: invalid literal for int() with base 10: "
                         "'abc' (--helpfull lists the flags)")])
def test_a_wrong_flag_is_one_line(argument, expected):
  proc = subprocess.run([sys.executable, str(REPO / "create_vocab.py"), argument],
                        env=ENV, capture_output=True, text=True, timeout=300)
  lines = proc.stderr.strip().splitlines()
  assert proc.returncode == 1 and len(lines) == 1, proc.stderr
  assert lines[0] == expected
