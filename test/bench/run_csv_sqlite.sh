#!/usr/bin/env bash
# CSV: parse + iterate a synthetic file through rill vs pandas.read_csv, pyarrow.csv.read_csv,
# polars.read_csv and duckdb's read_csv (each skipped with a message when not installed); rill
# runs before and after the peers and its best time is compared.
# SQLite: every row of a table in order through rill vs DuckDB's sqlite_scan, and in shuffled
# order vs a Python sqlite3 cursor loop and pandas.read_sql (and rill without holding the
# table, point lookups only). Sizes: CSV_MB (default 200) and
# SQLITE_ROWS (default 1000000; 10000000 for the 10M-row case).
# SKIP_SQLITE=1 runs the CSV half only. The CSV file is then split in 4 and in CSV_SHARDS
# (default 400) files and read as one dataframe, against polars and pandas reading the files.
# The file and the 400 files are also read in shuffled batches (CSV_BATCH rows), against
# polars reading them whole and gathering each batch by a permutation.
set -euo pipefail
: "${ROOT:?}" "${BUILD:?}" "${VENV:?}"
PY="$VENV/bin/python"
PEERS="$ROOT/test/bench/bench_csv_sqlite_peers.py"
THREADS="${THREADS:-2}"
CSV_MB="${CSV_MB:-200}"
SQLITE_ROWS="${SQLITE_ROWS:-1000000}"
CSV_BATCH="${CSV_BATCH:-1024}"      # rows per batch pulled from rill
SQLITE_BATCH="${SQLITE_BATCH:-256}"
tmp="$(mktemp -d)"
trap 'rm -rf "$tmp"' EXIT

field() { sed -n "s/.*$1=\([0-9.]*\).*/\1/p" <<<"$2"; }
ratio() { awk -v a="$1" -v b="$2" 'BEGIN { printf "%.2f", a / b }'; }

echo "-- CSV: ${CSV_MB} MB synthetic file, $THREADS threads"
"$PY" "$PEERS" gen-csv "$tmp/data.csv" "$CSV_MB"
size_mb=$(awk -v s="$(stat -c %s "$tmp/data.csv")" 'BEGIN { printf "%.1f", s / 1048576 }')
rill=$("$BUILD/bench/bench_csv" "$tmp/data.csv" "$THREADS" "$CSV_BATCH" 2>/dev/null); echo "$rill (batch $CSV_BATCH)"
pd=$("$PY" "$PEERS" pandas-csv "$tmp/data.csv"); echo "$pd"
pa=$("$PY" "$PEERS" pyarrow-csv "$tmp/data.csv" "$THREADS"); echo "$pa"
pl=$("$PY" "$PEERS" polars-csv "$tmp/data.csv" "$THREADS"); echo "$pl"
dk=$("$PY" "$PEERS" duckdb-csv "$tmp/data.csv" "$THREADS"); echo "$dk"
rill2=$("$BUILD/bench/bench_csv" "$tmp/data.csv" "$THREADS" "$CSV_BATCH" 2>/dev/null); echo "$rill2 (again, after the peers)"
rs=$(awk -v a="$(field seconds "$rill")" -v b="$(field seconds "$rill2")" 'BEGIN { print (a < b ? a : b) }')
rc=$(awk -v a="$(field cpu_s "$rill")" -v b="$(field cpu_s "$rill2")" 'BEGIN { print (a < b ? a : b) }')
echo "file ${size_mb} MB; rill best of 2: ${rs} s, ${rc} CPU-s; rill peak RSS $(field rss_mb "$rill") MB = $(ratio "$(field rss_mb "$rill")" "$size_mb")x the file (index pass $(field index_s "$rill") s)"
for peer in "$pd" "$pa" "$pl" "$dk"; do
  case "$peer" in
  *skipped*) echo "$peer" ;;
  *) echo "speed ratio rill vs ${peer%% *}: $(ratio "$(field seconds "$peer")" "$rs")x" \
          "(per CPU-second $(ratio "$(field cpu_s "$peer")" "$rc")x; peak RSS $(field rss_mb "$peer") MB)" ;;
  esac
done

# The same rows in 4 files, and in CSV_SHARDS (default 400) small ones, read as one dataframe
# (rill_df_from_csv_files) against polars and pandas reading the same files, and against rill
# reading the one file.
# shuffled batches (a training loop's order): rill reads each batch's rows where they lie;
# polars reads the whole file, then gathers each batch by a permutation
shuffled_csv() { # $1: file(s) joined by commas, $2: what they are
  local r p
  r=$(CSV_SHUFFLE=1 "$BUILD/bench/bench_csv" "$1" "$THREADS" "$CSV_BATCH" 2>/dev/null); echo "$r ($2, shuffled)"
  p=$("$PY" "$PEERS" polars-csv-shuffled "$1" "$THREADS" "$CSV_BATCH"); echo "$p"
  case "$p" in
  *skipped*) ;;
  *) echo "speed ratio rill vs ${p%% *} ($2, shuffled batches of $CSV_BATCH): $(ratio "$(field seconds "$p")" "$(field seconds "$r")")x" \
          "(per CPU-second $(ratio "$(field cpu_s "$p")" "$(field cpu_s "$r")")x; peak RSS $(field rss_mb "$r") MB vs $(field rss_mb "$p") MB)" ;;
  esac
}
shuffled_csv "$tmp/data.csv" "1 file"

for nf in 4 "${CSV_SHARDS:-400}"; do
  echo "-- CSV: the same rows in $nf files"
  files=$("$PY" "$PEERS" split-csv "$tmp/data.csv" "$nf")
  rillf=$("$BUILD/bench/bench_csv" "$files" "$THREADS" "$CSV_BATCH" 2>/dev/null); echo "$rillf ($nf files)"
  plf=$("$PY" "$PEERS" polars-csv-files "$files" "$THREADS"); echo "$plf"
  pdf=$("$PY" "$PEERS" pandas-csv-files "$files"); echo "$pdf"
  rillf2=$("$BUILD/bench/bench_csv" "$files" "$THREADS" "$CSV_BATCH" 2>/dev/null); echo "$rillf2 ($nf files, again)"
  fs=$(awk -v a="$(field seconds "$rillf")" -v b="$(field seconds "$rillf2")" 'BEGIN { print (a < b ? a : b) }')
  echo "rill $nf files vs 1 file: $(ratio "$rs" "$fs")x (peak RSS $(field rss_mb "$rillf") MB, opening $(field index_s "$rillf") s)"
  for peer in "$plf" "$pdf"; do
    case "$peer" in
    *skipped*) echo "$peer" ;;
    *) echo "speed ratio rill vs ${peer%% *} ($nf files): $(ratio "$(field seconds "$peer")" "$fs")x" \
            "(peak RSS $(field rss_mb "$peer") MB)" ;;
    esac
  done
  [ "$nf" = 4 ] || shuffled_csv "$files" "$nf files"
  rm -f "$tmp"/data.csv.*.csv
done

[ "${SKIP_SQLITE:-0}" = 1 ] && exit 0

sqlite_bench() {
  # Sequential: rill (table by rowid ranges) vs DuckDB's sqlite_scan (skipped when duckdb or
  # its sqlite extension cannot be loaded). Shuffled: rill (the table held in memory after the
  # first 1/256 of the rows: the default) vs a Python sqlite3 cursor loop and pandas.read_sql +
  # gather; rill with point lookups only (table_hold_bytes = -1) for reference. rill and peers
  # alternate within the run.
  echo "-- SQLite: $SQLITE_ROWS rows, $THREADS threads, batch $SQLITE_BATCH"
  "$PY" "$PEERS" gen-sqlite "$tmp/data.db" "$SQLITE_ROWS"
  local seq duck shuf loop pdsql
  seq=$("$BUILD/bench/bench_sqlite" "$tmp/data.db" t "$THREADS" "$SQLITE_BATCH" sequential); echo "$seq"
  duck=$("$PY" "$PEERS" duckdb-sqlite "$tmp/data.db" "$THREADS" "$SQLITE_BATCH"); echo "$duck"
  shuf=$("$BUILD/bench/bench_sqlite" "$tmp/data.db" t "$THREADS" "$SQLITE_BATCH" shuffled); echo "$shuf (held)"
  loop=$("$PY" "$PEERS" sqlite-loop "$tmp/data.db"); echo "$loop"
  pdsql=$("$PY" "$PEERS" pandas-sql "$tmp/data.db"); echo "$pdsql"
  points=$("$BUILD/bench/bench_sqlite" "$tmp/data.db" t "$THREADS" "$SQLITE_BATCH" shuffled -1); echo "$points (point lookups only)"
  local ss sc rs rc
  ss=$(field seconds "$seq"); sc=$(field cpu_s "$seq")
  rs=$(field seconds "$shuf"); rc=$(field cpu_s "$shuf")
  echo "rill rows/s: sequential $(awk -v n="$SQLITE_ROWS" -v s="$ss" 'BEGIN { printf "%.0f", n / s }')," \
       "shuffled $(awk -v n="$SQLITE_ROWS" -v s="$rs" 'BEGIN { printf "%.0f", n / s }')"
  if [ -n "$(field seconds "$duck")" ]; then
    echo "speed ratio rill vs duckdb sqlite_scan (sequential): $(ratio "$(field seconds "$duck")" "$ss")x" \
         "(per CPU-second $(ratio "$(field cpu_s "$duck")" "$sc")x)"
  fi
  echo "speed ratio rill vs python sqlite3 loop (shuffled): $(ratio "$(field seconds "$loop")" "$rs")x" \
       "(per CPU-second $(ratio "$(field cpu_s "$loop")" "$rc")x)"
  echo "speed ratio rill vs pandas.read_sql (shuffled): $(ratio "$(field seconds "$pdsql")" "$rs")x" \
       "(per CPU-second $(ratio "$(field cpu_s "$pdsql")" "$rc")x; peak RSS $(field rss_mb "$shuf") MB vs $(field rss_mb "$pdsql") MB)"
  echo "rill shuffled, held vs point lookups only: $(ratio "$(field seconds "$points")" "$rs")x" \
       "(per CPU-second $(ratio "$(field cpu_s "$points")" "$rc")x)"
}
sqlite_bench
