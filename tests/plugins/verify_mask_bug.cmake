# verify through a plugin that forgets window_left: it must exit 1 with failures only in the
# cases whose left window cuts keys off (a failure line describes its problem, "win=L,R"), and
# each dumped failure must replay as the same mismatch.
# -DEXE=attn-tune -DPLUGIN=the buggy plugin -DGOOD_PLUGIN=the CPU example -DWORK=folder.
cmake_minimum_required(VERSION 3.20)
file(REMOVE_RECURSE ${WORK})
file(MAKE_DIRECTORY ${WORK})
execute_process(COMMAND ${EXE} verify --kernels ${PLUGIN} --device cpu --intensity quick
                        --threads 2 --dtypes fp32 --dump-failures ${WORK}/dumps
                RESULT_VARIABLE rc OUTPUT_VARIABLE out ERROR_VARIABLE err)
message("exit ${rc}\n${out}${err}")
if(NOT rc EQUAL 1)
  message(FATAL_ERROR "expected exit 1, got ${rc}")
endif()
string(REPLACE ";" "," flat "${out}") # a CMake list must not see the lines' semicolons
string(REGEX MATCHALL "FAIL [^\n]*" fails "${flat}")
list(LENGTH fails n)
if(n EQUAL 0)
  message(FATAL_ERROR "no failure was reported")
endif()
set(windows_seen "")
foreach(line IN LISTS fails)
  # verify's left windows: 0, 7, 40, 100, 511 cut keys off; 100000 is longer than any case.
  if(NOT line MATCHES " win=(0|7|40|100|511),")
    message(FATAL_ERROR "a case without an effective left window failed: ${line}")
  endif()
  list(APPEND windows_seen ${CMAKE_MATCH_1})
endforeach()
foreach(w 0 7 40 100)
  if(NOT w IN_LIST windows_seen)
    message(FATAL_ERROR "no case with window_left=${w} failed")
  endif()
endforeach()
file(GLOB dumps ${WORK}/dumps/*.safetensors)
list(LENGTH dumps nd)
if(NOT nd EQUAL n)
  message(FATAL_ERROR "${n} failures but ${nd} dump files")
endif()
list(GET dumps 0 first)
# The file holds the plugin's wrong answer: replay judges it a mismatch ...
execute_process(COMMAND ${EXE} replay ${first} RESULT_VARIABLE rc OUTPUT_VARIABLE out
                ERROR_VARIABLE err)
message("replay: exit ${rc}\n${out}${err}")
if(NOT rc EQUAL 1 OR NOT out MATCHES "file out vs reference: MISMATCH")
  message(FATAL_ERROR "the dump did not replay as a mismatch")
endif()
# ... and through the buggy plugin the mismatch comes back, through the good one it does not.
execute_process(COMMAND ${EXE} replay ${first} --kernels ${PLUGIN} --threads 2
                RESULT_VARIABLE rc OUTPUT_VARIABLE out ERROR_VARIABLE err)
message("replay --kernels buggy: exit ${rc}\n${out}${err}")
if(NOT out MATCHES "plugin cpu-example-mask-bug\\) vs reference: MISMATCH")
  message(FATAL_ERROR "the buggy plugin did not reproduce the mismatch")
endif()
execute_process(COMMAND ${EXE} replay ${first} --kernels ${GOOD_PLUGIN} --threads 2
                RESULT_VARIABLE rc OUTPUT_VARIABLE out ERROR_VARIABLE err)
message("replay --kernels good: exit ${rc}\n${out}${err}")
if(out MATCHES "plugin cpu-example\\) vs reference: MISMATCH" OR
   NOT out MATCHES "plugin cpu-example\\) vs reference: MATCH")
  message(FATAL_ERROR "the example plugin should match the reference on the dumped call")
endif()
# Passed: the dumps (about 600 MB, more than anything else a test leaves) go, so a CI run's disk
# stays small; a failing run stops above and keeps them to look at.
file(REMOVE_RECURSE ${WORK}/dumps)
