#!/usr/bin/env bash
# The device check: what runs in the first minutes attn-tune gets on a lent GPU machine (no
# package registry, a lease of about ten minutes). It checks that a usable GPU is there, then
# runs the most important evidence first: the environment, the device listing, the decode and
# prefill correctness tests, a short sweep that must end with zero faults, the CUDA example
# plugin, compute-sanitizer on the configuration-space tests, and last the bandwidth and SDPA
# speed comparisons. Every step runs under its own `timeout`; everything it prints is appended to
# $OUT/run.log as it happens, so a kill loses nothing already printed.
#
#   scripts/device-check.sh prebuild [BUILD_DIR]   # here: build what the check runs into
#                                                  # .device-prebuilt/ (no GPU time on compiles)
#   scripts/device-check.sh                        # there: the check (carry .device-prebuilt)
#   scripts/device-check.sh --rehearse             # here: rehearse the check without a GPU
#   scripts/device-check.sh probe                  # the GPU probe alone (seconds)
#   scripts/device-check.sh stage                  # here: copy build dependencies into .deps/
#   scripts/device-check.sh build                  # there: the fallback build from .deps/
#
# Binaries. `prebuild` builds the targets below in BUILD_DIR (default build/, the README's) and
# copies them, stripped, into .device-prebuilt/ (ignored by git, about 25 MiB; carry it) with a
# MANIFEST naming the hash of the sources it was built from. The check uses them when that hash
# matches the tree it runs in and they start there; otherwise it builds on the device from .deps/
# (staged by `stage` from the Debian packages: CLI11, Eigen, nlohmann-json headers and CMake
# files, and GoogleTest's sources, which it builds first), which costs minutes of the lease.
#
# $OUT. At most six files are ever there: run.log, summary.txt, devices.json, sweep-table.json,
# bandwidth.json and prefill-vs-sdpa.json (tools write into the work folder and the check copies
# their results over). summary.txt is rewritten after every step, so even a killed check leaves
# one. Without $OUT, the work folder's out/ takes its place.
#
# The summary tells the outcomes apart: ok; failed (exit N); timed out (the step's own limit);
# not reached in time (the check's budget, ATTN_DEVICE_BUDGET_S, 570 s by default, did not leave
# enough for the step); not run (an earlier step it needs failed). The check passes only when
# every step is ok. Exit status: 0 passed, 1 a step did not pass, 3 no usable GPU, 2 usage.
#
# Rehearsal. `--rehearse` runs the check here three times in a row with no GPU: as it is (it must
# stop within seconds with the no-GPU reason and leave run.log); with every GPU step's command
# line run for real and answering "no GPU" (exit 77, or 3 and the tools' "device unavailable");
# and once more with one step made to time out, one to fail and the budget spent part way, to
# check the summary's wording. It checks the step order, each step's limit, the count of files
# in $OUT after every step and the summary lines; last it stages .deps/ into its own folder and
# runs the fallback build's GoogleTest build and configure step on nothing else (the compile
# itself is the ordinary one). It runs in CI (ctest: scripts.device_check_rehearsal, about a
# minute).
set -uo pipefail

ROOT=$(cd "$(dirname "${BASH_SOURCE[0]}")/.." && pwd)
SELF=$ROOT/scripts/device-check.sh
DEPS=${ATTN_DEVICE_DEPS:-$ROOT/.deps}
PREBUILT=${ATTN_DEVICE_PREBUILT:-$ROOT/.device-prebuilt}
WORK=${ATTN_DEVICE_WORK:-$ROOT/build-device}
CUDA_DIR=${CUDA_HOME:-${CUDA_PATH:-/usr/local/cuda}}
PYTHON=${PYTHON:-python3}
JOBS=${JOBS:-$(nproc)}
BUDGET=${ATTN_DEVICE_BUDGET_S:-570}
MAX_OUT_FILES=6
REHEARSE=${ATTN_DEVICE_REHEARSE:-0}

# What the check runs, as built targets (file name, target): the prebuilt folder holds exactly
# these, flat.
PREBUILT_FILES=(
  "attn-tune attn-tune"
  "attn-cuda-bandwidth attn-cuda-bandwidth"
  "attn-cuda-prefill-speed attn-cuda-prefill-speed"
  "gpu_decode gpu_decode"
  "gpu_prefill gpu_prefill"
  "test_conformance test_conformance"
  "libattn_plugin_cuda_example.so attn_plugin_cuda_example"
  "libattn_plugin_cpu_example.so attn_plugin_cpu_example"
  "libattn_test_plugin_cuda_past_out.so attn_test_plugin_cuda_past_out"
  "libattn_test_plugin_cuda_keep_output.so attn_test_plugin_cuda_keep_output"
)
# The sources the binaries are built from: their hash ties a prebuilt folder to a tree.
SOURCE_PATHS=(CMakeLists.txt src include kernels plugins reference profiles tests tools)

# The plan: name, limit (s), expected time (s), kind (host: runs anywhere; gpu: answers "no GPU"
# without one). Limits sum to 565 s, inside the default budget of 570 s. Expected times are
# those of the first runs on an H200 (2026-12-04); gpu-plugin timed out there (the built-in CUDA
# kernels' conformance verify compiled a kernel per size to aim its cases, since fixed).
PLAN=(
  "env 15 8 host"
  "probe 10 1 gpu"
  "binaries 15 1 host"
  "devices 10 1 gpu"
  "gpu-decode 60 36 gpu"
  "gpu-prefill 45 19 gpu"
  "sweep-quick 90 63 gpu"
  "gpu-plugin 100 ? gpu"
  "python-cuda 55 32 gpu"
  "sanitizers 45 25 gpu"
  "bandwidth 60 40 gpu"
  "prefill-vs-sdpa 60 30 gpu"
)
# When the binaries must be built on the device, that step gets this much instead.
BUILD_LIMIT=300

usage() {
  echo "usage: scripts/device-check.sh [check|probe|prebuild [BUILD_DIR]|stage|build|--rehearse]"
}

# ---- the clock: real seconds, plus what a rehearsal pretends a step spent

SKEW=0
START=$(date +%s)
elapsed() { echo $(($(date +%s) - START + SKEW)); }
left() { echo $((BUDGET - $(elapsed))); }

# ---- the log: every line to run.log as it happens, step lines to stdout too

OUTDIR=${OUT:-$WORK/out}
LOG=$OUTDIR/run.log
note() {
  local line
  line=$(printf '[device-check %3ds] %s' "$(elapsed)" "$*")
  printf '%s\n' "$line"
  printf '%s\n' "$line" >>"$LOG"
}
out_files() { find "$OUTDIR" -type f | wc -l; }

# ---- the source hash

source_hash() {
  (
    cd "$ROOT" || exit 1
    find "${SOURCE_PATHS[@]}" -type f ! -path '*/__pycache__/*' ! -name '*.pyc' -print0 |
      LC_ALL=C sort -z | xargs -0 sha256sum | sha256sum | cut -d' ' -f1
  )
}

# ---- prebuild (here) and the fallback build (there)

# prebuild [BUILD_DIR]: builds the check's targets in BUILD_DIR (configuring it with the CUDA
# backend required when it is not configured yet) and copies them into $PREBUILT atomically.
prebuild() {
  local build=${1:-$ROOT/build}
  if [[ -f $build/CMakeCache.txt ]]; then
    if grep -q '^ATTN_SANITIZE:BOOL=ON' "$build/CMakeCache.txt"; then
      echo "prebuild: $build is a sanitized build; name a Release build folder" >&2
      return 2
    fi
  else
    cmake -S "$ROOT" -B "$build" -G Ninja -DCMAKE_BUILD_TYPE=Release -DATTN_REQUIRE_CUDA=ON ||
      return 1
  fi
  local targets=() entry
  for entry in "${PREBUILT_FILES[@]}"; do
    targets+=("${entry#* }")
  done
  cmake --build "$build" -j "$JOBS" --target "${targets[@]}" || return 1
  local tmp=$PREBUILT.tmp.$$
  rm -rf "$tmp"
  mkdir -p "$tmp"
  for entry in "${PREBUILT_FILES[@]}"; do
    local file=${entry%% *} found
    found=$(find "$build" -name "$file" -type f -perm -u+x -not -path '*/CMakeFiles/*' | head -n 1)
    if [[ -z $found ]]; then
      echo "prebuild: $file was not built in $build (is the CUDA backend on?)" >&2
      rm -rf "$tmp"
      return 1
    fi
    strip --strip-unneeded -o "$tmp/$file" "$found" || {
      rm -rf "$tmp"
      return 1
    }
  done
  {
    echo "source_sha256 $(source_hash)"
    echo "built $(date -u +%FT%TZ) on $(hostname) from $build"
    echo "commit $(git -C "$ROOT" rev-parse --short HEAD 2>/dev/null || echo none)$(
      [[ -n $(git -C "$ROOT" status --porcelain -- "${SOURCE_PATHS[@]}" 2>/dev/null) ]] &&
        echo ' (with uncommitted changes)')"
    echo "compiler $(c++ --version | head -n 1)"
    echo "cuda $("$CUDA_DIR/bin/nvcc" --version 2>/dev/null | tail -n 1)"
    # The newest glibc and libstdc++ symbol versions the binaries need: the device image must
    # have at least these (its own check runs them before trusting them).
    echo "needs $(objdump -T "$tmp"/* 2>/dev/null | grep -oE 'GLIBC(XX)?_[0-9.]+' | sort -uV |
      awk -F_ '{v[$1]=$0} END {print v["GLIBC"], v["GLIBCXX"]}')"
  } >"$tmp/MANIFEST"
  local bytes
  bytes=$(du -sb "$tmp" | cut -f1)
  if ((bytes > 48 * 1024 * 1024)); then
    echo "prebuild: $((bytes >> 20)) MiB is more than the 48 MiB left beside the tree in a 64 MiB carry" >&2
    rm -rf "$tmp"
    return 1
  fi
  rm -rf "$PREBUILT"
  mv "$tmp" "$PREBUILT"
  echo "prebuild: $PREBUILT holds $(find "$PREBUILT" -type f | wc -l) files, $((bytes >> 20)) MiB"
  sed 's/^/  /' "$PREBUILT/MANIFEST"
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

# The fallback: GoogleTest from the staged sources (or the system's, when the device has it),
# then the project with nothing but .deps/ on CMake's package paths, then the targets copied into
# the same flat folder a prebuilt one is.
build_on_device() {
  local bin=$1 gen=() prefix="$DEPS/prefix"
  command -v ninja >/dev/null && gen=(-G Ninja)
  if [[ ! -d $DEPS/prefix ]]; then
    echo "no .deps/ to build from: run scripts/device-check.sh stage (or prebuild) here and carry it"
    return 1
  fi
  if [[ -d $DEPS/googletest ]]; then
    cmake -S "$DEPS/googletest" -B "$WORK/gtest" "${gen[@]}" -DCMAKE_BUILD_TYPE=Release \
      -DBUILD_GMOCK=OFF -DINSTALL_GTEST=ON -DCMAKE_INSTALL_PREFIX="$WORK/gtest-prefix" &&
      cmake --build "$WORK/gtest" -j "$JOBS" && cmake --install "$WORK/gtest" || return 1
    prefix="$prefix;$WORK/gtest-prefix"
  fi
  # ATTN_DEVICE_ISOLATED=1 keeps CMake from the system's packages, so that a build here proves
  # .deps/ complete; the device uses what it has, .deps/ first.
  local isolate=()
  if [[ ${ATTN_DEVICE_ISOLATED:-0} == 1 ]]; then
    isolate=(-DCMAKE_FIND_USE_CMAKE_SYSTEM_PATH=OFF -DCMAKE_IGNORE_PREFIX_PATH="/usr;/usr/local;/")
  fi
  cmake -S "$ROOT" -B "$WORK/build" "${gen[@]}" -DCMAKE_BUILD_TYPE=Release -DATTN_REQUIRE_CUDA=ON \
    -DCMAKE_PREFIX_PATH="$prefix" -DCMAKE_FIND_USE_SYSTEM_PACKAGE_REGISTRY=OFF \
    -DCMAKE_FIND_USE_PACKAGE_REGISTRY=OFF -DCUDAToolkit_ROOT="$CUDA_DIR" "${isolate[@]}" || return 1
  [[ ${ATTN_DEVICE_CONFIGURE_ONLY:-0} == 1 ]] && return 0
  PREBUILT=$bin prebuild "$WORK/build"
}

# ---- the GPU probe

probe() {
  if [[ $REHEARSE == 1 && -n ${ATTN_DEVICE_REHEARSE_PROBE:-} ]]; then
    echo "$ATTN_DEVICE_REHEARSE_PROBE"
    return 0
  fi
  if ! command -v "$PYTHON" >/dev/null; then
    if nvidia-smi -L 2>/dev/null | grep -q '^GPU 0'; then
      nvidia-smi -L | head -n 1
      return 0
    fi
    echo "no usable GPU: nvidia-smi lists none (and there is no $PYTHON for the driver probe)"
    return 77
  fi
  "$PYTHON" - <<'PY'
import ctypes, sys
try:
    cuda = ctypes.CDLL("libcuda.so.1")
except OSError as e:
    print(f"no usable GPU: the NVIDIA driver library libcuda.so.1 does not load ({e})")
    sys.exit(77)
rc = cuda.cuInit(0)
if rc != 0:
    print(f"no usable GPU: cuInit failed with CUresult {rc}")
    sys.exit(77)
n = ctypes.c_int(0)
rc = cuda.cuDeviceGetCount(ctypes.byref(n))
if rc != 0 or n.value < 1:
    print(f"no usable GPU: cuDeviceGetCount returned {rc} with {n.value} devices")
    sys.exit(77)
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

# ---- the steps: each prints to run.log and returns 0 (ok), 77 (no GPU here) or a failure code

step_env() {
  echo "host: $(hostname), $(uname -srm), $(nproc) cores, $(awk '/MemTotal/ {print int($2 / 1048576) " GiB"}' /proc/meminfo 2>/dev/null || true)"
  echo "cpu: $(grep -m1 'model name' /proc/cpuinfo | cut -d: -f2-)"
  echo "date: $(date -u +%FT%TZ)"
  if command -v nvidia-smi >/dev/null; then
    nvidia-smi --query-gpu=name,driver_version,memory.total,clocks.sm,clocks.mem,temperature.gpu \
      --format=csv || true
  else
    echo "nvidia-smi: not installed"
  fi
  echo "nvcc: $("$CUDA_DIR/bin/nvcc" --version 2>/dev/null | tail -n 1 || echo none)"
  echo "compute-sanitizer: $("$CUDA_DIR/bin/compute-sanitizer" --version 2>/dev/null | tail -n 1 || echo none)"
  echo "cmake: $(cmake --version 2>/dev/null | head -n 1 || echo none)"
  echo "$PYTHON: $("$PYTHON" -c 'import sys; print(sys.version.split()[0], sys.executable)' 2>&1)"
  timeout 12 "$PYTHON" -c 'import torch; print("torch", torch.__version__, "cuda", torch.version.cuda, "available", torch.cuda.is_available())' 2>&1 |
    tail -n 1 || true
  if [[ -f $PREBUILT/MANIFEST ]]; then
    echo "prebuilt ($PREBUILT):"
    sed 's/^/  /' "$PREBUILT/MANIFEST"
  else
    echo "prebuilt: none at $PREBUILT"
  fi
  return 0
}

step_probe() { probe; }

# Whether the prebuilt folder was built from this tree's sources.
prebuilt_matches() {
  [[ -f $PREBUILT/MANIFEST ]] &&
    [[ $(awk '/^source_sha256/ {print $2}' "$PREBUILT/MANIFEST") == "$(source_hash)" ]]
}

# Uses the prebuilt folder when its source hash is this tree's and its binaries start here; else
# builds on the device. Writes the folder it settled on to $WORK/bin-path.
step_binaries() {
  local want have
  want=$(source_hash)
  if [[ -f $PREBUILT/MANIFEST ]]; then
    have=$(awk '/^source_sha256/ {print $2}' "$PREBUILT/MANIFEST")
    if [[ $have != "$want" ]]; then
      echo "prebuilt binaries were built from other sources ($have, this tree is $want)"
    elif ! "$PREBUILT/attn-tune" --version; then
      echo "prebuilt attn-tune does not start here (ldd follows)"
      ldd "$PREBUILT/attn-tune" || true
    else
      echo "prebuilt binaries match this tree ($want)"
      echo "$PREBUILT" >"$WORK/bin-path"
      return 0
    fi
  else
    echo "no prebuilt binaries at $PREBUILT"
  fi
  if [[ $REHEARSE == 1 ]]; then
    echo "rehearsal: no fallback build here; run scripts/device-check.sh prebuild first"
    return 1
  fi
  echo "building on the device (scripts/device-check.sh prebuild here saves this time)"
  build_on_device "$WORK/bin" || return 1
  echo "$WORK/bin" >"$WORK/bin-path"
}

# `devices --json` must list a CUDA device: a GPU the probe saw but attn-tune cannot use fails.
step_devices() {
  "$BIN/attn-tune" devices --json >"$WORK/devices.json" || return 1
  cat "$WORK/devices.json"
  cp "$WORK/devices.json" "$OUTDIR/devices.json"
  grep -q '"backend": "cuda"' "$WORK/devices.json" && return 0
  echo "attn-tune lists no CUDA device"
  return 77
}

# A GoogleTest binary split over `shards` processes in parallel (NVRTC compiles dominate and run
# one at a time within a process), each shard's output prefixed and appended as it comes. 77
# when every test skipped (no GPU), 1 on any failure.
gtest_sharded() {
  local bin=$1 filter=$2 shards=$3 i rc=0 pids=() tag
  tag=$(basename "$bin")
  # Each shard's lines go out as they come (a step its limit stops keeps what its tests said), and
  # into a file for the SKIPPED test below; the pipeline's status is the test binary's.
  for ((i = 0; i < shards; ++i)); do
    (GTEST_TOTAL_SHARDS=$shards GTEST_SHARD_INDEX=$i "$bin" --gtest_filter="$filter" 2>&1 |
      tee "$WORK/$tag.$i.txt" | sed -u "s/^/[$tag $i] /") &
    pids+=($!)
  done
  for i in "${!pids[@]}"; do
    wait "${pids[$i]}" || {
      local r=$?
      ((r != 77)) && rc=1
      ((rc == 0 && r == 77)) && rc=77
    }
  done
  # A skipped test (GTEST_SKIP: no GPU) is not a pass on a GPU machine.
  if ((rc == 0)) && grep -q '\[  SKIPPED \]' "$WORK/$tag".*.txt; then
    rc=77
  fi
  rm -f "$WORK/$tag".*.txt
  return $rc
}

step_gpu_decode() { gtest_sharded "$BIN/gpu_decode" '*' 5; }
step_gpu_prefill() { gtest_sharded "$BIN/gpu_prefill" '*' 4; }

# The quick profile on the GPU: it must finish with no fault, no error and no failed validation.
# Then its decode grid over fp16 and fp8_e4m3 caches, whose table `table lookup --kv-dtype`
# must answer point by point (tests/cli/fp8_sweep_lookup.py, CTest's script, on cuda:0).
step_sweep_quick() {
  local dir=$WORK/sweep-quick line
  rm -rf "$dir"
  "$BIN/attn-tune" sweep --device 0 --profile quick --out "$dir" 2>&1 | tee "$WORK/sweep.txt"
  local rc=${PIPESTATUS[0]}
  [[ -f $dir/threshold_table.json ]] && cp "$dir/threshold_table.json" "$OUTDIR/sweep-table.json"
  ((rc == 3)) && grep -q 'device unavailable' "$WORK/sweep.txt" && return 77
  ((rc != 0)) && return "$rc"
  line=$(grep -E '^sweep: [0-9]+ measurements' "$WORK/sweep.txt")
  if ! grep -qE ' 0 failed validation, [0-9]+ skipped, 0 errors, 0 faults' <<<"$line"; then
    echo "device-check: the sweep must end with no failed validation, no error and no fault"
    return 1
  fi
  "$PYTHON" "$ROOT/tests/cli/fp8_sweep_lookup.py" "$BIN/attn-tune" "$ROOT/profiles/quick.json" \
    "$WORK/sweep-fp8" cuda:0
}

# The CUDA example plugin through attn-tune (plugin check, verify), the two faults of
# tests/plugins/device_fault_plugin.c (verify must fail each, exit 1, naming it), and the
# conformance suite's GPU kernel sets (the built-in CUDA kernels and the plugin).
step_gpu_plugin() {
  local plugin=$BIN/libattn_plugin_cuda_example.so rc=0 r
  "$BIN/attn-tune" plugin check "$plugin" --device cuda:0 || rc=$?
  if ((rc == 0)); then
    "$BIN/attn-tune" verify --kernels "$plugin" --device cuda:0 --intensity quick || rc=$?
  fi
  if ((rc == 0)); then
    local fault want said
    for fault in past_out keep_output; do
      want="the kernel writes past the end of its output"
      [[ $fault == keep_output ]] && want="it answered with the call before's output"
      r=0
      said=$(ATTN_WRAPPED_PLUGIN=$plugin "$BIN/attn-tune" verify --device cuda:0 \
        --kernels "$BIN/libattn_test_plugin_cuda_$fault.so" --intensity quick \
        --families decode_v1 --dtypes fp16 2>&1) || r=$?
      printf '%s\n' "$said" >"$WORK/fault-$fault.log"
      grep -m 3 -F -e "$want" -e FAIL <<<"$said"
      tail -n 2 <<<"$said"
      if ((r != 1)) || ! grep -qF "$want" <<<"$said"; then
        echo "the $fault plugin: exit $r, expected 1 with \"$want\" (log: $WORK/fault-$fault.log)"
        rc=1
      fi
    done
  fi
  ATTN_TEST_CPU_EXAMPLE_PLUGIN=$BIN/libattn_plugin_cpu_example.so \
    ATTN_TEST_CUDA_EXAMPLE_PLUGIN=$plugin gtest_sharded "$BIN/test_conformance" 'Gpu/*' 2 || {
    r=$?
    ((rc == 0 || rc == 3)) && rc=$r
  }
  # attn-tune's "device unavailable" is exit 3; with the conformance tests skipped, no GPU.
  ((rc == 3)) && rc=77
  return $rc
}

# Python kernels on the GPU through the bridge, built here against this machine's Python (its
# ABI is that interpreter's, so it cannot travel prebuilt): a module that initialises CUDA when
# imported (the bridge must import it in the workers only) verified on cuda:0, then a small sweep
# timed with events and with CUDA graphs (torch's allocations in a private pool). Exit 78 when the
# interpreter has no Python.h to build against: not available, which the verdict lists apart.
step_python_cuda() {
  local dir=$WORK/pybridge exe inc lib ver t
  read -r exe inc lib ver < <("$PYTHON" -c 'import sys, sysconfig as s
print(sys.executable, s.get_paths()["include"], s.get_config_var("LIBDIR"), s.get_config_var("LDVERSION"))')
  if [[ ! -f $inc/Python.h ]]; then
    echo "not available: $PYTHON ($exe) has no Python.h under $inc to build the bridge against"
    return 78
  fi
  mkdir -p "$dir"
  {
    echo "// Generated by scripts/device-check.sh from src/python/bridge.py."
    echo "extern const char kAttnBridgeSource[];"
    printf 'const char kAttnBridgeSource[] = R"ATTNPY(%s\n)ATTNPY";\n' "$(cat "$ROOT/src/python/bridge.py")"
  } >"$dir/bridge_source.cpp"
  c++ -std=c++20 -O1 -shared -fPIC -fvisibility=hidden -I"$ROOT" -I"$inc" \
    "$ROOT"/src/python/*.cpp "$dir/bridge_source.cpp" -DATTN_PYTHON_EXECUTABLE="\"$exe\"" \
    -L"$lib" "-lpython$ver" -Wl,-rpath,"$lib" -ldl -lpthread -o "$dir/libattn_tune_python.so" ||
    return 1
  echo "bridge built for $exe (Python $ver)"
  export ATTN_TUNE_PYTHON_BRIDGE=$dir/libattn_tune_python.so ATTN_TUNE_PYTHON_DIR=$ROOT/python
  export PYTHONPATH=$ROOT/tests/python${PYTHONPATH:+:$PYTHONPATH}
  local module=python:cuda_at_import
  "$BIN/attn-tune" verify --kernels "$module" --device cuda:0 --intensity quick 2>&1 |
    tee "$WORK/py-verify.txt"
  local rc=${PIPESTATUS[0]}
  ((rc == 3)) && grep -q 'device unavailable' "$WORK/py-verify.txt" && return 77
  ((rc != 0)) && return "$rc"
  # A module that keeps its answer keyed by data_ptr() (tests/python/pointer_cache.py) fails on
  # the GPU as on the CPU: the bridge's tensors alias the device buffers verify rewrites in place.
  local want="it answered with the call before's output" said
  rc=0
  said=$("$BIN/attn-tune" verify --kernels python:pointer_cache:attn_tune_kernels_cuda \
    --device cuda:0 --intensity quick --dtypes fp32 --kv-dtypes auto 2>&1) || rc=$?
  printf '%s\n' "$said" >"$WORK/py-pointer-cache.txt"
  grep -m 3 -F "$want" <<<"$said"
  tail -n 2 <<<"$said"
  if ((rc != 1)) || ! grep -qF "$want" <<<"$said"; then
    echo "device-check: python:pointer_cache on cuda:0 exited $rc; expected 1 with \"$want\""
    return 1
  fi
  for t in events graph; do
    rm -rf "$WORK/py-sweep-$t"
    "$BIN/attn-tune" sweep --kernels "$module" --device cuda:0 --timing "$t" --no-report \
      --profile "$ROOT/tests/python/bridge_profile.json" --out "$WORK/py-sweep-$t" 2>&1 |
      tee "$WORK/py-sweep.txt"
    rc=${PIPESTATUS[0]}
    ((rc != 0)) && return "$rc"
    grep -qE ' 0 failed validation, [0-9]+ skipped, 0 errors, 0 faults' "$WORK/py-sweep.txt" || {
      echo "device-check: the Python sweep ($t timing) must end with no failure, error or fault"
      return 1
    }
  done
}

# compute-sanitizer's memcheck, racecheck and synccheck on the configuration-space tests (every
# configuration once, small problems; never a timing test: under the sanitizer the host blocks at
# each launch, which the stream-holding kernel would wait out).
step_sanitizers() {
  local san=$CUDA_DIR/bin/compute-sanitizer tool t rc=0 r wrap=()
  if [[ -x $san ]]; then
    wrap=("$san" --error-exitcode 9 --tool)
  elif [[ $REHEARSE == 1 ]]; then
    echo "rehearsal: no compute-sanitizer here; each test runs bare"
  else
    echo "compute-sanitizer is not in $CUDA_DIR/bin"
    return 1
  fi
  for tool in memcheck racecheck synccheck; do
    for t in gpu_decode:GpuDecode.EveryConfigurationOfTheSpace \
      gpu_prefill:GpuPrefill.EveryConfigurationOfTheSpace; do
      echo "== $tool ${t#*:}"
      if ((${#wrap[@]})); then
        "${wrap[@]}" "$tool" "$BIN/${t%%:*}" --gtest_filter="${t#*:}"
      else
        "$BIN/${t%%:*}" --gtest_filter="${t#*:}"
      fi
      r=$?
      if ((r == 77)); then
        ((rc == 0)) && rc=77
      elif ((r != 0)); then
        rc=1
      fi
    done
  done
  return $rc
}

step_bandwidth() {
  # fp16 and E4M3 (E5M2's loads and loop are E4M3's but for the conversion): 60 s was not enough
  # for all three caches on an H200.
  "$BIN/attn-cuda-bandwidth" --device 0 --quick --kv-dtype auto --kv-dtype fp8_e4m3 \
    --json "$WORK/bandwidth.json"
  local rc=$?
  [[ -f $WORK/bandwidth.json ]] && cp "$WORK/bandwidth.json" "$OUTDIR/bandwidth.json"
  ((rc == 3)) && return 77
  return $rc
}

step_prefill_vs_sdpa() {
  "$PYTHON" "$ROOT/scripts/prefill_vs_sdpa.py" --tool "$BIN/attn-cuda-prefill-speed" \
    --seqs 1024,4096,16384 --seconds 0.05 --json "$WORK/prefill-vs-sdpa.json"
  local rc=$?
  [[ -f $WORK/prefill-vs-sdpa.json ]] && cp "$WORK/prefill-vs-sdpa.json" "$OUTDIR/prefill-vs-sdpa.json"
  ((rc == 3)) && return 77
  return $rc
}

# ---- running the plan

# ATTN_DEVICE_ONLY="gpu-plugin bandwidth": run those steps (and env, probe, binaries and devices,
# which the others need) and mark the rest "not selected", e.g. to rerun what failed in a second
# short lease. Empty: every step.
ONLY=${ATTN_DEVICE_ONLY:-}
selected() {
  [[ -z $ONLY ]] && return 0
  case $1 in env | probe | binaries | devices) return 0 ;; esac
  [[ " $ONLY " == *" $1 "* ]]
}

declare -A STATUS=() TOOK=()

# The step table and the verdict, rewritten after every step.
write_summary() {
  local entry name limit expected kind failed=() late=() notrun=() nogpu=() absent=() also=""
  local unselected=()
  {
    echo "== attn-tune device check: $(hostname), $(date -u +%FT%TZ), $(elapsed) s of a $BUDGET s budget =="
    [[ -n ${PROBE_LINE:-} ]] && echo "$PROBE_LINE"
    [[ -n ${BIN:-} ]] && echo "binaries: $BIN"
    printf '%-16s %6s %9s %6s  %s\n' step limit expected time status
    for entry in "${PLAN[@]}"; do
      read -r name limit expected kind <<<"$entry"
      [[ $name == binaries && ${BUILT_ON_DEVICE:-0} == 1 ]] && limit=$BUILD_LIMIT
      printf '%-16s %5ss %8ss %6s  %s\n' "$name" "$limit" "$expected" "${TOOK[$name]:-}" \
        "${STATUS[$name]:-pending}"
      case ${STATUS[$name]:-pending} in
      ok) ;;
      "not selected") unselected+=("$name") ;;
      "not available"*) absent+=("$name") ;;
      "no GPU"*) nogpu+=("$name") ;;
      "not reached in time"*) late+=("$name") ;;
      "not run"* | pending) notrun+=("$name") ;;
      *) failed+=("$name") ;;
      esac
    done
    ((${#absent[@]})) && also=" (${#absent[@]} not available: ${absent[*]})"
    ((${#unselected[@]})) && also+=" (only ATTN_DEVICE_ONLY's steps: ${#unselected[@]} not selected)"
    if [[ $REHEARSE == 1 ]]; then
      if ((${#failed[@]} + ${#late[@]} + ${#notrun[@]} == 0)); then
        echo "result: REHEARSED (no GPU here: ${#nogpu[@]} GPU steps gave their no-GPU answer)$also"
        return
      fi
    elif ((${#failed[@]} + ${#late[@]} + ${#notrun[@]} + ${#nogpu[@]} == 0)); then
      echo "result: PASSED$also"
      return
    fi
    local why=()
    ((${#failed[@]})) && why+=("${#failed[@]} failed (${failed[*]})")
    ((${#late[@]})) && why+=("${#late[@]} not reached in time (${late[*]})")
    ((${#notrun[@]})) && why+=("${#notrun[@]} not run (${notrun[*]})")
    [[ $REHEARSE != 1 ]] && ((${#nogpu[@]})) && why+=("${#nogpu[@]} saw no GPU (${nogpu[*]})")
    local IFS=';'
    echo "result: FAILED: ${why[*]}" | sed 's/;/; /g'
  } >"$OUTDIR/summary.txt"
}

# run_step NAME LIMIT KIND: the step's function under `timeout`, its output appended to run.log.
run_step() {
  local name=$1 limit=$2 kind=$3 budget rc=0 t0
  budget=$(left)
  if [[ $REHEARSE == 1 && ${ATTN_DEVICE_REHEARSE_HANG:-} == "$name" ]]; then
    limit=2
  fi
  if ((budget < limit)); then
    # Less left than the step's limit: start it only when most of the limit is left.
    if ((budget * 3 < limit * 2 || budget < 5)); then
      STATUS[$name]="not reached in time (${budget} s left of the budget, limit ${limit} s)"
      note "$name: not reached in time (${budget} s left, limit ${limit} s)"
      return 0
    fi
    limit=$budget
  fi
  note "==== $name (limit ${limit} s) ===="
  t0=$(date +%s)
  if [[ $REHEARSE == 1 && ${ATTN_DEVICE_REHEARSE_HANG:-} == "$name" ]]; then
    timeout -k 2 "$limit" sleep 600 >>"$LOG" 2>&1 || rc=$?
  elif [[ $REHEARSE == 1 && ${ATTN_DEVICE_REHEARSE_FAIL:-} == "$name" ]]; then
    echo "rehearsal: $name made to fail" >>"$LOG"
    rc=1
  else
    # The step runs in a fresh copy of this script (`__step`), which timeout ends with every
    # process it started.
    timeout -k 5 "$limit" "$SELF" __step "$name" >>"$LOG" 2>&1 || rc=$?
  fi
  TOOK[$name]="$(($(date +%s) - t0))s"
  case $rc in
  0) STATUS[$name]=ok ;;
  77) if [[ $kind == gpu ]]; then STATUS[$name]="no GPU"; else STATUS[$name]="failed (exit 77)"; fi ;;
  78) STATUS[$name]="not available: $(grep -m1 '^not available: ' "$LOG" | cut -c16- | cut -c1-60)" ;;
  124 | 137) STATUS[$name]="timed out after ${limit} s" ;;
  *) STATUS[$name]="failed (exit $rc)" ;;
  esac
  if [[ $REHEARSE == 1 && -n ${ATTN_DEVICE_REHEARSE_SPEND:-} && ${ATTN_DEVICE_REHEARSE_SPEND%%:*} == "$name" ]]; then
    SKEW=$((SKEW + ${ATTN_DEVICE_REHEARSE_SPEND#*:}))
  fi
  note "$name: ${STATUS[$name]} in ${TOOK[$name]} (files in \$OUT: $(out_files))"
  return $rc
}

check() {
  local word
  for word in $ONLY; do
    if ! plan_names | grep -qx -- "$word"; then
      echo "device-check: ATTN_DEVICE_ONLY names '$word', which is not a step" \
        "($(plan_names | tr '\n' ' ' | sed 's/ $//'))" >&2
      return 2
    fi
  done
  rm -rf "$OUTDIR"
  mkdir -p "$OUTDIR" "$WORK"
  : >"$LOG"
  rm -f "$WORK/bin-path"
  # What the steps (each a fresh copy of this script) need beyond their environment.
  export ATTN_DEVICE_PREBUILT=$PREBUILT ATTN_DEVICE_WORK=$WORK OUT=$OUTDIR PYTHON JOBS
  local entry name limit expected kind stop=""
  for entry in "${PLAN[@]}"; do
    read -r name limit expected kind <<<"$entry"
    if [[ -n $stop ]]; then
      STATUS[$name]="not run: $stop"
      continue
    fi
    if ! selected "$name"; then
      STATUS[$name]="not selected"
      continue
    fi
    # Without prebuilt binaries for this very tree the step is the fallback build: its limit.
    if [[ $name == binaries && $REHEARSE != 1 ]] && ! prebuilt_matches; then
      limit=$BUILD_LIMIT
      BUILT_ON_DEVICE=1
    fi
    local rc=0
    run_step "$name" "$limit" "$kind" || rc=$?
    case $name in
    probe)
      PROBE_LINE=$(grep -E '^(GPU probe|no usable GPU)' "$LOG" | tail -n 1)
      if ((rc != 0)) && [[ $REHEARSE != 1 ]]; then
        stop="no usable GPU"
      fi
      ;;
    binaries)
      if [[ -f $WORK/bin-path ]]; then
        BIN=$(cat "$WORK/bin-path")
        export BIN
      else
        stop="no binaries"
      fi
      ;;
    esac
    write_summary
  done
  write_summary
  figures >>"$OUTDIR/summary.txt"
  cat "$OUTDIR/summary.txt"
  cat "$OUTDIR/summary.txt" >>"$LOG"
  if [[ $PROBE_LINE == "no usable GPU"* && $REHEARSE != 1 ]]; then
    echo "device-check: FAILED: $PROBE_LINE" >&2
    return 3
  fi
  grep -qE '^result: (PASSED|REHEARSED)' "$OUTDIR/summary.txt"
}

# The figures worth reading first, from run.log: the gpu tests' verdicts, the sweep's count line
# and timing method, the bandwidth table and the SDPA comparison.
figures() {
  echo
  grep -E '^\[gpu_(decode|prefill) [0-9]+\] \[  (PASSED|FAILED) +\]' "$LOG" || true
  grep -E '^(sweep: [0-9]+ measurements|fp8_sweep_lookup: )' "$LOG" || true
  if [[ -s $OUTDIR/sweep-table.json ]] && command -v "$PYTHON" >/dev/null; then
    "$PYTHON" - "$OUTDIR/sweep-table.json" <<'PY' || true
import json, sys
p = json.load(open(sys.argv[1])).get("provenance", {})
print(f"quick sweep timing: {p.get('timing_mode')}, {p.get('timing_method')}; clocks: "
      f"{json.dumps(p.get('clocks'))}")
PY
  fi
  section bandwidth | sed -n '/^device-to-device/p; /^case /,$p'
  section prefill-vs-sdpa | sed -n '/^   seq  batch    bs causal      ours/,$p'
}

# What step NAME printed: run.log's lines between its start marker and its end line.
section() {
  awk -v start="==== $1 (limit" '
    index($0, start) { on = 1; next }
    on && /^\[device-check/ { exit }
    on { print }' "$LOG"
}

# ---- the rehearsal

# The rehearsal's vocabulary: one check (its description, then the command that must succeed),
# a pattern a file must hold, the most files a run's log saw in $OUT, the plan's step names.
expect() {
  CHECKS=$((CHECKS + 1))
  if "${@:2}"; then
    echo "  ok: $1"
  else
    echo "  NOT OK: $1"
    PROBLEMS+=("$1")
  fi
}
has() { grep -qE -- "$2" "$1"; }
max_files() {
  grep -oE "files in [$]OUT: [0-9]+" "$1" | awk '{ if ($4 > m) m = $4 } END { print m + 0 }'
}
plan_names() {
  local e
  for e in "${PLAN[@]}"; do echo "${e%% *}"; done
}

rehearse() {
  local base=${ATTN_DEVICE_REHEARSAL_DIR:-$WORK/rehearsal}
  if probe >/dev/null 2>&1; then
    echo "rehearsal: skipped: this machine has a GPU (run the check itself)"
    return 77
  fi
  CHECKS=0
  PROBLEMS=()
  rm -rf "$base"
  mkdir -p "$base"

  echo "rehearsal 1: the check as a GPU machine would run it, here without a GPU"
  local t0 rc=0 dt
  t0=$(date +%s)
  env -u ATTN_DEVICE_REHEARSE OUT="$base/plain" ATTN_DEVICE_WORK="$base/plain-work" \
    "$SELF" >"$base/plain.stdout" 2>&1 || rc=$?
  dt=$(($(date +%s) - t0))
  expect "it exits 3 (no usable GPU), exit was $rc" test "$rc" -eq 3
  expect "it stops within 30 s (took $dt s)" test "$dt" -le 30
  expect "run.log is under \$OUT and names the reason" has "$base/plain/run.log" 'no usable GPU'
  expect "the summary says the GPU steps were not run" has "$base/plain/summary.txt" \
    '^gpu-decode .* not run: no usable GPU'
  expect "the summary's verdict is FAILED" has "$base/plain/summary.txt" '^result: FAILED'

  echo "rehearsal 2: every step's command line, GPU steps answering 'no GPU'"
  rc=0
  OUT="$base/full" ATTN_DEVICE_WORK="$base/full-work" ATTN_DEVICE_REHEARSE=1 \
    "$SELF" >"$base/full.stdout" 2>&1 || rc=$?
  local log=$base/full/run.log sum=$base/full/summary.txt
  expect "it exits 0, exit was $rc" test "$rc" -eq 0
  expect "the steps ran in the planned order" \
    test "$(grep -oE '^\[device-check +[0-9]+s\] ==== [a-z-]+' "$log" | awk '{print $NF}')" = "$(plan_names)"
  local entry name limit expected kind
  for entry in "${PLAN[@]}"; do
    read -r name limit expected kind <<<"$entry"
    expect "$name ran under its limit of $limit s" has "$log" "==== $name \\(limit $limit s\\) ===="
    if [[ $kind == gpu ]]; then
      expect "$name gave its no-GPU answer" has "$sum" "^$name .* no GPU\$"
    else
      expect "$name passed" has "$sum" "^$name .* ok\$"
    fi
  done
  expect "the binaries came from the prebuilt folder" has "$log" 'prebuilt binaries match this tree'
  expect "the Python bridge was built for this machine's Python" has "$log" '^bridge built for '
  expect "at most $MAX_OUT_FILES files were ever in \$OUT" test "$(max_files "$log")" -le "$MAX_OUT_FILES"
  expect "at most $MAX_OUT_FILES files are in \$OUT at the end" \
    test "$(find "$base/full" -type f | wc -l)" -le "$MAX_OUT_FILES"
  expect "the verdict is REHEARSED" has "$sum" '^result: REHEARSED'

  echo "rehearsal 3: a step that hangs, one that fails, and the budget spent part way"
  rc=0
  OUT="$base/late" ATTN_DEVICE_WORK="$base/late-work" ATTN_DEVICE_REHEARSE=1 \
    ATTN_DEVICE_REHEARSE_HANG=devices ATTN_DEVICE_REHEARSE_FAIL=gpu-decode \
    ATTN_DEVICE_REHEARSE_SPEND=sweep-quick:600 "$SELF" >"$base/late.stdout" 2>&1 || rc=$?
  sum=$base/late/summary.txt
  expect "it exits 1, exit was $rc" test "$rc" -eq 1
  expect "the hung step timed out" has "$sum" '^devices .* timed out after 2 s$'
  expect "the failed step failed" has "$sum" '^gpu-decode .* failed \(exit 1\)$'
  expect "the steps after a failure still ran" has "$sum" '^gpu-prefill .* no GPU$'
  expect "the steps past the budget were not reached in time" has "$sum" \
    '^prefill-vs-sdpa .* not reached in time'
  expect "the verdict counts each kind apart" has "$sum" \
    '^result: FAILED: 2 failed \(devices gpu-decode\); 5 not reached in time \(gpu-plugin python-cuda sanitizers bandwidth prefill-vs-sdpa\)$'
  expect "at most $MAX_OUT_FILES files were ever in \$OUT" \
    test "$(max_files "$base/late/run.log")" -le "$MAX_OUT_FILES"

  echo "rehearsal 4: ATTN_DEVICE_ONLY runs the steps it names, and refuses a name that is none"
  rc=0
  OUT="$base/only" ATTN_DEVICE_WORK="$base/only-work" ATTN_DEVICE_REHEARSE=1 \
    ATTN_DEVICE_ONLY="sanitizers bandwidth" "$SELF" >"$base/only.stdout" 2>&1 || rc=$?
  sum=$base/only/summary.txt
  expect "it exits 0, exit was $rc" test "$rc" -eq 0
  expect "a step it names ran" has "$sum" '^bandwidth .* no GPU$'
  expect "the steps the others need ran" has "$sum" '^binaries .* ok$'
  expect "a step it does not name was not selected" has "$sum" '^gpu-decode .* not selected$'
  expect "the verdict says how many were left out" has "$sum" \
    "^result: REHEARSED .*\\(only ATTN_DEVICE_ONLY's steps: 6 not selected\\)$"
  rc=0
  OUT="$base/only-bad" ATTN_DEVICE_ONLY="bandwith" "$SELF" >"$base/only-bad.stdout" 2>&1 || rc=$?
  expect "a name that is no step is exit 2, exit was $rc" test "$rc" -eq 2
  expect "the refusal names it" has "$base/only-bad.stdout" "names 'bandwith', which is not a step"

  echo "rehearsal 5: the fallback build, GoogleTest and the configure step from a staged .deps alone"
  rc=0
  ATTN_DEVICE_DEPS="$base/deps" "$SELF" stage >"$base/stage.log" 2>&1 || rc=$?
  expect "stage copies the build dependencies, exit was $rc" test "$rc" -eq 0
  rc=0
  ATTN_DEVICE_DEPS="$base/deps" ATTN_DEVICE_WORK="$base/build-work" ATTN_DEVICE_ISOLATED=1 \
    ATTN_DEVICE_CONFIGURE_ONLY=1 "$SELF" build >"$base/build.log" 2>&1 || rc=$?
  expect "GoogleTest builds and the project configures with the CUDA backend, exit was $rc" \
    test "$rc" -eq 0
  expect "the configure step found the staged GoogleTest" \
    grep -q "GTest_DIR:PATH=$base/build-work/gtest-prefix" "$base/build-work/build/CMakeCache.txt"

  if ((${#PROBLEMS[@]})); then
    echo "rehearsal: FAILED: ${#PROBLEMS[@]} of $CHECKS checks (logs under $base)"
    return 1
  fi
  echo "rehearsal: PASSED: $CHECKS checks (logs under $base)"
}

case ${1:-check} in
__step)
  # One step of the plan, run by run_step under its timeout.
  "step_${2//-/_}"
  exit $?
  ;;
check)
  check
  exit $?
  ;;
probe)
  probe
  rc=$?
  ((rc == 77)) && exit 3
  exit $rc
  ;;
prebuild)
  prebuild "${2:-}"
  exit $?
  ;;
stage)
  stage
  ;;
build)
  mkdir -p "$WORK"
  build_on_device "$WORK/bin"
  exit $?
  ;;
--rehearse | rehearse)
  rehearse
  exit $?
  ;;
-h | --help)
  usage
  ;;
*)
  usage >&2
  exit 2
  ;;
esac
