# A kernel set whose costs are planted (tests/plugins/split_kv_plugin.c, SPLIT_SPIN: decode_v1
# 500 ns per key of the batch, decode_v2 300 us + 250 ns per key, so v2 wins from 1200 keys on):
# a sweep over a context grid around that point must put the table's switch between the two grid
# lengths that bracket it, and `table lookup` must answer v1 below and v2 above. The grid's
# lengths nearest the crossover (768, 2048) keep the two costs 26% or more apart, above the
# timing noise of a shared machine. Both searches are held to it: the adaptive one (issue 30's
# known-crossover case) must land its switch there too. Each runs alone (RUN_SERIAL): a test
# beside it on a 2-core machine can hold the spinning worker off the CPU past its planted end.
set(crossover_work ${CMAKE_CURRENT_BINARY_DIR}/cli_work/planted_crossover)
set(ATTN_CROSSOVER_PROFILE ${CMAKE_CURRENT_BINARY_DIR}/cli_data/planted_crossover_profile.json)
file(WRITE ${ATTN_CROSSOVER_PROFILE}
     "{\"name\": \"planted-crossover\", \"decode\": {\"batch\": [1],\n"
     " \"context_len\": [256, 384, 512, 768, 2048, 2560, 3072, 4096],\n"
     " \"num_kv_heads\": [1], \"gqa_ratio\": [2], \"head_dim\": [32], \"block_size\": [16],\n"
     " \"dtype\": [\"fp32\"]},\n"
     " \"timing\": {\"warmup\": 1, \"min_reps\": 5, \"max_reps\": 20, \"max_seconds\": 0.1}}\n")
add_test(NAME cli.sweep_planted_crossover
         COMMAND ${CMAKE_COMMAND} -DEXE=$<TARGET_FILE:attn-tune> -DPLUGIN=${ATTN_SPLIT_SPIN_PLUGIN}
                 -DPROFILE=${ATTN_CROSSOVER_PROFILE} -DWORK=${crossover_work}
                 -P ${CMAKE_CURRENT_SOURCE_DIR}/plugins/planted_crossover.cmake)
set_tests_properties(cli.sweep_planted_crossover PROPERTIES LABELS "cli" RUN_SERIAL TRUE)
add_test(NAME cli.sweep_planted_crossover_adaptive
         COMMAND ${CMAKE_COMMAND} -DEXE=$<TARGET_FILE:attn-tune> -DPLUGIN=${ATTN_SPLIT_SPIN_PLUGIN}
                 -DPROFILE=${ATTN_CROSSOVER_PROFILE} -DWORK=${crossover_work}_adaptive
                 -DSEARCH=adaptive -P ${CMAKE_CURRENT_SOURCE_DIR}/plugins/planted_crossover.cmake)
set_tests_properties(cli.sweep_planted_crossover_adaptive PROPERTIES LABELS "cli" RUN_SERIAL TRUE)
