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
