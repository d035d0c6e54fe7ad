# attn-tune started with its standard streams closed, or with a full one, and given empty names
# (tests/cli/inputs.cmake): -DEXE= -DPROFILE= -DWORK=.
# Closed: files the sweep opens (its folder's lock, results.jsonl, a worker's pipe) must not take
# fds 1 and 2 and receive what it prints. Full: a lost report is no success (exit 4, one line).
file(REMOVE_RECURSE "${WORK}")
file(MAKE_DIRECTORY "${WORK}")
set(sweep "\"${EXE}\" sweep --device cpu --profile \"${PROFILE}\" --threads 1 --no-report")
execute_process(COMMAND sh -c "${sweep} --out \"${WORK}/closed\" >&- 2>&-" RESULT_VARIABLE rc)
if(NOT rc EQUAL 0)
  message(FATAL_ERROR "the sweep with stdout and stderr closed exited ${rc}")
endif()
file(READ "${WORK}/closed/.attn-tune.lock" lock)
if(lock MATCHES "sweep")
  message(FATAL_ERROR "the sweep's text went into its lock file: ${lock}")
endif()
file(STRINGS "${WORK}/closed/results.jsonl" lines)
foreach(l IN LISTS lines)
  if(NOT l MATCHES "^{\"")
    message(FATAL_ERROR "results.jsonl holds a line that is no JSON object: ${l}")
  endif()
endforeach()
execute_process(COMMAND sh -c "\"${EXE}\" devices > /dev/full" RESULT_VARIABLE rc
                ERROR_VARIABLE err)
message("devices > /dev/full: exit ${rc}, stderr: ${err}")
if(NOT rc EQUAL 4 OR NOT err MATCHES "cannot write the standard output")
  message(FATAL_ERROR "expected exit 4 and a line naming the standard output")
endif()

# Empty names: one line naming the option, exit 2 (not the built-in kernels, not a default folder).
foreach(args "verify;--device;cpu;--kernels" "plugin;check"
             "sweep;--device;cpu;--profile;quick;--out")
  execute_process(COMMAND "${EXE}" ${args} "" RESULT_VARIABLE rc ERROR_VARIABLE err)
  message("${args} \"\": exit ${rc}, stderr: ${err}")
  string(STRIP "${err}" err)
  if(NOT rc EQUAL 2 OR NOT err MATCHES "is empty" OR err MATCHES "\n")
    message(FATAL_ERROR "expected exit 2 and one line saying the name is empty")
  endif()
endforeach()
