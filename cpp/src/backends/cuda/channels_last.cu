// The CUDA backend's channels-last copies around cuDNN (kernels.h): to_channels_last and
// from_channels_last (with a convolution's bias and activation on the way), for convolutions
// and the backend's layout conversions; not a layer of their own.
#include <algorithm>
#include <cstdint>
#include <string>
#include <type_traits>

#include "backends/cuda/device_util.cuh"
#include "backends/cuda/kernels.h"
#include "backends/cuda/pointwise_util.cuh"

namespace tensoracle::cuda {

using namespace pointwise;  // pointwise_util.cuh

// ---- channels-last copies around cuDNN ----------------------------------------------------

// Per batch b: in [rows][cols] into out [cols][out_rows] (out_rows >= rows), out[b][c][r] =
// op(in[b][r][c], c) for r < rows and zero beyond. 64 x 64 tiles through shared memory, so that
// both sides are read and written along rows, in vectors of V elements (V divides cols and
// out_rows; the callers' pointers are 256-byte aligned): a transpose is memory-latency bound,
// and 16-byte accesses keep 8 times the bytes of 2-byte ones in flight. A block walks tiles
// (batch-major).
constexpr int kTile = 64;

template <class Tag, int V, class Op>
__global__ void __launch_bounds__(kThreads)
    tile_transpose_kernel(const typename Tag::T* __restrict__ in, typename Tag::T* __restrict__ out, i64 batch,
                          i64 rows, i64 cols, i64 out_rows, Op op) {
  using T = typename Tag::T;
  using P = Pack<T, V>;
  constexpr int kVecs = kTile / V;  // vectors per tile row
  __shared__ T tile[kTile][kTile + 2];
  const i64 tiles_r = (out_rows + kTile - 1) / kTile, tiles_c = (cols + kTile - 1) / kTile, per = tiles_r * tiles_c;
  for (i64 t = blockIdx.x; t < batch * per; t += gridDim.x) {
    const i64 b = t / per, rest = t - b * per, r0 = rest / tiles_c * kTile, c0 = rest % tiles_c * kTile;
    const T* ib = in + b * rows * cols;
    T* ob = out + b * cols * out_rows;
    for (int i = threadIdx.x; i < kTile * kVecs; i += kThreads) {
      const int r = i / kVecs, c = i % kVecs * V;
      if (r0 + r < rows && c0 + c < cols) {
        const P p = *reinterpret_cast<const P*>(ib + (r0 + r) * cols + c0 + c);
#pragma unroll
        for (int k = 0; k < V; ++k) tile[r][c + k] = p.v[k];
      }
    }
    __syncthreads();
    for (int i = threadIdx.x; i < kTile * kVecs; i += kThreads) {
      const int c = i / kVecs, r = i % kVecs * V;
      if (c0 + c >= cols || r0 + r >= out_rows) continue;
      P p;
#pragma unroll
      for (int k = 0; k < V; ++k) p.v[k] = r0 + r + k < rows ? op(tile[r + k][c], c0 + c) : Tag::store(0.f);
      *reinterpret_cast<P*>(ob + (c0 + c) * out_rows + r0 + r) = p;
    }
    __syncthreads();
  }
}

// The same for out_rows = L (4 or 8, what the builder pads a few channels to) and V | cols,
// where a 64-row tile would be mostly padding: one thread per V columns, reading a V-vector of
// each row and writing V vectors of L (V * L contiguous).
template <class Tag, int V, int L>
__global__ void few_rows_vector_kernel(const typename Tag::T* __restrict__ in, typename Tag::T* __restrict__ out,
                                       i64 batch, i64 rows, i64 cols) {
  using T = typename Tag::T;
  const i64 groups = cols / V;
  for (i64 i = first_index(); i < batch * groups; i += grid_step()) {
    i64 b, g;
    divmod(i, groups, b, g);
    const T* ib = in + b * rows * cols + g * V;
    Pack<T, V> row[L];
#pragma unroll
    for (int r = 0; r < L; ++r)
      if (r < rows) row[r] = *reinterpret_cast<const Pack<T, V>*>(ib + r * cols);
    auto* ob = reinterpret_cast<Pack<T, L>*>(out + (b * cols + g * V) * L);
#pragma unroll
    for (int k = 0; k < V; ++k) {
      Pack<T, L> o;
#pragma unroll
      for (int r = 0; r < L; ++r) o.v[r] = r < rows ? row[r].v[k] : Tag::store(0.f);
      ob[k] = o;
    }
  }
}

template <class Tag, class Op>
void launch_transpose(const void* in, void* out, i64 batch, i64 rows, i64 cols, i64 out_rows, Op op,
                      cudaStream_t stream) {
  using T = typename Tag::T;
  const i64 tiles = batch * ((out_rows + kTile - 1) / kTile) * ((cols + kTile - 1) / kTile);
  by_width<T>(vector_width<T>({cols, out_rows}), [&](auto v) {
    const auto grid = static_cast<unsigned>(std::min<i64>(tiles, i64{1} << 20));
    tile_transpose_kernel<Tag, decltype(v)::value><<<grid, kThreads, 0, stream>>>(
        static_cast<const T*>(in), static_cast<T*>(out), batch, rows, cols, out_rows, op);
  });
}

template <class Tag>
struct Same {
  __device__ typename Tag::T operator()(typename Tag::T v, i64) const { return v; }
};
template <class Tag, class Op>
struct PerChannel {  // op(v, bias[channel])
  Op op;
  const typename Tag::T* bias;
  __device__ typename Tag::T operator()(typename Tag::T v, i64 c) const {
    return op(v, bias ? Tag::load(bias[c]) : 0.f);
  }
};

void to_channels_last(const TensorRef& x, std::int64_t channels, void* out, cudaStream_t stream) {
  const i64 n = checked_volume(x, "to_channels_last", "the tensor");
  if (x.dims.rank() < 2) fail("to_channels_last: the tensor " + desc(x) + " has no channel dim");
  const i64 N = x.dims[0], C = x.dims[1];
  if (channels < C) fail("to_channels_last: " + std::to_string(channels) + " channels cannot hold " + desc(x) + "'s");
  if (n == 0) return;
  const i64 S = n / (N * C);
  const bool ok = dev::with_float(x.type, [&](auto tag) {
    using Tag = decltype(tag);
    using T = typename Tag::T;
    // Two columns per thread: a warp's stores then cover whole 32-byte sectors (wider vectors
    // read better but scatter the stores; 8 columns were slower than one on the H200).
    constexpr int V = 2;
    auto few = [&](auto l) {
      few_rows_vector_kernel<Tag, V, decltype(l)::value><<<blocks_for(N * S / V), kThreads, 0, stream>>>(
          static_cast<const T*>(x.data), static_cast<T*>(out), N, C, S);
    };
    if (channels == 4 && S % V == 0) few(std::integral_constant<int, 4>{});
    else if (channels == 8 && S % V == 0) few(std::integral_constant<int, 8>{});
    else launch_transpose<Tag>(x.data, out, N, C, S, channels, Same<Tag>{}, stream);
    check_launch("to_channels_last");
  });
  if (!ok) fail("to_channels_last takes float32, float16 or bfloat16, not " + tn(x.type));
}

void from_channels_last(const void* in, const TensorRef& y, const void* bias, const ActivationParams* act,
                        cudaStream_t stream) {
  const i64 n = checked_volume(y, "from_channels_last", "the tensor");
  if (y.dims.rank() < 2) fail("from_channels_last: the tensor " + desc(y) + " has no channel dim");
  if (n == 0) return;
  const i64 N = y.dims[0], K = y.dims[1], S = n / (N * K);
  const bool ok = dev::with_float(y.type, [&](auto tag) {
    using Tag = decltype(tag);
    using T = typename Tag::T;
    with_activation(act ? act->type : A::kRELU, [&](auto type) {
      const BiasActivation<Tag, decltype(type)::value> op{{act ? act->alpha : 0.f, act ? act->beta : 0.f}, bias != nullptr,
                                                          act != nullptr};
      launch_transpose<Tag>(in, y.data, N, S, K, S, PerChannel<Tag, decltype(op)>{op, static_cast<const T*>(bias)},
                            stream);
    });
    check_launch("from_channels_last");
  });
  if (!ok) fail("from_channels_last takes float32, float16 or bfloat16, not " + tn(y.type));
}

}  // namespace tensoracle::cuda
