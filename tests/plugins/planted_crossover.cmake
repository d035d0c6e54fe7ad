# Sweeps the planted-cost plugin (SPLIT_SPIN) over PROFILE and checks that `table lookup` answers
# decode_v1 at every grid length below the planted crossover (1200 keys at batch 1) and decode_v2
# at every one above it.
# -DEXE=attn-tune -DPLUGIN=the spin plugin -DPROFILE=profile.json -DWORK=folder
cmake_minimum_required(VERSION 3.20)
file(REMOVE_RECURSE ${WORK})
file(MAKE_DIRECTORY ${WORK})
execute_process(COMMAND ${EXE} sweep --kernels ${PLUGIN} --profile ${PROFILE} --threads 1 --quiet
                        --no-report --out ${WORK}/out
                RESULT_VARIABLE rc OUTPUT_VARIABLE out ERROR_VARIABLE err)
message("sweep: exit ${rc}\n${out}${err}")
if(NOT rc EQUAL 0)
  message(FATAL_ERROR "the sweep exited ${rc}")
endif()
foreach(len 256 384 512 768 2048 2560 3072 4096)
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
