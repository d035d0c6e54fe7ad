# A sweep with batches of mixed lengths (a profile's context_lens and length_mix, and with TRACE
# a traffic trace) writes a version 4 table with batches, batch rules and traffic regret (held
# out included) that passes the schema check; `table show` prints them, and `table lookup
# --seq-lens` answers from a batch rule.
#   cmake -DEXE= -DPROFILE= [-DTRACE=] -DWORK= -P traffic_sweep.cmake
file(REMOVE_RECURSE "${WORK}")
set(args sweep --device cpu --profile ${PROFILE} --threads 2 --quiet --out ${WORK})
if(TRACE)
  list(APPEND args --traffic ${TRACE} --traffic-batches 6 --hold-out 0.34)
endif()
execute_process(COMMAND ${EXE} ${args} RESULT_VARIABLE rc OUTPUT_VARIABLE out ERROR_VARIABLE err)
message("sweep exit ${rc}\n${out}${err}")
if(NOT rc EQUAL 0)
  message(FATAL_ERROR "sweep failed")
endif()
# Batches counted as `attn_tune_trace.py check` counts them: 12 with counts, on 7 lines.
string(CONCAT said "traffic .*: 12 batches \\(7 lines, 6 distinct\\); "
       "measuring 6 of them on 1 shapes, 2 held out")
if(TRACE AND NOT out MATCHES "${said}")
  message(FATAL_ERROR "the sweep does not say what it took from the trace")
endif()
file(READ "${WORK}/threshold_table.json" table)
string(JSON version GET "${table}" version)
string(JSON n_batches LENGTH "${table}" batches)
string(JSON n_rules LENGTH "${table}" batch_rules)
string(JSON held_rules GET "${table}" regret traffic held_out batch_rules batches)
string(JSON held_lookup GET "${table}" regret traffic held_out table_lookup batches)
string(JSON own GET "${table}" regret traffic sweep vllm_cpu regret)
message("version ${version}, ${n_batches} batches, ${n_rules} batch rules, held-out batches "
        "priced: ${held_rules} (batch rules), ${held_lookup} (table lookup)")
if(NOT version EQUAL 5 OR n_batches LESS 5 OR NOT n_rules EQUAL 1 OR held_rules LESS 1
   OR NOT held_rules EQUAL held_lookup)
  message(FATAL_ERROR "the table lacks its batches, batch rule or held-out traffic regret")
endif()
execute_process(COMMAND ${EXE} table show ${WORK}/threshold_table.json
                RESULT_VARIABLE rc OUTPUT_VARIABLE show ERROR_VARIABLE err)
message("${show}${err}")
if(NOT rc EQUAL 0 OR NOT show MATCHES "batch rule fp32 d=32 bs=16 kvh=2 gqa=2 \\(fitted on"
   OR NOT show MATCHES "held-out batches\n    batch rules \\(the table, whole batch\\): [0-9.]+%"
   OR NOT show MATCHES "table lookup \\(grid points, longest length\\): [0-9.]+%"
   OR NOT show MATCHES "vLLM CPU \\(the kernel set's own rule\\): [0-9.]+%")
  message(FATAL_ERROR "table show does not print the batch rule and the traffic regret")
endif()
execute_process(COMMAND ${EXE} table lookup ${WORK}/threshold_table.json --seq-lens 30,1200,45
                        --num-heads 4 --num-kv-heads 2 --head-dim 32 --block-size 16 --dtype fp32
                RESULT_VARIABLE rc OUTPUT_VARIABLE look ERROR_VARIABLE err)
message("lookup: ${look}${err}")
if(NOT rc EQUAL 0 OR NOT look MATCHES "^decode_v[12] decode_v[12]\\[[^\n]*\\(batch rule: ")
  message(FATAL_ERROR "table lookup --seq-lens does not answer from the batch rule")
endif()
if(NOT TRACE)
  # The batches' lengths are kept in the results, and the held-out draws are flagged there.
  file(READ "${WORK}/results.jsonl" results)
  if(NOT results MATCHES "\"context_lens\":\\[20,900,33,41\\]" OR NOT results MATCHES
     "\"held_out\":true")
    message(FATAL_ERROR "results.jsonl lacks the batches' lengths or their held-out flags")
  endif()
endif()
# The report's traffic view: the table of each rule's traffic regret, held out included.
file(READ "${WORK}/report.html" report)
if(NOT report MATCHES "id=\"traffic\"" OR NOT report MATCHES "held-out batches: regret"
   OR NOT report MATCHES "data-rule=\"batch_rules\"")
  message(FATAL_ERROR "the report has no traffic view")
endif()
# ... and its CSV files: every rule's traffic regret, held out included, and the batches.
execute_process(COMMAND ${EXE} report ${WORK} --format csv --out ${WORK}/csv
                RESULT_VARIABLE rc OUTPUT_VARIABLE out ERROR_VARIABLE err)
file(READ "${WORK}/csv/traffic_regret.csv" regret_csv)
file(STRINGS "${WORK}/csv/traffic_batches.csv" batch_lines)
list(LENGTH batch_lines n_lines)
math(EXPR n_batch_rows "${n_batches} + 1")
if(NOT rc EQUAL 0 OR NOT regret_csv MATCHES "\n[^,\n]*,batch_rules,held_out,[0-9.e+-]+,"
   OR NOT regret_csv MATCHES "\n[^,\n]*,table_lookup,held_out,[0-9.e+-]+,"
   OR NOT n_lines EQUAL n_batch_rows)
  message(FATAL_ERROR "report --format csv lacks the traffic regret or the batches:\n${out}${err}")
endif()
