# A decode_v2 that declares no partition and chooses its splits (tests/plugins/split_kv_plugin.c
# built with SPLIT_OWN_SPLITS): verify and plugin check pass it (edges at block boundaries and
# long contexts, no partition group), and a small sweep writes a table that records its v2 as
# the kernel's own splits, never as a partition: `table show` says so, as `table lookup` does.
set(own_work ${CMAKE_CURRENT_BINARY_DIR}/cli_work/own_splits)

attn_cli_test(NAME verify_own_splits_quick EXIT 0 REGEX " 0 failed"
              ARGS verify --kernels ${ATTN_SPLIT_OWN_SPLITS_PLUGIN} --device cpu --threads 2
                   --intensity quick --dtypes fp32)
attn_cli_test(NAME plugin_check_own_splits EXIT 0 REGEX "every family passed"
              ARGS plugin check ${ATTN_SPLIT_OWN_SPLITS_PLUGIN} --threads 2)

# The plugins' small profile (written by plugins.cmake at configure time): its prefill workloads
# are skipped, the plugin has no prefill; at 1500 keys the v2 runs 6 splits of 256.
set(own_profile ${CMAKE_CURRENT_BINARY_DIR}/cli_data/plugin_profile.json)
add_test(NAME cli.sweep_own_splits_clean COMMAND ${CMAKE_COMMAND} -E rm -rf ${own_work}/sweep)
set_tests_properties(cli.sweep_own_splits_clean PROPERTIES LABELS "cli"
                     FIXTURES_SETUP own_splits_clean)
attn_cli_test(NAME sweep_own_splits EXIT 0 REGEX "0 failed validation.*0 faults"
              ARGS sweep --kernels ${ATTN_SPLIT_OWN_SPLITS_PLUGIN} --profile ${own_profile}
                   --threads 2 --quiet --out ${own_work}/sweep)
set_tests_properties(cli.sweep_own_splits PROPERTIES RESOURCE_LOCK cpu_timing
                     FIXTURES_REQUIRED own_splits_clean FIXTURES_SETUP own_splits_table)
# The fitted rule launches v2 without a partition (its tiles count keys), and every measured
# v2 is the kernel's own splits.
attn_cli_test(NAME table_show_own_splits EXIT 0
              REGEX "engine:   the kernels replace vLLM CPU's rule .*fitted rule: use v2 \\(the kernel chooses its splits\\) when [a-z_*]+\\*context_len > .*ctx 1500: v1 [0-9.]+ us, v2 [0-9.]+ us \\(the kernel chooses its splits\\)"
              ARGS table show ${own_work}/sweep/threshold_table.json)
set_tests_properties(cli.table_show_own_splits PROPERTIES FIXTURES_REQUIRED own_splits_table)

# Which family wins there depends on the machine; the reader fixture with its v2 configurations
# stripped of their partition (as such a kernel declares them) always answers v2 at batch 1, ctx
# 2048, and `table lookup` says the kernel chooses its splits.
file(READ ${PROJECT_SOURCE_DIR}/python/testdata/synthetic_table.json own_table)
string(REGEX REPLACE "\"params\": {\n *\"partition\": [0-9]+\n *}" "\"params\": {}"
       own_table "${own_table}")
string(REGEX REPLACE "decode_v2\\[partition=[0-9]+\\]" "decode_v2[]" own_table "${own_table}")
file(WRITE ${own_work}/fixture_own_splits.json "${own_table}")
attn_cli_test(NAME table_lookup_own_splits EXIT 0
              REGEX "^decode_v2 decode_v2\\[\\] \\(the kernel chooses its splits\\)\n"
              ARGS table lookup ${own_work}/fixture_own_splits.json --device cuda:0 --batch 1
                   --context-len 2048 --num-heads 32 --num-kv-heads 8 --head-dim 128
                   --block-size 16 --dtype fp16)
