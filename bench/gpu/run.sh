#!/usr/bin/env bash
# On the GPU host: installs bench/gpu/wheels/*.whl into a folder of their own (no network, no
# change to the host's Python) and runs bench_gpu.py; its table and JSON line go to stdout and,
# with OUT set, to $OUT/bench_gpu.txt (appended: several runs in one call keep every table).
#   bash bench/gpu/run.sh [bench_gpu.py flags]
set -euo pipefail
cd "$(dirname "$0")"
PY=${PYTHON:-python3}
SITE=${BENCH_SITE:-/tmp/bench_gpu_site}
if ! ls wheels/*.whl >/dev/null 2>&1; then
  echo "error: bench/gpu/wheels/ holds no wheels: run bench/gpu/fetch_wheels.sh on a machine with a network" >&2
  exit 2
fi
version=$("$PY" -c 'import sys; print("%d.%d" % sys.version_info[:2])')
if [ "$version" != "3.12" ]; then
  echo "error: the wheels in bench/gpu/wheels/ are for Python 3.12, and $PY is $version (set PYTHON)" >&2
  exit 2
fi
"$PY" -m pip install -q --no-index --no-deps --no-compile --no-cache-dir --upgrade --target "$SITE" wheels/*.whl
export PYTHONPATH="$SITE${PYTHONPATH:+:$PYTHONPATH}" PYTHONUNBUFFERED=1
nvidia-smi --query-gpu=name,memory.total,driver_version,clocks.max.sm --format=csv 2>/dev/null || true
if [ -n "${OUT:-}" ]; then
  "$PY" bench_gpu.py "$@" 2>>"$OUT/bench_gpu.log" | tee -a "$OUT/bench_gpu.txt"
else
  "$PY" bench_gpu.py "$@"
fi
