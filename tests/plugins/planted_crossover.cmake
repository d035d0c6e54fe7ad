# Sweeps the planted-cost plugin (SPLIT_SPIN) over PROFILE and checks that `table lookup` answers
# decode_v1 at every grid length below the planted crossover (1200 keys at batch 1) and decode_v2
# at every one above it, and at two lengths between the grid lengths around it.
# With -DSEARCH=adaptive the sweep searches adaptively: the switch must land the same, with fewer
# measurements than the grid has (the table's provenance says so), and a resume of the folder
# must keep the adaptive search, measure nothing more and refuse --search exhaustive.
# -DEXE=attn-tune -DPLUGIN=the spin plugin -DPROFILE=profile.json -DWORK=folder [-DSEARCH=...]
cmake_minimum_required(VERSION 3.20)
file(REMOVE_RECURSE ${WORK})
file(MAKE_DIRECTORY ${WORK})
if(NOT SEARCH)
  set(SEARCH exhaustive)
endif()
# The adaptive sweep shows its progress lines (no --quiet): they count timings, with no ETA. (The
# sanitized run leaves these tests out: there the printing blurred the planted costs.)
set(quiet --quiet)
if(SEARCH STREQUAL "adaptive")
  set(quiet)
endif()
execute_process(COMMAND ${EXE} sweep --kernels ${PLUGIN} --profile ${PROFILE} --threads 1 ${quiet}
                        --no-report --out ${WORK}/out --search ${SEARCH}
                RESULT_VARIABLE rc OUTPUT_VARIABLE out ERROR_VARIABLE err)
message("sweep: exit ${rc}\n${out}${err}")
if(NOT rc EQUAL 0)
  message(FATAL_ERROR "the sweep exited ${rc}")
endif()
if(SEARCH STREQUAL "adaptive")
  if(NOT err MATCHES "adaptive search: no ETA"
     OR NOT err MATCHES "\n\[[0-9]+ timings, [0-9]+s elapsed\] ok " OR err MATCHES "ETA [0-9]")
    message(FATAL_ERROR "the adaptive sweep's progress lines are not open-ended counts")
  endif()
  if(NOT out MATCHES "adaptive search: ([0-9]+) of the ([0-9]+) measurements")
    message(FATAL_ERROR "the sweep did not account for its adaptive search")
  endif()
  if(NOT CMAKE_MATCH_1 LESS CMAKE_MATCH_2)
    message(FATAL_ERROR "the adaptive search measured ${CMAKE_MATCH_1} of ${CMAKE_MATCH_2}")
  endif()
  file(READ ${WORK}/out/threshold_table.json table)
  string(JSON mode GET "${table}" provenance search mode)
  if(NOT mode STREQUAL "adaptive")
    message(FATAL_ERROR "the table's provenance says search ${mode}")
  endif()
  execute_process(COMMAND ${EXE} sweep --kernels ${PLUGIN} --profile ${PROFILE} --threads 1
                          --quiet --no-report --out ${WORK}/out --resume
                  RESULT_VARIABLE rc OUTPUT_VARIABLE again ERROR_VARIABLE err)
  message("resume: exit ${rc}\n${again}${err}")
  string(REGEX MATCH "adaptive search: [0-9]+ of" before "${out}")
  string(REGEX MATCH "adaptive search: [0-9]+ of" after "${again}")
  if(NOT rc EQUAL 0 OR NOT before STREQUAL after)
    message(FATAL_ERROR "a resume of the finished adaptive sweep measured more or failed")
  endif()
  # The lengths it did not measure are named as resting on a bisection step, in `table show` and
  # in the report.
  execute_process(COMMAND ${EXE} table show ${WORK}/out/threshold_table.json
                  RESULT_VARIABLE rc OUTPUT_VARIABLE shown ERROR_VARIABLE err)
  if(NOT rc EQUAL 0 OR NOT shown MATCHES "search: +adaptive: [0-9]+ measurements of the 24"
     OR NOT shown MATCHES "inferred decisions \\(adaptive search\\)"
     OR NOT shown MATCHES "rests on a bisection step")
    message(FATAL_ERROR "table show does not say the search or its inferred decisions:\n${shown}${err}")
  endif()
  execute_process(COMMAND ${EXE} report ${WORK}/out --out ${WORK}/report.html
                  RESULT_VARIABLE rc OUTPUT_VARIABLE ignored ERROR_VARIABLE err)
  file(READ ${WORK}/report.html page)
  if(NOT rc EQUAL 0 OR NOT page MATCHES "inferred decision" OR NOT page MATCHES "adaptive: ")
    message(FATAL_ERROR "the report does not say the search or its inferred decisions: ${err}")
  endif()
  execute_process(COMMAND ${EXE} sweep --kernels ${PLUGIN} --profile ${PROFILE} --threads 1
                          --quiet --no-report --out ${WORK}/out --resume --search exhaustive
                  RESULT_VARIABLE rc OUTPUT_VARIABLE again ERROR_VARIABLE err)
  message("resume exhaustive: exit ${rc}\n${err}")
  if(NOT rc EQUAL 2 OR NOT err MATCHES "was swept with --search adaptive, not exhaustive")
    message(FATAL_ERROR "a resume with another search was not refused in one line")
  endif()
endif()
# The grid lengths, and two between the pair that brackets the crossover (768 and 2048): the
# table's switch lies where log(v2 / v1) between those two crosses zero, at 1274 for these costs
# exactly, so 1000 is v1's and 1500 is v2's (the old rule, a switch at 2048, answered v1 at 1500).
foreach(len 256 384 512 768 1000 1500 2048 2560 3072 4096)
  if(len LESS 1200)
    set(want decode_v1)
  else()
    set(want decode_v2)
  endif()
  execute_process(COMMAND ${EXE} table lookup ${WORK}/out/threshold_table.json --batch 1
                          --context-len ${len} --num-heads 2 --num-kv-heads 1 --head-dim 32
                          --block-size 16 --dtype fp32 --kernels ${PLUGIN} --device cpu --json
                  RESULT_VARIABLE rc OUTPUT_VARIABLE got ERROR_VARIABLE err)
  message("context ${len}: exit ${rc}: ${got}${err}")
  if(NOT rc EQUAL 0 OR NOT got MATCHES "\"family\": *\"${want}\"")
    message(FATAL_ERROR "at context ${len} the table does not answer ${want}")
  endif()
endforeach()
