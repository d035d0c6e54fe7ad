#!/usr/bin/env bash
# Device check for a lent GPU machine: builds attn-tune there from staged dependencies, runs the
# gpu tests, the decode bandwidth comparison, the prefill comparison with PyTorch's SDPA and the
# quick sweep, and prints a short table last.
#
# The GPU machine has CUDA 13, CMake and g++ but no package registry, so the header-only
# dependencies and the GoogleTest sources travel with the working tree in the ignored folder
# .deps/ (about 15 MiB). Stage them on a machine that has the Debian packages (libcli11-dev,
# libeigen3-dev, nlohmann-json3-dev, libgtest-dev; scripts/install-deps.sh installs them):
#
#   scripts/device-check.sh stage     # copies into .deps/:
#       prefix/include/{CLI,eigen3,nlohmann}       from /usr/include
#       prefix/share/cmake/{CLI11,nlohmann_json}   from /usr/share/cmake (relocatable configs)
#       prefix/share/eigen3/cmake                  from /usr/share/eigen3/cmake
#       googletest/                                from /usr/src/googletest (built on the target)
#
# then carry .deps with the tree (the device `run` tool: carry [".deps"]) and run there
#
#   scripts/device-check.sh           # build + gpu tests + bandwidth + quick sweep + table
#   scripts/device-check.sh build     # only the build, with nothing but .deps/ on CMake's paths
#
# The build searches packages only under .deps/ (system package paths are switched off), so a
# build that passes here proves the staged folder is complete. CUDA comes from $CUDA_HOME,
# $CUDA_PATH or /usr/local/cuda. Logs go to $OUT (when set) or build-device/logs. Budget: the
# whole check stops itself after 6 minutes; each step has its own timeout.
set -euo pipefail

ROOT=$(cd "$(dirname "${BASH_SOURCE[0]}")/.." && pwd)
DEPS=$ROOT/.deps
BUILD=${ATTN_DEVICE_BUILD:-$ROOT/build-device}
LOGS=${OUT:-$BUILD/logs}
CUDA_DIR=${CUDA_HOME:-${CUDA_PATH:-/usr/local/cuda}}
JOBS=${JOBS:-$(nproc)}
MODE=${1:-check}
export ROOT DEPS BUILD CUDA_DIR JOBS
START=$(date +%s)
DEADLINE=$((START + 360))

mkdir -p "$LOGS"
declare -a SUMMARY=()

log() { printf '[device-check %3ds] %s\n' "$(($(date +%s) - START))" "$*"; }
left() { echo $((DEADLINE - $(date +%s))); }

# step NAME LIMIT_S CMD...: runs CMD with its output in $LOGS/NAME.log, records the outcome.
step() {
  local name=$1 limit=$2
  shift 2
  local budget
  budget=$(left)
  ((limit > budget)) && limit=$budget
  if ((limit <= 5)); then
    SUMMARY+=("$(printf '%-22s %-8s %s' "$name" "skipped" "out of time")")
    log "$name: skipped, out of time"
    return 0
  fi
  log "$name (limit ${limit}s)"
  local t0 rc=0
  t0=$(date +%s)
  if declare -F "$1" >/dev/null; then
    # A function of this script: run it in a child bash that gets its definition.
    timeout "$limit" bash -c "set -euo pipefail; $(declare -f "$1"); $*" >"$LOGS/$name.log" 2>&1 ||
      rc=$?
  else
    timeout "$limit" "$@" >"$LOGS/$name.log" 2>&1 || rc=$?
  fi
  local dt=$(($(date +%s) - t0)) status=ok
  case $rc in
  0) status=ok ;;
  124) status=timeout ;;
  *) status="rc=$rc" ;;
  esac
  SUMMARY+=("$(printf '%-22s %-8s %4ds  %s' "$name" "$status" "$dt" "$LOGS/$name.log")")
  log "$name: $status in ${dt}s"
  return $rc
}

stage() {
  rm -rf "$DEPS"
  mkdir -p "$DEPS/prefix/include" "$DEPS/prefix/share/cmake" "$DEPS/prefix/share/eigen3"
  cp -r /usr/include/CLI /usr/include/eigen3 /usr/include/nlohmann "$DEPS/prefix/include/"
  cp -r /usr/share/cmake/CLI11 /usr/share/cmake/nlohmann_json "$DEPS/prefix/share/cmake/"
  cp -r /usr/share/eigen3/cmake "$DEPS/prefix/share/eigen3/"
  cp -r /usr/src/googletest "$DEPS/googletest"
  du -sh "$DEPS"
}

build_gtest() {
  cmake -S "$DEPS/googletest" -B "$BUILD/gtest" -DCMAKE_BUILD_TYPE=Release -DBUILD_GMOCK=OFF \
    -DINSTALL_GTEST=ON -DCMAKE_INSTALL_PREFIX="$BUILD/gtest-prefix"
  cmake --build "$BUILD/gtest" -j "$JOBS"
  cmake --install "$BUILD/gtest"
}

build_project() {
  cmake -S "$ROOT" -B "$BUILD" -DCMAKE_BUILD_TYPE=Release \
    -DCMAKE_PREFIX_PATH="$DEPS/prefix;$BUILD/gtest-prefix" \
    -DCMAKE_FIND_USE_CMAKE_SYSTEM_PATH=OFF -DCMAKE_FIND_USE_SYSTEM_PACKAGE_REGISTRY=OFF \
    -DCMAKE_FIND_USE_PACKAGE_REGISTRY=OFF -DCMAKE_IGNORE_PREFIX_PATH="/usr;/usr/local;/" \
    -DCUDAToolkit_ROOT="$CUDA_DIR"
  cmake --build "$BUILD" -j "$JOBS"
}

build() {
  if [[ ! -d $DEPS/prefix || ! -d $DEPS/googletest ]]; then
    echo "device-check: $DEPS is not staged; run 'scripts/device-check.sh stage' where the" \
      "Debian packages are installed and carry .deps with the tree" >&2
    exit 2
  fi
  step gtest-build 120 build_gtest && step attn-build 240 build_project
}

# The quick sweep, when this build has the command (it comes with the sweep task).
sweep() {
  # `attn-tune sweep --help` exits 0 even without the subcommand (root help), so read the list.
  if "$BUILD/attn-tune" --help 2>/dev/null | grep -qE '^[[:space:]]+sweep([[:space:]]|$)'; then
    "$BUILD/attn-tune" sweep --device 0 --profile quick
  else
    echo "attn-tune has no sweep subcommand in this build"
    return 3
  fi
}

case $MODE in
stage)
  stage
  exit 0
  ;;
build)
  rc=0
  build || rc=$?
  printf '%s\n' "${SUMMARY[@]}"
  exit $rc
  ;;
check) ;;
*)
  echo "usage: scripts/device-check.sh [check|build|stage]" >&2
  exit 2
  ;;
esac

FAILED=0
build || FAILED=1
if ((FAILED == 0)); then
  step devices 20 "$BUILD/attn-tune" devices || FAILED=1
  step gpu-tests 150 ctest --test-dir "$BUILD" -L gpu --output-on-failure || FAILED=1
  step bandwidth 100 "$BUILD/attn-cuda-bandwidth" --device 0 --quick --json "$LOGS/bandwidth.json" ||
    FAILED=1
  step prefill-vs-sdpa 100 python3 "$ROOT/scripts/prefill_vs_sdpa.py" \
    --tool "$BUILD/attn-cuda-prefill-speed" --seconds 0.05 --json "$LOGS/prefill_vs_sdpa.json" ||
    FAILED=1
  step sweep-quick 60 sweep || true
fi

echo
echo "== device check: $(hostname), $(date -u +%FT%TZ), $(($(date +%s) - START)) s =="
if [[ -s $LOGS/devices.log ]]; then
  head -n 3 "$LOGS/devices.log"
fi
if [[ -s $LOGS/gpu-tests.log ]]; then
  grep -E "tests passed|tests failed|Skipped|\*\*\*" "$LOGS/gpu-tests.log" | tail -n 4 || true
fi
if [[ -s $LOGS/bandwidth.log ]]; then
  sed -n '/^device-to-device/p; /^case /,$p' "$LOGS/bandwidth.log"
fi
if [[ -s $LOGS/prefill-vs-sdpa.log ]]; then
  sed -n '/^   seq  batch    bs causal      ours/,$p' "$LOGS/prefill-vs-sdpa.log"
fi
echo
printf '%-22s %-8s %5s  %s\n' step status time log
printf '%s\n' "${SUMMARY[@]}"
exit $FAILED
