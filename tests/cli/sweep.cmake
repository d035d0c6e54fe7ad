# CLI tests of `attn-tune sweep`: usage and profile errors exit 2 with one line naming the
# problem; with the CPU backend built in, the quick profile runs end to end and resumes.
set(ATTN_CLI_DATA ${CMAKE_CURRENT_BINARY_DIR}/cli_data)
file(WRITE ${ATTN_CLI_DATA}/bad_profile.json
     "{\"name\": \"bad\", \"decode\": {\"batch\": [1, \"x\"], \"context_len\": [64],\n"
     " \"num_kv_heads\": [1], \"gqa_ratio\": [1], \"head_dim\": [32], \"block_size\": [16],\n"
     " \"dtype\": [\"fp32\"]}}\n")
file(WRITE ${ATTN_CLI_DATA}/unknown_key_profile.json
     "{\"name\": \"bad\", \"decode\": {\"batch\": [1], \"context_len\": [64], \"num_kv_heads\": [1],\n"
     " \"gqa_ratio\": [1], \"head_dim\": [32], \"block_size\": [16], \"dtype\": [\"fp32\"]},\n"
     " \"timing\": {\"warmup\": 1, \"repeats\": 5}}\n")

attn_cli_test(NAME sweep_malformed_profile EXIT 2
              REGEX "profile .*bad_profile.json: decode\\.batch\\[1\\]: expected a positive integer, got \"x\""
              ARGS sweep --device cpu --profile ${ATTN_CLI_DATA}/bad_profile.json)
attn_cli_test(NAME sweep_profile_unknown_key EXIT 2
              REGEX "timing\\.repeats: unknown key"
              ARGS sweep --device cpu --profile ${ATTN_CLI_DATA}/unknown_key_profile.json)
# A threshold table given as the profile is said to be one.
attn_cli_test(NAME sweep_table_as_profile EXIT 2
              REGEX "cpu-amd-epyc-quick\\.json: this is an attn-tune threshold-table file, not a profile"
              ARGS sweep --device cpu --profile ${PROJECT_SOURCE_DIR}/results/cpu-amd-epyc-quick.json
                   --out ${CMAKE_CURRENT_BINARY_DIR}/cli_work/never_table_as_profile)
attn_cli_test(NAME sweep_unknown_profile EXIT 2 REGEX "unknown profile 'nope' \\(built in: default"
              ARGS sweep --profile nope)
attn_cli_test(NAME sweep_missing_profile_file EXIT 2 REGEX "does not exist"
              ARGS sweep --profile /nonexistent/p.json)
attn_cli_test(NAME sweep_unknown_flag EXIT 2 REGEX "--bogus" ARGS sweep --bogus)
attn_cli_test(NAME sweep_bad_threads EXIT 2 ARGS sweep --threads -3)
attn_cli_test(NAME sweep_bad_timing_mode EXIT 2 REGEX "--timing: cupti not in \\{events,graph\\}"
              ARGS sweep --device cpu --profile quick --timing cupti)
attn_cli_test(NAME sweep_graph_timing_on_cpu EXIT 2
              REGEX "error: --timing graph needs a CUDA device; cpu times with events only"
              ARGS sweep --device cpu --profile quick --timing graph)
attn_cli_test(NAME sweep_absent_gpu EXIT 3 REGEX "device unavailable"
              ARGS sweep --device cuda:7 --profile quick)

if(EXISTS ${PROJECT_SOURCE_DIR}/src/backends/cpu/cpu_backend.cpp)
  set(quick_out ${CMAKE_CURRENT_BINARY_DIR}/cli_work/sweep_quick_out)
  add_test(NAME cli.sweep_quick_clean COMMAND ${CMAKE_COMMAND} -E rm -rf ${quick_out})
  set_tests_properties(cli.sweep_quick_clean PROPERTIES LABELS "cli" FIXTURES_SETUP quick_clean)
  attn_cli_test(NAME sweep_quick_cpu EXIT 0 REGEX "table .*threshold_table\\.json"
                ARGS sweep --device cpu --profile quick --threads 2 --quiet --out ${quick_out})
  set_tests_properties(cli.sweep_quick_cpu PROPERTIES FIXTURES_REQUIRED quick_clean
                                                      FIXTURES_SETUP quick_table TIMEOUT 600
                                                      RESOURCE_LOCK cpu_timing)
  # The quick profile's decode grid with an fp8_e4m3 KV cache beside the fp16 one (issue 29):
  # `table lookup --kv-dtype fp8_e4m3` returns the fp8 points' decisions, and plain calls the
  # fp16 cache's. The script needs Python's standard library only: the bridge's interpreter, else
  # (the sanitized build looks for none) the first python3 on PATH.
  if(Python3_EXECUTABLE)
    set(ATTN_FP8_LOOKUP_PYTHON ${Python3_EXECUTABLE})
  else()
    find_program(ATTN_FP8_LOOKUP_PYTHON NAMES python3)
  endif()
  if(ATTN_FP8_LOOKUP_PYTHON)
    add_test(NAME cli.sweep_quick_fp8_lookup
             COMMAND ${ATTN_FP8_LOOKUP_PYTHON} ${CMAKE_CURRENT_SOURCE_DIR}/cli/fp8_sweep_lookup.py
                     $<TARGET_FILE:attn-tune> ${PROJECT_SOURCE_DIR}/profiles/quick.json
                     ${CMAKE_CURRENT_BINARY_DIR}/cli_work/sweep_quick_fp8)
    set_tests_properties(cli.sweep_quick_fp8_lookup PROPERTIES LABELS "cli" TIMEOUT 600
                         RESOURCE_LOCK cpu_timing)
  endif()
  # The built-in CPU kernels replace vLLM CPU's rule: named, and first among the engines'.
  attn_cli_test(NAME sweep_quick_show EXIT 0
                REGEX "engine:   the kernels replace vLLM CPU's rule \\(vllm-cpu: .*fitted rule: use v2 \\(partition [0-9]+\\).*table_lookup [0-9.]+%/[0-9.]+% vllm_cpu \\(the kernel set's own rule\\) [0-9.]+%/[0-9.]+% vllm_cuda "
                ARGS table show ${quick_out}/threshold_table.json)
  attn_cli_test(NAME sweep_quick_lookup EXIT 0 REGEX "^decode_v[12] decode_v[12].[a-z]"
                ARGS table lookup ${quick_out}/threshold_table.json --device cpu --batch 3
                     --context-len 100 --num-heads 4 --num-kv-heads 2 --head-dim 32
                     --block-size 16 --dtype fp32)
  attn_cli_test(NAME sweep_quick_needs_resume EXIT 2 REGEX "pass --resume"
                ARGS sweep --device cpu --profile quick --out ${quick_out})
  attn_cli_test(NAME sweep_quick_resume EXIT 0 REGEX "from an earlier run"
                ARGS sweep --device cpu --profile quick --threads 2 --quiet --resume
                     --out ${quick_out})
  set_tests_properties(cli.sweep_quick_show cli.sweep_quick_lookup cli.sweep_quick_needs_resume
                       PROPERTIES FIXTURES_REQUIRED quick_table)
  # Resuming rewrites the table: run it after the readers of the first one.
  set_tests_properties(cli.sweep_quick_resume PROPERTIES FIXTURES_REQUIRED quick_table
                       DEPENDS "cli.sweep_quick_show;cli.sweep_quick_lookup;cli.sweep_quick_needs_resume"
                       RESOURCE_LOCK cpu_timing)
  # Another process holds the folder (util-linux flock stands for a sweep still running there):
  # the second sweep exits 2 at once, naming the folder, and leaves the results alone.
  find_program(ATTN_FLOCK flock)
  if(ATTN_FLOCK)
    add_test(NAME cli.sweep_quick_folder_in_use
             COMMAND ${CMAKE_COMMAND} -DEXE=${ATTN_FLOCK}
                     "-DARGS=${quick_out}/.attn-tune.lock|$<TARGET_FILE:attn-tune>|sweep|--device|cpu|--profile|quick|--threads|2|--quiet|--resume|--out|${quick_out}"
                     -DEXIT=2 "-DREGEX=output folder '[^']*' is in use by another attn-tune process"
                     -DWORKDIR=${CMAKE_CURRENT_BINARY_DIR}/cli_work/sweep_quick_folder_in_use
                     -P ${CMAKE_CURRENT_SOURCE_DIR}/cli/expect.cmake)
    set_tests_properties(cli.sweep_quick_folder_in_use PROPERTIES LABELS "cli"
                         FIXTURES_REQUIRED quick_table DEPENDS cli.sweep_quick_resume)
  endif()
endif()

# Decisions that rest on timings within noise (docs/threshold-table.md). The noise is planted,
# not waited for: after a tiny real sweep, every line of its results.jsonl gets an interquartile
# range of a whole second, so every length is within noise whatever the machine did; the resumed
# sweep then lists them on stderr and in the table, and --remeasure-noisy times them again.
attn_cli_test(NAME sweep_remeasure_noisy_needs_resume EXIT 2
              REGEX "--remeasure-noisy .* needs --resume"
              ARGS sweep --device cpu --profile quick --remeasure-noisy)
if(EXISTS ${PROJECT_SOURCE_DIR}/src/backends/cpu/cpu_backend.cpp)
  file(WRITE ${ATTN_CLI_DATA}/noisy_profile.json
       "{\"name\": \"noisy\", \"decode\": {\"batch\": [1], \"context_len\": [64, 300],\n"
       " \"num_kv_heads\": [1], \"gqa_ratio\": [2], \"head_dim\": [32], \"block_size\": [16],\n"
       " \"dtype\": [\"fp32\"]},\n"
       " \"timing\": {\"warmup\": 1, \"min_reps\": 3, \"max_reps\": 10, \"max_seconds\": 0.05}}\n")
  file(WRITE ${ATTN_CLI_DATA}/plant_noise.cmake [=[
# Gives every measurement of results.jsonl (-DFILE=) an interquartile range of a whole second
# and v2 a median 0.1 s below v1's: within noise at every length, v2's median the lower each time.
file(STRINGS "${FILE}" lines)
set(text "")
foreach(line IN LISTS lines)
  string(REGEX REPLACE "\"p25_s\":[-+.eE0-9]+" "\"p25_s\":0.0" line "${line}")
  string(REGEX REPLACE "\"p75_s\":[-+.eE0-9]+" "\"p75_s\":1.0" line "${line}")
  if(line MATCHES "decode_v2")
    string(REGEX REPLACE "\"median_s\":[-+.eE0-9]+" "\"median_s\":0.4" line "${line}")
  else()
    string(REGEX REPLACE "\"median_s\":[-+.eE0-9]+" "\"median_s\":0.5" line "${line}")
  endif()
  string(APPEND text "${line}\n")
endforeach()
file(WRITE "${FILE}" "${text}")
]=])
  file(WRITE ${ATTN_CLI_DATA}/check_remeasured.cmake [=[
# results.jsonl (-DFILE=) holds WANT re-timed lines, and the table (-DTABLE=) was written again.
file(READ "${FILE}" text)
string(REGEX MATCHALL "\"remeasure_factor\":4" found "${text}")
list(LENGTH found n)
if(NOT n EQUAL "${WANT}")
  message(FATAL_ERROR "expected ${WANT} re-timed lines in ${FILE}, found ${n}")
endif()
if(NOT EXISTS "${TABLE}")
  message(FATAL_ERROR "--remeasure-noisy did not write ${TABLE}")
endif()
]=])
  set(noisy_out ${CMAKE_CURRENT_BINARY_DIR}/cli_work/sweep_noisy_out)
  set(noisy_args --device cpu --profile ${ATTN_CLI_DATA}/noisy_profile.json --threads 2 --quiet
                 --no-report --out ${noisy_out})
  add_test(NAME cli.sweep_noisy_clean COMMAND ${CMAKE_COMMAND} -E rm -rf ${noisy_out})
  attn_cli_test(NAME sweep_noisy_cpu EXIT 0 REGEX "sweep: 16 measurements" ARGS sweep ${noisy_args})
  add_test(NAME cli.sweep_noisy_plant
           COMMAND ${CMAKE_COMMAND} -DFILE=${noisy_out}/results.jsonl
                   -P ${ATTN_CLI_DATA}/plant_noise.cmake)
  # Both lengths within noise and none beyond it, v2's median lower at both: v1 stands by
  # default at both, and a switch to v2 may hide in the noise.
  attn_cli_test(NAME sweep_noisy_warns EXIT 0
                REGEX "sweep: 2 decisions rest on timings within noise.*sweep:   fp32 d=32 bs=16 kvh=1 gqa=2 batch=1 ctx 64: v1 by default \\(no length beyond noise\\).*sweep: re-time them with 4x the repetitions: attn-tune sweep --profile [^\n]*noisy_profile\\.json --out [^\n]*sweep_noisy_out --resume --remeasure-noisy"
                ARGS sweep --resume ${noisy_args})
  attn_cli_test(NAME sweep_noisy_show EXIT 0
                REGEX "noisy decisions: 2 decisions rest on timings within noise.*batch=1 ctx 300: v1 by default"
                ARGS table show ${noisy_out}/threshold_table.json)
  add_test(NAME cli.sweep_noisy_drop_table
           COMMAND ${CMAKE_COMMAND} -E rm -f ${noisy_out}/threshold_table.json)
  # Every configuration of both lengths is timed again (2 x 8 runs); how the new timings come
  # out is the machine's business, so only the re-timing and the new table are checked.
  attn_cli_test(NAME sweep_remeasure_noisy EXIT 0
                REGEX "re-timed 16 of 16 configurations at 2 noisy decisions with 4x.*sweep: table [^\n]*threshold_table\\.json"
                ARGS sweep --resume --remeasure-noisy ${noisy_args})
  add_test(NAME cli.sweep_remeasure_noisy_wrote
           COMMAND ${CMAKE_COMMAND} -DFILE=${noisy_out}/results.jsonl -DWANT=16
                   -DTABLE=${noisy_out}/threshold_table.json
                   -P ${ATTN_CLI_DATA}/check_remeasured.cmake)
  set(noisy_chain sweep_noisy_clean sweep_noisy_cpu sweep_noisy_plant sweep_noisy_warns
                  sweep_noisy_show sweep_noisy_drop_table sweep_remeasure_noisy
                  sweep_remeasure_noisy_wrote)
  set(previous "")
  foreach(step ${noisy_chain})
    set_tests_properties(cli.${step} PROPERTIES LABELS "cli" FIXTURES_SETUP noisy_${step})
    if(previous)
      set_tests_properties(cli.${step} PROPERTIES FIXTURES_REQUIRED noisy_${previous})
    endif()
    set(previous ${step})
  endforeach()
  set_tests_properties(cli.sweep_noisy_cpu cli.sweep_noisy_warns cli.sweep_remeasure_noisy
                       PROPERTIES RESOURCE_LOCK cpu_timing)
endif()
