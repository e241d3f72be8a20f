"""A BEIR retrieval set from ../shared's SQuAD files for run_embeddings: questions -> the
paragraph they were written on (results/retrieval_minilm.sh, bench/bench_embeddings_training.py).

  python results/squad_retrieval_data.py OUT [--seed=0] [--max_train=0] [--answerable_only]
      [--max_rerank_train=0] [--negatives_run=RUN --negatives=3]

Writes OUT/corpus.jsonl, queries.jsonl, qrels/dev.tsv, qrels/test.tsv, train.tsv and
OUT/rerank/ (run_reranker's --data_dir: train.tsv beside links to the BEIR files), and prints
the sizes.
- corpus.jsonl: every distinct paragraph of squad2_part_a.json and xquad.en.json (one document
  a paragraph: `_id` = the article title and the paragraph's number, `title` = the article
  title with spaces for underscores, `text` = the paragraph), train and held-out articles
  alike, so that a held-out question is searched among all of them.
- train.tsv (`anchor`, `positive`): the questions of squad2_part_a's 8 articles (SQuAD 2.0 dev;
  its unanswerable questions too, as they were written on that paragraph: --answerable_only
  drops them), each with its paragraph as run_embeddings embeds a document,
  (title + " " + text), shuffled (seeded); --max_train > 0 keeps that many.
- train_search/: the training questions as a BEIR set (corpus.jsonl linked, queries.jsonl,
  qrels/test.tsv), for run_embeddings --do_predict to rank every paragraph for each of them:
  its test_run.trec is --negatives_run.
- rerank/train.tsv (`query`, `passage`, `label`): the first --max_rerank_train (> 0; else all)
  of those questions (a question text once), each with its paragraph (label 1) and, with
  --negatives_run (a TREC run of train_search's questions), the --negatives paragraphs the run
  ranks highest among the wrong ones (hard negatives; label 0); without it, one other
  paragraph of the same article drawn at random (seeded; label 0).
- held out, split by article: the 32 articles of xquad.en.json that part_a does not have (SQuAD
  1.1 dev questions, so no question of theirs is in train.tsv), shuffled (seeded) and halved:
  the first half's questions are qrels/dev.tsv, the second's qrels/test.tsv (one relevant
  paragraph each, relevance 1). queries.jsonl holds the dev and test questions.
Training and held-out articles differ because part_a's articles carry 200-450 questions each
and xquad's 8-74: a seeded shuffle of all 40 would leave training a few hundred questions.
"""

import argparse
import json
import os
import random
import sys

sys.path.insert(0, os.path.join(os.path.dirname(os.path.abspath(__file__)), "..", "bench"))
from shared_data import shared_data  # noqa: E402


def _clean(text):
  """One line without tabs (train.tsv is tab-separated, without quoting)."""
  return " ".join(text.split())


def _articles(path):
  with open(path, encoding="utf-8") as f:
    return json.load(f)["data"]


def build(squad_dir, seed=0, max_train=0, answerable_only=False, max_rerank_train=0,
          negatives_run=None, negatives=3):
  """{"corpus": [doc], "queries": [query], "dev": [(qid, docid)], "test": [...],
  "train": [(anchor, positive)], "train_search": [(qid, question, docid)], "rerank": [(query,
  passage, label)], "articles": {split: [title]}} (see the module doc)."""
  part_a = _articles(os.path.join(squad_dir, "squad2_part_a.json"))
  xquad = _articles(os.path.join(squad_dir, "xquad.en.json"))
  corpus, doc_of_text, numbers = [], {}, {}

  def doc_id(title, text):
    text = _clean(text)
    if text not in doc_of_text:
      numbers[title] = numbers.get(title, 0) + 1
      doc_of_text[text] = f"{title}_{numbers[title]}"
      corpus.append({"_id": doc_of_text[text], "title": title.replace("_", " "), "text": text})
    return doc_of_text[text]

  def questions(articles):
    """(question id, question, doc id, document as embedded) of the articles."""
    rows = []
    for article in articles:
      for paragraph in article["paragraphs"]:
        doc = doc_id(article["title"], paragraph["context"])
        embedded = (article["title"].replace("_", " ") + " " + _clean(paragraph["context"]))
        for qa in paragraph["qas"]:
          if answerable_only and qa.get("is_impossible"):
            continue
          rows.append((qa["id"], _clean(qa["question"]), doc, embedded))
    return rows

  train_titles = [a["title"] for a in part_a]
  train = questions(part_a)
  by_article = {}
  for article in part_a:
    by_article[article["title"]] = [
        article["title"].replace("_", " ") + " " + _clean(p["context"])
        for p in article["paragraphs"]]
  article_of = {d: title for title, docs in by_article.items() for d in docs}
  held_out = [a for a in xquad if a["title"] not in set(train_titles)]
  questions([a for a in xquad if a["title"] in set(train_titles)])  # their paragraphs too
  random.Random(seed).shuffle(held_out)
  half = len(held_out) // 2
  splits = {"dev": questions(held_out[:half]), "test": questions(held_out[half:])}
  random.Random(seed).shuffle(train)
  chosen = train[:max_rerank_train] if max_rerank_train > 0 else train
  if negatives_run:
    rerank = _hard_rows(chosen, negatives_run, negatives, corpus)
  else:
    draw = random.Random(seed + 1)
    rerank = []
    for _, anchor, _, positive in chosen:
      others = [d for d in by_article[article_of[positive]] if d != positive]
      rerank += [(anchor, positive, 1), (anchor, draw.choice(others), 0)]
  train_search = [(qid, q, doc) for qid, q, doc, _ in train]
  train = [(q, d) for _, q, _, d in train]
  if max_train > 0:
    train = train[:max_train]
  queries = [{"_id": qid, "text": q} for rows in splits.values() for qid, q, _, _ in rows]
  return {"corpus": corpus, "queries": queries, "train": train, "rerank": rerank,
          "train_search": train_search,
          "dev": [(qid, doc) for qid, _, doc, _ in splits["dev"]],
          "test": [(qid, doc) for qid, _, doc, _ in splits["test"]],
          "articles": {"train": train_titles, "dev": [a["title"] for a in held_out[:half]],
                       "test": [a["title"] for a in held_out[half:]]}}


def _read_run(path):
  """{query id: [doc id, ...]} of a TREC run, best first (score descending)."""
  run = {}
  with open(path, encoding="utf-8") as f:
    for number, line in enumerate(f, 1):
      fields = line.split()
      if len(fields) != 6:
        raise ValueError(f"{path} line {number}: not a TREC run line (6 fields)")
      run.setdefault(fields[0], []).append((-float(fields[4]), fields[2]))
  return {qid: [doc for _, doc in sorted(rows)] for qid, rows in run.items()}


def _hard_rows(questions, run_path, negatives, corpus):
  """(question, passage, label) rows: each question (a text once) with its paragraph (1) and
  the `negatives` wrong paragraphs the run ranks highest (0); a question the run lacks is a
  ValueError."""
  run, text = _read_run(run_path), {d["_id"]: d["title"] + " " + d["text"] for d in corpus}
  rows, seen = [], set()
  for qid, question, doc, embedded in questions:
    if question in seen:
      continue
    seen.add(question)
    if qid not in run:
      raise ValueError(f"{run_path}: no candidates for the training question {qid}")
    wrong = [d for d in run[qid] if d != doc][:negatives]
    rows += [(question, embedded, 1)] + [(question, text[d], 0) for d in wrong]
  return rows


def write(data, out):
  os.makedirs(os.path.join(out, "qrels"), exist_ok=True)
  for name in ("corpus", "queries"):
    with open(os.path.join(out, f"{name}.jsonl"), "w", encoding="utf-8") as f:
      f.writelines(json.dumps(row, ensure_ascii=False) + "\n" for row in data[name])
  for split in ("dev", "test"):
    with open(os.path.join(out, "qrels", f"{split}.tsv"), "w", encoding="utf-8") as f:
      f.write("query-id\tcorpus-id\tscore\n")
      f.writelines(f"{qid}\t{doc}\t1\n" for qid, doc in data[split])
  with open(os.path.join(out, "train.tsv"), "w", encoding="utf-8") as f:
    f.write("anchor\tpositive\n")
    f.writelines(f"{anchor}\t{positive}\n" for anchor, positive in data["train"])
  search = os.path.join(out, "train_search")
  os.makedirs(os.path.join(search, "qrels"), exist_ok=True)
  if not os.path.lexists(os.path.join(search, "corpus.jsonl")):
    os.symlink(os.path.join("..", "corpus.jsonl"), os.path.join(search, "corpus.jsonl"))
  with open(os.path.join(search, "queries.jsonl"), "w", encoding="utf-8") as f:
    f.writelines(json.dumps({"_id": qid, "text": q}, ensure_ascii=False) + "\n"
                 for qid, q, _ in data["train_search"])
  with open(os.path.join(search, "qrels", "test.tsv"), "w", encoding="utf-8") as f:
    f.write("query-id\tcorpus-id\tscore\n")
    f.writelines(f"{qid}\t{doc}\t1\n" for qid, _, doc in data["train_search"])
  rerank = os.path.join(out, "rerank")
  os.makedirs(rerank, exist_ok=True)
  for name in ("corpus.jsonl", "queries.jsonl", "qrels"):
    if not os.path.lexists(os.path.join(rerank, name)):
      os.symlink(os.path.join("..", name), os.path.join(rerank, name))
  with open(os.path.join(rerank, "train.tsv"), "w", encoding="utf-8") as f:
    f.write("query\tpassage\tlabel\n")
    f.writelines(f"{q}\t{p}\t{label}\n" for q, p, label in data["rerank"])


def main():
  parser = argparse.ArgumentParser(description=__doc__.split("\n")[0])
  parser.add_argument("out", help="the folder to write the set into")
  parser.add_argument("--squad_dir", default=shared_data("squad"),
                      help="holds squad2_part_a.json and xquad.en.json")
  parser.add_argument("--seed", type=int, default=0, help="shuffles train rows and articles")
  parser.add_argument("--max_train", type=int, default=0, help="> 0: keep that many train rows")
  parser.add_argument("--max_rerank_train", type=int, default=0,
                      help="> 0: questions of rerank/train.tsv")
  parser.add_argument("--negatives_run", default=None,
                      help="a TREC run of train_search/'s questions: rerank/train.tsv's "
                           "negatives are its top-ranked wrong paragraphs")
  parser.add_argument("--negatives", type=int, default=3,
                      help="with --negatives_run: negatives a question")
  parser.add_argument("--answerable_only", action="store_true",
                      help="leave squad2_part_a's unanswerable questions out of train.tsv")
  args = parser.parse_args()
  for name in ("squad2_part_a.json", "xquad.en.json"):
    if not os.path.isfile(os.path.join(args.squad_dir, name)):
      sys.exit(f"error: --squad_dir={args.squad_dir}: no {name}")
  if args.negatives_run and not os.path.isfile(args.negatives_run):
    sys.exit(f"error: --negatives_run={args.negatives_run}: no such file")
  if args.negatives < 1:
    sys.exit(f"error: --negatives={args.negatives}: must be at least 1")
  try:  # (a malformed --negatives_run line: its reader's one-line ValueError)
    data = build(args.squad_dir, args.seed, args.max_train, args.answerable_only,
                 args.max_rerank_train, args.negatives_run, args.negatives)
  except ValueError as e:
    sys.exit(f"error: {e}")
  write(data, args.out)
  a = data["articles"]
  print(f"corpus: {len(data['corpus'])} paragraphs; train.tsv: {len(data['train'])} pairs "
        f"({len(a['train'])} articles); dev: {len(data['dev'])} questions ({len(a['dev'])} "
        f"articles); test: {len(data['test'])} questions ({len(a['test'])} articles); "
        f"rerank/train.tsv: {len(data['rerank'])} pairs")


if __name__ == "__main__":
  main()
