"""Every task kind, declared once.

A task kind is a model of modeling.py (BertModel, BertClassifier, ...) and everything the
rest of the package needs to know about it: its name (load_model's task=, task.json's
"task", the scripts' --task), whether its outputs are named labels (labels.txt), how many
outputs it has when that is fixed, the HuggingFace architecture it is written as, what its
outputs are (`outputs`: its family in output_families, which carries what serving, export,
predict and the int8 measure do with them), the loss and metrics Keras compiles it with,
whether a second text goes in, and what it is served as. checkpoints, preprocessing,
serving, export_saved_model, convert_checkpoint, runtime/model_dir and prediction/predictors.py look
kinds up here instead of comparing task names; tests/test_task_registry.py walks every
registered kind through every surface, so a kind that misses one fails a test.

Adding a kind: its head (a keras.Model in modeling.py or a module of its own), one
`register(TaskKind(...))`, its data reader, its tests.

    kind = task_registry.get("classifier")
    model = kind.build(config, num_labels=2)     # modeling.BertClassifier(config, 2)
    task_registry.of_model(model).hf_architecture   # "BertForSequenceClassification"
"""

import dataclasses
import types
from typing import Callable, Optional

import keras

from bert_keras import modeling
from bert_keras import output_families

# How a second text goes in: never, when given, always.
PAIRS = ("no", "optional", "required")


def _no_compile_options():
  return {}


@dataclasses.dataclass(frozen=True)
class TaskKind:
  """One task kind (see the module docstring).

  name: the kind's name everywhere (load_model's task=, task.json's "task", --task).
  model: the keras.Model class built for it, model(config_or_encoder, [num_labels,]
    **model_options).
  outputs: the name of its outputs family (output_families: what serving, export, predict and
    the int8 measure do with them); `family` is that family.
  hf_architecture: the transformers class it is written as (config.json's architectures), or
    None: a kind with no HuggingFace form (huggingface_layout refuses to write it).
  labels: True when the model is built with num_labels named outputs (labels.txt beside it).
  num_labels: the fixed number of outputs (a regression's 1), or None.
  model_options: constructor keywords that make the kind (multi_label=True).
  compile_options: () -> keras.Model.compile's loss, loss_weights and metrics ({} for none).
  pair: one of PAIRS: whether its inputs take a second text.
  served_as: the kind a SavedModel or predict.py serves in its place (a pretrained encoder
    is served as embeddings), or None: served as itself (when `servable`).
  servable: SavedModel export and predict.py serve it.
  text_input: preprocessing.TextModel takes it (load_model(..., text_input=True)).
  task_json: task.json's "task" of a model directory of this kind (with model_options as
    further entries: a multi-label classifier is "classifier" with "multi_label": true), or
    None: no model directory of its own (a checkpoint directory).
  variant_of: the kind whose scripts make this one by a flag (run_classifier's and export's
    --multi_label, or one output: a regression), or None.
  http_api: the HTTP API serve.py answers it with (server/apis.py), where not its family's
    (output_families: http_api): a reranker's "rerank" beside the regression's "predict".
  doc_windows: a long text may be read as windows (run_classifier's --doc_stride; task.json's
    "doc_stride" then fits its "max_seq_length").
  aliases: older names read as this kind (task.json's "pretraining").
  description: one line for --help and errors.
  """
  name: str
  model: type
  outputs: str
  hf_architecture: Optional[str]
  labels: bool = False
  num_labels: Optional[int] = None
  model_options: types.MappingProxyType = dataclasses.field(
      default_factory=lambda: types.MappingProxyType({}))
  compile_options: Callable[[], dict] = _no_compile_options
  pair: str = "optional"
  served_as: Optional[str] = None
  servable: bool = True
  text_input: bool = True
  task_json: Optional[str] = None
  variant_of: Optional[str] = None
  doc_windows: bool = False
  http_api: Optional[str] = None
  aliases: tuple = ()
  description: str = ""

  def __post_init__(self):
    try:
      output_families.get(self.outputs)
    except ValueError as e:
      raise ValueError(f"task kind {self.name}: {e}") from None
    if self.pair not in PAIRS:
      raise ValueError(f"task kind {self.name}: pair {self.pair!r} is not one of "
                       f"{', '.join(PAIRS)}")
    object.__setattr__(self, "model_options", types.MappingProxyType(dict(self.model_options)))

  @property
  def family(self):
    """Its outputs family (output_families.OutputsFamily)."""
    return output_families.get(self.outputs)

  @property
  def served_api(self):
    """The HTTP API serve.py answers it with: its own http_api, else its family's."""
    return self.http_api or self.family.http_api

  @property
  def probabilities(self):
    """"softmax", "sigmoid" or None: its family's logits -> probabilities (TextModel, serving,
    predict)."""
    return self.family.probabilities

  @property
  def checkpoint_head(self):
    """The task whose head a checkpoint of this kind holds (checkpoints.checkpoint_head:
    "classifier", "squad", "pretrainer"), from its model's HEADS; None for a headless one."""
    return next((head.CHECKPOINT_TASK for head in getattr(self.model, "HEADS", ())
                 if head.CHECKPOINT_TASK), None)

  @property
  def takes_num_labels(self):
    """Whether the model's constructor takes num_labels (named labels or a fixed count)."""
    return self.labels or self.num_labels is not None

  def build(self, encoder_or_config, num_labels=None, **kwargs):
    """The kind's model: model(encoder_or_config[, num_labels], **model_options, **kwargs).
    num_labels: required for a kind with labels; a kind with a fixed count takes that (a
    different num_labels is a ValueError)."""
    options = {**self.model_options, **kwargs}
    if not self.takes_num_labels:
      return self.model(encoder_or_config, **options)
    if self.num_labels is not None:
      if num_labels not in (None, self.num_labels):
        raise ValueError(f"a {self.name} model has {self.num_labels} output(s), not "
                         f"num_labels={num_labels}")
      num_labels = self.num_labels
    if num_labels is None:
      raise ValueError(f"a {self.name} model needs num_labels")
    return self.model(encoder_or_config, int(num_labels), **options)

  def task_file(self):
    """(task.json's "task", its further entries) of this kind's model directories; (None, {})
    for a kind without one."""
    return self.task_json, (dict(self.model_options) if self.task_json else {})

  def constraints(self):
    """How many facts besides its class tell a model of this kind apart."""
    return len(self.model_options) + (self.num_labels is not None)

  def matches(self, model, model_class=None):
    """Whether `model` (a keras.Model) is of this kind: its class (or `model_class`, one of
    its bases) and model_options."""
    if (model_class or type(model)) is not self.model:  # (a subclass is a kind of its own)
      return False
    if any(getattr(model, key, None) != value for key, value in self.model_options.items()):
      return False
    if self.num_labels is not None:
      return getattr(model, "num_labels", None) == self.num_labels
    return True


_KINDS = {}
_ALIASES = {}


def register(kind):
  """Adds `kind` (a TaskKind) to the registry; returns it. A name or alias already taken is a
  ValueError."""
  for name in (kind.name,) + tuple(kind.aliases):
    if name in _KINDS or name in _ALIASES:
      raise ValueError(f"task kind {name!r} is registered already")
  _KINDS[kind.name] = kind
  for alias in kind.aliases:
    _ALIASES[alias] = kind.name
  return kind


def unregister(name):
  """Removes the kind `name` (and its aliases): for tests that plant a kind."""
  kind = _KINDS.pop(name)
  for alias in kind.aliases:
    _ALIASES.pop(alias, None)


def get(name):
  """The TaskKind called `name` (or one of its aliases); an unknown name is a ValueError
  listing the kinds."""
  kind = _KINDS.get(_ALIASES.get(name, name))
  if kind is None:
    raise ValueError(f"unknown task {name!r}: one of {', '.join(_KINDS)}")
  return kind


def kinds(**where):
  """The registered kinds whose attributes equal `where`'s values, in registration order:
  kinds(servable=True), kinds(text_input=True), kinds(outputs="classes")."""
  return [kind for kind in _KINDS.values()
          if all(getattr(kind, key) == value for key, value in where.items())]


def names(**where):
  """The names of kinds(**where), a tuple (for flag choices and messages)."""
  return tuple(kind.name for kind in kinds(**where))


def of_model(model):
  """The kind of `model` (a keras.Model of modeling): of the kinds it matches, the one with
  the most constraints (a one-output BertClassifier is a regression); a TypeError for a
  model of no kind."""
  matching = [kind for kind in _KINDS.values() if kind.matches(model)]
  if not matching:  # a subclass of a kind's model: the kinds of its nearest base class
    for base in type(model).__mro__[1:]:
      matching = [kind for kind in _KINDS.values() if kind.matches(model, base)]
      if matching:
        break
  if not matching:
    raise TypeError(f"{type(model).__name__} is no registered task kind")
  return max(matching, key=lambda kind: kind.constraints())


def of_description(description):
  """The kind of a model directory's task.json (a dict: its "task" and further entries such
  as "multi_label"): of the kinds written with that "task", the one whose model_options the
  entries hold, the most constrained first; a ValueError for an unknown task."""
  task = description.get("task")
  matching = [kind for kind in _KINDS.values() if kind.task_json == task and all(
      description.get(key) == value for key, value in kind.model_options.items())]
  if not matching:
    known = sorted({kind.task_json for kind in _KINDS.values() if kind.task_json})
    raise ValueError(f"unknown task {task!r}: one of {', '.join(known)}")
  return max(matching, key=lambda kind: kind.constraints())


def task_json_names():
  """The "task" values task.json may hold, in registration order."""
  return tuple(dict.fromkeys(kind.task_json for kind in _KINDS.values() if kind.task_json))


def served(kind):
  """The kind a SavedModel or predict.py serves for `kind` (itself, or its served_as)."""
  return get(kind.served_as) if kind.served_as else kind


def _classifier_compile():
  return dict(loss=keras.losses.SparseCategoricalCrossentropy(), metrics=["accuracy"])


def _multi_label_compile():
  return dict(loss=keras.losses.BinaryCrossentropy(), metrics=["binary_accuracy"])


def _regression_compile():
  return dict(loss=keras.losses.MeanSquaredError())


def _reranker_compile():  # a relevance logit per pair, labels 0/1
  return dict(loss=keras.losses.BinaryCrossentropy(from_logits=True))


def _tagger_compile():  # label -1: pieces after a word's first, [CLS], [SEP], padding
  return dict(loss=keras.losses.SparseCategoricalCrossentropy(ignore_class=-1))


def _squad_compile():  # the original's loss: the mean of both cross-entropies
  xent = keras.losses.SparseCategoricalCrossentropy(from_logits=True)
  return dict(loss={"start_logits": xent, "end_logits": xent},
              loss_weights={"start_logits": 0.5, "end_logits": 0.5})


register(TaskKind(
    "encoder", modeling.BertModel, "sequence", "BertModel", pair="optional",
    served_as="embeddings", servable=False,
    description="the encoder alone: sequence and pooled outputs"))
register(TaskKind(
    "embeddings", modeling.BertSentenceEncoder, "vectors", "BertModel", pair="no",
    task_json="embeddings",
    description="one vector per text (pooling mean, cls or max; normalize)"))
register(TaskKind(
    "classifier", modeling.BertClassifier, "classes", "BertForSequenceClassification",
    labels=True, compile_options=_classifier_compile, doc_windows=True,
    task_json="classifier", description="one label of N per text or pair (run_classifier)"))
register(TaskKind(
    "multi_label", modeling.BertClassifier, "multi_label", "BertForSequenceClassification",
    labels=True, model_options={"multi_label": True},
    compile_options=_multi_label_compile, task_json="classifier", variant_of="classifier",
    doc_windows=True,
    description="any number of N labels per text or pair (run_classifier --multi_label)"))
register(TaskKind(
    "regression", modeling.BertClassifier, "score", "BertForSequenceClassification",
    num_labels=1, compile_options=_regression_compile, task_json="regression",
    variant_of="classifier", doc_windows=True,
    description="one number per text or pair (run_classifier on STS-B)"))
register(TaskKind(
    "reranker", modeling.BertCrossEncoder, "score", "BertForSequenceClassification",
    num_labels=1, compile_options=_reranker_compile, pair="required", task_json="reranker",
    http_api="rerank",
    description="the relevance of a (query, passage) pair: a cross-encoder (run_reranker)"))
register(TaskKind(
    "tagger", modeling.BertTokenClassifier, "tags", "BertForTokenClassification",
    labels=True, compile_options=_tagger_compile, pair="no",
    task_json="tagger",
    description="a tag per word (run_ner)"))
register(TaskKind(
    "squad", modeling.BertSquad, "spans", "BertForQuestionAnswering",
    compile_options=_squad_compile, pair="required", task_json="squad",
    description="an answer span in a context (run_squad)"))
register(TaskKind(
    "pretrainer", modeling.BertPretrainer, "pretraining", "BertForPreTraining",
    served_as="embeddings", servable=False, text_input=False, task_json="pretraining",
    aliases=("pretraining",),
    description="the masked-LM and next-sentence heads (run_pretraining)"))
