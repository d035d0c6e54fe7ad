# Checks search_check.json (tests/cli/search_check.cmake): -DREPORT=path.
file(READ "${REPORT}" report)
foreach(path "exhaustive;measurements" "adaptive;measurements" "adaptive;seconds"
             "measurement_ratio" "time_ratio" "kernel_calls;exhaustive;timed"
             "kernel_calls;adaptive;warmup" "kernel_calls;timed_ratio" "drift;pairs"
             "drift;median" "drift;p10" "drift;p90" "drift;outliers" "drift;farthest" "adaptive_table;mean_regret"
             "exhaustive_table;worst_regret" "replayed_search;table;points" "goals;met"
             "goals;missed" "goals;exhaustive_table_meets_regret"
             "goals;met_beyond_exhaustive_table" "adaptive_table;grid;worst"
             "adaptive_table;held_out;points" "adaptive_table;beyond_exhaustive_table;mean"
             "control;seconds" "control;time_ratio" "control;drift;median"
             "control;control_table;each_point" "control;adaptive_table_on_control;grid;worst"
             "control;floor;meets_regret_goals" "control;pooled_replay;measurement_ratio"
             "control;pooled_replay;table;worst_regret"
             "control;pooled_replay;exhaustive_table;worst_regret")
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
# The control (--control): a second exhaustive sweep of every pair, each exhaustive table judged on
# the other's timings, the adaptive one on the control's; the floor is the larger of the two
# exhaustive tables' regrets, and meets the goals exactly when both its figures do.
string(JSON control_pairs GET "${report}" control measurements)
string(JSON exhaustive_pairs GET "${report}" exhaustive measurements)
string(JSON drift_pairs GET "${report}" control drift pairs)
if(NOT control_pairs EQUAL exhaustive_pairs OR NOT drift_pairs EQUAL exhaustive_pairs)
  message(FATAL_ERROR "${REPORT}: control of ${control_pairs} measurements, drift over "
                      "${drift_pairs}, the exhaustive sweep ${exhaustive_pairs}")
endif()
string(JSON floor_mean GET "${report}" control floor mean_regret)
string(JSON floor_worst GET "${report}" control floor worst_regret)
string(JSON meets GET "${report}" control floor meets_regret_goals)
foreach(table control_table exhaustive_table_on_control)
  string(JSON mean GET "${report}" control ${table} mean_regret)
  string(JSON worst GET "${report}" control ${table} worst_regret)
  if(mean GREATER floor_mean OR worst GREATER floor_worst)
    message(FATAL_ERROR "${REPORT}: ${table} ${mean} / ${worst} above the floor "
                        "${floor_mean} / ${floor_worst}")
  endif()
endforeach()
if(floor_mean GREATER 0.01 OR floor_worst GREATER 0.03)
  set(want OFF)
else()
  set(want ON)
endif()
if(NOT meets STREQUAL want)
  message(FATAL_ERROR "${REPORT}: floor ${floor_mean} / ${floor_worst}, meets_regret_goals ${meets}")
endif()
# The adaptive table (on the first sweep's timings, as the goals judge it) is within the floor
# exactly when neither of its figures is above the floor's.
string(JSON within GET "${report}" control floor adaptive_within_floor)
string(JSON ad_mean GET "${report}" adaptive_table mean_regret)
string(JSON ad_worst GET "${report}" adaptive_table worst_regret)
if(ad_mean GREATER floor_mean OR ad_worst GREATER floor_worst)
  set(want OFF)
else()
  set(want ON)
endif()
if(NOT within STREQUAL want)
  message(FATAL_ERROR "${REPORT}: adaptive ${ad_mean} / ${ad_worst}, floor ${floor_mean} / "
                      "${floor_worst}, adaptive_within_floor ${within}")
endif()
# The search replayed on the pooled sweeps measures part of the plan, and its table judged on the
# pooled timings lists every point.
string(JSON pooled_pairs GET "${report}" control pooled_replay measurements)
string(JSON pooled_points LENGTH "${report}" control pooled_replay table each_point)
if(pooled_pairs LESS 1 OR pooled_pairs GREATER exhaustive_pairs OR NOT pooled_points EQUAL 6)
  message(FATAL_ERROR "${REPORT}: the pooled replay measures ${pooled_pairs} of "
                      "${exhaustive_pairs}, its table lists ${pooled_points} points")
endif()
string(JSON n LENGTH "${report}" control control_table each_point)
math(EXPR last "${n} - 1")
foreach(k RANGE ${last})
  string(JSON basis GET "${report}" control control_table each_point ${k} basis)
  if(NOT basis STREQUAL "measured")
    message(FATAL_ERROR "${REPORT}: the control table's point ${k} is ${basis}")
  endif()
endforeach()
message("search_check.json holds every figure")
