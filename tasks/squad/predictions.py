"""SQuAD post-processing, as the original run_squad's: the windows' start/end logits -> the
answers, n-best lists and null odds (write_predictions, or PredictionWriter one question at a
time); each span projected onto the original text by tokenization.get_final_text.

run_squad.py re-exports RawResult, write_predictions and PredictionWriter (the original's names),
and tokenization.get_final_text.
"""

import collections
import json
import math

from absl import logging
import tensorflow as tf

from bert_keras import tokenization
from bert_keras.utils import file_io

RawResult = collections.namedtuple("RawResult", ["unique_id", "start_logits", "end_logits"])


_Prelim = collections.namedtuple(
    "PrelimPrediction", ["feature_index", "start_index", "end_index", "start_logit",
                         "end_logit"])
_Nbest = collections.namedtuple("NbestPrediction", ["text", "start_logit", "end_logit"])


def _get_best_indexes(logits, n_best_size):
  """Indices of the n_best_size largest logits, largest first (lower index first on ties),
  over all positions."""
  return sorted(range(len(logits)), key=lambda i: logits[i], reverse=True)[:n_best_size]


def _compute_softmax(scores):
  """Softmax of a list of Python floats (max subtracted, summed left to right)."""
  if not scores:
    return []
  top = max(scores)
  exps = [math.exp(score - top) for score in scores]
  total = 0.0
  for x in exps:
    total += x
  return [x / total for x in exps]


def _prelim_predictions(features, result_of, n_best_size, max_answer_length,
                        version_2_with_negative):
  """Candidate spans of one example's windows, best first, plus (v2) the null candidate of
  the window with the smallest null score start_logits[0] + end_logits[0].

  Returns (prelims sorted by start_logit + end_logit descending, score_null, null_start_logit,
  null_end_logit)."""
  prelims = []
  score_null = 1000000  # the original's "large and positive" start
  null_feature_index = 0
  null_start_logit = null_end_logit = 0
  for feature_index, feature in enumerate(features):
    result = result_of[feature.unique_id]
    if version_2_with_negative:
      feature_null_score = result.start_logits[0] + result.end_logits[0]
      if feature_null_score < score_null:
        score_null = feature_null_score
        null_feature_index = feature_index
        null_start_logit, null_end_logit = result.start_logits[0], result.end_logits[0]
    num_tokens = len(feature.tokens)
    for start in _get_best_indexes(result.start_logits, n_best_size):
      # Only the start's max-context flag is checked, as the original.
      if (start >= num_tokens or start not in feature.token_to_orig_map
          or not feature.token_is_max_context.get(start, False)):
        continue
      for end in _get_best_indexes(result.end_logits, n_best_size):
        if (end >= num_tokens or end not in feature.token_to_orig_map or end < start
            or end - start + 1 > max_answer_length):
          continue
        prelims.append(_Prelim(feature_index, start, end, result.start_logits[start],
                               result.end_logits[end]))
  if version_2_with_negative:
    prelims.append(_Prelim(null_feature_index, 0, 0, null_start_logit, null_end_logit))
  prelims = sorted(prelims, key=lambda p: p.start_logit + p.end_logit, reverse=True)
  return prelims, score_null, null_start_logit, null_end_logit


def _span_texts(example, feature, start, end):
  """(normalised WordPiece text, original text) of positions start..end of a window."""
  tok_text = " ".join(feature.tokens[start:end + 1])
  tok_text = tok_text.replace(" ##", "").replace("##", "")
  tok_text = " ".join(tok_text.strip().split())
  first, last = feature.token_to_orig_map[start], feature.token_to_orig_map[end]
  return tok_text, " ".join(example.doc_tokens[first:last + 1])


def _nbest_of(example, features, prelims, n_best_size, do_lower_case, version_2_with_negative,
              null_start_logit, null_end_logit, verbose_logging):
  """The n-best list of _Nbest (distinct texts; v2: "" included, possibly as entry
  n_best_size + 1)."""
  seen = set()
  nbest = []
  for p in prelims:
    if len(nbest) >= n_best_size:
      break
    if p.start_index > 0:
      tok_text, orig_text = _span_texts(example, features[p.feature_index], p.start_index,
                                        p.end_index)
      text = tokenization.get_final_text(tok_text, orig_text, do_lower_case, verbose_logging)
      if text in seen:
        continue
    else:  # the null prediction
      text = ""
    seen.add(text)
    nbest.append(_Nbest(text, p.start_logit, p.end_logit))
  if version_2_with_negative and "" not in seen:
    nbest.append(_Nbest("", null_start_logit, null_end_logit))
  if not nbest:  # no valid span at all (v1)
    nbest.append(_Nbest("empty", 0.0, 0.0))
  if version_2_with_negative and not any(entry.text for entry in nbest):
    # No valid non-null span (the original crashes here): a nonce non-null entry, as v1's.
    logging.warning("Question %s: no valid non-null answer span; adding \"empty\"",
                    example.qas_id)
    nbest.insert(0, _Nbest("empty", 0.0, 0.0))
  return nbest


def write_predictions(all_examples, all_features, all_results, n_best_size, max_answer_length,
                      do_lower_case, output_prediction_file, output_nbest_file,
                      output_null_log_odds_file, version_2_with_negative=False,
                      null_score_diff_threshold=0.0, verbose_logging=False):
  """Writes predictions.json ({qas_id: answer}), nbest_predictions.json ({qas_id: [{"text",
  "probability", "start_logit", "end_logit"}, ...]}) and, with version_2_with_negative,
  null_odds.json ({qas_id: null score - best non-null score}); json indent 4 plus "\\n",
  example order; each via a temporary name. Returns the three dicts (the third empty in v1).
  PredictionWriter does the same one example at a time.

  v2: the answer is "" when the null score minus the best non-null score exceeds
  null_score_diff_threshold. One deliberate change: where the original crashes (v2, no
  valid non-null span), the n-best starts with ("empty", 0.0, 0.0) as in v1's no-span case.
  """
  writer = PredictionWriter(all_examples, n_best_size, max_answer_length, do_lower_case,
                            output_prediction_file, output_nbest_file,
                            output_null_log_odds_file, version_2_with_negative,
                            null_score_diff_threshold, verbose_logging, keep_nbest=True)
  result_of = {result.unique_id: result for result in all_results}
  try:
    for feature in sorted(all_features, key=lambda f: f.example_index):
      writer.add(feature, result_of[feature.unique_id])
    return writer.close()
  finally:
    writer.abort()


def _json_member(key, value):
  """'    "key": value' as json.dumps({key: value}, indent=4) writes it inside the braces."""
  return json.dumps({key: value}, indent=4)[2:-2]


class PredictionWriter(object):
  """write_predictions as the windows' results come: add(feature, result) for every window
  in example order, then close() writes the files and returns (predictions, nbest or None,
  null_odds) as write_predictions; abort() on failure removes the temporary.

  Holds one example's windows at a time, the answers and (v2) the null odds and the best
  non-null answers (best_non_null: the answers of a threshold of +inf); the n-best lists go
  to nbest_predictions.json's temporary as they are made (kept too with keep_nbest).
  """

  def __init__(self, examples, n_best_size, max_answer_length, do_lower_case,
               output_prediction_file, output_nbest_file, output_null_log_odds_file,
               version_2_with_negative=False, null_score_diff_threshold=0.0,
               verbose_logging=False, keep_nbest=False):
    logging.info("Writing predictions to: %s", output_prediction_file)
    logging.info("Writing nbest to: %s", output_nbest_file)
    self._examples = examples
    self._settings = (n_best_size, max_answer_length, do_lower_case, version_2_with_negative,
                      null_score_diff_threshold, verbose_logging)
    self._paths = (output_prediction_file, output_nbest_file, output_null_log_odds_file)
    self.predictions = collections.OrderedDict()
    self.null_odds = collections.OrderedDict()
    self.best_non_null = collections.OrderedDict()
    self.nbest = collections.OrderedDict() if keep_nbest else None
    self._nbest_tmp = file_io.temp_name(output_nbest_file)
    self._nbest_out = tf.io.gfile.GFile(self._nbest_tmp, "w")
    self._next = 0  # the first example not written
    self._windows = []  # (feature, result) of example self._next

  def add(self, feature, result):
    if feature.example_index < self._next:
      raise ValueError(f"window {feature.unique_id} of example {feature.example_index} "
                       f"comes after example {self._next}: windows must come in order")
    while self._next < feature.example_index:
      self._finish_example()
    self._windows.append((feature, result))

  def _finish_example(self):
    (n_best_size, max_answer_length, do_lower_case, version_2_with_negative, threshold,
     verbose_logging) = self._settings
    example = self._examples[self._next]
    features = [feature for feature, _ in self._windows]
    result_of = {feature.unique_id: result for feature, result in self._windows}
    self._windows = []
    self._next += 1
    prelims, score_null, null_start_logit, null_end_logit = _prelim_predictions(
        features, result_of, n_best_size, max_answer_length, version_2_with_negative)
    nbest = _nbest_of(example, features, prelims, n_best_size, do_lower_case,
                      version_2_with_negative, null_start_logit, null_end_logit,
                      verbose_logging)
    probs = _compute_softmax([entry.start_logit + entry.end_logit for entry in nbest])
    nbest_json = [collections.OrderedDict([("text", entry.text), ("probability", prob),
                                           ("start_logit", entry.start_logit),
                                           ("end_logit", entry.end_logit)])
                  for entry, prob in zip(nbest, probs)]
    if example.qas_id in self.predictions:
      raise ValueError(f"question id {example.qas_id!r} appears twice")
    self._nbest_out.write(("{\n" if self._next == 1 else ",\n") +
                          _json_member(example.qas_id, nbest_json))
    if self.nbest is not None:
      self.nbest[example.qas_id] = nbest_json
    if not version_2_with_negative:
      self.predictions[example.qas_id] = nbest[0].text
    else:
      best_non_null = next(entry for entry in nbest if entry.text)
      score_diff = score_null - best_non_null.start_logit - best_non_null.end_logit
      self.null_odds[example.qas_id] = score_diff
      self.best_non_null[example.qas_id] = best_non_null.text
      self.predictions[example.qas_id] = "" if score_diff > threshold else best_non_null.text

  def close(self):
    while self._next < len(self._examples):
      self._finish_example()
    self._nbest_out.write("\n}\n" if self._examples else "{}\n")
    self._nbest_out.close()
    prediction_file, nbest_file, null_odds_file = self._paths
    file_io.write_text_atomic(prediction_file, json.dumps(self.predictions, indent=4) + "\n")
    file_io.rename(self._nbest_tmp, nbest_file)
    if self._settings[3]:
      file_io.write_text_atomic(null_odds_file, json.dumps(self.null_odds, indent=4) + "\n")
    return self.predictions, self.nbest, self.null_odds

  def abort(self):
    """Closes and removes the n-best temporary if still there (after close(): nothing)."""
    self._nbest_out.close()
    file_io.remove_quietly(self._nbest_tmp)
