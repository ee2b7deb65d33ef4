#!/usr/bin/env bash
# Runs every test that needs no GPU: a short fuzzing pass, CTest without the `gpu` label,
# pytest without the `gpu` marker. Runs all of them even when one fails; exits non-zero if any
# failed. The last lines printed are the runners' summaries.
set -uo pipefail
build=${BUILD:-build}
venv=${VENV:-.venv}
seconds=${FUZZ_SECONDS:-30}
status=0

fuzzer=$build/fuzz/fuzz/fuzz_safetensors
if [[ -x $fuzzer ]]; then
  echo "== fuzz: safetensors parser, ${seconds}s"
  seeds=$(mktemp -d); corpus=$(mktemp -d)
  "$venv/bin/python" cpp/fuzz/make_seeds.py "$seeds" >/dev/null
  if "$fuzzer" -dict=cpp/fuzz/safetensors.dict -max_total_time="$seconds" -rss_limit_mb=2048 \
       -artifact_prefix="$build/fuzz/" "$corpus" "$seeds" >"$build/fuzz/last-run.log" 2>&1; then
    grep -E "^#[0-9]+.*(DONE|pulse)" "$build/fuzz/last-run.log" | tail -1 || true
    echo "fuzz: no crash"
  else
    tail -40 "$build/fuzz/last-run.log"
    echo "fuzz: FAILED (crashing input saved under $build/fuzz/)"
    status=1
  fi
  rm -rf "$seeds" "$corpus"
else
  echo "== fuzz: skipped (no clang; fuzz targets not built)"
fi

echo "== C++ tests (ctest, label gpu excluded)"
ctest_bin=$(dirname "$(readlink -f "$venv/bin/cmake")")/ctest
[[ -x $ctest_bin ]] || ctest_bin=$venv/bin/ctest
"$ctest_bin" --test-dir "$build/cpp" -LE gpu --output-on-failure -j2 || status=1

echo "== Python tests (pytest, marker gpu excluded)"
PATH="$(cd "$venv/bin" && pwd):$PATH" TENSORACLE_CLI="$(cd "$venv/bin" && pwd)/tensoracle" \
  "$venv/bin/python" -m pytest python/tests -m "not gpu" -q || status=1
exit $status
