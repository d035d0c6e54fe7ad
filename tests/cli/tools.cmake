# The speed tools' exit codes where no GPU is needed (tools/tool_exit.h): a bad flag is one line
# and 2, a device that is not there (index 99, absent on any machine) one line and 3, and --help
# lists the codes. A configuration that fails validation ends in 1; that needs a GPU and a wrong
# kernel, so it is not tested here.
function(attn_tool_test tool name exit regex)
  string(REPLACE ";" "|" joined "${ARGN}")
  add_test(NAME tools.${tool}.${name}
           COMMAND ${CMAKE_COMMAND} -DEXE=$<TARGET_FILE:${tool}> "-DARGS=${joined}"
                   -DEXIT=${exit} "-DREGEX=${regex}"
                   -DWORKDIR=${CMAKE_CURRENT_BINARY_DIR}/cli_work/tools
                   -P ${CMAKE_CURRENT_SOURCE_DIR}/cli/expect.cmake)
  set_tests_properties(tools.${tool}.${name} PROPERTIES LABELS "cli")
endfunction()

foreach(tool attn-cuda-bandwidth attn-cuda-prefill-speed)
  if(TARGET ${tool})
    attn_tool_test(${tool} bad_flag 2 "^${tool}: error: [^\n]*--bogus" --bogus)
    attn_tool_test(${tool} no_device 3 "^${tool}: device unavailable: [^\n]+\n$" --device 99)
    attn_tool_test(${tool} help 0 "Exit codes: 0 [^\n]*; 1 a configuration failed validation"
                   --help)
  endif()
endforeach()
# A cache dtype it does not know is a usage error before any device is opened.
if(TARGET attn-cuda-bandwidth)
  attn_tool_test(attn-cuda-bandwidth bad_kv_dtype 2
                 "^attn-cuda-bandwidth: error: [^\n]*fp9[^\n]*\n$" --kv-dtype fp9)
endif()
