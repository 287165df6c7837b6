#!/usr/bin/env bash
# Runs every fuzz target of a DRALENS_FUZZ build one after the other, one process at a time,
# and prints executions and exec/s per target. Usage:
#   tests/fuzz/run_fuzzers.sh <build-dir> <seconds-per-target> [target ...]
# With FUZZ_RUNS=N in the environment each target stops after N executions instead (seconds 0:
# no time limit), e.g. FUZZ_RUNS=10000000 for the 10M goal.
# New corpus entries go to <build-dir>/fuzz/corpus/<target>/ and crashing inputs to
# <build-dir>/fuzz/artifacts/; the seeds in tests/fuzz/corpus/ are only read. Exits 1 when any
# target crashed (after running all of them).
set -uo pipefail

build=${1:?usage: $0 <build-dir> <seconds> [target ...]}
seconds=${2:?usage: $0 <build-dir> <seconds> [target ...]}
shift 2
seeds=$(cd "$(dirname "$0")" && pwd)/corpus
bin="$build/fuzz"
targets=("$@")
if [ "${#targets[@]}" -eq 0 ]; then
  for f in "$bin"/*_fuzzer; do
    name=$(basename "$f")
    targets+=("${name%_fuzzer}")
  done
fi

# ASan's default quarantine (256 MB of freed memory held back to catch use after free) made long
# runs fault in fresh pages on nearly every allocation: kubeconfig fell from 2,000 to 285
# executions per second as its RSS reached 1 GB. 16 MB still holds what one input frees.
export ASAN_OPTIONS=${ASAN_OPTIONS:-quarantine_size_mb=16:malloc_context_size=5}
limit=(-max_total_time="$seconds")
if [ -n "${FUZZ_RUNS:-}" ]; then
  limit=(-runs="$FUZZ_RUNS" -max_total_time="$seconds")
fi

mkdir -p "$bin/artifacts" "$bin/logs"
failed=()
printf '%-22s %14s %10s %s\n' target executions exec/s result
for t in "${targets[@]}"; do
  mkdir -p "$bin/corpus/$t"
  log="$bin/logs/$t.log"
  "$bin/${t}_fuzzer" "${limit[@]}" -timeout=10 -rss_limit_mb=2048 \
    -print_final_stats=1 -artifact_prefix="$bin/artifacts/$t-" \
    "$bin/corpus/$t" "$seeds/$t" >"$log" 2>&1
  rc=$?
  runs=$(sed -n 's/^stat::number_of_executed_units: *//p' "$log" | tail -1)
  rate=$(sed -n 's/^stat::average_exec_per_sec: *//p' "$log" | tail -1)
  result=ok
  if [ "$rc" -ne 0 ]; then
    result="CRASH (rc $rc, see $log)"
    failed+=("$t")
  fi
  printf '%-22s %14s %10s %s\n' "$t" "${runs:-?}" "${rate:-?}" "$result"
done
if [ "${#failed[@]}" -ne 0 ]; then
  echo "crashed: ${failed[*]}" >&2
  exit 1
fi
