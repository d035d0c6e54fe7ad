# verify through a seed-shaped dispatch module (tests/python/ex_engine) with the seed's two
# fallback defects: it must exit 1, and its output must name both defects in words: prefill does
# not read the KV cache (the query attends to itself), decode ignores the window and the softcap.
# -DEXE=attn-tune -DMODULE=python:... -DPYTHONPATH=folder
cmake_minimum_required(VERSION 3.20)
set(ENV{PYTHONPATH} ${PYTHONPATH})
execute_process(COMMAND ${EXE} verify --kernels ${MODULE} --intensity quick --threads 1
                RESULT_VARIABLE rc OUTPUT_VARIABLE out ERROR_VARIABLE err)
message("exit ${rc}\n${out}${err}")
if(NOT rc EQUAL 1)
  message(FATAL_ERROR "expected exit 1, got ${rc}")
endif()
string(REPLACE ";" "," flat "${out}")
# The summary names each defect, per family.
foreach(want
    "prefill\\[\\]: [0-9]+ failed\n[^\n]*the KV cache is not read"
    "decode_v1\\[\\]: [0-9]+ failed\n"
    "[0-9]+  the sliding window is ignored"
    "[0-9]+  the softcap is ignored"
    "[0-9]+  the sliding window and the softcap are ignored")
  if(NOT flat MATCHES "${want}")
    message(FATAL_ERROR "the output does not say '${want}'")
  endif()
endforeach()
# Every failing decode case has a window or a softcap, or an empty context (torch.cat of no
# blocks raises in the seed's fallback: an error line with the Python frames).
string(REGEX MATCHALL "FAIL [^ ]+ decode_v1\\[\\][^\n]*" fails "${flat}")
foreach(line IN LISTS fails)
  if(NOT line MATCHES "win=[0-9]|softcap=[1-9]|RuntimeError: .*attn_dispatch.py:[0-9]+ in dispatch_decode")
    message(FATAL_ERROR "a decode case without a window, softcap or empty context failed: ${line}")
  endif()
endforeach()
# The module's logging is printed once per message, not once per call.
string(REGEX MATCHALL "using the PyTorch fallback \\(slow\\)" warnings "${err}")
list(LENGTH warnings nw)
if(nw GREATER 4)
  message(FATAL_ERROR "the module's warning was printed ${nw} times")
endif()
