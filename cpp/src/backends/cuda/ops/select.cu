// The CUDA backend's select (kernels.h) with the CPU's semantics (backends/cpu/ops/select.cpp):
// condition ? then : else over a broadcast plan (pointwise_util.cuh).
#include <cstdint>
#include <string>

#include "backends/common/pointwise_checks.h"
#include "backends/cuda/device_util.cuh"
#include "backends/cuda/kernels.h"
#include "backends/cuda/op_kernel.h"
#include "backends/cuda/pointwise_util.cuh"

namespace tensoracle::cuda {

namespace {

using namespace pointwise;  // pointwise_util.cuh

// ---- select -----------------------------------------------------------------------------

// o = cond ? a : b on raw elements of T (1, 2, 4 or 8 bytes); any non-zero condition byte is true.
template <class T>
__global__ void select_kernel(const std::uint8_t* cond, const T* a, const T* b, T* o, i64 n, Plan<3> p) {
  if (p.rank == 1) {
    const i64 sc = p.s[0][0], sa = p.s[1][0], sb = p.s[2][0];
    for (i64 i = first_index(); i < n; i += grid_step()) o[i] = cond[i * sc] ? a[i * sa] : b[i * sb];
  } else {
    for (i64 i = first_index(); i < n; i += grid_step()) {
      i64 off[3];
      plan_offsets(i, p, off);
      o[i] = cond[off[0]] ? a[off[1]] : b[off[2]];
    }
  }
}

template <class T>
void launch_select(const TensorRef& c, const TensorRef& a, const TensorRef& b, const TensorRef& out, i64 n,
                   const Plan<3>& p, cudaStream_t stream) {
  select_kernel<T><<<blocks_for(n), kThreads, 0, stream>>>(static_cast<const std::uint8_t*>(c.data),
                                                          static_cast<const T*>(a.data), static_cast<const T*>(b.data),
                                                          static_cast<T*>(out.data), n, p);
  check_launch("select");
}

}  // namespace

void select(const TensorRef& condition, const TensorRef& then_input, const TensorRef& else_input, const TensorRef& out,
            cudaStream_t stream) {
  const i64 n = backends::common::check_select(dev::kFail, condition, then_input, else_input, out);
  if (n == 0) return;
  const Dims* const ins[3] = {&condition.dims, &then_input.dims, &else_input.dims};
  const Plan<3> p = make_plan(ins, out.dims);
  switch (element_size(out.type)) {
    case 1: launch_select<std::uint8_t>(condition, then_input, else_input, out, n, p, stream); break;
    case 2: launch_select<std::uint16_t>(condition, then_input, else_input, out, n, p, stream); break;
    case 4: launch_select<std::uint32_t>(condition, then_input, else_input, out, n, p, stream); break;
    case 8: launch_select<std::uint64_t>(condition, then_input, else_input, out, n, p, stream); break;
    default: fail("select: unsupported element size " + std::to_string(element_size(out.type)));
  }
}

// ---- the node kernel's entry (op_kernel.h) -----------------------------------------------------

namespace ops {

extern const OpKernel kSelectKernel = {LayerType::kSELECT, nullptr, nullptr, [](const OpCall& c) {
      select(ref(c.in[0]), ref(c.in[1]), ref(c.in[2]), ref(c.out), c.stream);
    }};

}  // namespace ops

}  // namespace tensoracle::cuda
