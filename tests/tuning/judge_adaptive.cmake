# search-check --replay EXHAUSTIVE --adaptive ADAPTIVE (tests/cli/search_check.cmake) refuses, in
# one line and exit 2, an adaptive folder whose search has not finished, one of another profile or
# kernel set and a --partial merge of adaptive shards; its judgement file holds every point with its basis.
# -DEXE= -DEXHAUSTIVE= -DADAPTIVE= -DWORK= -DPROFILE=
file(STRINGS "${ADAPTIVE}/results.jsonl" lines)
include(${CMAKE_CURRENT_LIST_DIR}/partial_merge.cmake)
# The folder `dir` given as --adaptive is refused in one line that matches `pattern`.
function(expect_refused dir pattern)
  execute_process(COMMAND ${EXE} search-check --replay "${EXHAUSTIVE}" --adaptive "${dir}"
                  RESULT_VARIABLE rc OUTPUT_VARIABLE out ERROR_VARIABLE err)
  string(STRIP "${err}" err)
  if(NOT rc EQUAL 2 OR err MATCHES "\n" OR NOT err MATCHES "${pattern}")
    message(FATAL_ERROR "${dir}: exit ${rc}, stderr '${err}'")
  endif()
endfunction()
# The same for a folder whose results.jsonl is `text`.
function(expect_refusal name text pattern)
  file(MAKE_DIRECTORY "${WORK}/${name}")
  file(WRITE "${WORK}/${name}/results.jsonl" "${text}")
  expect_refused("${WORK}/${name}" "${pattern}")
endfunction()

# Without its search_end line: a search still running.
set(unfinished "")
foreach(l IN LISTS lines)
  if(NOT l MATCHES "\"type\":\"search_end\"")
    string(APPEND unfinished "${l}\n")
  endif()
endforeach()
expect_refusal(unfinished "${unfinished}" "search has not finished.*sweep --resume finishes it")

# The adaptive folder with `regex` replaced by `replacement` in its header (line by line: the
# lines hold brackets, which CMake's list commands would split on) is refused with `pattern`.
function(expect_header_refusal name regex replacement pattern)
  set(text "")
  foreach(l IN LISTS lines)
    if(l MATCHES "\"type\":\"header\"")
      string(REGEX REPLACE "${regex}" "${replacement}" l "${l}")
    endif()
    string(APPEND text "${l}\n")
  endforeach()
  expect_refusal(${name} "${text}" "${pattern}")
endfunction()
# Another profile, and the built-in kernels of another ISA level (another kernel set).
expect_header_refusal(other_profile "\"profile_hash\":\"[0-9a-f]+\""
                      "\"profile_hash\":\"0123456789abcdef\"" "--adaptive needs the same profile")
expect_header_refusal(other_kernels "\"isa\":\"[^\"]+\"" "\"isa\":\"x86-64-v1\""
                      "timed the kernels of .*: --adaptive needs the same kernels")

# A --partial merge of adaptive shards that did not all finish.
attn_partial_merge("${WORK}/pm" --search adaptive)
expect_refused("${WORK}/pm" "is a --partial merge of shards that did not all finish")

# The judgement written by the passing case: every grid point, each with a basis.
file(READ "${WORK}/../out/judged/adaptive_judgement.json" judged)
string(JSON n LENGTH "${judged}" adaptive_table each_point)
string(JSON ratio GET "${judged}" measurement_ratio)
if(NOT n EQUAL 6 OR NOT ratio GREATER 0)
  message(FATAL_ERROR "adaptive_judgement.json: ${n} points, measurement ratio ${ratio}")
endif()
message("refused an unfinished search, another profile, other kernels and a partial merge; the judgement holds 6 points")
