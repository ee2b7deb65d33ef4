// The CPU backend's topk (kernels.h): the values and/or the int32 indices in one pass, in a
// stable order.
#include <algorithm>
#include <bit>
#include <cmath>
#include <cstddef>
#include <cstdint>
#include <string>
#include <type_traits>
#include <vector>

#include "backends/common/index_checks.h"
#include "backends/cpu/index_util.h"
#include "backends/cpu/kernels.h"
#include "backends/cpu/op_kernel.h"
#include "backends/cpu/kernels_util.h"
#include "core/numeric.h"

namespace tensoracle::cpu {

namespace {

using namespace indexing;  // index_util.h

// Orders positions of one slice: the first k of the order are the result. Float keys are
// exact doubles (float32/16/bf16 widen exactly); NaN counts as larger than every number.
template <class Key>
struct TopKOrder {
  const Key* keys;
  bool max;
  static bool larger(Key a, Key b) {
    if constexpr (std::is_floating_point_v<Key>) {
      if (std::isnan(a)) return !std::isnan(b);
      if (std::isnan(b)) return false;
    }
    return a > b;
  }
  bool operator()(std::int32_t a, std::int32_t b) const {
    const Key x = keys[a], y = keys[b];
    if (max ? larger(x, y) : larger(y, x)) return true;
    if (max ? larger(y, x) : larger(x, y)) return false;
    return a < b;  // equal (or both NaN): the lower index first
  }
};

}  // namespace

// ---- topk -------------------------------------------------------------------------------

void topk(const TopKParams& p, const TensorRef& x, const TensorRef* values, const TensorRef* indices) {
  const backends::common::TopKShape shape = backends::common::check_topk(detail::kFail, p, x, values, indices);
  const i64 m = shape.m, n = shape.n, k = shape.k;
  const int r = x.dims.rank(), axis = shape.axis;
  if (m == 0) return;
  const i64 outer = prod(x.dims, 0, axis), inner = prod(x.dims, axis + 1, r);
  const bool max = p.op == TopKOperation::kMAX;
  auto run = [&](auto key_of) {
    using Key = decltype(key_of(i64{0}));
    detail::parallel_ranges(
        outer * inner,
        [&](i64 begin, i64 end) {
          std::vector<Key> keys(static_cast<std::size_t>(n));
          std::vector<std::int32_t> order(static_cast<std::size_t>(n));
          for (i64 s = begin; s < end; ++s) {
            const i64 o = s / inner, i = s % inner, base = o * n * inner + i;
            for (i64 j = 0; j < n; ++j) {
              keys[static_cast<std::size_t>(j)] = key_of(base + j * inner);
              order[static_cast<std::size_t>(j)] = static_cast<std::int32_t>(j);
            }
            std::partial_sort(order.begin(), order.begin() + k, order.end(), TopKOrder<Key>{keys.data(), max});
            const i64 obase = o * k * inner + i;
            if (indices) {
              auto* y = static_cast<std::int32_t*>(indices->data);
              for (i64 j = 0; j < k; ++j) y[obase + j * inner] = order[static_cast<std::size_t>(j)];
            }
            if (values) {
              by_size(element_size(x.type), "topk", [&](auto tag) {
                using T = decltype(tag);
                const T* src = static_cast<const T*>(x.data);
                T* y = static_cast<T*>(values->data);
                for (i64 j = 0; j < k; ++j) y[obase + j * inner] = src[base + order[static_cast<std::size_t>(j)] * inner];
              });
            }
          }
        },
        std::max<i64>(1, kParallelMin / std::max<i64>(1, n)));
  };
  switch (x.type) {
    case DataType::kFLOAT: run([&](i64 e) { return static_cast<double>(static_cast<const float*>(x.data)[e]); }); break;
    case DataType::kHALF:
      run([&](i64 e) { return static_cast<double>(core::half_to_float(static_cast<const std::uint16_t*>(x.data)[e])); });
      break;
    case DataType::kBF16:
      run([&](i64 e) { return static_cast<double>(core::bf16_to_float(static_cast<const std::uint16_t*>(x.data)[e])); });
      break;
    case DataType::kINT32: run([&](i64 e) { return static_cast<i64>(static_cast<const std::int32_t*>(x.data)[e]); }); break;
    case DataType::kINT64: run([&](i64 e) { return static_cast<const std::int64_t*>(x.data)[e]; }); break;
    default: fail("topk: input type " + tn(x.type) + " is not supported");
  }
}

// ---- the node kernel's entry (op_kernel.h) -----------------------------------------------------

namespace ops {

// `output` 0: values; 1: indices; -1: both in one pass, the indices in extra_out[0].
extern const OpKernel kTopkKernel = {LayerType::kTOPK, nullptr, nullptr, [](const OpCall& c) {
      const auto& p = std::get<TopKParams>(c.node.params);
      const TensorRef out = ref(c.out);
      const TensorRef more = c.extra_out.empty() ? TensorRef{} : ref(c.extra_out[0]);
      if (p.output < 0 && c.extra_out.size() != 1) fail("topk: both outputs need two buffers");
      topk(p, ref(c.in[0]), p.output == 1 ? nullptr : &out, p.output == 1 ? &out : p.output == 0 ? nullptr : &more);
    }};

}  // namespace ops

}  // namespace tensoracle::cpu
