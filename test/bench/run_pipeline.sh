#!/usr/bin/env bash
# Full pipeline and batching benchmarks: rill against a direct libjpeg-turbo decode loop,
# memcpy, and torch DataLoader + torchvision + PIL, measured in the same run; prints ratios.
# Env (set by `make bench`): ROOT, BUILD. CORPUS overrides the image folder (build/data/corpus;
# build/data/imagenet_like is the ImageNet-like one); BATCHES (32,64,256) and ROUNDS (1)
# are passed to bench_pipeline.
set -euo pipefail
ROOT=${ROOT:-$(cd "$(dirname "$0")/../.." && pwd)}
BUILD=${BUILD:-$ROOT/build}
CORPUS=${CORPUS:-$BUILD/data/corpus}
RSS_EPOCHS=${RSS_EPOCHS:-10}

echo "-- batching (in-memory 224x224x3 images, batches of 64)"
"$BUILD/bench/bench_batching" 512 64

if [ ! -d "$CORPUS" ]; then
  make -C "$ROOT" data >/dev/null 2>&1 || true
fi
if [ ! -d "$CORPUS" ]; then
  echo "pipeline: corpus $CORPUS missing (make data); skipped"
  exit 0
fi

echo "-- full pipeline over $CORPUS"
out=$(BATCHES=${BATCHES:-32,64,256} "$BUILD/bench/bench_pipeline" "$CORPUS" "$RSS_EPOCHS" "${ROUNDS:-1}")
echo "$out"
val() { echo "$out" | awk -v k="$1" '$1 == k { print $2 }'; }

peer=""
peer_cpu=""
if /usr/bin/python3 -c 'import torch, torchvision, PIL' 2>/dev/null; then
  pout=$(/usr/bin/python3 "$ROOT/test/bench/bench_pipeline.py" "$CORPUS" 2)
  echo "$pout"
  peer=$(echo "$pout" | awk '$1 == "dataloader_2w" { print $2 }')
  peer_cpu=$(echo "$pout" | awk '$1 == "dataloader_per_cpu_s" { print $2 }')
else
  echo "dataloader peer: /usr/bin/python3 lacks torch/torchvision/PIL (python3-torch python3-torchvision python3-pil); skipped"
fi

echo "-- ratios (wall clock; per CPU second where the machine is shared)"
awk -v d="$(val direct_full_decode_1t)" -v dc="$(val direct_full_decode_per_cpu_s)" \
    -v r1="$(val rill_pipeline_1t)" -v r2="$(val rill_pipeline_2t)" \
    -v c1="$(val rill_pipeline_per_cpu_s_1t)" -v c2="$(val rill_pipeline_per_cpu_s_2t)" \
    -v p="$peer" -v pc="$peer_cpu" 'function q(a, b) { return b > 0 ? a / b : 0 } BEGIN {
  printf "rill 1 thread / direct full decode:              %.2fx (per CPU s: %.2fx)\n", q(r1, d), q(c1, dc)
  printf "rill 2 threads / (2 x direct full decode):       %.2fx (per CPU s: %.2fx)\n", q(r2, 2 * d), q(c2, dc)
  printf "(batches 32 and 64: the ratio_vs_direct_*_b32 / _b64 lines above; epoch 3, once the\n"
  printf " entropy marks of the files are found: the ratio_vs_direct_later_* lines)\n"
  if (p != "") printf "rill 2 threads / DataLoader(num_workers=2):      %.2fx (per CPU s: %.2fx)\n", q(r2, p), q(c2, pc)
}'
awk -v s="$(val epoch_boundary_step_ms)" -v fc="$(val epoch_boundary_first_wait_ms_cold)" \
    -v fa="$(val epoch_boundary_first_wait_ms_ahead)" -v tc="$(val epoch_boundary_secs_cold)" \
    -v ta="$(val epoch_boundary_secs_ahead)" 'function q(a, b) { return b > 0 ? a / b : 0 } BEGIN {
  if (s == "") exit
  printf "epoch boundary, %.0f ms steps: first batch waits %.1f ms with next_epoch, %.1f ms without;\n", s, fa, fc
  printf "  epochs 1-4 take %.3f s against %.3f s: %.2fx\n", ta, tc, q(tc, ta)
}'
