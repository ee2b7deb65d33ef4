// The CPU backend's fill (kernels.h): each element's value from backends/common/fill.h, rounded
// to the output type once.
#include <cstdint>

#include "backends/common/fill.h"
#include "backends/cpu/index_util.h"
#include "backends/cpu/kernels.h"
#include "backends/cpu/kernels_util.h"
#include "backends/cpu/op_kernel.h"

namespace tensoracle::cpu {

namespace {

namespace fill = backends::common::fill;

// A 0-D or 1-D tensor's element i as double (float types) or int64.
double load_double(const TensorRef& t, std::int64_t i) {
  switch (t.type) {
    case DataType::kFLOAT: return indexing::load_f<DataType::kFLOAT>(t.data, i);
    case DataType::kHALF: return indexing::load_f<DataType::kHALF>(t.data, i);
    case DataType::kBF16: return indexing::load_f<DataType::kBF16>(t.data, i);
    default: return static_cast<double>(indexing::load_index(t.data, t.type, i));
  }
}

template <class Tag>
void fill_floats(const FillParams& p, const backends::common::FillShape& s, double alpha, double beta, const double* steps,
                 void* out) {
  auto* y = static_cast<typename Tag::T*>(out);
  detail::parallel_ranges(s.n, [&](std::int64_t begin, std::int64_t end) {
    for (std::int64_t e = begin; e < end; ++e) {
      double v;
      if (p.op == FillOperation::kLINSPACE) v = fill::linspace<double>(e, s.rank, s.dims, alpha, steps);
      else if (p.op == FillOperation::kRANDOM_UNIFORM) v = fill::uniform(e, alpha, beta);
      else v = fill::normal(e, alpha, beta);
      y[e] = Tag::store_d(v);
    }
  });
}

template <class I>
void fill_ints(const backends::common::FillShape& s, std::int64_t alpha, const std::int64_t* steps, void* out) {
  auto* y = static_cast<I*>(out);
  detail::parallel_ranges(s.n, [&](std::int64_t begin, std::int64_t end) {
    for (std::int64_t e = begin; e < end; ++e) y[e] = static_cast<I>(fill::linspace<std::int64_t>(e, s.rank, s.dims, alpha, steps));
  });
}

}  // namespace

void fill_tensor(const FillParams& p, const TensorRef* alpha, const TensorRef* beta, const TensorRef& out) {
  const auto s = backends::common::check_fill(detail::kFail, p, alpha, beta, out);
  if (s.n == 0) return;
  // alpha, beta and the linspace steps (beta per dim; the parameter beta for rank 1)
  double a = p.alpha, b = p.beta, steps[Dims::kMaxRank] = {p.beta};
  if (s.dynamic) {
    a = load_double(*alpha, 0);
    if (p.op == FillOperation::kLINSPACE) {
      for (int k = 0; k < s.rank; ++k) steps[k] = load_double(*beta, k);
    } else {
      b = load_double(*beta, 0);
    }
  }
  switch (out.type) {
    case DataType::kFLOAT: fill_floats<detail::F32>(p, s, a, b, steps, out.data); break;
    case DataType::kHALF: fill_floats<detail::F16>(p, s, a, b, steps, out.data); break;
    case DataType::kBF16: fill_floats<detail::BF16>(p, s, a, b, steps, out.data); break;
    default: {
      // integers: alpha and the steps as int64 (exact from a tensor; truncated from the double parameters)
      std::int64_t ia = static_cast<std::int64_t>(a), isteps[Dims::kMaxRank] = {};
      if (s.dynamic) {
        ia = indexing::load_index(alpha->data, alpha->type, 0);
        for (int k = 0; k < s.rank; ++k) isteps[k] = indexing::load_index(beta->data, beta->type, k);
      } else {
        isteps[0] = static_cast<std::int64_t>(p.beta);
      }
      if (out.type == DataType::kINT32) fill_ints<std::int32_t>(s, ia, isteps, out.data);
      else fill_ints<std::int64_t>(s, ia, isteps, out.data);
    }
  }
}

namespace ops {

extern const OpKernel kFillKernel = {LayerType::kFILL, nullptr, nullptr, [](const OpCall& c) {
      const bool dynamic = c.node.inputs.size() == 2;
      const TensorRef a = dynamic ? ref(c.in[0]) : TensorRef{}, b = dynamic ? ref(c.in[1]) : TensorRef{};
      fill_tensor(std::get<FillParams>(c.node.params), dynamic ? &a : nullptr, dynamic ? &b : nullptr, ref(c.out));
    }};

}  // namespace ops

}  // namespace tensoracle::cpu
