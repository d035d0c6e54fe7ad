# A pointer-keyed kernel's verify dumps replay to its failure (tests/python/pointer_cache.py):
# the dump holds the rewritten inputs and says so in its metadata; replay with the same kernel
# makes the second call too and names what it looks like; a correct kernel passes the dump, and
# the answer in the file (the stale one) is still judged wrong.
# -DEXE=attn-tune -DDUMPS=folder (PYTHONPATH from the test's environment)
cmake_minimum_required(VERSION 3.20)
file(REMOVE_RECURSE ${DUMPS})
execute_process(COMMAND ${EXE} verify --kernels python:pointer_cache --intensity quick --threads 1
                        --dtypes fp32 --kv-dtypes auto --families decode_v1 --dump-failures ${DUMPS}
                RESULT_VARIABLE rc OUTPUT_VARIABLE out ERROR_VARIABLE err TIMEOUT 300)
if(NOT rc EQUAL 1)
  message(FATAL_ERROR "verify exit ${rc}, expected 1\n${out}\n${err}")
endif()
file(GLOB dumps ${DUMPS}/*.safetensors)
list(LENGTH dumps n)
if(n EQUAL 0)
  message(FATAL_ERROR "verify wrote no dump\n${out}\n${err}")
endif()
list(GET dumps 0 dump)
file(STRINGS ${dump} said REGEX "attn_tune_rewritten_call" LIMIT_INPUT 65536)
if(said STREQUAL "")
  message(FATAL_ERROR "${dump} does not say it is a rewritten call's")
endif()
execute_process(COMMAND ${EXE} replay ${dump} --kernels python:pointer_cache
                RESULT_VARIABLE rc OUTPUT_VARIABLE out ERROR_VARIABLE err TIMEOUT 120)
if(NOT rc EQUAL 1 OR NOT out MATCHES
   "\\(plugin pointer-cache\\) vs reference: MISMATCH[^\n]*\n(  out[^\n]*\n)*  looks like: after the query and the K/V cache were rewritten in place")
  message(FATAL_ERROR "replay with the kernel: exit ${rc}, expected 1 and its cause\n${out}\n${err}")
endif()
execute_process(COMMAND ${EXE} replay ${dump} --kernels python:attn_tune_torch
                RESULT_VARIABLE rc OUTPUT_VARIABLE out ERROR_VARIABLE err TIMEOUT 120)
if(NOT rc EQUAL 1 OR out MATCHES "attn_tune_torch\\) vs reference: MISMATCH" OR
   NOT out MATCHES "attn_tune_torch\\) vs reference: MATCH" OR
   NOT out MATCHES "file out vs reference: MISMATCH")
  message(FATAL_ERROR "replay with a correct kernel: exit ${rc}\n${out}\n${err}")
endif()
# Passed: its dumps (about 170 MB) go; a failing run stops above and keeps them.
file(REMOVE_RECURSE ${DUMPS})
