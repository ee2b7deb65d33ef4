// The CUDA backend's topk (kernels.h): one block per slice, keys and indices streamed through
// shared memory, candidates sorted (bitonic) and merged; the CPU's stable order exactly.
//
// - topk: one block per slice. The elements' keys (value mapped to an unsigned integer whose
//   order is the wanted order, NaN largest, -0 == +0; MIN flips it) and indices stream
//   through shared memory: candidates better than the current k-th best are collected, then
//   sorted (bitonic) and merged into the best P >= k (bitonic half-cleaner + merge). Keys
//   compare by (key, lower index first), so the order is exactly the CPU's stable order.
#include <algorithm>
#include <bit>
#include <cstddef>
#include <cstdint>
#include <string>

#include "backends/common/index_checks.h"
#include "backends/cuda/device_util.cuh"
#include "backends/cuda/kernels.h"
#include "backends/cuda/op_kernel.h"
#include "backends/cuda/reduce_util.cuh"

namespace tensoracle::cuda {

namespace {

using namespace reduction;  // reduce_util.cuh

// ---- topk --------------------------------------------------------------------------------
// Key types: key(stored value) is an unsigned integer whose order is the value's (MAX) order.

// Floats: NaN above everything (all NaNs equal), -0 equal to +0, then the usual sign-flip map.
template <class Tag>
struct FloatKey {
  using T = typename Tag::T;
  using V = std::uint32_t;
  __device__ static V key(T raw) {
    float f = Tag::load(raw);
    if (f != f) return 0xFFFFFFFFu;
    if (f == 0.0f) f = 0.0f;
    const std::uint32_t u = __float_as_uint(f);
    return (u & 0x80000000u) ? ~u : (u | 0x80000000u);
  }
};
struct Int32Key {
  using T = std::int32_t;
  using V = std::uint32_t;
  __device__ static V key(T v) { return static_cast<std::uint32_t>(v) ^ 0x80000000u; }
};
struct Int64Key {
  using T = std::int64_t;
  using V = unsigned long long;
  __device__ static V key(T v) { return static_cast<unsigned long long>(v) ^ (1ull << 63); }
};

// An empty slot: worse than every element (whose index is < 2^31).
constexpr std::uint32_t kNoIndex = 0xFFFFFFFFu;

// (va, ia) comes before (vb, ib): larger key, or equal key and lower index.
template <class V>
__device__ inline bool topk_before(V va, std::uint32_t ia, V vb, std::uint32_t ib) {
  return va > vb || (va == vb && ia < ib);
}
template <class V>
__device__ inline void topk_swap(V* v, std::uint32_t* ix, int a, int b) {
  const V tv = v[a];
  v[a] = v[b];
  v[b] = tv;
  const std::uint32_t ti = ix[a];
  ix[a] = ix[b];
  ix[b] = ti;
}

// Shared memory: keys v[2P] and indices ix[2P]; [0, P) the best so far, sorted best first;
// [P, 2P) the candidates, `count` of them. Merges the candidates into the best P.
template <class V>
__device__ void topk_flush(V* v, std::uint32_t* ix, int P, int count) {
  const int tid = static_cast<int>(threadIdx.x), T = static_cast<int>(blockDim.x);
  V* cv = v + P;
  std::uint32_t* ci = ix + P;
  for (int j = count + tid; j < P; j += T) {
    cv[j] = 0;
    ci[j] = kNoIndex;
  }
  __syncthreads();
  // Bitonic sort of the candidates, worst first.
  for (int size = 2; size <= P; size <<= 1) {
    for (int stride = size >> 1; stride > 0; stride >>= 1) {
      for (int t = tid; t < P / 2; t += T) {
        const int a = 2 * t - (t & (stride - 1)), b = a + stride;
        const bool ascending = (a & size) == 0;  // this run ends worst first
        if (topk_before(cv[a], ci[a], cv[b], ci[b]) == ascending) topk_swap(cv, ci, a, b);
      }
      __syncthreads();
    }
  }
  // best (best first) followed by candidates (worst first) is bitonic: the half-cleaner puts
  // the best P of both in [0, P), as a bitonic sequence ...
  for (int j = tid; j < P; j += T)
    if (topk_before(cv[j], ci[j], v[j], ix[j])) {
      v[j] = cv[j];
      ix[j] = ci[j];
    }
  __syncthreads();
  // ... which a bitonic merge sorts, best first.
  for (int stride = P >> 1; stride > 0; stride >>= 1) {
    for (int t = tid; t < P / 2; t += T) {
      const int a = 2 * t - (t & (stride - 1)), b = a + stride;
      if (topk_before(v[b], ix[b], v[a], ix[a])) topk_swap(v, ix, a, b);
    }
    __syncthreads();
  }
}

// One block per slice (outer index, inner index): n elements at stride `inner`. Writes the
// first k of the order: values (raw copies) and/or int32 indices (where not null).
template <class K>
__global__ void __launch_bounds__(kMaxBlock) topk_kernel(const typename K::T* __restrict__ x,
                                                         typename K::T* __restrict__ values,
                                                         std::int32_t* __restrict__ indices, i64 slices, i64 n,
                                                         i64 inner, int k, int P, bool min) {
  using V = typename K::V;
  extern __shared__ __align__(8) unsigned char topk_smem[];
  V* v = reinterpret_cast<V*>(topk_smem);
  auto* ix = reinterpret_cast<std::uint32_t*>(v + 2 * P);
  __shared__ int s_count;
  const int tid = static_cast<int>(threadIdx.x), T = static_cast<int>(blockDim.x);
  for (i64 s = blockIdx.x; s < slices; s += gridDim.x) {
    const i64 o = s / inner, i = s % inner, base = o * n * inner + i;
    for (int j = tid; j < P; j += T) {
      v[j] = 0;
      ix[j] = kNoIndex;
    }
    if (tid == 0) s_count = 0;
    V tv = 0;  // the current k-th best: only better elements can enter
    std::uint32_t ti = kNoIndex;
    int count = 0;  // candidates collected (the same in every thread)
    __syncthreads();
    for (i64 j0 = 0; j0 < n; j0 += T) {
      const i64 j = j0 + tid;
      bool take = false;
      if (j < n) {
        V kv = K::key(x[base + j * inner]);
        if (min) kv = ~kv;  // NaN (largest) becomes the smallest: last for MIN
        const auto kj = static_cast<std::uint32_t>(j);
        if (topk_before(kv, kj, tv, ti)) {
          take = true;
          const int pos = atomicAdd(&s_count, 1);
          v[P + pos] = kv;
          ix[P + pos] = kj;
        }
      }
      count += __syncthreads_count(take);
      // Flush before a next round could overflow the candidates, and at the end.
      if (count > P - T || (j0 + T >= n && count > 0)) {
        topk_flush(v, ix, P, count);
        tv = v[k - 1];
        ti = ix[k - 1];
        count = 0;
        if (tid == 0) s_count = 0;
        __syncthreads();
      }
    }
    const i64 obase = o * k * inner + i;
    if (indices)
      for (int j = tid; j < k; j += T) indices[obase + j * inner] = static_cast<std::int32_t>(ix[j]);
    if (values)
      for (int j = tid; j < k; j += T) values[obase + j * inner] = x[base + static_cast<i64>(ix[j]) * inner];
    __syncthreads();  // the next slice reuses the shared memory
  }
}

// Largest k this implementation handles (P <= 4096 slots; the graph's limit is 3840).
constexpr i64 kTopKMax = 4096;

template <class K>
void run_topk(const TensorRef& x, const TensorRef* values, const TensorRef* indices, i64 slices, i64 n, i64 inner, int k,
              bool min, cudaStream_t stream) {
  using V = typename K::V;
  // P: a power of two >= k; at least 1024 (or n) so that long rows stream in large chunks.
  const i64 want = std::max<i64>(k, std::min<i64>(n, 1024));
  int P = 64;
  while (P < want) P <<= 1;
  const int threads = std::min(kMaxBlock, P / 2);
  const std::size_t smem = static_cast<std::size_t>(2 * P) * (sizeof(V) + sizeof(std::uint32_t));
  if (smem > 48 * 1024)
    dev::check(cudaFuncSetAttribute(topk_kernel<K>, cudaFuncAttributeMaxDynamicSharedMemorySize, static_cast<int>(smem)),
               "topk: shared memory of " + std::to_string(smem) + " bytes");
  topk_kernel<K><<<grid_for(slices), threads, smem, stream>>>(
      static_cast<const typename K::T*>(x.data), values ? static_cast<typename K::T*>(values->data) : nullptr,
      indices ? static_cast<std::int32_t*>(indices->data) : nullptr, slices, n, inner, k, P, min);
  dev::check_launch("topk");
}

}  // namespace

void topk(const TopKParams& p, const TensorRef& x, const TensorRef* values, const TensorRef* indices, cudaStream_t stream) {
  const backends::common::TopKShape shape = backends::common::check_topk(dev::kFail, p, x, values, indices);
  const i64 m = shape.m, n = shape.n, k = shape.k;
  const int r = x.dims.rank(), axis = shape.axis;
  if (m == 0) return;
  i64 outer = 1, inner = 1;
  for (int d = 0; d < axis; ++d) outer *= x.dims[d];
  for (int d = axis + 1; d < r; ++d) inner *= x.dims[d];
  const bool min = p.op != TopKOperation::kMAX;  // as the CPU: anything but MAX is MIN
  const auto launch = [&](auto key) {
    using K = decltype(key);
    if (k > kTopKMax)
      dev::unsupported("topk: k " + std::to_string(k) + " is above " + std::to_string(kTopKMax));
    run_topk<K>(x, values, indices, outer * inner, n, inner, static_cast<int>(k), min, stream);
  };
  switch (x.type) {
    case DataType::kFLOAT: launch(FloatKey<F32>{}); break;
    case DataType::kHALF: launch(FloatKey<F16>{}); break;
    case DataType::kBF16: launch(FloatKey<BF16>{}); break;
    case DataType::kINT32: launch(Int32Key{}); break;
    case DataType::kINT64: launch(Int64Key{}); break;
    default: fail("topk: input type " + tn(x.type) + " is not supported");
  }
}

// ---- the node kernel's entry (op_kernel.h) -----------------------------------------------------

namespace ops {

// `output` 0: values; 1: indices; -1: both in one kernel, the indices in extra_out[0].
extern const OpKernel kTopkKernel = {LayerType::kTOPK, nullptr, nullptr, [](const OpCall& c) {
      const auto& p = std::get<TopKParams>(c.node.params);
      const TensorRef out = ref(c.out);
      const TensorRef more = c.extra_out.empty() ? TensorRef{} : ref(c.extra_out[0]);
      if (p.output < 0 && c.extra_out.size() != 1) fail("topk: both outputs need two buffers");
      topk(p, ref(c.in[0]), p.output == 1 ? nullptr : &out, p.output == 1 ? &out : p.output == 0 ? nullptr : &more,
           c.stream);
    }};

}  // namespace ops

}  // namespace tensoracle::cuda
