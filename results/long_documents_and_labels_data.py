"""Data sets of the multi-label, class weights and long documents results (docs/RESULTS.md),
built from ../shared (run_classifier --task_name=custom TSVs), and the figures of a run's
eval_predictions.tsv (run as results/long_documents_and_labels_data.py):

  ... wnut  OUT [TRAIN DEV]        # WNUT-17 sentences -> their entity types
  ... sst2  OUT [POS NEG]          # SST-2 train subset, 10 positives to 1
  ... books OUT [BOOKS TRAIN DEV]  # Gutenberg passages -> their book
  ... report OUTPUT_DIR            # accuracy, macro F1, per-label recall

wnut: each sentence of ../shared/data/ner/wnut17/{train,dev}.conll (tokens joined by spaces;
the first TRAIN and DEV sentences, default all),
labelled with the set of entity types its BIO tags name (person, location, group,
creative-work, corporation, product; none for most sentences), separator ",".
sst2: the first POS (2,000) positive and the first NEG (200) negative sentences of SST-2's
train.tsv
(shuffled, seed 0), and the whole dev.tsv (444 positive, 428 negative).
books: the first BOOKS (6) of three by Austen and three by Chesterton (emma, brown,
persuasion, thursday, sense, ball), each cut into consecutive passages of whole sentences, a
passage's length drawn uniformly from 300-2,000 words (seed 0); of each book's passages, DEV
(8) of every fourth go to dev and TRAIN (24) of the rest to train (the label: the file name).
"""

import csv
import os
import random
import sys

sys.path.insert(0, os.path.join(os.path.dirname(os.path.abspath(__file__)), "..", "bench"))
from shared_data import SHARED  # noqa: E402
BOOKS = ("austen-emma", "chesterton-brown", "austen-persuasion", "chesterton-thursday",
         "austen-sense", "chesterton-ball")


def _write(path, header, rows):
  os.makedirs(os.path.dirname(path), exist_ok=True)
  with open(path, "w", encoding="utf-8", newline="") as f:
    f.write("\t".join(header) + "\n")
    for row in rows:
      f.write("\t".join(" ".join(str(x).replace("\t", " ").split()) for x in row) + "\n")


def _conll(path):
  """(tokens, tags) per sentence of a CoNLL file."""
  sentences, tokens, tags = [], [], []
  with open(path, encoding="utf-8") as f:
    for line in f:
      line = line.rstrip("\n")
      if not line.strip():
        if tokens:
          sentences.append((tokens, tags))
        tokens, tags = [], []
        continue
      token, tag = line.split("\t")[:2]
      tokens.append(token)
      tags.append(tag)
  if tokens:
    sentences.append((tokens, tags))
  return sentences


def wnut(out, train=None, dev=None):
  for split, name, n in (("train", "train.tsv", train), ("dev", "dev.tsv", dev)):
    rows = []
    path = os.path.join(SHARED, "data", "ner", "wnut17", f"{split}.conll")
    for tokens, tags in _conll(path)[:n]:
      types = sorted({tag[2:] for tag in tags if tag != "O"})
      rows.append((" ".join(tokens), ",".join(types)))
    _write(os.path.join(out, name), ["sentence", "label"], rows)
    print(f"{name}: {len(rows)} sentences, {sum(1 for r in rows if r[1])} with entities")


def _sst2_rows(path):
  with open(path, encoding="utf-8") as f:
    return [line.rstrip("\n").split("\t") for line in f][1:]


def sst2(out, positives=2000, negatives=200):
  rows = _sst2_rows(os.path.join(SHARED, "data", "glue", "SST-2", "train.tsv"))
  train = ([r for r in rows if r[1] == "1"][:positives]
           + [r for r in rows if r[1] == "0"][:negatives])
  random.Random(0).shuffle(train)
  _write(os.path.join(out, "train.tsv"), ["sentence", "label"], train)
  dev = _sst2_rows(os.path.join(SHARED, "data", "glue", "SST-2", "dev.tsv"))
  _write(os.path.join(out, "dev.tsv"), ["sentence", "label"], dev)
  print(f"train: {positives} positive, {negatives} negative; dev: {len(dev)}")


def books(out, num_books=6, train_per_book=24, dev_per_book=8):
  rng = random.Random(0)
  train, dev = [], []
  for book in BOOKS[:num_books]:
    path = os.path.join(SHARED, "data", "text", "gutenberg_sentence_per_line", book + ".txt")
    with open(path, encoding="utf-8") as f:
      sentences = [line.strip() for line in f if line.strip()]
    passages, current, target = [], [], rng.randint(300, 2000)
    for sentence in sentences:
      current.append(sentence)
      if sum(len(s.split()) for s in current) >= target:
        passages.append(" ".join(current))
        current, target = [], rng.randint(300, 2000)
    dev += [(p, book) for p in passages[::4][:dev_per_book]]
    train += [(p, book) for i, p in enumerate(passages) if i % 4][:train_per_book]
    print(f"{book}: {len(passages)} passages")
  rng.shuffle(train)
  _write(os.path.join(out, "train.tsv"), ["sentence", "label"], train)
  _write(os.path.join(out, "dev.tsv"), ["sentence", "label"], dev)
  words = [len(p.split()) for p, _ in train + dev]
  print(f"train {len(train)}, dev {len(dev)} passages; words min {min(words)}, "
        f"mean {sum(words) / len(words):.0f}, max {max(words)}")


def report(output_dir):
  """Single-label figures from eval_predictions.tsv: accuracy, macro F1, each label's recall."""
  with open(os.path.join(output_dir, "eval_predictions.tsv"), encoding="utf-8") as f:
    rows = list(csv.DictReader(f, delimiter="\t", quoting=csv.QUOTE_NONE))
  labels = sorted({r["label"] for r in rows})
  accuracy = sum(r["prediction"] == r["label"] for r in rows) / len(rows)
  f1s, recalls = [], {}
  for label in labels:
    tp = sum(r["prediction"] == label == r["label"] for r in rows)
    fp = sum(r["prediction"] == label != r["label"] for r in rows)
    fn = sum(r["label"] == label != r["prediction"] for r in rows)
    f1s.append(2 * tp / (2 * tp + fp + fn) if tp + fp + fn else 0.0)
    recalls[label] = tp / (tp + fn) if tp + fn else 0.0
  print(f"accuracy {accuracy:.4f}  macro F1 {sum(f1s) / len(f1s):.4f}  recall " + ", ".join(
      f"{k}: {v:.4f}" for k, v in recalls.items()))


if __name__ == "__main__":
  command, target = sys.argv[1], sys.argv[2]
  {"wnut": wnut, "sst2": sst2, "books": books, "report": report}[command](
      target, *map(int, sys.argv[3:]))
