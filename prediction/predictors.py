"""predict.py's models: a model directory (a run_* output_dir or its best/, a Google or
HuggingFace checkpoint directory) or an export_saved_model.py SavedModel, turned into a
Predictor whose predict(texts_a, texts_b) gives each row's prediction fields.

  classifier   label (the most probable) and probabilities {label: p} (softmax)
  multi-label  labels [those whose sigmoid probability reaches its threshold] and
               probabilities {label: p}
  regression   score
  tagger       entities [{"type", "text", "start", "end", "score"}]: character offsets into
               text_a (text_a[start:end] == text), the score the mean probability of the
               entity's words' tags (prediction/tagger.py's TaggerModule, one window)
  squad        answer {"text", "start", "end"}: character offsets into the context (text_b),
               context[start:end] == text; long contexts in doc_stride windows as run_squad
  embeddings   embedding [H floats] (modeling.pool_embeddings: --pooling, --normalize)

Classifiers, regressions, embeddings and taggers run the exported graph itself
(serving.ServingModule / tagger.TaggerModule: tokenization in the graph, padding trimmed
per batch); squad tokenizes in Python (tokenization.FullTokenizer) to keep each word's
characters, windows the context and picks the best span in NumPy.
"""

import json
import os
import types

from absl import logging
import numpy as np
import tensorflow as tf

from bert_keras import checkpoints
from bert_keras import model_files
from bert_keras import modeling
from bert_keras import output_families
from bert_keras import preprocessing
from bert_keras.runtime import inference
from bert_keras.runtime import model_dir
from bert_keras.runtime import option_checks as checks
from bert_keras import sentence_transformers_layout
from bert_keras import serving
from bert_keras import task_registry
from bert_keras.tasks.classifier import doc_windows
from bert_keras.tasks.classifier import multi_label
from bert_keras.prediction import tagger
from bert_keras.tasks.squad import data as squad_data
from bert_keras.tasks import windows as windows_lib
from bert_keras import tokenization
from bert_keras.utils import conlleval

# The kinds predict.py serves (task_registry: a pretrained encoder is served as embeddings).
TASKS = task_registry.names(servable=True)
# The text fields looked for when no column is named (the first one present).
TEXT_A_FIELDS = ("text_a", "sentence1", "sentence", "text", "question")
TEXT_B_FIELDS = ("text_b", "sentence2", "context")
SQUAD_FIELDS = ("question", "context")


class Predictor(object):
  """What predict.py calls. task: one of TASKS; labels: the label names in output order (or
  None); pair: "no" (text_a only), "optional" (text_b may be absent) or "required" (squad);
  text_columns: the (text_a, text_b) field names of training, None where unknown."""

  def __init__(self, task, labels=None, multi_label=False, thresholds=None, pair="no",
               text_columns=(None, None)):
    self.task, self.labels, self.multi_label = task, labels, bool(multi_label)
    self.kind = task_registry.get(task)
    self.thresholds, self.pair, self.text_columns = thresholds, pair, text_columns
    # Rows keep the raw scores too ("logits"; a squad answer's "score"): serve.py's
    # raw_scores. predict.py's rows leave them out.
    self.keep_scores = False
    self.max_seq_length = None  # (the length inputs are cut to, where known)

  def predict(self, texts_a, texts_b):
    """texts_a, texts_b: lists of str of one batch (texts_b None, or "" for a row without
    one) -> a list of dicts, the prediction fields of each row."""
    raise NotImplementedError

  def check_pair(self, texts_b):
    """A model that reads pairs (pair "required": a squad or reranker model, a classifier
    trained on pairs: task.json's "pair") given no second texts (texts_b None) is a
    ValueError naming the fields looked for and the flag that names one."""
    if self.pair != "required" or texts_b is not None:
      return
    trained = self.text_columns[1]
    looked = [trained] if trained else list(TEXT_B_FIELDS)
    raise ValueError(f"the {self.task} model reads pairs of texts (it was trained on pairs), "
                     f"but the input has no second text (looked for the field "
                     f"{' or '.join(map(repr, looked))}): name it with --text_b_column")

  def label_names(self, count):
    """The names of `count` outputs: the predictor's labels, else "0", "1", ..."""
    if self.labels is None or len(self.labels) != count:
      self.labels = [str(i) for i in range(count)]
    return self.labels


class GraphPredictor(Predictor):
  """A callable fn(text_a, text_b) -> dict of tensors (a ServingModule's or TaggerModule's
  serve, or a SavedModel's serving_default) and the task that reads its outputs."""

  def __init__(self, fn, task, pooling=None, normalize=False, preprocess=None, **kwargs):
    super().__init__(task, **kwargs)
    self._fn, self._pooling, self._normalize = fn, pooling, normalize
    self._preprocess = preprocess

  def predict(self, texts_a, texts_b):
    self.check_pair(texts_b)
    a = tf.constant(texts_a, tf.string)
    b = tf.constant(texts_b if texts_b is not None else [""] * len(texts_a), tf.string)
    outputs = {k: v.numpy() for k, v in self._fn(a, b).items()}
    rows = self.kind.family.rows(outputs, texts_a, texts_b, self)
    if self.keep_scores and "logits" in outputs:
      for row, logits in zip(rows, outputs["logits"]):
        row["logits"] = logits.tolist()
    return rows

  def pooled(self, outputs, texts_a, texts_b):
    """A SavedModel's embeddings pooled here as --pooling says (with a preprocess
    signature), else its own."""
    if self._preprocess is None:
      return outputs["embeddings"]
    a = tf.constant(texts_a, tf.string)
    b = tf.constant(texts_b if texts_b is not None else [""] * len(texts_a), tf.string)
    mask = self._preprocess(a, b)["input_mask"].numpy()
    return np.asarray(modeling.pool_embeddings(outputs["sequence_output"], mask, self._pooling,
                                               self._normalize))


class SquadPredictor(Predictor):
  """run_squad's windows (max_query_length, doc_stride) and its span rule (both ends in the
  context, start <= end, at most max_answer_length pieces, the start piece in the window
  where it has the most context), the best start + end logit over all windows; the answer
  projected back onto the context's characters (tokenization.get_final_text)."""

  def __init__(self, model, tokenizer, max_seq_length, doc_stride=128, max_query_length=64,
               max_answer_length=30, batch_size=32, **kwargs):
    super().__init__("squad", pair="required", **kwargs)
    self._model, self._tokenizer = model, tokenizer
    self._max_seq_length, self._doc_stride = max_seq_length, doc_stride
    self._max_query_length, self._max_answer_length = max_query_length, max_answer_length
    self._batch_size = batch_size
    spec = tf.TensorSpec([None, None], tf.int32)
    self._forward = tf.function(self._call, input_signature=[spec, spec, spec])
    vocab = tokenizer.vocab
    self._cls, self._sep = vocab["[CLS]"], vocab["[SEP]"]

  def _call(self, input_ids, input_mask, segment_ids):
    outputs = self._model({"input_ids": input_ids, "input_mask": input_mask,
                           "segment_ids": segment_ids}, training=False)
    return tf.cast(outputs["start_logits"], tf.float32), tf.cast(outputs["end_logits"],
                                                                 tf.float32)

  @staticmethod
  def words(context):
    """SQuAD's words of `context` (runs of non-whitespace) as (word, first char, end)."""
    words, start = [], None
    for i, c in enumerate(context + " "):
      if c in squad_data.SQUAD_WHITESPACE:
        if start is not None:
          words.append((context[start:i], start, i))
          start = None
      elif start is None:
        start = i
    return words

  def _windows(self, question, context):
    """The windows of one example: (input_ids, segment_ids, piece index of each position
    (-1 outside the context), max-context flag of each position) lists, and the context's
    words and pieces."""
    query = self._tokenizer.convert_tokens_to_ids(
        self._tokenizer.tokenize(question)[:self._max_query_length])
    words = self.words(context)
    pieces, piece_word = [], []
    for index, word_pieces in enumerate(self._tokenizer.tokenize_batch([w for w, _, _ in words])
                                        if words else []):
      pieces.extend(word_pieces)
      piece_word.extend([index] * len(word_pieces))
    room = self._max_seq_length - 3 - len(query)
    if room < 1:
      raise ValueError(f"max_seq_length {self._max_seq_length} leaves no room for the context "
                       f"after a {len(query)}-piece question")
    spans = windows_lib.doc_spans(len(pieces), room, self._doc_stride)
    best = windows_lib.max_context_windows(spans, len(pieces))  # piece -> its window
    ids = self._tokenizer.convert_tokens_to_ids(pieces)
    windows = []
    for w, (start, length) in enumerate(spans):
      input_ids = [self._cls] + query + [self._sep] + ids[start:start + length] + [self._sep]
      segment_ids = [0] * (len(query) + 2) + [1] * (length + 1)
      position_piece = [-1] * (len(query) + 2) + list(range(start, start + length)) + [-1]
      max_context = [p >= 0 and best[p] == w for p in position_piece]
      windows.append((input_ids, segment_ids, position_piece, max_context))
    return windows, words, pieces, piece_word

  def _logits(self, windows):
    """Start and end logits (float [S'] each) of every window, in batches."""
    results = []
    for i in range(0, len(windows), self._batch_size):
      chunk = windows[i:i + self._batch_size]
      length = max(len(w[0]) for w in chunk)
      ids = np.zeros([len(chunk), length], np.int32)
      segments = np.zeros_like(ids)
      for row, w in enumerate(chunk):
        ids[row, :len(w[0])], segments[row, :len(w[1])] = w[0], w[1]
      lengths = np.array([len(w[0]) for w in chunk])
      mask = (np.arange(length)[None] < lengths[:, None]).astype(np.int32)
      arrays, _ = inference.trim_batch({"input_ids": ids, "input_mask": mask,
                                        "segment_ids": segments})
      start, end = self._forward(arrays["input_ids"], arrays["input_mask"],
                                 arrays["segment_ids"])
      results.extend(zip(start.numpy(), end.numpy()))
    return results

  def predict(self, texts_a, texts_b):
    self.check_pair(texts_b)
    examples = [self._windows(q, c) for q, c in zip(texts_a, texts_b)]
    flat = [w for windows, _, _, _ in examples for w in windows]
    logits = iter(self._logits(flat))
    return [self._answer(windows, words, pieces, piece_word, [next(logits) for _ in windows],
                         context)
            for (windows, words, pieces, piece_word), context in zip(examples, texts_b)]

  def _answer(self, windows, words, pieces, piece_word, logits, context):
    best = None  # (score, first piece, last piece)
    for (_, _, position_piece, max_context), (start_logits, end_logits) in zip(windows,
                                                                                 logits):
      piece = np.array(position_piece)
      n = len(piece)
      starts = np.array(max_context)
      ok = (piece[:, None] >= 0) & (piece[None, :] >= 0) & starts[:, None]
      offset = np.arange(n)[None, :] - np.arange(n)[:, None]
      ok &= (offset >= 0) & (offset < self._max_answer_length)
      if not ok.any():
        continue
      scores = np.where(ok, start_logits[:n, None] + end_logits[None, :n], -np.inf)
      s, e = np.unravel_index(np.argmax(scores), scores.shape)
      if best is None or scores[s, e] > best[0]:
        best = (float(scores[s, e]), int(piece[s]), int(piece[e]))
    if best is None:
      return {"answer": dict(text="", start=None, end=None,
                             **({"score": None} if self.keep_scores else {}))}
    score, first, last = best
    tok_text = " ".join(pieces[first:last + 1]).replace(" ##", "").replace("##", "")
    tok_text = " ".join(tok_text.strip().split())
    _, char_start, _ = words[piece_word[first]]
    _, _, char_end = words[piece_word[last]]
    orig_text = context[char_start:char_end]
    lower = self._tokenizer.basic_tokenizer.do_lower_case
    text = tokenization.get_final_text(tok_text, orig_text, lower)
    start = char_start + orig_text.find(text)
    return {"answer": dict(text=text, start=start, end=start + len(text),
                           **({"score": score} if self.keep_scores else {}))}


# ----------------------------------------------------------------------------------------------

def is_saved_model(path):
  return tf.io.gfile.exists(os.path.join(path, "saved_model.pb"))


def is_embeddings_model_dir(path):
  """Whether `path` is a model directory of vectors: a run_embeddings output_dir (or its
  best/), a sentence-transformers directory. False where it cannot be read as one."""
  try:
    description = model_dir.read_model_dir(path)
    return bool(description) and (
        task_registry.of_description(description).family.pooled)
  except (ValueError, tf.errors.OpError):
    return False


def _saved_model_labels(path):
  for where in (os.path.join(path, "assets"), path):
    labels = checkpoints.read_labels(where)
    if labels is not None:
      return labels
  return None


class WindowPredictor(Predictor):
  """A classifier trained with --doc_stride (task.json's doc_stride and window_pooling): each
  text_a split into run_classifier's windows (tasks/classifier/doc_windows.py; text_b whole
  beside each), the model run on every window, the windows' logits pooled per row, so that a
  long text gets the prediction run_classifier's --do_predict gives it."""

  def __init__(self, model, tokenizer, max_seq_length, doc_stride, window_pooling="mean",
               batch_size=32, pair="optional", **kwargs):
    super().__init__("classifier", pair=pair, **kwargs)
    self._model, self._tokenizer = model, tokenizer
    self._max_seq_length, self._doc_stride = max_seq_length, doc_stride
    self._how, self._batch_size = window_pooling, batch_size

  def predict(self, texts_a, texts_b):
    self.check_pair(texts_b)
    features, documents = [], []
    for row, text_a in enumerate(texts_a):
      tokens_a = self._tokenizer.tokenize(text_a)
      tokens_b = self._tokenizer.tokenize(texts_b[row]) if texts_b and texts_b[row] else None
      for window in doc_windows.windows(tokens_a, tokens_b, self._max_seq_length,
                                        self._doc_stride, f"row {row + 1} of a batch"):
        features.append(preprocessing.pack_tokens(
            list(window), list(tokens_b) if tokens_b else None, self._max_seq_length,
            self._tokenizer)[1:])
        documents.append(row)
    ids, mask, segments = (np.asarray(x, np.int32) for x in zip(*features))
    logits = []
    for start in range(0, len(ids), self._batch_size):
      rows = slice(start, start + self._batch_size)
      length = max(int(mask[rows].sum(1).max()), 1)  # the batch trimmed to its longest row
      logits.append(np.asarray(self._model(
          {"input_ids": ids[rows, :length], "input_mask": mask[rows, :length],
           "segment_ids": segments[rows, :length]}, training=False), np.float32))
    pooled = doc_windows.pool(np.concatenate(logits), documents, len(texts_a), self._how)
    return self.kind.family.rows_of_logits(pooled, self)


def load_saved_model(path, pooling=None, normalize=False, thresholds=None):
  """A GraphPredictor of an export_saved_model.py SavedModel: the task from its outputs,
  the label names from its label_names output, else labels.txt in its assets/ or beside it,
  else the output indices."""
  loaded = tf.saved_model.load(path)
  if "serving_default" not in loaded.signatures:
    raise ValueError(f"--model_dir {path}: the SavedModel has no serving_default signature")
  signature = loaded.signatures["serving_default"]
  names = set(signature.structured_outputs)
  inputs = set(signature.structured_input_signature[1])
  family = output_families.of_outputs(names)
  kind = task_registry.kinds(outputs=family.name, servable=True)[0] if family else None
  if kind is None:
    raise ValueError(f"--model_dir {path}: a SavedModel whose outputs ({', '.join(sorted(names))})"
                     " are not export_saved_model.py's")
  description = None
  for where in (os.path.join(path, "assets"), path):
    if tf.io.gfile.exists(os.path.join(where, model_dir.TASK_FILE)):
      description = model_files.read_json_object(os.path.join(where, model_dir.TASK_FILE))
      break
  if isinstance(description, dict) and description.get("task") in task_registry.task_json_names():
    described = task_registry.of_description(description)  # (a kind its outputs do not tell)
    if described.family is kind.family:
      kind = described
  multi_label = bool(description and description.get("multi_label"))
  if thresholds is None and description:
    thresholds = description.get("thresholds")
    problem = thresholds is not None and model_files.thresholds_problem(thresholds, None)
    if problem:
      raise ValueError(f"{os.path.join(where, model_dir.TASK_FILE)}: \"thresholds\" {problem}, "
                       f"got {json.dumps(thresholds)[:80]}")
  if "text_b" in inputs:
    fn = lambda a, b: signature(text_a=a, text_b=b)  # noqa: E731
  else:
    fn = lambda a, b: signature(text_a=a)  # noqa: E731
  preprocess = None
  if kind.family.pooled and (pooling is not None or normalize):
    preprocess_signature = loaded.signatures["preprocess"]
    preprocess = lambda a, b: preprocess_signature(text_a=a, text_b=b)  # noqa: E731
  predictor = GraphPredictor(
      fn, kind.name, pooling=pooling or "mean", normalize=normalize, preprocess=preprocess,
      labels=_saved_model_labels(path) if kind.labels else None,
      multi_label=multi_label or kind.family.thresholds, thresholds=thresholds,
      pair=kind.pair)
  predictor.keep_alive = loaded
  return predictor


def load(path, task=None, max_seq_length=None, pooling=None, normalize=False, threshold=None,
         batch_size=32, squad_options=None):
  """The Predictor of --model_dir `path` (see the module docstring). task: None (the
  directory's), or "embeddings" (the encoder of any checkpoint, the only choice for a
  directory without task.json). threshold: a multi-label classifier's threshold for every
  label (None: task.json's thresholds, else 0.5). squad_options: doc_stride,
  max_query_length, max_answer_length overriding task.json's."""
  check_window_flags(max_seq_length=max_seq_length, **(squad_options or {}))
  if is_saved_model(path):
    if task not in (None, "embeddings"):
      raise ValueError(f"--task={task}: a SavedModel's task is fixed at export")
    return load_saved_model(path, pooling, normalize,
                            None if threshold is None else [threshold])
  description = model_dir.read_model_dir(path)
  if description is None and task is None:  # a CrossEncoder directory: a reranker
    description = sentence_transformers_layout.cross_encoder_description(path)
  if description is None and not (task and task_registry.get(task).family.pooled):
    raise ValueError(f"--model_dir {path}: no {model_dir.TASK_FILE} (not a run_* output_dir "
                     "or its best/) and no saved_model.pb; pass --task=embeddings to embed "
                     "texts with a pre-trained checkpoint")
  description = description or {}
  kind = task_registry.get(task) if task else task_registry.of_description(description)
  if kind.served_as and not task:
    raise ValueError(f"--model_dir {path}: a pre-training run; pass --task={kind.served_as}")
  kind = task_registry.served(kind)
  labels = description.get("labels") if kind.labels else None
  if kind.family.pooled:  # a run_embeddings (or sentence-transformers) model directory
    # says how it pools
    pooling = pooling or description.get("pooling")
    normalize = normalize or bool(description.get("normalize"))
  options = description.get("options") or {}
  given = max_seq_length
  # Embeddings are pooled from the encoder's outputs by the serving module.
  model_kind = task_registry.get("encoder") if kind.family.pooled else kind
  model = checkpoints.load_model(
      path, task=model_kind.name, num_labels=len(labels) if labels else None,
      bert_config_file=description.get("bert_config_file"),
      vocab_file=description.get("vocab_file"),
      do_lower_case=description.get("do_lower_case"))
  # Every prediction reads the real tokens only (a span lies in its context): the encoder
  # skips the padding (BertModel.skip_padding).
  getattr(model, "bert", model).skip_padding = True
  positions = model.config.max_position_embeddings
  if given is None:  # (task.json's is required: only a directory without one, or a
    # sentence-transformers directory that does not say, takes the default)
    given = description.get("max_seq_length")
  max_seq_length = int(given if given is not None else min(128, positions))
  if max_seq_length > positions:
    raise ValueError(f"--max_seq_length {max_seq_length} is longer than the model's "
                     f"max_position_embeddings {positions}")
  if model.vocab_file is None:
    raise ValueError(f"--model_dir {path}: no vocab.txt")
  if kind.labels and labels is None:
    labels = model.labels
  if kind.family.tagged:
    check_tags(labels, description)
  # (task.json's "pair": a classifier trained on pairs reads pairs, one trained on single
  # texts reads one text; an older directory without it, either)
  pair = {True: "required", False: "no"}.get(description.get("pair"), kind.pair)
  do_lower_case = bool(model.do_lower_case if model.do_lower_case is not None else True)
  logging.info("predict: %s model from %s (max_seq_length %d, do_lower_case %s)", kind.name,
               path, max_seq_length, do_lower_case)
  columns = (options.get("text_a_column"), options.get("text_b_column"))
  if kind.family.answers:
    # (run_options.json's doc_stride 0 is run_classifier's "no windows": not a stride)
    squad = {name: _first(description.get(name),
                          options.get(name) if options.get(name) != 0 or name != "doc_stride"
                          else None, default)
             for name, default in (("doc_stride", 128), ("max_query_length", 64),
                                   ("max_answer_length", 30))}
    squad.update({k: v for k, v in (squad_options or {}).items() if v is not None})
    tokenizer = tokenization.FullTokenizer(model.vocab_file, do_lower_case)
    return _sized(SquadPredictor(model, tokenizer, max_seq_length, batch_size=batch_size,
                                 **squad), max_seq_length)
  if kind.family.labelled and description.get("doc_stride"):
    problem = model_files.stride_problem(description["doc_stride"], max_seq_length)
    if problem:  # (task.json's own pair is checked by model_files; this is --max_seq_length)
      raise ValueError(f"--max_seq_length={max_seq_length}: {path}'s {model_dir.TASK_FILE} "
                       f"\"doc_stride\" {description['doc_stride']} {problem}")
    return _sized(WindowPredictor(
        model, tokenization.FullTokenizer(model.vocab_file, do_lower_case), max_seq_length,
        description["doc_stride"], description.get("window_pooling") or "mean", batch_size,
        pair=pair, labels=labels, multi_label=description.get("multi_label", False),
        thresholds=_thresholds(description, labels, threshold), text_columns=columns),
        max_seq_length)
  preprocessor = preprocessing.BertPreprocessor(model.vocab_file, do_lower_case, max_seq_length)
  if kind.family.tagged:
    module = tagger.TaggerModule(model, preprocessor, labels)
    predictor = GraphPredictor(lambda a, b: module.serve(a), kind.name, labels=labels,
                               text_columns=columns)
  else:  # a multi-label classifier's sigmoid and thresholds are applied by the predictor
    served = task_registry.get(kind.variant_of) if kind.family.thresholds else kind
    module = serving.ServingModule(model, preprocessor, served.name, pooling=pooling or "mean",
                                   normalize=normalize,
                                   labels=labels if kind.family.labelled else None)
    predictor = GraphPredictor(module.serve, kind.name, labels=labels,
                               multi_label=kind.family.thresholds,
                               thresholds=_thresholds(description, labels, threshold),
                               pair=pair, text_columns=columns)
  predictor.keep_alive = module
  return _sized(predictor, max_seq_length)


def _sized(predictor, max_seq_length):
  """`predictor` knowing the length (in word pieces) its inputs are cut to."""
  predictor.max_seq_length = max_seq_length
  return predictor


def _thresholds(description, labels, threshold):
  """A multi-label classifier's thresholds: [--threshold] when given, else the tuned ones of
  the run's thresholds.json, else task.json's; None for other classifiers."""
  if threshold is not None:
    return [threshold]
  if not description.get("multi_label"):
    return None
  tuned = multi_label.read_thresholds(description["directory"], labels)
  if tuned is None:
    return description.get("thresholds")  # (checked by model_files)
  problem = model_files.thresholds_problem(tuned.tolist(), len(labels) if labels else None)
  if problem:
    raise ValueError(f"{os.path.join(description['directory'], multi_label.THRESHOLDS_FILE)}: "
                     f"\"thresholds\" {problem}, got {tuned.tolist()}")
  return tuned


def _first(*values):
  """The first of `values` that is not None (a 0 is a value: the checks refuse a bad one)."""
  return next(value for value in values if value is not None)


def check_window_flags(**values):
  """The window flags given (max_seq_length, doc_stride, max_query_length, max_answer_length;
  None: not given) against model_files.WINDOW_LIMITS, the bounds task.json and
  run_options.json are checked against: a one-line ValueError naming the flag."""
  checks.check(types.SimpleNamespace(**values), {checks.AT_LEAST: {
      name: model_files.WINDOW_LIMITS[name] for name in values}})


def check_tags(labels, description):
  """A tagger's labels should name an entity type (conlleval's tags, e.g. B-PER:
  conlleval): tags that name none can never make an entity (every row "entities": []): a
  warning naming task.json."""
  if any(conlleval.split_tag(tag)[1] or tag in ("[", "]") for tag in labels or ()):
    return
  logging.warning("%s: \"task\" tagger, but its labels (%s) name no entity type (tags such "
                  "as B-PER): no entity can be found", os.path.join(
                      description.get("directory", ""), model_dir.TASK_FILE),
                  ", ".join(labels or ()))
