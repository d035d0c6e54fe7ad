# Runs one attn-tune command that needs a GPU and expects exit 0 (or EXPECT_RC, with REGEX in its
# stdout or stderr when given). Where `attn-tune devices --json` lists no CUDA device, the test is
# skipped, as the gpu_*.cpp tests skip: exit 77 where CMake can set the exit code (3.29+), and
# always the line "attn-tune-gpu-test: skipped", which the test's SKIP_REGULAR_EXPRESSION matches.
# Arguments: -DEXE= -DARGS=a|b|c -DWORKDIR= [-DEXPECT_RC=] [-DREGEX=].
string(REPLACE "|" ";" args "${ARGS}")
file(MAKE_DIRECTORY "${WORKDIR}")
execute_process(COMMAND ${EXE} devices --json RESULT_VARIABLE rc OUTPUT_VARIABLE out
                ERROR_VARIABLE err)
if(NOT rc EQUAL 0 OR NOT out MATCHES "\"backend\": \"cuda\"")
  message("attn-tune-gpu-test: skipped: no CUDA device (attn-tune devices exited ${rc})")
  if(CMAKE_VERSION VERSION_GREATER_EQUAL 3.29)
    cmake_language(EXIT 77)
  endif()
  return()
endif()
execute_process(COMMAND ${EXE} ${args} WORKING_DIRECTORY "${WORKDIR}"
                RESULT_VARIABLE rc OUTPUT_VARIABLE out ERROR_VARIABLE err)
message("exit ${rc}\n--- stdout\n${out}--- stderr\n${err}---")
if(NOT DEFINED EXPECT_RC)
  set(EXPECT_RC 0)
endif()
if(NOT rc EQUAL EXPECT_RC)
  message(FATAL_ERROR "expected exit code ${EXPECT_RC}, got ${rc}")
endif()
if(DEFINED REGEX AND NOT "${out}${err}" MATCHES "${REGEX}")
  message(FATAL_ERROR "the output does not match: ${REGEX}")
endif()
