# A module whose import hangs in the worker only (tests/python/hang_in_worker.py: the declaration
# probe's import returns at once) gets the probe's time limit there too: with
# ATTN_TUNE_PLUGIN_PROBE_TIMEOUT=4, verify ends with exit 1 well within 15 s, saying it was
# starting the kernels, and the hung process does not outlive attn-tune.
# -DEXE=attn-tune -DPYTHONPATH=tests/python -DWORK=folder
cmake_minimum_required(VERSION 3.20)
file(REMOVE_RECURSE ${WORK})
file(MAKE_DIRECTORY ${WORK})
set(marker ${WORK}/imported)
set(ENV{PYTHONPATH} ${PYTHONPATH})
set(ENV{ATTN_TEST_HANG_MARKER} ${marker})
set(ENV{ATTN_TUNE_PLUGIN_PROBE_TIMEOUT} 4)

# Ends the hung import's process (ours: its pid is in marker.hung) if it is still there.
function(end_hung_import)
  if(EXISTS ${marker}.hung)
    file(STRINGS ${marker}.hung pid LIMIT_COUNT 1)
    if(pid MATCHES "^[0-9]+$" AND EXISTS /proc/${pid})
      execute_process(COMMAND kill -9 ${pid})
    endif()
  endif()
endfunction()

string(TIMESTAMP start %s)
# A child left holding the output pipes would keep execute_process waiting: 60 s ends that.
execute_process(COMMAND ${EXE} verify --kernels python:hang_in_worker --families decode_v1
                        --dtypes fp32 --intensity quick --threads 1
                RESULT_VARIABLE rc OUTPUT_VARIABLE out ERROR_VARIABLE err TIMEOUT 60)
string(TIMESTAMP end %s)
math(EXPR seconds "${end} - ${start}")
message("exit ${rc} after ${seconds} s\n--- stdout\n${out}--- stderr\n${err}---")
if(NOT rc EQUAL 1)
  end_hung_import()
  message(FATAL_ERROR "expected exit 1, got ${rc}")
endif()
if(NOT err MATCHES "starting the kernels")
  end_hung_import()
  message(FATAL_ERROR "the error does not say it was starting the kernels")
endif()
if(seconds GREATER 15)
  end_hung_import()
  message(FATAL_ERROR "the hung import ended the command after ${seconds} s; expected about 4")
endif()
if(NOT EXISTS ${marker} OR NOT EXISTS ${marker}.hung)
  message(FATAL_ERROR "the module was not imported twice (the probe's import, then a hung one)")
endif()

# The hung process is gone (a zombie left for init to reap counts as gone).
file(STRINGS ${marker}.hung pid LIMIT_COUNT 1)
foreach(try RANGE 20)
  set(state "")
  if(EXISTS /proc/${pid}/stat)
    file(READ /proc/${pid}/stat stat)
    string(REGEX REPLACE "^.*\\) ([A-Za-z]).*$" "\\1" state "${stat}")
  endif()
  if(state STREQUAL "" OR state STREQUAL "Z" OR state STREQUAL "X")
    return()
  endif()
  execute_process(COMMAND ${CMAKE_COMMAND} -E sleep 0.1)
endforeach()
end_hung_import()
message(FATAL_ERROR "the hung import (pid ${pid}, state ${state}) outlived attn-tune")
