# A sweep refused before its first line leaves no output folder it made (one holding nothing but
# its lock would look like a sweep to resume): -DEXE= -DPLUGIN= (a host-memory plugin) -DWORK=.
file(REMOVE_RECURSE "${WORK}")
# A host-memory plugin on a GPU: refused up front (exit 2); a device that is not there: exit 3.
foreach(case "2;--kernels;${PLUGIN};--device;cuda:0" "3;--device;cuda:7")
  list(POP_FRONT case want)
  execute_process(COMMAND "${EXE}" sweep --profile quick --quiet --out "${WORK}/out" ${case}
                  RESULT_VARIABLE rc ERROR_VARIABLE err)
  message("sweep ${case}: exit ${rc}, stderr: ${err}")
  if(NOT rc EQUAL want)
    message(FATAL_ERROR "expected exit ${want}")
  endif()
  if(EXISTS "${WORK}/out")
    message(FATAL_ERROR "the refused sweep left ${WORK}/out behind")
  endif()
endforeach()
# A folder that was there before is the user's: it stays.
file(MAKE_DIRECTORY "${WORK}/mine")
execute_process(COMMAND "${EXE}" sweep --profile quick --quiet --device cuda:7 --out "${WORK}/mine"
                RESULT_VARIABLE rc)
if(NOT IS_DIRECTORY "${WORK}/mine")
  message(FATAL_ERROR "a folder the user made was removed")
endif()
# A device another sweep holds, with --no-wait: exit 3, and no folder with a header-only results
# file that the same command run again would take for a sweep to resume. The lock is held with
# flock(1) on a private lock folder, as a running sweep holds it.
find_program(FLOCK flock)
if(FLOCK)
  set(locks "${WORK}/locks")
  file(MAKE_DIRECTORY "${locks}")
  cmake_host_system_information(RESULT host QUERY HOSTNAME)
  string(REGEX REPLACE "[^A-Za-z0-9._-]" "_" host "${host}")
  set(ENV{ATTN_TUNE_LOCK_DIR} "${locks}")
  execute_process(COMMAND "${FLOCK}" "${locks}/attn-tune-device-cpu-${host}.lock"
                          "${EXE}" sweep --profile quick --quiet --device cpu --no-wait
                          --out "${WORK}/busy"
                  RESULT_VARIABLE rc ERROR_VARIABLE err)
  message("sweep --no-wait on a held device: exit ${rc}, stderr: ${err}")
  if(NOT rc EQUAL 3 OR NOT err MATCHES "is timing on this device")
    message(FATAL_ERROR "expected exit 3 for a device another process holds")
  endif()
  if(EXISTS "${WORK}/busy")
    message(FATAL_ERROR "the sweep refused a busy device left ${WORK}/busy behind")
  endif()
  # In a folder that was there before, the header it wrote stays; a new sweep starts over it.
  file(MAKE_DIRECTORY "${WORK}/kept")
  execute_process(COMMAND "${FLOCK}" "${locks}/attn-tune-device-cpu-${host}.lock"
                          "${EXE}" sweep --profile quick --quiet --device cpu --no-wait
                          --out "${WORK}/kept" RESULT_VARIABLE rc)
  execute_process(COMMAND "${EXE}" sweep --profile quick --quiet --device cpu --threads 1
                          --shard 0/40 --out "${WORK}/kept"
                  RESULT_VARIABLE rc ERROR_VARIABLE err)
  if(NOT rc EQUAL 0)
    message(FATAL_ERROR "a header-only results file refused a new sweep: ${err}")
  endif()
endif()
