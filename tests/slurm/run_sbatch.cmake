cmake_minimum_required(VERSION 3.20)
# Runs scripts/slurm/sweep.sbatch and merge.sbatch as Slurm would, with the SLURM_* variables of
# an array task set by hand and ATTN_TUNE a stub that records its arguments, and checks the
# commands they run. -DSRC= (source tree) -DWORK= (scratch folder) -DEXE= (attn-tune, for merge's
# real refusal of an empty OUT).
file(REMOVE_RECURSE ${WORK})
file(MAKE_DIRECTORY ${WORK}/out)
set(stub ${WORK}/attn-tune-stub)
file(WRITE ${stub} "#!/bin/sh\necho \"$@\" > ${WORK}/argv\n")
file(CHMOD ${stub} PERMISSIONS OWNER_READ OWNER_WRITE OWNER_EXECUTE)

foreach(script sweep.sbatch merge.sbatch)
  execute_process(COMMAND bash -n ${SRC}/scripts/slurm/${script} RESULT_VARIABLE rc)
  if(NOT rc EQUAL 0)
    message(FATAL_ERROR "bash -n ${script} failed")
  endif()
endforeach()

function(run_sweep_task expect_rc)
  execute_process(
    COMMAND ${CMAKE_COMMAND} -E env ATTN_TUNE=${stub} OUT=${WORK}/out PROFILE=quick DEVICE=cpu
            "SWEEP_ARGS=--threads 1" SLURM_ARRAY_TASK_ID=1 SLURM_ARRAY_TASK_COUNT=3 ${ARGN}
            bash ${SRC}/scripts/slurm/sweep.sbatch
    RESULT_VARIABLE rc OUTPUT_VARIABLE out ERROR_VARIABLE err)
  message("sweep.sbatch: exit ${rc}\n${out}${err}")
  if(NOT rc EQUAL expect_rc)
    message(FATAL_ERROR "sweep.sbatch exited ${rc}, expected ${expect_rc}")
  endif()
endfunction()

function(expect_argv want)
  file(READ ${WORK}/argv got)
  string(STRIP "${got}" got)
  if(NOT got STREQUAL want)
    message(FATAL_ERROR "ran: ${got}\nexpected: ${want}")
  endif()
endfunction()

run_sweep_task(0 SLURM_ARRAY_TASK_MIN=0)
expect_argv("sweep --shard 1/3 --profile quick --out ${WORK}/out/shard-1 --device cpu --threads 1")
# A task that runs again (requeued) resumes its folder.
file(WRITE ${WORK}/out/shard-1/results.jsonl "{\"type\": \"header\"}\n")
run_sweep_task(0)
expect_argv("sweep --shard 1/3 --profile quick --out ${WORK}/out/shard-1 --device cpu --resume --threads 1")
# An array that does not start at 0 is refused.
file(REMOVE ${WORK}/argv)
run_sweep_task(2 SLURM_ARRAY_TASK_MIN=1)
if(EXISTS ${WORK}/argv)
  message(FATAL_ERROR "sweep.sbatch ran attn-tune for an array starting at 1")
endif()

file(MAKE_DIRECTORY ${WORK}/out/shard-0 ${WORK}/out/shard-2)
execute_process(COMMAND ${CMAKE_COMMAND} -E env ATTN_TUNE=${stub} OUT=${WORK}/out
                        bash ${SRC}/scripts/slurm/merge.sbatch RESULT_VARIABLE rc)
if(NOT rc EQUAL 0)
  message(FATAL_ERROR "merge.sbatch exited ${rc}")
endif()
expect_argv("merge ${WORK}/out ${WORK}/out/shard-0 ${WORK}/out/shard-1 ${WORK}/out/shard-2")
# With the real attn-tune the shard folders above are not sweeps: merge refuses, exit 2.
execute_process(COMMAND ${CMAKE_COMMAND} -E env ATTN_TUNE=${EXE} OUT=${WORK}/out
                        bash ${SRC}/scripts/slurm/merge.sbatch
                RESULT_VARIABLE rc ERROR_VARIABLE err)
if(NOT rc EQUAL 2 OR NOT err MATCHES "has no results.jsonl|no header line")
  message(FATAL_ERROR "merge.sbatch with attn-tune: exit ${rc}: ${err}")
endif()
message("slurm scripts: ok")
