#!/usr/bin/env bash
# Device check for a lent GPU machine: makes sure a usable GPU is there before anything else,
# builds attn-tune there from staged dependencies, runs the gpu tests (and compute-sanitizer on
# small filters of them), the decode bandwidth comparison, the prefill comparison with PyTorch's
# SDPA and the quick sweep, packs every log into one archive and prints a short table last. It
# cannot report success without a GPU: no device, a build without CUDA, a skipped gpu test or an
# empty `devices` list each fail it.
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
#   scripts/device-check.sh           # probe + build + gpu tests + sanitizers + bandwidth +
#                                     # prefill vs SDPA + quick sweep + table
#   scripts/device-check.sh probe     # only the GPU probe (seconds)
#   scripts/device-check.sh build     # only the build, with nothing but .deps/ on CMake's paths
#
# The build searches packages only under .deps/ (system package paths are switched off), so a
# build that passes here proves the staged folder is complete. CUDA comes from $CUDA_HOME,
# $CUDA_PATH or /usr/local/cuda. Logs go to $OUT (when set) or build-device/logs, packed at the
# end into one archive device-check.tar.gz beside the summary (at most 8 files come back from a
# lent machine). Budget: the whole check stops itself after 230 s, so that a rerun fits in a
# 15-minute lease; each step has its own timeout.
set -euo pipefail

ROOT=$(cd "$(dirname "${BASH_SOURCE[0]}")/.." && pwd)
DEPS=$ROOT/.deps
BUILD=${ATTN_DEVICE_BUILD:-$ROOT/build-device}
LOGS=${OUT:-$BUILD/logs}
CUDA_DIR=${CUDA_HOME:-${CUDA_PATH:-/usr/local/cuda}}
JOBS=${JOBS:-$(nproc)}
MODE=${1:-check}
export ROOT DEPS BUILD LOGS CUDA_DIR JOBS
START=$(date +%s)
DEADLINE=$((START + ${ATTN_DEVICE_BUDGET_S:-230}))

mkdir -p "$LOGS"
STAGING=$(mktemp -d)
trap 'rm -rf "$STAGING"' EXIT
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
    return 1 # a step that did not run is not a pass
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

# The GPU probe: the driver library loads and reports at least one device. Seconds, before any
# build, so a machine without a usable GPU fails at once with the reason.
probe() {
  if ! command -v python3 >/dev/null; then
    nvidia-smi -L | grep -q '^GPU 0' || {
      echo "no usable GPU: nvidia-smi lists none (and there is no python3 for the driver probe)"
      return 1
    }
    nvidia-smi -L | head -n 1
    return 0
  fi
  python3 - <<'PY'
import ctypes, sys
try:
    cuda = ctypes.CDLL("libcuda.so.1")
except OSError as e:
    sys.exit(f"no usable GPU: the NVIDIA driver library libcuda.so.1 does not load ({e})")
rc = cuda.cuInit(0)
if rc != 0:
    sys.exit(f"no usable GPU: cuInit failed with CUresult {rc}")
n = ctypes.c_int(0)
rc = cuda.cuDeviceGetCount(ctypes.byref(n))
if rc != 0 or n.value < 1:
    sys.exit(f"no usable GPU: cuDeviceGetCount returned {rc} with {n.value} devices")
ver = ctypes.c_int(0)
cuda.cuDriverGetVersion(ctypes.byref(ver))
name = ctypes.create_string_buffer(256)
dev = ctypes.c_int(0)
cuda.cuDeviceGet(ctypes.byref(dev), 0)
cuda.cuDeviceGetName(name, 256, dev)
print(f"GPU probe: {n.value} device(s), GPU 0 {name.value.decode()}, driver CUDA "
      f"{ver.value // 1000}.{ver.value % 1000 // 10}")
PY
}

# The targets the check runs, and no others (the NVRTC compile sweeps stay on CPU machines).
TARGETS=(attn-tune gpu_decode gpu_prefill attn-cuda-bandwidth attn-cuda-prefill-speed)

build_project() {
  local gen=()
  command -v ninja >/dev/null && gen=(-G Ninja) # the device image may lack make
  cmake -S "$ROOT" -B "$BUILD" "${gen[@]}" -DCMAKE_BUILD_TYPE=Release \
    -DATTN_REQUIRE_CUDA=ON \
    -DCMAKE_PREFIX_PATH="$DEPS/prefix;$BUILD/gtest-prefix" \
    -DCMAKE_FIND_USE_CMAKE_SYSTEM_PATH=OFF -DCMAKE_FIND_USE_SYSTEM_PACKAGE_REGISTRY=OFF \
    -DCMAKE_FIND_USE_PACKAGE_REGISTRY=OFF -DCMAKE_IGNORE_PREFIX_PATH="/usr;/usr/local;/" \
    -DCUDAToolkit_ROOT="$CUDA_DIR"
  cmake --build "$BUILD" -j "$JOBS" --target "${TARGETS[@]}"
}

# The quick sweep, when this build has the command (it comes with the sweep task).
sweep() {
  # `attn-tune sweep --help` exits 0 even without the subcommand (root help), so read the list.
  if "$BUILD/attn-tune" --help 2>/dev/null | grep -qE '^[[:space:]]+sweep([[:space:]]|$)'; then
    rm -rf "$BUILD/sweep-quick"
    "$BUILD/attn-tune" sweep --device 0 --profile quick --out "$BUILD/sweep-quick" &&
      cp "$BUILD/sweep-quick/threshold_table.json" "$BUILD/sweep-quick/results.jsonl" "$LOGS/"
  else
    echo "attn-tune has no sweep subcommand in this build"
    return 3
  fi
}

# `devices --json` must list a CUDA device: a GPU the probe saw but attn-tune cannot use fails.
devices_has_gpu() {
  "$BUILD/attn-tune" devices --json | tee "$LOGS/devices.json" | grep -q '"backend": "cuda"'
}

# Every gpu test must run: a skipped one (exit 77: the test saw no GPU) fails the check.
gpu_tests() {
  local out rc=0
  out=$(ctest --test-dir "$BUILD" -L gpu --output-on-failure 2>&1) || rc=$?
  printf '%s\n' "$out"
  if grep -qE '\(Skipped\)|Not Run|No tests were found' <<<"$out"; then
    echo "device-check: a gpu test was skipped or not run: that is a failure on a GPU machine"
    return 1
  fi
  return $rc
}

# compute-sanitizer (memcheck, racecheck, synccheck) on one small test of each gpu suite.
sanitize() {
  local san=$CUDA_DIR/bin/compute-sanitizer tool t rc=0
  if [[ ! -x $san ]]; then
    echo "compute-sanitizer is not in $CUDA_DIR/bin"
    return 1
  fi
  for tool in memcheck racecheck synccheck; do
    for t in "gpu_decode GpuDecode.LongContextAndV1EqualsV2" \
      "gpu_prefill GpuPrefill.CausalSkipsMaskedTiles"; do
      set -- $t
      echo "== $tool $2"
      "$san" --tool "$tool" --error-exitcode 9 "$BUILD/tests/$1" --gtest_filter="$2" || rc=1
    done
  done
  return $rc
}

case $MODE in
stage)
  stage
  exit 0
  ;;
probe)
  probe || exit 3
  ;;
build)
  rc=0
  build || rc=$?
  printf '%s\n' "${SUMMARY[@]}"
  exit $rc
  ;;
check) ;;
*)
  echo "usage: scripts/device-check.sh [check|probe|build|stage]" >&2
  exit 2
  ;;
esac

# No GPU, no check: say why within seconds instead of building for minutes first.
if ! probe >"$LOGS/probe.log" 2>&1; then
  cat "$LOGS/probe.log" >&2
  echo "device-check: FAILED: $(tail -n 1 "$LOGS/probe.log")" >&2
  exit 3
fi
cat "$LOGS/probe.log"

FAILED=0
build || FAILED=1
if ((FAILED == 0)); then
  step devices 20 devices_has_gpu || FAILED=1
  step gpu-tests 70 gpu_tests || FAILED=1
  step sanitizers 60 sanitize || FAILED=1
  step bandwidth 30 "$BUILD/attn-cuda-bandwidth" --device 0 --quick --json "$LOGS/bandwidth.json" ||
    FAILED=1
  step prefill-vs-sdpa 30 python3 "$ROOT/scripts/prefill_vs_sdpa.py" \
    --tool "$BUILD/attn-cuda-prefill-speed" --seconds 0.05 --json "$LOGS/prefill_vs_sdpa.json" ||
    FAILED=1
  step sweep-quick 45 sweep || FAILED=1
fi

summary() {
  echo "== device check: $(hostname), $(date -u +%FT%TZ), $(($(date +%s) - START)) s =="
  head -n 1 "$LOGS/probe.log"
  if [[ -s $LOGS/gpu-tests.log ]]; then
    grep -E "tests passed|tests failed|Skipped|\*\*\*" "$LOGS/gpu-tests.log" | tail -n 4 || true
  fi
  if [[ -s $LOGS/bandwidth.log ]]; then
    sed -n '/^device-to-device/p; /^case /,$p' "$LOGS/bandwidth.log"
  fi
  # How the quick sweep was timed: mode, and the clocks NVML saw (throttled measurements).
  if [[ -s $LOGS/threshold_table.json ]] && command -v python3 >/dev/null; then
    python3 - "$LOGS/threshold_table.json" <<'PY' || true
import json, sys
p = json.load(open(sys.argv[1]))["provenance"]
print(f"quick sweep timing: {p.get('timing_mode')}, {p.get('timing_method')}; clocks: "
      f"{json.dumps(p.get('clocks'))}")
PY
  fi
  if [[ -s $LOGS/prefill-vs-sdpa.log ]]; then
    sed -n '/^   seq  batch    bs causal      ours/,$p' "$LOGS/prefill-vs-sdpa.log"
  fi
  echo
  printf '%-22s %-8s %5s  %s\n' step status time log
  printf '%s\n' "${SUMMARY[@]}"
  echo "result: $([[ $FAILED == 0 ]] && echo PASSED || echo FAILED)"
}
summary | tee "$LOGS/summary.txt"
# One archive of every log, JSON and the table, plus the summary beside it: at most 8 files come
# back from a lent machine.
if [[ -n ${OUT:-} ]]; then
  tar -czf "$STAGING/device-check.tar.gz" -C "$LOGS" --exclude=device-check.tar.gz .
  find "$LOGS" -mindepth 1 -maxdepth 1 ! -name summary.txt -exec rm -rf {} +
  mv "$STAGING/device-check.tar.gz" "$LOGS/"
fi
exit $FAILED
