#!/usr/bin/env bash
# Engine overhead: rill (row mode and batched B=1024, with and without worker threads) against
# a plain C loop, a Python generator chain and torch DataLoader(num_workers=2), all measured
# in this run over the same integers; prints ns/row/stage and ratios, and the first-row
# latency of a trivial pipeline; then batching of a memory column (consecutive rows lent without a
# copy, shuffled rows gathered) against memcpy.
# rill and the generator chain are measured ROUNDS times, alternately (a machine whose load
# changes during the run then weighs on both), and each figure is the best of its rounds;
# DataLoader runs in the first round only.
# Env (set by `make bench`): ROOT, BUILD. BATCHED_ROWS, ROW_ROWS, GEN_ROWS, DL_ROWS override sizes;
# ROUNDS, REPS the repetitions.
set -euo pipefail
ROOT=${ROOT:-$(cd "$(dirname "$0")/../.." && pwd)}
BUILD=${BUILD:-$ROOT/build}
BATCHED_ROWS=${BATCHED_ROWS:-4194304}
ROW_ROWS=${ROW_ROWS:-500000}
GEN_ROWS=${GEN_ROWS:-1000000}
DL_ROWS=${DL_ROWS:-200000}
ROUNDS=${ROUNDS:-3}
REPS=${REPS:-5} # runs of each rill case per round (bench_engine keeps the best)

out="" peers=""
for round in $(seq "$ROUNDS"); do
  out=$(printf '%s\n%s' "$out" "$("$BUILD/bench/bench_engine" "$BATCHED_ROWS" "$ROW_ROWS" "$REPS")")
  if /usr/bin/python3 -c 'import sys' 2>/dev/null; then
    peers=$(printf '%s\n%s' "$peers" "$(/usr/bin/python3 "$ROOT/test/bench/engine_peers.py" "$GEN_ROWS" \
      "$([ "$round" = 1 ] && echo "$DL_ROWS" || echo 0)")")
  else
    peers="skipped: /usr/bin/python3 not found"
  fi
done
echo "$peers" | grep '^skipped' | sort -u || true

# field <line-selector...> <field>: the smallest value of `field` (the best round) among the
# lines holding every selector
get() {
  local field=${!#} line
  line=$(printf '%s\n%s\n' "$out" "$peers" | { grep -F -- "$1" || true; } )
  shift
  while [ $# -gt 1 ]; do line=$(echo "$line" | { grep -F -- " $1" || true; }); shift; done
  echo "$line" | tr ' ' '\n' | awk -F= -v k="$field" '$1 == k { print $2 }' | sort -g | head -1
}

printf '%-5s %-28s %12s %14s %10s %10s %12s %12s\n' maps case ns/row ns/row/stage vs_Cloop vs_gen vs_DataLoader vs_gen_cpu
for maps in 1 2 4 8; do
  c=$(get "case=cloop" "maps=$maps" ns_row)
  g=$(get "case=generator" "maps=$maps" ns_row)
  gc=$(get "case=generator" "maps=$maps" cpu_ns_row)
  d=$(get "case=dataloader" "maps=$maps" ns_row)
  printf '%-5s %-28s %12.3f %14.3f %10s %10s %12s %12s\n' "$maps" "C loop (1024-row buffers)" "$c" \
    "$(awk -v c="$c" -v m="$maps" 'BEGIN { print c / (m + 1) }')" "1.00x" "" "" ""
  for mode in batched row; do
    for th in none cores; do
      r=$(get "case=rill" "mode=$mode" "threads=$th" "maps=$maps" ns_row)
      rc=$(get "case=rill" "mode=$mode" "threads=$th" "maps=$maps" cpu_ns_row)
      awk -v r="$r" -v rc="$rc" -v c="$c" -v g="$g" -v gc="$gc" -v d="$d" -v m="$maps" -v name="rill $mode threads=$th" 'BEGIN {
        gs = g == "" ? "n/a" : sprintf("%.0fx", g / r)
        ds = d == "" ? "n/a" : sprintf("%.0fx", d / r)
        cs = gc == "" || rc == "" ? "n/a" : sprintf("%.0fx", gc / rc)
        printf "%-5s %-28s %12.3f %14.3f %9.1fx %10s %12s %12s\n", m, name, r, r / (m + 1), r / c, gs, ds, cs }'
    done
  done
  [ -n "$g" ] && printf '%-5s %-28s %12.3f %14.3f\n' "$maps" "python generator chain" "$g" \
    "$(awk -v g="$g" -v m="$maps" 'BEGIN { print g / (m + 1) }')"
  [ -n "$d" ] && printf '%-5s %-28s %12.3f %14.3f\n' "$maps" "torch DataLoader(2 workers)" "$d" \
    "$(awk -v g="$d" -v m="$maps" 'BEGIN { print g / (m + 1) }')"
done
echo "vs_Cloop: rill time / C loop time (lower is better); vs_gen, vs_DataLoader: peer time / rill time (speedup);"
echo "vs_gen_cpu: the generator's CPU time / rill's CPU time (all of rill's threads), steadier on a busy machine"
echo "first row of a trivial pipeline (build + open + first row): $(get "case=first_row" us) us"
echo "memory source batching, uint8 224x224x3 cells, B=64 (GB/s of batches handed out; ratio vs memcpy of the same bytes in this run):"
"$BUILD/bench/bench_engine_memory" "${MEM_IMAGES:-512}" 64
