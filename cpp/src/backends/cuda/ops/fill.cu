// The CUDA backend's fill (kernels.h): each element's value from backends/common/fill.h (as the
// CPU computes it), rounded to the output type once; one thread per element. Alpha and beta
// given as tensors are read on the device.
#include <cuda_bf16.h>
#include <cuda_fp16.h>

#include <cstdint>

#include "backends/common/fill.h"
#include "backends/cuda/device_util.cuh"
#include "backends/cuda/kernels.h"
#include "backends/cuda/op_kernel.h"
#include "backends/cuda/pointwise_util.cuh"

namespace tensoracle::cuda {

namespace {

using namespace pointwise;  // pointwise_util.cuh
using backends::common::FillShape;
namespace fill = backends::common::fill;

// The parameters a kernel reads: the layer's own numbers, or (dynamic) the tensors' addresses.
struct FillArgs {
  FillOperation op;
  double alpha, beta, steps[Dims::kMaxRank];
  std::int64_t ialpha, isteps[Dims::kMaxRank];
  const void* alpha_in;  // null: the numbers above
  const void* beta_in;
};

template <class T>
__device__ double as_double(T v) {
  if constexpr (std::is_same_v<T, __half>) return static_cast<double>(__half2float(v));
  else if constexpr (std::is_same_v<T, __nv_bfloat16>) return static_cast<double>(__bfloat162float(v));
  else return static_cast<double>(v);
}

template <class T>
__device__ T from_double(double v) {
  if constexpr (std::is_same_v<T, __half>) return __double2half(v);
  else if constexpr (std::is_same_v<T, __nv_bfloat16>) return __double2bfloat16(v);
  else return static_cast<T>(v);
}

template <class T>
__global__ void fill_float_kernel(T* y, FillShape s, FillArgs a) {
  double alpha = a.alpha, beta = a.beta, steps[Dims::kMaxRank];
  for (int k = 0; k < s.rank; ++k) steps[k] = a.steps[k];
  if (a.alpha_in != nullptr) {
    alpha = as_double(*static_cast<const T*>(a.alpha_in));
    const auto* b = static_cast<const T*>(a.beta_in);
    if (a.op == FillOperation::kLINSPACE) {
      for (int k = 0; k < s.rank; ++k) steps[k] = as_double(b[k]);
    } else {
      beta = as_double(b[0]);
    }
  }
  for (i64 e = first_index(); e < s.n; e += grid_step()) {
    double v;
    if (a.op == FillOperation::kLINSPACE) v = fill::linspace<double>(e, s.rank, s.dims, alpha, steps);
    else if (a.op == FillOperation::kRANDOM_UNIFORM) v = fill::uniform(e, alpha, beta);
    else v = fill::normal(e, alpha, beta);
    y[e] = from_double<T>(v);
  }
}

template <class I>
__global__ void fill_int_kernel(I* y, FillShape s, FillArgs a) {
  std::int64_t alpha = a.ialpha, steps[Dims::kMaxRank];
  for (int k = 0; k < s.rank; ++k) steps[k] = a.isteps[k];
  if (a.alpha_in != nullptr) {
    alpha = *static_cast<const I*>(a.alpha_in);
    for (int k = 0; k < s.rank; ++k) steps[k] = static_cast<const I*>(a.beta_in)[k];
  }
  for (i64 e = first_index(); e < s.n; e += grid_step())
    y[e] = static_cast<I>(fill::linspace<std::int64_t>(e, s.rank, s.dims, alpha, steps));
}

}  // namespace

void fill_tensor(const FillParams& p, const TensorRef* alpha, const TensorRef* beta, const TensorRef& out,
                 cudaStream_t stream) {
  const FillShape s = backends::common::check_fill(dev::kFail, p, alpha, beta, out);
  if (s.n == 0) return;
  FillArgs a{};
  a.op = p.op;
  a.alpha = p.alpha;
  a.beta = p.beta;
  a.steps[0] = p.beta;
  a.ialpha = static_cast<std::int64_t>(p.alpha);
  a.isteps[0] = static_cast<std::int64_t>(p.beta);
  a.alpha_in = s.dynamic ? alpha->data : nullptr;
  a.beta_in = s.dynamic ? beta->data : nullptr;
  const unsigned blocks = blocks_for(s.n);
  switch (out.type) {
    case DataType::kFLOAT: fill_float_kernel<float><<<blocks, kThreads, 0, stream>>>(static_cast<float*>(out.data), s, a); break;
    case DataType::kHALF: fill_float_kernel<__half><<<blocks, kThreads, 0, stream>>>(static_cast<__half*>(out.data), s, a); break;
    case DataType::kBF16:
      fill_float_kernel<__nv_bfloat16><<<blocks, kThreads, 0, stream>>>(static_cast<__nv_bfloat16*>(out.data), s, a);
      break;
    case DataType::kINT32:
      fill_int_kernel<std::int32_t><<<blocks, kThreads, 0, stream>>>(static_cast<std::int32_t*>(out.data), s, a);
      break;
    default: fill_int_kernel<std::int64_t><<<blocks, kThreads, 0, stream>>>(static_cast<std::int64_t*>(out.data), s, a);
  }
  check_launch("fill");
}

namespace ops {

extern const OpKernel kFillKernel = {LayerType::kFILL, nullptr, nullptr, [](const OpCall& c) {
      const bool dynamic = c.node.inputs.size() == 2;
      const TensorRef a = dynamic ? ref(c.in[0]) : TensorRef{}, b = dynamic ? ref(c.in[1]) : TensorRef{};
      fill_tensor(std::get<FillParams>(c.node.params), dynamic ? &a : nullptr, dynamic ? &b : nullptr, ref(c.out), c.stream);
    }};

}  // namespace ops

}  // namespace tensoracle::cuda
