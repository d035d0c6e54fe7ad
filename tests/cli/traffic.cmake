# Batches of mixed lengths and traffic traces (docs/traffic.md, docs/threshold-table.md version
# 4): a profile's mixed batches and a trace sweep into batch rules and traffic regret; a
# malformed trace or mix is one line, exit 2; a lookup with a batch's lengths works on tables
# without batch rules too.
set(ATTN_TRAFFIC ${PROJECT_SOURCE_DIR}/tests/traffic)
attn_cli_test(NAME traffic_malformed_trace EXIT 2
              REGEX "traffic trace [^\n]*bad_trace.jsonl line 2: seq_lens\\[1\\]: expected a context length from 1 to 10000000, got 0"
              ARGS sweep --device cpu --profile ${ATTN_TRAFFIC}/mixed_profile.json
                   --traffic ${ATTN_TRAFFIC}/bad_trace.jsonl)
attn_cli_test(NAME traffic_missing_trace EXIT 2 REGEX "traffic trace /nonexistent.jsonl: cannot read it"
              ARGS sweep --device cpu --profile quick --traffic /nonexistent.jsonl)
file(WRITE ${CMAKE_CURRENT_BINARY_DIR}/cli_data/bad_mix_profile.json
     "{\"name\": \"bad-mix\", \"decode\": {\"batch\": [2], \"length_mix\": [{\"dist\": \"lognormal\","
     " \"median\": 40, \"sigma\": -1}], \"num_kv_heads\": [1], \"gqa_ratio\": [1], \"head_dim\": [32],"
     " \"block_size\": [16], \"dtype\": [\"fp32\"]}}\n")
attn_cli_test(NAME traffic_bad_length_mix EXIT 2
              REGEX "decode\\.length_mix\\[0\\]\\.sigma: expected a number >= 0, got -1"
              ARGS sweep --device cpu --profile ${CMAKE_CURRENT_BINARY_DIR}/cli_data/bad_mix_profile.json)
attn_cli_test(NAME traffic_lookup_needs_lengths EXIT 2
              REGEX "give --batch and --context-len, or a batch's --seq-lens"
              ARGS table lookup ${PROJECT_SOURCE_DIR}/python/testdata/synthetic_table_v3.json --num-heads 4
                   --num-kv-heads 2 --head-dim 32 --block-size 16 --dtype fp32)
# The hand-written table the vLLM CPU rule example reads by default is a table attn-tune reads.
attn_cli_test(NAME table_lookup_vllm_cpu_fixture EXIT 0 REGEX "^decode_v1 decode_v1\\[isa=1\\]\n"
              ARGS table lookup ${PROJECT_SOURCE_DIR}/python/testdata/vllm_cpu_synthetic_table.json
                   --batch 1 --context-len 600 --num-heads 32 --num-kv-heads 8 --head-dim 128
                   --block-size 32 --dtype bf16)
# --batch or --context-len next to --seq-lens must agree with it (as the Python reader).
attn_cli_test(NAME traffic_lookup_batch_disagrees EXIT 2
              REGEX "--batch 3 disagrees with --seq-lens \\(2 lengths\\)"
              ARGS table lookup ${PROJECT_SOURCE_DIR}/python/testdata/synthetic_table_v3.json --batch 3
                   --seq-lens 9000,1 --num-heads 4 --num-kv-heads 1 --head-dim 128 --block-size 16
                   --dtype fp16)
attn_cli_test(NAME traffic_lookup_context_disagrees EXIT 2
              REGEX "--context-len 64 disagrees with --seq-lens \\(longest 9000\\)"
              ARGS table lookup ${PROJECT_SOURCE_DIR}/python/testdata/synthetic_table_v3.json
                   --context-len 64 --seq-lens 9000,1 --num-heads 4 --num-kv-heads 1 --head-dim 128
                   --block-size 16 --dtype fp16)
attn_cli_test(NAME traffic_lookup_bad_lengths EXIT 2 REGEX "--seq-lens: 'x' is not a context length"
              ARGS table lookup ${PROJECT_SOURCE_DIR}/python/testdata/synthetic_table_v3.json --seq-lens 4,x
                   --num-heads 4 --num-kv-heads 2 --head-dim 32 --block-size 16 --dtype fp32)

if(EXISTS ${PROJECT_SOURCE_DIR}/src/backends/cpu/cpu_backend.cpp)
  add_test(NAME cli.traffic_profile_batches
           COMMAND ${CMAKE_COMMAND} -DEXE=$<TARGET_FILE:attn-tune>
                   -DPROFILE=${ATTN_TRAFFIC}/mixed_profile.json
                   -DWORK=${CMAKE_CURRENT_BINARY_DIR}/cli_work/traffic_profile
                   -P ${ATTN_TRAFFIC}/traffic_sweep.cmake)
  add_test(NAME cli.traffic_trace
           COMMAND ${CMAKE_COMMAND} -DEXE=$<TARGET_FILE:attn-tune>
                   -DPROFILE=${ATTN_TRAFFIC}/mixed_profile.json
                   -DTRACE=${ATTN_TRAFFIC}/chat_trace.jsonl
                   -DWORK=${CMAKE_CURRENT_BINARY_DIR}/cli_work/traffic_trace
                   -P ${ATTN_TRAFFIC}/traffic_sweep.cmake)
  set_tests_properties(cli.traffic_profile_batches cli.traffic_trace PROPERTIES
                       LABELS "cli" RESOURCE_LOCK cpu_timing TIMEOUT 600)
endif()
# A version 3 table has no batch rules: a batch's lengths are read as its size and longest length.
attn_cli_test(NAME traffic_lookup_v3_falls_back EXIT 0 REGEX "^decode_v[12] decode_v[12][^(\n]*\n"
              ARGS table lookup ${PROJECT_SOURCE_DIR}/python/testdata/synthetic_table_v3.json
                   --seq-lens 30,2000,45 --num-heads 4 --num-kv-heads 1 --head-dim 128
                   --block-size 16 --dtype fp16)
