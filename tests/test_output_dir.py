"""The --output_dir of a run: temporaries of dead runs removed (and only theirs), one run per
directory (a lock naming the holder's pid, flock or, where there is none, the pid and host in
the file), a directory that cannot be made as a one-line error, and a failed run leaving no
directory it made.

The run_pretraining runs reuse test_run_pretraining's tiny setup (2 layers, hidden 32)."""

import json
import os
import socket
import subprocess
import sys

import pytest
import tensorflow as tf

from conftest import REPO, OtherWorker, config_file, dead_pid, one_device
from test_run_pretraining import ENV, _options
from test_run_pretraining import data  # noqa: F401  (a fixture)
from bert_keras import checkpoints
from bert_keras import create_pretraining_data
from bert_keras import modeling
from bert_keras import run_classifier
from bert_keras import run_pretraining
from bert_keras.runtime import model_dir
from bert_keras.runtime import outputs
from bert_keras.utils import file_io


def test_output_directory_removes_dead_runs_temporaries_only(tmp_path, caplog):
  out = tmp_path / "out"
  out.mkdir()
  dead, live = dead_pid(), os.getpid()
  stale = [f".train.tf_record.tmp-{dead}", f".eval_results.txt.tmp-{dead}",
           f".bert_model.ckpt.tmp-{dead}.index",
           f".bert_model.ckpt.tmp-{dead}.data-00000-of-00001",
           "checkpoint.tmp" + "0123456789abcdef" * 2, "train.tf_record.tmp",
           "model.ckpt-3.data-00000-of-00001.tempstate123"]
  kept = [f".predict.tf_record.tmp-{live}",             # a live writer's
          "notes.tmp", f"results.tmp-{dead}.csv", "model.ckpt-3.index", "my_temp"]
  for name in stale + kept:
    (out / name).write_text("x")
  (out / "model.ckpt-6_temp").mkdir()                     # TensorFlow's, of a save cut short
  (out / "model.ckpt-6_temp" / "part-00000-of-00001.index").write_text("x")
  with outputs.output_directory(one_device(), str(out)) as record_dir:
    assert record_dir == str(out)
    assert (out / outputs.LOCK_NAME).read_text().split() == [str(os.getpid()),
                                                              socket.gethostname()]
    assert sorted(os.listdir(out)) == sorted(kept + [outputs.LOCK_NAME])
  assert sorted(os.listdir(out)) == sorted(kept)          # the lock is gone with the run
  removed = [r.getMessage() for r in caplog.records if "a temporary left by" in r.getMessage()]
  assert len(removed) == len(stale) + 1
  assert any("model.ckpt-6_temp" in line for line in removed)


def test_create_pretraining_data_removes_its_dead_temporaries(tmp_path, caplog):
  dead = dead_pid()
  names = [f".out.tfrecord.tmp-{dead}", f".out.tfrecord-00001-of-00002.tmp-{dead}",
           f".other.tfrecord.tmp-{dead}", f".out.tfrecord.tmp-{os.getpid()}"]
  for name in names:
    (tmp_path / name).write_bytes(b"x" * 10)
  create_pretraining_data.remove_dead_temporaries([str(tmp_path / "out.tfrecord")])
  assert sorted(os.listdir(tmp_path)) == sorted(names[2:])   # another output's, a live one
  assert sum("a temporary left by" in r.getMessage() for r in caplog.records) == 2


def test_temporaries_carry_the_pid(tmp_path):
  path = str(tmp_path / "eval_results.txt")
  assert file_io.temp_name(path) == str(tmp_path / f".eval_results.txt.tmp-{os.getpid()}")
  file_io.write_text_atomic(path, "a = 1\n")
  assert os.listdir(tmp_path) == ["eval_results.txt"]
  prefix = str(tmp_path / "ckpt" / "bert_model.ckpt")
  model = modeling.BertModel(modeling.BertConfig(100, hidden_size=16, num_hidden_layers=1,
                                                 num_attention_heads=2, intermediate_size=32))
  checkpoints.save_tf1_checkpoint(model, prefix)
  assert sorted(os.listdir(tmp_path / "ckpt")) == ["bert_model.ckpt.data-00000-of-00001",
                                                   "bert_model.ckpt.index"]


def test_classifier_records_leave_no_temporary_on_an_error(tmp_path):
  class Boom:
    guid, text_a, text_b, label = "g", "a", None, "x"
  with pytest.raises(AttributeError):                     # (no tokenizer: fails mid-write)
    run_classifier.file_based_convert_examples_to_features(
        [Boom()], ["0", "1"], 8, None, str(tmp_path / "train.tf_record"))
  assert os.listdir(tmp_path) == []


def test_second_run_into_a_held_directory_is_refused(tmp_path):
  out = str(tmp_path / "out")
  with outputs.output_directory(one_device(), out):
    with pytest.raises(ValueError) as info:
      with outputs.output_directory(one_device(), out):
        pass
    message = str(info.value)
    assert message.startswith(f"--output_dir {out}: another run (pid {os.getpid()}")
    assert "\n" not in message
    # A multi-worker run's other workers neither lock nor clean: no deadlock with the chief.
    with outputs.output_directory(OtherWorker(), out) as record_dir:
      assert record_dir != out and os.path.isdir(record_dir)
  with outputs.output_directory(one_device(), out):  # released: the next run takes it
    pass
  assert os.listdir(out) == []


_HOLDER = """
import sys, time
import tensorflow as tf
from bert_keras.runtime import outputs
with outputs.output_directory(tf.distribute.OneDeviceStrategy("/cpu:0"), sys.argv[1]):
  print("HOLDING", flush=True)
  time.sleep(600)
"""


@pytest.mark.slow
def test_lock_of_another_process_then_of_a_killed_one(data, tmp_path, caplog):  # noqa: F811
  out = tmp_path / "out"
  holder = subprocess.Popen([sys.executable, "-c", _HOLDER, str(out)], env=ENV, text=True,
                            stdout=subprocess.PIPE, stderr=subprocess.DEVNULL)
  try:
    assert holder.stdout.readline().strip() == "HOLDING"
    with pytest.raises(ValueError) as info:  # the script's run, before any model is built
      run_pretraining.run(_options(data, out))
    assert str(info.value) == (
        f"--output_dir {out}: another run (pid {holder.pid}) is using this directory (lock "
        f"{out / outputs.LOCK_NAME}); wait for it to end or choose another --output_dir")
    assert not list(out.glob("model.ckpt*"))
  finally:
    holder.kill()
    holder.wait()
  # Killed: its lock file stays, but the lock died with it and is taken over.
  assert (out / outputs.LOCK_NAME).read_text().split()[0] == str(holder.pid)
  with outputs.output_directory(one_device(), str(out)):
    pass
  assert any(f"taking over the lock of pid {holder.pid}" in r.getMessage()
             for r in caplog.records)
  assert not (out / outputs.LOCK_NAME).exists()


def test_lock_by_pid_where_there_is_no_flock(tmp_path, caplog):
  """On gs:// (here TensorFlow's ram:// file system) the lock is the pid and host in the
  file: a live holder refuses, a dead one on this host is taken over."""
  out = f"ram://{tmp_path.name}/out"
  tf.io.gfile.makedirs(out)
  lock = out + "/" + outputs.LOCK_NAME
  host = socket.gethostname()
  with tf.io.gfile.GFile(lock, "w") as f:
    f.write(f"{os.getpid()} {host}\n")
  with pytest.raises(ValueError, match=f"another run \\(pid {os.getpid()} \\(this process\\)"):
    with outputs.output_directory(one_device(), out):
      pass
  dead = dead_pid()
  tf.io.gfile.remove(lock)
  with tf.io.gfile.GFile(lock, "w") as f:
    f.write(f"{dead} {host}\n")
  with outputs.output_directory(one_device(), out):
    with tf.io.gfile.GFile(lock) as f:
      assert f.read().split() == [str(os.getpid()), host]
  assert f"taking over the lock of pid {dead}" in caplog.text
  assert not tf.io.gfile.exists(lock)
  with tf.io.gfile.GFile(lock, "w") as f:
    f.write(f"{dead} another-host\n")                     # cannot tell: refused
  with pytest.raises(ValueError, match=f"pid {dead} on another-host"):
    with outputs.output_directory(one_device(), out):
      pass


def test_lock_on_a_file_system_without_flock(tmp_path, monkeypatch):
  import errno
  import fcntl

  def no_flock(fd, operation):
    raise OSError(errno.ENOLCK, "No locks available")
  monkeypatch.setattr(fcntl, "flock", no_flock)
  out = str(tmp_path / "out")
  with outputs.output_directory(one_device(), out):
    assert open(os.path.join(out, outputs.LOCK_NAME)).read().split()[0] == str(os.getpid())
    with pytest.raises(ValueError, match="another run"):
      with outputs.output_directory(one_device(), out):
        pass
  assert os.listdir(out) == []


def test_fine_tuning_scripts_take_the_lock(tmp_path):
  """run_classifier and run_squad refuse a held --output_dir too (before any model)."""
  from bert_keras import run_squad
  vocab = tmp_path / "vocab.txt"
  vocab.write_text("".join(t + "\n" for t in ["[PAD]", "[UNK]", "[CLS]", "[SEP]", "[MASK]",
                                              "the", "dog", "runs", "who"]))
  config = config_file(tmp_path, "config.json")
  cola = tmp_path / "cola"
  cola.mkdir()
  (cola / "train.tsv").write_text("src\t1\t\tthe dog runs\nsrc\t0\t\tdog the runs\n")
  squad = tmp_path / "train.json"
  squad.write_text(json.dumps({"data": [{"paragraphs": [{"context": "the dog runs", "qas": [
      {"id": "q1", "question": "who runs", "answers": [{"text": "dog", "answer_start": 4}]}]}]}]}))
  out = str(tmp_path / "out")
  runs = {
      "run_classifier": lambda: run_classifier.run(run_classifier.options(
          data_dir=str(cola), task_name="CoLA", vocab_file=str(vocab), do_train=True,
          bert_config_file=str(config), output_dir=out, max_seq_length=16,
          train_batch_size=1)),
      "run_squad": lambda: run_squad.run(run_squad.options(
          train_file=str(squad), vocab_file=str(vocab), do_train=True, max_seq_length=32,
          max_query_length=8, doc_stride=8, bert_config_file=str(config), output_dir=out,
          train_batch_size=1)),
  }
  with outputs.output_directory(one_device(), out):
    for name, run in runs.items():
      with pytest.raises(ValueError) as info:
        run()
      assert str(info.value).startswith(f"--output_dir {out}: another run (pid {os.getpid()}"), (
          name)
  assert os.listdir(out) == []


@pytest.mark.parametrize("where", ["below_a_file", "a_file", "unknown_scheme"])
def test_output_dir_that_cannot_be_made(data, tmp_path, monkeypatch, where):  # noqa: F811
  monkeypatch.setattr(modeling, "BertPretrainer", None)  # any model built would fail
  a_file = tmp_path / "file.txt"
  a_file.write_text("x")
  out, expected = {
      "below_a_file": (a_file / "out", f"--output_dir {a_file}/out: is below the file "
                                       f"{a_file}, not a directory"),
      "a_file": (a_file, f"--output_dir {a_file}: is a file, not a directory"),
      "unknown_scheme": ("nosuchfs://bucket/out", "--output_dir nosuchfs://bucket/out: cannot "
                                                 "create the directory: File system scheme "
                                                 "'nosuchfs' not implemented"),
  }[where]
  with pytest.raises(ValueError) as info:
    run_pretraining.run(_options(data, out))
  assert str(info.value).startswith(expected)
  assert "\n" not in str(info.value)


def test_failed_run_removes_the_output_dir_it_made(data, tmp_path, monkeypatch):  # noqa: F811
  def fail(config):
    raise ValueError("no model today")
  monkeypatch.setattr(modeling, "BertPretrainer", fail)
  out = tmp_path / "new" / "out"
  with pytest.raises(ValueError, match="no model today"):
    run_pretraining.run(_options(data, out))
  assert not out.exists()
  out.mkdir(parents=True)                                  # one that was there stays
  with pytest.raises(ValueError, match="no model today"):
    run_pretraining.run(_options(data, out))
  # (what it holds: the model files, written before the model is built; runtime/model_dir.py)
  assert out.is_dir() and set(os.listdir(out)) <= set(model_dir.MODEL_FILES)


@pytest.mark.slow
def test_command_line_output_dir_below_a_file(data, tmp_path):  # noqa: F811
  proc = subprocess.run(
      [sys.executable, str(REPO / "run_pretraining.py"), f"--input_file={data}/part-0.tfrecord",
       "--output_dir=/etc/passwd/out", "--do_train=True",
       f"--bert_config_file={data / 'config.json'}", "--max_seq_length=32",
       "--max_predictions_per_seq=5"], env=ENV, capture_output=True, text=True, timeout=300)
  assert proc.returncode == 1
  assert proc.stderr.strip().splitlines()[-1] == (
      "error: --output_dir /etc/passwd/out: is below the file /etc/passwd, not a directory")
  assert "Traceback" not in proc.stderr
