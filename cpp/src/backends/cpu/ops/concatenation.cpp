// The CPU backend's concatenation (kernels.h): raw element copies, every type.
#include <algorithm>
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
#include "graph/ops.h"
#include "backends/cpu/kernels_util.h"

namespace tensoracle::cpu {

namespace {

using namespace indexing;  // index_util.h

void parallel_memcpy(void* dst, const void* src, i64 bytes) {
  auto* d = static_cast<unsigned char*>(dst);
  const auto* s = static_cast<const unsigned char*>(src);
  detail::parallel_ranges(
      bytes, [&](i64 b, i64 e) { std::memcpy(d + b, s + b, static_cast<std::size_t>(e - b)); }, i64{4} << 20);
}

}  // namespace

// ---- concatenation ----------------------------------------------------------------------

void concatenation(int axis, std::span<const TensorRef> inputs, const TensorRef& out) {
  const i64 n = backends::common::check_concatenation(detail::kFail, axis, inputs, out);
  const int rank = out.dims.rank();
  if (n == 0) return;
  const i64 es = static_cast<i64>(element_size(out.type));
  const i64 outer = prod(out.dims, 0, axis);
  const i64 after = prod(out.dims, axis + 1, rank) * es;  // bytes per index of the axis
  const i64 row = out.dims[axis] * after;                 // output bytes per outer index
  std::vector<i64> offset, bytes;                         // per input: within the row
  i64 at = 0;
  for (const TensorRef& t : inputs) {
    offset.push_back(at);
    bytes.push_back(t.dims[axis] * after);
    at += t.dims[axis] * after;
  }
  auto* dst = static_cast<unsigned char*>(out.data);
  if (outer == 1) {  // one piece per input: copy each with all threads
    for (std::size_t i = 0; i < inputs.size(); ++i)
      if (bytes[i] > 0) parallel_memcpy(dst + offset[i], inputs[i].data, bytes[i]);
    return;
  }
  detail::parallel_ranges(
      outer,
      [&](i64 begin, i64 end) {
        for (i64 o = begin; o < end; ++o)
          for (std::size_t i = 0; i < inputs.size(); ++i)
            if (bytes[i] > 0)
              std::memcpy(dst + o * row + offset[i], static_cast<const unsigned char*>(inputs[i].data) + o * bytes[i],
                          static_cast<std::size_t>(bytes[i]));
      },
      std::max<i64>(1, (i64{1} << 18) / std::max<i64>(1, row)));
}

// ---- the node kernel's entry (op_kernel.h) -----------------------------------------------------

namespace ops {

extern const OpKernel kConcatenationKernel = {
    LayerType::kCONCATENATION, nullptr, nullptr, [](const OpCall& c) {
      const auto& p = std::get<ConcatenationParams>(c.node.params);
      concatenation(graph::concat_axis(p, c.in[0].dims.rank()), input_refs(c), ref(c.out));
    }};

}  // namespace ops

}  // namespace tensoracle::cpu
