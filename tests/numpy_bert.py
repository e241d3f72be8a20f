"""BERT's forward pass in NumPy over a HuggingFace state dict and config.json: an oracle
independent of modeling.py (and of torch), written from the BERT paper and the Transformer's
equations with HuggingFace's parameter names ([out, in] Linear weights)."""

import math

import numpy as np


def _linear(x, state, name):
  return x @ state[name + ".weight"].T + state[name + ".bias"]


def _layer_norm(x, state, name, eps):
  mean = x.mean(-1, keepdims=True)
  var = ((x - mean) ** 2).mean(-1, keepdims=True)
  return (x - mean) / np.sqrt(var + eps) * state[name + ".weight"] + state[name + ".bias"]


def _activation(name):
  erf = np.vectorize(math.erf)
  if name == "gelu":  # HuggingFace's "gelu": the exact erf form
    return lambda x: 0.5 * x * (1.0 + erf(x / math.sqrt(2.0)))
  if name in ("gelu_new", "gelu_pytorch_tanh"):  # the tanh form (the original's)
    return lambda x: 0.5 * x * (1.0 + np.tanh(math.sqrt(2.0 / math.pi)
                                              * (x + 0.044715 * x ** 3)))
  if name == "relu":
    return lambda x: np.maximum(x, 0.0)
  raise ValueError(name)


def forward(state, config, input_ids, input_mask, segment_ids):
  """{"sequence_output" [B, S, H], "pooled_output" [B, H], and the logits of every head the
  state holds: "mlm" [B, S, V], "nsp" [B, 2], "classifier" [B, N] (or, for
  BertForTokenClassification, "tagger" [B, S, N]), "start"/"end" [B, S]}."""
  state = {k: np.asarray(v, np.float64) for k, v in state.items()}
  prefix = "bert." if any(k.startswith("bert.") for k in state) else ""
  enc = {k[len(prefix):]: v for k, v in state.items() if k.startswith(prefix)}
  eps = config.get("layer_norm_eps", 1e-12)
  act = _activation(config["hidden_act"])
  heads, size = config["num_attention_heads"], config["hidden_size"]
  batch, seq = input_ids.shape
  x = (enc["embeddings.word_embeddings.weight"][input_ids]
       + enc["embeddings.position_embeddings.weight"][np.arange(seq)][None]
       + enc["embeddings.token_type_embeddings.weight"][segment_ids])
  x = _layer_norm(x, enc, "embeddings.LayerNorm", eps)
  bias = (1.0 - input_mask[:, None, None, :].astype(np.float64)) * -10000.0
  width = size // heads
  for i in range(config["num_hidden_layers"]):
    p = f"encoder.layer.{i}."

    def split(t):
      return t.reshape(batch, seq, heads, width).transpose(0, 2, 1, 3)

    q, k, v = (split(_linear(x, enc, p + "attention.self." + n))
               for n in ("query", "key", "value"))
    scores = q @ k.transpose(0, 1, 3, 2) / math.sqrt(width) + bias
    probs = np.exp(scores - scores.max(-1, keepdims=True))
    probs /= probs.sum(-1, keepdims=True)
    context = (probs @ v).transpose(0, 2, 1, 3).reshape(batch, seq, size)
    x = _layer_norm(_linear(context, enc, p + "attention.output.dense") + x, enc,
                    p + "attention.output.LayerNorm", eps)
    inner = act(_linear(x, enc, p + "intermediate.dense"))
    x = _layer_norm(_linear(inner, enc, p + "output.dense") + x, enc, p + "output.LayerNorm",
                    eps)
  pooled = np.tanh(_linear(x[:, 0], enc, "pooler.dense"))
  out = {"sequence_output": x, "pooled_output": pooled}
  if "cls.predictions.bias" in state:
    h = act(_linear(x, state, "cls.predictions.transform.dense"))
    h = _layer_norm(h, state, "cls.predictions.transform.LayerNorm", eps)
    out["mlm"] = h @ enc["embeddings.word_embeddings.weight"].T + state["cls.predictions.bias"]
  if "cls.seq_relationship.weight" in state:
    out["nsp"] = _linear(pooled, state, "cls.seq_relationship")
  if "classifier.weight" in state:
    if config.get("architectures") == ["BertForTokenClassification"]:
      out["tagger"] = _linear(x, state, "classifier")   # [B, S, N]: a label per token
    else:
      out["classifier"] = _linear(pooled, state, "classifier")
  if "qa_outputs.weight" in state:
    logits = _linear(x, state, "qa_outputs")
    out["start"], out["end"] = logits[..., 0], logits[..., 1]
  return out
