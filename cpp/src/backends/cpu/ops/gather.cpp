// The CPU backend's gather (kernels.h), DEFAULT, ELEMENT and ND modes, raw elements of every type.
// An out-of-range index is detected inside the parallel loops through a flag (exceptions must not
// leave an OpenMP region) and thrown afterwards; no loop reads or writes out of bounds.
#include <algorithm>
#include <atomic>
#include <cstddef>
#include <cstdint>
#include <cstring>
#include <span>
#include <string>
#include <vector>

#include "backends/common/index_checks.h"
#include "backends/cpu/index_util.h"
#include "backends/cpu/kernels.h"
#include "backends/cpu/op_kernel.h"
#include "backends/cpu/kernels_util.h"

namespace tensoracle::cpu {

using namespace indexing;  // index_util.h

// ---- gather -----------------------------------------------------------------------------

void gather(const GatherParams& p, const TensorRef& data, const TensorRef& indices, const TensorRef& out) {
  const backends::common::GatherShape g = backends::common::check_gather(detail::kFail, p, data, indices, out);
  const i64 n = g.n;
  const Dims& D = data.dims;
  const Dims& I = indices.dims;
  const int r = D.rank(), q = I.rank();
  i64 ds[Dims::kMaxRank];
  strides_of(D, ds);
  const std::size_t es = element_size(data.type);
  const auto* src = static_cast<const unsigned char*>(data.data);
  auto* dst = static_cast<unsigned char*>(out.data);
  BadIndex bad;
  if (n == 0) return;

  switch (p.mode) {
    case GatherMode::kDEFAULT: {
      const int axis = g.axis, nb = g.nb;
      const i64 outer = prod(D, 0, axis), dim = D[axis], inner_bytes = prod(D, axis + 1, r) * static_cast<i64>(es);
      const i64 nidx = prod(I, nb, q);
      const i64 outer2 = nb == 1 ? outer / D[0] : outer;  // outer indices per batch
      detail::parallel_ranges(
          outer * nidx,
          [&](i64 begin, i64 end) {
            for (i64 t = begin; t < end; ++t) {
              const i64 o = t / nidx, j = t % nidx;
              const i64 pos = nb == 1 ? (o / outer2) * nidx + j : j;
              i64 v = load_index(indices.data, indices.type, pos);
              const i64 raw = v;
              if (!normalize_index(v, dim)) {
                bad.report(raw, dim);
                continue;
              }
              std::memcpy(dst + t * inner_bytes, src + (o * dim + v) * inner_bytes, static_cast<std::size_t>(inner_bytes));
            }
          },
          std::max<i64>(1, kParallelMin * 4 / std::max<i64>(1, inner_bytes)));
      break;
    }
    case GatherMode::kELEMENT: {
      const int axis = g.axis;
      const i64 dim = D[axis];
      const i64 inner = I[r - 1];
      const i64 rows = prod(I, 0, r - 1);
      by_size(es, "gather", [&](auto tag) {
        using T = decltype(tag);
        const T* x = static_cast<const T*>(data.data);
        T* y = static_cast<T*>(out.data);
        detail::parallel_ranges(
            rows,
            [&](i64 begin, i64 end) {
              RowIndex at(I, r, begin);
              const i64* const idx = at.idx;
              for (i64 row = begin; row < end; ++row) {
                i64 base = 0;
                for (int k = 0; k < r - 1; ++k)
                  if (k != axis) base += idx[k] * ds[k];
                for (i64 j = 0; j < inner; ++j) {
                  const i64 e = row * inner + j;
                  i64 v = load_index(indices.data, indices.type, e);
                  const i64 raw = v;
                  if (!normalize_index(v, dim)) {
                    bad.report(raw, dim);
                    continue;
                  }
                  y[e] = x[base + (axis == r - 1 ? v : j + v * ds[axis])];
                }
                at.next();
              }
            },
            std::max<i64>(1, kParallelMin / std::max<i64>(1, inner)));
      });
      break;
    }
    case GatherMode::kND: {
      const int nb = g.nb, after = g.after;
      const i64 last = g.last;
      const i64 rows = prod(I, 0, q - 1);
      const i64 per_batch = prod(I, nb, q - 1);
      const i64 batch_stride = prod(D, nb, r);
      const i64 slice_bytes = prod(D, after, r) * static_cast<i64>(es);
      detail::parallel_ranges(
          rows,
          [&](i64 begin, i64 end) {
            for (i64 t = begin; t < end; ++t) {
              i64 off = (t / std::max<i64>(1, per_batch)) * batch_stride;
              bool ok = true;
              for (i64 m = 0; m < last; ++m) {
                i64 v = load_index(indices.data, indices.type, t * last + m);
                const i64 raw = v, dim = D[nb + static_cast<int>(m)];
                if (!normalize_index(v, dim)) {
                  bad.report(raw, dim);
                  ok = false;
                  break;
                }
                off += v * ds[nb + static_cast<int>(m)];
              }
              if (ok)
                std::memcpy(dst + t * slice_bytes, src + off * static_cast<i64>(es), static_cast<std::size_t>(slice_bytes));
            }
          },
          std::max<i64>(1, kParallelMin * 4 / std::max<i64>(1, slice_bytes)));
      break;
    }
    default: return;  // refused by check_gather
  }
  if (bad.seen)
    fail("gather: index " + num(bad.value) + " is out of range for a dimension of size " + num(bad.dim) + " (valid: [" +
         num(-bad.dim) + ", " + num(bad.dim) + "))");
}

// ---- the node kernel's entry (op_kernel.h) -----------------------------------------------------

namespace ops {

extern const OpKernel kGatherKernel = {
    LayerType::kGATHER, nullptr, nullptr,
    [](const OpCall& c) { gather(std::get<GatherParams>(c.node.params), ref(c.in[0]), ref(c.in[1]), ref(c.out)); }};

}  // namespace ops

}  // namespace tensoracle::cpu
