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
message("search_check.json holds every figure")
