# An active virtual environment is honoured: a module installed only in a venv (made from the
# bridge's own Python, without pip) is found when VIRTUAL_ENV names it, and not otherwise.
# -DEXE=attn-tune -DPYTHON=the bridge's interpreter -DWORK=folder
cmake_minimum_required(VERSION 3.20)
file(REMOVE_RECURSE ${WORK})
execute_process(COMMAND ${PYTHON} -m venv --system-site-packages --without-pip ${WORK}/venv
                RESULT_VARIABLE rc)
if(NOT rc EQUAL 0)
  message(FATAL_ERROR "cannot make a virtual environment with ${PYTHON}")
endif()
file(GLOB site ${WORK}/venv/lib/python3*/site-packages)
file(WRITE ${site}/venv_only_kernels.py
     "from attn_tune_torch import attn_tune_kernels  # attn-tune's own, under another name\n")
set(ENV{VIRTUAL_ENV} ${WORK}/venv)
execute_process(COMMAND ${EXE} plugin check python:venv_only_kernels --threads 1
                RESULT_VARIABLE rc OUTPUT_VARIABLE out ERROR_VARIABLE err)
message("with VIRTUAL_ENV: exit ${rc}\n${out}${err}")
if(NOT rc EQUAL 0 OR NOT out MATCHES "Python module venv_only_kernels \\([^)]*site-packages")
  message(FATAL_ERROR "the module in the active virtual environment was not used")
endif()
unset(ENV{VIRTUAL_ENV})
execute_process(COMMAND ${EXE} plugin check python:venv_only_kernels --threads 1
                RESULT_VARIABLE rc OUTPUT_VARIABLE out ERROR_VARIABLE err)
message("without: exit ${rc}\n${out}${err}")
if(NOT rc EQUAL 2 OR NOT err MATCHES "no module named 'venv_only_kernels'")
  message(FATAL_ERROR "without VIRTUAL_ENV the module should not be found")
endif()
