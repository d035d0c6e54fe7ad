# The Ray driver (python/attn_tune_ray.py) with a local Ray of two CPU actors running the quick
# profile's two shards, one actor killed mid-shard (tests/ray/test_ray_sharded.py). It runs the
# `python3` on PATH, the one scripts/install-deps.sh installs ray for, and is skipped (77) where
# ray is not importable. Its sweeps take the CPU timing lock like the other sweeps.
add_test(NAME ray.sharded_quick
         COMMAND ${CMAKE_COMMAND} -E env ATTN_TUNE_BIN=$<TARGET_FILE:attn-tune>
                 python3 ${CMAKE_CURRENT_SOURCE_DIR}/ray/test_ray_sharded.py)
set_tests_properties(ray.sharded_quick PROPERTIES LABELS "ray" SKIP_RETURN_CODE 77 TIMEOUT 900
                     RESOURCE_LOCK cpu_timing)

# The driver's fault reruns (a shard whose sweep ended with faults runs again with --resume
# --retry-faults), on a stand-in for Ray and for attn-tune: no Ray needed, under a second.
add_test(NAME ray.driver_fault_reruns
         COMMAND python3 ${CMAKE_CURRENT_SOURCE_DIR}/ray/test_ray_fault_reruns.py)
set_tests_properties(ray.driver_fault_reruns PROPERTIES LABELS "ray")

# The Slurm scripts: syntax, and sweep.sbatch run by hand with the variables a job array sets
# (tests/slurm/run_sbatch.cmake), which must run `attn-tune sweep --shard 1/3` and, in a folder
# that already holds results, add --resume; merge.sbatch must run merge over the shard folders.
add_test(NAME slurm.scripts
         COMMAND ${CMAKE_COMMAND} -DEXE=$<TARGET_FILE:attn-tune>
                 -DSRC=${PROJECT_SOURCE_DIR} -DWORK=${CMAKE_CURRENT_BINARY_DIR}/slurm_work
                 -P ${CMAKE_CURRENT_SOURCE_DIR}/slurm/run_sbatch.cmake)
set_tests_properties(slurm.scripts PROPERTIES LABELS "cli")
