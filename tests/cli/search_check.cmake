# `attn-tune search-check` end to end on the CPU backend (issue 30, point 3): a small decode grid
# swept exhaustively, adaptively and exhaustively again (--control), its report written with every figure the docs promise
# (docs/adaptive-search.md), the search replayed on the exhaustive folder, and the one-line
# refusals. The grid is small and the timing short: the test checks the command, not the goals.
if(EXISTS ${PROJECT_SOURCE_DIR}/src/backends/cpu/cpu_backend.cpp)
  set(sc_work ${CMAKE_CURRENT_BINARY_DIR}/cli_work/search_check)
  set(sc_profile ${CMAKE_CURRENT_BINARY_DIR}/cli_data/search_check_profile.json)
  file(WRITE ${sc_profile}
       "{\"name\": \"search-check-small\", \"decode\": {\"batch\": [1, 2],\n"
       " \"context_len\": [64, 256, 1024], \"num_kv_heads\": [1], \"gqa_ratio\": [2],\n"
       " \"head_dim\": [32], \"block_size\": [16], \"dtype\": [\"fp32\"]},\n"
       " \"timing\": {\"warmup\": 1, \"min_reps\": 3, \"max_reps\": 5, \"max_seconds\": 0.01}}\n")
  add_test(NAME cli.search_check_clean COMMAND ${CMAKE_COMMAND} -E rm -rf ${sc_work}/out)
  set_tests_properties(cli.search_check_clean PROPERTIES LABELS "cli"
                                                         FIXTURES_SETUP search_check_clean)
  string(CONCAT sc_regex
         "exhaustive 48 measurements.*"
         "kernel calls, races included: timed repetitions [0-9]+ of [0-9]+.*"
         "the [0-9]+ pairs both sweeps timed in full: adaptive/exhaustive time median [0-9.]+.*"
         "adaptive table: v1/v2 decision agrees at [0-9]+ of 6 points.*"
         "adaptive table, regret at the 6 grid points: mean [0-9.]+%.*held-out points: none; "
         "beyond the exhaustive table's regret at each point: mean [0-9.]+%.*"
         "replayed search measures.*"
         "control: a second exhaustive sweep of 48 measurements in [0-9.]+ s.*"
         "control .*control: the 48 pairs both exhaustive sweeps timed: control/first time "
         "median [0-9.]+.*"
         "control table \\(the second exhaustive sweep's, on the first's timings\\): v1/v2 "
         "decision agrees at [0-9]+ of 6 points.*"
         "exhaustive table on the control's timings: v1/v2 decision agrees at [0-9]+ of 6 points.*"
         "adaptive table on the control's timings: v1/v2 decision agrees at [0-9]+ of 6 points.*"
         "control: an exhaustive sweep's table on the other exhaustive sweep's timings loses mean "
         "[0-9.]+%, worst [0-9.]+% \\(the larger of the two ways round\\): the regret goals .*"
         "(hold across two sweeps of this machine|are missed by measuring everything again).*"
         "control: the search replayed on the two exhaustive sweeps pooled \\(each pair's faster "
         "median: a disturbance only slows a timing\\) measures [0-9]+ of 48.*"
         "pooled exhaustive table \\(on the pooled timings\\): v1/v2 decision agrees at "
         "[0-9]+ of 6 points.*"
         "pooled replay \\(on the pooled timings\\): v1/v2 decision agrees at [0-9]+ of 6 "
         "points.*pooled replay, regret at the 6 grid points.*"
         "control: the adaptive table on the first sweep's timings loses mean [0-9.]+%, worst "
         "[0-9.]+%: (within|beyond) the floor.*"
         "goals \\(measurements <= 35.0%, time <= 40.0%, regret mean <= 1.0%, worst <= 3.0%\\): "
         "(met|missed: [a-z ]+ [0-9.]+%).*"
         "the same goals with the regret beyond the exhaustive table's at each point: "
         "(met|missed).*report .*search_check\\.json")
  attn_cli_test(NAME search_check_cpu EXIT 0 REGEX "${sc_regex}"
                WORKDIR ${sc_work}
                ARGS search-check --device cpu --profile ${sc_profile} --threads 1 --quiet
                     --control --out out)
  set_tests_properties(cli.search_check_cpu PROPERTIES FIXTURES_REQUIRED search_check_clean
                                                       FIXTURES_SETUP search_check_out
                                                       RESOURCE_LOCK cpu_timing)
  # The report holds what the output said, for tools.
  add_test(NAME cli.search_check_report
           COMMAND ${CMAKE_COMMAND} -DREPORT=${sc_work}/out/search_check.json
                   -P ${CMAKE_CURRENT_SOURCE_DIR}/tuning/search_check_report.cmake)
  set_tests_properties(cli.search_check_report PROPERTIES LABELS "cli"
                                                          FIXTURES_REQUIRED search_check_out)
  string(CONCAT sc_replay_regex
         "the search replayed on .*exhaustive/results\\.jsonl: [0-9]+ of its 48 measurements.*"
         "replayed table: v1/v2 decision agrees at [0-9]+ of 6 points.*"
         "replayed table, regret at the 6 grid points")
  attn_cli_test(NAME search_check_replay EXIT 0 REGEX "${sc_replay_regex}"
                WORKDIR ${sc_work}
                ARGS search-check --replay out/exhaustive --out out/replayed)
  attn_cli_test(NAME search_check_out_exists EXIT 2
                REGEX "exists: search-check starts its sweeps afresh" WORKDIR ${sc_work}
                ARGS search-check --device cpu --profile ${sc_profile} --quiet --out out)
  attn_cli_test(NAME search_check_replay_adaptive EXIT 2 REGEX "needs an exhaustive one"
                WORKDIR ${sc_work} ARGS search-check --replay out/adaptive)
  set_tests_properties(cli.search_check_replay cli.search_check_out_exists
                       cli.search_check_replay_adaptive
                       PROPERTIES FIXTURES_REQUIRED search_check_out)
  set_tests_properties(cli.search_check_replay PROPERTIES FIXTURES_SETUP search_check_replayed)
  # An adaptive sweep already made, judged against the exhaustive one without sweeping; the
  # refusals: an exhaustive folder given as the adaptive one, an adaptive search not finished, a
  # sweep of another profile, a --partial merge (tuning/judge_adaptive.cmake), and --adaptive
  # without --replay.
  string(CONCAT sc_judge_regex
         "the adaptive sweep out/adaptive/results\\.jsonl: [0-9]+ of the exhaustive sweep's 48 "
         "measurements \\([0-9.]+%, goal <= 35.0%\\).*time not judged.*"
         "adaptive table: v1/v2 decision agrees at [0-9]+ of 6 points.*"
         "adaptive table, regret at the 6 grid points.*"
         "the adaptive sweep's judgement out/judged/adaptive_judgement\\.json")
  attn_cli_test(NAME search_check_judge_adaptive EXIT 0 REGEX "${sc_judge_regex}"
                WORKDIR ${sc_work}
                ARGS search-check --replay out/exhaustive --adaptive out/adaptive --out out/judged)
  attn_cli_test(NAME search_check_judge_exhaustive EXIT 2
                REGEX "is an exhaustive sweep's: --adaptive needs an adaptive one"
                WORKDIR ${sc_work}
                ARGS search-check --replay out/exhaustive --adaptive out/exhaustive)
  attn_cli_test(NAME search_check_adaptive_alone EXIT 2 REGEX "--adaptive requires --replay"
                WORKDIR ${sc_work} ARGS search-check --adaptive out/adaptive)
  add_test(NAME cli.search_check_judge_refusals
           COMMAND ${CMAKE_COMMAND} -DEXE=$<TARGET_FILE:attn-tune>
                   -DEXHAUSTIVE=${sc_work}/out/exhaustive -DADAPTIVE=${sc_work}/out/adaptive
                   -DWORK=${sc_work}/judge -DPROFILE=${sc_profile}
                   -P ${CMAKE_CURRENT_SOURCE_DIR}/tuning/judge_adaptive.cmake)
  set_tests_properties(cli.search_check_judge_adaptive cli.search_check_judge_exhaustive
                       cli.search_check_adaptive_alone
                       PROPERTIES FIXTURES_REQUIRED search_check_out)
  set_tests_properties(cli.search_check_judge_adaptive PROPERTIES FIXTURES_SETUP search_check_judged)
  set_tests_properties(cli.search_check_judge_refusals PROPERTIES
                       LABELS "cli" FIXTURES_REQUIRED "search_check_out;search_check_judged")
  add_test(NAME cli.search_check_replayed_lines
           COMMAND ${CMAKE_COMMAND} -DEXE=$<TARGET_FILE:attn-tune>
                   -DREPLAYED=${sc_work}/out/replayed -DEXHAUSTIVE=${sc_work}/out/exhaustive
                   -DWORK=${sc_work}/stopped -DPROFILE=${sc_profile}
                   -P ${CMAKE_CURRENT_SOURCE_DIR}/tuning/replayed_results.cmake)
  set_tests_properties(cli.search_check_replayed_lines
                       PROPERTIES LABELS "cli" FIXTURES_REQUIRED "search_check_out;search_check_replayed")
  # The control sweep already made, judged against the exhaustive one without sweeping, with the
  # adaptive sweep on its timings; --control is for a run that sweeps; the refusals and a sweep
  # judged on a copy of itself (tuning/judge_control.cmake).
  string(CONCAT sc_control_regex
         "control out/control/results\\.jsonl: the 48 pairs both exhaustive sweeps timed.*"
         "control table \\(the second exhaustive sweep's, on the first's timings\\): v1/v2 "
         "decision agrees at [0-9]+ of 6 points.*"
         "adaptive table on the control's timings, regret at the 6 grid points.*"
         "control: an exhaustive sweep's table on the other exhaustive sweep's timings loses.*"
         "control: the search replayed on the two exhaustive sweeps pooled .*measures [0-9]+ of "
         "48.*pooled replay \\(on the pooled timings\\).*"
         "control: the adaptive table on the first sweep's timings loses .*the floor.*"
         "the control's judgement out/controlled/control_judgement\\.json")
  attn_cli_test(NAME search_check_judge_control EXIT 0 REGEX "${sc_control_regex}"
                WORKDIR ${sc_work}
                ARGS search-check --replay out/exhaustive --adaptive out/adaptive
                     --replay-control out/control --out out/controlled)
  attn_cli_test(NAME search_check_control_replay EXIT 2 REGEX "--replay excludes --control"
                WORKDIR ${sc_work} ARGS search-check --replay out/exhaustive --control)
  add_test(NAME cli.search_check_control_refusals
           COMMAND ${CMAKE_COMMAND} -DEXE=$<TARGET_FILE:attn-tune>
                   -DEXHAUSTIVE=${sc_work}/out/exhaustive -DADAPTIVE=${sc_work}/out/adaptive
                   -DWORK=${sc_work}/control
                   -P ${CMAKE_CURRENT_SOURCE_DIR}/tuning/judge_control.cmake)
  set_tests_properties(cli.search_check_judge_control cli.search_check_control_replay
                       PROPERTIES FIXTURES_REQUIRED search_check_out)
  set_tests_properties(cli.search_check_control_refusals
                       PROPERTIES LABELS "cli" FIXTURES_REQUIRED search_check_out)
endif()
