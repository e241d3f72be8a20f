"""Reliability of runs (issue 15): temporaries of dead runs removed, one run per --output_dir
(a lock naming the holder's pid), --output_dir below a file or on a file system TensorFlow
cannot reach as one-line errors, resume from the previous checkpoint when the newest is
truncated, the config compared with the checkpoint's shapes and with the memory before any
model is built, TSV fields over the csv module's 128 KiB limit. Issue 26 (third pass): custom
task labels, crafted weight files, token ids past the vocab, serving batch sizes,
evaluate_squad, long vocab entries, export locks, create_vocab / run_squad / warmup leftovers.

The run_pretraining runs reuse test_run_pretraining's tiny setup (2 layers, hidden 32)."""

import csv
import json
import os
import re
import socket
import subprocess
import sys
import time

import numpy as np
import pytest
import tensorflow as tf

import oracle
from test_checkpoint_files import _Storage, _Tensor, write_bin  # noqa: F401  (a fixture)
from test_run_pretraining import ENV, REPO, _assert_same_weights, _options, _weights
from test_run_pretraining import data  # noqa: F401  (a fixture)
from bert_keras import checkpoints
from bert_keras import create_pretraining_data
from bert_keras import modeling
from bert_keras import run_classifier
from bert_keras import run_pretraining
from bert_keras.runtime import input_pipeline
from bert_keras.runtime import model_dir
from bert_keras.runtime import outputs
from bert_keras.runtime import run_checks
from bert_keras.runtime import training_checkpoints
from bert_keras.utils import errors
from bert_keras.utils import file_io
from bert_keras.utils import memory


def _dead_pid():
  """The pid of a process that has ended (and been reaped)."""
  proc = subprocess.Popen([sys.executable, "-c", "pass"])
  proc.wait()
  assert not file_io.process_is_alive(proc.pid)
  return proc.pid


def _one_device():
  return tf.distribute.OneDeviceStrategy("/cpu:0")


class _OtherWorker(object):
  """A strategy as distribution.is_chief sees worker 1 of a multi-worker run."""

  class cluster_resolver(object):  # noqa: N801
    task_type, task_id = "worker", 1

    @staticmethod
    def cluster_spec():
      return tf.train.ClusterSpec({"worker": ["localhost:1", "localhost:2"]})


# ----------------------------------------------------------------------------
# 1. Temporaries of dead runs.

def test_output_directory_removes_dead_runs_temporaries_only(tmp_path, caplog):
  out = tmp_path / "out"
  out.mkdir()
  dead, live = _dead_pid(), os.getpid()
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
  with outputs.output_directory(_one_device(), str(out)) as record_dir:
    assert record_dir == str(out)
    assert (out / outputs.LOCK_NAME).read_text().split() == [str(os.getpid()),
                                                              socket.gethostname()]
    assert sorted(os.listdir(out)) == sorted(kept + [outputs.LOCK_NAME])
  assert sorted(os.listdir(out)) == sorted(kept)          # the lock is gone with the run
  removed = [r.getMessage() for r in caplog.records if "a temporary left by" in r.getMessage()]
  assert len(removed) == len(stale) + 1
  assert any("model.ckpt-6_temp" in line for line in removed)


def test_create_pretraining_data_removes_its_dead_temporaries(tmp_path, caplog):
  dead = _dead_pid()
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


# ----------------------------------------------------------------------------
# 2. One run per output directory.

def test_second_run_into_a_held_directory_is_refused(tmp_path):
  out = str(tmp_path / "out")
  with outputs.output_directory(_one_device(), out):
    with pytest.raises(ValueError) as info:
      with outputs.output_directory(_one_device(), out):
        pass
    message = str(info.value)
    assert message.startswith(f"--output_dir {out}: another run (pid {os.getpid()}")
    assert "\n" not in message
    # A multi-worker run's other workers neither lock nor clean: no deadlock with the chief.
    with outputs.output_directory(_OtherWorker(), out) as record_dir:
      assert record_dir != out and os.path.isdir(record_dir)
  with outputs.output_directory(_one_device(), out):  # released: the next run takes it
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
  with outputs.output_directory(_one_device(), str(out)):
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
    with outputs.output_directory(_one_device(), out):
      pass
  dead = _dead_pid()
  tf.io.gfile.remove(lock)
  with tf.io.gfile.GFile(lock, "w") as f:
    f.write(f"{dead} {host}\n")
  with outputs.output_directory(_one_device(), out):
    with tf.io.gfile.GFile(lock) as f:
      assert f.read().split() == [str(os.getpid()), host]
  assert f"taking over the lock of pid {dead}" in caplog.text
  assert not tf.io.gfile.exists(lock)
  with tf.io.gfile.GFile(lock, "w") as f:
    f.write(f"{dead} another-host\n")                     # cannot tell: refused
  with pytest.raises(ValueError, match=f"pid {dead} on another-host"):
    with outputs.output_directory(_one_device(), out):
      pass


# ----------------------------------------------------------------------------
# 3. --output_dir that cannot be a directory.

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


# ----------------------------------------------------------------------------
# 4. A truncated newest checkpoint: resume from the previous one.

@pytest.mark.slow
def test_truncated_or_incomplete_newest_checkpoint_falls_back(data, tmp_path, caplog):  # noqa: F811
  out = tmp_path / "out"
  run_pretraining.run(_options(data, out))                 # checkpoints 3 and 6
  reference = _weights(out / "bert_model.ckpt")             # the final export (TF1 names)
  assert training_checkpoints.checkpoint_problem(str(out / "model.ckpt-6")) is None
  # A save cut short: half the data of the newest checkpoint, and TF's temporary directory.
  data_file = out / "model.ckpt-6.data-00000-of-00001"
  data_file.write_bytes(data_file.read_bytes()[:data_file.stat().st_size // 2])
  (out / "model.ckpt-6_temp").mkdir()
  assert "truncated" in training_checkpoints.checkpoint_problem(str(out / "model.ckpt-6"))
  caplog.clear()
  run_pretraining.run(_options(data, out))
  assert (f"Checkpoint {out}/model.ckpt-6 is unreadable (its .data files hold" in caplog.text)
  assert f"Restoring from {out}/model.ckpt-3" in caplog.text
  assert not (out / "model.ckpt-6_temp").exists()
  # Steps 4-6 again from checkpoint 3: the same weights as the first run's (no dropout).
  _assert_same_weights(reference, _weights(out / "bert_model.ckpt"), atol=1e-6)

  (out / "model.ckpt-6.index").unlink()                    # an index never written
  caplog.clear()
  results = run_pretraining.run(_options(data, out, do_train=False, do_eval=True))
  assert "model.ckpt-6 is unreadable (no .index file)" in caplog.text
  assert int(results["global_step"]) == 3

  for name in ("model.ckpt-3.index",):
    (out / name).unlink()
  with pytest.raises(ValueError) as info:
    run_pretraining.run(_options(data, out))
  assert str(info.value) == (
      f"{out}: none of the checkpoints its \"checkpoint\" file names is readable: "
      "model.ckpt-6 (no .index file); model.ckpt-3 (no .index file)")


# ----------------------------------------------------------------------------
# 5. The config against the checkpoint and the memory, before any model is built.

def _config_file(tmp_path, name="big.json", **overrides):
  config = dict(vocab_size=100, hidden_size=32, num_hidden_layers=2, num_attention_heads=2,
                intermediate_size=64, hidden_act="gelu", max_position_embeddings=64,
                type_vocab_size=2, initializer_range=0.02, hidden_dropout_prob=0.0,
                attention_probs_dropout_prob=0.0)
  path = tmp_path / name
  path.write_text(json.dumps(dict(config, **overrides)))
  return path


@pytest.mark.parametrize("overrides, expected", [
    (dict(hidden_size=16384, num_attention_heads=16),
     "hidden_size 16384 in the config, 32 in the checkpoint"),
    (dict(num_hidden_layers=4), "num_hidden_layers 4 in the config, 2 in the checkpoint"),
    (dict(vocab_size=30522, intermediate_size=128),
     "vocab_size 30522 in the config, 100 in the checkpoint; intermediate_size 128 in the "
     "config, 64 in the checkpoint"),
])
def test_config_that_does_not_fit_the_init_checkpoint(data, tmp_path, monkeypatch,  # noqa: F811
                                                      overrides, expected):
  monkeypatch.setattr(modeling, "BertPretrainer", None)   # any model built would fail
  config = _config_file(tmp_path, **overrides)
  init = data / "init" / "bert_model.ckpt"
  started = time.monotonic()
  with pytest.raises(ValueError) as info:
    run_pretraining.run(_options(data, tmp_path / "out", bert_config_file=str(config)))
  assert str(info.value) == (f"--bert_config_file {config} does not fit --init_checkpoint "
                             f"{init}: {expected}")
  assert time.monotonic() - started < 10
  assert not (tmp_path / "out").exists()


def test_config_sizes_of_every_checkpoint_format(data, tmp_path, write_bin):  # noqa: F811
  """The sizes read from a TF1 checkpoint, our TF2 training checkpoint, a safetensors header
  and a pytorch_model.bin pickle (no tensor read) are the config's."""
  config = modeling.BertConfig.from_json_file(str(data / "config.json"))
  expected = {name: getattr(config, name) for name in (
      "vocab_size", "hidden_size", "num_hidden_layers", "intermediate_size",
      "max_position_embeddings", "type_vocab_size")}
  assert checkpoints.config_sizes(checkpoints.checkpoint_shapes(
      str(data / "init" / "bert_model.ckpt"))) == expected
  out = tmp_path / "out"
  run_pretraining.run(_options(data, out, num_train_steps=3))
  assert checkpoints.config_sizes(checkpoints.checkpoint_shapes(str(out / "model.ckpt-3"))) == (
      expected)
  # HuggingFace names and [out, in] Linear weights.
  model = modeling.BertPretrainer(config)
  state = {}
  for tf1, variable in checkpoints.tf1_variable_map(model).items():
    name, transpose = checkpoints.hf_name(tf1)
    value = np.asarray(variable.numpy(), np.float32)
    state[name] = value.T if transpose else value
  header, body = {}, b""
  for name, value in state.items():
    header[name] = {"dtype": "F32", "shape": list(value.shape),
                    "data_offsets": [len(body), len(body) + value.nbytes]}
    body += np.ascontiguousarray(value).tobytes()
  raw = json.dumps(header).encode()
  st = tmp_path / "hf" / "model.safetensors"
  st.parent.mkdir()
  st.write_bytes(len(raw).to_bytes(8, "little") + raw + body)
  assert checkpoints.config_sizes(checkpoints.checkpoint_shapes(str(st.parent))) == expected
  tensors = {name: _Tensor(_Storage(str(i), np.zeros(value.size, np.float32)), 0,
                           list(value.shape), [value.shape[1], 1] if value.ndim == 2 else [1])
             for i, (name, value) in enumerate(state.items())}
  assert checkpoints.config_sizes(checkpoints.checkpoint_shapes(write_bin(tensors))) == expected
  # A config changed between two runs into one --output_dir: refused before the model, as
  # a rerun with other options (runtime/model_dir.py) and, for a directory without
  # run_options.json, as a config that does not fit its checkpoint.
  wide = _config_file(tmp_path, "wide.json", hidden_size=64, intermediate_size=128)
  with pytest.raises(ValueError, match=r"holds a training run with other options \("
                     r"bert_config_file: .* -> .*wide.json \(another content\)"):
    run_pretraining.run(_options(data, out, bert_config_file=str(wide), init_checkpoint=None))
  (out / "run_options.json").unlink()
  with pytest.raises(ValueError) as info:
    run_pretraining.run(_options(data, out, bert_config_file=str(wide), init_checkpoint=None))
  assert str(info.value) == (
      f"--bert_config_file {wide} does not fit --output_dir {out}/model.ckpt-3: hidden_size 64 "
      "in the config, 32 in the checkpoint; intermediate_size 128 in the config, 64 in the "
      "checkpoint")
  big = modeling.BertConfig.from_dict(dict(config.to_dict(), hidden_size=16384))
  with pytest.raises(checkpoints.CheckpointError, match="hidden_size 16384 in the config, 32"):
    checkpoints.check_config_matches(big, str(st.parent))


@pytest.mark.parametrize("field, value, expected", [
    ("num_hidden_layers", 1000000, "parameters"),
    ("num_hidden_layers", 1e6, "num_hidden_layers must be a positive integer, got 1000000.0"),
    ("hidden_size", 1000000000, "parameters"),
])
def test_absurd_sizes_fail_fast(data, tmp_path, field, value, expected):  # noqa: F811
  overrides = {field: value}
  if field == "hidden_size":
    overrides["num_attention_heads"] = 1
  config = _config_file(tmp_path, **overrides)
  started = time.monotonic()
  with pytest.raises(ValueError) as info:
    run_pretraining.run(_options(data, tmp_path / "out", bert_config_file=str(config)))
  assert str(info.value).startswith(f"--bert_config_file {config}: ")
  assert expected in str(info.value)
  assert time.monotonic() - started < 10


def test_training_that_cannot_fit_in_memory_is_refused_before_the_model(
    data, tmp_path, monkeypatch):  # noqa: F811
  config = _config_file(tmp_path, vocab_size=1000, hidden_size=256, num_attention_heads=4,
                        intermediate_size=1024)
  params = modeling.BertConfig.from_json_file(str(config)).num_parameters()
  # Memory for the weights (inference) but not for weights, gradients and two Adam slots.
  monkeypatch.setattr(memory, "available_bytes", lambda: params * 4 * 2)
  monkeypatch.setattr(run_checks, "_uses_accelerator", lambda options: False)
  monkeypatch.setattr(modeling, "BertPretrainer", None)   # any model built would fail
  with pytest.raises(ValueError) as info:
    run_pretraining.run(_options(data, tmp_path / "out", bert_config_file=str(config),
                                 init_checkpoint=None))
  assert str(info.value) == (
      f"--bert_config_file {config}: a model of {params:.3g} parameters needs "
      f"{params * 16 / 1e9:.3g} GB for its float32 weights, gradients and optimizer slots, "
      f"more than the {params * 8 / 1e9:.3g} GB of memory available")
  options = _options(data, tmp_path / "out", bert_config_file=str(config), do_train=False,
                     do_eval=True)
  run_checks.check_memory(modeling.BertConfig.from_json_file(str(config)), options)  # eval fits


def test_out_of_memory_during_the_run_is_one_line():
  def run(options):
    raise tf.errors.ResourceExhaustedError(None, None, "OOM when allocating tensor with "
                                           "shape[4096,30522]\nand more lines")
  with pytest.raises(SystemExit) as info:
    errors.script_main(run)(None)
  assert str(info.value.code) == (
      "error: out of memory (OOM when allocating tensor with shape[4096,30522] and more "
      "lines): use a smaller --train_batch_size, --max_seq_length or model")


# ----------------------------------------------------------------------------
# 6. TSV fields over the csv module's limit.

def test_tsv_field_over_the_csv_limit_is_read(tmp_path):
  text = "word " * 60000                                   # 300,000 characters
  path = tmp_path / "train.tsv"
  path.write_text(f"sentence\tlabel\n{text}\t1\nshort\t0\n", encoding="utf-8")
  rows = run_classifier.DataProcessor._read_tsv(str(path))
  assert [len(row[0]) for row in rows] == [len("sentence"), len(text), len("short")]
  assert rows[1] == [text, "1"]
  # The original fails on this file (csv's default limit, 131,072 characters a field); a file
  # within the limit reads the same rows in both.
  original = oracle.original("run_classifier")
  raised = csv.field_size_limit(131072)
  try:
    with pytest.raises(csv.Error, match="field larger than field limit"):
      original.DataProcessor._read_tsv(str(path))
  finally:
    csv.field_size_limit(raised)
  small = tmp_path / "small.tsv"
  small.write_text(f"sentence\tlabel\n{'word ' * 20000}\t1\n", encoding="utf-8")
  assert original.DataProcessor._read_tsv(str(small)) == run_classifier.DataProcessor._read_tsv(
      str(small))


def test_fine_tuning_scripts_take_the_lock(tmp_path):
  """run_classifier and run_squad refuse a held --output_dir too (before any model)."""
  from bert_keras import run_squad
  vocab = tmp_path / "vocab.txt"
  vocab.write_text("".join(t + "\n" for t in ["[PAD]", "[UNK]", "[CLS]", "[SEP]", "[MASK]",
                                              "the", "dog", "runs", "who"]))
  config = _config_file(tmp_path, "config.json")
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
  with outputs.output_directory(_one_device(), out):
    for name, run in runs.items():
      with pytest.raises(ValueError) as info:
        run()
      assert str(info.value).startswith(f"--output_dir {out}: another run (pid {os.getpid()}"), (
          name)
  assert os.listdir(out) == []


def test_lock_on_a_file_system_without_flock(tmp_path, monkeypatch):
  import errno
  import fcntl

  def no_flock(fd, operation):
    raise OSError(errno.ENOLCK, "No locks available")
  monkeypatch.setattr(fcntl, "flock", no_flock)
  out = str(tmp_path / "out")
  with outputs.output_directory(_one_device(), out):
    assert open(os.path.join(out, outputs.LOCK_NAME)).read().split()[0] == str(os.getpid())
    with pytest.raises(ValueError, match="another run"):
      with outputs.output_directory(_one_device(), out):
        pass
  assert os.listdir(out) == []


# ----------------------------------------------------------------------------
# 7. Found by the command-line audit of issue 15.

def test_relative_output_dir_resumes(tmp_path, monkeypatch):
  """tf.train.get_checkpoint_state joins relative entries with the directory already: a
  relative --output_dir must find its own checkpoints (it used to join them twice)."""
  monkeypatch.chdir(tmp_path)
  step = tf.Variable(0)
  manager = training_checkpoints.make_checkpoint_manager(tf.train.Checkpoint(step=step), "out")
  for value in (1, 2):
    step.assign(value)
    manager.save(checkpoint_number=value)
  assert training_checkpoints.latest_checkpoint("out") == os.path.join("out", "model.ckpt-2")
  data_file = tmp_path / "out" / "model.ckpt-2.data-00000-of-00001"
  data_file.write_bytes(b"")                                # cut short: the previous one
  assert training_checkpoints.latest_checkpoint("out") == os.path.join("out", "model.ckpt-1")


def _truncate(path, keep):
  path.write_bytes(path.read_bytes()[:keep])


def test_truncated_init_checkpoint_is_one_line_before_the_model(data, tmp_path,  # noqa: F811
                                                                 monkeypatch):
  init = tmp_path / "init"
  init.mkdir()
  for name in os.listdir(data / "init"):
    (init / name).write_bytes((data / "init" / name).read_bytes())
  data_file = init / "bert_model.ckpt.data-00000-of-00001"
  whole = data_file.read_bytes()
  _truncate(data_file, len(whole) // 3)
  prefix = str(init / "bert_model.ckpt")
  for path in (prefix, str(init)):                         # the prefix, or its directory
    with pytest.raises(checkpoints.CheckpointError, match=r"bert_model\.ckpt: unreadable "
                       r"checkpoint \(its \.data files hold \d+ bytes, its tensors \d+: trunc"):
      training_checkpoints.init_checkpoint_prefix(path)
  # Found by the scripts' config check, before any model is built.
  monkeypatch.setattr(modeling, "BertPretrainer", None)
  with pytest.raises(ValueError, match=f"^--init_checkpoint {prefix}: unreadable checkpoint"):
    run_pretraining.run(_options(data, tmp_path / "out", init_checkpoint=prefix))
  assert not (tmp_path / "out").exists()
  monkeypatch.undo()
  # Read past its end directly (load_checkpoint): a CheckpointError naming the tensor, not
  # TensorFlow's IndexError; a damaged byte: TensorFlow's CRC error, as a CheckpointError.
  model = modeling.BertModel(modeling.BertConfig.from_json_file(str(data / "config.json")))
  with pytest.raises(checkpoints.CheckpointError, match=r"bert_model\.ckpt: tensor bert/.* "
                     r"cannot be read \(the checkpoint is truncated or damaged\)"):
    checkpoints.load_checkpoint(model, prefix)
  damaged = bytearray(whole)
  damaged[len(whole) // 2] ^= 0xFF
  data_file.write_bytes(bytes(damaged))
  assert training_checkpoints.init_checkpoint_prefix(prefix) == prefix  # sizes are right
  with pytest.raises(checkpoints.CheckpointError, match="cannot be read .*Checksum"):
    checkpoints.load_checkpoint(model, prefix)


def test_directory_or_unreadable_file_as_input_file(tmp_path):
  folder = tmp_path / "records"
  folder.mkdir()
  with pytest.raises(ValueError, match=f"^--input_file {folder}: a directory, not a TFRecord"):
    input_pipeline.check_record_files([str(folder)], "--input_file", {})


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
  config = _config_file(tmp_path, "config.json")
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


def test_squad_file_not_utf8_names_the_file(tmp_path):
  from bert_keras import run_squad
  path = tmp_path / "train.json"
  path.write_bytes(b'{"data": [{"paragraphs": [{"context": "caf\xe9", "qas": []}]}]}')
  with pytest.raises(ValueError, match=f"^{path}: not UTF-8 text \\(byte 42: invalid"):
    run_squad.read_squad_examples(str(path), is_training=True)


def test_pretraining_data_output_file_that_is_a_directory(tmp_path):
  text = tmp_path / "in.txt"
  text.write_text("a b\n")
  vocab = tmp_path / "vocab.txt"
  vocab.write_text("[PAD]\n[UNK]\n[CLS]\n[SEP]\n[MASK]\na\nb\n")
  for output, expected in ((tmp_path, f"--output_file {tmp_path}: is a directory"),
                           (text / "x.tfrecord", f"--output_file {text}/x.tfrecord: {text} "
                            "is not a directory")):
    with pytest.raises(create_pretraining_data.UsageError) as info:
      create_pretraining_data.Config([str(text)], [str(output)], str(vocab))
    assert str(info.value).startswith(expected)


def test_export_dir_below_a_file_or_on_an_unknown_scheme(data, tmp_path, monkeypatch):  # noqa: F811
  from bert_keras import export_saved_model
  monkeypatch.setattr(export_saved_model, "build_model", None)  # any model built would fail
  vocab = tmp_path / "vocab.txt"
  vocab.write_text("".join(f"w{i}\n" for i in range(100)))
  for export_dir, expected in (
      ("/etc/passwd/x", "--export_dir /etc/passwd/x: is below the file /etc/passwd"),
      ("foo://x/y", "--export_dir foo://x/y: File system scheme 'foo' not implemented")):
    with pytest.raises(ValueError) as info:
      export_saved_model.run(export_saved_model.options(
          bert_config_file=str(data / "config.json"), vocab_file=str(vocab), task="embeddings",
          init_checkpoint=str(data / "init" / "bert_model.ckpt"), max_seq_length=16,
          export_dir=export_dir))
    assert str(info.value).startswith(expected)


def test_extract_features_output_below_a_file_before_the_model(data, tmp_path,  # noqa: F811
                                                               monkeypatch):
  from bert_keras import extract_features
  monkeypatch.setattr(modeling, "BertModel", None)          # any model built would fail
  text = tmp_path / "in.txt"
  text.write_text("a b\n")
  vocab = tmp_path / "vocab.txt"
  vocab.write_text("".join(f"{t}\n" for t in ["[PAD]", "[UNK]", "[CLS]", "[SEP]", "a", "b"]))
  output = text / "sub" / "out.jsonl"
  with pytest.raises(ValueError) as info:
    extract_features.run(extract_features.options(
        input_file=str(text), output_file=str(output), vocab_file=str(vocab),
        bert_config_file=str(data / "config.json"), max_seq_length=16, layers="-1",
        init_checkpoint=str(data / "init" / "bert_model.ckpt")))
  assert str(info.value) == (f"--output_file {output}: its directory {text}/sub is, or is "
                             "below, a file")


# ----------------------------------------------------------------------------
# Issue 26, third pass.
# 1. --task_name=custom: no silently wrong label set.

def _custom(tmp_path, train, labels=None):
  data_dir = tmp_path / "custom"
  data_dir.mkdir(exist_ok=True)
  (data_dir / "train.tsv").write_text(train, encoding="utf-8")
  return run_classifier.CustomProcessor(str(data_dir), labels=labels), data_dir / "train.tsv"


@pytest.mark.parametrize("train, expected", [
    ("sentence\tlabel\na b\tx\nc\ty\textra\n", "line 3: 3 tab-separated fields, the header has 2"),
    ("sentence\tlabel\na b\tx\nc\t\n", "line 3: empty label (column label)"),
    ("sentence\tlabel\na b\tx\nc\t  \n", "line 3: empty label (column label)"),
    ("sentence\tlabel\na b\tx\nc\tx\n", "its label column holds 1 distinct label ('x'); a "
     "classifier needs at least two"),
])
def test_custom_task_labels_that_would_train_a_wrong_model(tmp_path, train, expected):
  processor, path = _custom(tmp_path, train)
  with pytest.raises(ValueError) as info:
    processor.get_labels()
  assert str(info.value).startswith(f"--data_dir: {path}")
  assert expected in str(info.value)


def test_custom_task_labels_with_spaces_are_stripped_with_a_warning(tmp_path, caplog):
  processor, path = _custom(tmp_path, "sentence\tlabel\na\tx\nb\t y \nc\ty\n")
  assert processor.get_labels() == ["x", "y"]
  assert f"{path}: 1 label with surrounding spaces stripped (line 3)" in caplog.text
  # test.tsv: an empty label is an unlabelled row (the dummy label).
  (path.parent / "test.tsv").write_text("sentence\tlabel\nd\t\n")
  assert [e.label for e in processor.get_test_examples(str(path.parent))] == ["x"]


def test_custom_task_needs_two_labels_from_the_flag():
  with pytest.raises(ValueError, match="--labels=only: a classifier needs at least two"):
    run_classifier.get_processor(run_classifier.options(task_name="custom", labels="only",
                                                        data_dir="x"))


# ----------------------------------------------------------------------------
# 2. Untrusted weights: every archive read bounded before it inflates; the config checked
#    against the checkpoint before load_model builds a model.

def _peak_bytes(function):
  """Python's peak allocation while function() runs (raises what it raises)."""
  import tracemalloc
  tracemalloc.start()
  try:
    function()
  finally:
    peak = tracemalloc.get_traced_memory()[1]
    tracemalloc.stop()
  return peak


def test_pickle_bomb_is_refused_before_it_inflates(tmp_path):
  import zipfile
  path = tmp_path / "pytorch_model.bin"
  with zipfile.ZipFile(path, "w", zipfile.ZIP_DEFLATED) as archive:
    with archive.open("archive/data.pkl", "w", force_zip64=True) as member:
      chunk = b"\0" * (1 << 20)
      for _ in range(checkpoints.MAX_PICKLE_BYTES // len(chunk) + 8):
        member.write(chunk)
  assert path.stat().st_size < 1 << 20                     # 72 MiB of pickle in under 1 MB
  for read in (checkpoints.read_pytorch_bin, checkpoints.checkpoint_shapes):
    def call():
      with pytest.raises(checkpoints.CheckpointError,
                         match=r"its pickle archive/data.pkl declares \d+ bytes .*limit"):
        read(str(path))
    assert _peak_bytes(call) < 8 << 20


def test_storage_read_only_as_far_as_its_tensors(write_bin):  # noqa: F811
  big = np.random.default_rng(0).standard_normal(1 << 20).astype(np.float32)  # 4 MiB
  path = write_bin({"w": _Tensor(_Storage("0", big), 2, [2, 2], [2, 1])})
  del big
  peak = _peak_bytes(lambda: np.testing.assert_array_equal(
      checkpoints.read_pytorch_bin(path)["w"],
      np.random.default_rng(0).standard_normal(6).astype(np.float32)[2:].reshape(2, 2)))
  assert peak < 1 << 20


def test_only_the_tensors_asked_for_are_read(write_bin, tmp_path):  # noqa: F811
  """load_checkpoint reads a HF file's shapes first, then only the tensors the model takes
  (read_pytorch_bin / read_safetensors with names): an unused tensor is never inflated."""
  big = np.random.default_rng(0).standard_normal(1 << 20).astype(np.float32)   # 4 MiB
  path = write_bin({"small": _Tensor(_Storage("0", np.arange(4, dtype=np.float32)), 0, [4],
                                     [1]),
                    "unused": _Tensor(_Storage("1", big), 0, [1 << 20], [1])})
  del big
  read = {}
  assert _peak_bytes(lambda: read.update(checkpoints.read_pytorch_bin(path, {"small"}))) < (
      1 << 20)
  assert list(read) == ["small"]
  header = json.dumps({"small": {"dtype": "F32", "shape": [1], "data_offsets": [0, 4]},
                       "unused": {"dtype": "F32", "shape": [1 << 20],
                                  "data_offsets": [4, 4 + (4 << 20)]}}).encode()
  st = tmp_path / "model.safetensors"
  st.write_bytes(len(header).to_bytes(8, "little") + header + b"\0" * (4 + (4 << 20)))
  assert _peak_bytes(lambda: read.update(checkpoints.read_safetensors(str(st), {"small"}))) < (
      1 << 20)


def test_safetensors_reads_only_its_tensors_bytes(tmp_path):
  header = json.dumps({"w": {"dtype": "F32", "shape": [2], "data_offsets": [0, 8]}}).encode()
  path = tmp_path / "model.safetensors"
  path.write_bytes(len(header).to_bytes(8, "little") + header + b"\0" * 8 + b"\1" * (4 << 20))
  peak = _peak_bytes(lambda: checkpoints.read_safetensors(str(path)))
  assert peak < 1 << 20


def test_load_model_checks_the_config_before_building(data, tmp_path, monkeypatch):  # noqa: F811
  def build(*args, **kwargs):
    raise AssertionError("a model was built")
  monkeypatch.setattr(checkpoints, "_TASKS", {"encoder": build, "classifier": build})
  config = _config_file(tmp_path, hidden_size=16384, num_attention_heads=16)
  prefix = str(data / "init" / "bert_model.ckpt")
  for task in ("encoder", "classifier"):
    with pytest.raises(checkpoints.CheckpointError) as info:
      checkpoints.load_model(prefix, task=task, bert_config_file=str(config))
    assert str(info.value) == (f"{config} does not fit the checkpoint {prefix}: hidden_size "
                               "16384 in the config, 32 in the checkpoint")


# ----------------------------------------------------------------------------
# 3. Token ids outside the vocabulary: the vocab against the config before any model; every
#    record's ids checked per batch as the pipeline reads.

def _records_with_a_bad_id(path, n, bad_index, bad_id=150):
  from test_run_pretraining import _write_records
  _write_records(path, n, seed=3)
  records = [r.numpy() for r in tf.data.TFRecordDataset(str(path))]
  example = tf.train.Example.FromString(records[bad_index])
  example.features.feature["input_ids"].int64_list.value[0] = bad_id
  records[bad_index] = example.SerializeToString()
  with tf.io.TFRecordWriter(str(path)) as writer:
    for record in records:
      writer.write(record)


def test_id_check_of_every_batch_names_file_and_record(tmp_path):
  path = tmp_path / "bad.tfrecord"
  _records_with_a_bad_id(path, 20, 13)
  decode = run_pretraining.decode_fn(32, 5)
  check = input_pipeline.IdCheck(100, ("input_ids", "masked_lm_ids"), "--bert_config_file c",
                                 "--input_file")
  expected = (f"--input_file {path}: record 13 has token id 150 in input_ids, outside the "
              "vocab_size 100 of --bert_config_file c")
  for ds in (input_pipeline.training_dataset([str(path)], decode, 4, id_check=check),
             input_pipeline.evaluation_dataset([str(path)], decode, 4, id_check=check)):
    with pytest.raises(tf.errors.InvalidArgumentError) as info:
      for _ in ds.take(10):
        pass
    assert errors.data_error_text(info.value.message).startswith(expected)
  good = list(input_pipeline.evaluation_dataset([str(path)], decode, 4, id_check=check).take(3))
  assert len(good) == 3 and good[0]["input_ids"].shape == (4, 32)   # records 0-11 are fine


def test_bad_id_past_the_first_records_is_one_line_mid_training(data, tmp_path):  # noqa: F811
  path = tmp_path / "bad.tfrecord"
  _records_with_a_bad_id(path, 72, 70)
  options = _options(data, tmp_path / "out", input_file=str(path), num_train_steps=20,
                     save_checkpoints_steps=100)
  with pytest.raises(SystemExit) as info:
    with errors.one_line_errors():
      run_pretraining.run(options)
  assert str(info.value.code).startswith(
      f"error: --input_file {path}: record 70 has token id 150 in input_ids, outside the "
      f"vocab_size 100 of --bert_config_file {data / 'config_nodropout.json'}")


def test_damaged_record_past_the_first_records_is_one_line(data, tmp_path):  # noqa: F811
  from test_run_pretraining import _write_records
  path = tmp_path / "damaged.tfrecord"
  _write_records(path, 90, seed=5)
  raw = bytearray(path.read_bytes())
  offset = 0
  for _ in range(80):                                       # record 80's data: a CRC error
    offset += 16 + int.from_bytes(raw[offset:offset + 8], "little")
  raw[offset + 12 + 20] ^= 0xFF
  path.write_bytes(bytes(raw))
  options = _options(data, tmp_path / "out", input_file=str(path), num_train_steps=30,
                     save_checkpoints_steps=100)
  with pytest.raises(SystemExit) as info:
    with errors.one_line_errors():
      run_pretraining.run(options)
  assert re.fullmatch(r"error: damaged data: corrupted record at \d+ of a TFRecord file \(its "
                      r"checksum does not match: the file is damaged\)", str(info.value.code))


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


@pytest.mark.parametrize("script", ["run_classifier", "run_squad", "extract_features"])
def test_vocab_longer_than_the_config_before_the_model(data, tmp_path, monkeypatch,  # noqa: F811
                                                       script):
  import importlib
  module = importlib.import_module(f"bert_keras.{script}")
  for name in ("BertModel", "BertClassifier", "BertSquad"):
    monkeypatch.setattr(modeling, name, None)             # any model built would fail
  vocab = tmp_path / "vocab.txt"
  vocab.write_text("".join(f"{t}\n" for t in ["[PAD]", "[UNK]", "[CLS]", "[SEP]", "[MASK]"]
                           + [f"w{i}" for i in range(200)]))
  config = data / "config.json"                           # vocab_size 100
  text = tmp_path / "in.txt"
  text.write_text("w1 w2\n")
  cola = tmp_path / "cola"
  cola.mkdir()
  (cola / "train.tsv").write_text("src\t1\t\tw1 w2\nsrc\t0\t\tw2 w1\n")
  squad = tmp_path / "train.json"
  squad.write_text(json.dumps({"data": [{"paragraphs": [{"context": "w1 w2", "qas": [
      {"id": "q1", "question": "w1", "answers": [{"text": "w2", "answer_start": 3}]}]}]}]}))
  common = dict(vocab_file=str(vocab), bert_config_file=str(config))
  options = {
      "run_classifier": lambda: module.options(
          data_dir=str(cola), task_name="CoLA", do_train=True, output_dir=str(tmp_path / "o"),
          max_seq_length=16, **common),
      "run_squad": lambda: module.options(
          train_file=str(squad), do_train=True, max_seq_length=32, max_query_length=8,
          doc_stride=8, output_dir=str(tmp_path / "o"), train_batch_size=1, **common),
      "extract_features": lambda: module.options(
          input_file=str(text), output_file=str(tmp_path / "f.jsonl"), max_seq_length=16,
          layers="-1", init_checkpoint=str(data / "init" / "bert_model.ckpt"), **common),
  }[script]()
  with pytest.raises(ValueError) as info:
    module.run(options)
  assert str(info.value) == (f"--vocab_file {vocab} has ids up to 204, beyond the vocab_size 100 "
                             f"of --bert_config_file {config} (does the vocab belong to this "
                             "model?)")
  assert not (tmp_path / "o").exists()


# ----------------------------------------------------------------------------
# 4. Serving signatures: text_a and text_b of different batch sizes are an error.

def test_serving_signatures_refuse_mismatched_batches(tmp_path):
  from bert_keras import export_saved_model
  from bert_keras import preprocessing
  from bert_keras import serving
  vocab = tmp_path / "vocab.txt"
  vocab.write_text("".join(f"{t}\n" for t in ["[PAD]", "[UNK]", "[CLS]", "[SEP]", "[MASK]",
                                              "the", "dog", "runs"]))
  config = modeling.BertConfig(vocab_size=8, hidden_size=16, num_hidden_layers=1,
                               num_attention_heads=2, intermediate_size=32)
  preprocessor = preprocessing.BertPreprocessor(str(vocab), True, 16)
  cases = [(["the dog", "runs"], ["runs"]), (["the", "dog", "runs"], ["a", "b"]),
           ([], ["runs"])]
  for text_a, text_b in cases:                            # the Keras layer, eagerly
    with pytest.raises(tf.errors.InvalidArgumentError, match="text_a and text_b must have the "
                       "same number of rows"):
      preprocessor({"text_a": tf.constant(text_a, tf.string),
                    "text_b": tf.constant(text_b, tf.string)})
  for task in serving.TASKS:
    module = serving.ServingModule(export_saved_model.build_model(task, config, 2),
                                   preprocessor, task)
    for function in (module.serve, module.preprocess)[:2 if task == "classifier" else 1]:
      for text_a, text_b in cases:
        with pytest.raises(tf.errors.InvalidArgumentError, match="text_a and text_b must "
                           "have the same number of rows"):
          function(tf.constant(text_a, tf.string), tf.constant(text_b, tf.string))
    assert module.serve(tf.constant(["the dog", "runs"]), tf.constant(["runs", ""]))


# ----------------------------------------------------------------------------
# 5. evaluate_squad.py: bad files are one line naming the file and key.

_SQUAD_QA = {"id": "q1", "question": "?", "answers": [{"text": "blue", "answer_start": 0}]}


def _squad_data(qas=None, paragraphs=None, articles=None):
  if articles is None:
    if paragraphs is None:
      paragraphs = [{"context": "blue", "qas": [_SQUAD_QA] if qas is None else qas}]
    articles = [{"title": "t", "paragraphs": paragraphs}]
  return {"version": "1.1", "data": articles}


@pytest.mark.parametrize("dataset, predictions, na, out, expected", [
    (_squad_data(), {"q1": 3}, None, None,
     "predictions file {pred}: the prediction of question q1 is int, not a string"),
    (_squad_data(), {"q1": None}, None, None, "the prediction of question q1 is NoneType"),
    (_squad_data([{"id": "q1", "question": "?"}]), {"q1": "a"}, None, None,
     "data file {data}: question q1 (data[0].paragraphs[0].qas[0]) has no \"answers\" list"),
    (_squad_data([{"id": "q1", "answers": [{"answer_start": 0}]}]), {"q1": "a"}, None, None,
     "has no \"answers\" list of {{\"text\": string}}"),
    (_squad_data([{"question": "?", "answers": []}]), {"q1": "a"}, None, None,
     "data file {data}: data[0].paragraphs[0].qas[0] has no string \"id\""),
    (_squad_data(paragraphs=[{"context": "c"}]), {}, None, None,
     "data file {data}: data[0].paragraphs[0] has no \"qas\" list"),
    (_squad_data(articles=[{"title": "t"}]), {}, None, None,
     "data file {data}: data[0] has no \"paragraphs\" list"),
    (_squad_data(articles=[]), {}, None, None, "data file {data} has no questions"),
    (dict(_squad_data(), version="v2.0"), {"other": "x"}, None, None,
     "predictions file {pred} answers none of the questions of data file {data}"),
    (dict(_squad_data(), version="v2.0"), {"q1": "a"}, {"q1": "high"}, None,
     "no-answer file {na}: the probability of question q1 is \"high\", not a number"),
    (dict(_squad_data(), version="v2.0"), {"q1": "a"}, [0.5], None,
     "no-answer file {na} is not a JSON object"),
    (_squad_data(), {"q1": "blue"}, None, "dir", "{out}: Is a directory"),
    (_squad_data(), {"q1": "blue"}, None, "missing/eval.json", "No such file or directory"),
])
def test_evaluate_squad_bad_input_is_one_line(tmp_path, dataset, predictions, na, out,
                                              expected):
  from bert_keras import evaluate_squad
  paths = {"data": tmp_path / "data.json", "pred": tmp_path / "pred.json",
           "na": tmp_path / "na.json"}
  paths["data"].write_text(json.dumps(dataset))
  paths["pred"].write_text(json.dumps(predictions))
  argv = [str(paths["data"]), str(paths["pred"])]
  if na is not None:
    paths["na"].write_text(json.dumps(na))
    argv += ["-n", str(paths["na"])]
  if out is not None:
    paths["out"] = tmp_path / out
    if out == "dir":
      paths["out"].mkdir()
    argv += ["-o", str(paths["out"])]
  with pytest.raises(SystemExit) as info:
    evaluate_squad.main(argv)
  message = str(info.value.code)
  assert message.startswith("error: ") and "\n" not in message
  assert expected.format(**paths) in message
  assert sorted(os.listdir(tmp_path)) == sorted(
      p.name for p in tmp_path.iterdir() if not p.name.startswith("."))   # no temporary left


# ----------------------------------------------------------------------------
# 7. Exports: one at a time per --export_dir; killed exports' temporaries removed.

def test_export_lock_and_dead_exports_temporaries(data, tmp_path, monkeypatch,  # noqa: F811
                                                  caplog):
  from bert_keras import export_saved_model
  vocab = tmp_path / "vocab.txt"
  vocab.write_text("".join(f"{t}\n" for t in ["[PAD]", "[UNK]", "[CLS]", "[SEP]", "[MASK]"]
                           + [f"w{i}" for i in range(5, 100)]))
  out = tmp_path / "exports" / "model"
  out.parent.mkdir()
  dead = _dead_pid()
  stale = [f".model.tmp-{dead}", f".model.old.tmp-{dead}"]
  kept = [f".model.tmp-{os.getpid()}", f".other.tmp-{dead}"]   # a live one's, another's
  for name in stale + kept:
    (out.parent / name).mkdir()
    (out.parent / name / "saved_model.pb").write_text("x")

  def export_options(**overrides):
    return export_saved_model.options(
        bert_config_file=str(data / "config.json"), vocab_file=str(vocab), task="embeddings",
        init_checkpoint=str(data / "init" / "bert_model.ckpt"), max_seq_length=16,
        export_dir=str(out), **overrides)
  seen = []

  def fake_export(options, config, labels, tags, preprocessor, *unused):
    seen.append(sorted(os.listdir(out.parent)))
    with pytest.raises(ValueError) as info:                # a second export meanwhile
      export_saved_model.run(export_options(overwrite=True))
    assert str(info.value).startswith(f"--export_dir {out}: another run (pid {os.getpid()}")
    out.mkdir()
    (out / "saved_model.pb").write_text("x")
  monkeypatch.setattr(export_saved_model, "_export", fake_export)
  export_saved_model.run(export_options())
  assert seen == [sorted(kept + [".model.lock"])]
  assert sorted(os.listdir(out.parent)) == sorted(kept + ["model"])   # the lock released
  assert sum("a temporary left by" in r.getMessage() for r in caplog.records) == 2
  with pytest.raises(ValueError, match="exists and is not empty .*--overwrite"):
    export_saved_model.run(export_options())


# ----------------------------------------------------------------------------
# 8. Still open from the first pass.

def test_create_vocab_with_a_directory_as_input_or_output(tmp_path):
  import types
  from bert_keras import create_vocab
  text = tmp_path / "in.txt"
  text.write_text("the dog runs\n")
  folder = tmp_path / "folder"
  folder.mkdir()

  def flags(**overrides):
    base = dict(input_file=str(text), output_file=str(tmp_path / "vocab.txt"),
                do_lower_case=True, lenient_decoding=False, vocab_size=200, num_unused=2,
                extra_reserved_tokens=[], max_unique_chars=1000, max_token_length=50)
    return types.SimpleNamespace(**dict(base, **overrides))
  with pytest.raises(ValueError, match=f"^--input_file={folder}: a directory, not a text file"):
    create_vocab.run(flags(input_file=str(folder)))
  with pytest.raises(ValueError, match=f"^--output_file={folder}: is a directory"):
    create_vocab.run(flags(output_file=str(folder)))
  assert sorted(os.listdir(tmp_path)) == ["folder", "in.txt"] and not os.listdir(folder)
  # The shared atomic writer refuses a directory by name too, leaving no temporary.
  with pytest.raises(IsADirectoryError, match="Is a directory") as info:
    file_io.write_text_atomic(str(folder), "x\n")
  assert info.value.filename == str(folder)
  assert sorted(os.listdir(tmp_path)) == ["folder", "in.txt"] and not os.listdir(folder)


def test_squad_training_on_a_whitespace_only_context(tmp_path, caplog):
  from bert_keras import run_squad
  vocab = tmp_path / "vocab.txt"
  vocab.write_text("".join(t + "\n" for t in ["[PAD]", "[UNK]", "[CLS]", "[SEP]", "[MASK]",
                                              "the", "dog", "runs", "who"]))
  squad = tmp_path / "train.json"
  squad.write_text(json.dumps({"data": [{"paragraphs": [
      {"context": "   ", "qas": [{"id": "q1", "question": "who runs",
                                  "answers": [{"text": " ", "answer_start": 1}]}]},
      {"context": "  the dog runs", "qas": [{"id": "q2", "question": "who runs",
                                             "answers": [{"text": " the", "answer_start": 1}]}]},
  ]}]}))
  examples = run_squad.read_squad_examples(str(squad), is_training=True)
  assert examples == []
  assert "question 'q1': its answer (answer_start 1) is not on a word of the context" in (
      caplog.text)
  # A failure while writing the training records leaves no temporary (and no --output_dir).
  config = _config_file(tmp_path, "config.json")
  squad.write_text(json.dumps({"data": [{"paragraphs": [{"context": "the dog runs", "qas": [
      {"id": "q1", "question": "who runs", "answers": [{"text": "dog", "answer_start": 4}]}]}]}]}))
  out = tmp_path / "out"

  def fail(*args, **kwargs):
    raise ValueError("no windows today")
  original = run_squad.convert_examples_to_features
  run_squad.convert_examples_to_features = fail
  try:
    with pytest.raises(ValueError, match="no windows today"):
      run_squad.run(run_squad.options(
          train_file=str(squad), vocab_file=str(vocab), do_train=True, max_seq_length=32,
          max_query_length=8, doc_stride=8, bert_config_file=str(config), output_dir=str(out),
          train_batch_size=1))
  finally:
    run_squad.convert_examples_to_features = original
  assert not out.exists()


def test_classifier_records_leave_no_temporary_on_an_error(tmp_path):
  class Boom:
    guid, text_a, text_b, label = "g", "a", None, "x"
  with pytest.raises(AttributeError):                     # (no tokenizer: fails mid-write)
    run_classifier.file_based_convert_examples_to_features(
        [Boom()], ["0", "1"], 8, None, str(tmp_path / "train.tf_record"))
  assert os.listdir(tmp_path) == []


@pytest.mark.parametrize("value", [-0.1, 1.5])
def test_warmup_proportion_outside_zero_one(value):
  from bert_keras import run_squad
  from bert_keras.runtime import training
  for script in (run_classifier, run_squad):
    with pytest.raises(ValueError, match=f"^--warmup_proportion={value}: must be in \\[0, 1\\]"):
      training.check_training_numbers(script.options(warmup_proportion=value))
  training.check_training_numbers(run_classifier.options(warmup_proportion=1.0))


# ----------------------------------------------------------------------------
# 6. Vocab entries over 256 bytes in the tensorflow-text path: placeholders, capped messages.

def test_long_vocab_entries_in_the_tensorflow_text_path(tmp_path, monkeypatch):
  pytest.importorskip("tensorflow_text")
  from bert_keras import preprocessing
  from bert_keras import tokenization
  vocab = tmp_path / "vocab.txt"
  vocab.write_text("".join(f"{t}\n" for t in [
      "[PAD]", "[UNK]", "[CLS]", "[SEP]", "[MASK]", "the", "dog", "##s", "a" * 300,
      "##" + "b" * 300, "é" * 200, "c" * 250]), encoding="utf-8")
  texts = ["the dogs", "a" * 300 + " the", "c" * 250, "é" * 200, "x " + "b" * 300]
  tokenizer = tokenization.FullTokenizer(str(vocab), True)
  expected = [tokenizer.convert_tokens_to_ids(tokenizer.tokenize(t)) for t in texts]
  preprocessor = preprocessing.BertPreprocessor(str(vocab), True, 16)   # (used to raise)
  ids = preprocessor(tf.constant(texts))["input_ids"].numpy()
  for row, want in zip(ids, expected):
    assert list(row[1:1 + len(want)]) == want
  # A refusal of tensorflow-text's builder quoting a huge entry: one capped line.
  from tensorflow_text.core.pybinds import pywrap_fast_wordpiece_tokenizer_model_builder as b

  def refuse(*args):
    raise RuntimeError("The vocab token is: " + "z" * 10_000_000)
  monkeypatch.setattr(b, "build_fast_wordpiece_model", refuse)
  with pytest.raises(ValueError) as info:
    preprocessing.BertPreprocessor(str(vocab), True, 16)
  assert str(info.value).startswith("tensorflow-text's WordPiece builder refused the vocabulary")
  assert len(str(info.value)) < 400


# ----------------------------------------------------------------------------
# The command lines of items 1 and 5: one `error:` line, exit status 1, nothing left.

@pytest.mark.slow
def test_command_line_custom_task_with_one_label(tmp_path):
  vocab = tmp_path / "vocab.txt"
  vocab.write_text("[PAD]\n[UNK]\n[CLS]\n[SEP]\nthe\n")
  config = _config_file(tmp_path, "config.json")
  data_dir = tmp_path / "custom"
  data_dir.mkdir()
  (data_dir / "train.tsv").write_text("sentence\tlabel\nthe\tyes\nthe the\tyes\n")
  proc = subprocess.run(
      [sys.executable, str(REPO / "run_classifier.py"), "--task_name=custom", "--do_train",
       f"--data_dir={data_dir}", f"--vocab_file={vocab}", f"--bert_config_file={config}",
       "--max_seq_length=16", f"--output_dir={tmp_path / 'out'}"],
      env=ENV, capture_output=True, text=True, timeout=300)
  assert proc.returncode == 1
  assert proc.stderr.strip().splitlines()[-1] == (
      f"error: --data_dir: {data_dir / 'train.tsv'}: its label column holds 1 distinct label "
      "('yes'); a classifier needs at least two (give --labels to name the others)")
  assert "Traceback" not in proc.stderr
  assert not (tmp_path / "out").exists()


@pytest.mark.slow
def test_command_line_evaluate_squad_bad_prediction(tmp_path):
  dataset = tmp_path / "data.json"
  dataset.write_text(json.dumps(_squad_data()))
  predictions = tmp_path / "pred.json"
  predictions.write_text(json.dumps({"q1": ["blue"]}))
  proc = subprocess.run([sys.executable, str(REPO / "evaluate_squad.py"), str(dataset),
                         str(predictions)], env=ENV, capture_output=True, text=True, timeout=300)
  assert proc.returncode == 1
  assert proc.stderr.strip() == (f"error: predictions file {predictions}: the prediction of "
                                 "question q1 is list, not a string")


def test_tagger_needs_two_tags(tmp_path):
  """Item 1 for the tagging reader (run_ner): a tag set of one tag trains a one-class softmax
  whose loss is 0: refused, naming where the tags come from."""
  from bert_keras import run_ner
  data_dir = tmp_path / "data"
  data_dir.mkdir()
  (data_dir / "train.txt").write_text("the O\ndog O\n\nruns O\n")
  vocab = tmp_path / "vocab.txt"
  vocab.write_text("".join(f"{t}\n" for t in ["[PAD]", "[UNK]", "[CLS]", "[SEP]", "the", "dog",
                                              "runs"]))
  config = _config_file(tmp_path, "config.json")
  for labels, source in ((None, "train.txt"), ("O", "--labels")):
    with pytest.raises(ValueError) as info:
      run_ner.run(run_ner.options(data_dir=str(data_dir), vocab_file=str(vocab),
                                  bert_config_file=str(config), output_dir=str(tmp_path / "o"),
                                  do_train=True, labels=labels, max_seq_length=16))
    assert str(info.value) == (f"{source}: the tag set has 1 tag (O); a tagger needs at least "
                               "two (give --labels to name the others)")
  assert not (tmp_path / "o").exists()


def test_convert_checkpoint_lock_and_dead_temporaries(data, tmp_path, caplog):  # noqa: F811
  """The export treatment (item 7) for convert_checkpoint's --output_dir."""
  from bert_keras import convert_checkpoint
  vocab = tmp_path / "vocab.txt"
  vocab.write_text("".join(f"{t}\n" for t in ["[PAD]", "[UNK]", "[CLS]", "[SEP]", "[MASK]"]
                           + [f"w{i}" for i in range(5, 100)]))
  out = tmp_path / "converted"
  dead = _dead_pid()
  (tmp_path / f".converted.tmp-{dead}").mkdir()
  (tmp_path / f".converted.tmp-{dead}" / "bert_model.ckpt.index").write_text("x")

  def convert():
    return convert_checkpoint.run(convert_checkpoint.options(
        init_checkpoint=str(data / "init" / "bert_model.ckpt"),
        bert_config_file=str(data / "config.json"), vocab_file=str(vocab),
        output_dir=str(out), format="tf1"))
  with outputs.locked_output(str(out), "--output_dir"):
    with pytest.raises(ValueError, match=f"^--output_dir {out}: another run \\(pid "):
      convert()
  assert not out.exists()
  assert "bert_model.ckpt.index" in convert()
  assert sorted(os.listdir(tmp_path)) == ["converted", "vocab.txt"]
  assert any(f".converted.tmp-{dead}, a temporary left by" in r.getMessage()
             for r in caplog.records)
