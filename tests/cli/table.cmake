# CLI tests of `attn-tune table show|lookup` on the synthetic fixture tables (version 3, and the
# version-2 and version-1 ones kept from before) and the shipped tables, and the Python reader's
# own tests, which also check that it agrees with `table lookup`.
set(ATTN_TABLE_FIXTURE ${PROJECT_SOURCE_DIR}/python/testdata/synthetic_table.json)
set(ATTN_TABLE_FIXTURE_V2 ${PROJECT_SOURCE_DIR}/python/testdata/synthetic_table_v2.json)
set(ATTN_TABLE_FIXTURE_V1 ${PROJECT_SOURCE_DIR}/python/testdata/synthetic_table_v1.json)
# The fixture's kernels replace vLLM CUDA's rule: named, and first among the engines' rules.
attn_cli_test(NAME table_show EXIT 0
              REGEX "engine:   the kernels replace vLLM CUDA's rule \\(vllm-cuda: .*sweep points  +fitted_rule [0-9.]+%/[0-9.]+% table_lookup [0-9.]+%/[0-9.]+% vllm_cuda \\(the kernel set's own rule\\) [0-9.]+%/[0-9.]+% vllm_cpu .*kvh=8 gqa=4 batch=1: v2 from ctx 1821"
              ARGS table show ${ATTN_TABLE_FIXTURE})
# kvh 8, batch 4: v2 by 28% at ctx 64, within noise at 512, v1 at 4096 (issue 11). v2's median is
# the lower one at 512, so the switch to v1 comes right after it, at 558.
attn_cli_test(NAME table_show_intervals EXIT 0
              REGEX "batch=4: v2 below ctx 558, v1 from 558.*ctx 64: .*v2 faster by 27\\.8% \\(noise 2\\.6%\\).*ctx 512: .*within noise \\(1\\.1% <= 2\\.0%\\)"
              ARGS table show ${ATTN_TABLE_FIXTURE})
# The within-noise length 512 carries v2 from 64 and could move the switch to v1 (before 4096); table
# show lists it (next to a switch: first) with the remedy.
attn_cli_test(NAME table_show_noisy_decisions EXIT 0
              REGEX "noisy decisions: 1 decision rests on timings within noise[^\n]*; 1 next to a switch between v1 and v2, which could move\n  fp16 d=128 bs=16 kvh=8 gqa=4 batch=4 ctx 512: v2 carried from ctx 64; v2's median is 1\\.1% faster \\(within the noise of 2\\.0%\\); the switch to v1 before ctx 4096 could lie this early\n.*re-time them with 4x the repetitions: attn-tune sweep --resume --remeasure-noisy"
              ARGS table show ${ATTN_TABLE_FIXTURE})
# A sweep's folder stands for its table, as in `report`; a folder without one is one line, exit 2
# (it was an "internal error", exit 4).
configure_file(${ATTN_TABLE_FIXTURE} ${CMAKE_CURRENT_BINARY_DIR}/cli_data/table_folder/threshold_table.json
               COPYONLY)
attn_cli_test(NAME table_show_folder EXIT 0 REGEX "kvh=8 gqa=4 batch=1: v2 from ctx 1821"
              ARGS table show ${CMAKE_CURRENT_BINARY_DIR}/cli_data/table_folder)
attn_cli_test(NAME table_lookup_folder_without_table EXIT 2
              REGEX "^attn-tune: error: '[^']*' is a folder without a threshold_table.json"
              ARGS table lookup ${PROJECT_SOURCE_DIR}/tests --batch 4 --context-len 64 --num-heads 32
                   --num-kv-heads 8 --head-dim 128 --block-size 16 --dtype fp16)
# A call's whole mask can be given: --causal false and --window-right describe a call the
# fixture's causal points are 64 away from (the lookup distance's mask term), said in the note.
attn_cli_test(NAME table_lookup_mask_options EXIT 0
              REGEX "using the nearest \\(batch=4 kvh=8 gqa=4 d=128 bs=16 fp16, distance 64\\.00\\)"
              ARGS table lookup ${ATTN_TABLE_FIXTURE} --batch 4 --context-len 64 --num-heads 32
                   --num-kv-heads 8 --head-dim 128 --block-size 16 --dtype fp16 --causal false
                   --window-right 3)
attn_cli_test(NAME table_lookup_interval_short EXIT 0 REGEX "^decode_v2 decode_v2\\[partition=256\\]"
              ARGS table lookup ${ATTN_TABLE_FIXTURE} --batch 4 --context-len 64 --num-heads 32
                   --num-kv-heads 8 --head-dim 128 --block-size 16 --dtype fp16)
attn_cli_test(NAME table_lookup_interval_long EXIT 0 REGEX "^decode_v1 decode_v1\\[\\]"
              ARGS table lookup ${ATTN_TABLE_FIXTURE} --batch 4 --context-len 4096 --num-heads 32
                   --num-kv-heads 8 --head-dim 128 --block-size 16 --dtype fp16)
attn_cli_test(NAME table_lookup_interval_json EXIT 0 REGEX "\"v2_intervals\": [^0-9]*1,[^0-9]*558[^0-9]"
              ARGS table lookup ${ATTN_TABLE_FIXTURE} --json --batch 4 --context-len 64
                   --num-heads 32 --num-kv-heads 8 --head-dim 128 --block-size 16 --dtype fp16)
# Version 2 priced vLLM's CUDA rule as "vllm" and named no rule of the kernels': shown under its
# new name, with no own rule and no vLLM CPU rule. (python.table_reader puts every lookup of the
# version-2 fixture to `table lookup` too.)
attn_cli_test(NAME table_show_v2 EXIT 0
              REGEX "threshold-table v2\\).*sweep points  +fitted_rule [0-9.]+%/[0-9.]+% table_lookup [0-9.]+%/[0-9.]+% vllm_cuda [0-9.]+%/[0-9.]+% seed_engine "
              ARGS table show ${ATTN_TABLE_FIXTURE_V2})
attn_cli_test(NAME table_show_v1 EXIT 0
              REGEX "threshold-table v1\\).*kvh=8 gqa=4 batch=1: v2 from ctx 2048"
              ARGS table show ${ATTN_TABLE_FIXTURE_V1})
attn_cli_test(NAME table_lookup_v1 EXIT 0 REGEX "^decode_v2 decode_v2\\[partition=256\\]"
              ARGS table lookup ${ATTN_TABLE_FIXTURE_V1} --batch 1 --context-len 2048 --num-heads 32
                   --num-kv-heads 8 --head-dim 128 --block-size 16 --dtype fp16)
attn_cli_test(NAME table_show_shipped EXIT 0 REGEX "AMD EPYC.*kvh=8 gqa=4 batch=4: v2 "
              ARGS table show ${PROJECT_SOURCE_DIR}/results/cpu-amd-epyc-quick.json)
# The first table measured on a GPU (an H200 in the device check of 2026-12-04), read on a
# machine without one: `table show` reads it and the lookup answers from its points.
attn_cli_test(NAME table_show_shipped_h200 EXIT 0
              REGEX "NVIDIA H200 \\(cuda:0\\), 132 SMs.*measured: 880 timed, 0 failed validation"
              ARGS table show ${PROJECT_SOURCE_DIR}/results/nvidia-h200-quick.json)
attn_cli_test(NAME table_lookup_shipped_h200 EXIT 0
              REGEX "^decode_v2 decode_v2\\[partition=256,split=0,threads=256,vec=8\\]"
              ARGS table lookup ${PROJECT_SOURCE_DIR}/results/nvidia-h200-quick.json --batch 1
                   --context-len 2048 --num-heads 32 --num-kv-heads 8 --head-dim 128
                   --block-size 16 --dtype fp16)
attn_cli_test(NAME table_show_json EXIT 0 REGEX "\"schema\": \"attn-tune/threshold-table\""
              ARGS table show --json ${ATTN_TABLE_FIXTURE})
attn_cli_test(NAME table_lookup_exact EXIT 0 REGEX "decode_v2 decode_v2\\[partition=256\\]"
              ARGS table lookup ${ATTN_TABLE_FIXTURE} --batch 1 --context-len 2048 --num-heads 32
                   --num-kv-heads 8 --head-dim 128 --block-size 16 --dtype fp16)
attn_cli_test(NAME table_lookup_other_device EXIT 0
              REGEX "warning: this table was measured on Synthetic fixture GPU"
              ARGS table lookup ${ATTN_TABLE_FIXTURE} --device cpu --batch 64 --context-len 9000
                   --num-heads 32 --num-kv-heads 8 --head-dim 128 --block-size 16 --dtype fp16)
attn_cli_test(NAME table_lookup_nearest EXIT 0
              REGEX "using the nearest \\(batch=8 .*\\).*decode_v1 decode_v1\\[\\]|decode_v1 decode_v1\\[\\].*using the nearest \\(batch=8"
              ARGS table lookup ${ATTN_TABLE_FIXTURE} --batch 6 --context-len 3000 --num-heads 32
                   --num-kv-heads 8 --head-dim 128 --block-size 16 --dtype float16)
attn_cli_test(NAME table_lookup_bad_dtype EXIT 2 REGEX "--dtype: 'fp8' is a KV-cache dtype \\(queries and outputs are fp32, fp16 or bf16\\): give the cache's with --kv-dtype fp8"
              ARGS table lookup ${ATTN_TABLE_FIXTURE} --batch 1 --context-len 2048 --num-heads 32
                   --num-kv-heads 8 --head-dim 128 --block-size 16 --dtype fp8)
attn_cli_test(NAME table_lookup_bad_heads EXIT 2 REGEX "not a multiple of --num-kv-heads 8"
              ARGS table lookup ${ATTN_TABLE_FIXTURE} --batch 1 --context-len 2048 --num-heads 12
                   --num-kv-heads 8 --head-dim 128 --block-size 16 --dtype fp16)
attn_cli_test(NAME table_lookup_missing_flag EXIT 2 REGEX "--dtype"
              ARGS table lookup ${ATTN_TABLE_FIXTURE} --batch 1 --context-len 2048 --num-heads 32
                   --num-kv-heads 8 --head-dim 128 --block-size 16)
attn_cli_test(NAME table_show_missing_file EXIT 2 REGEX "cannot read threshold table"
              ARGS table show /nonexistent/table.json)
attn_cli_test(NAME table_show_not_a_table EXIT 2 REGEX "not an attn-tune threshold table"
              ARGS table show ${PROJECT_SOURCE_DIR}/profiles/quick.json)

file(WRITE ${CMAKE_CURRENT_BINARY_DIR}/cli_data/table_without_provenance.json
     "{\"schema\": \"attn-tune/threshold-table\", \"version\": 1, \"decode\": []}\n")
attn_cli_test(NAME table_show_incomplete EXIT 2 REGEX "threshold table: provenance: missing"
              ARGS table show ${CMAKE_CURRENT_BINARY_DIR}/cli_data/table_without_provenance.json)
file(WRITE ${CMAKE_CURRENT_BINARY_DIR}/cli_data/table_version_6.json
     "{\"schema\": \"attn-tune/threshold-table\", \"version\": 6, \"decode\": []}\n")
attn_cli_test(NAME table_show_version_6 EXIT 2
              REGEX "unsupported threshold table version 6 \\(this reader reads versions 1 to 5\\)"
              ARGS table show ${CMAKE_CURRENT_BINARY_DIR}/cli_data/table_version_6.json)
attn_cli_test(NAME table_lookup_version_6 EXIT 2 REGEX "unsupported threshold table version 6"
              ARGS table lookup ${CMAKE_CURRENT_BINARY_DIR}/cli_data/table_version_6.json
                   --batch 1 --context-len 64 --num-heads 32 --num-kv-heads 8 --head-dim 128
                   --block-size 16 --dtype fp16)

find_package(Python3 COMPONENTS Interpreter QUIET)
if(Python3_Interpreter_FOUND)
  add_test(NAME python.table_reader
           COMMAND ${CMAKE_COMMAND} -E env ATTN_TUNE_BIN=$<TARGET_FILE:attn-tune>
                   ${Python3_EXECUTABLE} -m unittest -v test_attn_tune_table)
  # Run as a module from python/ (not `discover`, which would import attn_tune_torch and need torch).
  set_tests_properties(python.table_reader PROPERTIES WORKING_DIRECTORY ${PROJECT_SOURCE_DIR}/python)
  set_tests_properties(python.table_reader PROPERTIES LABELS "unit")
  # Traffic traces (python/attn_tune_trace.py, docs/traffic.md): standard library only.
  add_test(NAME python.traffic_trace
           COMMAND ${CMAKE_COMMAND} -E env ATTN_TUNE_BIN=$<TARGET_FILE:attn-tune>
                   ${Python3_EXECUTABLE} -m unittest -v test_attn_tune_trace)
  set_tests_properties(python.traffic_trace PROPERTIES WORKING_DIRECTORY ${PROJECT_SOURCE_DIR}/python
                       LABELS "unit")
endif()

# Damage an independent audit (2026-12-06, from the docs alone) found answered from or crashing
# on: each is one line and exit 2. A file of 100,000 nested brackets overflowed the stack in
# `table show`; a key given twice was read as its last value; two points of one shape answered by
# their order in the file; a margin beside a family that was not timed was an internal error
# (exit 4); `--softcap nan` answered from a point 64 away.
set(ATTN_TABLE_DAMAGE ${CMAKE_CURRENT_BINARY_DIR}/cli_data/table_damage)
string(REPEAT "[" 100000 attn_open)
string(REPEAT "]" 100000 attn_close)
file(WRITE ${ATTN_TABLE_DAMAGE}/deep.json "${attn_open}${attn_close}")
attn_cli_test(NAME table_show_deep_nesting EXIT 2 REGEX "deep.json' is not a threshold table: nested deeper than 200 levels"
              ARGS table show ${ATTN_TABLE_DAMAGE}/deep.json)
file(READ ${ATTN_TABLE_FIXTURE} attn_fixture)
string(FIND "${attn_fixture}" "\"batch\": 1," attn_at)
string(SUBSTRING "${attn_fixture}" 0 ${attn_at} attn_head)
string(SUBSTRING "${attn_fixture}" ${attn_at} -1 attn_tail)
file(WRITE ${ATTN_TABLE_DAMAGE}/key_twice.json "${attn_head}\"batch\": 4, ${attn_tail}")
attn_cli_test(NAME table_lookup_key_twice EXIT 2
              REGEX "key_twice.json': decode\\[0\\].batch: the key appears twice in its object"
              ARGS table lookup ${ATTN_TABLE_DAMAGE}/key_twice.json --batch 1 --context-len 2048
                   --num-heads 32 --num-kv-heads 8 --head-dim 128 --block-size 16 --dtype fp16)
string(JSON attn_point GET "${attn_fixture}" decode 0)
string(JSON attn_points LENGTH "${attn_fixture}" decode)
string(JSON attn_twice SET "${attn_fixture}" decode ${attn_points} "${attn_point}")
file(WRITE ${ATTN_TABLE_DAMAGE}/point_twice.json "${attn_twice}")
attn_cli_test(NAME table_lookup_point_twice EXIT 2
              REGEX "decode\\[${attn_points}\\]: the shape and mask of decode\\[0\\] again"
              ARGS table lookup ${ATTN_TABLE_DAMAGE}/point_twice.json --batch 1 --context-len 2048
                   --num-heads 32 --num-kv-heads 8 --head-dim 128 --block-size 16 --dtype fp16)
string(JSON attn_untimed SET "${attn_fixture}" decode 0 measured 0 v1 null)
file(WRITE ${ATTN_TABLE_DAMAGE}/margin_untimed.json "${attn_untimed}")
attn_cli_test(NAME table_show_margin_without_v1 EXIT 2
              REGEX "decode\\[0\\].measured\\[0\\].margin: given where v1 or v2 was not timed"
              ARGS table show ${ATTN_TABLE_DAMAGE}/margin_untimed.json)
attn_cli_test(NAME table_lookup_softcap_nan EXIT 2 REGEX "--softcap: 'nan' is not a finite number"
              ARGS table lookup ${ATTN_TABLE_FIXTURE} --batch 1 --context-len 2048 --num-heads 32
                   --num-kv-heads 8 --head-dim 128 --block-size 16 --dtype fp16 --softcap nan)
# The names the readers take (an engine passes str(torch.float16)), the command takes.
attn_cli_test(NAME table_lookup_torch_dtype_names EXIT 0 REGEX "^decode_v"
              ARGS table lookup ${ATTN_TABLE_FIXTURE} --batch 1 --context-len 2048 --num-heads 32
                   --num-kv-heads 8 --head-dim 128 --block-size 16 --dtype torch.float16
                   --kv-dtype torch.float16)
