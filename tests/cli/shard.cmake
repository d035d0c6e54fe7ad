# Sharded sweeps, merge and fleet tables (docs/sharding.md): --shard refuses bad values with one
# line; merge refuses a folder from another device with one line and exit 2; a fleet file of two
# tables answers `table lookup --device-name` for each device and its aliases, and the nearest
# entry only with --nearest.
foreach(bad "4/4" "x" "0/0" "1/4/2")
  string(MAKE_C_IDENTIFIER "${bad}" id)
  attn_cli_test(NAME sweep_shard_bad_${id} EXIT 2 REGEX "^attn-tune: error: --shard '${bad}'"
                ARGS sweep --device cpu --profile quick --shard ${bad} --out shard_bad)
endforeach()
attn_cli_test(NAME sweep_shard_bad_range EXIT 2
              REGEX "--shard '2/2': I counts from 0, so it must be below N \\(0 to 1\\)"
              ARGS sweep --device cpu --profile quick --shard 2/2 --out shard_bad)

# Two shard folders whose headers name different devices (results.jsonl as a sweep writes it).
set(ATTN_SHARD_DATA ${CMAKE_CURRENT_BINARY_DIR}/cli_data/shards)
foreach(i 0 1)
  if(i EQUAL 0)
    set(dev "{\"backend\": \"cuda\", \"id\": \"cuda:0\", \"name\": \"NVIDIA H100 80GB HBM3\", \"uuid\": \"GPU-a\", \"sm_count\": 132}")
  else()
    set(dev "{\"backend\": \"cuda\", \"id\": \"cuda:0\", \"name\": \"NVIDIA A100-SXM4-40GB\", \"uuid\": \"GPU-b\", \"sm_count\": 108}")
  endif()
  file(WRITE ${ATTN_SHARD_DATA}/shard-${i}/results.jsonl
       "{\"type\": \"header\", \"schema\": \"attn-tune/results\", \"version\": 1, \"profile\": \"quick\", \"profile_hash\": \"0011223344556677\", \"device\": ${dev}, \"seed\": 1, \"tool_version\": \"0.1.0\", \"shard\": {\"index\": ${i}, \"count\": 2}, \"plan\": {\"workloads\": 0, \"measurements\": 0}}\n")
endforeach()
attn_cli_test(NAME merge_other_device EXIT 2
              REGEX "^attn-tune: error: cannot merge '[^']*shard-1' and '[^']*shard-0': measured on NVIDIA A100-SXM4-40GB \\(cuda\\) and on NVIDIA H100 80GB HBM3 \\(cuda\\); a table holds one device model\n$"
              ARGS merge merged ${ATTN_SHARD_DATA}/shard-0 ${ATTN_SHARD_DATA}/shard-1)
attn_cli_test(NAME merge_not_a_folder EXIT 2 REGEX "has no results.jsonl"
              ARGS merge merged ${ATTN_SHARD_DATA})
attn_cli_test(NAME merge_missing_shard EXIT 2
              REGEX "shard 1/2 has no folder .*--partial"
              ARGS merge merged ${ATTN_SHARD_DATA}/shard-0)

# Fleet tables: the synthetic fixture as an H100's table and its version-1 sibling as an A100's;
# at batch 4, ctx 64 (kvh 8) the first picks v2 and the second v1.
set(ATTN_FLEET_DATA ${CMAKE_CURRENT_BINARY_DIR}/cli_data/fleet)
file(READ ${PROJECT_SOURCE_DIR}/python/testdata/synthetic_table.json h100)
string(REPLACE "\"Synthetic fixture GPU\"" "\"NVIDIA H100 80GB HBM3\"" h100 "${h100}")
file(WRITE ${ATTN_FLEET_DATA}/h100.json "${h100}")
file(READ ${PROJECT_SOURCE_DIR}/python/testdata/synthetic_table_v1.json a100)
string(REPLACE "\"Synthetic fixture GPU\"" "\"NVIDIA A100-SXM4-40GB\"" a100 "${a100}")
file(WRITE ${ATTN_FLEET_DATA}/a100.json "${a100}")
attn_cli_test(NAME table_combine EXIT 0
              REGEX "h100-sxm <- NVIDIA H100 80GB HBM3.*a100-sxm4-40gb <- NVIDIA A100-SXM4-40GB.*fleet table .*fleet.json \\(2 devices\\)"
              ARGS table combine ${ATTN_FLEET_DATA}/fleet.json ${ATTN_FLEET_DATA}/h100.json
                   ${ATTN_FLEET_DATA}/a100.json)
set_tests_properties(cli.table_combine PROPERTIES FIXTURES_SETUP fleet_table)
attn_cli_test(NAME table_combine_same_device EXIT 2
              REGEX "are both tables of h100-sxm \\(NVIDIA H100 80GB HBM3\\)"
              ARGS table combine ${ATTN_FLEET_DATA}/twice.json ${ATTN_FLEET_DATA}/h100.json
                   ${ATTN_FLEET_DATA}/h100.json)
set(ATTN_FLEET_QUERY --batch 4 --context-len 64 --num-heads 32 --num-kv-heads 8 --head-dim 128
                     --block-size 16 --dtype fp16)
set(n 0)
foreach(alias "NVIDIA H100 80GB HBM3" "NVIDIA H100 SXM5 80GB" "H100-SXM" "h100-sxm"
              "NVIDIA A100-SXM4-40GB" "A100-SXM4-40GB" "a100-sxm4-40gb")
  math(EXPR n "${n} + 1")
  if(alias MATCHES "100-SXM4|a100")
    set(entry "a100-sxm4-40gb \\(measured on NVIDIA A100-SXM4-40GB\\)")
    set(answer "decode_v1 decode_v1\\[\\]")
  else()
    set(entry "h100-sxm \\(measured on NVIDIA H100 80GB HBM3\\)")
    set(answer "decode_v2 decode_v2\\[partition=256\\]")
  endif()
  attn_cli_test(NAME table_lookup_fleet_${n} EXIT 0
                REGEX "fleet entry ${entry} for device '${alias}'.*${answer}|${answer}.*fleet entry ${entry}"
                ARGS table lookup ${ATTN_FLEET_DATA}/fleet.json --device-name ${alias}
                     ${ATTN_FLEET_QUERY})
  set_tests_properties(cli.table_lookup_fleet_${n} PROPERTIES FIXTURES_REQUIRED fleet_table)
endforeach()
attn_cli_test(NAME table_lookup_fleet_no_entry EXIT 2
              REGEX "no entry for 'NVIDIA H200' \\(h200\\); it has h100-sxm, a100-sxm4-40gb"
              ARGS table lookup ${ATTN_FLEET_DATA}/fleet.json --device-name "NVIDIA H200"
                   ${ATTN_FLEET_QUERY})
attn_cli_test(NAME table_lookup_fleet_nearest EXIT 0
              REGEX "using the nearest, h100-sxm .*decode_v2 decode_v2\\[partition=256\\]|decode_v2 decode_v2\\[partition=256\\].*using the nearest, h100-sxm"
              ARGS table lookup ${ATTN_FLEET_DATA}/fleet.json --device-name "NVIDIA H200" --nearest
                   ${ATTN_FLEET_QUERY})
attn_cli_test(NAME table_show_fleet EXIT 0
              REGEX "fleet table of 2 devices.*h100-sxm: NVIDIA H100 80GB HBM3.*== a100-sxm4-40gb =="
              ARGS table show ${ATTN_FLEET_DATA}/fleet.json)
set_tests_properties(cli.table_lookup_fleet_no_entry cli.table_lookup_fleet_nearest
                     cli.table_show_fleet PROPERTIES FIXTURES_REQUIRED fleet_table)
