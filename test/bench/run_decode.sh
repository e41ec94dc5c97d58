#!/usr/bin/env bash
# Decode-only benchmark: rill vs direct tjDecompress2, PIL, direct libpng and libwebp (see bench_decode.c).
# Uses the real-image corpus (built by test/data/get_images.sh when absent).
# Environment from `make bench`: ROOT, BUILD. DECODE_MAX limits the number of images.
set -euo pipefail
ROOT=${ROOT:-$(cd "$(dirname "$0")/../.." && pwd)}
BUILD=${BUILD:-$ROOT/build}
data=$ROOT/build/data
if [ ! -f "$data/corpus/.done" ]; then
  bash "$ROOT/test/data/get_images.sh" "$data" || { echo "run_decode: no corpus (get_images.sh failed); skipped"; exit 0; }
fi
list=$BUILD/bench/decode_list.txt
mkdir -p "$BUILD/bench"
find "$data/corpus" -name '*.jpg' | sort > "$list"
max=${DECODE_MAX:-1000}
pil_args=()
if /usr/bin/python3 -c 'import PIL' 2>/dev/null; then
  read -r pil pil_png pil_webp < <(/usr/bin/python3 "$ROOT/test/bench/bench_decode.py" "$list" "$max")
  pil_args=(--pil "$pil" --pil-png "$pil_png" --pil-webp "$pil_webp")
else
  echo "run_decode: /usr/bin/python3 has no PIL (Debian package python3-pil): PIL column skipped"
fi
"$BUILD/bench/bench_decode" "$list" --max "$max" "${pil_args[@]}"
