# CLI tests of fault isolation and the device lock: configurations that crash or hang their
# worker (the CPU backend's test hook, ATTN_TUNE_TEST_FAULTS) are faults, exit 1, and the rest is
# measured; a second timer on a held device exits 3 with --no-wait.
set(ATTN_CLI_DATA ${CMAKE_CURRENT_BINARY_DIR}/cli_data)
file(WRITE ${ATTN_CLI_DATA}/faults_profile.json
     "{\"name\": \"faults\", \"decode\": {\"batch\": [1], \"context_len\": [300],\n"
     " \"num_kv_heads\": [1], \"gqa_ratio\": [2], \"head_dim\": [32], \"block_size\": [16],\n"
     " \"dtype\": [\"fp32\"]},\n"
     " \"timing\": {\"warmup\": 1, \"min_reps\": 3, \"max_reps\": 10, \"max_seconds\": 0.05}}\n")
set(ATTN_FAULTS "segv:decode_v2[partition=256,split=0]\;abort:decode_v1[split=1]\;hang:decode_v2[partition=1024,split=1]")

attn_cli_test(NAME sweep_retry_faults_needs_resume EXIT 2 REGEX "--retry-faults .* needs --resume"
              ARGS sweep --device cpu --profile quick --retry-faults)

if(EXISTS ${PROJECT_SOURCE_DIR}/src/backends/cpu/cpu_backend.cpp)
  set(faults_out ${CMAKE_CURRENT_BINARY_DIR}/cli_work/sweep_faults_out)
  add_test(NAME cli.sweep_faults_clean COMMAND ${CMAKE_COMMAND} -E rm -rf ${faults_out})
  set_tests_properties(cli.sweep_faults_clean PROPERTIES LABELS "cli" FIXTURES_SETUP faults_clean)
  attn_cli_test(NAME sweep_faults EXIT 1
                REGEX "sweep: 8 measurements \\(0 from an earlier run\\): 5 timed, .* 3 faults.*--retry-faults"
                ARGS sweep --device cpu --profile ${ATTN_CLI_DATA}/faults_profile.json --threads 2
                     --quiet --out ${faults_out})
  # (ATTN_TUNE_UNIT_GRACE: the planted hang costs 2 s of grace instead of 10.)
  set_tests_properties(cli.sweep_faults PROPERTIES
                       ENVIRONMENT "ATTN_TUNE_TEST_FAULTS=${ATTN_FAULTS};ATTN_TUNE_UNIT_GRACE=2"
                       FIXTURES_REQUIRED faults_clean FIXTURES_SETUP faults_table
                       RESOURCE_LOCK cpu_timing)
  # The faults stand on --resume (the hook is still armed: a retry would fault again).
  attn_cli_test(NAME sweep_faults_resume EXIT 1 REGEX "8 from an earlier run.* 3 faults"
                ARGS sweep --device cpu --profile ${ATTN_CLI_DATA}/faults_profile.json --threads 2
                     --quiet --resume --out ${faults_out})
  set_tests_properties(cli.sweep_faults_resume PROPERTIES
                       ENVIRONMENT "ATTN_TUNE_TEST_FAULTS=${ATTN_FAULTS}"
                       FIXTURES_REQUIRED faults_table RESOURCE_LOCK cpu_timing)

  # --resume into a folder that holds nothing yet (a sweep killed before its first line, or a
  # mistyped --out) says so and measures everything.
  set(resume_nothing ${CMAKE_CURRENT_BINARY_DIR}/cli_work/sweep_resume_nothing)
  add_test(NAME cli.sweep_resume_nothing_clean COMMAND ${CMAKE_COMMAND} -E rm -rf ${resume_nothing})
  set_tests_properties(cli.sweep_resume_nothing_clean PROPERTIES LABELS "cli"
                       FIXTURES_SETUP resume_nothing_clean)
  attn_cli_test(NAME sweep_resume_nothing EXIT 0
                REGEX "--resume: [^\n]*results.jsonl holds no measurement yet; the sweep starts from the first, exhaustive \\(give --search adaptive for an adaptive one\\).*8 measurements \\(0 from an earlier run\\)"
                ARGS sweep --device cpu --profile ${ATTN_CLI_DATA}/faults_profile.json --threads 2
                     --resume --no-report --out ${resume_nothing})
  set_tests_properties(cli.sweep_resume_nothing PROPERTIES RESOURCE_LOCK cpu_timing
                       FIXTURES_REQUIRED resume_nothing_clean)

  # More --threads than the CPUs: the kernels' threads wait for one another in every measurement,
  # which the sweep records (cpu_wait_share), does not make again, and names at its end.
  cmake_host_system_information(RESULT attn_cores QUERY NUMBER_OF_LOGICAL_CORES)
  math(EXPR attn_crowded "2 * ${attn_cores} + 2")
  set(crowded_out ${CMAKE_CURRENT_BINARY_DIR}/cli_work/sweep_crowded_out)
  add_test(NAME cli.sweep_crowded_clean COMMAND ${CMAKE_COMMAND} -E rm -rf ${crowded_out})
  set_tests_properties(cli.sweep_crowded_clean PROPERTIES LABELS "cli" FIXTURES_SETUP crowded_clean)
  attn_cli_test(NAME sweep_crowded EXIT 0
                REGEX "warning: [0-9]+ of 8 measurements waited for a CPU [^\n]*--threads ${attn_crowded} is more than the [0-9]+ CPUs this process may use"
                ARGS sweep --device cpu --profile ${ATTN_CLI_DATA}/faults_profile.json
                     --threads ${attn_crowded} --quiet --no-report --out ${crowded_out})
  set_tests_properties(cli.sweep_crowded PROPERTIES RESOURCE_LOCK cpu_timing
                       FIXTURES_REQUIRED crowded_clean)

  attn_cli_test(NAME verify_fault EXIT 1 REGEX "FAIL cpu decode_v1\\[split=1\\] [^\n]*: fault: worker"
                ARGS verify --device cpu --intensity quick --families decode_v1 --dtypes fp32)
  set_tests_properties(cli.verify_fault PROPERTIES
                       ENVIRONMENT "ATTN_TUNE_TEST_FAULTS=segv:decode_v1[split=1]")
  # A worker killed from outside (the OOM killer, kill -9) is not charged to the kernel at once:
  # the case runs again in a new worker, said on stderr, and a second kill charges it.
  attn_cli_test(NAME verify_killed_from_outside EXIT 1
                REGEX "FAIL cpu decode_v1\\[split=1\\] [^\n]*: fault: worker killed by SIGKILL [^\n]*, as on its first try.*verify: note: the worker was killed by SIGKILL [^\n]* from outside while cpu . decode_v1\\[split=1\\] [^\n]*; it runs again in a new worker"
                ARGS verify --device cpu --intensity quick --families decode_v1 --dtypes fp32)
  set_tests_properties(cli.verify_killed_from_outside PROPERTIES
                       ENVIRONMENT "ATTN_TUNE_TEST_FAULTS=kill:decode_v1[split=1]")
  # verify told to stop writes its JUnit report of the cases that finished, with an error testcase
  # for the interruption, and ends by the signal.
  add_test(NAME cli.verify_stopped_by_sigterm
           COMMAND sh ${CMAKE_CURRENT_SOURCE_DIR}/cli/stop_verify.sh $<TARGET_FILE:attn-tune>
                   ${CMAKE_CURRENT_BINARY_DIR}/cli_work/stop_verify)
  set_tests_properties(cli.verify_stopped_by_sigterm PROPERTIES LABELS "cli")

  # util-linux flock holds this host's CPU lock as another sweep would, in a private lock folder.
  find_program(ATTN_FLOCK flock)
  if(ATTN_FLOCK)
    cmake_host_system_information(RESULT attn_host QUERY HOSTNAME)
    string(REGEX REPLACE "[^A-Za-z0-9._-]" "_" attn_host "${attn_host}")
    set(lock_dir ${CMAKE_CURRENT_BINARY_DIR}/cli_work/device_locks)
    file(MAKE_DIRECTORY ${lock_dir})
    # The refused sweep leaves its output folder behind; a rerun starts without it.
    add_test(NAME cli.sweep_device_busy_clean COMMAND ${CMAKE_COMMAND} -E rm -rf
                  ${CMAKE_CURRENT_BINARY_DIR}/cli_work/sweep_device_busy/out)
    set_tests_properties(cli.sweep_device_busy_clean PROPERTIES LABELS "cli"
                         FIXTURES_SETUP device_busy_clean)
    add_test(NAME cli.sweep_device_busy_no_wait
             COMMAND ${CMAKE_COMMAND} -DEXE=${ATTN_FLOCK}
                     "-DARGS=${lock_dir}/attn-tune-device-cpu-${attn_host}.lock|$<TARGET_FILE:attn-tune>|sweep|--device|cpu|--profile|quick|--no-wait|--quiet|--out|${CMAKE_CURRENT_BINARY_DIR}/cli_work/sweep_device_busy/out"
                     -DEXIT=3 "-DREGEX=(another attn-tune process .*is timing on this device|is held in the name of pid [0-9]+, which is no longer running)"
                     -DWORKDIR=${CMAKE_CURRENT_BINARY_DIR}/cli_work/sweep_device_busy
                     -P ${CMAKE_CURRENT_SOURCE_DIR}/cli/expect.cmake)
    set_tests_properties(cli.sweep_device_busy_no_wait PROPERTIES LABELS "cli"
                         FIXTURES_REQUIRED device_busy_clean
                         ENVIRONMENT "ATTN_TUNE_LOCK_DIR=${lock_dir}")
    # A sweep that waited for the device still counts its plan (the wait's note came first).
    add_test(NAME cli.sweep_waits_for_device
             COMMAND sh -c "rm -rf out && (${ATTN_FLOCK} \"$ATTN_TUNE_LOCK_DIR/attn-tune-device-cpu-${attn_host}.lock\" sleep 3 &) && sleep 1 && $<TARGET_FILE:attn-tune> sweep --device cpu --profile ${ATTN_CLI_DATA}/faults_profile.json --threads 2 --no-report --out out 2>&1"
             WORKING_DIRECTORY ${CMAKE_CURRENT_BINARY_DIR}/cli_work/device_locks)
    set_tests_properties(cli.sweep_waits_for_device PROPERTIES LABELS "cli"
                         ENVIRONMENT "ATTN_TUNE_LOCK_DIR=${lock_dir}"
                         PASS_REGULAR_EXPRESSION "waiting for cpu.*sweep: 8 measurements \\(0 from an earlier run\\)")
    # A merge into a running sweep's folder is refused naming the sweep's pid, and the sweep
    # finishes whole (the sweep waits for the device lock flock holds, so it is surely running).
    add_test(NAME cli.merge_into_running_sweep
             COMMAND sh ${CMAKE_CURRENT_SOURCE_DIR}/cli/merge_into_running_sweep.sh
                     $<TARGET_FILE:attn-tune> ${ATTN_FLOCK}
                     ${CMAKE_CURRENT_BINARY_DIR}/cli_work/merge_running/locks/attn-tune-device-cpu-${attn_host}.lock
                     ${ATTN_CLI_DATA}/faults_profile.json
                     ${CMAKE_CURRENT_BINARY_DIR}/cli_work/merge_running/work)
    set_tests_properties(cli.merge_into_running_sweep PROPERTIES LABELS "cli"
                         ENVIRONMENT "ATTN_TUNE_LOCK_DIR=${CMAKE_CURRENT_BINARY_DIR}/cli_work/merge_running/locks")
    # A sweep told to stop (SIGTERM) says what it keeps in one line (nothing, or where its
    # measurements are), ends by the signal, and leaves its folder to --resume, with no worker
    # behind holding it.
    add_test(NAME cli.sweep_stopped_by_sigterm
             COMMAND sh ${CMAKE_CURRENT_SOURCE_DIR}/cli/stop_running_sweep.sh
                     $<TARGET_FILE:attn-tune> ${ATTN_FLOCK}
                     ${CMAKE_CURRENT_BINARY_DIR}/cli_work/stop_running/locks/attn-tune-device-cpu-${attn_host}.lock
                     ${ATTN_CLI_DATA}/faults_profile.json
                     ${CMAKE_CURRENT_BINARY_DIR}/cli_work/stop_running/work)
    set_tests_properties(cli.sweep_stopped_by_sigterm PROPERTIES LABELS "cli"
                         ENVIRONMENT "ATTN_TUNE_LOCK_DIR=${CMAKE_CURRENT_BINARY_DIR}/cli_work/stop_running/locks")
    # Merges stopped at random moments leave one whole generation behind the folder's names.
    add_test(NAME cli.merges_stopped_anywhere
             COMMAND sh ${CMAKE_CURRENT_SOURCE_DIR}/cli/stop_merges.sh
                     $<TARGET_FILE:attn-tune> ${ATTN_CLI_DATA}/faults_profile.json
                     ${CMAKE_CURRENT_BINARY_DIR}/cli_work/stop_merges/work)
    set_tests_properties(cli.merges_stopped_anywhere PROPERTIES LABELS "cli"
                         ENVIRONMENT "ATTN_TUNE_LOCK_DIR=${CMAKE_CURRENT_BINARY_DIR}/cli_work/stop_merges/locks")
  endif()
endif()

# An --out where the table cannot be written (here a path whose table's temporary file is past
# PATH_MAX, 4096) is refused before any measurement, with the reason, not after all of them.
string(REPEAT "d" 200 long_segment)
set(long_out "long")
foreach(i RANGE 1 19)
  string(APPEND long_out "/${long_segment}")
endforeach()
string(REPEAT "e" 240 long_tail)
string(APPEND long_out "/${long_tail}")
attn_cli_test(NAME sweep_out_unwritable_before_measuring EXIT 2
              REGEX "attn-tune: error: cannot create a file next to long/d[^ ]*[.][.][.][^ ]*eee/threshold_table.json: File name too long"
              ARGS sweep --device cpu --profile ${ATTN_CLI_DATA}/faults_profile.json --threads 2
                   --out ${long_out})

# A configuration that hangs is not run on verify's other cases after three hangs (each costs its
# whole deadline, at least 10 s on the CPU): the gate fails naming it, in three deadlines instead
# of one per case (with ATTN_TUNE_UNIT_GRACE=2 here, about 2 s each). The totals still add up to every case (92 at quick for decode_v1 in fp32,
# 46 per configuration): the cases left out are counted as not run.
# Its summary counts the three hangs as one cause, whatever each one's deadline was.
attn_cli_test(NAME verify_gives_up_on_a_hanging_config EXIT 1
              REGEX "cpu decode_v1\\[split=1\\]: its other cases not run: it hung 3 cases.*\n +3  fault: timeout: no result within the case's deadline [^\n]*\n.*\n46 passed, 3 failed, 0 skipped, 43 not run [(]their configuration hung on earlier cases[)]\n"
              ARGS verify --device cpu --intensity quick --families decode_v1 --dtypes fp32
                   --kv-dtypes auto --threads 2)
set_tests_properties(cli.verify_gives_up_on_a_hanging_config PROPERTIES
                     ENVIRONMENT "ATTN_TUNE_TEST_FAULTS=hang:decode_v1[split=1];ATTN_TUNE_UNIT_GRACE=2")

# ATTN_TUNE_UNIT_GRACE that is not a number of seconds above 0 is the command's usage error, read
# before any work (not first in a worker).
attn_cli_test(NAME unit_grace_not_seconds EXIT 2
              REGEX "^attn-tune: error: ATTN_TUNE_UNIT_GRACE='2s' is not a number of seconds above 0\n$"
              ARGS verify --device cpu --intensity quick --families decode_v1 --dtypes fp32)
set_tests_properties(cli.unit_grace_not_seconds PROPERTIES ENVIRONMENT "ATTN_TUNE_UNIT_GRACE=2s")

# merge refuses a shard line pasted in from another sweep (another workload, another seed's data).
add_test(NAME cli.merge_foreign_line
         COMMAND sh ${CMAKE_CURRENT_SOURCE_DIR}/cli/merge_foreign_line.sh $<TARGET_FILE:attn-tune>
                 ${CMAKE_CURRENT_BINARY_DIR}/cli_work/merge_foreign_line)
set_tests_properties(cli.merge_foreign_line PROPERTIES LABELS "cli" RESOURCE_LOCK cpu_timing)

# A report that cannot be written at the end of a sweep: exit 4, the earlier page removed.
add_test(NAME cli.report_write_fails
         COMMAND sh ${CMAKE_CURRENT_SOURCE_DIR}/cli/report_write_fails.sh $<TARGET_FILE:attn-tune>
                 ${ATTN_CLI_DATA}/faults_profile.json
                 ${CMAKE_CURRENT_BINARY_DIR}/cli_work/report_write_fails)
set_tests_properties(cli.report_write_fails PROPERTIES LABELS "cli" RESOURCE_LOCK cpu_timing)

# verify's failure dumps that cannot be written stop with one warning; every failure is still
# judged and diagnosed.
add_test(NAME cli.verify_dumps_stop_when_full
         COMMAND sh ${CMAKE_CURRENT_SOURCE_DIR}/cli/dumps_stop_when_full.sh
                 $<TARGET_FILE:attn-tune> ${ATTN_SPLIT_DROP_LAST_KEY_PLUGIN}
                 ${CMAKE_CURRENT_BINARY_DIR}/cli_work/verify_dumps_stop_when_full)
set_tests_properties(cli.verify_dumps_stop_when_full PROPERTIES LABELS "cli")
