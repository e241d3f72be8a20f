r"""The official SQuAD evaluation (v1.1 and v2.0) in one drop-in script.

  python evaluate_squad.py data.json predictions.json [--out-file/-o eval.json] \
    [--na-prob-file/-n null_odds.json] [--na-prob-thresh/-t 1.0] \
    [--out-image-dir/-p DIR] [--verbose/-v]

The SQuAD version comes from the data file's "version" ("1.1" or "v2.0"; without one, a file
with unanswerable questions is v2.0; any other version is refused, as is a v1.1 question
without answers). It prints what the official evaluate-v1.1.py or
evaluate-v2.0.py prints for the same files:
  * v1.1: {"exact_match": .., "f1": ..}: per question the best score over its gold answers,
    averaged over every question of the file (a question without a prediction scores 0);
  * v2.0: exact, f1, total and HasAns_* / NoAns_* (over the questions that have a
    prediction); with a no-answer probability file (run_squad's null_odds.json), a question
    whose probability exceeds --na-prob-thresh counts as answered "no answer", and
    best_exact, best_exact_thresh, best_f1, best_f1_thresh give the best threshold over the
    file. With --out-image-dir, the official precision-recall curves and no-answer
    histograms (matplotlib) and the pr_*_ap figures.
Answers are compared after normalisation: lower case, punctuation removed, the articles
a/an/the removed, whitespace collapsed. F1 is over the bag of normalised tokens.

The functions are importable (run_squad.py evaluates its own predictions with them):
evaluate(dataset, predictions, na_probs=None, na_prob_thresh=1.0, version=None).
"""

try:  # outside the venv: a one-line hint, not a traceback
  from bert_keras.utils import errors  # (first: it imports absl)
except ImportError as e:
  raise SystemExit(f"error: {e} (activate .venv: source .venv/bin/activate, or pip install -e .)")

import argparse
import collections
import json
import numbers
import os
import re
import string
import sys

from bert_keras.utils import file_io

_PUNCTUATION = set(string.punctuation)
_ARTICLES = re.compile(r"\b(a|an|the)\b", re.UNICODE)


# ----------------------------------------------------------------------------
# Scores of one prediction against one gold answer

def normalize_answer(text):
  """Lower case, no punctuation, no articles (a, an, the), single spaces."""
  text = "".join(ch for ch in text.lower() if ch not in _PUNCTUATION)
  return " ".join(_ARTICLES.sub(" ", text).split())


def exact_match(prediction, gold):
  """1 if the normalised texts are equal, else 0."""
  return int(normalize_answer(prediction) == normalize_answer(gold))


def f1(prediction, gold, empty_matches_empty=True):
  """Harmonic mean of token precision and recall over the normalised token bags.

  Where either side has no token: v2.0 scores 1 if both are empty (a correct "no answer"),
  else 0; v1.1 (empty_matches_empty=False) scores 0.
  """
  predicted = normalize_answer(prediction).split()
  expected = normalize_answer(gold).split()
  if empty_matches_empty and (not predicted or not expected):
    return int(predicted == expected)
  shared = sum((collections.Counter(predicted) & collections.Counter(expected)).values())
  if shared == 0:
    return 0
  precision = shared / len(predicted)
  recall = shared / len(expected)
  return 2 * precision * recall / (precision + recall)


# ----------------------------------------------------------------------------
# A file's questions

def questions(dataset):
  """The "qas" entries of a SQuAD "data" list, in file order."""
  return [qa for article in dataset for paragraph in article["paragraphs"]
          for qa in paragraph["qas"]]


def version_of(dataset_json):
  """'1.1' or '2.0': the file's "version", else 2.0 when a question has no answer."""
  version = str(dataset_json.get("version", "")).lstrip("v")
  if version in ("1.1", "2.0"):
    return version
  unanswerable = any(not qa["answers"] for qa in questions(dataset_json["data"]))
  return "2.0" if unanswerable else "1.1"


def _gold_texts(qa, version):
  if version == "1.1":
    return [answer["text"] for answer in qa["answers"]]
  texts = [answer["text"] for answer in qa["answers"] if normalize_answer(answer["text"])]
  return texts or [""]  # unanswerable: the gold answer is the empty string


def raw_scores(dataset, predictions, version="2.0", on_missing=None):
  """({qid: best exact}, {qid: best F1}) over the questions that have a prediction;
  on_missing(qid) is called for each question without one."""
  exact, f1_scores = {}, {}
  for qa in questions(dataset):
    qid = qa["id"]
    if qid not in predictions:
      if on_missing:
        on_missing(qid)
      continue
    golds = _gold_texts(qa, version)
    if not golds:
      raise ValueError("question %s has no answers (\"answers\": []): a v1.1 question needs "
                       "one" % errors.error_line(qid, 100))
    prediction = predictions[qid]
    exact[qid] = max(exact_match(prediction, gold) for gold in golds)
    f1_scores[qid] = max(f1(prediction, gold, empty_matches_empty=version != "1.1")
                         for gold in golds)
  return exact, f1_scores


def _percent(scores, qids):
  return 100.0 * sum(scores[qid] for qid in qids) / len(qids)


def apply_no_answer_threshold(scores, na_probs, has_answer, threshold):
  """A question whose no-answer probability exceeds `threshold` is answered "no answer":
  it scores 1 if it has no gold answer, else 0."""
  return {qid: (float(not has_answer[qid]) if na_probs[qid] > threshold else score)
          for qid, score in scores.items()}


def best_threshold(predictions, scores, na_probs, has_answer):
  """(best score in %, its threshold): the threshold on the no-answer probability that
  maximises the total score; questions are answered "no answer" in increasing order of
  probability, the first best total wins, ties at equal probability are taken in turn."""
  score = best = sum(1 for qid in scores if not has_answer[qid])
  threshold = 0.0
  for qid in sorted(na_probs, key=lambda q: na_probs[q]):
    if qid not in scores:
      continue
    if has_answer[qid]:
      score += scores[qid]
    elif predictions[qid]:
      score -= 1
    if score > best:
      best, threshold = score, na_probs[qid]
  return 100.0 * best / len(scores), threshold


# ----------------------------------------------------------------------------
# The evaluation

def evaluate(dataset, predictions, na_probs=None, na_prob_thresh=1.0, version="2.0",
             on_missing=None):
  """The official figures (an ordered dict, the official scripts' keys and order).

  dataset: the file's "data" list; predictions: {qid: answer text}; na_probs: {qid: no-answer
  probability} or None (v2.0 only; None means 0.0 for every question). on_missing(qid) is
  called for each question without a prediction (v1.1 counts it as 0, v2.0 leaves it out).
  """
  if version == "1.1":
    exact, f1_scores = raw_scores(dataset, predictions, "1.1", on_missing)
    total = len(questions(dataset))
    return collections.OrderedDict([
        ("exact_match", 100.0 * sum(exact.values()) / total),
        ("f1", 100.0 * sum(f1_scores.values()) / total)])
  has_answer = {qa["id"]: bool(qa["answers"]) for qa in questions(dataset)}
  exact, f1_scores = raw_scores(dataset, predictions, "2.0", on_missing)
  probs = na_probs if na_probs is not None else {qid: 0.0 for qid in predictions}
  exact_t = apply_no_answer_threshold(exact, probs, has_answer, na_prob_thresh)
  f1_t = apply_no_answer_threshold(f1_scores, probs, has_answer, na_prob_thresh)
  result = _summary(exact_t, f1_t, list(exact_t))
  for prefix, wanted in (("HasAns", True), ("NoAns", False)):
    qids = [qid for qid in exact_t if has_answer[qid] == wanted]
    if qids:
      for key, value in _summary(exact_t, f1_t, qids).items():
        result["%s_%s" % (prefix, key)] = value
  if na_probs is not None:
    result["best_exact"], result["best_exact_thresh"] = best_threshold(
        predictions, exact, na_probs, has_answer)
    result["best_f1"], result["best_f1_thresh"] = best_threshold(
        predictions, f1_scores, na_probs, has_answer)
  return result


def _summary(exact, f1_scores, qids):
  return collections.OrderedDict([("exact", _percent(exact, qids)),
                                  ("f1", _percent(f1_scores, qids)), ("total", len(qids))])


# ----------------------------------------------------------------------------
# Precision-recall curves (--out-image-dir, matplotlib)

def precision_recall(scores, na_probs, has_answer, num_answerable):
  """(average precision in %, precisions, recalls), answering questions in increasing order
  of no-answer probability; a point is taken where the probability changes."""
  qids = sorted(na_probs, key=lambda q: na_probs[q])
  true_positives, average, precisions, recalls = 0.0, 0.0, [1.0], [0.0]
  for i, qid in enumerate(qids):
    if has_answer[qid]:
      true_positives += scores[qid]
    precision = true_positives / (i + 1)
    recall = true_positives / num_answerable
    if i == len(qids) - 1 or na_probs[qid] != na_probs[qids[i + 1]]:
      average += precision * (recall - recalls[-1])
      precisions.append(precision)
      recalls.append(recall)
  return 100.0 * average, precisions, recalls


def draw_precision_recall(result, exact, f1_scores, na_probs, has_answer, image_dir):
  """Writes pr_exact.png, pr_f1.png, pr_oracle.png, na_prob_hist_{hasAns,noAns}.png to
  image_dir and adds pr_exact_ap, pr_f1_ap, pr_oracle_ap to `result`."""
  import matplotlib
  matplotlib.use("Agg")
  import matplotlib.pyplot as plt
  os.makedirs(image_dir, exist_ok=True)
  num_answerable = sum(has_answer.values())
  if num_answerable == 0:
    return
  oracle = {qid: float(has) for qid, has in has_answer.items()}
  for name, scores, title in (
      ("exact", exact, "Precision-Recall curve for Exact Match score"),
      ("f1", f1_scores, "Precision-Recall curve for F1 score"),
      ("oracle", oracle, "Oracle Precision-Recall curve (binary task of HasAns vs. NoAns)")):
    average, precisions, recalls = precision_recall(scores, na_probs, has_answer,
                                                    num_answerable)
    plt.step(recalls, precisions, color="b", alpha=0.2, where="post")
    plt.fill_between(recalls, precisions, step="post", alpha=0.2, color="b")
    plt.xlabel("Recall")
    plt.ylabel("Precision")
    plt.xlim([0.0, 1.05])
    plt.ylim([0.0, 1.05])
    plt.title(title)
    plt.savefig(os.path.join(image_dir, "pr_%s.png" % name))
    plt.clf()
    result["pr_%s_ap" % name] = average
  for name, wanted in (("hasAns", True), ("noAns", False)):
    values = [na_probs[qid] for qid, has in has_answer.items() if has == wanted]
    if values:
      plt.hist(values, weights=[1.0 / len(values)] * len(values), bins=20, range=(0.0, 1.0))
      plt.xlabel("Model probability of no-answer")
      plt.ylabel("Proportion of dataset")
      plt.title("Histogram of no-answer probability: %s" % name)
      plt.savefig(os.path.join(image_dir, "na_prob_hist_%s.png" % name))
      plt.clf()


# ----------------------------------------------------------------------------
# Command line

def _read_json(path, what):
  try:
    with open(path, encoding="utf-8") as f:
      return json.load(f)
  except OSError as e:
    raise SystemExit("error: %s %s: %s" % (what, path, e.strerror or e))
  except ValueError as e:
    raise SystemExit("error: %s %s is not valid JSON: %s" % (what, path, e))


def check_dataset(dataset, path):
  """A ValueError naming the file and the entry (data[i].paragraphs[j].qas[k]) unless
  `dataset` (a "data" list) has the shape the evaluation reads: articles with "paragraphs",
  paragraphs with "qas", questions with a string "id" and "answers", a list of {"text":
  string}; and at least one question."""
  count = 0
  for i, article in enumerate(dataset):
    where = "data[%d]" % i
    if not isinstance(article, dict) or not isinstance(article.get("paragraphs"), list):
      raise ValueError("data file %s: %s has no \"paragraphs\" list" % (path, where))
    for j, paragraph in enumerate(article["paragraphs"]):
      at = "%s.paragraphs[%d]" % (where, j)
      if not isinstance(paragraph, dict) or not isinstance(paragraph.get("qas"), list):
        raise ValueError("data file %s: %s has no \"qas\" list" % (path, at))
      for k, qa in enumerate(paragraph["qas"]):
        here = "%s.qas[%d]" % (at, k)
        if not isinstance(qa, dict) or not isinstance(qa.get("id"), str):
          raise ValueError("data file %s: %s has no string \"id\"" % (path, here))
        answers = qa.get("answers")
        if not isinstance(answers, list) or not all(
            isinstance(a, dict) and isinstance(a.get("text"), str) for a in answers):
          raise ValueError("data file %s: question %s (%s) has no \"answers\" list of "
                           "{\"text\": string}" % (path, errors.error_line(qa["id"], 100), here))
        count += 1
  if not count:
    raise ValueError("data file %s has no questions" % path)


def check_version(dataset_json, path):
  """A ValueError naming the file unless its "version" (if any) is SQuAD 1.1 or 2.0, or
  naming the question when a v1.1 file has a question without answers."""
  if "version" in dataset_json:
    given = dataset_json["version"]
    if str(given).lstrip("v") not in ("1.1", "2.0"):
      raise ValueError("data file %s: \"version\" %s is not a SQuAD version this evaluation "
                       "scores (1.1 or 2.0)" % (path, errors.error_line(json.dumps(given), 50)))
  if version_of(dataset_json) == "1.1":
    for qa in questions(dataset_json["data"]):
      if not qa["answers"]:
        raise ValueError("data file %s: question %s has no answers (\"answers\": []): a "
                         "v1.1 question needs one (a v2.0 file may have unanswerable ones)"
                         % (path, errors.error_line(qa["id"], 100)))


def check_predictions(predictions, path):
  """A ValueError naming the file and question unless `predictions` is {id: answer string}."""
  if not isinstance(predictions, dict):
    raise ValueError("predictions file %s is not a JSON object {id: answer}" % path)
  for qid, answer in predictions.items():
    if not isinstance(answer, str):
      raise ValueError("predictions file %s: the prediction of question %s is %s, not a "
                       "string" % (path, errors.error_line(qid, 100), type(answer).__name__))


def check_na_probs(na_probs, predictions, path):
  """A ValueError naming the file and question unless `na_probs` gives a number for every
  predicted question."""
  if not isinstance(na_probs, dict):
    raise ValueError("no-answer file %s is not a JSON object {id: probability}" % path)
  for qid in predictions:
    if qid not in na_probs:
      raise ValueError("no-answer file %s lacks question %s" % (path, errors.error_line(qid, 100)))
    value = na_probs[qid]
    if not isinstance(value, numbers.Real) or isinstance(value, bool) or value != value:
      raise ValueError("no-answer file %s: the probability of question %s is %s, not a "
                       "number" % (path, errors.error_line(qid, 100),
                                   errors.error_line(json.dumps(value), 100)))


def parse_args(argv=None):
  parser = argparse.ArgumentParser(
      description="Official evaluation for SQuAD v1.1 and v2.0 (the version comes from the "
                  "data file).")
  parser.add_argument("data_file", metavar="data.json", help="Input data JSON file.")
  parser.add_argument("pred_file", metavar="pred.json", help="Model predictions.")
  parser.add_argument("--out-file", "-o", metavar="eval.json",
                      help="Write accuracy metrics to file (default is stdout).")
  parser.add_argument("--na-prob-file", "-n", metavar="na_prob.json",
                      help="Model estimates of probability of no answer (v2.0).")
  parser.add_argument("--na-prob-thresh", "-t", type=float, default=1.0,
                      help='Predict "" if no-answer probability exceeds this (default = 1.0).')
  parser.add_argument("--out-image-dir", "-p", metavar="out_images", default=None,
                      help="Save precision-recall curves to directory (needs matplotlib).")
  parser.add_argument("--verbose", "-v", action="store_true")
  return parser.parse_args(argv)


def main(argv=None):
  """The command line; a bad file or flag is one line `error: ...` naming it (exit status 1;
  utils.errors.one_line_errors), never a traceback."""
  args = parse_args(argv)
  with errors.one_line_errors():
    return _main(args)


def _main(args):
  dataset_json = _read_json(args.data_file, "data file")
  if not isinstance(dataset_json, dict) or not isinstance(dataset_json.get("data"), list):
    raise SystemExit("error: data file %s has no \"data\" list" % args.data_file)
  check_dataset(dataset_json["data"], args.data_file)
  check_version(dataset_json, args.data_file)
  predictions = _read_json(args.pred_file, "predictions file")
  check_predictions(predictions, args.pred_file)
  version = version_of(dataset_json)
  na_probs = _read_json(args.na_prob_file, "no-answer file") if args.na_prob_file else None
  if args.out_image_dir:
    try:
      import matplotlib  # noqa: F401
    except ImportError:
      raise SystemExit("error: --out-image-dir needs matplotlib (pip install matplotlib)")
  if na_probs is not None:
    check_na_probs(na_probs, predictions, args.na_prob_file)
  answered = {qa["id"] for qa in questions(dataset_json["data"])} & set(predictions)
  if version == "2.0" and not answered:
    raise ValueError("predictions file %s answers none of the questions of data file %s"
                     % (args.pred_file, args.data_file))
  if version == "1.1":  # the official scripts' messages and streams
    on_missing = lambda qid: print("Unanswered question %s will receive score 0." % qid,
                                   file=sys.stderr)
  else:
    on_missing = lambda qid: print("Missing prediction for %s" % qid)
  result = evaluate(dataset_json["data"], predictions, na_probs, args.na_prob_thresh,
                    version, on_missing)
  if version == "2.0" and na_probs is not None and args.out_image_dir:
    has_answer = {qa["id"]: bool(qa["answers"]) for qa in questions(dataset_json["data"])}
    exact, f1_scores = raw_scores(dataset_json["data"], predictions, "2.0")
    draw_precision_recall(result, exact, f1_scores, na_probs, has_answer, args.out_image_dir)
  if args.out_file:
    file_io.write_text_atomic(args.out_file, json.dumps(result))
  elif version == "1.1":
    print(json.dumps(result))
  else:
    print(json.dumps(result, indent=2))
  return result


if __name__ == "__main__":
  main()
