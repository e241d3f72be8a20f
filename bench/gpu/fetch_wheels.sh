#!/usr/bin/env bash
# Downloads requirements.txt's wheels for Python 3.12 on x86-64 Linux into bench/gpu/wheels/
# (on a machine with a network; the GPU host needs none).
set -euo pipefail
cd "$(dirname "$0")"
PY=${PYTHON:-python3}
"$PY" -m pip download -q --no-deps --only-binary=:all: --python-version 3.12 --implementation cp \
  --platform manylinux_2_28_x86_64 --platform manylinux_2_17_x86_64 \
  --platform manylinux2014_x86_64 -d wheels -r requirements.txt
ls wheels
