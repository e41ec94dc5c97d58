#!/usr/bin/env bash
# Interop benchmarks: export cost vs rows (C) and the Arrow stream into pyarrow vs memcpy.
set -euo pipefail
ROOT=${ROOT:-$(cd "$(dirname "$0")/../.." && pwd)}
BUILD=${BUILD:-$ROOT/build}
VENV=${VENV:-$ROOT/.venv}
echo "-- export cost (zero-copy types should not depend on rows)"
"$BUILD/bench/bench_interop"
echo "-- Arrow stream into pyarrow vs memcpy"
# the rill package installed into the virtual environment (make bench-pyinstall)
"$VENV/bin/python" "$ROOT/test/bench/bench_interop_stream.py"
