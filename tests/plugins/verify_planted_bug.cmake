# verify through a plugin with a planted bug (plugins/split_kv_plugin.c): it must exit 1, its
# summary ("what the failures look like") must match REGEX, the diagnosis expected for that bug,
# and explain every failure (no "none of the usual mistakes explains"); ABSENT, when given, must
# not be in the summary (a configuration that must pass).
# -DEXE=attn-tune -DPLUGIN=the buggy plugin -DREGEX=... [-DABSENT=...] [-DFAMILIES=decode_v2]
# [-DKV_DTYPES=fp8_e4m3,fp8_e5m2] [-DWORK=folder]
cmake_minimum_required(VERSION 3.20)
if(NOT WORK)
  set(WORK ".")
endif()
file(MAKE_DIRECTORY ${WORK})
set(families "")
if(FAMILIES)
  set(families --families ${FAMILIES})
endif()
set(kv_dtypes "")
if(KV_DTYPES)
  set(kv_dtypes --kv-dtypes ${KV_DTYPES})
endif()
execute_process(COMMAND ${EXE} verify --kernels ${PLUGIN} --device cpu --threads 2
                        --intensity quick --dtypes fp32 ${families} ${kv_dtypes}
                WORKING_DIRECTORY ${WORK}
                RESULT_VARIABLE rc OUTPUT_VARIABLE out ERROR_VARIABLE err)
message("exit ${rc}\n--- stdout\n${out}--- stderr\n${err}---")
if(NOT rc EQUAL 1)
  message(FATAL_ERROR "expected exit 1 (the planted bug found), got ${rc}")
endif()
string(FIND "${out}" "what the failures look like:" at)
if(at LESS 0)
  message(FATAL_ERROR "no summary of the failures")
endif()
string(SUBSTRING "${out}" ${at} -1 summary)
if(NOT summary MATCHES "${REGEX}")
  message(FATAL_ERROR "the summary does not name the diagnosis: ${REGEX}")
endif()
if(summary MATCHES "none of the usual mistakes explains")
  message(FATAL_ERROR "some failures are left unexplained")
endif()
if(ABSENT AND summary MATCHES "${ABSENT}")
  message(FATAL_ERROR "the summary names what must pass: ${ABSENT}")
endif()
