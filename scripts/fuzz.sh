#!/usr/bin/env bash
# libFuzzer runs of attn-tune's input readers (issue 31, tests/fuzz/targets): results files,
# threshold tables, fleet tables, profiles, traffic traces and replay files. Builds the targets
# with clang in build-fuzz/ (-DATTN_FUZZ=ON: coverage, AddressSanitizer, UBSan), makes a seed
# corpus of real files with the tool itself (the mutation harness's seeds, the shipped profiles
# and table), then runs each target for SECONDS (default 600), JOBS at a time (default 2).
# A target's finding (a crash, a sanitizer report, an exception other than InputError, an input
# slower than 10 s) is saved as build-fuzz/findings/TARGET-*; rerun it with
#   build-fuzz/fuzz_TARGET build-fuzz/findings/TARGET-crash-...
# Not part of CI (ctest runs the mutation harness, tests/fuzz/mutate_inputs.py).
#   usage: scripts/fuzz.sh [SECONDS] [TARGET...]     (targets: results table fleet profile trace replay)
set -euo pipefail
cd "$(dirname "$0")/.."
BUILD=${ATTN_FUZZ_BUILD:-build-fuzz}
JOBS=${JOBS:-2}
SECONDS_EACH=${1:-600}
if (($# > 0)); then
  shift
fi
TARGETS=("$@")
if ((${#TARGETS[@]} == 0)); then
  TARGETS=(results table fleet profile trace replay)
fi
if ! command -v clang++ > /dev/null; then
  echo "fuzz: clang++ is not installed (apt-get install clang)" >&2
  exit 2
fi

mkdir -p "$BUILD"
cmake -S . -B "$BUILD" -G Ninja -DCMAKE_BUILD_TYPE=RelWithDebInfo \
  "-DCMAKE_CXX_FLAGS_RELWITHDEBINFO=-O1 -g1" -DCMAKE_C_COMPILER=clang -DCMAKE_CXX_COMPILER=clang++ \
  -DATTN_FUZZ=ON -DATTN_WITH_CUDA=OFF -DATTN_WITH_PYTHON=OFF -DATTN_BUILD_TESTS=OFF \
  -DATTN_BUILD_BENCH=OFF > "$BUILD/configure.log" || { cat "$BUILD/configure.log" >&2; exit 1; }
targets=(attn-tune)
for t in "${TARGETS[@]}"; do
  targets+=("fuzz_$t")
done
cmake --build "$BUILD" -j "$JOBS" --target "${targets[@]}"

# Seeds: real outputs of the tool (the mutation harness makes them with the binary) and the
# files the project ships.
seeds=$BUILD/seedwork/seeds
python3 -c 'import sys; sys.path.insert(0, "tests/fuzz"); import mutate_inputs as m; m.make_seeds(sys.argv[1], sys.argv[2])' \
  "$BUILD/attn-tune" "$BUILD/seedwork" > /dev/null
corpus=$BUILD/corpus
mkdir -p "$BUILD/findings"
for t in "${TARGETS[@]}"; do
  mkdir -p "$corpus/$t"
done
cp "$seeds/sweep/results.jsonl" "$corpus/results/" 2> /dev/null || true
cp "$seeds/sweep/threshold_table.json" "$seeds/h100_table.json" results/*.json "$corpus/table/" 2> /dev/null || true
cp "$seeds/fleet.json" "$corpus/fleet/" 2> /dev/null || true
cp profiles/*.json "$seeds/profile.json" "$corpus/profile/" 2> /dev/null || true
cp "$seeds"/trace*.jsonl "$corpus/trace/" 2> /dev/null || true
cp "$seeds"/*.safetensors "$corpus/replay/" 2> /dev/null || true

status=0
run_one() {
  local t=$1
  local log=$BUILD/findings/$t.log
  if "$BUILD/fuzz_$t" -max_total_time="$SECONDS_EACH" -timeout=10 -rss_limit_mb=4096 \
    -max_len=262144 -print_final_stats=1 -artifact_prefix="$BUILD/findings/$t-" \
    "$corpus/$t" > "$log" 2>&1; then
    echo "fuzz: $t: no finding in $SECONDS_EACH s ($(grep -m1 -oE 'stat::number_of_executed_units: *[0-9]+' "$log" | grep -oE '[0-9]+$') inputs)"
  else
    echo "fuzz: $t: FINDING (see $log and $BUILD/findings/$t-*)"
    return 1
  fi
}
running=0
for t in "${TARGETS[@]}"; do
  run_one "$t" &
  running=$((running + 1))
  if ((running >= JOBS)); then
    wait -n || status=1
    running=$((running - 1))
  fi
done
while ((running > 0)); do
  wait -n || status=1
  running=$((running - 1))
done
exit $status
