# Regenerates build_info.h on every build with the current git hash (configure_file rewrites the
# file only when its text changes, so an unchanged hash rebuilds nothing). Called by the
# `attn_build_info` target with -DSRC_DIR, -DBIN_DIR and -DVERSION.
execute_process(COMMAND git rev-parse --short=12 HEAD WORKING_DIRECTORY ${SRC_DIR}
                OUTPUT_VARIABLE ATTN_GIT_HASH OUTPUT_STRIP_TRAILING_WHITESPACE ERROR_QUIET
                RESULT_VARIABLE rc)
if(NOT rc EQUAL 0 OR NOT ATTN_GIT_HASH)
  set(ATTN_GIT_HASH "unknown")
else()
  execute_process(COMMAND git status --porcelain --untracked-files=no WORKING_DIRECTORY ${SRC_DIR}
                  OUTPUT_VARIABLE dirty OUTPUT_STRIP_TRAILING_WHITESPACE ERROR_QUIET)
  if(dirty)
    set(ATTN_GIT_HASH "${ATTN_GIT_HASH}-dirty")
  endif()
endif()
set(PROJECT_VERSION ${VERSION})
set(CMAKE_CURRENT_SOURCE_DIR ${SRC_DIR})
configure_file(${SRC_DIR}/cmake/build_info.h.in ${BIN_DIR}/generated/build_info.h @ONLY)
