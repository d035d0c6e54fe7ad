#!/usr/bin/env bash
# The CPU-side tests (unit and CLI) again, from a second build instrumented with AddressSanitizer
# and UndefinedBehaviorSanitizer (ATTN_SANITIZE=ON) in build-asan/; the first finding fails. The
# code under test is instrumented (libraries, attn-tune, test plugins), the test programs' own
# files are not (tests/CMakeLists.txt), though they run with both runtimes.
# Left out: the NVRTC compile sweeps (label nvrtc_sweep: NVRTC's own code, not ours, and the
# longest tests) and the GPU tests (label gpu). Not part of CI (about ten minutes there on 2
# cores, which took CI past its 30-minute limit): the README says when to run it.
set -euo pipefail
cd "$(dirname "$0")/.."
BUILD=${ATTN_SANITIZE_BUILD:-build-asan}

# -O1 (the CPU kernels keep -O2, CMakeLists.txt): sanitized -O2 took half again as long to
# compile; -g1: line numbers in the reports at a third less compile time than -g. The CPU
# benchmark is not a test and is not built.
# Without the CUDA backend (ATTN_WITH_CUDA=OFF): its host code and the kernel emulations are
# tested by the normal build; leaving them out here saves minutes on 2 cores. LLVM's
# linker, where installed, links the many instrumented test programs several times faster.
linker=()
if command -v ld.lld > /dev/null; then
  linker=(-DCMAKE_EXE_LINKER_FLAGS=-fuse-ld=lld -DCMAKE_SHARED_LINKER_FLAGS=-fuse-ld=lld
          -DCMAKE_MODULE_LINKER_FLAGS=-fuse-ld=lld)
fi
# Ninja where installed (scripts/install-deps.sh installs it), for a folder not yet configured
# with another generator.
generator=()
if command -v ninja > /dev/null && [ ! -f "$BUILD/CMakeCache.txt" ]; then
  generator=(-G Ninja)
fi
cmake -S . -B "$BUILD" "${generator[@]}" -DCMAKE_BUILD_TYPE=RelWithDebInfo "-DCMAKE_CXX_FLAGS_RELWITHDEBINFO=-O1 -g1 -DNDEBUG" \
  -DATTN_SANITIZE=ON -DATTN_BUILD_BENCH=OFF -DATTN_WITH_CUDA=OFF "${linker[@]}"
cmake --build "$BUILD" -j2

# protect_shadow_gap=0: the CUDA driver maps memory where ASan keeps its shadow gap, so on a GPU
# machine the runtime could not start (the tests that look for a GPU would fail for that alone).
# handle_segv=0: a SIGSEGV kills the program as in the normal build, with no ASan report. The
# fault tests crash plugins and workers on purpose, dozens of times (cli.verify_kernels_crash
# alone 72), and each symbolized report cost about 0.4 s: 42 s for that test, 12 s without.
# ASan's own checks, which stop at the bad access before any SIGSEGV, are unchanged, and a
# SIGSEGV of ours still fails its test (tests/support/crash_reason.h: the fault tests accept
# either way of dying).
export ASAN_OPTIONS="protect_shadow_gap=0:detect_leaks=1:strict_string_checks=1:check_initialization_order=1:handle_segv=0"
export UBSAN_OPTIONS="print_stacktrace=1:halt_on_error=1"
# Left out, for time (this run stays near ten minutes on 2 cores): the tests below, which run in the
# normal build only. Each group says which instrumented tests still run its code. Labels: everything
# CUDA is not built here (the CUDA backend's host code, the kernel emulations, the NVRTC compile
# sweeps, GPU tests); the Ray test (label ray: two quick-profile shards; shard and merge code stays
# in test_merge and test_shard); tests of Python code alone (labels python and engine: nothing in
# them is instrumented). An entry is a test's name, or a prefix ending in '*'.
skips=(
  # The quick-profile sweeps with their full timing and the tests that read their table, and the
  # same grid in process: the smaller sweep, fault and plugin sweeps in test_sweep,
  # test_sweep_faults and test_merge run the same sweep code.
  'cli.sweep_quick_*'
  Sweep.QuickProfileEndToEndOnTheCpuBackend
  # The planted-crossover sweeps are judged on planted timings that instrumentation blurs (the
  # adaptive one failed 3 to 6 runs in 12 here; the exhaustive one once in CI beside a parallel
  # test); the normal build runs both alone (RUN_SERIAL).
  cli.sweep_planted_crossover
  cli.sweep_planted_crossover_adaptive
  # Whole verify passes over the built-in kernels, and the JUnit file of one: the same verify code
  # runs in Verify.CpuBackendPassesQuickDecode and two more Verify.* unit tests (the groups each
  # configuration gets, aiming without building), and the kernels, decode, prefill and fp8,
  # against the reference in the CpuBackend grids.
  Host/Conformance.PassesTheVerifyCases/cpu
  cli.verify_cpu_quick
  cli.verify_junit_schema
  cli.verify_all_without_gpu
  Verify.PlantedFaultIsCaughtReportedDumpedAndReplayed
  # The fp8 kernels stay instrumented in CpuBackend.Fp8DecodeGrid and Fp8PrefillGrid, at the
  # processor's own level (the x86-64-v3 grids too, where that is not its best).
  Verify.Fp8GroupsPassTheCpuKernelsAndNameEachPlantedMistake
  isa.baseline.CpuBackend.grids
  # Verify passes through plugins: the plugin boundary stays instrumented in test_plugin_backend,
  # cli.verify_fault, the old-ABI and prepare plugins' verify passes (cli.verify_kernels_abi1,
  # cli.verify_kernels_prepare: structs of another size, prepared copies made and released) and
  # the shorter plugin CLI tests (plugin check, ABI 3, workspaces); the diagnosis of a plugin's
  # wrong output in test_diagnose, test_engine_bugs and
  # cli.verify_planted_bug_fp8_scales_swapped, the one planted bug kept.
  Host/Conformance.PassesTheVerifyCases/cpu_example_plugin
  cli.verify_kernels_same_as_builtin
  cli.verify_kernels_mask_bug
  cli.verify_kernels_layout_nhd
  cli.verify_kernels_layout_vllm
  cli.verify_split_ok_quick
  cli.verify_split_ok_default_fp32
  cli.verify_split_ok_full_fp32
  cli.verify_own_splits_quick
  cli.verify_cpu_example_fp8_default
  cli.verify_cpu_example_fp8_via-fp16
  cli.verify_cpu_example_fp8_via-fp32
  cli.verify_cpu_example_fp8_x86-64-v3
  cli.verify_cpu_example_fp8_baseline
  cli.verify_planted_bug_drop_last_key
  cli.verify_planted_bug_overlap
  cli.verify_planted_bug_last_partition
  cli.verify_planted_bug_max_not_rescaled
  cli.verify_planted_bug_lse_base2
  cli.verify_planted_bug_full_last_block
  cli.verify_planted_bug_one_past
  cli.verify_planted_bug_stale_block
  cli.verify_planted_bug_lse_log2
  cli.verify_planted_bug_gqa_mod
  cli.verify_planted_bug_zero_weight_tail
  cli.verify_planted_bug_second_config
  cli.verify_planted_bug_fp8_scale_ignored
  cli.verify_planted_bug_fp8_scale_twice
  cli.verify_planted_bug_fp8_e4m3_as_e5m2
  cli.verify_planted_bug_fp8_sign_ignored
  # Sweeps and merges of plugins or of the CPU backend end to end: the sweep, merge and folder
  # code stays instrumented in test_sweep, test_sweep_faults, test_merge and the short sweep and
  # merge CLI tests (cli.merges_stopped_anywhere, cli.sweep_kernels_crash, ...). The sweeps that
  # set up other tests' tables stay (cli.sweep_faults, cli.sweep_kernels_cpu_example,
  # cli.search_check_cpu): a test whose fixture is left out would fail for that alone.
  # An adaptive search stopped at every point, and one that records faults: resuming stays
  # instrumented in AdaptiveSearch.AResumedSearchReplaysTheSameDecisions and
  # Merge.AdaptiveShardsMergeWhenEachFinishedItsSearch, faults in SweepFaults.CrashesAndHangs...
  Sweep.AnAdaptiveSearchStoppedAnywhereResumesToTheSameRuns
  SweepFaults.AnAdaptiveSearchRecordsFaultsAndGoesOn
  cli.sweep_own_splits
  cli.table_show_own_splits
  cli.table_lookup_own_splits
  cli.sweep_kernels_prepare
  cli.table_show_prepared_method
  cli.sweep_refused_leaves_no_folder
  cli.merge_foreign_line
  cli.merge_into_running_sweep
  cli.traffic_profile_batches
  cli.traffic_trace
  # Faults from plugins and from outside: the supervisor stays instrumented in test_supervisor,
  # SweepFaults.CrashesAndHangsAreFaultsAndTheSweepGoesOn, cli.verify_fault and
  # cli.sweep_kernels_crash. Verify giving up on a hanging configuration waits out three 10 s
  # deadlines, the same instrumented or not.
  fuzz.hostile_plugins
  Verify.CrashingConfigurationIsAFailedCaseAndTheRunGoesOn
  cli.verify_kernels_crash
  cli.verify_kernels_destroy_crash
  cli.sweep_kernels_destroy_crash
  cli.verify_kernels_run_exit
  cli.verify_killed_from_outside
  cli.verify_gives_up_on_a_hanging_config
  # Dumps that stop when the disk is full: dumps are written instrumented in cli.verify_fault and
  # cli.verify_dump_leftover; fp8 replay files are read in test_replay and fuzz.mutate_inputs.
  cli.verify_dumps_stop_when_full
  replay.fp8
  # A Python test that runs `table lookup` thousands of times: the lookup code stays instrumented
  # in the table CLI tests and the mutation harness.
  python.table_reader
)
# One alternative per entry, its regular-expression characters escaped, in a single group:
# CTest's expressions hold at most 9 parenthesised groups, and past that one -E expression
# silently matches nothing.
names=$(ctest --test-dir "$BUILD" -N | sed -n 's/^ *Test *#[0-9]*: //p')
alternatives=()
for entry in "${skips[@]}"; do
  escaped=$(printf '%s' "${entry%\*}" | sed 's/[][\\.|$^+?(){}*]/\\&/g')
  [[ $entry == *\* ]] && escaped="$escaped.*"
  # A renamed test would come back into this run unnoticed: say so.
  grep -qE "^$escaped\$" <<<"$names" ||
    echo "test-sanitizers.sh: warning: no test is named '$entry' (renamed? update the list)" >&2
  alternatives+=("$escaped")
done
exclude="^($(IFS='|'; echo "${alternatives[*]}"))\$"
total=$(grep -c . <<<"$names")
kept=$(ctest --test-dir "$BUILD" -N -E "$exclude" | awk '/^Total Tests:/ {print $3}')
if [ "$kept" -ge "$total" ]; then
  echo "test-sanitizers.sh: the -E expression excludes none of the $total tests" >&2
  exit 1
fi
# A test that runs here but needs a fixture whose every setup test is left out would fail for
# that alone (CTest does not bring back a setup test that -E excludes): stop, naming both.
labels='nvrtc_sweep|gpu|ray|python|engine'
ctest --test-dir "$BUILD" --show-only=json-v1 -LE "$labels" -E "$exclude" > "$BUILD/kept-tests.json"
ctest --test-dir "$BUILD" --show-only=json-v1 > "$BUILD/all-tests.json"
python3 - "$BUILD/kept-tests.json" "$BUILD/all-tests.json" <<'PY'
import json, sys
def tests(path):
    out = {}
    for t in json.load(open(path))["tests"]:
        props = {p["name"]: p["value"] for p in t.get("properties", [])}
        out[t["name"]] = props
    return out
kept, every = tests(sys.argv[1]), tests(sys.argv[2])
setups = {}
for name, props in every.items():
    for f in props.get("FIXTURES_SETUP", []):
        setups.setdefault(f, []).append(name)
bad = [f"{name} needs fixture {f}, whose setup ({', '.join(setups[f])}) is left out"
       for name, props in kept.items() for f in props.get("FIXTURES_REQUIRED", [])
       if f in setups and not any(s in kept for s in setups[f])]
for line in bad:
    print(f"test-sanitizers.sh: {line}", file=sys.stderr)
sys.exit(1 if bad else 0)
PY
ctest --test-dir "$BUILD" --output-on-failure -j2 -LE "$labels" -E "$exclude"
