# Inputs that name nothing, and standard streams closed or full: one line and the right exit code.
# A path that is not there is no plugin name.
# An empty --kernels is no way of saying "the built-in kernels": `--kernels "$PLUGIN"` with the
# variable unset must not pass a CI gate on the built-in kernels. An empty --out is no folder.
# (An empty argument cannot pass through attn_cli_test; tests/support/stdio_faults.cmake gives
# `--kernels ""` and `plugin check ""`.)
attn_cli_test(NAME verify_kernels_no_value EXIT 2 REGEX "--kernels: "
              ARGS verify --device cpu --kernels=)
attn_cli_test(NAME table_lookup_kernels_missing_file EXIT 2 REGEX "no such file"
              ARGS table lookup ${PROJECT_SOURCE_DIR}/results/cpu-amd-epyc-quick.json
                   --kernels ./nope.so --batch 1 --num-heads 8 --num-kv-heads 2 --head-dim 128
                   --context-len 512 --block-size 16 --dtype fp16 --device-name "AMD EPYC")

if(EXISTS ${PROJECT_SOURCE_DIR}/src/backends/cpu/cpu_backend.cpp AND UNIX)
  set(inputs_data ${CMAKE_CURRENT_BINARY_DIR}/cli_data/inputs)
  file(WRITE ${inputs_data}/one_point.json
       "{\"name\": \"one-point\", \"decode\": {\"batch\": [1], \"context_len\": [64],\n"
       " \"num_kv_heads\": [1], \"gqa_ratio\": [2], \"head_dim\": [32], \"block_size\": [16],\n"
       " \"dtype\": [\"fp32\"]},\n"
       " \"timing\": {\"warmup\": 1, \"min_reps\": 3, \"max_reps\": 3, \"max_seconds\": 0.01}}\n")
  add_test(NAME cli.stdio_closed_and_full
           COMMAND ${CMAKE_COMMAND} -DEXE=$<TARGET_FILE:attn-tune>
                   -DPROFILE=${inputs_data}/one_point.json -DWORK=${inputs_data}/stdio
                   -P ${PROJECT_SOURCE_DIR}/tests/support/stdio_faults.cmake)
  set_tests_properties(cli.stdio_closed_and_full PROPERTIES LABELS "cli" RESOURCE_LOCK cpu_timing)
endif()

# A kernel set with no family for the profile's phases (a decode-only plugin, a prefill profile)
# times nothing: exit 4 saying so, not a success with an empty table; the table's fitted rule is
# "none", not a rule fitted on nothing.
set(inputs_work ${CMAKE_CURRENT_BINARY_DIR}/cli_work/inputs)
file(WRITE ${CMAKE_CURRENT_BINARY_DIR}/cli_data/inputs/prefill_only.json
     "{\"name\": \"prefill-only\", \"prefill\": {\"batch\": [1], \"q_len\": [16],\n"
     " \"k_len\": [16], \"num_kv_heads\": [1], \"gqa_ratio\": [1], \"head_dim\": [32],\n"
     " \"block_size\": [16], \"dtype\": [\"fp32\"]}}\n")
add_test(NAME cli.sweep_no_family_clean COMMAND ${CMAKE_COMMAND} -E rm -rf ${inputs_work}/no_family)
set_tests_properties(cli.sweep_no_family_clean PROPERTIES LABELS "cli"
                     FIXTURES_SETUP no_family_clean)
attn_cli_test(NAME sweep_no_family EXIT 4
              REGEX "nothing was timed: the kernels have no configuration for any workload"
              ARGS sweep --kernels ${ATTN_INIT_PLUGIN} --device cpu --threads 1 --quiet --no-report
                   --profile ${CMAKE_CURRENT_BINARY_DIR}/cli_data/inputs/prefill_only.json
                   --out ${inputs_work}/no_family)
set_tests_properties(cli.sweep_no_family PROPERTIES FIXTURES_REQUIRED no_family_clean
                     FIXTURES_SETUP no_family_table)
attn_cli_test(NAME table_show_no_rule EXIT 0
              REGEX "fitted rule: none \\(no decode point of the sweep timed both v1 and v2\\)"
              ARGS table show ${inputs_work}/no_family/threshold_table.json)
set_tests_properties(cli.table_show_no_rule PROPERTIES FIXTURES_REQUIRED no_family_table)

# Numbers on the command line are never wrapped or NaN: --seed -1 is not 2^64 - 1 (CLI11 reads it
# so), and --hold-out nan passed the range check (every comparison with NaN is false).
attn_cli_test(NAME sweep_seed_negative EXIT 2 REGEX "--seed: '-1' is not an integer from 0 to"
              ARGS sweep --device cpu --profile quick --seed -1)
attn_cli_test(NAME sweep_seed_past_64_bits EXIT 2 REGEX "'18446744073709551616' is not an integer"
              ARGS sweep --device cpu --profile quick --seed 18446744073709551616)
attn_cli_test(NAME sweep_hold_out_nan EXIT 2 REGEX "--hold-out: 'nan' is not a finite number"
              ARGS sweep --device cpu --profile quick --hold-out nan)

# A profile's configuration with a parameter the kernels do not declare (a misspelt "partitoin")
# made every run of its family a refusal and the table lose the family, exit 0; now exit 2, before
# the sweep's header (the refusal is the command's only line).
file(WRITE ${CMAKE_CURRENT_BINARY_DIR}/cli_data/inputs/misspelt_config.json
     "{\"name\": \"misspelt\", \"decode\": {\"batch\": [1], \"context_len\": [64],\n"
     " \"num_kv_heads\": [1], \"gqa_ratio\": [2], \"head_dim\": [32], \"block_size\": [16],\n"
     " \"dtype\": [\"fp32\"]}, \"configs\": {\"decode_v2\": [{\"partitoin\": 256}]}}\n")
attn_cli_test(NAME sweep_config_param_unknown EXIT 2
              REGEX "configs.decode_v2: 'partitoin' is not a parameter the kernels declare"
              ABSENT "sweep: profile"
              ARGS sweep --device cpu --threads 1 --quiet
                   --profile ${CMAKE_CURRENT_BINARY_DIR}/cli_data/inputs/misspelt_config.json
                   --out ${CMAKE_CURRENT_BINARY_DIR}/cli_work/inputs/misspelt)

# A profile written here, and the sweep's refusal of it: one line, exit 2, before its header line,
# nothing measured.
function(attn_refused_profile name text regex)
  set(file ${CMAKE_CURRENT_BINARY_DIR}/cli_data/inputs/${name}.json)
  file(WRITE ${file} "${text}")
  attn_cli_test(NAME sweep_${name} EXIT 2 REGEX "${regex}"
                ABSENT "sweep: profile"
                ARGS sweep --device cpu --threads 1 --quiet --profile ${file}
                     --out ${CMAKE_CURRENT_BINARY_DIR}/cli_work/inputs/${name})
endfunction()
string(CONCAT attn_grid "\"decode\": {\"batch\": [1], \"context_len\": [64], \"num_kv_heads\": [1],"
       " \"gqa_ratio\": [2], \"head_dim\": [32], \"block_size\": [16], \"dtype\": [\"fp32\"]")

# A profile nested 100,000 deep (in a field the parser would otherwise keep) overflowed the stack
# (an audit from the docs alone, 2026-12-06): refused as it is parsed.
string(REPEAT "[" 100000 attn_open)
string(REPEAT "]" 100000 attn_close)
attn_refused_profile(profile_nested_too_deep
                     "{\"name\": \"deep\", \"description\": ${attn_open}${attn_close}}"
                     "profile_nested_too_deep.json: not valid JSON \\(nested deeper than 200 levels\\)")
# Valid-looking values the same audit found misread: a softcap of 1e-50 is 0 in the kernels' fp32
# (every configuration "failed validation"); a profile named ".." wrote its results into the
# folder above attn-tune-out.
attn_refused_profile(softcap_below_fp32
                     "{\"name\": \"tiny\", ${attn_grid}, \"softcap\": [30, 1e-50]}}"
                     "decode.softcap\\[1\\]: expected 0 \\(off\\) or at least 1.2e-38")
attn_refused_profile(profile_named_dotdot "{\"name\": \"..\", ${attn_grid}}}"
                     "name: expected a name with a letter or digit \\(it names the output folder\\)")
# A folder given as the profile is named as one (it was "does not exist").
attn_cli_test(NAME sweep_profile_is_a_folder EXIT 2 REGEX "is a folder, not a profile file"
              ARGS sweep --device cpu --quiet --profile ${CMAKE_CURRENT_BINARY_DIR}/cli_data/inputs)
# A batch too big to make (65,536 sequences of a million tokens: 6e9 cache blocks with the default
# pool_factor of 1.5, past the 2^30 a problem may have) is refused before anything is measured (it
# ended the sweep with exit 4 after every other workload).
attn_refused_profile(workload_too_big
                     "{\"name\": \"too_big\", \"decode\": {\"batch\": [1, 65536], \"context_len\": [1000000],\n \"num_kv_heads\": [1], \"gqa_ratio\": [2], \"head_dim\": [32], \"block_size\": [16],\n \"dtype\": [\"fp32\"]}}"
                     "workload decode b=65536 ctx=1000000 .* needs 6144000000 cache blocks of 16 tokens \\(pool_factor")
