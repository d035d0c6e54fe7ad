# CLI tests of kernel plugins (--kernels, `plugin check`): the CPU example passes what the
# built-in CPU backend passes, a planted mask bug fails exactly its cases and its dumps replay the
# mismatch, a crashing plugin is a fault, an old-ABI plugin or one whose init crashes is one line
# and exit 2, and a sweep through a plugin writes a table whose provenance names it.
set(plugins_work ${CMAKE_CURRENT_BINARY_DIR}/cli_work/plugins)

attn_cli_test(NAME plugin_check_cpu_example EXIT 0
              REGEX "plugin cpu-example, version 1.0, plugin ABI 4, host memory.*decode_v2 +layout HND.*partition: 256, 512, 1024.*prefill: ok \\(causal, softcap=2\\): 18 of 18 configurations passed.*every family passed"
              ARGS plugin check ${ATTN_CPU_EXAMPLE_PLUGIN} --threads 2)
attn_cli_test(NAME plugin_check_old_abi EXIT 2
              REGEX "was built for plugin ABI 0; this attn-tune speaks ABI 1 to 4: rebuild it"
              ARGS plugin check ${ATTN_OLD_ABI_PLUGIN})
attn_cli_test(NAME verify_kernels_old_abi EXIT 2 REGEX "was built for plugin ABI 0"
              ARGS verify --kernels ${ATTN_OLD_ABI_PLUGIN} --intensity quick)
attn_cli_test(NAME sweep_kernels_old_abi EXIT 2 REGEX "was built for plugin ABI 0"
              ARGS sweep --kernels ${ATTN_OLD_ABI_PLUGIN} --profile quick --out ${plugins_work}/old)
# A plugin whose init aborts, exits or hangs: its declaration probe (a child process) says so in one
# line and attn-tune exits 2 itself.
attn_cli_test(NAME plugin_check_init_abort EXIT 2
              REGEX "plugin [^\n]*: the process that loads it to read its declaration was killed by SIGABRT"
              ARGS plugin check ${ATTN_INIT_PLUGIN})
attn_cli_test(NAME verify_kernels_init_exit EXIT 2
              REGEX "exited with status 0 before it declared anything \\(does its init"
              ARGS verify --kernels ${ATTN_INIT_PLUGIN} --intensity quick)
attn_cli_test(NAME sweep_kernels_init_hang EXIT 2
              REGEX "had not answered after 0.5 s and was stopped"
              ARGS sweep --kernels ${ATTN_INIT_PLUGIN} --profile quick --out ${plugins_work}/hang)
set_tests_properties(cli.plugin_check_init_abort PROPERTIES ENVIRONMENT ATTN_TEST_INIT=abort)
set_tests_properties(cli.verify_kernels_init_exit PROPERTIES ENVIRONMENT ATTN_TEST_INIT=exit)
set_tests_properties(cli.sweep_kernels_init_hang PROPERTIES
                     ENVIRONMENT "ATTN_TEST_INIT=hang;ATTN_TUNE_PLUGIN_PROBE_TIMEOUT=0.5")
# A destroy that crashes runs after the worker returned its results: the command ends itself
# (never a signal), says what the teardown did and fails (exit 1); a run that calls exit(0) is a
# fault of its case, not a silent pass.
attn_cli_test(NAME plugin_check_destroy_crash EXIT 1
              REGEX "after its cases, the worker's teardown after its work \\(a plugin's destroy\\) ended it"
              ARGS plugin check ${ATTN_INIT_PLUGIN})
attn_cli_test(NAME verify_kernels_destroy_crash EXIT 1
              REGEX "the kernels failed after their cases: the worker's teardown"
              ARGS verify --kernels ${ATTN_INIT_PLUGIN} --intensity quick --families decode_v1)
attn_cli_test(NAME verify_kernels_run_exit EXIT 1 REGEX "fault: worker exited with status 0"
              ARGS verify --kernels ${ATTN_INIT_PLUGIN} --intensity quick --dtypes fp32)
# A sweep's worker frees its backend once its measurements are sent, so the plugin's destroy
# runs there too (it never ran in a sweep before 2026-12-03) and its crash is reported. The
# output folder is removed first: a sweep refuses a folder it did not start.
add_test(NAME cli.sweep_kernels_destroy_crash_clean
         COMMAND ${CMAKE_COMMAND} -E rm -rf ${plugins_work}/destroy_crash)
set_tests_properties(cli.sweep_kernels_destroy_crash_clean PROPERTIES LABELS "cli"
                     FIXTURES_SETUP destroy_crash_clean)
attn_cli_test(NAME sweep_kernels_destroy_crash EXIT 1
              REGEX "the kernels failed after their measurements \\(which stand\\): the worker's teardown after its work \\(a plugin's destroy\\) ended it"
              ARGS sweep --kernels ${ATTN_INIT_PLUGIN} --profile quick --threads 1 --quiet
                   --no-report --out ${plugins_work}/destroy_crash)
set_tests_properties(cli.plugin_check_destroy_crash cli.verify_kernels_destroy_crash
                     cli.sweep_kernels_destroy_crash
                     PROPERTIES ENVIRONMENT ATTN_TEST_INIT=destroy:segv)
set_tests_properties(cli.sweep_kernels_destroy_crash PROPERTIES
                     FIXTURES_REQUIRED destroy_crash_clean)
set_tests_properties(cli.verify_kernels_run_exit PROPERTIES ENVIRONMENT ATTN_TEST_INIT=run:exit0)
# An fp8 mask with a bit no cache dtype has (plugin ABI 4): one line naming the bits.
attn_cli_test(NAME plugin_check_bad_kv_dtypes EXIT 2
              REGEX "declares KV-cache dtype mask 0x42 for decode_v1; its bits are ATTN_KV_DTYPE_BIT"
              ARGS plugin check ${ATTN_INIT_PLUGIN})
set_tests_properties(cli.plugin_check_bad_kv_dtypes PROPERTIES ENVIRONMENT ATTN_TEST_INIT=decl:kv_dtypes)
# Declarations the header does not allow, each one line: a family count with no array, a
# writes_lse that is neither 0 nor 1, a negative parameter count.
foreach(decl null_families writes_lse negative_params)
  set(said_null_families "declares 3 families without an array of them \\(api->families is NULL\\)")
  set(said_writes_lse "declares writes_lse 2 for decode_v1; it is 1 \\(run writes call->lse\\) or 0")
  set(said_negative_params "declares -1 parameters for decode_v1; the count is 0 \\(one configuration\\) or more")
  attn_cli_test(NAME plugin_check_decl_${decl} EXIT 2 REGEX "${said_${decl}}"
                ARGS plugin check ${ATTN_INIT_PLUGIN})
  set_tests_properties(cli.plugin_check_decl_${decl} PROPERTIES
                       ENVIRONMENT ATTN_TEST_INIT=decl:${decl})
endforeach()
# A family that declares fp8_e4m3 caches and refuses every call with one: plugin check says so
# under its skipped fp8 cases (their sizes are not aimed at the family's), verify fails the
# declaration rather than passing with every fp8 case skipped.
attn_cli_test(NAME plugin_check_fp8_refused EXIT 1
              REGEX "decode_v1: skipped \\(causal, kv=fp8_e4m3 with k_scale=0.05, v_scale=4\\): no configuration accepts.*decode_v1: skipped \\(causal, kv=fp8_e4m3 with per-head scales\\).*decode_v1: note: it declares fp8_e4m3 KV caches, yet every configuration refused its tiny fp8_e4m3 cases; verify fails it"
              ARGS plugin check ${ATTN_INIT_PLUGIN})
attn_cli_test(NAME verify_kernels_fp8_refused EXIT 1
              REGEX "FAIL cpu decode_v1: it declares fp8_e4m3 KV caches, yet every configuration refused all [1-9][0-9]* fp8_e4m3 cases \\(the first: decode_v1\\[\\]: "
              ARGS verify --kernels ${ATTN_INIT_PLUGIN} --intensity quick --threads 1
                   --kv-dtypes fp8_e4m3 --dtypes fp32)
set_tests_properties(cli.plugin_check_fp8_refused cli.verify_kernels_fp8_refused PROPERTIES
                     ENVIRONMENT ATTN_TEST_INIT=fp8-refused)
# An init that refuses before it set a version says why (not "built for plugin ABI 0"); a name
# with a newline would forge a second line in every message that names the plugin.
attn_cli_test(NAME plugin_check_init_refuses_early EXIT 2
              REGEX "refused to start: no licence for this machine"
              ARGS plugin check ${ATTN_INIT_PLUGIN})
set_tests_properties(cli.plugin_check_init_refuses_early PROPERTIES
                     ENVIRONMENT ATTN_TEST_INIT=refuse-early)
attn_cli_test(NAME plugin_check_name_newline EXIT 2
              REGEX "declares a name with a control character"
              ARGS plugin check ${ATTN_INIT_PLUGIN})
set_tests_properties(cli.plugin_check_name_newline PROPERTIES
                     ENVIRONMENT ATTN_TEST_INIT=decl:newline)
# A run that crashes fails its configuration and the check goes on with the family's other cases
# in a new worker, until the family has crashed three times.
attn_cli_test(NAME plugin_check_run_crash EXIT 1
              REGEX "decode_v1: FAIL: the plugin crashed or hung its worker with decode_v1\\[\\] \\(causal\\): worker killed by SIGSEGV.*decode_v1: FAIL \\(causal\\): 1 of 1 configurations failed.*\\(causal, window_left=25\\)"
              ARGS plugin check ${ATTN_INIT_PLUGIN} --threads 1)
set_tests_properties(cli.plugin_check_run_crash PROPERTIES ENVIRONMENT ATTN_TEST_INIT=run:segv)
attn_cli_test(NAME plugin_check_not_a_plugin EXIT 2 REGEX "cannot load it"
              ARGS plugin check ${PROJECT_SOURCE_DIR}/README.md)
attn_cli_test(NAME plugin_check_missing EXIT 2 REGEX "plugin /nonexistent/x.so: no such file"
              ARGS plugin check /nonexistent/x.so)
attn_cli_test(NAME plugin_check_folder EXIT 2 REGEX "not a regular file"
              ARGS plugin check ${PROJECT_SOURCE_DIR}/tests)
attn_cli_test(NAME verify_kernels_host_plugin_on_gpu EXIT 2
              REGEX "plugin cpu-example runs on host memory: use --device cpu"
              ARGS verify --kernels ${ATTN_CPU_EXAMPLE_PLUGIN} --device cuda:0)
# plugin check refuses the device before it prints anything of the plugin.
attn_cli_test(NAME plugin_check_host_plugin_on_gpu EXIT 2
              REGEX "^attn-tune: error: plugin cpu-example runs on host memory: use --device cpu"
              ARGS plugin check ${ATTN_CPU_EXAMPLE_PLUGIN} --device cuda:0)
# A sweep refused before its first line leaves no folder behind.
add_test(NAME cli.sweep_refused_leaves_no_folder
         COMMAND ${CMAKE_COMMAND} -DEXE=$<TARGET_FILE:attn-tune> -DPLUGIN=${ATTN_CPU_EXAMPLE_PLUGIN}
                 -DWORK=${CMAKE_CURRENT_BINARY_DIR}/cli_work/refused_sweep
                 -P ${PROJECT_SOURCE_DIR}/tests/support/no_folder_left.cmake)
set_tests_properties(cli.sweep_refused_leaves_no_folder PROPERTIES LABELS "cli")
# A reader of its output that leaves early does not end a sweep (no SIGPIPE).
add_test(NAME cli.sweep_reader_gone
         COMMAND ${CMAKE_COMMAND} -DEXE=$<TARGET_FILE:attn-tune>
                 -DWORK=${CMAKE_CURRENT_BINARY_DIR}/cli_work/reader_gone
                 -P ${PROJECT_SOURCE_DIR}/tests/support/broken_pipe.cmake)
set_tests_properties(cli.sweep_reader_gone PROPERTIES LABELS "cli" RESOURCE_LOCK cpu_timing)
attn_cli_test(NAME plugin_check_mask_bug EXIT 1
              REGEX "decode_v1: ok \\(causal\\).*decode_v1: FAIL: wrong results \\(causal, window_left=25\\).*families failed"
              ARGS plugin check ${ATTN_MASK_BUG_PLUGIN} --threads 2)

# The example plugin passes and skips exactly what the built-in CPU backend does.
add_test(NAME cli.verify_kernels_same_as_builtin
         COMMAND ${CMAKE_COMMAND} -DEXE=$<TARGET_FILE:attn-tune> -DPLUGIN=${ATTN_CPU_EXAMPLE_PLUGIN}
                 -DBUILTIN_JUNIT=${CMAKE_CURRENT_BINARY_DIR}/cli_work/verify_cpu_quick/verify.xml
                 -DWORK=${plugins_work}/same_as_builtin
                 -P ${CMAKE_CURRENT_SOURCE_DIR}/plugins/verify_same_as_builtin.cmake)
set_tests_properties(cli.verify_kernels_same_as_builtin PROPERTIES LABELS "cli"
                     FIXTURES_REQUIRED verify_cpu_quick_out)

# The planted mask bug: exit 1, failures only in windowed cases, dumps that replay the mismatch.
add_test(NAME cli.verify_kernels_mask_bug
         COMMAND ${CMAKE_COMMAND} -DEXE=$<TARGET_FILE:attn-tune> -DPLUGIN=${ATTN_MASK_BUG_PLUGIN}
                 -DGOOD_PLUGIN=${ATTN_CPU_EXAMPLE_PLUGIN} -DWORK=${plugins_work}/mask_bug
                 -P ${CMAKE_CURRENT_SOURCE_DIR}/plugins/verify_mask_bug.cmake)
set_tests_properties(cli.verify_kernels_mask_bug PROPERTIES LABELS "cli")

# A plugin that segfaults in run: its configurations are faults and the sweep goes on.
set(ATTN_CLI_DATA ${CMAKE_CURRENT_BINARY_DIR}/cli_data)
file(WRITE ${ATTN_CLI_DATA}/plugin_profile.json
     "{\"name\": \"plugin-small\", \"decode\": {\"batch\": [1, 2], \"context_len\": [300, 1500],\n"
     " \"num_kv_heads\": [1], \"gqa_ratio\": [2], \"head_dim\": [32], \"block_size\": [16],\n"
     " \"dtype\": [\"fp32\"]},\n"
     " \"prefill\": {\"batch\": [1], \"q_len\": [64], \"k_len\": [64], \"num_kv_heads\": [1],\n"
     " \"gqa_ratio\": [2], \"head_dim\": [32], \"block_size\": [16], \"dtype\": [\"fp32\"]},\n"
     " \"configs\": {\"prefill\": [{\"q_tile\": 32, \"k_tile\": 64, \"split\": 1}]},\n"
     " \"timing\": {\"warmup\": 1, \"min_reps\": 3, \"max_reps\": 10, \"max_seconds\": 0.05}}\n")
add_test(NAME cli.sweep_kernels_crash_clean COMMAND ${CMAKE_COMMAND} -E rm -rf ${plugins_work}/crash)
set_tests_properties(cli.sweep_kernels_crash_clean PROPERTIES LABELS "cli"
                     FIXTURES_SETUP plugin_crash_clean)
attn_cli_test(NAME sweep_kernels_crash EXIT 1
              REGEX "8 faults.*--retry-faults"
              ARGS sweep --kernels ${ATTN_CRASH_PLUGIN} --profile ${ATTN_CLI_DATA}/plugin_profile.json
                   --threads 2 --quiet --out ${plugins_work}/crash)
set_tests_properties(cli.sweep_kernels_crash PROPERTIES RESOURCE_LOCK cpu_timing
                     FIXTURES_REQUIRED plugin_crash_clean)

# verify through the crashing plugin: its configurations are failed cases with the fault's reason
# ("worker killed by SIGSEGV"; under AddressSanitizer, which catches the signal, "worker exited").
attn_cli_test(NAME verify_kernels_crash EXIT 1
              REGEX "FAIL cpu decode_v2\\[partition=512,split=0\\] [^\n]*: fault: worker"
              ARGS verify --kernels ${ATTN_CRASH_PLUGIN} --device cpu --intensity quick --threads 2
                   --families decode_v2 --dtypes fp32)

# A sweep through the example plugin (a small profile, to keep CI short): the table names the plugin, resuming with other kernels is
# refused, and a lookup that names other kernels warns.
set(sweep_out ${plugins_work}/sweep)
add_test(NAME cli.sweep_kernels_clean COMMAND ${CMAKE_COMMAND} -E rm -rf ${sweep_out})
set_tests_properties(cli.sweep_kernels_clean PROPERTIES LABELS "cli" FIXTURES_SETUP plugin_clean)
attn_cli_test(NAME sweep_kernels_cpu_example EXIT 0
              REGEX "with plugin cpu-example 1.0 .*0 failed validation.*0 faults"
              ARGS sweep --kernels ${ATTN_CPU_EXAMPLE_PLUGIN}
                   --profile ${ATTN_CLI_DATA}/plugin_profile.json --threads 2 --out ${sweep_out})
set_tests_properties(cli.sweep_kernels_cpu_example PROPERTIES RESOURCE_LOCK cpu_timing
                     FIXTURES_REQUIRED plugin_clean FIXTURES_SETUP plugin_table)
attn_cli_test(NAME table_show_plugin_provenance EXIT 0
              REGEX "kernels:  plugin cpu-example 1.0 \\(libattn_plugin_cpu_example.so, plugin ABI 4, sha256 [0-9a-f]+\\)"
              ARGS table show ${sweep_out}/threshold_table.json)
attn_cli_test(NAME table_lookup_other_kernels_warns EXIT 0
              REGEX "warning: this table timed plugin cpu-example 1.0 .*not the built-in attn-tune kernels"
              ARGS table lookup ${sweep_out}/threshold_table.json --kernels attn-tune --device cpu
                   --num-heads 2 --num-kv-heads 1 --head-dim 32 --block-size 16 --dtype fp32
                   --batch 1 --context-len 1500)
attn_cli_test(NAME table_lookup_same_kernels_quiet EXIT 0 REGEX "^[^w]*$"
              ARGS table lookup ${sweep_out}/threshold_table.json --kernels ${ATTN_CPU_EXAMPLE_PLUGIN}
                   --device cpu --num-heads 2 --num-kv-heads 1 --head-dim 32 --block-size 16
                   --dtype fp32 --batch 1 --context-len 1500)
attn_cli_test(NAME sweep_resume_other_kernels EXIT 2
              REGEX "timed the kernels of plugin cpu-example.*--resume needs the same kernels"
              ARGS sweep --device cpu --profile ${ATTN_CLI_DATA}/plugin_profile.json --threads 2
                   --resume --out ${sweep_out})
set_tests_properties(cli.table_show_plugin_provenance cli.table_lookup_other_kernels_warns
                     cli.table_lookup_same_kernels_quiet cli.sweep_resume_other_kernels
                     PROPERTIES FIXTURES_REQUIRED plugin_table)

# Plugins that read NHD and vllm caches (the CPU example behind a rearrangement): verify hands
# them its cases in their layouts, and they pass.
foreach(layout nhd vllm)
  string(TOUPPER ${layout} upper)
  attn_cli_test(NAME verify_kernels_layout_${layout} EXIT 0 REGEX " 0 failed, 0 skipped"
                ARGS verify --kernels ${ATTN_${upper}_PLUGIN} --device cpu --intensity quick
                     --threads 2 --dtypes fp16)
endforeach()

# Old plugins. A plugin built against ABI 1's header loads and runs unchanged (the host offers
# it version 1), and so does one built against ABI 2's (the prepare plugin). A plugin with a
# prepare step gets its handle in every run (its run fails without one), its copy of the caches
# is flushed with the rest, and the timing method says so. The ABI 3 builds of the split-KV
# plugin check the sequences' lengths the host passes (can_run refuses without them).
attn_cli_test(NAME plugin_check_abi1 EXIT 0
              REGEX "plugin split-kv-abi1, version 1.0, plugin ABI 1, host memory.*every family passed"
              ARGS plugin check ${ATTN_SPLIT_ABI1_PLUGIN} --threads 2)
attn_cli_test(NAME verify_kernels_abi1 EXIT 0 REGEX " 0 failed, "
              ARGS verify --kernels ${ATTN_SPLIT_ABI1_PLUGIN} --intensity quick --dtypes fp32
                   --threads 2)
# A plugin built against ABI 3's header, from before fp8 caches: it loads, passes, declares no fp8
# cache, and asking verify for one says so (exit 2) instead of checking nothing.
attn_cli_test(NAME plugin_check_abi3 EXIT 0
              REGEX "plugin split-kv-abi3, version 1.0, plugin ABI 3, host memory.*decode_v1 +layout HND +writes lse +1 configurations\n.*every family passed"
              ARGS plugin check ${ATTN_SPLIT_ABI3_PLUGIN} --threads 2)
attn_cli_test(NAME verify_kernels_abi3_fp8 EXIT 2
              REGEX "--kv-dtypes fp8_e4m3: plugin split-kv-abi3 declares no family that reads fp8_e4m3 KV caches \\(plugin ABI 4's kv_dtypes; it was built for ABI 3\\)"
              ARGS verify --kernels ${ATTN_SPLIT_ABI3_PLUGIN} --intensity quick --dtypes fp32
                   --kv-dtypes fp8_e4m3 --threads 2)
attn_cli_test(NAME plugin_check_abi2 EXIT 0
              REGEX "plugin split-kv-prepare, version 1.0, plugin ABI 2, host memory.*every family passed"
              ARGS plugin check ${ATTN_SPLIT_PREPARE_PLUGIN} --threads 2)
attn_cli_test(NAME verify_kernels_prepare EXIT 0 REGEX " 0 failed, "
              ARGS verify --kernels ${ATTN_SPLIT_PREPARE_PLUGIN} --intensity quick --dtypes fp32
                   --threads 2)
set(prepare_out ${plugins_work}/prepare)
add_test(NAME cli.sweep_prepare_clean COMMAND ${CMAKE_COMMAND} -E rm -rf ${prepare_out})
set_tests_properties(cli.sweep_prepare_clean PROPERTIES LABELS "cli" FIXTURES_SETUP prepare_clean)
attn_cli_test(NAME sweep_kernels_prepare EXIT 0
              REGEX "with plugin split-kv-prepare 1.0 .*0 failed validation.*0 faults"
              ARGS sweep --kernels ${ATTN_SPLIT_PREPARE_PLUGIN}
                   --profile ${ATTN_CLI_DATA}/plugin_profile.json --threads 2 --out ${prepare_out}
                   --no-report)
set_tests_properties(cli.sweep_kernels_prepare PROPERTIES RESOURCE_LOCK cpu_timing
                     FIXTURES_REQUIRED prepare_clean FIXTURES_SETUP prepare_table)
attn_cli_test(NAME table_show_prepared_method EXIT 0
              REGEX "timing: steady_clock, plugin split-kv-prepare on 2 threads, prepared untimed \\([0-9.]+ (KiB|MiB) to [0-9.]+ (KiB|MiB) of its own memory\\), the [0-9.]+ (KiB|MiB) to [0-9.]+ (KiB|MiB) it touches flushed"
              ARGS table show ${prepare_out}/threshold_table.json)
set_tests_properties(cli.table_show_prepared_method PROPERTIES FIXTURES_REQUIRED prepare_table)

# fp8 caches through the plugin ABI (ABI 4): verify at default intensity passes fp8_e4m3 and
# fp8_e5m2 through the CPU example plugin at each build of its kernels (ATTN_TUNE_CPU_ISA; skipped
# where the processor lacks the level, which the plugin's init then refuses).
foreach(level default x86-64-v3 baseline)
  attn_cli_test(NAME verify_cpu_example_fp8_${level} EXIT 0 REGEX " 0 failed, 0 skipped"
                ARGS verify --kernels ${ATTN_CPU_EXAMPLE_PLUGIN} --device cpu --intensity default
                     --kv-dtypes fp8_e4m3,fp8_e5m2 --threads 2)
  if(NOT level STREQUAL "default")
    set_tests_properties(cli.verify_cpu_example_fp8_${level} PROPERTIES
                         ENVIRONMENT ATTN_TUNE_CPU_ISA=${level}
                         SKIP_REGULAR_EXPRESSION "this processor cannot run the")
  endif()
endforeach()
# ... with each way of reading fp8 forced (ATTN_TUNE_CPU_FP8_READS, which the plugin takes as the
# built-in backend does), and an unknown one refused at the plugin's start.
foreach(reads via-fp16 via-fp32)
  attn_cli_test(NAME verify_cpu_example_fp8_${reads} EXIT 0 REGEX " 0 failed, 0 skipped"
                ARGS verify --kernels ${ATTN_CPU_EXAMPLE_PLUGIN} --device cpu --intensity default
                     --kv-dtypes fp8_e4m3,fp8_e5m2 --threads 2)
  set_tests_properties(cli.verify_cpu_example_fp8_${reads} PROPERTIES
                       ENVIRONMENT ATTN_TUNE_CPU_FP8_READS=${reads})
endforeach()
attn_cli_test(NAME verify_cpu_example_fp8_reads_unknown EXIT 2
              REGEX "refused to start: ATTN_TUNE_CPU_FP8_READS='via-fp64' is not via-fp16, via-fp32 or auto"
              ARGS verify --kernels ${ATTN_CPU_EXAMPLE_PLUGIN} --device cpu --kv-dtypes fp8_e4m3
                   --threads 2)
set_tests_properties(cli.verify_cpu_example_fp8_reads_unknown PROPERTIES
                     ENVIRONMENT ATTN_TUNE_CPU_FP8_READS=via-fp64)

# A plugin built before fp8 caches (ABI 3) swept over an fp8 profile: every configuration is
# refused with its reason, and the sweep says that nothing was timed and exits 4 instead of
# passing a table without a point for a tuned one.
file(WRITE ${ATTN_CLI_DATA}/fp8_only_profile.json
     "{\"name\": \"fp8-small\", \"decode\": {\"batch\": [1], \"context_len\": [300],\n"
     " \"num_kv_heads\": [1], \"gqa_ratio\": [2], \"head_dim\": [32], \"block_size\": [16],\n"
     " \"dtype\": [\"fp32\"], \"kv_dtype\": [\"fp8_e4m3\"]},\n"
     " \"timing\": {\"warmup\": 1, \"min_reps\": 3, \"max_reps\": 10, \"max_seconds\": 0.05}}\n")
add_test(NAME cli.sweep_all_skipped_clean COMMAND ${CMAKE_COMMAND} -E rm -rf ${plugins_work}/all_skipped)
set_tests_properties(cli.sweep_all_skipped_clean PROPERTIES LABELS "cli"
                     FIXTURES_SETUP all_skipped_clean)
attn_cli_test(NAME sweep_all_skipped EXIT 4
              REGEX "0 timed, 0 failed validation, 3 skipped.*sweep: nothing was timed: the kernels refused all 3 measurements"
              ARGS sweep --kernels ${ATTN_SPLIT_ABI3_PLUGIN} --profile ${ATTN_CLI_DATA}/fp8_only_profile.json
                   --threads 2 --quiet --no-report --out ${plugins_work}/all_skipped)
set_tests_properties(cli.sweep_all_skipped PROPERTIES FIXTURES_REQUIRED all_skipped_clean)
