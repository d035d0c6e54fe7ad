# A small sweep through the Python bridge (tests/python/bridge_profile.json, python:attn_tune_torch)
# writes a threshold table whose provenance names the Python module and the SHA-256 of its sources,
# and `table show` says so. -DEXE=attn-tune -DPROFILE=... -DWORK=folder
cmake_minimum_required(VERSION 3.20)
file(REMOVE_RECURSE ${WORK})
execute_process(COMMAND ${EXE} sweep --kernels python:attn_tune_torch --profile ${PROFILE}
                        --threads 1 --quiet --out ${WORK}
                RESULT_VARIABLE rc OUTPUT_VARIABLE out ERROR_VARIABLE err)
message("exit ${rc}\n${out}${err}")
if(NOT rc EQUAL 0 OR NOT EXISTS ${WORK}/threshold_table.json)
  message(FATAL_ERROR "the sweep did not write a table (exit ${rc})")
endif()
file(READ ${WORK}/threshold_table.json table)
string(JSON bridge GET "${table}" provenance kernels bridge)
string(JSON module GET "${table}" provenance kernels module)
string(JSON sha GET "${table}" provenance kernels library_sha256)
string(JSON timed GET "${table}" measurement_counts ok)
if(NOT bridge STREQUAL "python" OR NOT module STREQUAL "attn_tune_torch" OR
   NOT sha MATCHES "^[0-9a-f]+$" OR NOT timed GREATER 0)
  message(FATAL_ERROR "provenance: bridge=${bridge} module=${module} sha=${sha} timed=${timed}")
endif()
execute_process(COMMAND ${EXE} table show ${WORK}/threshold_table.json
                RESULT_VARIABLE rc OUTPUT_VARIABLE out ERROR_VARIABLE err)
message("${out}${err}")
if(NOT rc EQUAL 0 OR NOT out MATCHES "kernels:  Python kernels attn_tune_torch [^\n]*python:attn_tune_torch")
  message(FATAL_ERROR "table show does not name the Python kernels")
endif()
