#!/usr/bin/env bash
# The Python path (the rill._rill extension and rill.torch.Loader, installed into the virtual
# environment by `make bench`) against the C path and the Python peers, in the same run;
# prints ratios. Env (set by `make bench`): ROOT, BUILD, VENV. CORPUS overrides the image folder.
set -euo pipefail
ROOT=${ROOT:-$(cd "$(dirname "$0")/../.." && pwd)}
BUILD=${BUILD:-$ROOT/build}
VENV=${VENV:-$ROOT/.venv}
CORPUS=${CORPUS:-$BUILD/data/corpus}

if [ ! -d "$CORPUS" ]; then
  echo "python: corpus $CORPUS missing (make data); skipped"
  exit 0
fi
if ! "$VENV/bin/python" -c 'import rill._rill' 2>/dev/null; then
  echo "python: the rill package is not installed in $VENV (make bench installs it); skipped"
  exit 0
fi
# run from outside the source tree so that the installed package is the one measured
cd "$BUILD"
"$VENV/bin/python" "$ROOT/test/bench/bench_python.py" "$CORPUS" "$BUILD" ${PY_BENCH_ARGS:-}
