# verify's exit codes and its JUnit file (validated against tests/data/junit.xsd with xmllint).
attn_cli_test(NAME verify_cpu_quick EXIT 0 REGEX "[0-9]+ passed, 0 failed, [0-9]+ skipped"
              ARGS verify --device cpu --intensity quick --junit verify.xml)
# Its JUnit file is the built-in kernels' side of cli.verify_kernels_same_as_builtin (plugins.cmake).
set_tests_properties(cli.verify_cpu_quick PROPERTIES FIXTURES_SETUP verify_cpu_quick_out)
attn_cli_test(NAME verify_no_such_gpu EXIT 3 REGEX "device unavailable"
              ARGS verify --device cuda:7 --intensity quick)
attn_cli_test(NAME verify_bad_family EXIT 2 REGEX "unknown kernel family 'decode_v3'"
              ARGS verify --device cpu --families decode_v3)
attn_cli_test(NAME verify_bad_dtype EXIT 2
              REGEX "--dtypes: 'fp8' is a KV-cache dtype [^\n]*: check fp8 caches with --kv-dtypes fp8"
              ARGS verify --device cpu --dtypes fp8)
# A list option given with no name in it is refused, not taken as left out (all).
attn_cli_test(NAME verify_empty_kv_dtypes EXIT 2 REGEX "--kv-dtypes: needs at least one name"
              ARGS verify --device cpu --kv-dtypes ,)
attn_cli_test(NAME verify_bad_kv_dtype EXIT 2
              REGEX "--kv-dtypes: 'bf16' is not auto, fp8_e4m3 \\(or fp8\\) or fp8_e5m2"
              ARGS verify --device cpu --kv-dtypes auto,bf16)
# fp8 caches alone, e5m2 at that: the CPU kernels pass both phases' groups.
attn_cli_test(NAME verify_fp8_e5m2_only EXIT 0
              REGEX "[1-9][0-9]* passed, 0 failed, 0 skipped"
              ARGS verify --device cpu --intensity quick --dtypes bf16 --kv-dtypes fp8_e5m2
                   --threads 2)
# An output file whose folder does not exist is refused before the run, not after it (exit 2
# replacing the verdict of a whole run).
attn_cli_test(NAME verify_junit_no_folder EXIT 2
              REGEX "^attn-tune: error: --junit: cannot write '/nonexistent/v.xml': the folder '/nonexistent' does not exist"
              ARGS verify --device cpu --intensity quick --junit /nonexistent/v.xml)
set_tests_properties(cli.verify_junit_no_folder PROPERTIES FAIL_REGULAR_EXPRESSION "verify: cpu")
# A half-written dump a killed worker left (NAME.tmp.XXXXXX) is removed from --dump-failures;
# the folder's other files stay.
set(dump_left ${CMAKE_CURRENT_BINARY_DIR}/cli_work/verify_dump_leftover)
file(MAKE_DIRECTORY ${dump_left})
file(WRITE ${dump_left}/keep.safetensors "")
file(WRITE ${dump_left}/half.safetensors.tmp.Ab12Cd "")
add_test(NAME cli.verify_dump_leftover
         COMMAND ${CMAKE_COMMAND} -E env sh -c
                 "\"$0\" verify --device cpu --intensity quick --families decode_v1 --dtypes fp32 --dump-failures \"$1\" >/dev/null 2>&1 && ls -a \"$1\""
                 $<TARGET_FILE:attn-tune> ${dump_left})
set_tests_properties(cli.verify_dump_leftover PROPERTIES LABELS "cli"
                     PASS_REGULAR_EXPRESSION "keep\\.safetensors"
                     FAIL_REGULAR_EXPRESSION "\\.tmp\\.")
# --device all on a machine without a GPU says so and checks the CPU (skipped where there is one).
attn_cli_test(NAME verify_all_without_gpu EXIT 0
              REGEX "[1-9][0-9]* passed, 0 failed.*--device all: no GPU .*; checking the CPU only"
              ARGS verify --device all --intensity quick --families decode_v1 --dtypes fp32)
set_tests_properties(cli.verify_all_without_gpu PROPERTIES SKIP_REGULAR_EXPRESSION "verify: cuda:0")
attn_cli_test(NAME verify_bad_intensity EXIT 2 REGEX "intensity"
              ARGS verify --device cpu --intensity extreme)

find_program(XMLLINT xmllint)
if(XMLLINT)
  add_test(NAME cli.verify_junit_schema
           COMMAND ${XMLLINT} --noout --schema ${CMAKE_CURRENT_SOURCE_DIR}/data/junit.xsd
                   ${CMAKE_CURRENT_BINARY_DIR}/cli_work/verify_cpu_quick/verify.xml)
  set_tests_properties(cli.verify_junit_schema PROPERTIES LABELS "cli"
                       DEPENDS cli.verify_cpu_quick)
  set_tests_properties(cli.verify_junit_schema PROPERTIES FIXTURES_REQUIRED verify_cpu_quick_out)
endif()
