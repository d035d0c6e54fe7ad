# CLI tests of `attn-tune report`: bad input exits 2 with one line naming the problem; the page of
# the shipped CPU table parses as XML and holds every view (tests/report/check_report.py); the
# page renders in headless Chromium where one is installed (label `browser`).
set(ATTN_SHIPPED_TABLE ${PROJECT_SOURCE_DIR}/results/cpu-amd-epyc-quick.json)
set(report_data ${CMAKE_CURRENT_BINARY_DIR}/cli_work/report_data)
file(MAKE_DIRECTORY ${report_data}/empty_dir)
file(WRITE ${report_data}/not_json.json "{ this is not json\n")
file(WRITE ${report_data}/not_table.json "{\"schema\": \"something/else\", \"version\": 1}\n")
file(WRITE ${report_data}/broken_table.json
     "{\"schema\": \"attn-tune/threshold-table\", \"version\": 2, \"provenance\": {}}\n")

attn_cli_test(NAME report_missing_input EXIT 2 REGEX "'/nonexistent/t\\.json' does not exist"
              ARGS report /nonexistent/t.json)
attn_cli_test(NAME report_folder_without_table EXIT 2 REGEX "has no threshold_table\\.json"
              ARGS report ${report_data}/empty_dir)
attn_cli_test(NAME report_not_json EXIT 2 REGEX "not_json\\.json' is not valid JSON"
              ARGS report ${report_data}/not_json.json)
attn_cli_test(NAME report_not_a_table EXIT 2 REGEX "is not an attn-tune threshold table"
              ARGS report ${report_data}/not_table.json)
attn_cli_test(NAME report_broken_table EXIT 2 REGEX "broken_table\\.json': threshold table: [a-z_]+"
              ARGS report ${report_data}/broken_table.json)
# A table beside a results file that is empty, or holds a header and none of the measurements the
# table counts: refused, where every regret figure came out empty with exit 0.
file(MAKE_DIRECTORY ${report_data}/empty_results ${report_data}/header_only_results)
configure_file(${ATTN_SHIPPED_TABLE} ${report_data}/empty_results/threshold_table.json COPYONLY)
configure_file(${ATTN_SHIPPED_TABLE} ${report_data}/header_only_results/threshold_table.json
               COPYONLY)
file(WRITE ${report_data}/empty_results/results.jsonl "\n")
file(WRITE ${report_data}/header_only_results/results.jsonl
     "{\"schema\": \"attn-tune/results\", \"type\": \"header\", \"version\": 1}\n")
attn_cli_test(NAME report_empty_results EXIT 2
              REGEX "empty_results/results\\.jsonl' has no header line \\(empty or cut short\\)"
              ARGS report ${report_data}/empty_results --out ${report_data}/never.html)
attn_cli_test(NAME report_results_without_measurements EXIT 2
              REGEX "results\\.jsonl' holds no measurement, but the table beside it counts [1-9]"
              ARGS report ${report_data}/header_only_results --out ${report_data}/never.html)
attn_cli_test(NAME report_bad_against EXIT 2 REGEX "'/nonexistent/b\\.json' does not exist"
              ARGS report ${ATTN_SHIPPED_TABLE} --against /nonexistent/b.json
                   --out ${report_data}/never.html)
attn_cli_test(NAME report_bad_format EXIT 2 REGEX "--format"
              ARGS report ${ATTN_SHIPPED_TABLE} --format pdf)
attn_cli_test(NAME report_out_folder_missing EXIT 2 REGEX "no/such/folder/r\\.html"
              ARGS report ${ATTN_SHIPPED_TABLE} --out ${report_data}/no/such/folder/r.html)
attn_cli_test(NAME report_shipped_table EXIT 0 REGEX "report: .*shipped\\.html"
              ARGS report ${ATTN_SHIPPED_TABLE} --out ${report_data}/shipped.html)
attn_cli_test(NAME report_against EXIT 0
              REGEX "report: 0 decode calls choose differently.*report: .*against\\.html"
              ARGS report ${ATTN_SHIPPED_TABLE} --against ${ATTN_SHIPPED_TABLE}
                   --out ${report_data}/against.html)
attn_cli_test(NAME report_csv EXIT 0
              REGEX "report: 8 CSV files in .*decision_map\\.csv.*regret_summary\\.csv"
              ARGS report ${ATTN_SHIPPED_TABLE} --format csv --out ${report_data}/csv)

# One writer per folder: a report into a sweep's folder while another attn-tune process holds it
# (util-linux flock stands for a sweep running there) exits 2 at once, naming the folder, and
# writes no page.
find_program(ATTN_FLOCK flock)
if(ATTN_FLOCK)
  file(MAKE_DIRECTORY ${report_data}/busy_sweep)
  configure_file(${ATTN_SHIPPED_TABLE} ${report_data}/busy_sweep/threshold_table.json COPYONLY)
  add_test(NAME cli.report_folder_in_use
           COMMAND ${CMAKE_COMMAND} -DEXE=${ATTN_FLOCK}
                   "-DARGS=${report_data}/busy_sweep/.attn-tune.lock|$<TARGET_FILE:attn-tune>|report|${report_data}/busy_sweep"
                   -DEXIT=2 "-DREGEX=output folder '[^']*busy_sweep' is in use by another attn-tune process"
                   -DWORKDIR=${CMAKE_CURRENT_BINARY_DIR}/cli_work/report_folder_in_use
                   -P ${CMAKE_CURRENT_SOURCE_DIR}/cli/expect.cmake)
  set_tests_properties(cli.report_folder_in_use PROPERTIES LABELS "cli")
endif()

# The page's structure and numbers, the --against page and the CSV files, checked by a script
# that parses them (xml.etree) and reads the table on its own to know what they must hold.
find_program(ATTN_REPORT_PYTHON NAMES python3)
if(ATTN_REPORT_PYTHON)
  add_test(NAME report.shipped_table_page
           COMMAND ${ATTN_REPORT_PYTHON} ${CMAKE_CURRENT_SOURCE_DIR}/report/check_report.py
                   $<TARGET_FILE:attn-tune> ${ATTN_SHIPPED_TABLE} ${report_data}/check)
  set_tests_properties(report.shipped_table_page PROPERTIES LABELS "cli")
  # Headless Chromium draws the page at desktop width; the screenshot must not be blank. Skips
  # (exit 77) where no Chromium is installed.
  add_test(NAME report.browser_screenshot
           COMMAND ${ATTN_REPORT_PYTHON} ${CMAKE_CURRENT_SOURCE_DIR}/report/screenshot.py
                   $<TARGET_FILE:attn-tune> ${ATTN_SHIPPED_TABLE} ${report_data}/browser)
  set_tests_properties(report.browser_screenshot PROPERTIES LABELS "browser" SKIP_RETURN_CODE 77
                                                            TIMEOUT 120)
else()
  message(WARNING "attn-tune: no python3; the report page tests are not registered")
endif()

# A sweep writes report.html next to its table and says where, faults listed; --no-report does
# not. A one-workload profile keeps these to seconds; the faults are those of tests/cli/faults.cmake.
if(EXISTS ${PROJECT_SOURCE_DIR}/src/backends/cpu/cpu_backend.cpp)
  file(WRITE ${report_data}/tiny_profile.json
       "{\"name\": \"tiny\", \"decode\": {\"batch\": [1], \"context_len\": [300],\n"
       " \"num_kv_heads\": [1], \"gqa_ratio\": [2], \"head_dim\": [32], \"block_size\": [16],\n"
       " \"dtype\": [\"fp32\"]},\n"
       " \"timing\": {\"warmup\": 1, \"min_reps\": 3, \"max_reps\": 5, \"max_seconds\": 0.02}}\n")
  add_test(NAME cli.sweep_report_clean
           COMMAND ${CMAKE_COMMAND} -E rm -rf ${report_data}/sweep ${report_data}/sweep_no_report)
  set_tests_properties(cli.sweep_report_clean PROPERTIES LABELS "cli"
                       FIXTURES_SETUP sweep_report_clean)
  attn_cli_test(NAME sweep_prints_report EXIT 0 REGEX "sweep: report [^\n]*sweep/report\\.html"
                ARGS sweep --device cpu --profile ${report_data}/tiny_profile.json --threads 2
                     --quiet --out ${report_data}/sweep)
  attn_cli_test(NAME sweep_no_report EXIT 0 REGEX "sweep: table [^\n]*threshold_table\\.json"
                ARGS sweep --device cpu --profile ${report_data}/tiny_profile.json --threads 2
                     --quiet --no-report --out ${report_data}/sweep_no_report)
  set_tests_properties(cli.sweep_prints_report cli.sweep_no_report PROPERTIES
                       FIXTURES_REQUIRED sweep_report_clean RESOURCE_LOCK cpu_timing)
  add_test(NAME cli.sweep_report_written COMMAND ${CMAKE_COMMAND} -E cat ${report_data}/sweep/report.html)
  set_tests_properties(cli.sweep_report_written PROPERTIES LABELS "cli"
                       DEPENDS cli.sweep_prints_report
                       PASS_REGULAR_EXPRESSION "class=\"chart decision-map\"")
  add_test(NAME cli.sweep_no_report_absent
           COMMAND ${CMAKE_COMMAND} -E cat ${report_data}/sweep_no_report/report.html)
  set_tests_properties(cli.sweep_no_report_absent PROPERTIES LABELS "cli" WILL_FAIL TRUE
                       DEPENDS cli.sweep_no_report)
  # The faults sweep's report lists the configurations that crashed or hung, with the reason
  # (under AddressSanitizer, its own SIGSEGV handler ends the worker with status 1 instead).
  add_test(NAME cli.sweep_faults_report
           COMMAND ${CMAKE_COMMAND} -E cat ${CMAKE_CURRENT_BINARY_DIR}/cli_work/sweep_faults_out/report.html)
  set_tests_properties(cli.sweep_faults_report PROPERTIES LABELS "cli"
                       FIXTURES_REQUIRED faults_table DEPENDS cli.sweep_faults
                       PASS_REGULAR_EXPRESSION "<td class=\"bad\">fault</td><td>decode [^<]*</td><td>decode_v2\\[partition=256,split=0\\]</td><td>worker (killed by SIGSEGV|exited with status 1)")
  # The quick sweep's page.
  set(quick_report ${CMAKE_CURRENT_BINARY_DIR}/cli_work/sweep_quick_out/report.html)
  add_test(NAME cli.sweep_quick_report COMMAND ${CMAKE_COMMAND} -E cat ${quick_report})
  set_tests_properties(cli.sweep_quick_report PROPERTIES LABELS "cli"
                       FIXTURES_REQUIRED quick_table DEPENDS cli.sweep_quick_show
                       PASS_REGULAR_EXPRESSION "class=\"chart decision-map\"")
endif()
