#!/usr/bin/env bash
# Runs every test that needs no GPU: a short fuzzing pass, CTest without the `gpu` label,
# pytest without the `gpu` marker. Runs all of them even when one fails; exits non-zero if any
# failed. The last lines printed are the runners' summaries. `--fuzz-only` stops after fuzzing.
set -uo pipefail
build=${BUILD:-build}
venv=${VENV:-.venv}
seconds=${FUZZ_SECONDS:-30}
status=0

# Fuzzing: the seconds are shared by the targets that were built (the safetensors parser, the
# .pth converter's pickle machine, whole .pth archives, the .npy/.npz readers of `compare`,
# the cubin reader, the CUDA backend's cuDNN tactics, an engine file's plan document),
# each with a seed corpus written by a script and a fresh corpus folder.
fuzz_dir=$build/fuzz/fuzz
run_fuzzer() {  # name, dictionary, seconds, seed folder
  local name=$1 dict=$2 secs=$3 seeds=$4 corpus
  corpus=$(mktemp -d)
  echo "== fuzz: $name, ${secs}s"
  local extra=()  # the plan target's mutator lengthens documents past the seed's size
  [[ $name == fuzz_engine_plan ]] && extra=(-max_len=65536)
  if "$fuzz_dir/$name" ${dict:+-dict="$dict"} "${extra[@]}" -max_total_time="$secs" -rss_limit_mb=2048 \
       -artifact_prefix="$build/fuzz/$name-" "$corpus" "$seeds" >"$build/fuzz/$name.log" 2>&1; then
    grep -E "^#[0-9]+.*(DONE|pulse)" "$build/fuzz/$name.log" | tail -1 || true
    echo "fuzz: $name: no crash"
  else
    tail -40 "$build/fuzz/$name.log"
    echo "fuzz: $name: FAILED (crashing input saved under $build/fuzz/)"
    status=1
  fi
  rm -rf "$corpus"
}
targets=()  # name:dictionary:seed folder (under $seeds)
[[ -x $fuzz_dir/fuzz_safetensors ]] && targets+=("fuzz_safetensors:cpp/fuzz/safetensors.dict:safetensors")
[[ -x $fuzz_dir/fuzz_pickle ]] && targets+=("fuzz_pickle:cpp/fuzz/pickle.dict:pth/pickle")
[[ -x $fuzz_dir/fuzz_pth ]] && targets+=("fuzz_pth:cpp/fuzz/pth.dict:pth/pth")
[[ -x $fuzz_dir/fuzz_npy ]] && targets+=("fuzz_npy:cpp/fuzz/npy.dict:npy")
[[ -x $fuzz_dir/fuzz_cubin ]] && targets+=("fuzz_cubin::cubin")
[[ -x $fuzz_dir/fuzz_tactic ]] && targets+=("fuzz_tactic:cpp/fuzz/tactic.dict:tactic")
[[ -x $fuzz_dir/fuzz_engine_plan ]] && targets+=("fuzz_engine_plan:cpp/fuzz/engine_plan.dict:engine_plan")
[[ -x $fuzz_dir/fuzz_onnx ]] && targets+=("fuzz_onnx:cpp/fuzz/onnx.dict:onnx")
if (( ${#targets[@]} > 0 )); then
  share=$(( seconds / ${#targets[@]} > 0 ? seconds / ${#targets[@]} : 1 ))
  seeds=$(mktemp -d)
  "$venv/bin/python" cpp/fuzz/make_seeds.py "$seeds/safetensors" >/dev/null
  "$venv/bin/python" cpp/fuzz/make_pth_seeds.py "$seeds/pth" >/dev/null
  "$venv/bin/python" cpp/fuzz/make_npy_seeds.py "$seeds/npy" >/dev/null
  "$venv/bin/python" cpp/fuzz/make_cubin_seeds.py "$seeds/cubin" >/dev/null
  "$venv/bin/python" cpp/fuzz/make_onnx_seeds.py "$seeds/onnx" >/dev/null
  mkdir -p "$seeds/tactic"  # tactics as the builder writes them (graph/tactic.h)
  printf '%s' '{"kernel":"cuda.convolution.cudnn","type":"float16","x":[32,64,56,56],"w":[64,64,3,3],"y":[32,64,56,56],"stride":[1,1],"dilation":[1,1],"pre":[1,1],"post":[1,1],"accumulate":true,"channels_last":0,"engine":62,"knobs":[[2,4],[13,0],[18,0],[25,1],[27,7],[28,1]],"workspace":4096}' >"$seeds/tactic/2d"
  printf '%s' '{"kernel":"cuda.convolution.cudnn","type":"float32","x":[1,4,6,7,8],"w":[8,4,3,3,3],"y":[1,8,6,7,8],"stride":[1,1,1],"dilation":[1,1,1],"pre":[1,1,1],"post":[1,1,1],"accumulate":false,"channels_last":0,"engine":7,"knobs":[],"workspace":0}' >"$seeds/tactic/3d"
  printf '%s' '{"kernel":"cuda.convolution.cudnn","type":"float16","x":[64,3,224,224],"w":[64,3,7,7],"y":[64,64,112,112],"stride":[2,2],"dilation":[1,1],"pre":[3,3],"post":[3,3],"accumulate":false,"channels_last":4,"engine":"direct","knobs":[],"workspace":0}' >"$seeds/tactic/direct"
  printf '%s' "{\"kernel\":\"cuda.gemm.cublaslt\",\"precision\":\"fp8\",\"epilogue_ops\":1,\"algo\":\"$(printf '0%.0s' {1..64})$(printf 'a1%.0s' {1..32})\",\"workspace\":1048320}" >"$seeds/tactic/gemm"
  printf '%s' '{"kernel":"cuda.gemm.cublaslt","precision":"native","epilogue_ops":2,"algo":"","workspace":null}' >"$seeds/tactic/gemm-plain"
  printf '%s' '{"kernel":"cuda.gemm.sm90.fp8","epilogue_ops":3}' >"$seeds/tactic/gemm-fused-fp8"
  printf '%s' '{"kernel":"cpu.gemm.onednn"}' >"$seeds/tactic/named"
  # the engine plan target's seed is its own network's plan (it must name that network's constants)
  [[ -x $fuzz_dir/fuzz_engine_plan ]] && TENSORACLE_FUZZ_WRITE_SEEDS="$seeds/engine_plan" "$fuzz_dir/fuzz_engine_plan" -runs=0 >/dev/null 2>&1
  for t in "${targets[@]}"; do
    IFS=: read -r name dict folder <<<"$t"
    run_fuzzer "$name" "$dict" "$share" "$seeds/$folder"
  done
  rm -rf "$seeds"
else
  echo "== fuzz: skipped (no clang; fuzz targets not built)"
fi

[[ ${1:-} == --fuzz-only ]] && exit $status  # scripts/run-sanitizers.sh: the fuzzing part only

echo "== C++ tests (ctest, label gpu excluded)"
ctest_bin=$(dirname "$(readlink -f "$venv/bin/cmake")")/ctest
[[ -x $ctest_bin ]] || ctest_bin=$venv/bin/ctest
"$ctest_bin" --test-dir "$build/cpp" -LE gpu --output-on-failure -j2 || status=1

echo "== Python tests (pytest, marker gpu excluded)"
PATH="$(cd "$venv/bin" && pwd):$PATH" TENSORACLE_CLI="$(cd "$venv/bin" && pwd)/tensoracle" \
  "$venv/bin/python" -m pytest python/tests -m "not gpu" -q || status=1
exit $status
