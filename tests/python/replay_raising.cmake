# replay with Python kernels that raise (tests/python/raising_kernels.py) on a tiny decode file
# without out (tests/python/tiny_replay.py): each raising configuration is an ERROR line and the
# replay fails with exit 1, as verify does, not exit 4 (attn-tune's own error). attn-tune's own
# PyTorch kernels pass the same file (exit 0), so the 1 is the kernels' exception alone.
# -DEXE=attn-tune -DPYTHON=the bridge's interpreter -DPYTHONPATH=tests/python -DWORK=folder
cmake_minimum_required(VERSION 3.20)
file(REMOVE_RECURSE ${WORK})
file(MAKE_DIRECTORY ${WORK})
set(file ${WORK}/tiny_decode.safetensors)
execute_process(COMMAND ${PYTHON} ${PYTHONPATH}/tiny_replay.py ${file} RESULT_VARIABLE rc)
if(NOT rc EQUAL 0)
  message(FATAL_ERROR "tiny_replay.py could not write ${file}")
endif()
set(ENV{PYTHONPATH} ${PYTHONPATH})
foreach(module attn_tune_torch raising_kernels)
  execute_process(COMMAND ${EXE} replay ${file} --kernels python:${module} --threads 1
                  RESULT_VARIABLE rc OUTPUT_VARIABLE out ERROR_VARIABLE err)
  message("python:${module}: exit ${rc}\n--- stdout\n${out}--- stderr\n${err}---")
  if(module STREQUAL "attn_tune_torch")
    set(match "decode_v1\\[\\] \\(plugin attn_tune_torch\\) vs reference: MATCH")
    if(NOT rc EQUAL 0 OR NOT "${out}${err}" MATCHES "${match}")
      message(FATAL_ERROR "attn_tune_torch does not pass the tiny replay file (exit ${rc})")
    endif()
  elseif(NOT rc EQUAL 1)
    message(FATAL_ERROR "replay with kernels that raise: expected exit 1, got ${rc}")
  elseif(NOT "${out}${err}" MATCHES
         "decode_v1\\[\\] \\(plugin raising-kernels\\): ERROR: [^\n]*ValueError: block table entry 7")
    message(FATAL_ERROR "replay with kernels that raise printed no ERROR line naming the exception")
  endif()
endforeach()
