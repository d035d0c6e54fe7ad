# verify --intensity quick on the CPU through the CPU example plugin passes, and gives every group
# the built-in kernels got the same counts: the plugin's JUnit file against the one
# cli.verify_cpu_quick wrote for the built-in kernels (fixture verify_cpu_quick_out), compared
# testcase by testcase (configuration, group and passed/failed/skipped), fp8 caches included
# (plugin ABI 4 carries them). The built-in run is not repeated here: it was a second copy of
# cli.verify_cpu_quick.
# -DEXE=attn-tune -DPLUGIN=the example plugin -DBUILTIN_JUNIT=cli.verify_cpu_quick's verify.xml
# -DWORK=folder
cmake_minimum_required(VERSION 3.20)
file(MAKE_DIRECTORY ${WORK})
set(plugin_junit ${WORK}/plugin.xml)
file(REMOVE ${plugin_junit})
execute_process(COMMAND ${EXE} verify --device cpu --intensity quick --threads 2 --kernels ${PLUGIN}
                        --junit ${plugin_junit}
                RESULT_VARIABLE rc OUTPUT_VARIABLE out ERROR_VARIABLE err)
message("plugin: exit ${rc}\n${out}${err}")
if(NOT rc EQUAL 0)
  message(FATAL_ERROR "verify with the plugin exited ${rc}")
endif()
if(NOT "${out}${err}" MATCHES "with plugin cpu-example")
  message(FATAL_ERROR "verify did not say it checked the plugin")
endif()

# One entry per testcase: "classname name: counts", sorted.
function(junit_cases file var)
  if(NOT EXISTS ${file})
    message(FATAL_ERROR "no JUnit file ${file}")
  endif()
  file(READ ${file} xml)
  string(REGEX MATCHALL "<testcase classname=\"[^\"]*\" name=\"[^\"]*\"|<system-out>[^<]*</system-out>"
         parts "${xml}")
  set(cases "")
  set(head "")
  foreach(p IN LISTS parts)
    if(p MATCHES "^<testcase classname=\"([^\"]*)\" name=\"([^\"]*)\"")
      set(head "${CMAKE_MATCH_1} ${CMAKE_MATCH_2}")
    elseif(p MATCHES "^<system-out>([^<]*)</system-out>" AND head)
      list(APPEND cases "${head}: ${CMAKE_MATCH_1}")
      set(head "")
    endif()
  endforeach()
  list(SORT cases)
  set(${var} "${cases}" PARENT_SCOPE)
endfunction()

junit_cases(${BUILTIN_JUNIT} builtin)
junit_cases(${plugin_junit} plugin)
list(LENGTH builtin n_builtin)
list(LENGTH plugin n_plugin)
if(n_builtin EQUAL 0)
  message(FATAL_ERROR "the built-in kernels' JUnit file (${BUILTIN_JUNIT}) holds no testcase")
endif()
if(NOT builtin STREQUAL plugin)
  set(only_builtin ${builtin})
  list(REMOVE_ITEM only_builtin ${plugin})
  set(only_plugin ${plugin})
  list(REMOVE_ITEM only_plugin ${builtin})
  list(JOIN only_builtin "\n  " a)
  list(JOIN only_plugin "\n  " b)
  message(FATAL_ERROR "the groups differ (${n_builtin} built-in, ${n_plugin} plugin)\n"
                      "built-in only:\n  ${a}\nplugin only:\n  ${b}")
endif()
message("${n_plugin} groups, each with the built-in kernels' counts")
