# Precompiled headers. Most translation units of attn-tune include the same heavy headers
# (nlohmann/json, the standard containers, CLI11 in src/cli/, GoogleTest in tests/), and
# parsing them again for every file was about half of a clean build's compile time. Each group
# of targets with the same compile flags parses them once: the libraries of src/ share
# attn_io's, the CLI (and main.cpp) attn_cli's, the unit tests attn_test_pch's. GCC checks that
# a precompiled header matches the flags of each file that uses it and silently parses the
# headers again when it does not, so this only ever changes build time.
option(ATTN_PCH "Precompile the headers most files include (faster clean builds)" ON)

set(ATTN_PCH_COMMON <algorithm> <chrono> <cstdint> <cstdio> <filesystem> <functional> <map>
                    <memory> <optional> <set> <sstream> <stdexcept> <string> <vector>
                    <nlohmann/json.hpp>)

# attn_pch(TARGET HEADERS...): TARGET precompiles HEADERS for itself.
# attn_pch_reuse(FROM TARGET...): each TARGET uses FROM's precompiled header.
function(attn_pch target)
  if(ATTN_PCH)
    target_precompile_headers(${target} PRIVATE ${ARGN})
  endif()
endfunction()
function(attn_pch_reuse from)
  if(ATTN_PCH)
    foreach(t ${ARGN})
      target_precompile_headers(${t} REUSE_FROM ${from})
    endforeach()
  endif()
endfunction()
