# The CLI's basic contract: help and version succeed, `devices` reports the CPU and the GPUs or
# why there are none, and every usage error exits 2 with one stderr line that names the problem.
attn_cli_test(NAME help EXIT 0 REGEX "Usage:.*Subcommands:.*devices" ARGS --help)
attn_cli_test(NAME version EXIT 0 REGEX "^attn-tune ${PROJECT_VERSION} \\([0-9a-z]+(-dirty)?\\)" ARGS --version)
# GPUs come first, then the CPU with its thread count; without a GPU a last line says why.
attn_cli_test(NAME devices EXIT 0
              REGEX "(cuda:0 .*\ncpu +[^\n]* [0-9]+ threads|^cpu +[^\n]* [0-9]+ threads[^\n]*\nno GPU: [a-zA-Z][^\n]+)"
              ARGS devices)
attn_cli_test(NAME devices_json EXIT 0 REGEX "\"backend\": \"cpu\"" ARGS devices --json)
attn_cli_test(NAME unknown_subcommand EXIT 2 REGEX "unknown subcommand 'bogus'" ARGS bogus)
attn_cli_test(NAME unknown_root_flag EXIT 2 REGEX "unknown option '--bogus'" ARGS --bogus)
# The same one level down: the mistyped word, and what `table` would take.
attn_cli_test(NAME unknown_nested_subcommand EXIT 2
              REGEX "unknown subcommand 'showw' of 'table' \\(expected one of: show, lookup, combine\\)"
              ARGS table showw x.json)
attn_cli_test(NAME nested_subcommand_missing EXIT 2
              REGEX "'plugin' needs a subcommand: check" ARGS plugin)
attn_cli_test(NAME unknown_subcommand_flag EXIT 2 REGEX "not expected: --bogus" ARGS devices --bogus)
attn_cli_test(NAME extra_argument EXIT 2 REGEX "not expected: extra" ARGS devices extra)
attn_cli_test(NAME negative_threads EXIT 2 REGEX "--threads: Value -3 not in range" ARGS devices --threads -3)
attn_cli_test(NAME threads_not_a_number EXIT 2 REGEX "--threads" ARGS devices --threads many)
attn_cli_test(NAME no_subcommand EXIT 2 REGEX "subcommand is required" ARGS)
# A shape of 0 (or not a whole number) is one line that says what is expected.
attn_cli_test(NAME table_lookup_zero_batch EXIT 2
              REGEX "--batch: expected an integer > 0, got '0'"
              ARGS table lookup ${PROJECT_SOURCE_DIR}/python/testdata/synthetic_table.json
                   --batch 0 --context-len 2048 --num-heads 32 --num-kv-heads 8 --head-dim 128
                   --block-size 16 --dtype fp16)
