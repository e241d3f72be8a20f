"""predict_beam.py: the pipeline's rows against predict.py's on the same files, row for row
(sorted by id, floats within 1e-5), for every task kind predict.py serves, on the
DirectRunner in-process (1 worker) and with 2 worker processes (slow); the dead-letter
output; the one-line errors of the launcher, the workers and the command line."""

import csv
import io
import json
import os
import pathlib
import subprocess
import sys
import types

import numpy as np
import pytest

beam = pytest.importorskip("apache_beam")

from bert_keras import checkpoints  # noqa: E402
from bert_keras import predict  # noqa: E402
from bert_keras import predict_beam  # noqa: E402
from bert_keras import task_registry  # noqa: E402
from bert_keras.runtime import beam_runner  # noqa: E402
from bert_keras.runtime import model_dir  # noqa: E402
from bert_keras.prediction import row_io  # noqa: E402
from conftest import tiny_vocab_and_config  # noqa: E402

REPO = pathlib.Path(__file__).resolve().parent.parent
WORDS = ["[PAD]", "[UNK]", "[CLS]", "[SEP]", "[MASK]", "the", "dog", "is", "hairy", ".", "who",
         "was", "jim", "henson", "?", "a", "puppet", "##eer", "##s", "hello", "world", "b",
         "##ark", "##ed", "at", "you", "paris", "mary", "cafe"]
LABELS = ["neg", "neu", "pos"]
# name: (task kind, task.json extras or None for a checkpoint directory, load options)
MODELS = {"classifier": ("classifier", {}, {}),
          "windows": ("classifier", {"doc_stride": 4}, {}),
          "multi_label": ("multi_label", {"thresholds": [0.3, 0.5, 0.7]}, {}),
          "regression": ("regression", {}, {}),
          "reranker": ("reranker", {}, {}),
          "tagger": ("tagger", {}, {}),
          "squad": ("squad", {"doc_stride": 4, "max_query_length": 6,
                              "max_answer_length": 4}, {}),
          "embeddings": ("embeddings", {"pooling": "mean", "normalize": True}, {}),
          "encoder": ("encoder", None, {"task": "embeddings", "pooling": "cls"})}
TOLERANCE = 1e-5


@pytest.fixture(scope="module")
def setup(tmp_path_factory):
  """A model directory of a tiny config with random weights for each of MODELS, and three
  input files (JSON Lines with ids, TSV and CSV without) of random rows."""
  root = tmp_path_factory.mktemp("predict_beam")
  vocab, config = tiny_vocab_and_config(root, WORDS, max_position_embeddings=64)
  paths = {}
  for index, (name, (kind_name, extra, _)) in enumerate(MODELS.items()):
    kind = task_registry.get(kind_name)
    model = kind.build(config, len(LABELS) if kind.labels else None)
    rng = np.random.default_rng(index)
    for v in model.weights:
      v.assign(rng.normal(0, 0.3, v.shape).astype(np.float32))
    directory = root / name
    directory.mkdir()
    checkpoints.save_tf1_checkpoint(model, str(directory / "model.ckpt"))
    if extra is None:
      (directory / "bert_config.json").write_text(config.to_json_string())
      (directory / "vocab.txt").write_text(vocab.read_text(encoding="utf-8"), encoding="utf-8")
    else:
      task, task_options = kind.task_file()
      options = types.SimpleNamespace(vocab_file=str(vocab), do_lower_case=True,
                                      max_seq_length=16)
      model_dir.write_model_dir(str(directory), options, config, task,
                                labels=LABELS if kind.labels else None,
                                **dict(task_options, **extra))
    paths[name] = str(directory)
  rng = np.random.default_rng(7)
  words = WORDS[5:] + ["Café", "Jim", "unknownword"]

  def text(low, high):
    return " ".join(rng.choice(words, rng.integers(low, high)))

  inputs = root / "inputs"
  inputs.mkdir()
  rows = [{"text_a": text(1, 8), "text_b": text(0, 14)} for _ in range(23)]
  for row in rows[::5]:
    row["text_b"] = text(14, 22)  # squad: long contexts (several windows)
  with open(inputs / "in-a.jsonl", "w", encoding="utf-8") as f:
    for i, row in enumerate(rows[:9]):
      f.write(json.dumps(dict(row, id=f"a{i}")) + "\n")
  with open(inputs / "in-b.tsv", "w", encoding="utf-8") as f:
    f.write("text_a\ttext_b\n" + "".join(f"{r['text_a']}\t{r['text_b']}\n" for r in rows[9:17]))
  out = io.StringIO()
  csv.writer(out).writerows([["text_a", "text_b"]] + [[r["text_a"], r["text_b"]]
                                                       for r in rows[17:]])
  (inputs / "in-c.csv").write_text(out.getvalue(), encoding="utf-8")
  return types.SimpleNamespace(root=root, paths=paths, inputs=inputs,
                               files=sorted(str(p) for p in inputs.iterdir()))


def _squad_columns(name):
  """The text fields: squad's are named (its defaults are question and context); the windowed
  classifier reads text_a alone (its long text_a in windows)."""
  return {"squad": dict(text_a_column="text_a", text_b_column="text_b"),
          "windows": dict(text_b_column="none")}.get(name, {})


def _options(setup, name, output, **overrides):
  return predict_beam.options(**dict(
      dict(model_dir=setup.paths[name], input_file=str(setup.inputs / "in-*"),
           output_file=str(output), batch_size=4, **MODELS[name][2], **_squad_columns(name)),
      **overrides))


def _expected(setup, name, tmp_path, **overrides):
  """predict.py's rows of each input file, keyed as the pipeline's ids (predict_beam.row_id):
  the row's id, else FILE:LINE (the lines of its good rows, in order)."""
  expected = {}
  for path in setup.files:
    out = tmp_path / (os.path.basename(path) + ".predict.jsonl")
    options = predict.options(**dict(
        dict(model_dir=setup.paths[name], input_file=path, output_file=str(out),
             batch_size=4, **MODELS[name][2], **_squad_columns(name)), **overrides))
    predict.predict_file(predict.load_predictor(options), options)
    lines = [row.line for row in row_io.Reader(path) if row.error is None]
    for line, text in zip(lines, out.read_text(encoding="utf-8").splitlines(), strict=True):
      row = json.loads(text)
      expected[row["id"] if "id" in row else f"{path}:{line}"] = row
  return expected


def _shards(prefix, suffix=".jsonl"):
  directory, name = os.path.split(str(prefix))
  return sorted(os.path.join(directory, n) for n in os.listdir(directory)
                if n.startswith(name + "-") and n.endswith(suffix) and "-of-" in n
                and not n.startswith(name + "-errors-"))


def _read_output(prefix):
  rows = {}
  for path in _shards(prefix):
    for text in pathlib.Path(path).read_text(encoding="utf-8").splitlines():
      row = json.loads(text)
      key = predict_beam.row_id(row, "id")
      assert key not in rows
      rows[key] = {k: v for k, v in row.items() if k not in predict_beam.REFERENCE_FIELDS}
  return rows


def _assert_close(got, want, where):
  if isinstance(want, float) or isinstance(got, float):
    assert abs(got - want) <= TOLERANCE, (where, got, want)
  elif isinstance(want, dict):
    assert isinstance(got, dict) and sorted(got) == sorted(want), (where, got, want)
    for key in want:
      _assert_close(got[key], want[key], f"{where}.{key}")
  elif isinstance(want, list):
    assert isinstance(got, list) and len(got) == len(want), (where, got, want)
    for i, (g, w) in enumerate(zip(got, want)):
      _assert_close(g, w, f"{where}[{i}]")
  else:
    assert got == want, (where, got, want)


def _check_against_predict(setup, name, tmp_path, beam_options, **overrides):
  prefix = tmp_path / "out" / "pred"
  prefix.parent.mkdir()
  counts = predict_beam.run(_options(setup, name, prefix, **overrides), beam_options)
  got, want = _read_output(prefix), _expected(setup, name, tmp_path)
  assert sorted(got) == sorted(want) and len(want) == 23
  for key in want:
    _assert_close(got[key], want[key], key)
  assert counts == {"rows": 23, "bad": 0, "written": 23}
  # Rows without an id say where they came from.
  tsv = setup.inputs / "in-b.tsv"
  refs = [json.loads(t) for p in _shards(prefix) for t in pathlib.Path(p).read_text(
      encoding="utf-8").splitlines()]
  assert sorted(r["input_line"] for r in refs if r.get("input_file") == str(tsv)) == list(
      range(2, 10))
  if name in ("embeddings", "encoder"):
    _check_tfrecord(prefix, got)
  assert not [n for n in os.listdir(prefix.parent) if n.startswith("beam-temp")]
  return got


def _check_tfrecord(prefix, rows):
  import tensorflow as tf
  shards = _shards(prefix, ".tfrecord")
  assert shards and all(s.endswith("-of-%05d.tfrecord" % len(shards)) for s in shards)
  vectors = {}
  for record in tf.data.TFRecordDataset(shards):
    example = tf.train.Example.FromString(record.numpy())
    key = example.features.feature["id"].bytes_list.value[0].decode("utf-8")
    vectors[key] = list(example.features.feature["embedding"].float_list.value)
  assert sorted(vectors) == sorted(rows)
  for key, vector in vectors.items():
    np.testing.assert_allclose(vector, rows[key]["embedding"], atol=TOLERANCE)


@pytest.mark.slow  # (the fast tier stays under 5 minutes on 2 cores)
@pytest.mark.parametrize("name", list(MODELS))
def test_one_worker_gives_predict_py_rows(setup, name, tmp_path):
  extra = dict(output_tfrecord=True, num_shards=2) if name in ("embeddings", "encoder") else {}
  _check_against_predict(setup, name, tmp_path, beam_runner.pipeline_options(), **extra)


@pytest.mark.slow
@pytest.mark.parametrize("name", list(MODELS))
def test_two_worker_processes_give_predict_py_rows(setup, name, tmp_path):
  extra = dict(output_tfrecord=True) if name in ("embeddings", "encoder") else {}
  _check_against_predict(setup, name, tmp_path, beam_runner.pipeline_options(
      direct_num_workers=2, direct_running_mode="multi_processing"), **extra)


def _bad_input(tmp_path):
  good = json.dumps({"text_a": "the dog"}) + "\n"
  lines = [good.encode(), b'{"text_a": "the dog"\n', '{"text_a": "caf\xe9"}\n'.encode("latin-1"),
           b'{"other": "x"}\n', b'{"text_a": 3}\n', b'[1, 2]\n', good.encode()]
  path = tmp_path / "bad-1.jsonl"
  path.write_bytes(b"".join(lines))
  (tmp_path / "bad-2.jsonl").write_text(good * 3, encoding="utf-8")
  return path


def test_a_bad_row_is_predict_py_error(setup, tmp_path):
  path = _bad_input(tmp_path)
  with pytest.raises(ValueError) as want:
    predict.predict_file(predict.load_predictor(predict.options(
        model_dir=setup.paths["classifier"])), predict.options(
        model_dir=setup.paths["classifier"], input_file=str(path),
        output_file=str(tmp_path / "p.jsonl")))
  assert "bad-1.jsonl line 2: not valid JSON" in str(want.value)
  (tmp_path / "out").mkdir()
  with pytest.raises(ValueError) as got:
    predict_beam.run(predict_beam.options(
        model_dir=setup.paths["classifier"], input_file=str(path),
        output_file=str(tmp_path / "out" / "p")), beam_runner.pipeline_options())
  assert str(got.value) == str(want.value)
  assert os.listdir(tmp_path / "out") == []


def test_skipped_bad_rows_go_to_the_dead_letter_output(setup, tmp_path):
  _bad_input(tmp_path)
  prefix = tmp_path / "out" / "p"
  prefix.parent.mkdir()
  counts = predict_beam.run(predict_beam.options(
      model_dir=setup.paths["classifier"], input_file=str(tmp_path / "bad-*.jsonl"),
      output_file=str(prefix), skip_bad_rows=True, num_shards=2),
      beam_runner.pipeline_options())
  assert counts == {"rows": 10, "bad": 5, "written": 5}
  assert len(_read_output(prefix)) == 5 and len(_shards(prefix)) == 2
  errors = sorted(tmp_path.glob("out/p-errors-*-of-00002.jsonl"))
  assert len(errors) == 2
  bad = sorted((json.loads(t) for e in errors for t in e.read_text().splitlines()),
               key=lambda r: r["line"])
  path = str(tmp_path / "bad-1.jsonl")
  assert [(r["file"], r["line"]) for r in bad] == [(path, n) for n in range(2, 7)]
  assert [r["reason"].split(" (")[0] for r in bad] == [
      "not valid JSON", "not UTF-8", "no field 'text_a'", "field 'text_a' is not a string",
      "not a JSON object"]


def test_launcher_errors(setup, tmp_path):
  (tmp_path / "in.jsonl").write_text('{"text": "x"}\n')

  def run(**overrides):
    predict_beam.run(predict_beam.options(**dict(dict(
        model_dir=setup.paths["classifier"], input_file=str(tmp_path / "in.jsonl"),
        output_file=str(tmp_path / "o")), **overrides)), beam_runner.pipeline_options())

  for overrides, message in [
      (dict(model_dir=str(tmp_path / "nowhere")), "--model_dir .*nowhere: no such directory"),
      (dict(model_dir=str(tmp_path)), "--model_dir .*: no task.json"),
      (dict(input_file=str(tmp_path / "nothing-*.tsv")), "--input_file .*: no files match"),
      (dict(input_file="-"), "a pipeline does not read standard input"),
      (dict(output_file=None), "--output_file is required"),
      (dict(output_file=str(tmp_path)), "--output_file .*: a directory; give the shards' "
                                          "prefix inside it"),
      (dict(batch_size=0), "--batch_size=0: must be >= 1"),
      (dict(num_shards=-1), "--num_shards=-1"),
      (dict(rerank_run=str(tmp_path / "in.jsonl")), "--rerank_run: predict.py reranks"),
      (dict(output_tfrecord=True), "--output_tfrecord: for embeddings, not a classifier"),
      (dict(text_a_column="nope"), "in.jsonl line 1: no field 'nope' \\(--text_a_column\\)")]:
    with pytest.raises(ValueError, match=message):
      run(**overrides)


def test_a_model_directory_missing_on_a_worker_is_one_line(setup, tmp_path):
  """The launcher found the model; the worker does not (it has moved): predict.py's error
  about the directory, raised by the handler's load_model and reported by the launcher."""
  (tmp_path / "in.jsonl").write_text('{"text": "x"}\n')
  options = predict_beam.options(model_dir=str(tmp_path / "gone"),
                                 input_file=str(tmp_path / "in.jsonl"),
                                 output_file=str(tmp_path / "o"))
  info = predict_beam.ModelInfo("classifier", "optional", (None, None))
  pipeline = beam.Pipeline(runner=beam_runner.runner_for(beam_runner.pipeline_options()),
                           options=beam_runner.pipeline_options())
  predict_beam.build_pipeline(pipeline, [str(tmp_path / "in.jsonl")], info, options)
  with pytest.raises(Exception) as raised:
    pipeline.run().wait_until_finish()
  assert predict_beam.worker_error_message(raised.value).startswith(
      f"--model_dir {tmp_path / 'gone'}: no task.json")


def test_worker_error_message_from_text():
  text = ("Traceback ...\nbert_keras.predict_beam.PredictError: f.tsv line 3: 1 fields, the "
          "header has 2 [while running 'ReadRows']\n")
  assert predict_beam.worker_error_message(RuntimeError(text)) == (
      "f.tsv line 3: 1 fields, the header has 2")
  assert predict_beam.worker_error_message(RuntimeError("boom")) is None


def _cli(*args):
  return subprocess.run([sys.executable, str(REPO / "predict_beam.py")] + list(args),
                        capture_output=True, text=True, timeout=300,
                        env=dict(os.environ, TF_CPP_MIN_LOG_LEVEL="2"))


@pytest.mark.slow
def test_command_line(setup, tmp_path):
  """The command line: a DirectRunner run with Beam options passed through; a bad Beam
  option, an unknown runner and a missing model directory as one error line."""
  prefix = tmp_path / "out" / "p"
  prefix.parent.mkdir()
  done = _cli(f"--model_dir={setup.paths['regression']}",
              f"--input_file={setup.inputs}/in-*", f"--output_file={prefix}",
              "--num_shards=3", "--direct_num_workers=1", "--pipeline_type_check")
  assert done.returncode == 0, done.stderr
  assert len(_shards(prefix)) == 3 and len(_read_output(prefix)) == 23
  base = [f"--model_dir={setup.paths['regression']}", f"--input_file={setup.inputs}/in-*",
          f"--output_file={tmp_path}/q"]
  for args, message in [
      (base + ["--no_such_beam_option=1"], "error: --no_such_beam_option=1: neither a flag of "
       "predict_beam.py nor a Beam pipeline option"),
      (base + ["--runner=NoSuchRunner"], "error: Unexpected pipeline runner: NoSuchRunner"),
      ([f"--model_dir={tmp_path}/gone"] + base[1:], f"error: --model_dir {tmp_path}/gone: no "
       "such directory")]:
    done = _cli(*args)
    assert done.returncode == 1 and done.stderr.strip().splitlines()[-1].startswith(message), (
        done.stderr)
    assert "Traceback" not in done.stderr


def test_runs_never_mix_and_a_row_over_max_row_bytes_is_bad(setup, tmp_path):
  """An earlier run's shards under the prefix are refused (replaced with --overwrite), an
  input pattern that covers the output shards is refused, a prefix in a folder that does
  not exist yet is made as Beam's sinks make one, and --max_row_bytes bounds a row."""
  rows = tmp_path / "in.jsonl"
  rows.write_text('{"text": "the dog"}\n{"text": "' + "word " * 400 + '"}\n{"text": "jim"}\n')
  prefix = tmp_path / "new" / "folder" / "pred"

  def run(**overrides):
    return predict_beam.run(predict_beam.options(**dict(dict(
        model_dir=setup.paths["classifier"], input_file=str(rows), output_file=str(prefix),
        batch_size=4, skip_bad_rows=True, max_row_bytes=200, num_shards=2), **overrides)),
        beam_runner.pipeline_options())

  counts = run()
  assert (counts["written"], counts["bad"]) == (2, 1)
  shards = sorted(p.name for p in prefix.parent.iterdir())
  assert shards == ["pred-00000-of-00002.jsonl", "pred-00001-of-00002.jsonl",
                    "pred-errors-00000-of-00002.jsonl", "pred-errors-00001-of-00002.jsonl"]
  bad = "".join(p.read_text() for p in prefix.parent.glob("pred-errors-*"))
  assert "over --max_row_bytes=200" in bad and '"line": 2' in bad
  with pytest.raises(ValueError, match="4 shards of an earlier run are there .*--overwrite"):
    run(num_shards=1)
  with pytest.raises(ValueError, match="holds the output shards of --output_file"):
    run(input_file=str(prefix.parent / "*.jsonl"), overwrite=True)
  counts = run(num_shards=1, overwrite=True, skip_bad_rows=False, max_row_bytes=0)
  assert counts["written"] == 3
  assert sorted(p.name for p in prefix.parent.iterdir()) == ["pred-00000-of-00001.jsonl"]
