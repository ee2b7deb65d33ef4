// The CUDA backend's gather (kernels.h), DEFAULT, ELEMENT and ND modes; an index outside
// [-dim, dim) yields zeros (a kernel cannot throw).
#include <algorithm>
#include <cstddef>
#include <cstdint>
#include <string>
#include <vector>

#include "backends/common/index_checks.h"
#include "backends/cuda/device_util.cuh"
#include "backends/cuda/kernels.h"
#include "backends/cuda/layout_util.cuh"
#include "backends/cuda/op_kernel.h"

namespace tensoracle::cuda {

namespace {

using namespace layout;  // layout_util.cuh

// ---- gather --------------------------------------------------------------------------------

template <class I>
__device__ __forceinline__ i64 load_index(const void* p, bool idx64, I pos) {
  return idx64 ? static_cast<i64>(static_cast<const std::int64_t*>(p)[pos])
               : static_cast<i64>(static_cast<const std::int32_t*>(p)[pos]);
}

// DEFAULT: output [outer, nidx, inner] = data[o, index[pos(o, j)], e].
template <class I>
struct GatherDefaultArgs {
  Divider<I> inner;   // units per gathered slab
  Divider<I> nidx;    // indices per batch
  Divider<I> outer2;  // outer indices per batch (num_elementwise_dims 1)
  i64 dim = 0;        // data's size along the axis
  bool batched = false, idx64 = false;
};

template <class E, class I>
__global__ void __launch_bounds__(kThreads) gather_default_kernel(const E* __restrict__ x, const void* __restrict__ indices,
                                                                  E* __restrict__ y, I n, GatherDefaultArgs<I> a) {
  GRID_STRIDE_LOOP(I, i, n) {
    I o = i;
    const I e = take(o, a.inner);
    const I j = take(o, a.nidx);
    const I pos = a.batched ? a.outer2.div(o) * a.nidx.d + j : j;
    i64 v = load_index(indices, a.idx64, pos);
    if (v < -a.dim || v >= a.dim) {
      y[i] = E{};
      continue;
    }
    if (v < 0) v += a.dim;
    y[i] = x[(o * static_cast<I>(a.dim) + static_cast<I>(v)) * a.inner.d + e];
  }
}

// ELEMENT: output (= indices) element i reads data at its own position with the axis index
// replaced by index[i] (`pos`: the position's offset without the axis).
template <class I>
struct GatherElementArgs {
  Plan<I> pos;
  I axis_stride = 0;
  i64 dim = 0;
  bool idx64 = false;
};

template <class E, class I>
__global__ void __launch_bounds__(kThreads) gather_element_kernel(const E* __restrict__ x, const void* __restrict__ indices,
                                                                  E* __restrict__ y, I n, GatherElementArgs<I> a) {
  GRID_STRIDE_LOOP(I, i, n) {
    i64 v = load_index(indices, a.idx64, i);
    if (v < -a.dim || v >= a.dim) {
      y[i] = E{};
      continue;
    }
    if (v < 0) v += a.dim;
    y[i] = x[plan_offset(a.pos, i) + static_cast<I>(v) * a.axis_stride];
  }
}

// ND: output row t (of `slice` units) copies the data slice that the index tuple t (`last`
// indices) selects in the batch of t.
template <class I>
struct GatherNdArgs {
  Divider<I> slice, per_batch;
  I batch_stride = 0;
  int last = 0;
  i64 dim[kMaxRank] = {};  // sizes of the indexed data dims
  I stride[kMaxRank] = {};  // their strides, in units
  bool idx64 = false;
};

template <class E, class I>
__global__ void __launch_bounds__(kThreads) gather_nd_kernel(const E* __restrict__ x, const void* __restrict__ indices,
                                                             E* __restrict__ y, I n, GatherNdArgs<I> a) {
  GRID_STRIDE_LOOP(I, i, n) {
    I t = i;
    const I e = take(t, a.slice);
    I off = a.per_batch.div(t) * a.batch_stride;
    bool ok = true;
    for (int m = 0; m < a.last; ++m) {
      i64 v = load_index(indices, a.idx64, t * static_cast<I>(a.last) + static_cast<I>(m));
      const i64 dim = a.dim[m];
      if (v < -dim || v >= dim) {
        ok = false;
        break;
      }
      if (v < 0) v += dim;
      off += static_cast<I>(v) * a.stride[m];
    }
    y[i] = ok ? x[off + e] : E{};
  }
}

}  // namespace

// ---- gather --------------------------------------------------------------------------------

void gather(const GatherParams& p, const TensorRef& data, const TensorRef& indices, const TensorRef& out,
            cudaStream_t stream) {
  const backends::common::GatherShape g = backends::common::check_gather(dev::kFail, p, data, indices, out);
  const i64 ni = g.ni, n = g.n;
  const Dims& D = data.dims;
  const Dims& Ix = indices.dims;
  const int r = D.rank(), q = Ix.rank();
  i64 ds[kMaxRank];
  strides_of(D, ds);
  const std::size_t es = element_size(data.type);
  const bool idx64 = indices.type == DataType::kINT64;
  const i64 data_elems = D.volume();
  if (n == 0) return;

  switch (p.mode) {
    case GatherMode::kDEFAULT: {
      const int axis = g.axis, nb = g.nb;
      const i64 outer = prod(D, 0, axis), dim = D[axis], inner = prod(D, axis + 1, r);
      const i64 nidx = prod(Ix, nb, q);
      const i64 outer2 = nb == 1 ? outer / D[0] : outer;  // outer indices per batch
      const int w = unit_bytes(es, {data.data, out.data}, [&](i64 k) { return inner % k == 0; });
      const i64 k = w / static_cast<i64>(es);
      const i64 units = n / k;
      const bool small = units < kSmall && data_elems < kSmall && ni < kSmall;
      by_width(w, "gather", [&](auto e) {
        using E = decltype(e);
        by_index(small, [&](auto ix) {
          using I = decltype(ix);
          GatherDefaultArgs<I> a;
          a.inner = Divider<I>(inner / k);
          a.nidx = Divider<I>(nidx);
          a.outer2 = Divider<I>(outer2);
          a.dim = dim;
          a.batched = nb == 1;
          a.idx64 = idx64;
          gather_default_kernel<E, I><<<blocks_for(units), kThreads, 0, stream>>>(
              static_cast<const E*>(data.data), indices.data, static_cast<E*>(out.data), static_cast<I>(units), a);
        });
      });
      check_launch("gather");
      return;
    }
    case GatherMode::kELEMENT: {
      const int axis = g.axis;
      HostPlan pos;  // the indices' dims over the data's strides, the axis left out
      for (int i = 0; i < r; ++i) push_dim(pos, Ix[i], i == axis ? 0 : ds[i]);
      finish(pos);
      const bool small = n < kSmall && data_elems < kSmall;
      by_width(static_cast<int>(es), "gather", [&](auto e) {
        using E = decltype(e);
        by_index(small, [&](auto ix) {
          using I = decltype(ix);
          GatherElementArgs<I> a;
          a.pos = device_plan<I>(pos);
          a.axis_stride = static_cast<I>(ds[axis]);
          a.dim = D[axis];
          a.idx64 = idx64;
          gather_element_kernel<E, I><<<blocks_for(n), kThreads, 0, stream>>>(
              static_cast<const E*>(data.data), indices.data, static_cast<E*>(out.data), static_cast<I>(n), a);
        });
      });
      check_launch("gather");
      return;
    }
    case GatherMode::kND: {
      const int nb = g.nb, after = g.after;
      const i64 last = g.last;
      const i64 per_batch = prod(Ix, nb, q - 1);
      const i64 batch_stride = prod(D, nb, r);
      const i64 slice_elems = prod(D, after, r);
      const int w = unit_bytes(es, {data.data, out.data}, [&](i64 k) { return slice_elems % k == 0; });
      const i64 k = w / static_cast<i64>(es);
      const i64 units = n / k;
      const bool small = units < kSmall && data_elems < kSmall && ni < kSmall;
      by_width(w, "gather", [&](auto e) {
        using E = decltype(e);
        by_index(small, [&](auto ix) {
          using I = decltype(ix);
          GatherNdArgs<I> a;
          a.slice = Divider<I>(slice_elems / k);
          a.per_batch = Divider<I>(std::max<i64>(1, per_batch));
          a.batch_stride = static_cast<I>(batch_stride / k);
          a.last = static_cast<int>(last);
          for (int m = 0; m < a.last; ++m) {
            a.dim[m] = D[nb + m];
            a.stride[m] = static_cast<I>(ds[nb + m] / k);
          }
          a.idx64 = idx64;
          gather_nd_kernel<E, I><<<blocks_for(units), kThreads, 0, stream>>>(
              static_cast<const E*>(data.data), indices.data, static_cast<E*>(out.data), static_cast<I>(units), a);
        });
      });
      check_launch("gather");
      return;
    }
    default: return;  // refused by check_gather
  }
}

// ---- the node kernel's entry (op_kernel.h) -----------------------------------------------------

namespace ops {

extern const OpKernel kGatherKernel = {LayerType::kGATHER, nullptr, nullptr, [](const OpCall& c) {
      gather(std::get<GatherParams>(c.node.params), ref(c.in[0]), ref(c.in[1]), ref(c.out), c.stream);
    }};

}  // namespace ops

}  // namespace tensoracle::cuda
