// The CUDA backend's scatter (kernels.h) with the CPU's semantics (backends/cpu/ops/scatter.cpp)
// except that an index outside [-dim, dim) skips its update (a kernel cannot throw): the data is
// copied to the output, then one thread per update element writes it.
#include <cstdint>
#include <type_traits>

#include "backends/common/index_checks.h"
#include "backends/cuda/device_util.cuh"
#include "backends/cuda/kernels.h"
#include "backends/cuda/op_kernel.h"
#include "backends/cuda/pointwise_util.cuh"

namespace tensoracle::cuda {

namespace {

using namespace pointwise;  // pointwise_util.cuh

struct ScatterArgs {
  int rank = 0, axis = 0;
  ScatterReduction reduction = ScatterReduction::kNONE;
  i64 lines = 0, line_inner = 1;
  i64 depth = 0, slice = 0;
  i64 d[Dims::kMaxRank] = {};   // data dims
  i64 ds[Dims::kMaxRank] = {};  // data strides
  i64 u[Dims::kMaxRank] = {};   // updates dims (ELEMENT)
};

template <class I>
__device__ inline bool wrap(I raw, i64 dim, i64& v) {
  v = static_cast<i64>(raw);
  if (v < -dim || v >= dim) return false;
  if (v < 0) v += dim;
  return true;
}

template <class T, class I>
__global__ void scatter_element_kernel(const I* idx, const T* upd, T* out, i64 nu, ScatterArgs a) {
  for (i64 e = first_index(); e < nu; e += grid_step()) {
    i64 v;
    if (!wrap(idx[e], a.d[a.axis], v)) continue;
    i64 rest = e, off = 0;
    for (int k = a.rank - 1; k >= 0; --k) {
      i64 q, r;
      divmod(rest, a.u[k], q, r);
      off += (k == a.axis ? v : r) * a.ds[k];
      rest = q;
    }
    out[off] = upd[e];
  }
}

template <class T, class I>
__global__ void scatter_nd_kernel(const I* idx, const T* upd, T* out, i64 nu, ScatterArgs a) {
  for (i64 e = first_index(); e < nu; e += grid_step()) {
    i64 row, inside;
    divmod(e, a.slice, row, inside);
    i64 off = 0;
    bool ok = true;
    for (i64 m = 0; m < a.depth && ok; ++m) {
      i64 v;
      ok = wrap(idx[row * a.depth + m], a.d[m], v);
      off += v * a.ds[m];
    }
    if (ok) out[off + inside] = upd[e];
  }
}

// Calls launch(indices' typed pointer) and checks the launch.
template <class F>
void with_indices(const TensorRef& indices, F&& launch) {
  if (indices.type == DataType::kINT32) launch(static_cast<const std::int32_t*>(indices.data));
  else launch(static_cast<const std::int64_t*>(indices.data));
  check_launch("scatter");
}

// The reductions, with the CPU's order (backends/cpu/ops/scatter.cpp: reduce_in_order): one
// thread per line of updates that can land on one element (ELEMENT: along the axis; ND: one
// position inside the slices), each line in order.
template <class V>
__device__ inline V combine(ScatterReduction r, V a, V b) {
  switch (r) {
    case ScatterReduction::kSUM: return a + b;
    case ScatterReduction::kPROD: return a * b;
    case ScatterReduction::kMAX: return b > a ? b : a;
    default: return b < a ? b : a;
  }
}

template <class Tag>
struct FloatOps {
  using T = typename Tag::T;
  __device__ static T apply(ScatterReduction r, T a, T b) { return Tag::store(combine(r, Tag::load(a), Tag::load(b))); }
};
template <class I>
struct IntOps {
  using T = I;
  using U = std::make_unsigned_t<I>;
  __device__ static T apply(ScatterReduction r, T a, T b) {
    if (r == ScatterReduction::kSUM) return static_cast<T>(static_cast<U>(a) + static_cast<U>(b));
    if (r == ScatterReduction::kPROD) return static_cast<T>(static_cast<U>(a) * static_cast<U>(b));
    return combine(r, a, b);
  }
};

template <class Ops, class I>
__global__ void scatter_reduce_element_kernel(const I* idx, const typename Ops::T* upd, typename Ops::T* out, ScatterArgs a) {
  const int axis = a.axis;
  const i64 along = a.u[axis], dim = a.d[axis];
  for (i64 line = first_index(); line < a.lines; line += grid_step()) {
    i64 o = line / a.line_inner, in = line % a.line_inner, base = 0;
    for (int k = a.rank - 1; k > axis; --k) {
      base += (in % a.u[k]) * a.ds[k];
      in /= a.u[k];
    }
    for (int k = axis - 1; k >= 0; --k) {
      base += (o % a.u[k]) * a.ds[k];
      o /= a.u[k];
    }
    const i64 first = (line / a.line_inner) * along * a.line_inner + line % a.line_inner;
    for (i64 j = 0; j < along; ++j) {
      const i64 u = first + j * a.line_inner;
      i64 v;
      if (!wrap(idx[u], dim, v)) continue;
      const i64 t = base + v * a.ds[axis];
      out[t] = Ops::apply(a.reduction, out[t], upd[u]);
    }
  }
}

template <class Ops, class I>
__global__ void scatter_reduce_nd_kernel(const I* idx, const typename Ops::T* upd, typename Ops::T* out, i64 rows, ScatterArgs a) {
  for (i64 inside = first_index(); inside < a.slice; inside += grid_step())
    for (i64 row = 0; row < rows; ++row) {
      i64 off = 0;
      bool ok = true;
      for (i64 m = 0; m < a.depth && ok; ++m) {
        i64 v;
        ok = wrap(idx[row * a.depth + m], a.d[m], v);
        off += v * a.ds[m];
      }
      if (ok) out[off + inside] = Ops::apply(a.reduction, out[off + inside], upd[row * a.slice + inside]);
    }
}

template <class Ops>
void launch_reduce(const ScatterParams& p, const TensorRef& indices, const TensorRef& updates, const TensorRef& out, i64 rows,
                   const ScatterArgs& a, cudaStream_t stream) {
  using T = typename Ops::T;
  const auto* u = static_cast<const T*>(updates.data);
  auto* o = static_cast<T*>(out.data);
  with_indices(indices, [&](auto* idx) {
    using I = std::remove_const_t<std::remove_pointer_t<decltype(idx)>>;
    if (p.mode == ScatterMode::kELEMENT)
      scatter_reduce_element_kernel<Ops, I><<<blocks_for(a.lines), kThreads, 0, stream>>>(idx, u, o, a);
    else
      scatter_reduce_nd_kernel<Ops, I><<<blocks_for(a.slice), kThreads, 0, stream>>>(idx, u, o, rows, a);
  });
}

template <class T>
void launch(const ScatterParams& p, const TensorRef& indices, const TensorRef& updates, const TensorRef& out, i64 nu,
            const ScatterArgs& a, cudaStream_t stream) {
  const auto* u = static_cast<const T*>(updates.data);
  auto* o = static_cast<T*>(out.data);
  with_indices(indices, [&](auto* idx) {
    using I = std::remove_const_t<std::remove_pointer_t<decltype(idx)>>;
    if (p.mode == ScatterMode::kELEMENT)
      scatter_element_kernel<T, I><<<blocks_for(nu), kThreads, 0, stream>>>(idx, u, o, nu, a);
    else
      scatter_nd_kernel<T, I><<<blocks_for(nu), kThreads, 0, stream>>>(idx, u, o, nu, a);
  });
}

}  // namespace

void scatter(const ScatterParams& p, const TensorRef& data, const TensorRef& indices, const TensorRef& updates,
             const TensorRef& out, cudaStream_t stream) {
  const auto s = backends::common::check_scatter(dev::kFail, p, data, indices, updates, out);
  const std::size_t es = element_size(data.type);
  if (out.data != data.data && s.n > 0)
    dev::check(cudaMemcpyAsync(out.data, data.data, static_cast<std::size_t>(s.n) * es, cudaMemcpyDeviceToDevice, stream),
               "scatter");
  if (s.nu == 0) return;
  ScatterArgs a;
  a.rank = data.dims.rank();
  a.axis = s.axis;
  a.depth = s.depth;
  a.slice = s.slice > 0 ? s.slice : 1;
  backends::common::strides_of(data.dims, a.ds);
  for (int k = 0; k < a.rank; ++k) a.d[k] = data.dims[k];
  if (p.mode == ScatterMode::kELEMENT)
    for (int k = 0; k < a.rank; ++k) a.u[k] = updates.dims[k];
  a.reduction = p.reduction;
  a.lines = s.lines;
  a.line_inner = s.line_inner > 0 ? s.line_inner : 1;
  if (p.reduction != ScatterReduction::kNONE) {
    if (data.type == DataType::kINT32) return launch_reduce<IntOps<std::int32_t>>(p, indices, updates, out, s.rows, a, stream);
    if (data.type == DataType::kINT64) return launch_reduce<IntOps<std::int64_t>>(p, indices, updates, out, s.rows, a, stream);
    dev::with_float(data.type, [&](auto tag) { launch_reduce<FloatOps<decltype(tag)>>(p, indices, updates, out, s.rows, a, stream); });
    return;
  }
  switch (es) {
    case 1: launch<std::uint8_t>(p, indices, updates, out, s.nu, a, stream); break;
    case 2: launch<std::uint16_t>(p, indices, updates, out, s.nu, a, stream); break;
    case 4: launch<std::uint32_t>(p, indices, updates, out, s.nu, a, stream); break;
    case 8: launch<std::uint64_t>(p, indices, updates, out, s.nu, a, stream); break;
    default: fail("scatter: unsupported element size " + dev::num(static_cast<i64>(es)));
  }
}

namespace ops {

extern const OpKernel kScatterKernel = {LayerType::kSCATTER, nullptr, nullptr, [](const OpCall& c) {
      scatter(std::get<ScatterParams>(c.node.params), ref(c.in[0]), ref(c.in[1]), ref(c.in[2]), ref(c.out), c.stream);
    }};

}  // namespace ops

}  // namespace tensoracle::cuda
