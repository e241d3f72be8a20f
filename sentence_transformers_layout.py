"""The sentence-transformers layout: a bi-encoder's directory beyond TensorFlow, written by
convert_checkpoint.py (huggingface_layout.save_sentence_transformers) and read as a
run_embeddings model directory (read_model_files); and a CrossEncoder's directory
(HuggingFace's layout, one output) read as a run_reranker model directory.

  modules.json                       the pipeline: Transformer (path "" here, "0_Transformer"
                                     in older directories), Pooling, Normalize when normalized
  config_sentence_transformers.json  {"model_type": "SentenceTransformer", "prompts",
                                     "default_prompt_name", "similarity_fn_name"}
  sentence_bert_config.json          the Transformer module's {"max_seq_length", "do_lower_case"}
  1_Pooling/config.json              {"word_embedding_dimension", "pooling_mode_*_token(s)"}
  2_Normalize/                       (empty: the Normalize module has no configuration)
  config.json, model.safetensors, vocab.txt, tokenizer_config.json, special_tokens_map.json
                                     the transformer, HuggingFace's layout (save_huggingface)

Read as untrusted data: JSON only, every field checked, nothing imported or executed; an
unsupported module or field is a one-line ValueError naming the file and the field.
"""

import json
import os

from bert_keras import model_files
from bert_keras import task_registry
from bert_keras.utils import file_io

ST_MODULES_FILE = "modules.json"
ST_CONFIG_FILE = "config_sentence_transformers.json"
ST_TRANSFORMER_CONFIG_FILE = "sentence_bert_config.json"
ST_POOLING_DIR = "1_Pooling"
ST_NORMALIZE_DIR = "2_Normalize"
SPECIAL_TOKENS_FILE = "special_tokens_map.json"
ST_FILES = (ST_MODULES_FILE, ST_CONFIG_FILE, ST_TRANSFORMER_CONFIG_FILE, ST_POOLING_DIR,
            ST_NORMALIZE_DIR, SPECIAL_TOKENS_FILE)
# Our poolings (modeling.POOLINGS) under the Pooling module's boolean keys, and its other modes.
ST_POOLING_KEYS = {"mean": "pooling_mode_mean_tokens", "cls": "pooling_mode_cls_token",
                   "max": "pooling_mode_max_tokens"}
_ST_OTHER_POOLING_KEYS = ("pooling_mode_mean_sqrt_len_tokens", "pooling_mode_weightedmean_tokens",
                          "pooling_mode_lasttoken")
_ST_MODULE_TYPES = ("Transformer", "Pooling", "Normalize")
_SPECIAL_TOKENS = {"unk_token": "[UNK]", "sep_token": "[SEP]", "pad_token": "[PAD]",
                   "cls_token": "[CLS]", "mask_token": "[MASK]"}


def write_sentence_transformers_modules(directory, hidden_size, pooling, normalize,
                                        max_seq_length):
  """The sentence-transformers files of a bi-encoder beside its transformer's HuggingFace files
  (which huggingface_layout.save_sentence_transformers writes): modules.json,
  config_sentence_transformers.json, sentence_bert_config.json, 1_Pooling/config.json,
  2_Normalize/ (when `normalize`) and special_tokens_map.json. `directory` exists.

  hidden_size: int, the vectors' size H. pooling: one of modeling.POOLINGS. normalize: bool.
  max_seq_length: int, the Transformer module's truncation length in word pieces.
  """
  if pooling not in ST_POOLING_KEYS:
    raise ValueError("pooling must be one of %s, got %r" % (", ".join(ST_POOLING_KEYS), pooling))
  join = lambda *names: os.path.join(directory, *names)  # noqa: E731
  module = "sentence_transformers.models."   # the name every version since 2.0 resolves
  modules = [{"idx": 0, "name": "0", "path": "", "type": module + "Transformer"},
             {"idx": 1, "name": "1", "path": ST_POOLING_DIR, "type": module + "Pooling"}]
  if normalize:
    modules.append({"idx": 2, "name": "2", "path": ST_NORMALIZE_DIR,
                    "type": module + "Normalize"})
    file_io.gfile.makedirs(join(ST_NORMALIZE_DIR))
  file_io.gfile.makedirs(join(ST_POOLING_DIR))
  pooling_config = {"word_embedding_dimension": int(hidden_size)}
  pooling_config.update({key: mode == pooling for mode, key in ST_POOLING_KEYS.items()})
  pooling_config.update({key: False for key in _ST_OTHER_POOLING_KEYS})
  pooling_config["include_prompt"] = True
  # The tokenizer lower-cases (tokenizer_config.json): the Transformer module need not.
  files = {ST_MODULES_FILE: modules,
           ST_CONFIG_FILE: {"model_type": "SentenceTransformer", "prompts": {},
                            "default_prompt_name": None,
                            "similarity_fn_name": "cosine"},
           ST_TRANSFORMER_CONFIG_FILE: {"max_seq_length": int(max_seq_length),
                                        "do_lower_case": False},
           os.path.join(ST_POOLING_DIR, model_files.HF_CONFIG_FILE): pooling_config,
           SPECIAL_TOKENS_FILE: _SPECIAL_TOKENS}
  for name, value in files.items():
    with file_io.gfile.GFile(join(name), "w") as f:
      f.write(json.dumps(value, indent=2) + "\n")


def is_sentence_transformers_dir(path):
  """Whether `path` is a directory of the sentence-transformers layout (a modules.json, and no
  task.json of ours)."""
  path = os.fspath(path)
  return (file_io.gfile.isdir(path) and file_io.gfile.exists(os.path.join(path, ST_MODULES_FILE))
          and not file_io.gfile.exists(os.path.join(path, model_files.TASK_FILE)))


def _st_field(path, value, field, kind, check=None, what=None):
  """`value` (a JSON field of `path`) when it is of `kind` (and passes `check`); else a
  one-line ValueError naming the file and the field."""
  ok = isinstance(value, kind) and not (kind is int and isinstance(value, bool))
  if not ok or (check is not None and not check(value)):
    raise ValueError("%s: \"%s\" must be %s, got %s" % (
        path, field, what or getattr(kind, "__name__", kind), json.dumps(value)[:80]))
  return value


def _st_modules(directory):
  """{"Transformer"|"Pooling"|"Normalize": the module's directory} of modules.json."""
  path = os.path.join(directory, ST_MODULES_FILE)
  modules = model_files.read_json(path)
  _st_field(path, modules, "modules", list, lambda v: v, "a non-empty list of modules")
  found = {}
  for i, module in enumerate(modules):
    _st_field(path, module, "[%d]" % i, dict, what="an object")
    kind = _st_field(path, module.get("type"), "[%d].type" % i, str)
    where = _st_field(path, module.get("path", ""), "[%d].path" % i, str,
                      lambda v: not os.path.isabs(v) and ".." not in v.replace("\\", "/").split("/")
                      and "://" not in v, "a path inside the directory")
    name = kind.rsplit(".", 1)[-1]
    if not kind.startswith("sentence_transformers.") or name not in _ST_MODULE_TYPES:
      raise ValueError("%s: module %d is %s: only sentence-transformers' %s modules are read"
                       % (path, i, kind, ", ".join(_ST_MODULE_TYPES)))
    if name in found or (name == "Transformer") != (i == 0):
      raise ValueError("%s: expected one Transformer (the first module), one Pooling and at "
                       "most one Normalize, got %s" % (path, ", ".join(
                           str(m.get("type")) for m in modules if isinstance(m, dict))))
    found[name] = os.path.join(directory, where) if where else directory
  if "Pooling" not in found:
    raise ValueError("%s: no Pooling module (the vectors' pooling is unknown)" % path)
  return found


def _st_pooling(directory):
  """(pooling, embedding dimension or None) of a Pooling module's config.json: the legacy
  boolean keys or the newer "pooling_mode"; one of mean, cls, max."""
  path = os.path.join(directory, model_files.HF_CONFIG_FILE)
  if not file_io.gfile.exists(path):
    raise ValueError("%s: no such file (the Pooling module's configuration)" % path)
  config = model_files.read_json_object(path)
  dimension = config.get("word_embedding_dimension", config.get("embedding_dimension"))
  if dimension is not None:
    _st_field(path, dimension, "word_embedding_dimension", int, lambda v: v > 0,
              "a positive integer")
  if "pooling_mode" in config:
    mode = config["pooling_mode"]
    modes = [mode] if isinstance(mode, str) else mode
    _st_field(path, modes, "pooling_mode", list, lambda v: len(v) == 1 and v[0] in ST_POOLING_KEYS,
              "one of %s" % ", ".join(ST_POOLING_KEYS))
    return modes[0], dimension
  modes = []
  for key in tuple(ST_POOLING_KEYS.values()) + _ST_OTHER_POOLING_KEYS:
    if _st_field(path, config.get(key, False), key, bool):
      modes.append(key)
  if len(modes) != 1 or modes[0] not in ST_POOLING_KEYS.values():
    raise ValueError("%s: expected exactly one of %s true, got %s" % (
        path, ", ".join(ST_POOLING_KEYS.values()), ", ".join(modes) or "none"))
  return next(mode for mode, key in ST_POOLING_KEYS.items() if key == modes[0]), dimension


def read_sentence_transformers(directory):
  """What a sentence-transformers directory says about its vectors: {"transformer_dir" (the
  Transformer module's directory: `directory`, or 0_Transformer/ in older layouts),
  "pooling" (mean, cls or max), "normalize" (a Normalize module), "max_seq_length" (int or
  None), "do_lower_case" (True when its Transformer module lower-cases, else None),
  "embedding_dimension" (int or None)}. A file or field we cannot read as that is a one-line
  ValueError naming it."""
  directory = os.fspath(directory).rstrip("/") or "/"
  modules = _st_modules(directory)
  pooling, dimension = _st_pooling(modules["Pooling"])
  transformer_dir = modules["Transformer"]
  if not file_io.gfile.isdir(transformer_dir):
    raise ValueError("%s: the Transformer module's directory %s does not exist"
                     % (os.path.join(directory, ST_MODULES_FILE), transformer_dir))
  max_seq_length, lower = None, None
  path = os.path.join(transformer_dir, ST_TRANSFORMER_CONFIG_FILE)
  if file_io.gfile.exists(path):
    config = model_files.read_json_object(path)
    if config.get("max_seq_length") is not None:
      max_seq_length = _st_field(path, config["max_seq_length"], "max_seq_length", int,
                                 lambda v: v > 0, "a positive integer")
    if _st_field(path, config.get("do_lower_case", False), "do_lower_case", bool):
      lower = True
  return {"transformer_dir": transformer_dir, "pooling": pooling,
          "normalize": "Normalize" in modules, "max_seq_length": max_seq_length,
          "do_lower_case": lower, "embedding_dimension": dimension}


def transformer_dir(path):
  """The directory holding the transformer's weights of `path`: the Transformer module's of a
  sentence-transformers directory, else `path` itself."""
  path = os.fspath(path)
  if not is_sentence_transformers_dir(path):
    return path
  return read_sentence_transformers(path)["transformer_dir"]


def sentence_transformers_description(directory):
  """A sentence-transformers directory as read_model_files describes a run_embeddings model
  directory: {"task": "embeddings", "pooling", "normalize", "max_seq_length",
  "do_lower_case", "labels": None, "directory", "bert_config_file" (the transformer's
  config.json), "vocab_file", "options": {}, "layout": "sentence_transformers"}."""
  st = read_sentence_transformers(directory)
  where = st["transformer_dir"]
  existing = lambda name: (os.path.join(where, name)  # noqa: E731
                           if file_io.gfile.exists(os.path.join(where, name)) else None)
  config_file = existing(model_files.HF_CONFIG_FILE) or existing(model_files.CONFIG_FILE)
  if config_file is not None and st["embedding_dimension"] is not None:
    hidden = model_files.read_json_object(config_file).get("hidden_size")
    if isinstance(hidden, int) and hidden != st["embedding_dimension"]:
      raise ValueError("%s: word_embedding_dimension %d, but the transformer's %s has "
                       "hidden_size %d" % (os.path.join(directory, ST_POOLING_DIR),
                                           st["embedding_dimension"], config_file, hidden))
  vocab_file = existing(model_files.VOCAB_FILE)
  lower = st["do_lower_case"] or model_files.read_do_lower_case(where, vocab_file)
  return {"task": "embeddings", "multi_label": False, "labels": None,
          "pooling": st["pooling"], "normalize": st["normalize"],
          "max_seq_length": st["max_seq_length"], "do_lower_case": lower,
          "directory": os.fspath(directory).rstrip("/") or "/", "bert_config_file": config_file,
          "vocab_file": vocab_file, "options": {}, "layout": "sentence_transformers"}


def cross_encoder_description(directory):
  """A CrossEncoder directory (HuggingFace's layout: no task.json, no modules.json, a
  config.json of the reranker kind's architecture with one output) described as a
  run_reranker model directory; None for any other directory. (A one-output classifier is a
  relevance scorer, as TEI reads it; a regression exported this way reads as one too.)"""
  kind = task_registry.get("reranker")
  config_file = os.path.join(directory, model_files.HF_CONFIG_FILE)
  if (file_io.gfile.exists(os.path.join(directory, model_files.TASK_FILE))
      or file_io.gfile.exists(os.path.join(directory, ST_MODULES_FILE))
      or not file_io.gfile.exists(config_file)):
    return None
  config = model_files.read_json_object(config_file)
  labels = config.get("id2label") or {}
  outputs = config.get("num_labels", len(labels) if isinstance(labels, dict) else None)
  if kind.hf_architecture not in (config.get("architectures") or []) or outputs != 1:
    return None
  vocab = os.path.join(directory, model_files.VOCAB_FILE)
  vocab = vocab if file_io.gfile.exists(vocab) else None
  length = None
  tokenizer_config = os.path.join(directory, model_files.TOKENIZER_CONFIG_FILE)
  if file_io.gfile.exists(tokenizer_config):
    value = model_files.read_json_object(tokenizer_config).get("model_max_length")
    if isinstance(value, int) and not isinstance(value, bool) and 0 < value < 1 << 20:
      length = value  # (transformers' "no limit" is a huge number)
  return {"task": kind.name, "multi_label": False, "labels": None, "max_seq_length": length,
          "do_lower_case": model_files.read_do_lower_case(directory, vocab),
          "directory": os.fspath(directory).rstrip("/") or "/", "bert_config_file": config_file,
          "vocab_file": vocab, "options": {}, "layout": "cross_encoder"}


def read_model_files(path):
  """model_files.read_model_files(path); a sentence-transformers directory (modules.json, no
  task.json) described as a run_embeddings model directory (sentence_transformers_description).
  Every reader of a model directory reads it through here (a CrossEncoder directory: only what
  predicts, predictors.load)."""
  directory = model_files.model_dir_of(os.fspath(path))
  if is_sentence_transformers_dir(directory):
    return sentence_transformers_description(directory)
  return model_files.read_model_files(path)
