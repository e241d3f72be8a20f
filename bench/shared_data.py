"""Where the benchmarks and result recipes find the data of ../shared: one place.

The directory is $BERT_SHARED_DIR, else `shared` beside the repository (as tests/conftest.py
finds it); `shared_data(*parts)` is a path below its `data` folder, for flag defaults."""

import os

REPO = os.path.dirname(os.path.dirname(os.path.abspath(__file__)))
SHARED = os.environ.get("BERT_SHARED_DIR", os.path.join(os.path.dirname(REPO), "shared"))


def shared_data(*parts):
  """os.path.join(SHARED, "data", *parts) (not checked: a flag default names it)."""
  return os.path.join(SHARED, "data", *parts)
