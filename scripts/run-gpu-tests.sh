#!/usr/bin/env bash
# Builds tensoracle with the CUDA backend and runs the GPU tests: CTest's `gpu` label, then
# pytest's `gpu` marker (the per-layer conformance suite on cuda:0, the CUDA backend's own
# tests), then, with --all, everything else too. For a machine with an NVIDIA GPU, a CUDA 13
# toolkit with cuBLASLt, and a Python that has this package's build and test dependencies
# (torch with CUDA for the DLPack tests). Logs go to $LOGS (default build/gpu-logs).
#
#   scripts/run-gpu-tests.sh [--all] [pytest args...]
set -uo pipefail
all=0
if [[ ${1:-} == --all ]]; then all=1; shift; fi
build=${BUILD:-build/gpu}
logs=${LOGS:-build/gpu-logs}
jobs=${JOBS:-$(nproc)}
python=${PYTHON:-python3}
mkdir -p "$logs"
status=0
step() { echo "== $*"; }

step "configure + build (CUDA backend required) -> $logs/build.log"
targets=(--target tensoracle_cuda tensoracle_cuda_tests tensoracle_cli tensoracle_example_plugins example_plugins_rmsnorm)
[[ $all == 1 ]] && targets=()
if ! { cmake -S cpp -B "$build" -G Ninja -DTENSORACLE_CUDA=ON ${CUDA_ARCHS:+-DCMAKE_CUDA_ARCHITECTURES=$CUDA_ARCHS} &&
       cmake --build "$build" -j"$jobs" "${targets[@]}"; } >"$logs/build.log" 2>&1; then
  grep -E "error|Error" "$logs/build.log" | head -40
  echo "build failed"
  exit 1
fi
step "ctest -L gpu"
ctest --test-dir "$build" -L gpu --output-on-failure -j4 >"$logs/ctest-gpu.log" 2>&1 || status=1
tail -5 "$logs/ctest-gpu.log"
if [[ $all == 1 ]]; then
  step "ctest -LE gpu"
  ctest --test-dir "$build" -LE gpu -j"$jobs" >"$logs/ctest-cpu.log" 2>&1 || status=1
  tail -3 "$logs/ctest-cpu.log"
fi
step "python package -> $logs/pip.log"
if ! "$python" -m pip install --no-build-isolation --no-deps -C cmake.define.TENSORACLE_CUDA=ON \
     ${CUDA_ARCHS:+-C cmake.define.CMAKE_CUDA_ARCHITECTURES=$CUDA_ARCHS} ./python >"$logs/pip.log" 2>&1; then
  tail -30 "$logs/pip.log"
  exit 1
fi
marker="gpu"
[[ $all == 1 ]] && marker="gpu or not gpu"
step "pytest -m '$marker'"
(cd python && "$python" -m pytest -q -m "$marker" -n "${PYTEST_JOBS:-8}" tests "$@") >"$logs/pytest.log" 2>&1 || status=1
grep -E "^(FAILED|ERROR)" "$logs/pytest.log" | head -60
tail -3 "$logs/pytest.log"
exit $status
