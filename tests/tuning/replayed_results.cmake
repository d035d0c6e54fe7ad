# search-check --replay (tests/cli/search_check.cmake): the replayed results file says it is an
# adaptive search's, replayed, and ends as a finished search does; and a folder whose exhaustive
# sweep stopped early, or a --partial merge, is refused in one line.
# -DEXE= -DREPLAYED=folder -DEXHAUSTIVE=folder -DWORK= -DPROFILE=path
file(STRINGS "${REPLAYED}/replayed_results.jsonl" lines)
list(GET lines 0 header)
list(GET lines -1 last)
if(NOT header MATCHES "\"mode\":\"adaptive\"" OR NOT header MATCHES "\"replayed\":true"
   OR NOT header MATCHES "\"race_survivors\":")
  message(FATAL_ERROR "the replayed header does not name an adaptive, replayed search: ${header}")
endif()
if(NOT last MATCHES "\"type\":\"search_end\"")
  message(FATAL_ERROR "the replayed lines do not end with search_end: ${last}")
endif()

file(STRINGS "${EXHAUSTIVE}/results.jsonl" ex)
list(SUBLIST ex 0 6 head) # the header and five measurements
list(JOIN head "\n" text)
file(MAKE_DIRECTORY "${WORK}/partial")
file(WRITE "${WORK}/partial/results.jsonl" "${text}\n")
execute_process(COMMAND ${EXE} search-check --replay "${WORK}/partial"
                RESULT_VARIABLE rc OUTPUT_VARIABLE out ERROR_VARIABLE err)
string(STRIP "${err}" err)
if(NOT rc EQUAL 2 OR err MATCHES "\n"
   OR NOT err MATCHES "holds 5 of the 48 measurements its plan names: --replay needs a finished")
  message(FATAL_ERROR "a stopped exhaustive sweep: exit ${rc}, stderr '${err}', stdout '${out}'")
endif()

# A --partial merge whose other shard never ran is refused too (its plan is unknown, -1).
include(${CMAKE_CURRENT_LIST_DIR}/partial_merge.cmake)
attn_partial_merge("${WORK}/pm")
execute_process(COMMAND ${EXE} search-check --replay "${WORK}/pm"
                RESULT_VARIABLE rc OUTPUT_VARIABLE out ERROR_VARIABLE err)
string(STRIP "${err}" err)
if(NOT rc EQUAL 2 OR err MATCHES "\n" OR NOT err MATCHES "is a --partial merge of shards")
  message(FATAL_ERROR "a --partial merge: exit ${rc}, stderr '${err}', stdout '${out}'")
endif()
