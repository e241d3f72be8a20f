"""The HTTP APIs serve.py speaks, in the formats clients already speak. A model is served by
the API its task kind names (task_registry: TaskKind.served_api, from its outputs family):

  embed    POST /embed (TEI: {"inputs", "normalize", "truncate"} -> [[float]])
           POST /v1/embeddings (OpenAI: {"input", "model", "encoding_format", "dimensions"})
  rerank   POST /rerank (TEI: {"query", "texts", "return_text", "raw_scores", "truncate"} ->
           [{"index", "score"[, "text"]}], the best first)
  predict  POST /predict (TEI: {"inputs": a text, a pair [a, b], or a list of either,
           "raw_scores", "truncate"}; a tagger's and a squad model's answers in HuggingFace's
           token-classification and question-answering formats: the family's http_answer)

and POST / by the model's API (what huggingface_hub's InferenceClient calls given the
server's URL). parse(route, body, model) checks a request before any work and returns its
Work: the items to run ((text_a, text_b) pairs), their token counts and how to answer from
their rows. A bad request is an ApiError: a 4xx status and a one-line message naming the
field.
"""

import base64
import dataclasses
from typing import Callable

import numpy as np

from bert_keras import output_families

ROUTES = {"/embed": "embed", "/v1/embeddings": "embed", "/rerank": "rerank",
          "/predict": "predict", "/": None}


class ApiError(Exception):
  """A request refused: `status` (4xx) and a one-line message."""

  def __init__(self, status, message):
    super().__init__(message)
    self.status, self.message = status, message


@dataclasses.dataclass
class Model:
  """What the APIs need of the served model: predictor (prediction/predictors.Predictor),
  name (the model's id in answers), max_input_length (tokens, [CLS] and [SEP] counted),
  count_tokens((text_a, text_b)) -> int."""
  predictor: object
  name: str
  max_input_length: int
  count_tokens: Callable

  @property
  def kind(self):
    return self.predictor.kind


@dataclasses.dataclass
class Work:
  """A request checked: items ((text_a, text_b or None) pairs), their token counts, and
  answer(rows) -> the JSON answer."""
  items: list
  tokens: list
  answer: Callable


def _object(body):
  if not isinstance(body, dict):
    raise ApiError(422, "the body must be a JSON object")
  return body


def _string(value, field):
  if not isinstance(value, str):
    raise ApiError(422, f"\"{field}\" must be a string, got {type(value).__name__}")
  return value


def _strings(value, field):
  """A string or a non-empty list of strings -> (list, whether one string was given)."""
  if isinstance(value, str):
    return [value], True
  if not isinstance(value, list) or not value:
    raise ApiError(422, f"\"{field}\" must be a string or a non-empty list of strings")
  return [_string(v, f"{field}[{i}]") for i, v in enumerate(value)], False


def _flag(body, field, default):
  value = body.get(field, default)
  if value is None:
    return default
  if not isinstance(value, bool):
    raise ApiError(422, f"\"{field}\" must be true or false, got {value!r}"[:200])
  return value


def _counted(model, items, truncate):
  """The token count of each item; over max_input_length without `truncate`: a 413."""
  tokens = [model.count_tokens(item) for item in items]
  for i, count in enumerate(tokens):
    if count > model.max_input_length and not truncate:
      raise ApiError(413, f"input {i} has {count} tokens, more than the model's "
                     f"{model.max_input_length} (pass \"truncate\": true to cut it)")
  return [min(count, model.max_input_length) for count in tokens]


def _work(model, items, truncate, answer):
  if model.kind.pair == "required" and any(b is None for _, b in items):
    raise ApiError(422, f"the {model.kind.name} model reads pairs of texts: give each input "
                   "as [text, text_pair]")
  if model.kind.pair == "no" and any(b is not None for _, b in items):
    raise ApiError(422, f"the {model.kind.name} model reads one text, not a pair")
  return Work(items, _counted(model, items, truncate), answer)


def _unit(vector):
  vector = np.asarray(vector, np.float64)
  norm = np.linalg.norm(vector)
  return vector / norm if norm > 0 else vector


# ----------------------------------------------------------------------------------------------
# embed

def _embed(body, model):
  texts, _ = _strings(body.get("inputs"), "inputs")
  normalize = _flag(body, "normalize", True)

  def answer(rows):
    return [[float(x) for x in (_unit(r["embedding"]) if normalize else r["embedding"])]
            for r in rows]
  return _work(model, [(t, None) for t in texts], _flag(body, "truncate", False), answer)


def _openai_embeddings(body, model):
  value = body.get("input")
  if isinstance(value, list) and value and not all(isinstance(v, str) for v in value):
    raise ApiError(422, "\"input\" must be a string or a list of strings (token arrays are "
                   "not served)")
  texts, _ = _strings(value, "input")
  encoding = body.get("encoding_format") or "float"
  if encoding not in ("float", "base64"):
    raise ApiError(422, f"\"encoding_format\" must be float or base64, got {encoding!r}"[:200])
  dimensions = body.get("dimensions")
  if dimensions is not None and (not isinstance(dimensions, int) or isinstance(dimensions, bool)
                                 or dimensions < 1):
    raise ApiError(422, f"\"dimensions\" must be a positive integer, got {dimensions!r}"[:200])
  name = body.get("model") if isinstance(body.get("model"), str) else model.name

  def answer(rows):
    data = []
    for i, row in enumerate(rows):
      vector = np.asarray(row["embedding"], np.float64)
      if dimensions is not None:
        if dimensions > len(vector):
          raise ApiError(422, f"\"dimensions\" {dimensions} is more than the model's "
                         f"{len(vector)}")
        vector = _unit(vector[:dimensions])  # (a Matryoshka model's prefix, normalized)
      embedding = (base64.b64encode(vector.astype("<f4").tobytes()).decode("ascii")
                   if encoding == "base64" else [float(x) for x in vector])
      data.append({"object": "embedding", "index": i, "embedding": embedding})
    used = sum(work.tokens)
    return {"object": "list", "data": data, "model": name,
            "usage": {"prompt_tokens": used, "total_tokens": used}}
  work = _work(model, [(t, None) for t in texts], True, answer)  # (OpenAI's: cut, no error)
  return work


# ----------------------------------------------------------------------------------------------
# rerank

def _rerank(body, model):
  query = _string(body.get("query"), "query")
  texts, _ = _strings(body.get("texts"), "texts")
  raw, with_text = _flag(body, "raw_scores", False), _flag(body, "return_text", False)

  def answer(rows):
    scores = [float(r["score"]) for r in rows]
    if not raw:
      scores = [float(s) for s in output_families.sigmoid(np.asarray(scores))]
    ranked = sorted(range(len(scores)), key=lambda i: -scores[i])
    return [dict(index=i, score=scores[i], **({"text": texts[i]} if with_text else {}))
            for i in ranked]
  return _work(model, [(query, t) for t in texts], _flag(body, "truncate", False), answer)


# ----------------------------------------------------------------------------------------------
# predict

def _sequence(value, field):
  """A text, or a pair [text, text_pair] -> (text_a, text_b or None)."""
  if isinstance(value, str):
    return value, None
  if isinstance(value, list) and len(value) == 2 and all(isinstance(v, str) for v in value):
    return value[0], value[1]
  raise ApiError(422, f"\"{field}\" must be a text or a pair [text, text_pair]")


def _question(value, field):
  if not isinstance(value, dict):
    raise ApiError(422, f"\"{field}\" must be {{\"question\": ..., \"context\": ...}}")
  return (_string(value.get("question"), f"{field}.question"),
          _string(value.get("context"), f"{field}.context"))


def _predict(body, model, nest_one=False):
  """TEI's /predict (nest_one: POST /'s HuggingFace shape, one input's labels in a list)."""
  inputs = body.get("inputs")
  family = model.kind.family
  parameters = body.get("parameters") if isinstance(body.get("parameters"), dict) else {}
  raw = _flag(body, "raw_scores", False) or parameters.get("function_to_apply") == "none"
  top_k = parameters.get("top_k")
  if family.answers:
    one = isinstance(inputs, dict)
    if one:
      items = [_question(inputs, "inputs")]
    elif isinstance(inputs, list) and inputs:
      items = [_question(v, f"inputs[{i}]") for i, v in enumerate(inputs)]
    else:
      raise ApiError(422, "\"inputs\" must be {\"question\", \"context\"} or a non-empty list "
                     "of them")
  else:
    one = isinstance(inputs, str) or (
        isinstance(inputs, list) and len(inputs) == 2 and all(isinstance(v, str) for v in inputs)
        and model.kind.pair != "no")
    if one:
      items = [_sequence(inputs, "inputs")]
    elif isinstance(inputs, list) and inputs:
      items = [_sequence(v, f"inputs[{i}]") for i, v in enumerate(inputs)]
    else:
      raise ApiError(422, "\"inputs\" must be a text, a pair [text, text_pair] or a non-empty "
                     "list of them")

  def answer(rows):
    try:
      answers = [family.http_answer(row, raw) for row in rows]
    except ValueError as e:
      raise ApiError(422, str(e)) from None
    if isinstance(top_k, int) and not isinstance(top_k, bool) and top_k > 0:
      answers = [a[:top_k] if isinstance(a, list) else a for a in answers]
    if one:
      return [answers[0]] if nest_one and family.labelled else answers[0]
    return answers
  return _work(model, items, _flag(body, "truncate", False), answer)


PARSERS = {"/embed": _embed, "/v1/embeddings": _openai_embeddings, "/rerank": _rerank,
           "/predict": _predict}
ROOT = {"embed": _embed, "rerank": _rerank,
        "predict": lambda body, model: _predict(body, model, nest_one=True)}


def parse(route, body, model):
  """The Work of a request to `route` (one of ROUTES) with the JSON `body`; an ApiError (4xx)
  when the route is not the model's API or the body is wrong."""
  api = model.kind.served_api
  if ROUTES[route] not in (None, api):
    raise ApiError(404, f"this server serves a {model.kind.name} model: POST "
                   f"{next(r for r, a in ROUTES.items() if a == api)}")
  body = _object(body)
  return (ROOT[api] if route == "/" else PARSERS[route])(body, model)
