# verify --intensity quick on the CPU, once with the built-in kernels and once through the CPU
# example plugin: both pass, and the passed/failed/skipped counts and the checked cases agree,
# fp8 caches included (plugin ABI 4 carries them).
# -DEXE=attn-tune -DPLUGIN=the example plugin.
cmake_minimum_required(VERSION 3.20)
foreach(run builtin plugin)
  set(extra "")
  if(run STREQUAL "plugin")
    list(APPEND extra --kernels ${PLUGIN})
  endif()
  execute_process(COMMAND ${EXE} verify --device cpu --intensity quick --threads 2 ${extra}
                  RESULT_VARIABLE rc_${run} OUTPUT_VARIABLE out_${run} ERROR_VARIABLE err_${run})
  message("${run}: exit ${rc_${run}}\n${out_${run}}${err_${run}}")
  if(NOT rc_${run} EQUAL 0)
    message(FATAL_ERROR "verify with the ${run} kernels exited ${rc_${run}}")
  endif()
  string(REGEX MATCH "[0-9]+ passed, [0-9]+ failed, [0-9]+ skipped" counts_${run} "${out_${run}}")
endforeach()
if(NOT counts_builtin OR NOT counts_builtin STREQUAL counts_plugin)
  message(FATAL_ERROR "built-in: '${counts_builtin}', plugin: '${counts_plugin}'")
endif()
if(NOT "${out_plugin}${err_plugin}" MATCHES "with plugin cpu-example")
  message(FATAL_ERROR "verify did not say it checked the plugin")
endif()
