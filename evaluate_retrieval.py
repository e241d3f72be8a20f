r"""Scores a retrieval run against qrels, as trec_eval does, under BEIR's measure names.

  python evaluate_retrieval.py --qrels=qrels/test.tsv --run=run.trec [--output_json=F] \
      [--k_values=1,3,5,10,100]

--qrels is a TREC qrels file (`qid iteration docid relevance`) or a BEIR qrels TSV (its header
`query-id corpus-id score`); --run a TREC run (`qid Q0 docid rank score tag`). It prints a
table of NDCG@k, MAP@k, Recall@k, P@k, MRR@k and Accuracy@k, averaged over the qrels' queries
with a relevant document (one the run lacks scores 0), and --output_json writes the same
figures as one JSON object {"NDCG@10": ..}. The conventions are trec_eval's (ties, cut-offs,
graded gains): tasks/retrieval/metrics.py, which run_* scripts call too. A malformed line is a
one-line error naming the file and line.
"""

try:  # outside the venv: a one-line hint, not a traceback
  from bert_keras.utils import errors  # (first: it imports absl)
except ImportError as e:
  raise SystemExit(f"error: {e} (activate .venv: source .venv/bin/activate, or pip install -e .)")

import json
import types

from absl import app
from absl import flags
from absl import logging

from bert_keras.tasks.retrieval import metrics as retrieval_metrics
from bert_keras.utils import file_io

DEFAULTS = dict(qrels=None, run=None, output_json=None,
                k_values=[str(k) for k in retrieval_metrics.DEFAULT_K_VALUES])


def options(**overrides):
  """A namespace of all run() options: DEFAULTS updated with `overrides`."""
  unknown = set(overrides) - set(DEFAULTS)
  if unknown:
    raise TypeError(f"unknown options {sorted(unknown)}")
  return types.SimpleNamespace(**{**DEFAULTS, **overrides})


def define_flags():
  flags.DEFINE_string("qrels", None, "The relevance judgments: a TREC qrels file or a BEIR "
                      "qrels TSV (header query-id, corpus-id, score).")
  flags.DEFINE_string("run", None, "The ranking to score: a TREC run file "
                      "(qid Q0 docid rank score tag).")
  flags.DEFINE_string("output_json", None, "Also write the measures here as a JSON object.")
  flags.DEFINE_list("k_values", DEFAULTS["k_values"], "The cut-offs k of the measures.")
  flags.mark_flag_as_required("qrels")
  flags.mark_flag_as_required("run")


def parse_k_values(values):
  """--k_values (a list of strings or integers) as a tuple of integers; a ValueError naming the
  flag when one is not a positive integer."""
  try:
    k_values = tuple(int(k) for k in values)
  except (TypeError, ValueError):
    k_values = ()
  if not k_values or min(k_values) < 1:
    raise ValueError(f"--k_values={','.join(str(k) for k in values)}: positive integers, "
                     "comma-separated")
  return k_values


def run(options):
  """Reads --qrels and --run, prints the table and writes --output_json; returns the measures
  {name: value}."""
  k_values = parse_k_values(options.k_values)
  qrels = retrieval_metrics.read_qrels(options.qrels)
  scored = set(retrieval_metrics.scored_queries(qrels))
  if not scored:
    raise ValueError(f"--qrels {options.qrels}: no query has a relevant document "
                     "(relevance > 0)")
  # (only the scored queries' top max(k) documents are kept: memory bounded by what is scored)
  ignored = set()
  ranking = retrieval_metrics.read_run(options.run, queries=scored, top_k=max(k_values),
                                       skipped=ignored)
  measures = retrieval_metrics.evaluate(qrels, ranking, k_values)
  counts = dict(retrieval_metrics.query_counts(qrels, ranking), ignored=len(ignored))
  print(f"{counts['scored']:,} queries scored ({counts['not_in_run']:,} not in the run, "
        f"scored 0); {counts['ignored']:,} queries of the run ignored (no relevant document "
        "in the qrels)")
  print(retrieval_metrics.format_table(measures, k_values), end="")
  if options.output_json:
    file_io.write_text_atomic(options.output_json, json.dumps(measures, indent=2) + "\n")
    logging.info("Wrote %s", options.output_json)
  return measures


main = errors.script_main(run)

if __name__ == "__main__":
  define_flags()
  app.run(main, flags_parser=errors.parse_flags)
