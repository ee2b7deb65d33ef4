// The CPU backend's scatter (kernels.h), ELEMENT and ND modes, raw elements of every type: the
// output is the data with the updates written at the indices. An out-of-range index is recorded
// inside the parallel loop and thrown after it (nothing is written out of bounds).
#include <algorithm>
#include <cstdint>
#include <cstring>
#include <type_traits>

#include "backends/common/index_checks.h"
#include "backends/cpu/index_util.h"
#include "backends/cpu/kernels.h"
#include "backends/cpu/kernels_util.h"
#include "backends/cpu/op_kernel.h"

namespace tensoracle::cpu {

using namespace indexing;  // index_util.h

namespace {

// Combines update b into element a (ScatterReduction; never kNONE here): floats on their float32
// values, rounded to the type after each update; integers wrapping around.
template <class V>
inline V combine(ScatterReduction r, V a, V b) {
  switch (r) {
    case ScatterReduction::kSUM: return a + b;
    case ScatterReduction::kPROD: return a * b;
    case ScatterReduction::kMAX: return b > a ? b : a;
    default: return b < a ? b : a;
  }
}

// Runs apply(target element, update element) for every update, each line of updates that can
// land on one element in order (ELEMENT: a line along the axis; ND: one position inside the
// slices, over the index tuples), lines in parallel: deterministic, and no two threads write
// one element.
template <class Apply>
void reduce_in_order(const backends::common::ScatterShape& s, const ScatterParams& p, const TensorRef& data,
                     const TensorRef& indices, const TensorRef& updates, Apply&& apply, BadIndex& bad) {
  const Dims &D = data.dims, &U = updates.dims;
  const int r = D.rank();
  i64 ds[Dims::kMaxRank];
  strides_of(D, ds);
  if (p.mode == ScatterMode::kELEMENT) {
    const int axis = s.axis;
    const i64 along = U[axis], dim = D[axis];
    detail::parallel_ranges(s.lines, [&](i64 begin, i64 end) {
      for (i64 line = begin; line < end; ++line) {
        i64 o = line / s.line_inner, in = line % s.line_inner, base = 0;
        for (int k = r - 1; k > axis; --k) {
          base += (in % U[k]) * ds[k];
          in /= U[k];
        }
        for (int k = axis - 1; k >= 0; --k) {
          base += (o % U[k]) * ds[k];
          o /= U[k];
        }
        const i64 first = (line / s.line_inner) * along * s.line_inner + line % s.line_inner;
        for (i64 j = 0; j < along; ++j) {
          const i64 u = first + j * s.line_inner;
          const i64 raw = load_index(indices.data, indices.type, u);
          i64 v = raw;
          if (!normalize_index(v, dim)) {
            bad.report(raw, dim);
            continue;
          }
          apply(base + v * ds[axis], u);
        }
      }
    }, 1024);
    return;
  }
  detail::parallel_ranges(s.slice, [&](i64 begin, i64 end) {
    for (i64 inside = begin; inside < end; ++inside)
      for (i64 row = 0; row < s.rows; ++row) {
        i64 off = 0;
        bool ok = true;
        for (i64 m = 0; m < s.depth && ok; ++m) {
          const i64 raw = load_index(indices.data, indices.type, row * s.depth + m);
          i64 v = raw;
          const i64 dim = D[static_cast<int>(m)];
          ok = normalize_index(v, dim);
          if (!ok) bad.report(raw, dim);
          off += v * ds[static_cast<int>(m)];
        }
        if (ok) apply(off + inside, row * s.slice + inside);
      }
  }, 1024);
}

}  // namespace

void scatter(const ScatterParams& p, const TensorRef& data, const TensorRef& indices, const TensorRef& updates,
             const TensorRef& out) {
  const auto s = backends::common::check_scatter(detail::kFail, p, data, indices, updates, out);
  const std::size_t es = element_size(data.type);
  if (out.data != data.data && s.n > 0) std::memcpy(out.data, data.data, static_cast<std::size_t>(s.n) * es);
  if (s.nu == 0) return;
  const Dims& D = data.dims;
  const int r = D.rank();
  i64 ds[Dims::kMaxRank];
  strides_of(D, ds);
  auto* dst = static_cast<std::byte*>(out.data);
  const auto* src = static_cast<const std::byte*>(updates.data);
  BadIndex bad;
  if (p.reduction != ScatterReduction::kNONE) {
    auto integer = [&](auto zero) {
      using I = decltype(zero);
      using U = std::make_unsigned_t<I>;
      I* y = static_cast<I*>(out.data);
      const I* w = static_cast<const I*>(updates.data);
      reduce_in_order(s, p, data, indices, updates, [&](i64 t, i64 u) {
        const U a = static_cast<U>(y[t]), b = static_cast<U>(w[u]);
        if (p.reduction == ScatterReduction::kSUM) y[t] = static_cast<I>(a + b);
        else if (p.reduction == ScatterReduction::kPROD) y[t] = static_cast<I>(a * b);
        else y[t] = combine(p.reduction, y[t], w[u]);
      }, bad);
    };
    if (data.type == DataType::kINT32) integer(std::int32_t{0});
    else if (data.type == DataType::kINT64) integer(std::int64_t{0});
    else
      detail::with_float(data.type, "scatter", [&](auto tag) {
        using S = decltype(tag);
        auto* y = static_cast<typename S::T*>(out.data);
        const auto* w = static_cast<const typename S::T*>(updates.data);
        reduce_in_order(s, p, data, indices, updates, [&](i64 t, i64 u) {
          y[t] = S::store(combine(p.reduction, S::load(y[t]), S::load(w[u])));
        }, bad);
      });
  } else if (p.mode == ScatterMode::kELEMENT) {
    const Dims& U = updates.dims;
    const i64 inner = U[r - 1];
    detail::parallel_ranges(s.nu / std::max<i64>(1, inner), [&](i64 begin, i64 end) {
      RowIndex at(U, r, begin);
      for (i64 row = begin; row < end; ++row) {
        for (i64 j = 0; j < inner; ++j) {
          const i64 u = row * inner + j;
          const i64 raw = load_index(indices.data, indices.type, u);
          i64 v = raw;
          const i64 dim = D[s.axis];
          if (!normalize_index(v, dim)) {
            bad.report(raw, dim);
            continue;
          }
          i64 off = 0;
          for (int k = 0; k < r - 1; ++k) off += (k == s.axis ? v : at.idx[k]) * ds[k];
          off += (r - 1 == s.axis ? v : j) * ds[r - 1];
          std::memcpy(dst + off * static_cast<i64>(es), src + u * static_cast<i64>(es), es);
        }
        at.next();
      }
    });
  } else {
    const i64 slice_bytes = s.slice * static_cast<i64>(es);
    detail::parallel_ranges(s.rows, [&](i64 begin, i64 end) {
      for (i64 row = begin; row < end; ++row) {
        i64 off = 0;
        bool ok = true;
        for (i64 m = 0; m < s.depth; ++m) {
          const i64 raw = load_index(indices.data, indices.type, row * s.depth + m);
          i64 v = raw;
          const i64 dim = D[static_cast<int>(m)];
          if (!normalize_index(v, dim)) {
            bad.report(raw, dim);
            ok = false;
            break;
          }
          off += v * ds[static_cast<int>(m)];
        }
        if (ok) std::memcpy(dst + off * static_cast<i64>(es), src + row * slice_bytes, static_cast<std::size_t>(slice_bytes));
      }
    }, std::max<i64>(1, kParallelMin / std::max<i64>(1, s.slice)));
  }
  if (bad.seen)
    fail("scatter: index " + num(bad.value) + " is out of range for a dimension of size " + num(bad.dim) + " (valid: [" +
         num(-bad.dim) + ", " + num(bad.dim - 1) + "])");
}

namespace ops {

extern const OpKernel kScatterKernel = {LayerType::kSCATTER, nullptr, nullptr, [](const OpCall& c) {
      scatter(std::get<ScatterParams>(c.node.params), ref(c.in[0]), ref(c.in[1]), ref(c.in[2]), ref(c.out));
    }};

}  // namespace ops

}  // namespace tensoracle::cpu
