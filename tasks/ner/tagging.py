"""run_ner's task: CoNLL files, the tag set, words to WordPiece windows and back, the loss.

Read top to bottom:
  1. read_conll        a CoNLL file -> Sentence(words, tags, lines): the token in the first
                       column, its tag in the LAST one (tab- or space-separated; middle columns
                       such as CoNLL-2003's POS and chunk tags ignored), blank lines between
                       sentences, -DOCSTART- lines skipped
  2. the tag set       tag_list (train.txt's tags, sorted, "O" first), parse_labels (--labels),
                       check_tags (a tag outside the set names its file and line)
  3. windows           convert_sentences: the BERT paper's alignment (section 4.3: a word's tag
                       on its first WordPiece; its other pieces, [CLS], [SEP] and padding get
                       tag id -1, out of the loss and the metrics) in windows of at most
                       max_seq_length - 2 pieces, doc_stride apart (tasks/windows.py), each
                       word predicted from the window where it has the most context;
                       assemble_tags: window predictions -> one tag per input word (a word
                       without pieces, e.g. a control character: "O"); tag_sentences: words
                       -> tags with a Keras BertTokenClassifier
  4. the model side    TaggerTask (the mean loss over the tagged pieces of the global batch),
                       write_records / decode_fn, predict (argmax and loss of every window)
  5. outputs           prediction_text (`token gold predicted` lines), eval_results
"""

import dataclasses
import re

import numpy as np
import tensorflow as tf

from bert_keras import losses
from bert_keras.runtime import inference
from bert_keras.runtime import input_pipeline
from bert_keras.runtime import training
from bert_keras.tasks import windows as windows_lib
from bert_keras.utils import conlleval
from bert_keras.utils import text_lines

DOCSTART = "-DOCSTART-"
OUTSIDE = "O"
_FIELDS = re.compile(r"[ \t]+")


# ----------------------------------------------------------------------------
# 1. CoNLL files

@dataclasses.dataclass
class Sentence:
  """words: list of str; tags: list of str (None for an untagged file); lines: the 1-based
  line number of each word in `path`."""
  words: list
  tags: list
  lines: list
  path: str


def read_conll(path, tags_required=True):
  """The sentences (list of Sentence) of a CoNLL file. A word line holds the token (first
  field) and its tag (last field); with tags_required=False a file whose every word line has
  one field is read untagged (tags None). ValueErrors name the file and line: a line
  without a tag, a byte that is not UTF-8, a file without words, a mix of tagged and
  untagged lines."""
  sentences, words, tags, lines = [], [], [], []
  tagged = None  # whether the file's word lines have tags (decided by its first one)
  for number, line in text_lines.numbered_lines(path):
    fields = [f for f in _FIELDS.split(line.strip(" \t\r")) if f]
    if not fields or fields[0] == DOCSTART:
      if words:
        sentences.append(Sentence(words, tags if tagged else None, lines, path))
        words, tags, lines = [], [], []
      continue
    if tagged is None:
      tagged = len(fields) > 1 or tags_required
    if tagged and len(fields) < 2:
      raise ValueError(f"{path} line {number}: {line.strip()!r} has no tag (a token and its "
                       "tag, separated by spaces or tabs)")
    if not tagged and len(fields) > 1:
      raise ValueError(f"{path} line {number}: {line.strip()!r} has a tag, but the file's "
                       "first token has none (tag every token or none)")
    words.append(fields[0])
    tags.append(fields[-1])
    lines.append(number)
  if words:
    sentences.append(Sentence(words, tags if tagged else None, lines, path))
  if not sentences:
    raise ValueError(f"{path} has no tokens (an empty CoNLL file)")
  return sentences


# ----------------------------------------------------------------------------
# 2. The tag set

def tag_list(sentences):
  """The distinct tags of the sentences, sorted, "O" first (when present)."""
  tags = sorted({tag for s in sentences for tag in s.tags or ()})
  return ([OUTSIDE] if OUTSIDE in tags else []) + [t for t in tags if t != OUTSIDE]


def parse_labels(text, flag="--labels"):
  """--labels=O,B-PER,I-PER -> the list; a ValueError for an empty or repeated tag."""
  labels = [label.strip() for label in text.split(",")]
  if "" in labels or len(set(labels)) != len(labels):
    raise ValueError(f"{flag}={text}: tags must be distinct and non-empty")
  return labels


def check_tags(sentences, labels, what):
  """A ValueError naming the file and line of the first tag not in `labels`."""
  known = set(labels)
  for sentence in sentences:
    for tag, line in zip(sentence.tags or (), sentence.lines):
      if tag not in known:
        raise ValueError(f"{sentence.path} line {line}: tag {tag!r} is not in the tag set "
                         f"of {what} ({', '.join(labels)})")


# ----------------------------------------------------------------------------
# 3. Windows: words -> WordPiece inputs, and predictions back to words

@dataclasses.dataclass
class Window:
  """One model input: sentence (its index), input_ids (list of ints, [CLS] pieces [SEP],
  unpadded), tag_ids (the same length: the word's tag id at each word's first piece, -1
  elsewhere or when the sentence has no tags) and predicts (the same length: the index of
  the word predicted at that position, -1 where none: a word is predicted in exactly one
  window, the one where its first piece has the most context)."""
  sentence: int
  input_ids: list
  tag_ids: list
  predicts: list


# The windows (tasks/windows.py) under run_ner's names: spans(num_pieces, max_pieces,
# doc_stride) -> [(start, length)]; best_windows(spans, num_pieces) -> for each piece the
# window where it has the most context.
spans = windows_lib.doc_spans
best_windows = windows_lib.max_context_windows


def sentence_windows(word_ids, tag_ids, max_seq_length, doc_stride, cls_id, sep_id,
                     sentence=0):
  """Windows of one sentence. word_ids: per word its WordPiece ids (a list, maybe empty);
  tag_ids: per word its tag id (None: untagged). Returns a list of Window."""
  pieces, first_piece_of = [], {}
  for word, ids in enumerate(word_ids):
    if len(ids):
      first_piece_of[len(pieces)] = word
    pieces.extend(int(i) for i in ids)
  windows = spans(len(pieces), max_seq_length - 2, doc_stride)
  best = best_windows(windows, len(pieces))
  result = []
  for index, (start, length) in enumerate(windows):
    tags, predicts = [-1], [-1]
    for position in range(start, start + length):
      word = first_piece_of.get(position, -1)
      tags.append(-1 if word < 0 or tag_ids is None else tag_ids[word])
      predicts.append(word if word >= 0 and best[position] == index else -1)
    result.append(Window(sentence, [cls_id] + pieces[start:start + length] + [sep_id],
                         tags + [-1], predicts + [-1]))
  return result


def convert_sentences(sentences, tokenizer, labels, max_seq_length, doc_stride):
  """All windows (list of Window, in sentence order) of the sentences, tokenized by a
  tokenization.FullTokenizer; tag ids index `labels`."""
  if max_seq_length < 3:
    raise ValueError(f"--max_seq_length={max_seq_length}: must be >= 3 ([CLS] word [SEP])")
  if doc_stride < 1:
    raise ValueError(f"--doc_stride={doc_stride}: must be >= 1")
  tag_id = {tag: i for i, tag in enumerate(labels)}
  cls_id, sep_id = tokenizer.convert_tokens_to_ids(["[CLS]", "[SEP]"])
  words = [w for s in sentences for w in s.words]
  ids, splits = tokenizer.encode_batch(words)
  result, offset = [], 0
  for index, sentence in enumerate(sentences):
    n = len(sentence.words)
    word_ids = [ids[splits[offset + i]:splits[offset + i + 1]] for i in range(n)]
    offset += n
    tags = None if sentence.tags is None else [tag_id[t] for t in sentence.tags]
    result.extend(sentence_windows(word_ids, tags, max_seq_length, doc_stride, cls_id, sep_id,
                                   index))
  return result


def window_arrays(windows, max_seq_length):
  """The windows as model inputs: {"input_ids", "input_mask", "segment_ids", "tag_ids"}, int32
  [N, max_seq_length] each, zero-padded (tag_ids -1-padded)."""
  n = len(windows)
  arrays = {k: np.zeros([n, max_seq_length], np.int32)
            for k in ("input_ids", "input_mask", "segment_ids")}
  arrays["tag_ids"] = np.full([n, max_seq_length], -1, np.int32)
  for row, window in enumerate(windows):
    length = len(window.input_ids)
    arrays["input_ids"][row, :length] = window.input_ids
    arrays["input_mask"][row, :length] = 1
    arrays["tag_ids"][row, :length] = window.tag_ids
  return arrays


def assemble_tags(sentences, windows, predictions, labels):
  """Window predictions (int [N, >= longest window], tag ids) -> per sentence a list with
  one tag (str) per word, in order; a word without WordPieces gets "O"."""
  result = [[OUTSIDE] * len(s.words) for s in sentences]
  for window, row in zip(windows, predictions):
    tags = result[window.sentence]
    for position, word in enumerate(window.predicts):
      if word >= 0:
        tags[word] = labels[int(row[position])]
  return result


def tag_sentences(model, tokenizer, labels, word_lists, max_seq_length=128, doc_stride=64,
                  batch_size=32):
  """Tags lists of words with a BertTokenClassifier (inference, in Keras batches of
  batch_size windows): per list, one tag of `labels` per word (a word without WordPieces:
  "O"). word_lists: e.g. [["John", "lives", "in", "Paris", "."]] (words as in a CoNLL file;
  the tagger SavedModel splits raw text itself)."""
  sentences = [Sentence(list(words), None, list(range(1, len(words) + 1)), "<input>")
               for words in word_lists]
  windows = convert_sentences(sentences, tokenizer, labels, max_seq_length, doc_stride)
  arrays = window_arrays(windows, max_seq_length)
  predictions = np.zeros([len(windows), max_seq_length], np.int32)
  for start in range(0, len(windows), batch_size):
    batch = {k: arrays[k][start:start + batch_size]
             for k in ("input_ids", "input_mask", "segment_ids")}
    predictions[start:start + batch_size] = np.argmax(model(batch, training=False), axis=-1)
  return assemble_tags(sentences, windows, predictions, labels)


# ----------------------------------------------------------------------------
# 4. The model side

class TaggerTask(training.Task):
  """The loss of a training step: the sum of losses.token_classifier_loss over the GLOBAL
  batch's tagged pieces (tag_ids >= 0) / their number (at least 1), whatever the replica
  count or accumulation. The model sees input_ids, input_mask and segment_ids [b, S]."""

  metric_name = "eval_f1"
  reads_padding = False  # (the loss reads the tagged pieces only)

  def model_inputs(self, batch):
    return {k: batch[k] for k in ("input_ids", "input_mask", "segment_ids")}

  def denominators(self, batch):
    return {"tokens": tf.reduce_sum(tf.cast(batch["tag_ids"] >= 0, tf.float32))}

  def loss(self, outputs, batch, denominators):
    per_token = losses.token_classifier_loss(outputs, batch["tag_ids"])
    loss = tf.reduce_sum(per_token) / tf.maximum(denominators["tokens"], 1.0)
    return loss, {"loss": loss}


RECORD_FEATURES = ("input_ids", "input_mask", "segment_ids", "tag_ids")


def write_records(arrays, path):
  """window_arrays' arrays -> a TFRecord file of tf.train.Examples (int64 features
  RECORD_FEATURES [S]), written under a temporary name."""
  with input_pipeline.RecordWriter(path) as writer:
    for row in range(len(arrays["input_ids"])):
      writer.write({k: arrays[k][row] for k in RECORD_FEATURES})


def decode_fn(seq_length):
  """Serialized tf.train.Example -> {RECORD_FEATURES: int32 [seq_length]}."""
  types = {k: tf.io.FixedLenFeature([seq_length], tf.int64) for k in RECORD_FEATURES}

  def decode(record):
    return {k: tf.cast(v, tf.int32)
            for k, v in tf.io.parse_single_example(record, types).items()}

  return decode


def tagger_inference_fn(model, strategy, use_xla=False):
  """inference.make_inference_fn of {"predictions": argmax tag ids int32 [b, S], "loss":
  token_classifier_loss float32 [b, S]} of a BertTokenClassifier (inference mode)."""

  def forward(batch):
    logits = model({k: batch[k] for k in ("input_ids", "input_mask", "segment_ids")},
                   training=False)
    return {"predictions": tf.argmax(logits, axis=-1, output_type=tf.int32),
            "loss": losses.token_classifier_loss(logits, batch["tag_ids"])}

  return inference.make_inference_fn(strategy, forward, use_xla)


def predict(infer, arrays, batch_size, trim=True):
  """Runs `infer` (tagger_inference_fn) over window_arrays' arrays in order, batch_size
  windows a step (each batch cut to its longest window when trim). Returns (predictions
  int32 [N, S], loss sum over the tagged pieces, number of tagged pieces, batch count)."""
  n, seq_length = arrays["input_ids"].shape
  predictions = np.zeros([n, seq_length], np.int32)
  loss_sum, tagged, row, batches = 0.0, 0, 0, 0
  dataset = tf.data.Dataset.from_tensor_slices(arrays).batch(batch_size)
  for batch, outputs in inference.infer_dataset(infer, dataset, batch_size,
                                                "input_mask" if trim else None):
    rows, length = outputs["predictions"].shape
    predictions[row:row + rows, :length] = outputs["predictions"]
    loss_sum += float(np.sum(outputs["loss"], dtype=np.float64))
    tagged += int(np.sum(batch["tag_ids"] >= 0))
    row, batches = row + rows, batches + 1
  return predictions, loss_sum, tagged, batches


# ----------------------------------------------------------------------------
# 5. Outputs

def prediction_text(sentences, predicted):
  """`token gold predicted` lines (`token predicted` for untagged sentences), a blank line
  after each sentence: conlleval's input."""
  lines = []
  for sentence, tags in zip(sentences, predicted):
    gold = sentence.tags or [None] * len(tags)
    for word, gold_tag, tag in zip(sentence.words, gold, tags):
      lines.append(f"{word} {tag}\n" if gold_tag is None else f"{word} {gold_tag} {tag}\n")
    lines.append("\n")
  return "".join(lines)


def eval_results(sentences, predicted, loss_sum, tagged, global_step):
  """The eval results of tagged sentences and their predicted tags: eval_precision,
  eval_recall, eval_f1 (conlleval's entity figures as fractions), eval_accuracy
  (conlleval's token accuracy, a fraction), eval_f1_<TYPE> per entity type, eval_loss and
  loss (the mean loss over the tagged pieces), global_step."""
  counts = conlleval.score_sentences([s.tags for s in sentences], predicted)
  m = conlleval.metrics(counts)
  loss = loss_sum / max(tagged, 1)
  results = {"eval_precision": m["precision"] / 100, "eval_recall": m["recall"] / 100,
             "eval_f1": m["FB1"] / 100, "eval_accuracy": (m["accuracy"] or 0.0) / 100,
             "eval_loss": loss, "loss": loss, "global_step": int(global_step)}
  for kind, figures in m["types"].items():
    results[f"eval_f1_{kind}"] = figures["FB1"] / 100
  return results
