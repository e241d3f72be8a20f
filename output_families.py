"""What a task kind's outputs are, each family declared once with what every surface does with it.

A task kind (task_registry) names its family in `outputs`. The family carries:
  signature       the serving_default outputs of its SavedModel (serving.ServingModule, or
                  prediction/tagger.TaggerModule for tags), the outputs that tell it apart;
  numeric         the outputs of its TFLite / ONNX model (serve_token_ids), () for none;
  probabilities   "softmax", "sigmoid" or None, and to_probabilities(logits) in NumPy;
  serving_outputs(module, features, outputs, numeric)  the SavedModel's outputs in the graph;
  rows(outputs, texts_a, texts_b, predictor)  predict.py's fields of each row;
  measure(want, got, input_mask)  how far a quantized model's outputs stay from the float's.

    family = output_families.get("classes")
    output_families.of_outputs({"probabilities", "logits", "label", "label_names"})  # family
    family.to_probabilities(np.array([[0.0, 1.0]]))                                  # softmax

Adding a family: a subclass with each behaviour, one `register(...)`, and the kind that names
it; tests/test_task_registry.py walks every family through every surface.
"""

import numpy as np

from bert_keras import modeling
from bert_keras import tokenization
from bert_keras.utils import conlleval


def sigmoid(x):
  """The logistic function in float64, stable for any finite x (no overflow in exp)."""
  x = np.asarray(x, np.float64)
  e = np.exp(-np.abs(x))
  return np.where(x >= 0, 1.0 / (1.0 + e), e / (1.0 + e))


def softmax(x, axis=-1):
  """Softmax over `axis` in float64, the maximum subtracted first."""
  x = np.asarray(x, np.float64)
  shifted = np.exp(x - x.max(axis=axis, keepdims=True))
  return shifted / shifted.sum(axis=axis, keepdims=True)


def decode(values):
  """Strings of a string tensor's values (bytes decoded as UTF-8)."""
  return [v.decode("utf-8") if isinstance(v, bytes) else str(v) for v in values]


class OutputsFamily(object):
  """One family of outputs (see the module docstring). A family that a surface does not
  serve leaves its method raising NotImplementedError, named in `not_served`."""

  name = None
  signature = ()
  numeric = ()
  probabilities = None
  # Served by serving.ServingModule ("serving"), prediction/tagger.TaggerModule ("tagger"),
  # or by no SavedModel of its own (None: a pretrained encoder is served as embeddings).
  served_by = None
  # The fields rows() gives each row (predict.py's output columns).
  row_fields = ()
  # What the surfaces ask of a family, besides its behaviour:
  pooled = False        # the model is the encoder, pooled into one vector (--pooling, --normalize)
  labelled = False      # one output per named label (label names, windows over long texts)
  thresholds = False    # labels chosen by thresholds (task.json's, thresholds.json, --threshold)
  answers = False       # an answer span in a context (doc_stride, query and answer lengths)
  tagged = False        # a label per word: its labels are tags (prediction/tagger serves it)
  ranks = False         # one number per row that orders candidates (predict.py --rerank_run)
  headless = False      # the encoder's own outputs, no head (a bi-encoder can be written)
  # The HTTP API that serve.py answers it with (server/apis.py: "embed", "predict"; a kind may
  # name another: a reranker's "rerank"), or None: not served over HTTP.
  http_api = None

  def to_probabilities(self, logits):
    """The family's logits -> probabilities in float64 (logits as they are when it has
    none)."""
    if self.probabilities == "softmax":
      return softmax(logits)
    if self.probabilities == "sigmoid":
      return sigmoid(logits)
    return np.asarray(logits, np.float64)

  def serving_outputs(self, module, features, outputs, numeric=False):
    """serving_default's outputs in the graph (numeric: TFLite's and ONNX's, no strings) from
    the model's `outputs` on `features` (int32 [B, S] each); module: the ServingModule."""
    raise NotImplementedError(f"outputs {self.name!r} have no serving outputs")

  def rows(self, outputs, texts_a, texts_b, predictor):
    """The fields of each row (a list of dicts) from the serving outputs (numpy arrays);
    predictor: the predictors.Predictor (labels, thresholds, pooling)."""
    raise NotImplementedError(f"outputs {self.name!r} have no prediction rows")

  def measure(self, want, got, input_mask=None):
    """How far a quantized model's outputs `got` stay from the float model's `want` (dicts of
    arrays): {"measure": name, "agreement": value, ...more figures}."""
    raise NotImplementedError(f"no measure for outputs {self.name!r}")

  def http_answer(self, row, raw_scores=False):
    """One row (rows()'s dict; with "logits" when the predictor keeps them) as serve.py's
    POST /predict answers it for one input: TEI's [{"label", "score"}, ...], or HuggingFace's
    token-classification entities or question-answering answer. raw_scores: logits instead
    of probabilities (TEI's raw_scores)."""
    raise NotImplementedError(f"outputs {self.name!r} have no /predict answer")


def _raw(row):
  """A row's logits (the predictor keeps them for raw_scores); a ValueError where the runtime
  gives probabilities only."""
  if row.get("logits") is None:
    raise ValueError("raw_scores: this model's runtime gives probabilities only")
  return [float(x) for x in row["logits"]]


_FAMILIES = {}


def register(family):
  """Adds `family` (an OutputsFamily) to the registry; returns it. A name taken, or outputs
  that another family has (no surface could tell them apart), is a ValueError."""
  if not family.name or family.name in _FAMILIES:
    raise ValueError(f"outputs family {family.name!r} is registered already (or unnamed)")
  for other in _FAMILIES.values():
    for outputs in ("signature", "numeric"):
      mine = set(getattr(family, outputs))
      if mine and mine == set(getattr(other, outputs)):
        raise ValueError(f"outputs family {family.name!r}: its {outputs} is {other.name!r}'s "
                         "(the outputs could not tell the two apart)")
  _FAMILIES[family.name] = family
  return family


def unregister(name):
  """Removes the family `name`: for tests that plant a family."""
  del _FAMILIES[name]


def get(name):
  """The family called `name`; an unknown name is a ValueError listing the families."""
  if name not in _FAMILIES:
    raise ValueError(f"outputs {name!r} is not one of {', '.join(_FAMILIES)}")
  return _FAMILIES[name]


def names(**where):
  """The registered families' names whose attributes equal `where`'s, in registration order."""
  return tuple(f.name for f in _FAMILIES.values()
               if all(getattr(f, key) == value for key, value in where.items()))


def of_outputs(output_names, numeric=False):
  """The family whose SavedModel signature (numeric: TFLite / ONNX outputs) `output_names`
  holds, the one of most outputs when several fit (a multi-label classifier's holds a
  classifier's); None when none fits."""
  output_names = set(output_names)
  fitting = [f for f in _FAMILIES.values()
             if (f.numeric if numeric else f.signature)
             and set(f.numeric if numeric else f.signature) <= output_names]
  return max(fitting, key=lambda f: len(f.numeric if numeric else f.signature), default=None)


# ----------------------------------------------------------------------------------------------
# Helpers of the families' behaviour.

def _cosine(a, b):
  a, b = np.asarray(a, np.float64), np.asarray(b, np.float64)
  norms = np.maximum(np.linalg.norm(a, axis=-1) * np.linalg.norm(b, axis=-1), 1e-12)
  return (a * b).sum(-1) / norms


def _ranks(x):
  order = np.argsort(x, kind="stable")
  ranks = np.empty(len(x), np.float64)
  ranks[order] = np.arange(len(x))
  for value in np.unique(x):  # ties share their mean rank
    tied = x == value
    if tied.sum() > 1:
      ranks[tied] = ranks[tied].mean()
  return ranks


def _pearson(a, b):
  a, b = np.asarray(a, np.float64), np.asarray(b, np.float64)
  if a.std() == 0 or b.std() == 0:
    return 1.0 if np.allclose(a, b) else 0.0
  return float(np.corrcoef(a, b)[0, 1])


def entity_f1(float_tags, quantized_tags):
  """conlleval's entity F1 (a fraction) of the quantized model's tags against the float
  model's, each a list of sentences of tags."""
  counts = conlleval.score_sentences(float_tags, quantized_tags)
  if counts.gold_chunks == 0 and counts.found_chunks == 0:
    return 1.0
  return conlleval.metrics(counts)["FB1"] / 100.0


def _sentences(tags):
  """Sentences of tags as lists of str, padding ("") dropped."""
  return [[t for t in decode(row) if t] for row in tags]


def _span_argmax(logits, mask):
  return np.where(np.asarray(mask) > 0, logits, -np.inf).argmax(axis=1)


def logits_of(outputs):
  """A classifier's output (the logits tensor [B, N], or a dict holding "logits")."""
  return outputs["logits"] if isinstance(outputs, dict) else outputs


def best_spans(start_logits, end_logits, input_mask, segment_ids, max_answer_length):
  """The original write_predictions' choice without its n-best cut: the start <= end pair,
  both in the context (segment 1, the final [SEP] excluded), end - start + 1 <=
  max_answer_length, with the largest start_logit + end_logit (ties: the smallest start,
  then the smallest end). logits float [B, S], mask and segments int [B, S] ->
  (start int32 [B], end int32 [B]); both -1 where the row has no context."""
  import tensorflow as tf
  seq_length = tf.shape(start_logits)[1]
  positions = tf.range(seq_length)
  length = tf.reduce_sum(tf.cast(input_mask, tf.int32), axis=1)
  context = tf.equal(segment_ids, 1) & (positions[None] < length[:, None] - 1)
  offset = positions[None, :] - positions[:, None]  # [S, S]: end - start
  valid = ((offset >= 0) & (offset < max_answer_length))[None] & (
      context[:, :, None] & context[:, None, :])
  scores = (tf.cast(start_logits, tf.float32)[:, :, None]
            + tf.cast(end_logits, tf.float32)[:, None, :])
  scores = tf.where(valid, scores, float("-inf"))
  best = tf.argmax(tf.reshape(scores, [tf.shape(scores)[0], -1]), axis=1, output_type=tf.int32)
  found = tf.reduce_any(context, axis=1)
  return (tf.where(found, best // seq_length, -1), tf.where(found, best % seq_length, -1))


def span_text(input_ids, start, end, vocabulary):
  """The word pieces input_ids[start..end] joined as the original's write_predictions joins
  them (" ".join, then " ##" and "##" removed). input_ids int [B, S], start/end int32 [B]
  (-1: none, the empty string); vocabulary: string [V] -> string [B]."""
  import tensorflow as tf
  pieces = tf.gather(vocabulary, input_ids)
  positions = tf.range(tf.shape(input_ids)[1])[None]
  inside = (positions >= start[:, None]) & (positions <= end[:, None])
  text = tf.strings.reduce_join(tf.ragged.boolean_mask(pieces, inside), axis=1, separator=" ")
  return tf.strings.regex_replace(tf.strings.regex_replace(text, " ##", ""), "##", "")


def _label_names_from(outputs, predictor):
  """A SavedModel's own label names (its label_names output) come first."""
  if "label_names" in outputs:
    names = np.asarray(outputs["label_names"])
    predictor.labels = decode(names[0] if names.ndim == 2 else names)


# ----------------------------------------------------------------------------------------------
# The families.

class Sequence(OutputsFamily):
  """BertModel's {"sequence_output" [B, S, H], "pooled_output" [B, H]}: served as vectors."""
  name = "sequence"
  headless = True


class Vectors(OutputsFamily):
  """One embedding per text, float32 [B, H] (modeling.pool_embeddings)."""
  name = "vectors"
  signature = numeric = ("pooled_output", "sequence_output", "embeddings")
  served_by = "serving"
  row_fields = ("embedding",)
  pooled = headless = True
  http_api = "embed"

  def serving_outputs(self, module, features, outputs, numeric=False):
    import tensorflow as tf
    return {"pooled_output": tf.cast(outputs["pooled_output"], tf.float32),
            "sequence_output": tf.cast(outputs["sequence_output"], tf.float32),
            "embeddings": modeling.pool_embeddings(outputs["sequence_output"],
                                                   features["input_mask"], module.pooling,
                                                   module.normalize)}

  def rows(self, outputs, texts_a, texts_b, predictor):
    vectors = predictor.pooled(outputs, texts_a, texts_b)
    return [{"embedding": [float(x) for x in row]} for row in vectors]

  def measure(self, want, got, input_mask=None):
    cosine = _cosine(want["embeddings"], got["embeddings"])
    return {"measure": "mean_cosine", "agreement": float(cosine.mean()),
            "min_cosine": float(cosine.min())}


class Classes(OutputsFamily):
  """Logits [B, N] of N exclusive labels (softmax)."""
  name = "classes"
  signature = ("probabilities", "logits", "label", "label_names")
  numeric = ("probabilities", "logits")
  probabilities = "softmax"
  served_by = "serving"
  row_fields = ("label", "probabilities")
  labelled = True
  http_api = "predict"

  def http_answer(self, row, raw_scores=False):
    """TEI's [{"label", "score"}] of every label, the most probable first."""
    scores = row["probabilities"]
    if raw_scores:
      scores = dict(zip(scores, _raw(row)))
    return [{"label": label, "score": float(score)}
            for label, score in sorted(scores.items(), key=lambda item: -item[1])]

  def serving_outputs(self, module, features, outputs, numeric=False):
    import tensorflow as tf
    logits = tf.cast(logits_of(outputs), tf.float32)
    probabilities = tf.nn.softmax(logits, axis=-1)
    if numeric:
      return {"probabilities": probabilities, "logits": logits}
    names = module.labels or [str(i) for i in range(logits.shape[-1])]
    names = tf.constant(names, tf.string)
    return {"probabilities": probabilities, "logits": logits,
            "label": tf.gather(names, tf.argmax(probabilities, axis=-1)),
            "label_names": tf.tile(names[None], [tf.shape(logits)[0], 1])}

  def rows(self, outputs, texts_a, texts_b, predictor):
    _label_names_from(outputs, predictor)
    if predictor.multi_label or "predicted" in outputs:  # a multi-label classifier
      return get("multi_label").rows(outputs, texts_a, texts_b, predictor)
    return self.rows_of(outputs["probabilities"], predictor)

  def rows_of_logits(self, logits, predictor):
    """logits float [B, N] -> the fields of each row (a multi-label predictor's by sigmoid)."""
    if predictor.multi_label:
      return get("multi_label").rows_of_logits(logits, predictor)
    return self.rows_of(self.to_probabilities(logits), predictor)

  @staticmethod
  def rows_of(probabilities, predictor):
    """probabilities float [B, N] -> {"label", "probabilities"} of each row."""
    names = predictor.label_names(np.shape(probabilities)[1])
    best = np.argmax(probabilities, axis=1)
    return [{"label": names[b], "probabilities": dict(zip(names, map(float, row)))}
            for b, row in zip(best, probabilities)]

  def measure(self, want, got, input_mask=None):
    same = np.argmax(want["probabilities"], 1) == np.argmax(got["probabilities"], 1)
    return {"measure": "label_agreement", "agreement": float(same.mean())}


class MultiLabel(OutputsFamily):
  """Logits [B, N] of N independent labels (a sigmoid each), chosen by thresholds."""
  name = "multi_label"
  signature = ("probabilities", "logits", "predicted", "labels")
  numeric = ("probabilities", "logits", "predicted")
  probabilities = "sigmoid"
  served_by = "serving"
  row_fields = ("labels", "probabilities")
  labelled = thresholds = True
  http_api = "predict"
  http_answer = Classes.http_answer

  def serving_outputs(self, module, features, outputs, numeric=False):
    import tensorflow as tf
    logits = tf.cast(logits_of(outputs), tf.float32)
    probabilities = tf.sigmoid(logits)
    predicted = probabilities >= module.thresholds
    result = {"probabilities": probabilities, "logits": logits,
              "predicted": tf.cast(predicted, tf.int32)}
    if not numeric:
      all_names = tf.broadcast_to(module.label_names, tf.shape(predicted))
      result["labels"] = tf.strings.reduce_join(tf.ragged.boolean_mask(all_names, predicted),
                                                axis=1, separator=module.separator)
    return result

  def rows(self, outputs, texts_a, texts_b, predictor):
    _label_names_from(outputs, predictor)
    if "predicted" not in outputs:  # the logits of a classifier: its sigmoid, its thresholds
      return self.rows_of_logits(outputs["logits"], predictor)
    probabilities, predicted = outputs["probabilities"], outputs["predicted"]
    names = predictor.label_names(np.shape(probabilities)[1])
    if predictor.thresholds is not None:  # --threshold: compared here instead
      predicted = np.asarray(probabilities) >= np.asarray(predictor.thresholds, np.float32)
    return [{"labels": [n for n, chosen in zip(names, row) if chosen],
             "probabilities": dict(zip(names, map(float, p)))}
            for row, p in zip(np.asarray(predicted), probabilities)]

  def rows_of_logits(self, logits, predictor):
    """logits float [B, N] -> {"labels", "probabilities"} of each row (the predictor's
    thresholds, else 0.5)."""
    probabilities = self.to_probabilities(logits)
    names = predictor.label_names(probabilities.shape[1])
    thresholds = np.broadcast_to(np.asarray(
        predictor.thresholds if predictor.thresholds is not None else 0.5, np.float64),
        (len(names),))
    return [{"labels": [n for n, p, t in zip(names, row, thresholds) if p >= t],
             "probabilities": dict(zip(names, map(float, row)))} for row in probabilities]

  def measure(self, want, got, input_mask=None):
    same = (np.asarray(want["predicted"]) == np.asarray(got["predicted"])).all(axis=1)
    return {"measure": "label_set_agreement", "agreement": float(same.mean())}


class Score(OutputsFamily):
  """One number per text or pair, logits [B, 1] (a regression, a relevance)."""
  name = "score"
  signature = numeric = ("predictions", "logits")
  served_by = "serving"
  row_fields = ("score",)
  ranks = True
  http_api = "predict"

  def http_answer(self, row, raw_scores=False):
    """TEI's one-output answer: [{"label": "score", "score": the number}] (a regression's value
    as it is; raw_scores changes nothing)."""
    return [{"label": "score", "score": float(row["score"])}]

  def serving_outputs(self, module, features, outputs, numeric=False):
    import tensorflow as tf
    logits = tf.cast(logits_of(outputs), tf.float32)
    return {"predictions": logits[:, 0], "logits": logits}

  def rows(self, outputs, texts_a, texts_b, predictor):
    return [{"score": float(x)} for x in np.reshape(outputs["predictions"], [-1])]

  def measure(self, want, got, input_mask=None):
    a, b = np.reshape(want["predictions"], [-1]), np.reshape(got["predictions"], [-1])
    pearson, spearman = _pearson(a, b), _pearson(_ranks(a), _ranks(b))
    return {"measure": "min_pearson_spearman", "agreement": min(pearson, spearman),
            "pearson": pearson, "spearman": spearman}


class Tags(OutputsFamily):
  """Logits [B, S, N]: a label per word piece; served as entities (ner_serving)."""
  name = "tags"
  signature = ("words", "starts", "ends", "tags", "scores", "entity_types", "entity_starts",
               "entity_ends", "entity_scores", "label_names")
  probabilities = "softmax"
  served_by = "tagger"
  row_fields = ("entities",)
  tagged = True
  http_api = "predict"

  def http_answer(self, row, raw_scores=False):
    """HuggingFace's token-classification entities (aggregated): [{"entity_group", "score",
    "word", "start", "end"}], character offsets."""
    return [{"entity_group": e["type"], "score": float(e["score"]), "word": e["text"],
             "start": e["start"], "end": e["end"]} for e in row["entities"]]

  def rows(self, outputs, texts_a, texts_b, predictor):
    """The entity_* outputs ([B, E]; byte offsets into the UTF-8 texts, -1 padding) ->
    [{"entities": [...]}] with character offsets."""
    rows = []
    for i, text in enumerate(texts_a):
      encoded = None if text.isascii() else text.encode("utf-8")
      char = (lambda b: int(b)) if encoded is None else (
          lambda b: len(encoded[:b].decode("utf-8", "ignore")))
      entities = []
      for kind, start, end, score in zip(outputs["entity_types"][i], outputs["entity_starts"][i],
                                         outputs["entity_ends"][i], outputs["entity_scores"][i]):
        if start < 0:
          continue
        s, e = char(start), char(end)
        entities.append({"type": decode([kind])[0], "text": text[s:e], "start": s, "end": e,
                         "score": float(score)})
      rows.append({"entities": entities})
    return rows

  def measure(self, want, got, input_mask=None):
    """want["tags"], got["tags"]: sentences of tags (lists, or a TaggerModule's padded
    string arrays)."""
    return {"measure": "entity_f1",
            "agreement": entity_f1(_sentences(want["tags"]), _sentences(got["tags"]))}


class Spans(OutputsFamily):
  """{"start_logits", "end_logits"}: float32 [B, S]; the best span as the answer."""
  name = "spans"
  signature = ("start_logits", "end_logits", "start_index", "end_index", "answer")
  numeric = ("start_logits", "end_logits")
  served_by = "serving"
  row_fields = ("answer",)
  answers = True
  http_api = "predict"

  def http_answer(self, row, raw_scores=False):
    """HuggingFace's question-answering answer {"answer", "score", "start", "end"} (score:
    the span's start + end logit, as run_squad ranks spans; None when no span was found)."""
    answer = row["answer"]
    return {"answer": answer["text"], "score": answer.get("score"), "start": answer["start"],
            "end": answer["end"]}

  def serving_outputs(self, module, features, outputs, numeric=False):
    import tensorflow as tf
    start_logits = tf.cast(outputs["start_logits"], tf.float32)
    end_logits = tf.cast(outputs["end_logits"], tf.float32)
    if numeric:
      return {"start_logits": start_logits, "end_logits": end_logits}
    start, end = best_spans(start_logits, end_logits, features["input_mask"],
                            features["segment_ids"], module.max_answer_length)
    vocabulary = tf.constant([t or "" for t in module.preprocessor.vocabulary], tf.string)
    return {"start_logits": start_logits, "end_logits": end_logits, "start_index": start,
            "end_index": end,
            "answer": span_text(features["input_ids"], start, end, vocabulary)}

  def rows(self, outputs, texts_a, texts_b, predictor):
    """A SavedModel's answer (its word pieces joined, normalised) placed in the context: its
    first occurrence (tokenization.get_final_text over the whole context)."""
    rows = []
    for context, answer, start in zip(texts_b, decode(outputs["answer"]),
                                      outputs["start_index"]):
      found = None
      if start >= 0 and answer:
        for lower in (False, True):
          text = tokenization.get_final_text(answer, context, lower)
          if text != context or " ".join(context.split()).lower() == answer:
            found = text
            break
      offset = context.find(found) if found else -1
      rows.append({"answer": {"text": found or "", "start": offset if offset >= 0 else None,
                              "end": offset + len(found) if offset >= 0 else None}})
    return rows

  def measure(self, want, got, input_mask=None):
    same = ((_span_argmax(want["start_logits"], input_mask)
             == _span_argmax(got["start_logits"], input_mask))
            & (_span_argmax(want["end_logits"], input_mask)
               == _span_argmax(got["end_logits"], input_mask)))
    return {"measure": "span_agreement", "agreement": float(same.mean())}


class Pretraining(OutputsFamily):
  """The masked-LM and next-sentence outputs: trained, never served."""
  name = "pretraining"


for _family in (Sequence(), Vectors(), Classes(), MultiLabel(), Score(), Tags(), Spans(),
                Pretraining()):
  register(_family)
