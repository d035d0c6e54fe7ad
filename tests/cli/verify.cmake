# verify's exit codes and its JUnit file (validated against tests/data/junit.xsd with xmllint).
attn_cli_test(NAME verify_cpu_quick EXIT 0 REGEX "[0-9]+ passed, 0 failed, [0-9]+ skipped"
              ARGS verify --device cpu --intensity quick --junit verify.xml)
attn_cli_test(NAME verify_no_such_gpu EXIT 3 REGEX "device unavailable"
              ARGS verify --device cuda:7 --intensity quick)
attn_cli_test(NAME verify_bad_family EXIT 2 REGEX "unknown kernel family 'decode_v3'"
              ARGS verify --device cpu --families decode_v3)
attn_cli_test(NAME verify_bad_dtype EXIT 2 REGEX "dtype 'fp8' is a KV-cache dtype"
              ARGS verify --device cpu --dtypes fp8)
attn_cli_test(NAME verify_bad_intensity EXIT 2 REGEX "intensity"
              ARGS verify --device cpu --intensity extreme)

find_program(XMLLINT xmllint)
if(XMLLINT)
  add_test(NAME cli.verify_junit_schema
           COMMAND ${XMLLINT} --noout --schema ${CMAKE_CURRENT_SOURCE_DIR}/data/junit.xsd
                   ${CMAKE_CURRENT_BINARY_DIR}/cli_work/verify_cpu_quick/verify.xml)
  set_tests_properties(cli.verify_junit_schema PROPERTIES LABELS "cli"
                       DEPENDS cli.verify_cpu_quick)
  set_tests_properties(cli.verify_cpu_quick PROPERTIES FIXTURES_SETUP verify_junit)
  set_tests_properties(cli.verify_junit_schema PROPERTIES FIXTURES_REQUIRED verify_junit)
endif()
