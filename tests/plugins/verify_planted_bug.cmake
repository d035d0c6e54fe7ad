# verify through a plugin with a planted bug (plugins/split_kv_plugin.c): it must exit 1, and
# its output (the FAIL lines and the summary "what the failures look like") must match REGEX,
# the diagnosis expected for that bug.
# -DEXE=attn-tune -DPLUGIN=the buggy plugin -DREGEX=... [-DFAMILIES=decode_v2] [-DWORK=folder]
cmake_minimum_required(VERSION 3.20)
if(NOT WORK)
  set(WORK ".")
endif()
file(MAKE_DIRECTORY ${WORK})
set(families "")
if(FAMILIES)
  set(families --families ${FAMILIES})
endif()
execute_process(COMMAND ${EXE} verify --kernels ${PLUGIN} --device cpu --threads 2
                        --intensity quick --dtypes fp32 ${families}
                WORKING_DIRECTORY ${WORK}
                RESULT_VARIABLE rc OUTPUT_VARIABLE out ERROR_VARIABLE err)
message("exit ${rc}\n--- stdout\n${out}--- stderr\n${err}---")
if(NOT rc EQUAL 1)
  message(FATAL_ERROR "expected exit 1 (the planted bug found), got ${rc}")
endif()
if(NOT "${out}${err}" MATCHES "${REGEX}")
  message(FATAL_ERROR "the output does not match: ${REGEX}")
endif()
