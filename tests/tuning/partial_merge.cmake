# attn_partial_merge(DIR [sweep options...]): sweeps shard 0 of 2 of ${PROFILE} on the CPU backend
# into ${WORK}/s0 with the options given, then merges it alone with --partial into DIR: a merged
# folder whose other shard never ran. For the search-check refusal scripts (-DEXE= -DPROFILE=
# -DWORK=).
function(attn_partial_merge dir)
  file(REMOVE_RECURSE "${WORK}/s0" "${dir}")
  execute_process(COMMAND ${EXE} sweep --profile "${PROFILE}" --device cpu --threads 1 --quiet
                          --no-report ${ARGN} --shard 0/2 --out "${WORK}/s0"
                  RESULT_VARIABLE rc OUTPUT_VARIABLE out ERROR_VARIABLE err)
  if(NOT rc EQUAL 0)
    message(FATAL_ERROR "sweep ${ARGN} --shard 0/2: exit ${rc}: ${out}${err}")
  endif()
  execute_process(COMMAND ${EXE} merge --partial "${dir}" "${WORK}/s0"
                  RESULT_VARIABLE rc OUTPUT_VARIABLE out ERROR_VARIABLE err)
  if(NOT rc EQUAL 0)
    message(FATAL_ERROR "merge --partial: exit ${rc}: ${out}${err}")
  endif()
endfunction()
