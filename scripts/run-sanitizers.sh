#!/usr/bin/env bash
# `make sanitize`: the C++ tests under AddressSanitizer + UndefinedBehaviorSanitizer, the
# threads' stress tests under ThreadSanitizer, and the fuzz targets' seeds plus a short fuzz run
# (the fuzz build is ASan + UBSan already). Each sanitizer has a build tree of its own with the
# CUDA backend off (the GPU is not here). Runs every part even when one fails; exits non-zero if
# any failed. Run it before resolving any change to a parser, the loader or the runtime.
# Arguments pick parts (asan, tsan, fuzz; all three when none is given):
#   scripts/run-sanitizers.sh tsan
set -uo pipefail
parts=("$@")
[[ ${#parts[@]} -gt 0 ]] || parts=(asan tsan fuzz)
for p in "${parts[@]}"; do
  [[ $p == asan || $p == tsan || $p == fuzz ]] || { echo "run-sanitizers: unknown part '$p' (asan, tsan, fuzz)" >&2; exit 2; }
done
want() { [[ " ${parts[*]} " == *" $1 "* ]]; }
build=${BUILD:-build}
venv=${VENV:-.venv}
cmake=$venv/bin/cmake
ctest_bin=$(dirname "$(readlink -f "$cmake")")/ctest
[[ -x $ctest_bin ]] || ctest_bin=$venv/bin/ctest
generator=(-G Ninja "-DCMAKE_MAKE_PROGRAM=$(readlink -f "$venv/bin/ninja")")
status=0

configure() {  # folder, flags
  local dir=$1 flags=$2
  [[ -f $dir/build.ninja ]] && return 0
  "$cmake" -S cpp -B "$dir" "${generator[@]}" -DTENSORACLE_CUDA=OFF -DCMAKE_BUILD_TYPE=RelWithDebInfo \
    "-DCMAKE_C_FLAGS=$flags" "-DCMAKE_CXX_FLAGS=$flags" "-DCMAKE_EXE_LINKER_FLAGS=$flags" \
    "-DCMAKE_SHARED_LINKER_FLAGS=$flags" >/dev/null
}

if want asan; then
echo "== AddressSanitizer + UndefinedBehaviorSanitizer: C++ tests (label gpu excluded)"
asan_flags="-fsanitize=address,undefined -fno-sanitize-recover=all -fno-omit-frame-pointer"
configure "$build/asan" "$asan_flags"
if "$cmake" --build "$build/asan"; then  # everything: ctest runs the examples and docs programs too
  # Leaks are reported too (one-time allocations of oneDNN and OpenMP are suppressed by name).
  ASAN_OPTIONS=detect_leaks=1:abort_on_error=0:check_initialization_order=1 \
  LSAN_OPTIONS=suppressions=$PWD/cpp/tests/lsan.supp:print_suppressions=0 \
  UBSAN_OPTIONS=print_stacktrace=1:halt_on_error=1 \
    "$ctest_bin" --test-dir "$build/asan" -LE gpu --output-on-failure -j2 || status=1
else
  status=1
fi
fi

if want tsan; then
echo "== ThreadSanitizer: executions of one engine on many threads"
configure "$build/tsan" "-fsanitize=thread -fno-omit-frame-pointer"
if "$cmake" --build "$build/tsan" --target tensoracle_tests; then
  # One CPU thread per execution inside the tests: libgomp is not instrumented, so its own
  # synchronisation between a team's threads would be reported; the tests' threads are ours.
  TSAN_OPTIONS=halt_on_error=1:second_deadlock_stack=1:suppressions=$PWD/cpp/tests/tsan.supp \
    "$build/tsan/tests/tensoracle_tests" --gtest_filter='EngineThreads.*:Engine.ConcurrentExecutions*' || status=1
else
  status=1
fi
fi

if want fuzz; then
echo "== fuzz targets (ASan + UBSan): seeds and a short run"
if [[ -d $build/fuzz/fuzz ]]; then
  FUZZ_SECONDS=${FUZZ_SECONDS:-60} BUILD=$build VENV=$venv scripts/run-tests.sh --fuzz-only || status=1
else
  echo "fuzz: not built (no clang)"
fi
fi
exit $status
