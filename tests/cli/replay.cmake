# `attn-tune replay` against dumps written by an independent script (tests/data/make_dumps.py:
# numpy float64 answers, files written by the safetensors package): agree, catch, refuse.
# The interpreter that scripts/install-deps.sh gave numpy and safetensors: $PYTHON, else the first
# python3 on PATH (not necessarily the one the Python bridge embeds).
if(DEFINED ENV{PYTHON})
  set(ATTN_DUMPS_PYTHON $ENV{PYTHON})
else()
  find_program(ATTN_DUMPS_PYTHON NAMES python3)
endif()
set(REPLAY_DUMPS ${CMAKE_CURRENT_BINARY_DIR}/replay_dumps)

# Correct answers over every SPEC.md option: exit 0.
set(REPLAY_GOOD
  decode_defaults_fp32 decode_gqa_scale_softcap_fp16 decode_mqa_window_left_bf16
  decode_noncausal_windows_fp16 decode_shared_prefix_fp32
  prefill_causal_gqa_fp32 prefill_chunked_sliding_fp16 prefill_q_longer_than_k_bf16
  prefill_noncausal_windows_fp32 prefill_window_right_only_bf16 prefill_softcap_scale_fp16
  prefill_causal_window_both_fp16 prefill_shared_prefix_bf16
  prefill_noncausal_q_longer_than_k_fp32 decode_subnormal_values_fp16)
# One value far outside tolerance: exit 1, and the bad element is listed.
set(REPLAY_WRONG
  wrong_decode_out_fp16 wrong_decode_out_fp32 wrong_prefill_out_bf16
  wrong_prefill_empty_row_bf16 wrong_prefill_lse_fp32)
# Malformed files and impossible shapes: exit 2 with one line; name|regex of that line.
set(REPLAY_BAD
  "bad_too_short|too short for the 8-byte header length"
  "bad_truncated_header|header length [0-9]+ is larger than"
  "bad_truncated_data|reach past the [0-9]+ data bytes"
  "bad_header_length_lies|header length [0-9]+ is larger than"
  "bad_header_json|not valid JSON"
  "bad_offsets_out_of_range|'value_cache' data_offsets .* reach past"
  "bad_offsets_overlap|overlap in the data section"
  "bad_size_mismatch|'query' data_offsets .* hold 64 bytes .* need 128"
  "bad_negative_shape|'query' shape.1. is negative"
  "bad_unsupported_dtype|'key_cache' has unsupported dtype F64"
  "bad_meta_causal|causal = 'maybe' is not a boolean"
  "bad_meta_scale|scale = 'abc' is not a finite number"
  "bad_meta_window|window_left = '1.5' is not an integer"
  "bad_meta_not_string|'softcap' is not a string"
  "bad_missing_query|no tensor 'query'"
  "bad_block_out_of_range|block_tables.0..1. = 5 is outside"
  "bad_block_table_short|too short for its 9 keys"
  "bad_negative_context|context_lens.0. = -3 is negative"
  "bad_gqa_heads|num_heads 3 is not a multiple of num_kv_heads 2"
  "bad_head_dim_mismatch|head_dim 16 differs from query head_dim 8"
  "bad_dtype_mixed|must share a dtype"
  "bad_out_dtype|out is F16 but query is F32"
  "bad_cu_seqlens_decreasing|cu_seqlens_k decreases"
  "bad_nan_query|reads a value that is not finite: query\\[0, 1, 3\\] is NaN"
  "bad_meta_softcap_range|softcap = '1e40' does not fit an fp32"
  "bad_output_past_range|exact output is 448000 at out.row=0, head=0, dim=0., past fp16's range"
  "bad_lse_past_range|exact lse is -?[0-9.]+e\\+40 at lse.row=0, head=0., past fp32's range"
  "bad_inf_visible_key|reads a value that is not finite: key 5 of sequence 0, KV head 0, dim 2 \\(block 0\\) is inf")

if(NOT ATTN_DUMPS_PYTHON)
  message(WARNING "attn-tune: no python3; the replay cross-check tests are not registered "
                  "(scripts/install-deps.sh installs what they need)")
else()
  set(replay_names ${REPLAY_GOOD} ${REPLAY_WRONG} noout_prefill_q_longer_than_k_fp16
                   noout_nan_unread noout_misnamed_answer noout_lse_alone noout_scale_in_metadata)
  foreach(entry ${REPLAY_BAD})
    string(REGEX REPLACE "\\|.*" "" name "${entry}")
    list(APPEND replay_names ${name})
  endforeach()
  add_test(NAME replay.make_dumps
           COMMAND ${ATTN_DUMPS_PYTHON} ${CMAKE_CURRENT_SOURCE_DIR}/data/make_dumps.py
                   ${REPLAY_DUMPS} --expect ${replay_names})
  set_tests_properties(replay.make_dumps PROPERTIES FIXTURES_SETUP replay_dumps LABELS "cli")

  foreach(name ${REPLAY_GOOD})
    attn_cli_test(NAME replay.good.${name} EXIT 0
                  REGEX "file out vs reference: MATCH.* bad=0 "
                  ARGS replay ${REPLAY_DUMPS}/${name}.safetensors --threads 2)
    set_tests_properties(cli.replay.good.${name} PROPERTIES FIXTURES_REQUIRED replay_dumps)
  endforeach()
  foreach(name ${REPLAY_WRONG})
    attn_cli_test(NAME replay.wrong.${name} EXIT 1
                  REGEX "file out vs reference: MISMATCH.*\n  (out|lse).row="
                  ARGS replay ${REPLAY_DUMPS}/${name}.safetensors --threads 2)
    set_tests_properties(cli.replay.wrong.${name} PROPERTIES FIXTURES_REQUIRED replay_dumps)
  endforeach()
  foreach(entry ${REPLAY_BAD})
    string(REGEX REPLACE "\\|.*" "" name "${entry}")
    string(REGEX REPLACE "^[^|]*\\|" "" regex "${entry}")
    attn_cli_test(NAME replay.bad.${name} EXIT 2 REGEX "${name}.safetensors: .*${regex}"
                  ARGS replay ${REPLAY_DUMPS}/${name}.safetensors)
    set_tests_properties(cli.replay.bad.${name} PROPERTIES FIXTURES_REQUIRED replay_dumps)
  endforeach()

  # NaN in the slots past a sequence's length (an engine's cache as it is) is no input error.
  attn_cli_test(NAME replay.nan_unread EXIT 0 REGEX "cpu decode_v1\\[\\] vs reference: MATCH"
                ARGS replay ${REPLAY_DUMPS}/noout_nan_unread.safetensors --backend cpu)
  set_tests_properties(cli.replay.nan_unread PROPERTIES FIXTURES_REQUIRED replay_dumps)

  attn_cli_test(NAME replay.misnamed_answer EXIT 0
                REGEX "holds tensors attn-tune does not read: output \\(the answer is `out`"
                ARGS replay ${REPLAY_DUMPS}/noout_misnamed_answer.safetensors)
  set_tests_properties(cli.replay.misnamed_answer PROPERTIES FIXTURES_REQUIRED replay_dumps)

  attn_cli_test(NAME replay.scale_in_metadata EXIT 0
                REGEX "has __metadata__ k_scale, which is not read: a scale is an F32 tensor of that name .*; judged with k_scale 1"
                ARGS replay ${REPLAY_DUMPS}/noout_scale_in_metadata.safetensors)
  set_tests_properties(cli.replay.scale_in_metadata PROPERTIES FIXTURES_REQUIRED replay_dumps)

  attn_cli_test(NAME replay.lse_alone EXIT 0
                REGEX "file holds lse but no out.*holds lse but no out: an answer is judged by its out"
                ARGS replay ${REPLAY_DUMPS}/noout_lse_alone.safetensors)
  set_tests_properties(cli.replay.lse_alone PROPERTIES FIXTURES_REQUIRED replay_dumps)
  # --save onto the file replayed would replace the engine's dump: refused.
  attn_cli_test(NAME replay.save_onto_itself EXIT 2
                REGEX "--save .* is the file replayed: saving there would replace the engine's dump"
                ARGS replay ${REPLAY_DUMPS}/noout_lse_alone.safetensors
                     --save ${REPLAY_DUMPS}/./noout_lse_alone.safetensors)
  set_tests_properties(cli.replay.save_onto_itself PROPERTIES FIXTURES_REQUIRED replay_dumps)

  # --save writes out and lse; the file it writes is a valid safetensors file (but no replay).
  set(save_dir ${CMAKE_CURRENT_BINARY_DIR}/cli_work/replay.save)
  attn_cli_test(NAME replay.save EXIT 0 WORKDIR ${save_dir}
                REGEX "saved out \\(bf16\\) and lse \\(fp32\\) to computed.safetensors"
                ARGS replay ${REPLAY_DUMPS}/prefill_shared_prefix_bf16.safetensors
                     --save computed.safetensors)
  set_tests_properties(cli.replay.save PROPERTIES FIXTURES_REQUIRED replay_dumps
                                                  FIXTURES_SETUP replay_saved)
  # A --save into a folder that does not exist is refused before the call is judged.
  attn_cli_test(NAME replay.save_no_folder EXIT 2
                REGEX "^attn-tune: error: --save: cannot write '/nonexistent/x.safetensors'"
                ARGS replay ${REPLAY_DUMPS}/prefill_shared_prefix_bf16.safetensors
                     --save /nonexistent/x.safetensors)
  set_tests_properties(cli.replay.save_no_folder PROPERTIES FIXTURES_REQUIRED replay_dumps)
  attn_cli_test(NAME replay.saved_is_not_a_replay EXIT 2 WORKDIR ${save_dir}
                REGEX "computed.safetensors: is what `replay --save` wrote \\(out and lse alone, no call\\): replay the file it was computed from, [^\n]*prefill_shared_prefix_bf16.safetensors"
                ARGS replay computed.safetensors)
  set_tests_properties(cli.replay.saved_is_not_a_replay PROPERTIES FIXTURES_REQUIRED replay_saved)

  # Our writer against the safetensors package: it reads what --save wrote, and the values agree
  # with the independent answer to one unit in the last place.
  foreach(name decode_gqa_scale_softcap_fp16 prefill_noncausal_q_longer_than_k_fp32)
    set(save_dir ${CMAKE_CURRENT_BINARY_DIR}/cli_work/replay.save.${name})
    attn_cli_test(NAME replay.save.${name} EXIT 0 WORKDIR ${save_dir}
                  REGEX "saved out .* to saved.safetensors"
                  ARGS replay ${REPLAY_DUMPS}/${name}.safetensors --save saved.safetensors)
    set_tests_properties(cli.replay.save.${name} PROPERTIES FIXTURES_REQUIRED replay_dumps
                                                            FIXTURES_SETUP replay_saved_${name})
    add_test(NAME replay.saved_readable.${name}
             COMMAND ${ATTN_DUMPS_PYTHON} ${CMAKE_CURRENT_SOURCE_DIR}/data/make_dumps.py
                     --compare-saved ${save_dir}/saved.safetensors
                     ${REPLAY_DUMPS}/${name}.safetensors)
    set_tests_properties(replay.saved_readable.${name} PROPERTIES
                         FIXTURES_REQUIRED "replay_dumps;replay_saved_${name}" LABELS "cli")
  endforeach()

  # The CPU backend on the same dumps: its answer and the file's both match the reference.
  foreach(name ${REPLAY_GOOD})
    attn_cli_test(NAME replay.cpu.${name} EXIT 0
                  REGEX "cpu (decode_v1|prefill).* vs reference: MATCH.* bad=0 "
                  ARGS replay ${REPLAY_DUMPS}/${name}.safetensors --backend cpu --threads 2)
    set_tests_properties(cli.replay.cpu.${name} PROPERTIES FIXTURES_REQUIRED replay_dumps)
  endforeach()
  foreach(name decode_defaults_fp32 decode_gqa_scale_softcap_fp16 decode_mqa_window_left_bf16)
    attn_cli_test(NAME replay.cpu_v2.${name} EXIT 0
                  REGEX "cpu decode_v2.partition=256,split=0. vs reference: MATCH.* bad=0 "
                  ARGS replay ${REPLAY_DUMPS}/${name}.safetensors --backend cpu --threads 2
                       --config "{\"family\":\"decode_v2\",\"params\":{\"partition\":256,\"split\":0}}")
    set_tests_properties(cli.replay.cpu_v2.${name} PROPERTIES FIXTURES_REQUIRED replay_dumps)
  endforeach()

  # Kernels run supervised: a plugin that crashes in run is a fault of each configuration it
  # crashes, named with its reason, the other configurations and the file's answer are still
  # judged, and the exit code is 1 ("worker killed by SIGSEGV"; "worker exited" under ASan).
  attn_cli_test(NAME replay.kernels_crash EXIT 1
                REGEX "cpu decode_v2.partition=512,split=0. .plugin cpu-example-crash.: FAULT: worker.*cpu decode_v2.partition=512,split=1. .plugin cpu-example-crash.: FAULT: worker.*partition=1024,split=1. .plugin cpu-example-crash. vs reference: MATCH.*file out vs reference: MATCH"
                ARGS replay ${REPLAY_DUMPS}/decode_defaults_fp32.safetensors
                     --kernels ${ATTN_CRASH_PLUGIN} --threads 2)
  set_tests_properties(cli.replay.kernels_crash PROPERTIES FIXTURES_REQUIRED replay_dumps)

  # A file without `out`: the reference's figures, exit 0.
  attn_cli_test(NAME replay.no_out EXIT 0
                REGEX "file holds no answer.*reference: out rms=.*; 16 .row, head. pairs see no key"
                ARGS replay ${REPLAY_DUMPS}/noout_prefill_q_longer_than_k_fp16.safetensors)
  set_tests_properties(cli.replay.no_out PROPERTIES FIXTURES_REQUIRED replay_dumps)

  # A backend that this build or machine does not have: exit 3 (device unavailable).
  attn_cli_test(NAME replay.backend_missing EXIT 3 REGEX "device unavailable"
                ARGS replay ${REPLAY_DUMPS}/decode_defaults_fp32.safetensors --backend cuda:99)
  set_tests_properties(cli.replay.backend_missing PROPERTIES FIXTURES_REQUIRED replay_dumps)
  # A bad forcing variable of the CPU kernels is one line, before the file's header line.
  attn_cli_test(NAME replay.cpu_fp8_reads_refused EXIT 2
                REGEX "ATTN_TUNE_CPU_FP8_READS='via-fp64' is not via-fp16, via-fp32 or auto"
                ABSENT "replay .*decode_defaults_fp32.safetensors: decode"
                ARGS replay ${REPLAY_DUMPS}/decode_defaults_fp32.safetensors --backend cpu)
  set_tests_properties(cli.replay.cpu_fp8_reads_refused PROPERTIES FIXTURES_REQUIRED replay_dumps
                       ENVIRONMENT ATTN_TUNE_CPU_FP8_READS=via-fp64)
  attn_cli_test(NAME replay.config_without_backend EXIT 2 REGEX "--config .* needs --backend"
                ARGS replay ${REPLAY_DUMPS}/decode_defaults_fp32.safetensors
                     --config {})
  set_tests_properties(cli.replay.config_without_backend PROPERTIES FIXTURES_REQUIRED replay_dumps)
  # A parameter given twice is refused, not the last one silently taken.
  set(twice "{\"family\":\"decode_v2\",\"params\":{\"partition\":512,\"partition\":256}}")
  attn_cli_test(NAME replay.config_key_twice EXIT 2
                REGEX "--config: params.partition: the key appears twice in its object"
                ARGS replay ${REPLAY_DUMPS}/decode_defaults_fp32.safetensors --backend cpu
                     --config "${twice}")
  set_tests_properties(cli.replay.config_key_twice PROPERTIES FIXTURES_REQUIRED replay_dumps)
endif()

attn_cli_test(NAME replay.missing_file EXIT 2 REGEX "no_such_file.safetensors: cannot open"
              ARGS replay no_such_file.safetensors)
attn_cli_test(NAME replay.no_file_argument EXIT 2 REGEX "file is required" ARGS replay)
attn_cli_test(NAME replay.unknown_flag EXIT 2 REGEX "--frobnicate" ARGS replay x.safetensors
              --frobnicate)
attn_cli_test(NAME replay.bad_threads EXIT 2 REGEX "--threads" ARGS replay x.safetensors
              --threads -4)
attn_cli_test(NAME replay.directory EXIT 2 REGEX "not a regular file" ARGS replay .)

# Replay files in every KV-cache layout from a second independent writer that needs numpy alone
# (tests/data/replay_layouts.py: its own safetensors writer, rearrangement and float64 reference;
# decode and prefill in HND, NHD and vllm; a wrong answer; caches that do not fit the declared
# layout). It exits 77, reported as skipped, where numpy is missing.
if(ATTN_DUMPS_PYTHON)
  add_test(NAME replay.layouts
           COMMAND ${ATTN_DUMPS_PYTHON} ${CMAKE_CURRENT_SOURCE_DIR}/data/replay_layouts.py
                   $<TARGET_FILE:attn-tune> ${CMAKE_CURRENT_BINARY_DIR}/replay_layouts
                   HND=${ATTN_CPU_EXAMPLE_PLUGIN} NHD=${ATTN_NHD_PLUGIN}
                   vllm=${ATTN_VLLM_PLUGIN})
  set_tests_properties(replay.layouts PROPERTIES LABELS "cli" SKIP_RETURN_CODE 77)
  # fp8 caches from the same independent writer (tests/data/replay_fp8.py: its own fp8 decoding
  # and quantising): E4M3 and E5M2 in every layout, F8 and U8 storage, scales per tensor and per
  # KV head, judged with the reference, the CPU kernels and a plugin of each layout (ABI 4);
  # unscaled answers and malformed files.
  add_test(NAME replay.fp8
           COMMAND ${ATTN_DUMPS_PYTHON} ${CMAKE_CURRENT_SOURCE_DIR}/data/replay_fp8.py
                   $<TARGET_FILE:attn-tune> ${CMAKE_CURRENT_BINARY_DIR}/replay_fp8
                   HND=${ATTN_CPU_EXAMPLE_PLUGIN} NHD=${ATTN_NHD_PLUGIN}
                   vllm=${ATTN_VLLM_PLUGIN})
  set_tests_properties(replay.fp8 PROPERTIES LABELS "cli" SKIP_RETURN_CODE 77)
endif()
