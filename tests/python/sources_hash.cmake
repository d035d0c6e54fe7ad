# A module's sources SHA-256 covers the modules it imports from beside it: python:hashed_main's
# (tests/python/hashed_main.py, which imports hashed_helper.py) is not its file's own SHA-256, and
# changes when only the helper changes; a module that imports nothing from beside it
# (raising_kernels.py, in the same folder) has its file's own SHA-256, as sha256sum gives it.
# plugin check names the files each is over.
# -DEXE=attn-tune -DFIXTURES=tests/python -DWORK=folder
cmake_minimum_required(VERSION 3.20)
file(REMOVE_RECURSE ${WORK})
file(MAKE_DIRECTORY ${WORK})
file(COPY ${FIXTURES}/hashed_main.py ${FIXTURES}/hashed_helper.py ${FIXTURES}/raising_kernels.py
     DESTINATION ${WORK})
set(ENV{PYTHONPATH} ${WORK})

# Sets `var` to the sources sha256 that plugin check prints for python:module.
function(sources_sha256 module var)
  execute_process(COMMAND ${EXE} plugin check python:${module} --threads 1
                  RESULT_VARIABLE rc OUTPUT_VARIABLE out ERROR_VARIABLE err)
  message("python:${module}: exit ${rc}\n${out}${err}")
  if(NOT out MATCHES "Python module ${module} \\([^)]*\\), sources sha256 ([0-9a-f]+)\n  over ([^\n]*)\n")
    message(FATAL_ERROR "plugin check python:${module} printed no sources sha256 and files")
  endif()
  set(${var} ${CMAKE_MATCH_1} PARENT_SCOPE)
  set(${var}_files "${CMAKE_MATCH_2}" PARENT_SCOPE)
endfunction()

sources_sha256(hashed_main before)
if(NOT before_files STREQUAL "2 files: hashed_helper.py, hashed_main.py")
  message(FATAL_ERROR "hashed_main's sources sha256 is said to be over '${before_files}'")
endif()
file(SHA256 ${WORK}/hashed_main.py main_alone)
if(before STREQUAL main_alone)
  message(FATAL_ERROR "the sources sha256 of hashed_main is its file's alone (${before}): the "
                      "helper it imports from beside it is not covered")
endif()
file(APPEND ${WORK}/hashed_helper.py "# an edit to the helper alone\n")
sources_sha256(hashed_main after)
if(after STREQUAL before)
  message(FATAL_ERROR "an edit to hashed_helper.py left hashed_main's sources sha256 as it was "
                      "(${before})")
endif()

sources_sha256(raising_kernels alone)
if(NOT alone_files STREQUAL "1 file: raising_kernels.py")
  message(FATAL_ERROR "raising_kernels' sources sha256 is said to be over '${alone_files}'")
endif()
file(SHA256 ${WORK}/raising_kernels.py want)
if(NOT alone STREQUAL want)
  message(FATAL_ERROR "the sources sha256 of raising_kernels (it imports nothing from beside it) "
                      "is ${alone}, not its file's ${want}")
endif()
