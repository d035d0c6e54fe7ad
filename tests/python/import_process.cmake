# Where the Python bridge imports a module (tests/python/import_witness.py logs each import with
# its parent's executable): verify and plugin check import it once in the declaration probe and
# once in their worker, both children of attn-tune, and never in attn-tune's own process.
# -DEXE=attn-tune -DPYTHONPATH=tests/python -DWORK=folder
cmake_minimum_required(VERSION 3.20)
file(REMOVE_RECURSE ${WORK})
file(MAKE_DIRECTORY ${WORK})
set(ENV{PYTHONPATH} ${PYTHONPATH})
get_filename_component(attn_tune ${EXE} NAME)
foreach(command verify check)
  set(log ${WORK}/${command}.log)
  set(ENV{ATTN_TEST_IMPORT_LOG} ${log})
  if(command STREQUAL "verify")
    set(args verify --kernels python:import_witness --intensity quick --families decode_v1
             --dtypes fp32 --threads 1)
    set(expect " 0 failed, 0 skipped")
  else()
    set(args plugin check python:import_witness --threads 1)
    set(expect "every family passed its tiny case")
  endif()
  execute_process(COMMAND ${EXE} ${args} RESULT_VARIABLE rc OUTPUT_VARIABLE out
                  ERROR_VARIABLE err)
  message("${command}: exit ${rc}\n${out}${err}")
  if(NOT rc EQUAL 0 OR NOT "${out}${err}" MATCHES "${expect}")
    message(FATAL_ERROR "${command} through python:import_witness did not pass")
  endif()
  file(STRINGS ${log} imports)
  message("${command}: imports (pid, parent): ${imports}")
  list(LENGTH imports n)
  if(NOT n EQUAL 2)
    message(FATAL_ERROR "${command} imported the module ${n} times; expected 2 (the declaration "
                        "probe, then the worker)")
  endif()
  foreach(line IN LISTS imports)
    if(NOT line MATCHES " ${attn_tune}$")
      message(FATAL_ERROR "${command} imported the module in a process whose parent is not "
                          "${attn_tune} (attn-tune's own process?): ${line}")
    endif()
  endforeach()
endforeach()
