# search-check --replay EXHAUSTIVE --replay-control CONTROL (tests/cli/search_check.cmake): a sweep
# judged on a copy of itself agrees everywhere and loses only within noise, the same both ways; an adaptive folder, the --replay
# folder itself, a stopped exhaustive sweep and one of another profile are refused in one line,
# exit 2. -DEXE= -DEXHAUSTIVE= -DADAPTIVE= -DWORK=
file(REMOVE_RECURSE "${WORK}")
file(MAKE_DIRECTORY "${WORK}")
file(STRINGS "${EXHAUSTIVE}/results.jsonl" lines)

# The same timings under another folder: the control's table is the exhaustive one, each judged on
# its own timings both ways round, so the two judgements are one: every decision and
# configuration agrees, and what regret there is lies within each point's noise (the table's
# rules carry a decision across a tie).
file(MAKE_DIRECTORY "${WORK}/copy")
file(COPY_FILE "${EXHAUSTIVE}/results.jsonl" "${WORK}/copy/results.jsonl")
execute_process(COMMAND ${EXE} search-check --replay "${EXHAUSTIVE}" --replay-control
                        "${WORK}/copy" --out "${WORK}/judged"
                RESULT_VARIABLE rc OUTPUT_VARIABLE out ERROR_VARIABLE err)
if(NOT rc EQUAL 0 OR NOT out MATCHES "control: an exhaustive sweep's table on the other")
  message(FATAL_ERROR "a copy as the control: exit ${rc}\n${out}\n${err}")
endif()
file(READ "${WORK}/judged/control_judgement.json" judged)
foreach(table control_table exhaustive_table_on_control)
  string(JSON points GET "${judged}" ${table} points)
  string(JSON family GET "${judged}" ${table} family_agreement)
  string(JSON agree GET "${judged}" ${table} config_agreement)
  string(JSON beyond_mean GET "${judged}" ${table} mean_regret_beyond_noise)
  string(JSON beyond_worst GET "${judged}" ${table} worst_regret_beyond_noise)
  string(JSON mean_${table} GET "${judged}" ${table} mean_regret)
  string(JSON worst_${table} GET "${judged}" ${table} worst_regret)
  if(NOT points EQUAL 6 OR NOT family EQUAL 1 OR NOT agree EQUAL 1 OR NOT beyond_mean EQUAL 0 OR
     NOT beyond_worst EQUAL 0)
    message(FATAL_ERROR "${table} on its own timings: ${family} and ${agree} of ${points} points "
                        "agree (shares), regret beyond noise ${beyond_mean} / ${beyond_worst}")
  endif()
endforeach()
string(JSON floor_mean GET "${judged}" floor mean_regret)
string(JSON floor_worst GET "${judged}" floor worst_regret)
string(JSON pairs GET "${judged}" drift pairs)
string(JSON median GET "${judged}" drift median)
if(NOT mean_control_table EQUAL mean_exhaustive_table_on_control OR
   NOT worst_control_table EQUAL worst_exhaustive_table_on_control OR
   NOT floor_mean EQUAL mean_control_table OR NOT floor_worst EQUAL worst_control_table OR
   NOT pairs EQUAL 48 OR NOT median EQUAL 1)
  message(FATAL_ERROR "a copy as the control: regret ${mean_control_table} / "
                      "${worst_control_table} one way, ${mean_exhaustive_table_on_control} / "
                      "${worst_exhaustive_table_on_control} the other, floor ${floor_mean} / "
                      "${floor_worst}, drift ${median} over ${pairs}")
endif()

# `dir` given as --replay-control is refused in one line that matches `pattern`.
function(expect_refused dir pattern)
  execute_process(COMMAND ${EXE} search-check --replay "${EXHAUSTIVE}" --replay-control "${dir}"
                  RESULT_VARIABLE rc OUTPUT_VARIABLE out ERROR_VARIABLE err)
  string(STRIP "${err}" err)
  if(NOT rc EQUAL 2 OR err MATCHES "\n" OR NOT err MATCHES "${pattern}" OR NOT out STREQUAL "")
    message(FATAL_ERROR "${dir}: exit ${rc}, stdout '${out}', stderr '${err}'")
  endif()
endfunction()
expect_refused("${ADAPTIVE}" "is an adaptive sweep's: --replay-control needs an exhaustive one")
expect_refused("${EXHAUSTIVE}" "is the --replay sweep itself")
# Stopped three measurements short of its plan.
list(LENGTH lines n)
math(EXPR keep "${n} - 3")
list(SUBLIST lines 0 ${keep} head)
set(text "")
foreach(l IN LISTS head)
  string(APPEND text "${l}\n")
endforeach()
file(MAKE_DIRECTORY "${WORK}/stopped")
file(WRITE "${WORK}/stopped/results.jsonl" "${text}")
expect_refused("${WORK}/stopped"
               "holds 45 of the 48 measurements its plan names: --replay-control needs a finished")
# Another profile.
set(text "")
foreach(l IN LISTS lines)
  if(l MATCHES "\"type\":\"header\"")
    string(REGEX REPLACE "\"profile_hash\":\"[0-9a-f]+\"" "\"profile_hash\":\"0123456789abcdef\""
                         l "${l}")
  endif()
  string(APPEND text "${l}\n")
endforeach()
file(MAKE_DIRECTORY "${WORK}/other_profile")
file(WRITE "${WORK}/other_profile/results.jsonl" "${text}")
expect_refused("${WORK}/other_profile" "--replay-control needs the same profile")
message("a copy as the control agrees everywhere; refused an adaptive folder, the --replay folder, a stopped sweep and another profile")
