# Checks search_check.json (tests/cli/search_check.cmake): -DREPORT=path.
file(READ "${REPORT}" report)
foreach(path "exhaustive;measurements" "adaptive;measurements" "adaptive;seconds"
             "measurement_ratio" "time_ratio" "kernel_calls;exhaustive;timed"
             "kernel_calls;adaptive;warmup" "kernel_calls;timed_ratio" "drift;pairs"
             "drift;median" "drift;p10" "drift;p90" "adaptive_table;mean_regret"
             "exhaustive_table;worst_regret" "replayed_search;table;points" "goals;met"
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
message("search_check.json holds every figure")
