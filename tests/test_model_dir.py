"""A run's output directory is the model (runtime/model_dir.py): the files
run_classifier writes into output_dir and best/, the runs and loaders that then need no
model flags (predict-only run_classifier, export_saved_model, checkpoints.load_model),
flags in conflict with the directory, reruns with changed options and
--overwrite_output_dir, and the SavedModel's label names."""

import csv
import json
import os
import shutil
import types

import numpy as np
import pytest
import tensorflow as tf

from conftest import REPO, shared_path
from bert_keras import checkpoints
from bert_keras import export_saved_model
from bert_keras import modeling
from bert_keras import preprocessing
from bert_keras import run_classifier
from bert_keras.runtime import model_dir

TINY = dict(vocab_size=30522, hidden_size=32, num_hidden_layers=2, num_attention_heads=2,
            intermediate_size=64, max_position_embeddings=64, type_vocab_size=2)
DATA = REPO / "sample_tasks" / "pairs"
FILES = ("bert_config.json", "vocab.txt", "tokenizer_config.json", "labels.txt", "task.json",
         "run_options.json")


def _train_options(root, vocab, out, **overrides):
  return run_classifier.options(**{
      **dict(task_name="custom", do_train=True, do_eval=True, data_dir=str(DATA),
             vocab_file=vocab, bert_config_file=str(root / "bert_config.json"),
             max_seq_length=32, train_batch_size=16, learning_rate=1e-3,
             num_train_epochs=2.0, output_dir=str(out), eval_every_steps=4,
             save_checkpoints_steps=4, log_every_steps=0),
      **overrides})


@pytest.fixture(scope="module")
def trained(tmp_path_factory):
  """A tiny run_classifier fine-tuned on sample_tasks/pairs (64 pairs, 2 epochs: 8 steps,
  evaluated every 4: best/ written): {"root", "vocab", "out", "labels"}."""
  vocab = str(shared_path("data", "vocab", "bert-base-uncased-vocab.txt"))
  root = tmp_path_factory.mktemp("model_dir")
  (root / "bert_config.json").write_text(modeling.BertConfig(**TINY).to_json_string())
  out = root / "out"
  run_classifier.run(_train_options(root, vocab, out))
  with open(DATA / "train.tsv", newline="") as f:
    labels = sorted({row["label"] for row in csv.DictReader(f, delimiter="\t")})
  return dict(root=root, vocab=vocab, out=out, labels=labels)


def _test_pairs():
  with open(DATA / "test.tsv", newline="") as f:
    return [(row["sentence1"], row["sentence2"]) for row in csv.DictReader(f, delimiter="\t")]


def test_output_dir_and_best_hold_the_model_files(trained):
  out, labels = trained["out"], trained["labels"]
  for directory in (out, out / "best"):
    assert all((directory / name).exists() for name in FILES), sorted(os.listdir(directory))
    task = json.loads((directory / "task.json").read_text())
    assert task["task"] == "classifier" and task["labels"] == labels
    assert task["max_seq_length"] == 32 and task["do_lower_case"] is True
    assert task["pair"] is True  # sample_tasks/pairs: predict.py then refuses single texts
    assert (directory / "labels.txt").read_text().splitlines() == labels
    assert (json.loads((directory / "bert_config.json").read_text())
            == json.loads((trained["root"] / "bert_config.json").read_text()))
    with open(trained["vocab"], "rb") as f:
      assert (directory / "vocab.txt").read_bytes() == f.read()
    assert json.loads((directory / "tokenizer_config.json").read_text()) == {
        "do_lower_case": True}
    options = json.loads((directory / "run_options.json").read_text())
    assert options["learning_rate"] == 1e-3 and options["do_train"] is True
  # A classifier's labels.txt does not make it a tagger (convert_checkpoint's --task=auto).
  assert checkpoints.checkpoint_task(str(out)) == "classifier"
  assert checkpoints.checkpoint_task(str(out / "best")) == "classifier"
  described = model_dir.read_model_dir(out / "best")
  assert described["directory"] == str(out / "best") and described["labels"] == labels


def test_predict_only_and_load_model_need_no_model_flags(trained, tmp_path):
  out, labels = trained["out"], trained["labels"]
  before = (out / "run_options.json").read_bytes()
  # The original's second call, without --vocab_file, --bert_config_file, --task_name ...
  got = run_classifier.run(run_classifier.options(do_predict=True, data_dir=str(DATA),
                                                  output_dir=str(out)))["predict"]
  assert (out / "run_options.json").read_bytes() == before  # (the training run's options)
  # ... and into another directory from --init_checkpoint=<the model directory>/best.
  other = run_classifier.run(run_classifier.options(
      do_predict=True, data_dir=str(DATA), init_checkpoint=str(out / "best"),
      output_dir=str(tmp_path / "predict")))["predict"]
  np.testing.assert_allclose(other, got, atol=1e-6)
  # The same probabilities from load_model(best/) and the in-graph preprocessor.
  model = checkpoints.load_model(str(out / "best"), task="classifier")
  assert model.labels == labels and model.do_lower_case is True
  pairs = _test_pairs()
  preprocessor = preprocessing.BertPreprocessor(model.vocab_file, model.do_lower_case, 32)
  features = preprocessor({"text_a": tf.constant([a for a, _ in pairs]),
                           "text_b": tf.constant([b for _, b in pairs])})
  logits = model(features, training=False).numpy().astype(np.float64)
  expected = np.exp(logits) / np.exp(logits).sum(-1, keepdims=True)
  np.testing.assert_allclose(got, expected, atol=1e-5)
  assert (tmp_path / "predict" / "task.json").exists()
  assert not (tmp_path / "predict" / "run_options.json").exists()  # (not a training run)


@pytest.mark.slow  # (the fast tier stays under 5 minutes on 2 cores)
def test_export_needs_only_the_directory_and_names_the_labels(trained, tmp_path):
  out, labels = trained["out"], trained["labels"]
  export_dir = tmp_path / "saved"
  export_saved_model.run(export_saved_model.options(init_checkpoint=str(out / "best"),
                                                    export_dir=str(export_dir)))
  loaded = tf.saved_model.load(str(export_dir))
  pairs = _test_pairs()
  result = loaded.signatures["serving_default"](text_a=tf.constant([a for a, _ in pairs]),
                                                text_b=tf.constant([b for _, b in pairs]))
  probabilities = result["probabilities"].numpy()
  names = result["label_names"].numpy().astype(str)
  assert names.tolist() == [labels] * len(pairs)
  assert result["label"].numpy().astype(str).tolist() == [
      labels[i] for i in probabilities.argmax(-1)]
  model = checkpoints.load_model(str(out / "best"), task="classifier")
  preprocessor = preprocessing.BertPreprocessor(model.vocab_file, True, 32)
  logits = model(preprocessor({"text_a": tf.constant([pairs[0][0]]),
                               "text_b": tf.constant([pairs[0][1]])}), training=False).numpy()
  np.testing.assert_allclose(probabilities[0], tf.nn.softmax(logits)[0], atol=1e-5)


def _one_line_error(run, match):
  with pytest.raises(ValueError, match=match) as e:
    run()
  assert "\n" not in str(e.value)
  return str(e.value)


def test_flags_in_conflict_with_the_directory_are_refused(trained, tmp_path):
  out = str(trained["out"])
  predict = dict(do_predict=True, data_dir=str(DATA), output_dir=out)
  error = _one_line_error(lambda: run_classifier.run(run_classifier.options(
      do_lower_case=False, **predict)), "--do_lower_case=False conflicts with the model "
      "directory")
  assert out in error
  other = tmp_path / "bert_config.json"
  other.write_text(modeling.BertConfig(**{**TINY, "hidden_size": 64}).to_json_string())
  error = _one_line_error(lambda: run_classifier.run(run_classifier.options(
      bert_config_file=str(other), **predict)), "--bert_config_file=.* conflicts with the "
      "model directory")
  assert "bert_config.json" in error
  small = tmp_path / "vocab.txt"
  small.write_text("[PAD]\n[UNK]\n[CLS]\n[SEP]\nthe\n")
  _one_line_error(lambda: run_classifier.run(run_classifier.options(
      vocab_file=str(small), **predict)), "--vocab_file=.* conflicts with the model directory")
  _one_line_error(lambda: run_classifier.run(run_classifier.options(
      task_name="custom", labels="same_topic,other_topic", **predict)),
      "--labels: the labels same_topic,other_topic differ from those of the model directory")
  _one_line_error(lambda: run_classifier.run(run_classifier.options(
      task_name="MRPC", **predict)), "--task_name: the labels 0,1 differ")
  export = dict(init_checkpoint=out, export_dir=str(tmp_path / "saved"))
  _one_line_error(lambda: export_saved_model.run(export_saved_model.options(
      num_labels=3, **export)), "--num_labels=3 conflicts with the model directory")
  _one_line_error(lambda: export_saved_model.run(export_saved_model.options(
      labels="a,b", **export)), "--labels=a,b conflicts with the model directory")
  _one_line_error(lambda: export_saved_model.run(export_saved_model.options(
      task_name="MNLI", **export)), "--task_name=MNLI conflicts with the model directory")
  _one_line_error(lambda: checkpoints.load_model(out, task="classifier", do_lower_case=False),
                  "do_lower_case=False conflicts with the model directory")
  _one_line_error(lambda: checkpoints.load_model(out, task="classifier", num_labels=3),
                  "num_labels=3, but .*labels.txt lists 2 labels")
  assert not (tmp_path / "saved").exists()


def test_rerun_with_changed_options_is_refused_listing_the_changes(trained):
  error = _one_line_error(lambda: run_classifier.run(_train_options(
      trained["root"], trained["vocab"], trained["out"], learning_rate=2e-3, seed=7,
      eval_batch_size=4, save_checkpoints_steps=2)), "holds a training run with other options")
  assert "learning_rate: 0.001 -> 0.002" in error and "seed: 12345 -> 7" in error
  # What does not change the result is not compared (RESULT_NEUTRAL_OPTIONS).
  assert "eval_batch_size" not in error and "save_checkpoints_steps" not in error
  assert "--overwrite_output_dir" in error


@pytest.mark.slow  # (the fast tier stays under 5 minutes on 2 cores)
def test_same_options_resume_and_overwrite_moves_the_old_run_aside(trained, tmp_path):
  out = tmp_path / "out"
  shutil.copytree(trained["out"], out)
  before = (out / "run_options.json").read_bytes()
  # The same options (and a neutral change): resumed at its last step, nothing trained.
  run_classifier.run(_train_options(trained["root"], trained["vocab"], out,
                                    eval_batch_size=4, save_checkpoints_steps=2))
  assert tf.train.latest_checkpoint(str(out)).endswith("model.ckpt-8")
  assert (out / "run_options.json").read_bytes() == before
  # Another model (its checkpoints would not fit the old ones) and schedule, started over.
  config = tmp_path / "one_layer.json"
  config.write_text(modeling.BertConfig(**{**TINY, "num_hidden_layers": 1}).to_json_string())
  run_classifier.run(_train_options(trained["root"], trained["vocab"], out, learning_rate=2e-3,
                                    num_train_epochs=1.0, do_eval=False, eval_every_steps=0,
                                    bert_config_file=str(config), overwrite_output_dir=True))
  aside = [p for p in tmp_path.iterdir() if p.name.startswith("out.old-")]
  assert len(aside) == 1
  assert (aside[0] / "model.ckpt-8.index").exists() and (aside[0] / "best").is_dir()
  assert (aside[0] / "run_options.json").read_bytes() == before
  assert tf.train.latest_checkpoint(str(out)).endswith("model.ckpt-4")
  assert not (out / "best").exists() and not (out / "model.ckpt-8.index").exists()
  assert json.loads((out / "run_options.json").read_text())["learning_rate"] == 2e-3
  assert json.loads((out / "bert_config.json").read_text())["num_hidden_layers"] == 1


def test_neutral_options_and_absent_model_flags_are_not_changes(tmp_path):
  (tmp_path / "model.ckpt-1.index").write_bytes(b"")  # (a run that trained something)
  (tmp_path / "run_options.json").write_text(json.dumps(
      {"learning_rate": 1e-3, "do_lower_case": False, "iterations_per_loop": 1000,
       "use_tpu": False, "predict_batch_size": 8}))
  options = types.SimpleNamespace(output_dir=str(tmp_path), do_train=True,
                                  overwrite_output_dir=False, learning_rate=1e-3,
                                  do_lower_case=True, iterations_per_loop=10, use_tpu=True,
                                  predict_batch_size=64)
  model_dir.check_rerun(options, given={"output_dir", "do_train"})  # do_lower_case not given
  with pytest.raises(ValueError, match=r"do_lower_case: False -> True"):
    model_dir.check_rerun(options, given={"do_lower_case"})
  options.learning_rate = 5.0
  with pytest.raises(ValueError, match=r"learning_rate: 0.001 -> 5.0\)"):
    model_dir.check_rerun(options, given={"learning_rate"})
  options.do_train = False  # an eval- or predict-only run is never a rerun
  model_dir.check_rerun(options, given={"learning_rate"})
  options.do_train = True  # nor a run into a directory whose run saved no checkpoint
  (tmp_path / "model.ckpt-1.index").unlink()
  model_dir.check_rerun(options, given={"learning_rate"})


def test_flags_given_on_the_command_line_are_told_from_defaults():
  """absl flags: `given` is what the command line set, even a value equal to the default."""
  from absl import flags
  values = flags.FlagValues()
  flags.DEFINE_bool("do_lower_case", True, "", flag_values=values)
  flags.DEFINE_integer("max_seq_length", 128, "", flag_values=values)
  flags.DEFINE_string("vocab_file", None, "", flag_values=values)
  values(["prog", "--do_lower_case=true", "--vocab_file=v.txt"])
  namespace, given = model_dir.options_namespace(
      values, dict(do_lower_case=True, max_seq_length=128, vocab_file=None, output_dir=None))
  assert given == {"do_lower_case", "vocab_file"}
  assert vars(namespace) == dict(do_lower_case=True, max_seq_length=128, vocab_file="v.txt",
                                 output_dir=None, _given=frozenset(given))
  # The copy records them (option_checks.GIVEN), for the checks that judge a given flag.
  from bert_keras.runtime import option_checks
  assert option_checks.given_flags(namespace) == {"do_lower_case", "vocab_file"}


def test_extract_features_from_the_directory(trained, tmp_path):
  """--init_checkpoint=<model directory> alone: its config, vocabulary, casing and
  max_seq_length (32: the positions past it would be cut)."""
  from bert_keras import extract_features
  text = tmp_path / "input.txt"
  text.write_text("The cat sat on the mat. ||| A dog barked.\n" + "word " * 60 + "\n")
  output = tmp_path / "features.jsonl"
  run = lambda **extra: extract_features.run(extract_features.options(  # noqa: E731
      input_file=str(text), output_file=str(output), init_checkpoint=str(trained["out"]),
      layers="-1", **extra))
  assert run() == 2
  lines = [json.loads(line) for line in output.read_text().splitlines()]
  assert lines[0]["features"][0]["token"] == "[CLS]"
  assert len(lines[1]["features"]) == 32
  assert len(lines[0]["features"][0]["layers"][0]["values"]) == TINY["hidden_size"]
  _one_line_error(lambda: run(do_lower_case=False),
                  "--do_lower_case=False conflicts with the model directory")


def test_overwrite_refuses_an_output_dir_that_holds_the_run_s_inputs(tmp_path):
  """--overwrite_output_dir moves what --output_dir holds aside: an --output_dir that is, or
  holds, --data_dir or a model file is refused, naming both flags, before anything moves."""
  data = tmp_path / "data"
  shutil.copytree(DATA, data)
  model = tmp_path / "model"
  model.mkdir()
  (model / "bert_config.json").write_text(modeling.BertConfig(**TINY).to_json_string())
  (model / "vocab.txt").write_text("[PAD]\n[UNK]\n[CLS]\n[SEP]\n")
  before = {path: path.read_bytes() for path in tmp_path.rglob("*") if path.is_file()}
  for out, flag, value in ((data, "data_dir", data), (tmp_path, "data_dir", data),
                           (model, "vocab_file", model / "vocab.txt")):
    with pytest.raises(ValueError) as info:
      run_classifier.run(_train_options(model, str(model / "vocab.txt"), out,
                                        overwrite_output_dir=True, data_dir=str(data)))
    assert str(info.value) == (
        f"--output_dir {out} holds --{flag} {value}: --overwrite_output_dir would move the "
        "run's input aside; choose another --output_dir")
  assert {path: path.read_bytes() for path in tmp_path.rglob("*") if path.is_file()} == before
  assert sorted(os.listdir(tmp_path)) == ["data", "model"]
