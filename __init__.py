"""bert_keras: google-research/bert re-implemented on TensorFlow 2 and Keras 3.

The modules live flat at the repository root, as in the original; once
installed they are importable as ``bert_keras.<module>`` (for example
``from bert_keras import tokenization, modeling``).

`import bert_keras` registers the package's Keras classes (modeling's models and layers,
preprocessing's BertPreprocessor and TextModel, optimization's optimizers and schedule,
retrieval's BertCrossEncoder), so that
`keras.saving.load_model` reads a `.keras` file of ours after that one import, without importing
TensorFlow for those who never use Keras (create_pretraining_data, the tokenizer): when Keras is
already imported, the modules that define the classes are imported now; otherwise when Keras is
(a one-shot hook on sys.meta_path runs right after Keras's own import completes).
"""

import importlib
import sys

__version__ = "0.1.0"

# The modules whose import registers Keras classes (@keras.saving.register_keras_serializable).
KERAS_MODULES = ("modeling", "preprocessing", "optimization", "retrieval")
# Those that import no TensorFlow on JAX and PyTorch, registered on every backend;
# preprocessing (tokenization in the graph) registers there when it is imported.
BACKEND_INDEPENDENT_MODULES = ("modeling", "optimization", "retrieval")


def register_keras_objects():
  """Imports the KERAS_MODULES (registering their classes with Keras); idempotent. Under a
  Keras backend other than TensorFlow only the BACKEND_INDEPENDENT_MODULES, so that
  `import bert_keras` imports no TensorFlow there."""
  # The package's name, not __name__: pytest imports this file as "__init__".
  tensorflow_backend = importlib.import_module("bert_keras.utils.backend").is_tensorflow()
  for name in KERAS_MODULES if tensorflow_backend else BACKEND_INDEPENDENT_MODULES:
    importlib.import_module(f"bert_keras.{name}")


class _AfterKerasImport:
  """A meta path finder for the top-level `keras` module only: it finds keras's spec with the
  other finders and makes its loader call register_keras_objects once keras has executed.
  Hooks are told apart by BERT_KERAS_HOOK, not by class: pytest imports this file a second time (as
  "__init__"), a second class."""

  BERT_KERAS_HOOK = True

  def find_spec(self, fullname, path=None, target=None):
    if fullname != "keras":
      return None
    for finder in sys.meta_path:   # the spec the other finders give (a probe gets one too)
      spec = (None if _is_hook(finder) or not hasattr(finder, "find_spec")
              else finder.find_spec(fullname, path, target))
      if spec is not None:
        break
    else:
      return None
    if spec.loader is None or not hasattr(spec.loader, "exec_module"):
      return spec
    exec_keras = spec.loader.exec_module

    def exec_module(module):
      _remove_hook()
      exec_keras(module)
      register_keras_objects()

    spec.loader.exec_module = exec_module   # this spec's own loader object only
    return spec


def _is_hook(finder):
  return getattr(finder, "BERT_KERAS_HOOK", False) is True


def _remove_hook():
  sys.meta_path[:] = [f for f in sys.meta_path if not _is_hook(f)]


if "keras" in sys.modules:
  register_keras_objects()
elif not any(_is_hook(f) for f in sys.meta_path):
  sys.meta_path.insert(0, _AfterKerasImport())
