r"""Reads a directory written by convert_checkpoint.py with sentence-transformers itself and
prints what it computes, as one JSON object: the check that our sentence-transformers layout
(--format=sentence_transformers) and our cross-encoder layout (--format=huggingface, one
output) load and compute in that library as in ours.

Run it with the python of an environment that has torch and sentence-transformers (never a
dependency of this project), e.g. a venv of its own:

  python -m venv /tmp/st-venv && /tmp/st-venv/bin/pip install torch sentence-transformers
  /tmp/st-venv/bin/python bench/st_layout_check.py --kind=bi DIR texts.txt
  /tmp/st-venv/bin/python bench/st_layout_check.py --kind=cross DIR pairs.tsv

texts.txt: one text a line (--kind=bi); pairs.tsv: text_a<TAB>text_b a line (--kind=cross).
Prints {"kind", "versions", "vectors": [[float, ...], ...]} (SentenceTransformer(DIR).encode)
or {"kind", "versions", "scores": [float, ...]} (CrossEncoder(DIR).predict). It imports
nothing of bert_keras; tests/test_sentence_transformers_layout.py runs it when ST_PYTHON names
such a python.
"""

import argparse
import json
import sys


def main(argv=None):
  parser = argparse.ArgumentParser(description=__doc__.split("\n")[0])
  parser.add_argument("directory")
  parser.add_argument("texts")
  parser.add_argument("--kind", choices=("bi", "cross"), default="bi")
  args = parser.parse_args(argv)
  import sentence_transformers
  import torch
  import transformers
  with open(args.texts, encoding="utf-8") as f:
    lines = [line.rstrip("\n") for line in f if line.strip()]
  out = {"kind": args.kind, "versions": {"sentence_transformers": sentence_transformers.__version__,
                                         "transformers": transformers.__version__,
                                         "torch": torch.__version__}}
  if args.kind == "bi":
    model = sentence_transformers.SentenceTransformer(args.directory, device="cpu")
    vectors = model.encode(lines, batch_size=8, convert_to_numpy=True)
    out["vectors"] = [[float(x) for x in row] for row in vectors]
    out["max_seq_length"] = model.max_seq_length
  else:
    model = sentence_transformers.CrossEncoder(args.directory, device="cpu")
    pairs = [tuple(line.split("\t", 1)) for line in lines]
    out["scores"] = [float(x) for x in model.predict(pairs, batch_size=8)]
  json.dump(out, sys.stdout)
  sys.stdout.write("\n")


if __name__ == "__main__":
  main()
