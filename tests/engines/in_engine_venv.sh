#!/usr/bin/env bash
# Runs a test inside an engine's virtual environment, or reports it skipped with the reason.
#   in_engine_venv.sh ENGINE VENV_VARIABLE DEFAULT_VENV PYTHON_VERSION COMMAND...
# The environment is $VENV_VARIABLE, else DEFAULT_VENV. Without it (no python, or no package
# ENGINE's module in it), or when it is of another Python version than PYTHON_VERSION (the one
# attn-tune's bridge embeds), prints why and exits 77, CTest's SKIP_RETURN_CODE for these
# tests. Otherwise runs COMMAND with VIRTUAL_ENV set and the environment's bin/ first on PATH.
set -euo pipefail
engine=$1 var=$2 default=$3 want=$4
shift 4
venv=${!var:-$default}
hint="scripts/install-deps.sh --engine $engine makes one"
if [ ! -x "$venv/bin/python" ]; then
  echo "skipped: no $engine environment at $venv ($hint; $var names another)"
  exit 77
fi
have=$("$venv/bin/python" -c 'import sys; print("%d.%d" % sys.version_info[:2])')
if [ "$have" != "$want" ]; then
  echo "skipped: $venv is Python $have, attn-tune's bridge embeds $want ($hint)"
  exit 77
fi
has_vllm='import importlib.util, sys; sys.exit(importlib.util.find_spec("vllm") is None)'
if ! "$venv/bin/python" -c "$has_vllm"; then
  echo "skipped: $venv has no vllm package ($hint)"
  exit 77
fi
export VIRTUAL_ENV=$venv
export PATH="$venv/bin:$PATH"
exec "$@"
