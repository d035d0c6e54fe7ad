# Every shell script under scripts/ (*.sh, *.sbatch, at any depth) and .ci/run must pass
# shellcheck; -x follows what they source, from the repository root. Skipped (77) where
# shellcheck is not installed (scripts/install-deps.sh installs it). The list is globbed when
# CMake configures, and again when a script is added or removed.
file(GLOB_RECURSE ATTN_SHELL_SCRIPTS CONFIGURE_DEPENDS RELATIVE ${PROJECT_SOURCE_DIR}
     ${PROJECT_SOURCE_DIR}/scripts/*.sh ${PROJECT_SOURCE_DIR}/scripts/*.sbatch)
if(EXISTS ${PROJECT_SOURCE_DIR}/.ci/run)
  list(APPEND ATTN_SHELL_SCRIPTS .ci/run)
endif()
list(SORT ATTN_SHELL_SCRIPTS)
# A shell runs it: `cmake -P` cannot exit with 77 before CMake 3.29.
add_test(NAME scripts.shellcheck
         COMMAND sh -c "command -v shellcheck >/dev/null 2>&1 || { echo 'shellcheck is not installed (scripts/install-deps.sh installs it): skipped'; exit 77; }; exec shellcheck -x \"$@\""
                 shellcheck ${ATTN_SHELL_SCRIPTS}
         WORKING_DIRECTORY ${PROJECT_SOURCE_DIR})
set_tests_properties(scripts.shellcheck PROPERTIES LABELS "unit" SKIP_RETURN_CODE 77)
