// The CUDA backend's unary (kernels.h) with the CPU's semantics (backends/cpu/ops/unary.cpp):
// exact operations (rounding, sqrt, ...) bit-exact through the round-to-nearest intrinsics;
// transcendentals use CUDA's float math functions and may differ from the CPU by a few ulp.
#include <cstdint>
#include <string>
#include <type_traits>

#include "backends/common/pointwise_checks.h"
#include "backends/cuda/device_util.cuh"
#include "backends/cuda/kernels.h"
#include "backends/cuda/op_kernel.h"
#include "backends/cuda/pointwise_util.cuh"

namespace tensoracle::cuda {

namespace {

using namespace pointwise;  // pointwise_util.cuh
using U = UnaryOperation;

// ---- unary ------------------------------------------------------------------------------

// The float operations, chosen at run time (one kernel per type keeps the instantiations few;
// the branch is uniform across the grid). ROUND: rintf rounds half to even, as the CPU's
// round_half_even; SIGN gives the input itself for zeros and NaN; SQRT and RECIP are the
// correctly rounded ones, as on the CPU.
struct UnaryFloat {
  U op;
  __device__ float operator()(float v) const {
    switch (op) {
      case U::kEXP: return expf(v);
      case U::kLOG: return logf(v);
      case U::kSQRT: return __fsqrt_rn(v);
      case U::kRECIP: return __frcp_rn(v);
      case U::kABS: return fabsf(v);
      case U::kNEG: return -v;
      case U::kSIN: return sinf(v);
      case U::kCOS: return cosf(v);
      case U::kTAN: return tanf(v);
      case U::kSINH: return sinhf(v);
      case U::kCOSH: return coshf(v);
      case U::kASIN: return asinf(v);
      case U::kACOS: return acosf(v);
      case U::kATAN: return atanf(v);
      case U::kASINH: return asinhf(v);
      case U::kACOSH: return acoshf(v);
      case U::kATANH: return atanhf(v);
      case U::kCEIL: return ceilf(v);
      case U::kFLOOR: return floorf(v);
      case U::kERF: return erff(v);
      case U::kROUND: return rintf(v);
      default: return v > 0.f ? 1.f : v < 0.f ? -1.f : v;  // kSIGN (the host admits no other)
    }
  }
};
// ISINF / ISNAN of a float, to bool.
struct UnaryFloatTest {
  bool inf;  // ISINF (else ISNAN)
  __device__ bool operator()(float v) const { return inf ? fabsf(v) == __int_as_float(0x7F800000) : v != v; }
};
// ABS, NEG and SIGN of an integer; two's complement: ABS and NEG of the lowest value wrap to
// itself.
template <class I>
struct UnaryInt {
  U op;
  __device__ I operator()(I v) const {
    using UI = std::make_unsigned_t<I>;
    switch (op) {
      case U::kABS: return v < 0 ? static_cast<I>(UI{0} - static_cast<UI>(v)) : v;
      case U::kNEG: return static_cast<I>(UI{0} - static_cast<UI>(v));
      default: return static_cast<I>((v > 0) - (v < 0));  // kSIGN
    }
  }
};
struct LogicalNot {
  __device__ bool operator()(bool v) const { return !v; }
};

using backends::common::unary_name;

[[noreturn]] void unary_unsupported(U op, DataType t) { backends::common::unary_unsupported(dev::kFail, op, t); }

template <class FT>
void unary_float(U op, const TensorRef& x, const TensorRef& out, i64 n, cudaStream_t stream) {
  if (op == U::kNOT) unary_unsupported(op, x.type);
  if (n == 0) return;
  if (op == U::kISINF || op == U::kISNAN)
    launch_map<FT, BoolT>(x.data, out.data, n, UnaryFloatTest{op == U::kISINF}, stream, "unary");
  else
    launch_map<FT, FT>(x.data, out.data, n, UnaryFloat{op}, stream, "unary");
}

template <class I>
void unary_int(U op, const TensorRef& x, const TensorRef& out, i64 n, cudaStream_t stream) {
  if (op != U::kABS && op != U::kNEG && op != U::kSIGN) unary_unsupported(op, x.type);
  if (n == 0) return;
  launch_map<IntT<I>, IntT<I>>(x.data, out.data, n, UnaryInt<I>{op}, stream, "unary");
}

}  // namespace

void unary(UnaryOperation op, const TensorRef& x, const TensorRef& out, cudaStream_t stream) {
  const i64 n = backends::common::check_unary(dev::kFail, op, x, out);
  switch (x.type) {
    case DataType::kFLOAT: unary_float<F32>(op, x, out, n, stream); break;
    case DataType::kHALF: unary_float<F16>(op, x, out, n, stream); break;
    case DataType::kBF16: unary_float<BF16>(op, x, out, n, stream); break;
    case DataType::kINT32: unary_int<std::int32_t>(op, x, out, n, stream); break;
    case DataType::kINT64: unary_int<std::int64_t>(op, x, out, n, stream); break;
    case DataType::kBOOL:
      if (op != U::kNOT) fail(std::string("unary: ") + unary_name(op) + " does not take bool");
      if (n > 0) launch_map<BoolT, BoolT>(x.data, out.data, n, LogicalNot{}, stream, "unary");
      break;
    default: unary_unsupported(op, x.type);
  }
}

// ---- the node kernel's entry (op_kernel.h) -----------------------------------------------------

namespace ops {

extern const OpKernel kUnaryKernel = {LayerType::kUNARY, nullptr, nullptr, [](const OpCall& c) {
      unary(std::get<UnaryParams>(c.node.params).op, ref(c.in[0]), ref(c.out), c.stream);
    }};

}  // namespace ops

}  // namespace tensoracle::cuda
