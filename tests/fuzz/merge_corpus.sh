#!/usr/bin/env bash
# Folds what fuzzing found back into the seed corpus kept in the repository, minimised: for each
# target, libFuzzer's -merge=1 picks from tests/fuzz/corpus/<target>/ and
# <build-dir>/fuzz/corpus/<target>/ the smallest set of inputs with the same coverage, and that
# set replaces tests/fuzz/corpus/<target>/. Usage:
#   tests/fuzz/merge_corpus.sh <build-dir> [target ...]
set -euo pipefail

build=${1:?usage: $0 <build-dir> [target ...]}
shift
seeds=$(cd "$(dirname "$0")" && pwd)/corpus
bin="$build/fuzz"
targets=("$@")
if [ "${#targets[@]}" -eq 0 ]; then
  for f in "$bin"/*_fuzzer; do
    name=$(basename "$f")
    targets+=("${name%_fuzzer}")
  done
fi
export ASAN_OPTIONS=${ASAN_OPTIONS:-quarantine_size_mb=16:malloc_context_size=5}
for t in "${targets[@]}"; do
  out=$(mktemp -d)
  mkdir -p "$bin/corpus/$t"
  "$bin/${t}_fuzzer" -merge=1 -timeout=10 -rss_limit_mb=2048 "$out" "$seeds/$t" "$bin/corpus/$t" \
    >"$bin/logs/$t-merge.log" 2>&1
  before=$(find "$seeds/$t" -type f | wc -l)
  rm -rf "${seeds:?}/$t"
  mv "$out" "$seeds/$t"
  chmod 755 "$seeds/$t"
  printf '%-22s %5d seeds -> %5d (%s)\n' "$t" "$before" "$(find "$seeds/$t" -type f | wc -l)" \
    "$(du -sh "$seeds/$t" | cut -f1)"
done
