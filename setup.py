"""Installs this repository as the package `bert_keras`.

The repository root *is* the package directory (package_dir maps bert_keras to
"."), so `python run_pretraining.py ...` works from a clone exactly like the
original, and `from bert_keras import modeling` works from anywhere after
`pip install .` (or `pip install -e .`). Its subpackages (utils, runtime,
pretraining_data, tasks and its families, prediction) are the directories of the same names.
A built wheel holds the package alone: not setup.py, tests/, bench/, results/ or demo.sh.
"""

import hashlib
import re

from setuptools import Extension, setup
from setuptools.command.build_py import build_py

SUBPACKAGES = ("utils", "runtime", "pretraining_data", "tasks", "tasks.classifier", "tasks.squad",
               "tasks.ner", "tasks.retrieval", "prediction", "server")

# The one version string is __init__.py's.
with open("__init__.py", encoding="utf-8") as f:
  _VERSION = re.search(r'^__version__ = "([^"]+)"', f.read(), re.M).group(1)


class BuildPy(build_py):
  """build_py without setup.py: the root directory is the package, but this file is not
  a module of it."""

  def find_package_modules(self, package, package_dir):
    modules = super().find_package_modules(package, package_dir)
    return [m for m in modules if not (package == "bert_keras" and m[1] == "setup")]


# The extension carries the hash of the source it was built from, so that tokenization.py can
# tell a module built before a `git pull` changed _word_table.c (and not use it).
with open("_word_table.c", "rb") as f:
  _SOURCE_SHA256 = hashlib.sha256(f.read()).hexdigest()

setup(
    name="bert-keras",
    version=_VERSION,
    description="google-research/bert on TensorFlow 2 and Keras 3: faithful, fast, real.",
    long_description=open("README.md", encoding="utf-8").read(),
    long_description_content_type="text/markdown",
    license="Apache-2.0",
    python_requires=">=3.10,<3.13",
    packages=["bert_keras"] + [f"bert_keras.{name}" for name in SUBPACKAGES],
    package_dir={"bert_keras": "."},
    package_data={"bert_keras": ["sample_text.txt"]},
    cmdclass={"build_py": BuildPy},
    # The C hot loop of tokenization.py's batch methods (see _word_table.c). Optional: where
    # it cannot be compiled (no C compiler), tokenization.py runs the same in pure Python.
    ext_modules=[Extension("bert_keras._word_table", ["_word_table.c"], optional=True,
                           define_macros=[("SOURCE_SHA256", f'"{_SOURCE_SHA256}"')])],
    install_requires=[
        "tensorflow>=2.21,<2.22",
        # 2.21.0 does not import with tensorflow 2.21; 2.21.1 does.
        "tensorflow-text>=2.21.1,<2.22",
        "keras>=3.10,<4",
        "absl-py>=2.0",
        "numpy>=1.26",
        "tensorflow-datasets>=4.9",
        # Reads HuggingFace model.safetensors (utils/weight_files.py): it checks the whole
        # header before any tensor is read and maps the file, so only the tensors a model takes
        # are read. Small, no dependencies, no TensorFlow.
        "safetensors>=0.4",
    ],
    extras_require={
        "test": [
            "pytest>=8",
            # test.sh runs the suite in two processes (-n): 1.66x faster on 2 cores, since much
            # of a test's time is single-threaded tracing.
            "pytest-xdist>=3.5",
            # The original google-research/bert code, used only as a test oracle.
            "bert-tensorflow==1.0.4",
            "six",
            # The house-style linter that test.sh runs (pycodestyle with indent-size 2).
            "flake8>=7",
            # Independent oracles for run_classifier's metrics (F1, Matthews, Pearson, Spearman).
            "scikit-learn>=1.3",
            "scipy>=1.11",
            # The oracle of evaluate_ner.py (its default mode follows conlleval).
            "seqeval>=1.2",
            # The oracle of evaluate_retrieval.py (trec_eval's own code, as pytrec_eval and BEIR).
            "pytrec-eval-terrier>=0.5.11",
            # Keras's JAX backend (CPU wheel): tests/test_backends.py holds the model on JAX to
            # the TensorFlow backend (PyTorch's cases run where torch is installed).
            "jax>=0.4.34",
            # serve.py's tests talk to a live server with the real clients (and Starlette's
            # TestClient needs httpx).
            "openai>=1.40",
            "huggingface_hub>=0.24",
            "httpx>=0.27",
            # The oracle of tokenizer.json: HuggingFace's own tokenizer reads what we write.
            "tokenizers>=0.20",
        ],
        # create_pretraining_data_beam.py. apache-beam 2.77 needs protobuf < 7, TensorFlow
        # 2.21 >= 6.31.1: both install with protobuf 6.x. For Dataflow (gs:// paths) install
        # apache-beam[gcp] instead.
        "beam": ["apache-beam>=2.77,<3"],
        # export_saved_model.py --format=onnx: tf2onnx converts the graph (no converter of
        # ours could follow TensorFlow's ops as well), onnxruntime runs it in tests and bench
        # and optimizes it at export (its symbolic shape inference needs sympy, which
        # onnxruntime does not require).
        "onnx": ["tf2onnx>=1.17", "onnxruntime>=1.20", "sympy"],
        # serve.py: Starlette (the routes) on uvicorn (connections, keep-alive, graceful
        # shutdown), a small, well-kept ASGI stack; no web code of ours below HTTP.
        "serve": ["starlette>=0.40", "uvicorn>=0.30"],
        # evaluate_squad.py --out-image-dir: the official precision-recall curves.
        "plots": ["matplotlib>=3.7"],
    },
)
