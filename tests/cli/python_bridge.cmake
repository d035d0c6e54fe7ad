# The Python bridge (docs/python-kernels.md), when it is built and its interpreter has torch
# (one thread each: torch's thread pool only slows calls this small):
# attn-tune's own PyTorch kernels pass verify in every layout, a seed-shaped module with the seed's
# defects fails with lines that name them and passes once they are fixed, a small sweep writes a
# table that names the module, and bad modules get one line and exit 2.
if(NOT TARGET attn_tune_python)
  return()
endif()
if(NOT ATTN_TEST_TORCH) # tests/CMakeLists.txt asks the bridge's interpreter
  message(WARNING "attn-tune: ${Python3_EXECUTABLE} has no torch; the Python bridge tests are not "
                  "registered (scripts/install-deps.sh installs python3-torch)")
  return()
endif()
set(ATTN_PY_FIXTURES ${CMAKE_CURRENT_SOURCE_DIR}/python)

# The PyTorch implementation's own unit tests (a float64 reference written in the test).
add_test(NAME python.attn_tune_torch
         COMMAND ${Python3_EXECUTABLE} -m unittest test_attn_tune_torch)
set_tests_properties(python.attn_tune_torch PROPERTIES LABELS "unit;python"
                     WORKING_DIRECTORY ${PROJECT_SOURCE_DIR}/python)

function(attn_python_test name exit regex)
  attn_cli_test(NAME ${name} EXIT ${exit} REGEX "${regex}" ARGS ${ARGN})
  set_tests_properties(cli.${name} PROPERTIES LABELS "cli;python"
                       ENVIRONMENT "PYTHONPATH=${ATTN_PY_FIXTURES}")
endfunction()

attn_python_test(python_check_torch 0 "every family passed its tiny case"
                 plugin check python:attn_tune_torch --threads 1)
attn_python_test(python_verify_torch 0 " 0 failed, 0 skipped"
                 verify --kernels python:attn_tune_torch --intensity quick --threads 1)
# The other layouts, one 16-bit dtype each (CI time; the layout code is the same for both).
attn_python_test(python_verify_torch_nhd 0 " 0 failed, 0 skipped"
                 verify --kernels python:attn_tune_torch:attn_tune_kernels_nhd
                 --intensity quick --threads 1 --dtypes bf16)
attn_python_test(python_verify_torch_vllm 0 " 0 failed, 0 skipped"
                 verify --kernels python:attn_tune_torch:attn_tune_kernels_vllm
                 --intensity quick --threads 1 --dtypes fp16)
# How fp8 caches reach a Python kernel (fp8_arrival.py checks every call): this torch (1.13) has
# no float8 dtypes, so the bytes arrive as uint8; engine.vllm_cpu.fp8_float8_view checks the
# float8 view under torch 2.x.
attn_python_test(python_verify_fp8_arrival 0 "246 passed, 0 failed, 0 skipped.*fp8 caches as uint8"
                 verify --kernels python:fp8_arrival --intensity quick --threads 1
                 --kv-dtypes fp8_e4m3,fp8_e5m2)
attn_python_test(python_verify_seed_fixed 0 " 0 failed, 0 skipped"
                 verify --kernels python:ex_engine_fixed.factors.attn_dispatch --intensity quick
                 --threads 1)
# A seed-shaped module whose dispatch_prefill returns float64 for an fp16 query: the call fails
# with the dtype named (the bridge copies nothing in silence).
attn_python_test(python_seed_prefill_dtype 1
                 "dispatch_prefill returned dtype float64, the query's is float16"
                 plugin check python:seed_float64 --threads 1)
# A kernel right in every value that writes 8 bytes past out: failed, with the write named (the
# heap's slack hid it; an audit, 2026-12-06).
attn_python_test(python_verify_writes_past_out 1
                 "the kernel writes past the end of its output \\(out or lse\\): memory the caller owns; the values it wrote are right"
                 verify --kernels python:writes_past_out --intensity quick --threads 1
                 --dtypes fp32 --kv-dtypes auto)
# A bf16 output truncated instead of rounded to nearest: within the tolerance (passes), with a
# note that names the truncation (an audit, 2026-12-06, found it passed in silence).
attn_python_test(python_verify_truncated_bf16 0
                 "verify: note: cpu decode_v1\\[\\]: its 16-bit outputs are rounded toward zero in [0-9]+ of [0-9]+ passed cases"
                 verify --kernels python:truncates_bf16 --intensity quick --threads 1
                 --dtypes bf16 --kv-dtypes auto)
# A kernel that keeps state between calls (wrong one call in two): named as such, not as a cache
# or block table it does not read (an audit's plan-cache module was called "the block table is
# not followed").
attn_python_test(python_verify_stateful_kernel 1
                 "the output changes from one call of the same problem to the next"
                 verify --kernels python:stateful_kernel --intensity quick --threads 1
                 --dtypes fp32 --kv-dtypes auto)
# A kernel that answers a call whose buffers and shapes match the call before with that call's
# output (a cache keyed by data_ptr()): every fresh problem is right, so only the call verify makes
# again after rewriting the inputs in place shows it, once per configuration and case group.
attn_python_test(python_verify_pointer_cache 1
                 "[1-9][0-9]*  after the query and the K/V cache were rewritten in place .*it answered with the call before's output.*[1-9][0-9]* passed, [1-9][0-9]* failed"
                 verify --kernels python:pointer_cache --intensity quick --threads 1
                 --dtypes fp32 --kv-dtypes auto)
# Its dumps hold the rewritten inputs, and replay with the kernel makes the second call too, so a
# dump reproduces the failure (the fixture's first answer to the file's inputs is right).
set(pointer_dumps ${CMAKE_CURRENT_BINARY_DIR}/cli_work/pointer_cache_dumps)
add_test(NAME cli.python_pointer_cache_dump_replays
         COMMAND ${CMAKE_COMMAND} -DEXE=$<TARGET_FILE:attn-tune> -DDUMPS=${pointer_dumps}
                 -P ${ATTN_PY_FIXTURES}/pointer_cache_dump.cmake)
set_tests_properties(cli.python_pointer_cache_dump_replays PROPERTIES LABELS "cli;python"
                     ENVIRONMENT "PYTHONPATH=${ATTN_PY_FIXTURES}")
# plugin check makes the same call on every tiny case.
attn_python_test(python_check_pointer_cache 1
                 "after the query and the K/V cache were rewritten in place .*it answered with the call before's output.*plugin check: 1 of 1 families failed"
                 plugin check python:pointer_cache --threads 1)
add_test(NAME cli.python_verify_seed_defects
         COMMAND ${CMAKE_COMMAND} -DEXE=$<TARGET_FILE:attn-tune>
                 -DMODULE=python:ex_engine.factors.attn_dispatch -DPYTHONPATH=${ATTN_PY_FIXTURES}
                 -P ${ATTN_PY_FIXTURES}/verify_seed_defects.cmake)
set_tests_properties(cli.python_verify_seed_defects PROPERTIES LABELS "cli;python")

add_test(NAME cli.python_virtual_env
         COMMAND ${CMAKE_COMMAND} -DEXE=$<TARGET_FILE:attn-tune> -DPYTHON=${Python3_EXECUTABLE}
                 -DWORK=${CMAKE_CURRENT_BINARY_DIR}/cli_work/python_venv
                 -P ${ATTN_PY_FIXTURES}/venv_module.cmake)
set_tests_properties(cli.python_virtual_env PROPERTIES LABELS "cli;python")

# A module is imported in processes attn-tune starts (the declaration probe, the worker), never in
# attn-tune's own, even one that touches torch.cuda at import.
add_test(NAME cli.python_import_process
         COMMAND ${CMAKE_COMMAND} -DEXE=$<TARGET_FILE:attn-tune> -DPYTHONPATH=${ATTN_PY_FIXTURES}
                 -DWORK=${CMAKE_CURRENT_BINARY_DIR}/cli_work/python_import_process
                 -P ${ATTN_PY_FIXTURES}/import_process.cmake)
set_tests_properties(cli.python_import_process PROPERTIES LABELS "cli;python")

# An exception in the module: a failure line with the exception and its frames; a can_run
# refusal: skipped with the module's reason.
attn_python_test(python_exception_reason 1
                 "FAIL cpu decode_v1\\[\\] [^\n]*error: [^\n]*ValueError: block table entry 7 is out of range \\(at raising_kernels.py:[0-9]+ in _gather <- raising_kernels.py:[0-9]+ in _decode\\)"
                 verify --kernels python:raising_kernels --intensity quick --families decode_v1
                 --dtypes fp32 --threads 1)

attn_python_test(python_can_run_reason 1 "prefill: skipped [^\n]*\n *prefill\\[\\]: prefill is not here"
                 plugin check python:raising_kernels --threads 1)

# Bad modules and specs: one line, exit 2.
attn_python_test(python_no_module 2 "no module named 'no_such_engine'.*PYTHONPATH"
                 verify --kernels python:no_such_engine.attn)
attn_python_test(python_bad_spec 2 "'python:1bad' is not python:MODULE\\[:FACTORY\\]"
                 verify --kernels python:1bad)
attn_python_test(python_no_kernels 2 "python:json declares no kernels"
                 plugin check python:json)
attn_python_test(python_no_factory 2 "module attn_tune_torch has no 'nope'"
                 verify --kernels python:attn_tune_torch:nope)
attn_python_test(python_empty_factory 2 "'python:attn_tune_torch:' ends with ':' but names no factory"
                 verify --kernels python:attn_tune_torch:)
attn_python_test(python_factory_returns_none 2
                 "python:factory_none: factory_none.attn_tune_kernels\\(\\) is None, not a declaration"
                 plugin check python:factory_none)
attn_python_test(python_named_factory_returns_none 2
                 "python:factory_none:nothing: factory_none.nothing is None, not a declaration"
                 plugin check python:factory_none:nothing)

# A small sweep through the bridge writes a table whose provenance names the module.
add_test(NAME cli.python_sweep_table
         COMMAND ${CMAKE_COMMAND} -DEXE=$<TARGET_FILE:attn-tune>
                 -DPROFILE=${ATTN_PY_FIXTURES}/bridge_profile.json
                 -DWORK=${CMAKE_CURRENT_BINARY_DIR}/cli_work/python_sweep
                 -P ${ATTN_PY_FIXTURES}/sweep_table.cmake)
set_tests_properties(cli.python_sweep_table PROPERTIES LABELS "cli;python" RESOURCE_LOCK cpu_timing)

# The prepare step and a declared workspace (plugin ABI 2) through the bridge: the module's run
# refuses to compute without its prepared copy and workspace, so a pass shows both arrive; the
# sweep's timing method counts the copy as the kernel set's own memory, flushed with the rest.
attn_python_test(python_verify_prepared 0 " 0 failed, "
                 verify --kernels python:prepared_kernels --intensity quick --threads 1
                 --dtypes fp32 --families decode_v1,decode_v2)
# The workspace without a prepare step: each new case is a new Call, and a workspace that came
# back at the call before's address reached it as None until 2026-12-08 (most cases failed).
attn_python_test(python_verify_workspace_only 0 " 0 failed, "
                 verify --kernels python:prepared_kernels:attn_tune_kernels_workspace_only
                 --intensity quick --threads 1 --dtypes fp32 --families decode_v1,decode_v2)

# A can_run that raises is an error, not a refusal (tests/python/can_run_raising.py raises for
# head_dim 128 only): verify ends with exit 1 naming the exception, where a refusal would let the
# head_dim-128 cases vanish and pass the rest with exit 0.
attn_python_test(python_can_run_raises 1 "can_run raised ValueError: no tile for head_dim 128"
                 verify --kernels python:can_run_raising --device cpu --intensity quick
                 --threads 1 --dtypes fp32 --families decode_v1)

# plugin check asks a decode_v2 which block sizes it accepts before its cases: a can_run that
# raises there ends the check with exit 1 naming the exception.
attn_python_test(python_plugin_check_can_run_raises 1
                 "while asking the decode kernels which block sizes they accept: .*can_run raised KeyError: 'oops'"
                 plugin check python:can_run_raising:attn_tune_kernels_v2)
# verify asks the same before its cases: the line says the kernels raised an error there (the
# worker did not die of them) and names it.
attn_python_test(python_verify_can_run_raises_while_asking 1
                 "the kernels raised an error while asking .* which block and head sizes its decode kernels accept: .*can_run raised KeyError: 'oops'"
                 verify --kernels python:can_run_raising:attn_tune_kernels_v2 --device cpu
                 --intensity quick --threads 1 --dtypes fp32)
set_tests_properties(cli.python_verify_can_run_raises_while_asking PROPERTIES
                     FAIL_REGULAR_EXPRESSION "ended the worker")

# A misspelt key of a declaration dict is warned about, naming the key it most likely meant
# (tests/python/misspelt_keys.py); the kernels still pass as declared without it.
string(CONCAT misspelt_keys_re
       "key 'engine_rul' is not one attn-tune reads \\(did you mean 'engine_rule'\\?\\).*"
       "family decode_v1: key 'writes_lze' is not one attn-tune reads \\(did you mean "
       "'writes_lse'\\?\\)")
attn_python_test(python_misspelt_keys 0 "${misspelt_keys_re}"
                 plugin check python:misspelt_keys --threads 1)
# Said once: the worker that loads the module again after the declaration probe stays quiet.
set_tests_properties(cli.python_misspelt_keys PROPERTIES
                     FAIL_REGULAR_EXPRESSION "'engine_rul' is not one.*'engine_rul' is not one")

# writes_lse is True or False: the string "False" (true to Python) is refused, not read as True
# (tests/python/writes_lse_string.py).
attn_python_test(python_writes_lse_string 2
                 "family decode_v1 declares writes_lse 'False'; it is True or False"
                 plugin check python:writes_lse_string --threads 1)

# The same for a declaration made of objects (tests/python/misspelt_attributes.py): a misspelt
# data attribute, and a method whose name is a near miss of one the object lacks; the family's
# helper methods of its own are not warned about.
string(CONCAT misspelt_attributes_re
       "attribute 'engine_rul' is not one attn-tune reads \\(did you mean 'engine_rule'\\?\\).*"
       "family decode_v1: attribute '(can_rn|writes_lze)' is not one attn-tune reads \\(did you "
       "mean '(can_run|writes_lse)'\\?\\).*family decode_v1: attribute '(can_rn|writes_lze)'")
attn_python_test(python_misspelt_attributes 0 "${misspelt_attributes_re}"
                 plugin check python:misspelt_attributes --threads 1)
set_tests_properties(cli.python_misspelt_attributes PROPERTIES
                     FAIL_REGULAR_EXPRESSION
                     "'describe'|'_gather'|'engine_rul' is not one.*'engine_rul' is not one")

# A workspace no host can map (2^60 bytes, tests/python/workspace_huge.py) fails the run with a
# sentence naming the bytes asked for, not a bare std::bad_alloc.
string(CONCAT workspace_huge_re "decode_v1: FAIL [^\n]*the workspace the plugin asks for, "
       "1152921504606846976 bytes, cannot be allocated in host memory")
attn_python_test(python_workspace_huge 1 "${workspace_huge_re}"
                 plugin check python:workspace_huge --threads 1)
set_tests_properties(cli.python_workspace_huge PROPERTIES FAIL_REGULAR_EXPRESSION "bad_alloc")

# A can_run that accepts a block size not dividing a declared partition (48 for 256; the kernel
# still computes right, tests/python/partition_unaligned.py): verify passes it and notes the
# broken contract.
string(CONCAT partition_unaligned_re
       "[1-9][0-9]* passed, 0 failed, 0 skipped.*verify: note: cpu decode_v2\\[partition=256\\] "
       "accepts block_size 48, which does not divide its partition 256")
attn_python_test(python_partition_unaligned 0 "${partition_unaligned_re}"
                 verify --kernels python:partition_unaligned --intensity quick --threads 2
                 --dtypes fp32)

# plugin check gives the same note, once, before its tiny cases, which still pass.
string(CONCAT partition_unaligned_check_re
       "tiny cases \\(cpu\\):\n  note: decode_v2\\[partition=256\\] accepts block_size 48, "
       "which does not divide its partition 256.*every family passed its tiny case")
attn_python_test(python_partition_unaligned_check 0 "${partition_unaligned_check_re}"
                 plugin check python:partition_unaligned --threads 1)

# A layout misread that meets the NaN past the lengths (tests/python/slots_reversed.py) fails
# verify, but is not told as the stale-slot bug: a re-run with those slots finite stays wrong.
attn_python_test(python_slots_reversed_not_stale 1
                 "reproduce: PYTHONPATH=[^ ]+ attn-tune verify --kernels python:slots_reversed .*0 passed, [1-9][0-9]* failed"
                 verify --kernels python:slots_reversed --intensity quick --threads 1 --dtypes fp32
                 --families decode_v1)
set_tests_properties(cli.python_slots_reversed_not_stale PROPERTIES
                     FAIL_REGULAR_EXPRESSION "stale slots folded in")

# Planted bugs an outside audit of verify found passing it, each wrong only in a shape or batch
# the cases once left out (tests/python/planted_coverage_bugs.py): quick fails each, in the
# group made for it.
foreach(bug "heads_over_32|many-heads" "batch_over_16|many-seqs" "after_empty|empty-first"
            "gqa_odd|gqa-odd" "window_block_edge|window-edges" "fp8_scale_two_heads|fp8-e4m3")
  string(REPLACE "|" ";" bug "${bug}")
  list(GET bug 0 factory)
  list(GET bug 1 group)
  attn_python_test(python_planted_${factory} 1 "FAIL cpu decode_v1\\[\\] decode/${group}/fp32#"
                   verify --kernels python:planted_coverage_bugs:${factory} --intensity quick
                   --threads 2 --dtypes fp32)
endforeach()

# Sequence 0's length used for every sequence: named where sequence 0 is longer than others too
# (read past their end through their block-table rows), which verify's ragged batches have; once
# only where it was the shortest. Every failure explained.
attn_python_test(python_planted_first_length 1
                 "  [0-9]+  every wrong sequence is read as far as the first sequence's length, past"
                 verify --kernels python:planted_coverage_bugs:first_length --intensity quick
                 --threads 2 --dtypes fp32)
set_tests_properties(cli.python_planted_first_length PROPERTIES
                     FAIL_REGULAR_EXPRESSION "none of the usual mistakes explains")

# An exception whose message holds a lone surrogate ("\udcff", from a surrogateescape-decoded
# path; tests/python/surrogate_raising.py) is a failure line with its type and the surrogate
# escaped, not a crash of the worker.
attn_python_test(python_surrogate_message 1
                 "decode_v1: FAIL [^\n]*CacheFileError: cannot map /models/kv-\\\\udcff\\.bin"
                 plugin check python:surrogate_raising --threads 1)
set_tests_properties(cli.python_surrogate_message PROPERTIES
                     FAIL_REGULAR_EXPRESSION "SIGSEGV|FAULT")

# A module whose import hangs in the worker (after the declaration probe's returned) has the
# probe's time limit there too: exit 1 within seconds, "starting the kernels", no process left.
add_test(NAME cli.python_worker_import_hangs
         COMMAND ${CMAKE_COMMAND} -DEXE=$<TARGET_FILE:attn-tune> -DPYTHONPATH=${ATTN_PY_FIXTURES}
                 -DWORK=${CMAKE_CURRENT_BINARY_DIR}/cli_work/python_worker_import_hangs
                 -P ${ATTN_PY_FIXTURES}/hang_in_worker.cmake)
set_tests_properties(cli.python_worker_import_hangs PROPERTIES LABELS "cli;python" TIMEOUT 90)

# The sources SHA-256 covers the modules a module imports from beside it (an edit to the helper
# alone changes it), and is the file's own SHA-256 for a module that imports nothing from there.
add_test(NAME cli.python_sources_hash
         COMMAND ${CMAKE_COMMAND} -DEXE=$<TARGET_FILE:attn-tune> -DFIXTURES=${ATTN_PY_FIXTURES}
                 -DWORK=${CMAKE_CURRENT_BINARY_DIR}/cli_work/python_sources_hash
                 -P ${ATTN_PY_FIXTURES}/sources_hash.cmake)
set_tests_properties(cli.python_sources_hash PROPERTIES LABELS "cli;python")

# replay with Python kernels that raise: an ERROR line and exit 1 (the kernels failed), not exit 4
# (attn-tune's own error), on a file that attn-tune's own PyTorch kernels pass.
add_test(NAME cli.python_replay_raising
         COMMAND ${CMAKE_COMMAND} -DEXE=$<TARGET_FILE:attn-tune> -DPYTHON=${Python3_EXECUTABLE}
                 -DPYTHONPATH=${ATTN_PY_FIXTURES}
                 -DWORK=${CMAKE_CURRENT_BINARY_DIR}/cli_work/python_replay_raising
                 -P ${ATTN_PY_FIXTURES}/replay_raising.cmake)
set_tests_properties(cli.python_replay_raising PROPERTIES LABELS "cli;python")

# A VIRTUAL_ENV that is not there is refused in one line, not passed over for the system's
# site-packages.
attn_python_test(python_venv_missing 2 "VIRTUAL_ENV is '/nonexistent/venv', which has no bin"
                 plugin check python:attn_tune_torch --threads 1)
set_tests_properties(cli.python_venv_missing PROPERTIES
                     ENVIRONMENT "PYTHONPATH=${ATTN_PY_FIXTURES};VIRTUAL_ENV=/nonexistent/venv")

# A vllm-layout kernel that reads an fp8 key cache as packed by the fp16 query's x (8, not 16):
# verify names it, though the problem's caches are HND and rearranged for the kernel
# (tests/python/vllm_x8_fp8.py).
attn_python_test(python_verify_vllm_x8_fp8 1
                 "vllm key layout: the fp8_e4m3 key cache is read as packed by x = 8"
                 verify --kernels python:vllm_x8_fp8 --device cpu --intensity quick --threads 2
                 --dtypes fp16 --kv-dtypes fp8_e4m3 --families decode_v1)

# A module whose import fails: one line naming the module's own line, without the frames of
# Python's import machinery (<frozen importlib._bootstrap>).
attn_python_test(python_import_fails_names_its_line 2
                 "importing import_fails failed: ModuleNotFoundError: No module named 'attn_tune_a_dependency_that_is_not_installed' \\(at import_fails.py:4 in <module>\\)"
                 plugin check python:import_fails)
