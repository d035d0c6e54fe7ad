# Planted engine bugs (tests/plugins/split_kv_plugin.c, one library per SPLIT_BUG_*): the correct
# plugin passes verify and plugin check, verify fails every buggy one with the diagnosis its
# line names, and plugin check fails the bug that only the second partition value has.
set(planted_work ${CMAKE_CURRENT_BINARY_DIR}/cli_work/planted_bugs)

attn_cli_test(NAME verify_split_ok_quick EXIT 0 REGEX " 0 failed"
              ARGS verify --kernels ${ATTN_SPLIT_OK_PLUGIN} --device cpu --threads 2
                   --intensity quick)
attn_cli_test(NAME verify_split_ok_default_fp32 EXIT 0 REGEX " 0 failed"
              ARGS verify --kernels ${ATTN_SPLIT_OK_PLUGIN} --device cpu --threads 2
                   --intensity default --dtypes fp32)
attn_cli_test(NAME verify_split_ok_full_fp32 EXIT 0 REGEX " 0 failed"
              ARGS verify --kernels ${ATTN_SPLIT_OK_PLUGIN} --device cpu --threads 2
                   --intensity full --dtypes fp32)
attn_cli_test(NAME plugin_check_split_ok EXIT 0 REGEX "every family passed"
              ARGS plugin check ${ATTN_SPLIT_OK_PLUGIN} --threads 2)
attn_cli_test(NAME plugin_check_split_second_config EXIT 1 REGEX "decode_v2: FAIL"
              ARGS plugin check ${ATTN_SPLIT_SECOND_CONFIG_PLUGIN} --threads 2)

# verify --intensity quick --dtypes fp32 on each planted bug: exit 1 and output matching REGEX.
#   attn_planted_bug_test(BUG REGEX re [ABSENT re] [FAMILIES list] [KV_DTYPES list])
function(attn_planted_bug_test bug)
  cmake_parse_arguments(T "" "REGEX;ABSENT;FAMILIES;KV_DTYPES" "" ${ARGN})
  string(TOLOWER ${bug} lower)
  add_test(NAME cli.verify_planted_bug_${lower}
           COMMAND ${CMAKE_COMMAND} -DEXE=$<TARGET_FILE:attn-tune>
                   -DPLUGIN=${ATTN_SPLIT_${bug}_PLUGIN} "-DREGEX=${T_REGEX}" "-DABSENT=${T_ABSENT}"
                   "-DFAMILIES=${T_FAMILIES}" "-DKV_DTYPES=${T_KV_DTYPES}"
                   -DWORK=${planted_work}/${lower}
                   -P ${CMAKE_CURRENT_SOURCE_DIR}/plugins/verify_planted_bug.cmake)
  set_tests_properties(cli.verify_planted_bug_${lower} PROPERTIES LABELS "cli")
endfunction()

# One line per bug: the diagnosis verify's summary must name for it.
attn_planted_bug_test(DROP_LAST_KEY REGEX "the last key of each partition \\(k\\*384-1\\) is dropped")
attn_planted_bug_test(OVERLAP REGEX "key k\\*768 is counted twice")
attn_planted_bug_test(LAST_PARTITION REGEX "the last partition is dropped \\(partition 384\\)")
attn_planted_bug_test(MAX_NOT_RESCALED REGEX "maxima are not rescaled")
attn_planted_bug_test(LSE_BASE2 REGEX "lse are combined in the wrong log base")
attn_planted_bug_test(GQA_MOD REGEX "GQA head mapping: query head h reads kv head h % num_kv_heads")
attn_planted_bug_test(FULL_LAST_BLOCK REGEX "a full last block is read as empty")
attn_planted_bug_test(ONE_PAST REGEX "the valid length is one too long")
attn_planted_bug_test(STALE_BLOCK REGEX "the whole last block is read")
attn_planted_bug_test(LSE_LOG2 REGEX "lse is written in base 2")
attn_planted_bug_test(ZERO_WEIGHT_TAIL REGEX "stale slots folded in with a zero weight")
attn_planted_bug_test(WRITES_QUERY REGEX "the kernel writes into its inputs \\(the query changed during the call\\)[^\n]*the values it wrote are right")
attn_planted_bug_test(SECOND_CONFIG REGEX "partition=768\\]: [0-9]+ failed[^[]*\\(k\\*768-1\\) is dropped"
                      ABSENT "partition=384")

# The fp8 mistakes (SPLIT_FP8_*: plugin ABI 4 builds that read fp8 caches), checked on the fp8
# cases alone: each failure must be explained, and by the mistake the build plants. (A case whose
# v_scale is 1 cannot tell "both scales ignored" from "k_scale ignored"; both are named.)
attn_planted_bug_test(FP8_SCALE_IGNORED KV_DTYPES fp8_e4m3,fp8_e5m2
                      REGEX "the fp8 scales are ignored \\(k_scale and v_scale taken as 1\\)")
attn_planted_bug_test(FP8_SCALE_TWICE KV_DTYPES fp8_e4m3,fp8_e5m2
                      REGEX "the fp8 scales are applied twice")
attn_planted_bug_test(FP8_E4M3_AS_E5M2 KV_DTYPES fp8_e4m3,fp8_e5m2
                      REGEX "the fp8_e4m3 cache is read as fp8_e5m2")
attn_planted_bug_test(FP8_SCALES_SWAPPED KV_DTYPES fp8_e4m3,fp8_e5m2
                      REGEX "k_scale and v_scale are swapped")
attn_planted_bug_test(FP8_SIGN_IGNORED KV_DTYPES fp8_e4m3,fp8_e5m2
                      REGEX "the fp8 sign bit is ignored")
attn_planted_bug_test(FP8_E4M3_AS_FNUZ KV_DTYPES fp8_e4m3,fp8_e5m2
                      REGEX "the fp8_e4m3 cache is read as e4m3fnuz")
attn_planted_bug_test(FP8_SCALE_PER_HEAD KV_DTYPES fp8_e4m3,fp8_e5m2
                      REGEX "the per-tensor scales are read as one per KV head")
# Scales kept by their buffers' addresses: the call made again with the inputs rewritten in
# place doubles them there.
attn_planted_bug_test(FP8_SCALES_CACHED KV_DTYPES fp8_e4m3,fp8_e5m2
                      REGEX "the fp8 scales were rewritten in place.*the scales\\), where an engine")
