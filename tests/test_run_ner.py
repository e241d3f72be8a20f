"""run_ner.py end to end with a tiny model (2 layers, hidden 32) on CoNLL files written here:
every output file, eval_f1 equal to evaluate_ner's on dev_predictions.txt, one output line per
input token (a sentence longer than max_seq_length included), the tag set saved and reused,
best/ by entity F1, load_model(output_dir, task="tagger"), and the one-line errors."""

import json
import os
import pathlib
import random
import subprocess
import sys

import numpy as np
import pytest

import conftest

from conftest import config_file
from bert_keras import checkpoints
from bert_keras import huggingface_layout
from bert_keras import modeling
from bert_keras import run_ner
from bert_keras.tasks.ner import tagging as ner
from bert_keras import tokenization
from bert_keras.utils import conlleval

REPO = pathlib.Path(__file__).resolve().parent.parent
ENV = dict(os.environ, TF_CPP_MIN_LOG_LEVEL="3", CUDA_VISIBLE_DEVICES="")
WORDS = {"PER": ["john", "mary", "smith"], "LOC": ["paris", "london", "york"],
         "O": ["lives", "in", "the", "city", "unbelievable", "a", "."]}
VOCAB = (["[PAD]", "[UNK]", "[CLS]", "[SEP]", "un", "##believ", "##able"]
         + [w for words in WORDS.values() for w in words if w != "unbelievable"])


def sentence(rng, length):
  lines = []
  while len(lines) < length:
    kind = rng.choice(["PER", "LOC", "O", "O"])
    for i in range(rng.randint(1, 2) if kind != "O" else 1):
      word = rng.choice(WORDS[kind])
      tag = "O" if kind == "O" else ("B-" if i == 0 else "I-") + kind
      lines.append(f"{word.capitalize()} NN {tag}")
  return lines


def write_conll(path, sentences, tagged=True, docstart=True):
  text = "-DOCSTART- -X- -X- O\n\n" if docstart else ""
  for lines in sentences:
    text += "".join((line if tagged else line.split()[0]) + "\n" for line in lines) + "\n"
  path.write_text(text, encoding="utf-8")


@pytest.fixture(scope="module")
def files(tmp_path_factory):
  root = tmp_path_factory.mktemp("ner")
  rng = random.Random(0)
  data = root / "data"
  data.mkdir()
  write_conll(data / "train.txt", [sentence(rng, rng.randint(3, 8)) for _ in range(48)])
  dev = [sentence(rng, rng.randint(3, 8)) for _ in range(10)] + [sentence(rng, 40)]
  write_conll(data / "dev.txt", dev)
  write_conll(data / "test.txt", [sentence(rng, 5) for _ in range(4)] + [sentence(rng, 30)],
              tagged=False, docstart=False)
  conftest.write_tiny_model_files(root, VOCAB)
  return root


def base_options(files, out, **overrides):
  return run_ner.options(**{**dict(
      data_dir=str(files / "data"), vocab_file=str(files / "vocab.txt"),
      bert_config_file=str(files / "bert_config.json"), output_dir=str(out),
      max_seq_length=16, doc_stride=5, train_batch_size=8, eval_batch_size=4,
      predict_batch_size=4, learning_rate=1e-3, num_train_epochs=2.0,
      save_checkpoints_steps=6, log_every_steps=4), **overrides})


def read_results(path):
  return dict(line.split(" = ") for line in path.read_text().splitlines())


@pytest.mark.slow
def test_train_eval_predict(files, tmp_path):
  out = tmp_path / "out"
  results = run_ner.run(base_options(files, out, do_train=True, do_eval=True, do_predict=True,
                                     eval_every_steps=6, trim_train_batches=True))
  # 48 train sentences, none longer than 14 pieces: 48 windows, 12 steps.
  assert results["eval"]["global_step"] in (6, 12)   # best/ chosen by eval_f1
  assert (out / "labels.txt").read_text() == "O\nB-LOC\nB-PER\nI-LOC\nI-PER\n"
  for name in ("bert_config.json", "vocab.txt", "tokenizer_config.json",
               "eval_history.jsonl", "best/eval_results.txt", "best/labels.txt",
               "model.ckpt-12.index"):
    assert (out / name).exists(), name
  history = [json.loads(line) for line in (out / "eval_history.jsonl").read_text().splitlines()]
  assert [e["global_step"] for e in history] == [6, 12]
  best = max(history, key=lambda e: e["eval_f1"])
  assert read_results(out / "best" / "eval_results.txt")["global_step"] == str(
      best["global_step"])

  # eval_results.txt: the keys, and eval_f1 / eval_accuracy as evaluate_ner gives them for
  # dev_predictions.txt.
  results_file = read_results(out / "eval_results.txt")
  assert {"eval_precision", "eval_recall", "eval_f1", "eval_accuracy", "eval_loss", "loss",
          "global_step", "eval_f1_PER", "eval_f1_LOC"} <= set(results_file)
  scored = conlleval.metrics(conlleval.score_file(str(out / "dev_predictions.txt")))
  assert float(results_file["eval_f1"]) == scored["FB1"] / 100
  assert float(results_file["eval_precision"]) == scored["precision"] / 100
  assert float(results_file["eval_accuracy"]) == scored["accuracy"] / 100
  assert float(results_file["eval_f1_PER"]) == scored["types"]["PER"]["FB1"] / 100
  assert 0 <= float(results_file["eval_f1"]) <= 1

  # One line per input token, in order, gold as given (the 40-token sentence included).
  dev = ner.read_conll(str(files / "data" / "dev.txt"))
  lines = (out / "dev_predictions.txt").read_text().split("\n\n")[:-1]
  assert len(lines) == len(dev)
  for sentence_, block in zip(dev, lines):
    rows = [row.split(" ") for row in block.split("\n")]
    assert [r[0] for r in rows] == sentence_.words and [r[1] for r in rows] == sentence_.tags
  test = ner.read_conll(str(files / "data" / "test.txt"), tags_required=False)
  blocks = (out / "test_predictions.txt").read_text().split("\n\n")[:-1]
  assert [[row.split(" ")[0] for row in b.split("\n")] for b in blocks] == [
      s.words for s in test]
  assert results["predict"] == [[row.split(" ")[1] for row in b.split("\n")] for b in blocks]

  # The predictions restated from the model that load_model gives for output_dir/best.
  model = checkpoints.load_model(str(out / "best"), task="tagger")
  assert model.labels == ["O", "B-LOC", "B-PER", "I-LOC", "I-PER"]
  tokenizer = tokenization.FullTokenizer(model.vocab_file, model.do_lower_case)
  windows = ner.convert_sentences(dev, tokenizer, model.labels, 16, 5)
  arrays = ner.window_arrays(windows, 16)
  logits = model({k: arrays[k] for k in ("input_ids", "input_mask", "segment_ids")})
  predicted = ner.assemble_tags(dev, windows, np.argmax(logits, -1), model.labels)
  assert predicted == [[row.split(" ")[2] for row in b.split("\n")] for b in lines]

  # --do_eval alone: the saved tag set and the best model, the same results.
  again = run_ner.run(base_options(files, out, do_eval=True))
  assert again["eval"] == results["eval"]
  # --do_predict into another output_dir from --init_checkpoint=<out>/best: its tag set too.
  other = run_ner.run(base_options(files, tmp_path / "other", do_predict=True,
                                   init_checkpoint=str(out / "best")))
  assert other["predict"] == results["predict"]
  assert (tmp_path / "other" / "labels.txt").read_text() == (out / "labels.txt").read_text()


def test_errors(files, tmp_path):
  def error(**overrides):
    with pytest.raises(ValueError) as info:
      run_ner.run(base_options(files, tmp_path / "out", **overrides))
    assert "\n" not in str(info.value)
    return str(info.value)

  assert "At least one of" in error()
  assert error(do_eval=True).startswith("no tag set: give --labels")
  assert error(do_eval=True, labels="O,B-PER,I-PER").startswith(
      f"{files / 'data' / 'dev.txt'} line ")
  assert "is not in the tag set of --labels" in error(do_eval=True, labels="O,B-PER,I-PER")
  assert error(do_train=True, doc_stride=0) == "--doc_stride=0: must be >= 1"
  assert error(do_train=True, num_train_epochs=0.1) == (
      "--num_train_epochs=0.1: 48 training windows / --train_batch_size=8 x epochs gives 0 "
      "training steps")
  assert not (tmp_path / "out").exists()   # checked before any output
  assert "only trained up to sequence length 32" in error(do_train=True, max_seq_length=64)
  assert error(do_train=True, data_dir=str(tmp_path)).startswith(
      f"--data_dir {tmp_path}: no train.txt or train.conll (it ")
  (tmp_path / "out").mkdir()
  (tmp_path / "out" / "labels.txt").write_text("O\nB-PER\n")
  assert "differs from the tag set the model was trained with" in error(
      do_train=True, labels="O,B-LOC")


def test_create_model(files):
  config = modeling.BertConfig.from_json_file(str(files / "bert_config.json"))
  ids = np.array([[2, 5, 6, 3, 0]], np.int32)
  tags = np.array([[-1, 1, 0, -1, -1]], np.int32)
  loss, per_token, logits, predictions = run_ner.create_model(
      config, False, ids, (ids > 0).astype(np.int32), np.zeros_like(ids), tags, 3)
  assert logits.shape == (1, 5, 3) and predictions.shape == (1, 5)
  assert float(loss) == pytest.approx(float(np.sum(per_token)) / 2)
  assert per_token.numpy()[0, 0] == 0 and per_token.numpy()[0, 1] > 0


@pytest.mark.slow
def test_command_line_and_evaluate_ner(files, tmp_path):
  out = tmp_path / "out"
  cmd = [sys.executable, str(REPO / "run_ner.py"), "--do_train=true", "--do_eval=true",
         f"--data_dir={files / 'data'}", f"--vocab_file={files / 'vocab.txt'}",
         f"--bert_config_file={files / 'bert_config.json'}", "--max_seq_length=16",
         "--train_batch_size=16", "--num_train_epochs=1", f"--output_dir={out}"]
  proc = subprocess.run(cmd, env=ENV, capture_output=True, text=True, timeout=300)
  assert proc.returncode == 0, proc.stderr[-3000:]
  tokens = sum(len(s.words) for s in ner.read_conll(str(files / "data" / "dev.txt")))
  for line in ("***** Running training *****", "***** Eval results *****",
               f"processed {tokens} tokens with"):
    assert line in proc.stderr, line
  score = subprocess.run([sys.executable, str(REPO / "evaluate_ner.py"),
                          str(out / "dev_predictions.txt")], capture_output=True, text=True)
  fb1 = float(score.stdout.splitlines()[1].rsplit("FB1:", 1)[1])
  assert round(float(read_results(out / "eval_results.txt")["eval_f1"]) * 100, 2) == fb1
  proc = subprocess.run(cmd[:-1] + [f"--output_dir={out}", "--labels=O,B-PER"], env=ENV,
                        capture_output=True, text=True, timeout=300)
  assert proc.returncode == 1
  assert proc.stderr.strip().splitlines()[-1].startswith("error: --labels=O,B-PER differs")


def test_tagger_needs_two_tags(tmp_path):
  """The tagging reader (run_ner): a tag set of one tag trains a one-class softmax
  whose loss is 0: refused, naming where the tags come from."""
  from bert_keras import run_ner
  data_dir = tmp_path / "data"
  data_dir.mkdir()
  (data_dir / "train.txt").write_text("the O\ndog O\n\nruns O\n")
  vocab = tmp_path / "vocab.txt"
  vocab.write_text("".join(f"{t}\n" for t in ["[PAD]", "[UNK]", "[CLS]", "[SEP]", "the", "dog",
                                              "runs"]))
  config = config_file(tmp_path, "config.json")
  for labels, source in ((None, "train.txt"), ("O", "--labels")):
    with pytest.raises(ValueError) as info:
      run_ner.run(run_ner.options(data_dir=str(data_dir), vocab_file=str(vocab),
                                  bert_config_file=str(config), output_dir=str(tmp_path / "o"),
                                  do_train=True, labels=labels, max_seq_length=16))
    assert str(info.value) == (f"{source}: the tag set has 1 tag (O); a tagger needs at least "
                               "two (give --labels to name the others)")
  assert not (tmp_path / "o").exists()


@pytest.mark.slow  # (the fast tier stays under 5 minutes on 2 cores)
def test_huggingface_init_checkpoint_alone_and_conll_files(files, tmp_path):
  """--init_checkpoint a HuggingFace directory (config.json, vocab.txt, model.safetensors)
  with no --vocab_file or --bert_config_file: its files are used; --data_dir in WNUT-17's
  layout (train.conll, dev.conll); a --data_dir with neither name: the files it holds named."""
  config = modeling.BertConfig.from_json_file(str(files / "bert_config.json"))
  encoder = modeling.BertModel(config)
  encoder({"input_ids": np.ones([1, 4], np.int32), "input_mask": np.ones([1, 4], np.int32),
           "segment_ids": np.zeros([1, 4], np.int32)})
  hf = tmp_path / "hf"
  huggingface_layout.save_huggingface(encoder, str(hf), vocab_file=str(files / "vocab.txt"),
                                      do_lower_case=True)
  assert not (hf / "bert_config.json").exists() and (hf / "model.safetensors").exists()
  data = tmp_path / "data"
  data.mkdir()
  rng = random.Random(1)
  write_conll(data / "train.conll", [sentence(rng, 5) for _ in range(16)])
  write_conll(data / "dev.conll", [sentence(rng, 5) for _ in range(4)])
  out = tmp_path / "out"
  results = run_ner.run(run_ner.options(
      data_dir=str(data), init_checkpoint=str(hf), output_dir=str(out), do_train=True,
      do_eval=True, max_seq_length=16, doc_stride=5, train_batch_size=8, num_train_epochs=1.0,
      learning_rate=1e-3, log_every_steps=1))
  assert results["eval"]["global_step"] == 2
  assert (out / "vocab.txt").read_text() == (files / "vocab.txt").read_text()
  saved = modeling.BertConfig.from_json_file(str(out / "bert_config.json")).to_dict()
  assert {k: saved[k] for k in config.to_dict()} == config.to_dict()   # (the tanh gelu too)
  (data / "train.conll").rename(data / "train.tsv")
  with pytest.raises(ValueError) as info:
    run_ner.run(run_ner.options(data_dir=str(data), init_checkpoint=str(hf),
                                output_dir=str(tmp_path / "other"), do_train=True,
                                max_seq_length=16))
  assert str(info.value) == (f"--data_dir {data}: no train.txt or train.conll (it holds "
                             "dev.conll, train.tsv)")
