# A small sweep through the Python bridge (tests/python/bridge_profile.json, python:attn_tune_torch)
# writes a threshold table whose provenance names the Python module and the SHA-256 of its sources,
# and `table show` says so. -DEXE=attn-tune -DPROFILE=... -DWORK=folder
# Other kernel sets (tests/engines/): -DMODULE= (default attn_tune_torch), -DTHREADS= (default 1),
# -DKEYS=regex that the first decode point's best v1 and v2 configuration keys must match.
cmake_minimum_required(VERSION 3.20)
if(NOT MODULE)
  set(MODULE attn_tune_torch)
endif()
if(NOT THREADS)
  set(THREADS 1)
endif()
file(REMOVE_RECURSE ${WORK})
execute_process(COMMAND ${EXE} sweep --kernels python:${MODULE} --profile ${PROFILE}
                        --threads ${THREADS} --quiet --out ${WORK}
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
string(JSON failed GET "${table}" measurement_counts failed)
if(NOT bridge STREQUAL "python" OR NOT module STREQUAL "${MODULE}" OR
   NOT sha MATCHES "^[0-9a-f]+$" OR NOT timed GREATER 0 OR NOT failed EQUAL 0)
  message(FATAL_ERROR "provenance: bridge=${bridge} module=${module} sha=${sha} timed=${timed} "
                      "failed=${failed}")
endif()
if(KEYS)
  string(JSON v1 GET "${table}" decode 0 measured 0 v1 config key)
  string(JSON v2 GET "${table}" decode 0 measured 0 v2 config key)
  if(NOT v1 MATCHES "${KEYS}" OR NOT v2 MATCHES "${KEYS}")
    message(FATAL_ERROR "configuration keys ${v1} and ${v2} do not match ${KEYS}")
  endif()
endif()
execute_process(COMMAND ${EXE} table show ${WORK}/threshold_table.json
                RESULT_VARIABLE rc OUTPUT_VARIABLE out ERROR_VARIABLE err)
message("${out}${err}")
if(NOT rc EQUAL 0 OR NOT out MATCHES "kernels:  Python kernels [^\n]*\\(python:${MODULE}[,)]")
  message(FATAL_ERROR "table show does not name the Python kernels")
endif()
# The files that sha256 is over, named in the provenance and by table show.
string(JSON nfiles GET "${table}" provenance kernels source_file_count)
string(JSON first GET "${table}" provenance kernels source_files 0)
if(NOT nfiles GREATER 0 OR NOT first MATCHES "\\.py$" OR
   NOT out MATCHES "sources sha256 [0-9a-f]+ over ${nfiles} files?: ${first}")
  message(FATAL_ERROR "the provenance names ${nfiles} source files (the first '${first}'), and "
                      "table show does not say so")
endif()
