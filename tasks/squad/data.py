"""SQuAD's data: the JSON read into SquadExamples (the original run_squad's reading, with its
whitespace rule) and the examples turned into the model's windows (InputFeatures: the
question, then doc_stride windows of the paragraph's word pieces, tasks/windows.py).

run_squad.py (training, prediction), predict.py's SQuAD predictor (prediction/predictors.py) and
the benchmarks read through this module; run_squad re-exports its names (read_squad_examples,
convert_examples_to_features, SquadExample, InputFeatures, ...) under the original's module.

Read top to bottom: SquadExample, split_context (SQuAD's words), read_squad_examples (and
its --tfds_name twin); InputFeatures, the paragraph's pieces, the answer's pieces,
convert_examples_to_features.
"""

import json
import os
import tempfile

from absl import logging
import tensorflow as tf

from bert_keras import preprocessing
from bert_keras import tokenization
from bert_keras.tasks import tfds_input
from bert_keras.tasks import windows
from bert_keras.utils import text_lines


# ----------------------------------------------------------------------------
# Reading the SQuAD JSON.

class SquadExample(object):
  """One question on one paragraph. doc_tokens: the paragraph split on SQuAD whitespace;
  start_position / end_position: word indices of the answer (training; -1 for an impossible
  question, None when predicting)."""

  def __init__(self, qas_id, question_text, doc_tokens, orig_answer_text=None,
               start_position=None, end_position=None, is_impossible=False):
    self.qas_id = qas_id
    self.question_text = question_text
    self.doc_tokens = doc_tokens
    self.orig_answer_text = orig_answer_text
    self.start_position = start_position
    self.end_position = end_position
    self.is_impossible = is_impossible

  def __str__(self):
    return self.__repr__()

  def __repr__(self):
    # As the original: the positions are shown only when start_position is truthy (not 0).
    text = "qas_id: %s, question_text: %s, doc_tokens: [%s]" % (
        tokenization.printable_text(self.qas_id),
        tokenization.printable_text(self.question_text), " ".join(self.doc_tokens))
    if self.start_position:
      text += ", start_position: %d, end_position: %d, is_impossible: %r" % (
          self.start_position, self.end_position, self.is_impossible)
    return text


# SQuAD's own whitespace: space, tab, CR, LF and U+202F only (not U+00A0 nor the tokenizer's
# Unicode Zs class).
SQUAD_WHITESPACE = frozenset(" \t\r\n\u202f")


def split_context(text):
  """-> (doc_tokens, char_to_word_offset): the maximal runs of non-whitespace characters,
  and for each character of `text` the index of its word (of the word before it for
  whitespace, -1 before the first word)."""
  doc_tokens = []
  char_to_word_offset = []
  in_word = False
  for c in text:
    if c in SQUAD_WHITESPACE:
      in_word = False
    elif in_word:
      doc_tokens[-1] += c
    else:
      doc_tokens.append(c)
      in_word = True
    char_to_word_offset.append(len(doc_tokens) - 1)
  return doc_tokens, char_to_word_offset


def load_squad_json(input_file):
  """The "data" list of a SQuAD JSON file; ValueError naming the file when unreadable."""
  try:
    with tf.io.gfile.GFile(input_file, "r") as reader:
      text = reader.read()
  except tf.errors.OpError as e:
    raise ValueError(f"{input_file}: cannot read ({e.message})") from None
  except UnicodeDecodeError:
    text_lines.check_utf8(input_file)
    raise
  try:
    root = json.loads(text)
  except json.JSONDecodeError as e:
    raise ValueError(f"{input_file}: not valid JSON at line {e.lineno}, column {e.colno}: "
                     f"{e.msg}") from None
  except ValueError as e:
    raise ValueError(f"{input_file}: not valid JSON ({e})") from None
  if not isinstance(root, dict) or not isinstance(root.get("data"), list):
    raise ValueError(f"{input_file}: not a SQuAD file (no \"data\" list at the top level)")
  return root["data"]


def read_squad_examples(input_file, is_training, version_2_with_negative=False):
  """A SQuAD JSON file -> list of SquadExample, in file order.

  Training reads the answers: exactly one per question unless is_impossible (read only
  with version_2_with_negative); a question whose answer text cannot be found in its words
  is skipped with a warning, as the original. Predicting never reads the answers.
  Malformed input raises a one-line ValueError naming the file (and the question).
  """
  examples = []
  for i, entry in enumerate(load_squad_json(input_file)):
    where = f"{input_file}: data[{i}]"
    try:
      paragraphs = entry["paragraphs"]
      for j, paragraph in enumerate(paragraphs):
        where = f"{input_file}: data[{i}].paragraphs[{j}]"
        doc_tokens, char_to_word_offset = split_context(paragraph["context"])
        for k, qa in enumerate(paragraph["qas"]):
          where = f"{input_file}: data[{i}].paragraphs[{j}].qas[{k}]"
          if isinstance(qa, dict) and "id" not in qa:
            raise ValueError(f"{where}: a question without \"id\"")
          if isinstance(qa, dict):
            where = f"{input_file}: question {qa['id']!r}"
          example = _read_question(qa, doc_tokens, char_to_word_offset, is_training,
                                   version_2_with_negative, where)
          if example is not None:
            examples.append(example)
    except (KeyError, TypeError, IndexError) as e:
      detail = f"no key {e}" if isinstance(e, KeyError) else str(e)
      raise ValueError(f"{where}: not in the SQuAD format ({detail})") from None
  return examples


def read_tfds_squad_examples(tfds_name, is_training, version_2_with_negative=False, data_dir=None):
  """read_squad_examples over a tfds SQuAD split (train when is_training, else
  validation): the same SquadExamples as the JSON reader gives for the same questions, in
  squad_data's order. A malformed example is a ValueError naming the tfds name and split."""
  name = tfds_input.squad_name(tfds_name, version_2_with_negative)
  split = tfds_input.SQUAD_SPLITS[bool(is_training)]
  data = tfds_input.squad_data(name, split, data_dir)
  with tempfile.TemporaryDirectory() as tmp:
    path = os.path.join(tmp, "squad.json")
    with open(path, "w", encoding="utf-8") as f:
      json.dump({"version": name, "data": data}, f)
    try:
      return read_squad_examples(path, is_training, version_2_with_negative)
    except ValueError as e:
      raise ValueError(str(e).replace(path, f"{name} ({split})")) from None


def tfds_squad_reader(tfds_name, data_dir=None):
  """A function like _read(flag, path, is_training, version_2_with_negative) that
  reads the tfds split instead of the file (flag and path are ignored)."""

  def read(flag, path, is_training, version_2_with_negative):
    del flag, path
    return read_tfds_squad_examples(tfds_name, is_training, version_2_with_negative, data_dir)

  return read


def _read_question(qa, doc_tokens, char_to_word_offset, is_training, version_2_with_negative,
                   where):
  """One entry of "qas" -> SquadExample, or None when its answer is not found (training)."""
  start_position = end_position = orig_answer_text = None
  is_impossible = False
  if is_training:
    if version_2_with_negative:
      is_impossible = qa["is_impossible"]
    if len(qa["answers"]) != 1 and not is_impossible:
      keep = ("Keep only one of its answers" if qa["answers"] else
              "Give it one" + (" or mark it is_impossible" if version_2_with_negative else ""))
      raise ValueError(f"{where} has {len(qa['answers'])} answers. For training, each "
                       f"question should have exactly 1 answer. {keep}.")
    if is_impossible:
      start_position = end_position = -1
      orig_answer_text = ""
    else:
      answer = qa["answers"][0]
      orig_answer_text = answer["text"]
      answer_offset = answer["answer_start"]
      try:
        start_position = char_to_word_offset[answer_offset]
        end_position = char_to_word_offset[answer_offset + len(orig_answer_text) - 1]
      except IndexError:
        raise ValueError(f"{where}: answer_start {answer_offset} and the answer's "
                         f"{len(orig_answer_text)} characters are beyond the context "
                         f"({len(char_to_word_offset)} characters)") from None
      if start_position < 0 or end_position < start_position:
        # The answer starts in the whitespace before the context's first word (or the
        # context has no words): no word holds it (the original read the last word).
        logging.warning("%s: its answer (answer_start %d) is not on a word of the context; "
                        "skipped", where, answer_offset)
        return None
      # Only answers whose text can be recovered from the words are kept (Unicode oddities
      # make a few unrecoverable): not every training question becomes an example.
      actual_text = " ".join(doc_tokens[start_position:end_position + 1])
      cleaned_answer_text = " ".join(tokenization.whitespace_tokenize(orig_answer_text))
      if actual_text.find(cleaned_answer_text) == -1:
        logging.warning("Could not find answer: '%s' vs. '%s'", actual_text,
                        cleaned_answer_text)
        return None
  return SquadExample(qas_id=qa["id"], question_text=qa["question"], doc_tokens=doc_tokens,
                      orig_answer_text=orig_answer_text, start_position=start_position,
                      end_position=end_position, is_impossible=is_impossible)


# ----------------------------------------------------------------------------
# Features.

class InputFeatures(object):
  """One window of one example: tokens [CLS] query [SEP] doc-window [SEP]; input_ids,
  input_mask, segment_ids (lists of max_seq_length ints); token_to_orig_map {position: word
  index} and token_is_max_context {position: bool} over the window's doc positions;
  start_position / end_position (training: 0 when the answer is not in the window or the
  question is impossible)."""

  def __init__(self, unique_id, example_index, doc_span_index, tokens, token_to_orig_map,
               token_is_max_context, input_ids, input_mask, segment_ids, start_position=None,
               end_position=None, is_impossible=None):
    self.unique_id = unique_id
    self.example_index = example_index
    self.doc_span_index = doc_span_index
    self.tokens = tokens
    self.token_to_orig_map = token_to_orig_map
    self.token_is_max_context = token_is_max_context
    self.input_ids = input_ids
    self.input_mask = input_mask
    self.segment_ids = segment_ids
    self.start_position = start_position
    self.end_position = end_position
    self.is_impossible = is_impossible


FIRST_UNIQUE_ID = 1000000000


def _tokenize_words(tokenizer, words):
  """The word pieces of each word (one list per word); one batch call when the tokenizer
  has tokenize_batch (ours), else word by word."""
  if hasattr(tokenizer, "tokenize_batch"):
    return tokenizer.tokenize_batch(list(words))
  return [tokenizer.tokenize(word) for word in words]


def _doc_pieces(tokenizer, doc_tokens):
  """-> (all_doc_tokens, tok_to_orig_index, orig_to_tok_index): the word pieces of the
  paragraph, the word of each piece, and the first piece of each word."""
  all_doc_tokens, tok_to_orig_index, orig_to_tok_index = [], [], []
  for i, pieces in enumerate(_tokenize_words(tokenizer, doc_tokens)):
    orig_to_tok_index.append(len(all_doc_tokens))
    all_doc_tokens.extend(pieces)
    tok_to_orig_index.extend([i] * len(pieces))
  return all_doc_tokens, tok_to_orig_index, orig_to_tok_index


# The windows over a paragraph's pieces (tasks/windows.py), under the original's names.
DocSpan = windows.DocSpan
doc_spans_of = windows.doc_spans


def _improve_answer_span(doc_tokens, input_start, input_end, tokenizer, orig_answer_text):
  """The first sub-span (start ascending, then end descending) of pieces
  [input_start, input_end] whose space-joined pieces equal the tokenized answer text, e.g.
  "1895" inside the word "(1895-1943)."; (input_start, input_end) when there is none."""
  tok_answer_text = " ".join(tokenizer.tokenize(orig_answer_text))
  for new_start in range(input_start, input_end + 1):
    for new_end in range(input_end, new_start - 1, -1):
      if " ".join(doc_tokens[new_start:new_end + 1]) == tok_answer_text:
        return new_start, new_end
  return input_start, input_end


def _answer_pieces(example, tokenizer, all_doc_tokens, orig_to_tok_index):
  """Training: the answer as (first piece, last piece) of the paragraph; (-1, -1) when
  impossible."""
  if example.is_impossible:
    return -1, -1
  start = orig_to_tok_index[example.start_position]
  if example.end_position < len(example.doc_tokens) - 1:
    end = orig_to_tok_index[example.end_position + 1] - 1
  else:
    end = len(all_doc_tokens) - 1
  return _improve_answer_span(all_doc_tokens, start, end, tokenizer,
                              example.orig_answer_text)


# The first 20 examples' windows are logged in full, as the original, but at most this many
# windows of each (a 200k-word context has thousands of windows: 21 MB of log).
MAX_LOGGED_WINDOWS = 64


def convert_examples_to_features(examples, tokenizer, max_seq_length, doc_stride,
                                 max_query_length, is_training, output_fn):
  """Calls output_fn(InputFeatures) for every window of every example, in order; unique
  ids count from 1000000000 across all examples. The first 20 examples' windows are
  logged as the original does, up to MAX_LOGGED_WINDOWS windows each (then one line says
  how many more there are)."""
  max_tokens_for_doc_base = max_seq_length - 3   # [CLS], [SEP], [SEP]
  if doc_stride < 1:
    raise ValueError(f"doc_stride={doc_stride}: must be >= 1")
  unique_id = FIRST_UNIQUE_ID
  last_doc, last_pieces = None, None  # consecutive questions on one paragraph share its words
  for example_index, example in enumerate(examples):
    query_tokens = tokenizer.tokenize(example.question_text)[:max_query_length]
    if example.doc_tokens is not last_doc:
      last_doc, last_pieces = example.doc_tokens, _doc_pieces(tokenizer, example.doc_tokens)
    all_doc_tokens, tok_to_orig_index, orig_to_tok_index = last_pieces
    if is_training:
      tok_start, tok_end = _answer_pieces(example, tokenizer, all_doc_tokens,
                                          orig_to_tok_index)
    max_tokens_for_doc = max_tokens_for_doc_base - len(query_tokens)
    if max_tokens_for_doc < 1:
      raise ValueError(f"max_seq_length={max_seq_length} leaves no room for the document "
                       f"after a {len(query_tokens)}-token question")
    doc_spans = doc_spans_of(len(all_doc_tokens), max_tokens_for_doc, doc_stride)
    max_context = windows.max_context_windows(doc_spans, len(all_doc_tokens))

    for doc_span_index, span in enumerate(doc_spans):
      tokens = ["[CLS]"] + query_tokens + ["[SEP]"]
      segment_ids = [0] * len(tokens)
      token_to_orig_map = {}
      token_is_max_context = {}
      for split_token_index in range(span.start, span.start + span.length):
        position = len(tokens)
        token_to_orig_map[position] = tok_to_orig_index[split_token_index]
        token_is_max_context[position] = max_context[split_token_index] == doc_span_index
        tokens.append(all_doc_tokens[split_token_index])
      tokens.append("[SEP]")
      segment_ids += [1] * (span.length + 1)

      input_ids, input_mask, segment_ids = preprocessing.pad_inputs(
          tokens, segment_ids, max_seq_length, tokenizer)

      start_position = end_position = None
      if is_training:
        span_end = span.start + span.length - 1
        if (example.is_impossible or not (span.start <= tok_start and tok_end <= span_end)):
          # Impossible, or the answer is not (wholly) in this window: the window is kept,
          # labelled [CLS] (the original's comment says such windows are thrown out).
          start_position = end_position = 0
        else:
          doc_offset = len(query_tokens) + 2
          start_position = tok_start - span.start + doc_offset
          end_position = tok_end - span.start + doc_offset

      if example_index < 20 and doc_span_index == MAX_LOGGED_WINDOWS:
        logging.info("... (%d more windows of example_index %d not logged)",
                     len(doc_spans) - MAX_LOGGED_WINDOWS, example_index)
      elif example_index < 20 and doc_span_index < MAX_LOGGED_WINDOWS:
        _log_feature(unique_id, example_index, doc_span_index, tokens, token_to_orig_map,
                     token_is_max_context, input_ids, input_mask, segment_ids, is_training,
                     example.is_impossible, start_position, end_position)

      output_fn(InputFeatures(
          unique_id=unique_id, example_index=example_index, doc_span_index=doc_span_index,
          tokens=tokens, token_to_orig_map=token_to_orig_map,
          token_is_max_context=token_is_max_context, input_ids=input_ids,
          input_mask=input_mask, segment_ids=segment_ids, start_position=start_position,
          end_position=end_position, is_impossible=example.is_impossible))
      unique_id += 1


def _log_feature(unique_id, example_index, doc_span_index, tokens, token_to_orig_map,
                 token_is_max_context, input_ids, input_mask, segment_ids, is_training,
                 is_impossible, start_position, end_position):
  """The original's INFO lines for one of the first 20 examples' windows."""
  logging.info("*** Example ***")
  logging.info("unique_id: %s", unique_id)
  logging.info("example_index: %s", example_index)
  logging.info("doc_span_index: %s", doc_span_index)
  logging.info("tokens: %s", " ".join(tokenization.printable_text(x) for x in tokens))
  logging.info("token_to_orig_map: %s",
               " ".join("%d:%d" % (x, y) for x, y in token_to_orig_map.items()))
  logging.info("token_is_max_context: %s",
               " ".join("%d:%s" % (x, y) for x, y in token_is_max_context.items()))
  logging.info("input_ids: %s", " ".join(str(x) for x in input_ids))
  logging.info("input_mask: %s", " ".join(str(x) for x in input_mask))
  logging.info("segment_ids: %s", " ".join(str(x) for x in segment_ids))
  if is_training and is_impossible:
    logging.info("impossible example")
  if is_training and not is_impossible:
    answer_text = " ".join(tokens[start_position:end_position + 1])
    logging.info("start_position: %d", start_position)
    logging.info("end_position: %d", end_position)
    logging.info("answer: %s", tokenization.printable_text(answer_text))
