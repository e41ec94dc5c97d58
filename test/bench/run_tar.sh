#!/usr/bin/env bash
# Tar shards: rill.from_tar against WebDataset (and Python's tarfile) over the ImageNet-like
# corpus written as shards, in the same run; prints ratios. Env (set by `make bench`): ROOT,
# BUILD, VENV. CORPUS overrides the image folder.
set -euo pipefail
ROOT=${ROOT:-$(cd "$(dirname "$0")/../.." && pwd)}
BUILD=${BUILD:-$ROOT/build}
VENV=${VENV:-$ROOT/.venv}
CORPUS=${CORPUS:-$BUILD/data/imagenet_like}

if [ ! -d "$CORPUS" ]; then
  echo "tar: corpus $CORPUS missing (make data); skipped"
  exit 0
fi
if ! "$VENV/bin/python" -c 'import rill._rill' 2>/dev/null; then
  echo "tar: the rill package is not installed in $VENV (make bench installs it); skipped"
  exit 0
fi
# run from outside the source tree so that the installed package is the one measured
cd "$BUILD"
"$VENV/bin/python" "$ROOT/test/bench/bench_tar.py" "$CORPUS" ${TAR_BENCH_ARGS:-}
