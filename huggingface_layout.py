"""HuggingFace's layout of a BERT model, and sentence-transformers' of a bi-encoder, written:
config.json (hf_config), model.safetensors (hf_state_dict: checkpoints' names through
checkpoints.hf_name), vocab.txt, tokenizer_config.json and tokenizer.json (tokenizer_json: the
same WordPiece for HuggingFace's `tokenizers`, which TEI, ONNX Runtime servers and
transformers.js read; export_saved_model.py's TFLite / ONNX exports write it too); a
bi-encoder's modules beside them (sentence_transformers_layout.write_sentence_transformers_modules).
What transformers and sentence-transformers load; checkpoints.load_model reads them back.

  huggingface_layout.save_huggingface(model, "/tmp/hf", vocab_file="vocab.txt")
  huggingface_layout.save_sentence_transformers(encoder, "/tmp/st", 128, "mean", True)
"""

import json
import os

from absl import logging
import numpy as np

from bert_keras import checkpoints
from bert_keras import model_files
from bert_keras import modeling
from bert_keras import sentence_transformers_layout
from bert_keras import task_registry
from bert_keras import tokenization
from bert_keras.utils import file_io
from bert_keras.utils import weight_files

# Our activation names -> HuggingFace's, so that each side computes the same function: the
# original's (and our) "gelu" is the tanh form, HuggingFace's "gelu_new"; HuggingFace's "gelu"
# is the exact erf form, our "gelu_exact".
_HF_ACTIVATION_NAMES = {"gelu": "gelu_new", "gelu_exact": "gelu", "gelu_erf": "gelu",
                        "relu": "relu", "tanh": "tanh", "silu": "silu", "swish": "silu"}
TOKENIZER_JSON_FILE = "tokenizer.json"
_HF_FILES = ("config.json", "model.safetensors", "vocab.txt", "tokenizer_config.json",
             TOKENIZER_JSON_FILE)
# The special tokens of BERT's vocabularies: tokenizer.json's added_tokens (those in the vocab).
_SPECIAL_TOKENS = ("[PAD]", "[UNK]", "[CLS]", "[SEP]", "[MASK]")
# Python's str.lower makes a capital sigma final ("ς") when a cased letter precedes it and none
# follows, case-ignorable characters (accents, apostrophes) skipped both ways; the original
# lower-cases cleaned text, so the control characters that cleaning deletes are skipped too.
# Escapes that Oniguruma (tokenizers) and JavaScript's "u" regexes (transformers.js) both read
# as code points (Oniguruma reads \x80-\xff as UTF-8 bytes).
_SKIPPED = (r"(?:\p{Case_Ignorable}"
            r"|[\u0000-\u0008\u000b\u000c\u000e-\u001f\u007f-\u009f\ufffd])*")
_CASED = r"[^\P{Cased}\p{Case_Ignorable}]"  # (cased, not case-ignorable as U+0345 is too)
_FINAL_SIGMA = r"(?<=" + _CASED + _SKIPPED + r")\u03a3(?!" + _SKIPPED + _CASED + ")"


def tokenizer_json(vocab_file, do_lower_case, max_seq_length):
  """tokenizer.json (HuggingFace `tokenizers`' format, a str) of our FullTokenizer of
  `vocab_file`: what TEI, ONNX Runtime servers and transformers.js tokenize with, giving the
  word-piece ids that FullTokenizer, [CLS] and [SEP] give.

  Each step is the original BERT's: BertNormalizer (clean_text; handle_chinese_chars; accents
  stripped and lower-cased only when do_lower_case), BertPreTokenizer (whitespace, then each
  punctuation character alone), WordPiece (greedy longest match, "##" continuations, the whole
  word [UNK] when a piece fails or it is longer than WordpieceTokenizer's
  max_input_chars_per_word), TemplateProcessing ([CLS] $A [SEP], and [CLS] $A [SEP] $B:1
  [SEP]:1 for pairs), truncation to max_seq_length tokens (the special ones included), the
  WordPiece decoder, and the special tokens of the vocab as added_tokens. Lower-casing is
  Python's str.lower, whose Greek final sigma ("ΟΔΟΣ" -> "οδος") BertNormalizer lacks: a Replace
  normalizer before it writes "ς" for such a "Σ" (_FINAL_SIGMA).

  Known differences, none expressible here: `tokenizers` reads a special token written in the
  text ("[MASK]") as that token (we split it: "[", "mask", "]"; its encode_special_tokens
  setting, not saved in the file, does as we do); it deletes private-use characters (U+E000...),
  which we keep ([UNK]); it takes U+2B920-2CEAF as Chinese where we (and the original) take
  U+2B820-2CEAF; its Unicode tables are of other versions than Python's (a character assigned
  in one version and not the other, as new punctuation, may split or case otherwise); a pair
  whose texts are both cut to half of an odd number of word pieces (max_seq_length - 3) gives
  the odd one to text b when b was the longer or as long (ours, the original's
  truncate_seq_pair: always to text a); and text b "" is a pair there (a second [SEP]), a
  single text in our preprocessing.

  Args:
    vocab_file: str, the vocab.txt (gs:// works); it must hold [UNK], [CLS] and [SEP].
    do_lower_case: bool, the tokenizer's (an uncased model's: True).
    max_seq_length: int, the length the model takes: longer inputs are truncated to it.

  Returns:
    the JSON document, a str (UTF-8 text, ending in a newline).
  """
  tokenizer = tokenization.FullTokenizer(vocab_file, do_lower_case=bool(do_lower_case))
  vocab, wordpiece = tokenizer.vocab, tokenizer.wordpiece_tokenizer
  tokenization.check_vocab(vocab, vocab_file, required=(wordpiece.unk_token, "[CLS]", "[SEP]"))
  lower = bool(do_lower_case)
  specials = sorted((vocab[token], token) for token in _SPECIAL_TOKENS if token in vocab)

  def special(name, type_id):
    return {"SpecialToken": {"id": name, "type_id": type_id}}

  def sequence(name, type_id):
    return {"Sequence": {"id": name, "type_id": type_id}}

  normalizer = {"type": "BertNormalizer", "clean_text": True, "handle_chinese_chars": True,
                "strip_accents": lower, "lowercase": lower}
  if lower:
    normalizer = {"type": "Sequence", "normalizers": [
        {"type": "Replace", "pattern": {"Regex": _FINAL_SIGMA}, "content": "\u03c2"},
        normalizer]}
  document = {
      "version": "1.0",
      "truncation": {"direction": "Right", "max_length": int(max_seq_length),
                     "strategy": "LongestFirst", "stride": 0},
      "padding": None,
      "added_tokens": [{"id": i, "content": token, "single_word": False, "lstrip": False,
                        "rstrip": False, "normalized": False, "special": True}
                       for i, token in specials],
      "normalizer": normalizer,
      "pre_tokenizer": {"type": "BertPreTokenizer"},
      "post_processor": {
          "type": "TemplateProcessing",
          "single": [special("[CLS]", 0), sequence("A", 0), special("[SEP]", 0)],
          "pair": [special("[CLS]", 0), sequence("A", 0), special("[SEP]", 0),
                   sequence("B", 1), special("[SEP]", 1)],
          "special_tokens": {token: {"id": token, "ids": [vocab[token]], "tokens": [token]}
                             for token in ("[CLS]", "[SEP]")}},
      "decoder": {"type": "WordPiece", "prefix": "##", "cleanup": True},
      "model": {"type": "WordPiece", "unk_token": wordpiece.unk_token,
                "continuing_subword_prefix": "##",
                "max_input_chars_per_word": int(wordpiece.max_input_chars_per_word),
                "vocab": dict(sorted(vocab.items(), key=lambda item: item[1]))},
  }
  return json.dumps(document, ensure_ascii=False, indent=2) + "\n"


def write_tokenizer_json(directory, vocab_file, do_lower_case, max_seq_length):
  """tokenizer.json (tokenizer_json) in `directory`, written atomically (a temporary, renamed);
  returns its path, or None (with a warning) for a vocabulary without [UNK], [CLS] and [SEP],
  which no BERT tokenizer.json describes. do_lower_case None (unknown): True, as
  tokenization's default."""
  path = os.path.join(directory, TOKENIZER_JSON_FILE)
  lower = True if do_lower_case is None else do_lower_case
  try:
    text = tokenizer_json(vocab_file, lower, max_seq_length)
  except tokenization.VocabError as e:
    logging.warning("no %s: %s", TOKENIZER_JSON_FILE, e)
    return None
  file_io.write_text_atomic(path, text)
  return path


def hf_architecture(model):
  """The transformers class name of `model` (BertModel, BertForPreTraining, ...): its task
  kind's (task_registry); a TypeError for a model of no kind, or of a kind without one."""
  try:
    kind = task_registry.of_model(model)
  except TypeError:
    raise TypeError("no HuggingFace architecture for %s" % type(model).__name__) from None
  if kind.hf_architecture is None:
    raise TypeError("a %s model has no HuggingFace form (its task kind names no transformers "
                    "class)" % kind.name)
  return kind.hf_architecture


def hf_state_dict(model):
  """{HuggingFace state-dict name: float32 array} of `model`: tf1_variable_map's names through
  hf_name, Linear kernels transposed to [out, in]. A bare BertModel's names have no "bert."
  prefix (as transformers' BertModel saves them); the MLM decoder weight is tied to the word
  embeddings and written once, as its bias (transformers ties both on load)."""
  prefix = "" if hf_architecture(model) == "BertModel" else "bert."
  state = {}
  for tf1, variable in checkpoints.tf1_variable_map(model).items():
    name, transpose = checkpoints.hf_name(tf1)
    if tf1.startswith("bert/"):
      name = prefix + name[len("bert."):]
    value = np.asarray(variable.numpy(), np.float32)
    state[name] = np.ascontiguousarray(value.T if transpose else value)
  if "cls.predictions.bias" in state:
    state["cls.predictions.decoder.bias"] = state["cls.predictions.bias"]
  return state


def hf_config(model, label_names=None):
  """transformers' config.json (a dict) of `model`: BertConfig's fields, model_type "bert",
  the architecture, layer_norm_eps, hidden_act in HuggingFace's name of the same function,
  for a classifier id2label / label2id (label_names, default LABEL_0...), and for one score
  (outputs "score") sentence-transformers' CrossEncoder activation: the identity."""
  config = checkpoints.encoder_of(model).config
  act = config.hidden_act
  if not isinstance(act, str) or act.lower() not in _HF_ACTIVATION_NAMES:
    raise ValueError("hidden_act %r has no HuggingFace name" % (act,))
  out = {k: v for k, v in config.to_dict().items() if k not in ("architectures", "model_type")}
  out.update(model_type="bert", architectures=[hf_architecture(model)],
             hidden_act=_HF_ACTIVATION_NAMES[act.lower()],
             layer_norm_eps=float(getattr(config, "layer_norm_eps", 1e-12)))
  head = getattr(model, "classifier", None)
  if head is not None:
    count = int(head.output_weights.shape[0])
    if label_names is None:
      label_names = getattr(model, "labels", None)  # a tagger's tags, from load_model
    names = list(label_names) if label_names is not None else ["LABEL_%d" % i
                                                               for i in range(count)]
    if len(names) != count:
      raise ValueError("%d label names for a head of %d labels" % (len(names), count))
    out["id2label"] = {str(i): str(n) for i, n in enumerate(names)}
    out["label2id"] = {str(n): i for i, n in enumerate(names)}
  if task_registry.of_model(model).family.ranks:
    # One score per pair (a regression, a reranker): sentence-transformers' CrossEncoder
    # returns the logit itself (its default for one output is the sigmoid of it).
    out["sentence_transformers"] = {"activation_fn": "torch.nn.modules.linear.Identity"}
  return out


def save_huggingface(model, directory, vocab_file=None, do_lower_case=None, label_names=None,
                     max_seq_length=None):
  """Writes `model` in HuggingFace's layout, for transformers' from_pretrained and
  sentence-transformers: config.json (hf_config), model.safetensors (hf_state_dict, float32,
  Linear weights [out, in]), vocab.txt, tokenizer_config.json (do_lower_case, the
  tokenizer class, model_max_length: the length it was trained at, else max_position_embeddings)
  and tokenizer.json (tokenizer_json, truncating at model_max_length). Atomic as save_pretrained:
  written into a temporary sibling, then renamed; an existing `directory` is replaced only
  when it holds nothing but these files (else ValueError). A one-output classifier (a
  regression, a reranker) is what sentence-transformers' CrossEncoder reads (hf_config).

  Args:
    model: a modeling.BertModel or a task model holding one (hf_architecture names its
      transformers class).
    directory: str or path-like, the directory to write.
    vocab_file: str or None, copied as vocab.txt (default: what load_model set). Required.
    do_lower_case: bool or None (default: what load_model set; left out when unknown).
    label_names: list of str or None, a classifier's id2label / label2id (default:
      model.labels, else LABEL_0, LABEL_1, ...); as many as the head's outputs.
    max_seq_length: int or None, the sequence length the model was trained at: tokenizer_config's
      model_max_length, where transformers (and CrossEncoder) truncate (default:
      max_position_embeddings).

  Returns:
    `directory` (str, without a trailing "/").
  """
  directory = os.fspath(directory).rstrip("/") or "/"
  vocab_file = vocab_file or checkpoints.loaded_attribute(model, "vocab_file")
  if do_lower_case is None:
    do_lower_case = checkpoints.loaded_attribute(model, "do_lower_case")
  if not vocab_file or not file_io.gfile.exists(vocab_file):
    raise ValueError("save_huggingface: a vocab file is needed (%s)" % (vocab_file or "none"))
  checkpoints.check_replaceable(directory, _HF_FILES)
  config = hf_config(model, label_names)
  with file_io.replaced_directory(directory) as tmp:  # (.<name>.tmp-<pid>)
    _write_huggingface(model, tmp, config, vocab_file, do_lower_case, max_seq_length)
  return directory


def _write_huggingface(model, directory, config, vocab_file, do_lower_case,
                       max_seq_length=None, truncation=None):
  """save_huggingface's files, written into `directory` (which exists). tokenizer.json
  truncates at `truncation` (default: tokenizer_config.json's model_max_length)."""
  gfile = file_io.gfile
  with gfile.GFile(os.path.join(directory, model_files.HF_CONFIG_FILE), "w") as f:
    f.write(json.dumps(config, indent=2, sort_keys=True) + "\n")
  weight_files.write_safetensors(os.path.join(directory, "model.safetensors"),
                                 hf_state_dict(model))
  gfile.copy(vocab_file, os.path.join(directory, model_files.VOCAB_FILE), overwrite=True)
  # model_max_length: transformers truncates there (CrossEncoder's default length): the length
  # the model was trained at, else the position table's (never run past it).
  positions = checkpoints.encoder_of(model).config.max_position_embeddings
  length = min(int(max_seq_length), positions) if max_seq_length else positions
  tokenizer = {"tokenizer_class": "BertTokenizer", "model_max_length": int(length)}
  if do_lower_case is not None:
    tokenizer["do_lower_case"] = bool(do_lower_case)
  with gfile.GFile(os.path.join(directory, model_files.TOKENIZER_CONFIG_FILE), "w") as f:
    f.write(json.dumps(tokenizer, indent=2, sort_keys=True) + "\n")
  write_tokenizer_json(directory, vocab_file, do_lower_case, truncation or length)


def save_sentence_transformers(model, directory, max_seq_length, pooling=None, normalize=None,
                               vocab_file=None, do_lower_case=None):
  """Writes a bi-encoder in sentence-transformers' layout (sentence_transformers_layout.py lists
  its files):
  the transformer as save_huggingface writes it (BertModel; tokenizer.json truncating at
  max_seq_length) at the top level, and the Transformer, Pooling and (when normalized)
  Normalize modules, so that
  sentence_transformers.SentenceTransformer(directory).encode(texts) returns the vectors
  `model` computes. Atomic as save_huggingface (an existing `directory` is replaced only when
  it holds nothing but these files).

  Args:
    model: a modeling.BertSentenceEncoder, or a BertModel (then pass pooling).
    directory: str or path-like, the directory to write.
    max_seq_length: int, sentence_bert_config.json's truncation length (word pieces).
    pooling, normalize: the Pooling and Normalize modules (default: the model's).
    vocab_file, do_lower_case: as save_huggingface.

  Returns:
    `directory` (str, without a trailing "/").
  """
  directory = os.fspath(directory).rstrip("/") or "/"
  pooling = pooling or getattr(model, "pooling", None)
  normalize = bool(getattr(model, "normalize", False) if normalize is None else normalize)
  if pooling not in modeling.POOLINGS:
    raise ValueError("save_sentence_transformers: pooling must be one of %s, got %r"
                     % (", ".join(modeling.POOLINGS), pooling))
  encoder = checkpoints.encoder_of(model)
  if not 0 < int(max_seq_length) <= encoder.config.max_position_embeddings:
    raise ValueError("save_sentence_transformers: max_seq_length %s is not in 1..%d (the "
                     "model's max_position_embeddings)"
                     % (max_seq_length, encoder.config.max_position_embeddings))
  vocab_file = vocab_file or checkpoints.loaded_attribute(model, "vocab_file")
  if do_lower_case is None:
    do_lower_case = checkpoints.loaded_attribute(model, "do_lower_case")
  if not vocab_file or not file_io.gfile.exists(vocab_file):
    raise ValueError("save_sentence_transformers: a vocab file is needed (%s)"
                     % (vocab_file or "none"))
  checkpoints.check_replaceable(directory, _HF_FILES + sentence_transformers_layout.ST_FILES)
  config = hf_config(encoder)
  with file_io.replaced_directory(directory) as tmp:  # (.<name>.tmp-<pid>)
    _write_huggingface(encoder, tmp, config, vocab_file, do_lower_case,
                       truncation=int(max_seq_length))  # (tokenizer.json's, as ST's)
    sentence_transformers_layout.write_sentence_transformers_modules(
        tmp, encoder.config.hidden_size, pooling, normalize, max_seq_length)
  return directory
