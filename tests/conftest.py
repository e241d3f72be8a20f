"""Shared fixtures: paths to ../shared (optional) and the repository."""

import os
import pathlib

import pytest

REPO = pathlib.Path(__file__).resolve().parent.parent
SHARED = pathlib.Path(os.environ.get("BERT_SHARED_DIR", REPO.parent / "shared"))


def shared_path(*parts):
  """Path under ../shared, or skip the test when ../shared (or that file) is absent."""
  path = SHARED.joinpath(*parts)
  if not path.exists():
    pytest.skip(f"{path} not available (../shared is only beside a developer checkout)")
  return path
