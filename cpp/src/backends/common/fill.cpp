// The fill layer's host-side checks for both backends (fill.h).
#include "backends/common/fill.h"

#include <string>

namespace tensoracle::backends::common {

FillShape check_fill(const Fail& fail, const FillParams& p, const TensorRef* alpha, const TensorRef* beta,
                     const TensorRef& out) {
  FillShape s;
  s.n = checked_volume(fail, out, "fill", "the output");
  if (!(out.dims == p.dims) || out.type != p.to)
    fail("fill: the output " + desc(out) + " must be " + tn(p.to) + p.dims.str());
  const bool linspace = p.op == FillOperation::kLINSPACE;
  const bool float_out = out.type == DataType::kFLOAT || out.type == DataType::kHALF || out.type == DataType::kBF16;
  const bool int_out = out.type == DataType::kINT32 || out.type == DataType::kINT64;
  if (!linspace && p.op != FillOperation::kRANDOM_UNIFORM && p.op != FillOperation::kRANDOM_NORMAL)
    fail("fill: unknown operation " + num(static_cast<i64>(p.op)));
  if (!float_out && !(linspace && int_out)) fail("fill: cannot make " + tn(out.type) + " values");
  s.rank = out.dims.rank();
  for (int k = 0; k < s.rank; ++k) s.dims[k] = out.dims[k];
  if ((alpha == nullptr) != (beta == nullptr)) fail("fill: alpha and beta are both tensors or neither");
  s.dynamic = alpha != nullptr;
  if (s.dynamic) {
    checked_volume(fail, *alpha, "fill", "alpha");
    const i64 nb = checked_volume(fail, *beta, "fill", "beta");
    if (alpha->type != out.type || alpha->dims.rank() != 0) fail("fill: alpha " + desc(*alpha) + " must be a 0-D " + tn(out.type));
    if (beta->type != out.type || (linspace ? beta->dims.rank() != 1 || nb != s.rank : beta->dims.rank() != 0))
      fail("fill: beta " + desc(*beta) + " must be " + (linspace ? "[" + num(s.rank) + "]" : std::string("0-D")) + " " +
           tn(out.type));
  } else if (linspace && s.rank > 1) {
    fail("fill: a linspace of rank " + num(s.rank) + " needs beta as a tensor (one step per dim)");
  }
  return s;
}

}  // namespace tensoracle::backends::common
