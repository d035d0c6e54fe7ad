# A reader that leaves early (`attn-tune sweep ... | head -c 1`, a log shipper that dies) costs
# the sweep nothing: no SIGPIPE ends it, it writes its whole results and table, and exits 0.
# A file size limit (ulimit -f) is an error the writes return, said in one line, not a signal.
#   cmake -DEXE= -DWORK= -P broken_pipe.cmake
file(REMOVE_RECURSE "${WORK}")
file(MAKE_DIRECTORY "${WORK}")
file(WRITE "${WORK}/tiny.json"
     "{\"name\": \"tiny\", \"decode\": {\"batch\": [1], \"context_len\": [64, 512],"
     " \"num_kv_heads\": [1], \"gqa_ratio\": [4], \"head_dim\": [64], \"block_size\": [16],"
     " \"dtype\": [\"fp32\"]}, \"timing\": {\"warmup\": 1, \"warmup_seconds\": 0.001,"
     " \"min_reps\": 3, \"max_reps\": 3, \"max_seconds\": 0.01}}\n")
execute_process(COMMAND "${EXE}" sweep --device cpu --profile "${WORK}/tiny.json" --threads 1
                        --no-report --out "${WORK}/out"
                COMMAND head -c 1
                RESULTS_VARIABLE codes OUTPUT_VARIABLE out ERROR_VARIABLE err)
message("exit codes ${codes}\nstderr: ${err}")
list(GET codes 0 rc)
if(NOT rc EQUAL 0)
  message(FATAL_ERROR "the sweep whose reader left exited ${rc}, not 0")
endif()
file(STRINGS "${WORK}/out/results.jsonl" lines REGEX "\"type\":\"measurement\"")
list(LENGTH lines n)
if(n EQUAL 0 OR NOT EXISTS "${WORK}/out/threshold_table.json")
  message(FATAL_ERROR "the sweep whose reader left did not finish its work (${n} lines)")
endif()
# Its progress on stderr into a closed pipe too: `2>&1 | head -c 1`.
find_program(SH sh)
if(SH)
  execute_process(COMMAND "${SH}" -c "\"$0\" sweep --device cpu --profile \"$1\" --threads 1 --no-report --out \"$2\" 2>&1 | head -c 1 >/dev/null; exit \${PIPESTATUS:-0}"
                          "${EXE}" "${WORK}/tiny.json" "${WORK}/out2"
                  RESULT_VARIABLE rc2)
  if(NOT EXISTS "${WORK}/out2/threshold_table.json")
    message(FATAL_ERROR "a sweep whose progress went to a closed pipe did not finish")
  endif()
endif()
