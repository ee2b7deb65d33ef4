// The CUDA backend's matrix-multiply kernels beside its GEMMs (gemm.cpp, fp8_gemm.cu):
// scale_accumulator, an int8 GEMM's int32 sums scaled (and biased) into a float output.
#include <cstdint>

#include "backends/cuda/device_util.cuh"
#include "backends/cuda/kernels.h"
#include "backends/cuda/pointwise_util.cuh"

namespace tensoracle::cuda {

namespace {

using namespace pointwise;  // pointwise_util.cuh

// o[i] = Out::store(float(acc[i]) * (scale_a * scale_b)): an int8 GEMM's int32 sums, scaled.
// With a bias row (`columns` values), o[i] = Out::store(Out::load(o[i]) + bias[i % columns]).
template <class Out>
__global__ void scale_accumulator_kernel(const std::int32_t* acc, typename Out::T* o, i64 n, const float* scale_a,
                                         const float* scale_b, const typename Out::T* bias, i64 columns) {
  const float sc = __fmul_rn(*scale_a, *scale_b);
  for (i64 i = first_index(); i < n; i += grid_step()) {
    typename Out::T y = Out::store(__fmul_rn(static_cast<float>(acc[i]), sc));
    if (bias) {
      i64 row, col;
      divmod(i, columns, row, col);
      y = Out::store(__fadd_rn(Out::load(y), Out::load(bias[col])));
    }
    o[i] = y;
  }
}

}  // namespace

void scale_accumulator(const TensorRef& acc, const void* scale_a, const void* scale_b, const void* bias,
                       const TensorRef& out, cudaStream_t stream) {
  const i64 n = checked_volume(acc, "scale_accumulator", "the sums");
  if (checked_volume(out, "scale_accumulator", "the output") != n || acc.type != DataType::kINT32)
    fail("scale_accumulator: sums " + desc(acc) + " and output " + desc(out) + " must be int32 and of equal volume");
  const i64 columns = out.dims.rank() > 0 ? out.dims[out.dims.rank() - 1] : 1;
  if (bias && columns < 1) fail("scale_accumulator: a bias row for output " + desc(out) + " without columns");
  const bool ok = dev::with_float(out.type, [&](auto tag) {
    using Out = decltype(tag);
    if (n == 0) return;
    scale_accumulator_kernel<Out><<<blocks_for(n), kThreads, 0, stream>>>(
        static_cast<const std::int32_t*>(acc.data), static_cast<typename Out::T*>(out.data), n,
        static_cast<const float*>(scale_a), static_cast<const float*>(scale_b),
        static_cast<const typename Out::T*>(bias), columns);
    check_launch("scale_accumulator");
  });
  if (!ok) fail("scale_accumulator: the output must be float32, float16 or bfloat16, not " + tn(out.type));
}

}  // namespace tensoracle::cuda
