// The CUDA backend's data-movement helpers that are not templates or inline (layout_util.cuh),
// with the copy and transpose kernels they launch.
#include "backends/cuda/layout_util.cuh"

#include <algorithm>
#include <cstdint>
#include <string>

namespace tensoracle::cuda::layout {

void memcpy_async(void* dst, const void* src, i64 bytes, cudaStream_t stream, const char* kernel) {
  dev::check(cudaMemcpyAsync(dst, src, static_cast<std::size_t>(bytes), cudaMemcpyDeviceToDevice, stream),
             std::string(kernel) + ": cudaMemcpyAsync");
}

void push_dim(HostPlan& p, i64 n, i64 stride) {
  if (n == 1) return;
  if (p.rank > 0 && p.stride[p.rank - 1] == stride * n) {
    p.dim[p.rank - 1] *= n;
    p.stride[p.rank - 1] = stride;
  } else {
    p.dim[p.rank] = n;
    p.stride[p.rank] = stride;
    ++p.rank;
  }
}

void finish(HostPlan& p) {
  if (p.rank == 0) {
    p.rank = 1;
    p.dim[0] = 1;
    p.stride[0] = 1;
  }
}

bool is_identity(const HostPlan& p) { return p.rank == 1 && p.stride[0] == 1; }

bool widenable(const HostPlan& p, i64 k) {
  const int last = p.rank - 1;
  if (p.stride[last] != 1 || p.dim[last] % k != 0) return false;
  for (int i = 0; i < last; ++i)
    if (p.stride[i] % k != 0) return false;
  return true;
}

void widen(HostPlan& p, i64 k) {
  const int last = p.rank - 1;
  p.dim[last] /= k;
  for (int i = 0; i < last; ++i) p.stride[i] /= k;
}

namespace {

// y[i] = x[base + outer(inner(i))] (kTwo) or x[base + outer(i)].
template <class E, class I, bool kTwo>
__global__ void __launch_bounds__(kThreads)
    plan_copy_kernel(const E* __restrict__ x, E* __restrict__ y, I n, I base, Plan<I> outer, Plan<I> inner) {
  GRID_STRIDE_LOOP(I, i, n) {
    const I a = kTwo ? plan_offset(inner, i) : i;
    y[i] = x[base + plan_offset(outer, a)];
  }
}

// A plan whose innermost output dim is strided in the input (a transpose that moves the
// innermost dim): tiles of kTile x kTile over dim A (the one read contiguously, input stride 1)
// and dim B (the innermost output dim) pass through shared memory, so that reads and writes are
// both coalesced. The other dims ("batch") are walked per tile, in 64-bit.
constexpr int kTile = 32, kTileRows = kThreads / kTile;

struct TileArgs {
  i64 tiles_a = 1, tiles_b = 1, tiles = 1;  // tiles along A, along B, in all
  i64 dim_a = 1, dim_b = 1;
  i64 in_b = 0;   // input stride of B
  i64 out_a = 0;  // output stride of A
  i64 base = 0;   // input offset of the first element
  int nbatch = 0;
  i64 batch_dim[kMaxRank] = {}, batch_in[kMaxRank] = {}, batch_out[kMaxRank] = {};
};

template <class E>
__global__ void __launch_bounds__(kThreads)
    tiled_transpose_kernel(const E* __restrict__ x, E* __restrict__ y, TileArgs a) {
  __shared__ E tile[kTile][kTile + 1];  // [b][a]; the padding column avoids bank conflicts
  const int tx = static_cast<int>(threadIdx.x) % kTile, ty = static_cast<int>(threadIdx.x) / kTile;
  for (i64 t = blockIdx.x; t < a.tiles; t += gridDim.x) {
    i64 rest = t / a.tiles_b;
    const i64 b0 = (t - rest * a.tiles_b) * kTile;
    i64 batch = rest / a.tiles_a;
    const i64 a0 = (rest - batch * a.tiles_a) * kTile;
    i64 in_off = a.base, out_off = 0;
    for (int k = a.nbatch - 1; k >= 0; --k) {
      const i64 q = batch / a.batch_dim[k];
      const i64 idx = batch - q * a.batch_dim[k];
      in_off += idx * a.batch_in[k];
      out_off += idx * a.batch_out[k];
      batch = q;
    }
    // Read: consecutive threads take consecutive a (contiguous in the input).
    for (int j = ty; j < kTile; j += kTileRows) {
      const i64 ia = a0 + tx, ib = b0 + j;
      if (ia < a.dim_a && ib < a.dim_b) tile[j][tx] = x[in_off + ia + ib * a.in_b];
    }
    __syncthreads();
    // Write: consecutive threads take consecutive b (contiguous in the output).
    for (int j = ty; j < kTile; j += kTileRows) {
      const i64 ia = a0 + j, ib = b0 + tx;
      if (ia < a.dim_a && ib < a.dim_b) y[out_off + ia * a.out_a + ib] = tile[tx][j];
    }
    __syncthreads();
  }
}

}  // namespace

bool tiled_transpose(const void* x, void* y, std::size_t es, i64 base, const HostPlan& p, cudaStream_t stream,
                     const char* kernel) {
  const int m = p.rank, last = m - 1;
  if (m < 2 || p.stride[last] == 1) return false;
  int c = -1;
  for (int k = 0; k < last; ++k)
    if (p.stride[k] == 1) c = k;
  if (c < 0 || p.dim[c] < kTile / 4 || p.dim[last] < kTile / 4) return false;
  i64 out_stride[kMaxRank];
  i64 s = 1;
  for (int k = last; k >= 0; --k) {
    out_stride[k] = s;
    s *= p.dim[k];
  }
  TileArgs a;
  a.dim_a = p.dim[c];
  a.dim_b = p.dim[last];
  a.in_b = p.stride[last];
  a.out_a = out_stride[c];
  a.base = base;
  a.tiles_a = (a.dim_a + kTile - 1) / kTile;
  a.tiles_b = (a.dim_b + kTile - 1) / kTile;
  i64 batches = 1;
  for (int k = 0; k < last; ++k) {
    if (k == c) continue;
    a.batch_dim[a.nbatch] = p.dim[k];
    a.batch_in[a.nbatch] = p.stride[k];
    a.batch_out[a.nbatch] = out_stride[k];
    ++a.nbatch;
    batches *= p.dim[k];
  }
  a.tiles = batches * a.tiles_a * a.tiles_b;
  const unsigned blocks = static_cast<unsigned>(std::min<i64>(a.tiles, 65535 * 8));
  by_width(static_cast<int>(es), kernel, [&](auto e) {
    using E = decltype(e);
    tiled_transpose_kernel<E><<<blocks, kThreads, 0, stream>>>(static_cast<const E*>(x), static_cast<E*>(y), a);
  });
  check_launch(kernel);
  return true;
}

void plan_copy(const void* x, void* y, i64 n, std::size_t es, i64 base, HostPlan outer, const HostPlan* inner,
               i64 in_elems, cudaStream_t stream, const char* kernel) {
  HostPlan in2 = inner ? *inner : HostPlan{};
  const int w = unit_bytes(es, {x, y}, [&](i64 k) {
    return base % k == 0 && widenable(outer, k) && (inner == nullptr || widenable(in2, k));
  });
  const i64 k = w / static_cast<i64>(es);
  if (k > 1) {
    widen(outer, k);
    if (inner) widen(in2, k);
  } else if (inner == nullptr && tiled_transpose(x, y, es, base, outer, stream, kernel)) {
    return;
  }
  const i64 units = n / k;
  const bool small = units < kSmall && in_elems < kSmall;
  by_width(w, kernel, [&](auto e) {
    using E = decltype(e);
    by_index(small, [&](auto ix) {
      using I = decltype(ix);
      const auto* xs = static_cast<const E*>(x);
      auto* ys = static_cast<E*>(y);
      if (inner)
        plan_copy_kernel<E, I, true><<<blocks_for(units), kThreads, 0, stream>>>(
            xs, ys, static_cast<I>(units), static_cast<I>(base / k), device_plan<I>(outer), device_plan<I>(in2));
      else
        plan_copy_kernel<E, I, false><<<blocks_for(units), kThreads, 0, stream>>>(
            xs, ys, static_cast<I>(units), static_cast<I>(base / k), device_plan<I>(outer), Plan<I>{});
    });
  });
  check_launch(kernel);
}

namespace {

// fill: one element (null: zero), read when a dim maps to -1.
template <class E, class I>
__global__ void __launch_bounds__(kThreads)
    sample_kernel(const E* __restrict__ x, E* __restrict__ y, I n, SampleArgs<I> a, const E* __restrict__ fill) {
  GRID_STRIDE_LOOP(I, i, n) {
    I lin = i, off = 0;
    bool inside = true;
#pragma unroll
    for (int k = kMaxRank - 1; k >= 0; --k) {
      if (k < a.rank) {
        const I o = k > 0 ? take(lin, a.dim[k]) : lin;
        i64 v = a.start[k] + static_cast<i64>(o) * a.step[k];
        if (a.mode[k] >= 0 && (v < 0 || v >= a.in_dim[k])) v = map_outside(v, a.in_dim[k], a.mode[k]);
        if (v < 0) inside = false;
        else off += static_cast<I>(v) * a.in_stride[k];
      }
    }
    y[i] = inside ? x[off] : fill != nullptr ? *fill : E{};
  }
}

}  // namespace

i64 first_outside(i64 start, i64 step, i64 size, i64 dim) {
  i64 i;
  if (start < 0 || start >= dim) i = 0;
  else if (step > 0) i = (dim - start + step - 1) / step;
  else if (step < 0) i = start / -step + 1;
  else return -1;
  return i < size ? i : -1;
}

void sample_copy(const TensorRef& x, const TensorRef& out, const i64* start, const i64* step, SampleMode mode,
                 const void* fill, cudaStream_t stream, const char* kernel) {
  const int r = x.dims.rank();
  const std::size_t es = element_size(x.type);
  const i64 n = out.dims.volume(), in_elems = x.dims.volume();
  i64 st[kMaxRank];
  strides_of(x.dims, st);
  bool inside[kMaxRank] = {};
  bool all_inside = true;
  for (int d = 0; d < r; ++d) {
    inside[d] = first_outside(start[d], step[d], out.dims[d], x.dims[d]) < 0;
    all_inside = all_inside && inside[d];
  }
  if (all_inside) {  // an affine read: base + sum of o_d * step_d * stride_d
    HostPlan p;
    i64 base = 0;
    for (int d = 0; d < r; ++d) {
      base += start[d] * st[d];
      push_dim(p, out.dims[d], step[d] * st[d]);
    }
    finish(p);
    if (is_identity(p)) {
      memcpy_async(out.data, static_cast<const unsigned char*>(x.data) + base * static_cast<i64>(es),
                   n * static_cast<i64>(es), stream, kernel);
      return;
    }
    plan_copy(x.data, out.data, n, es, base, p, nullptr, in_elems, stream, kernel);
    return;
  }
  // Units of k elements along the last dim when it reads contiguously and its boundaries are
  // multiples of k (a FILL value would have to be repeated: only zero is widened).
  const int last = r - 1;
  const int w = unit_bytes(es, {x.data, out.data}, [&](i64 k) {
    return fill == nullptr && step[last] == 1 && out.dims[last] % k == 0 && x.dims[last] % k == 0 &&
           start[last] % k == 0 && (inside[last] || mode == SampleMode::kFILL);
  });
  const i64 k = w / static_cast<i64>(es);
  const i64 units = n / k;
  const bool small = units < kSmall && in_elems < kSmall;
  by_width(w, kernel, [&](auto e) {
    using E = decltype(e);
    by_index(small, [&](auto ix) {
      using I = decltype(ix);
      SampleArgs<I> a;
      a.rank = r;
      for (int d = 0; d < r; ++d) {
        const bool l = d == last;
        a.dim[d] = Divider<I>(l ? out.dims[d] / k : out.dims[d]);
        a.in_stride[d] = static_cast<I>(l ? 1 : st[d] / k);
        a.start[d] = l ? start[d] / k : start[d];
        a.step[d] = step[d];
        a.in_dim[d] = l ? x.dims[d] / k : x.dims[d];
        a.mode[d] = inside[d] ? -1 : static_cast<int>(mode);
      }
      sample_kernel<E, I><<<blocks_for(units), kThreads, 0, stream>>>(
          static_cast<const E*>(x.data), static_cast<E*>(out.data), static_cast<I>(units), a,
          static_cast<const E*>(fill));
    });
  });
  check_launch(kernel);
}

}  // namespace tensoracle::cuda::layout
