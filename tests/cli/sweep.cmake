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
  attn_cli_test(NAME sweep_quick_show EXIT 0 REGEX "fitted rule: use v2"
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
