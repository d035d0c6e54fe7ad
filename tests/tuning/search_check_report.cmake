# Checks search_check.json (tests/cli/search_check.cmake): -DREPORT=path.
file(READ "${REPORT}" report)
foreach(path "exhaustive;measurements" "adaptive;measurements" "adaptive;seconds"
             "measurement_ratio" "time_ratio" "kernel_calls;exhaustive;timed"
             "kernel_calls;adaptive;warmup" "kernel_calls;timed_ratio" "drift;pairs"
             "drift;median" "drift;p10" "drift;p90" "drift;outliers" "drift;farthest" "adaptive_table;mean_regret"
             "exhaustive_table;worst_regret" "replayed_search;table;points" "goals;met"
             "goals;missed" "goals;exhaustive_table_meets_regret"
             "goals;met_beyond_exhaustive_table" "adaptive_table;grid;worst"
             "adaptive_table;held_out;points" "adaptive_table;beyond_exhaustive_table;mean")
  string(JSON value ERROR_VARIABLE err GET "${report}" ${path})
  if(err)
    message(FATAL_ERROR "${REPORT}: no ${path}: ${err}")
  endif()
endforeach()
string(JSON pairs GET "${report}" drift pairs)
string(JSON timed GET "${report}" kernel_calls adaptive timed)
if(pairs LESS 1 OR timed LESS 1)
  message(FATAL_ERROR "${REPORT}: drift over ${pairs} pairs, ${timed} timed repetitions")
endif()
# A goal missed is named with its figure: the run's measurement share is one of them exactly when
# it is above 35%.
string(JSON ratio GET "${report}" measurement_ratio)
string(JSON named ERROR_VARIABLE not_named GET "${report}" goals missed measurements)
if(ratio GREATER 0.35 AND not_named)
  message(FATAL_ERROR "${REPORT}: measurements ${ratio} above the goal, not among goals.missed")
endif()
if(NOT ratio GREATER 0.35 AND NOT not_named)
  message(FATAL_ERROR "${REPORT}: measurements ${ratio} within the goal, yet missed: ${named}")
endif()
# Every judged point is listed with what its choice rests on: the 6 grid points of the adaptive
# table, each measured by the adaptive sweep or inferred from around it; the exhaustive table's
# all measured.
foreach(table "adaptive_table" "exhaustive_table" "replayed_search;table")
  string(JSON n LENGTH "${report}" ${table} each_point)
  if(NOT n EQUAL 6)
    message(FATAL_ERROR "${REPORT}: ${table} lists ${n} points, not 6")
  endif()
  math(EXPR last "${n} - 1")
  foreach(k RANGE ${last})
    string(JSON basis GET "${report}" ${table} each_point ${k} basis)
    string(JSON regret GET "${report}" ${table} each_point ${k} regret)
    string(JSON choice GET "${report}" ${table} each_point ${k} config_key)
    if(NOT basis MATCHES "^(measured|inferred|best_untimed)$" OR regret LESS 0 OR
       NOT choice MATCHES "^decode_v[12]\\[")
      message(FATAL_ERROR "${REPORT}: ${table} point ${k}: ${basis}, ${regret}, ${choice}")
    endif()
    if(table STREQUAL "exhaustive_table" AND NOT basis STREQUAL "measured")
      message(FATAL_ERROR "${REPORT}: the exhaustive table's point ${k} is ${basis}")
    endif()
  endforeach()
endforeach()
message("search_check.json holds every figure")
