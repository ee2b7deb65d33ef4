// The CPU backend's reverse-sequence (kernels.h): element s < len[b] of batch entry b's sequence
// comes from position len[b] - 1 - s, the rest are copied. A length outside [0, sequence]
// fails the run.
#include <cstring>
#include <string>

#include "backends/common/index_checks.h"
#include "backends/cpu/index_util.h"
#include "backends/cpu/kernels.h"
#include "backends/cpu/kernels_util.h"
#include "backends/cpu/op_kernel.h"

namespace tensoracle::cpu {

void reverse_sequence(const ReverseSequenceParams& p, const TensorRef& x, const TensorRef& lens, const TensorRef& out) {
  const auto s = backends::common::check_reverse_sequence(detail::kFail, p, x, lens, out);
  for (std::int64_t b = 0; b < s.batch; ++b) {
    const std::int64_t len = indexing::load_index(lens.data, lens.type, b);
    if (len < 0 || len > s.seq)
      detail::fail("reverse_sequence: sequence length " + std::to_string(len) + " of batch entry " + std::to_string(b) +
                   " is outside [0, " + std::to_string(s.seq) + "]");
  }
  if (s.n == 0) return;
  const auto es = static_cast<std::int64_t>(element_size(x.type));
  const auto* src = static_cast<const std::byte*>(x.data);
  auto* dst = static_cast<std::byte*>(out.data);
  detail::parallel_ranges(s.n, [&](std::int64_t begin, std::int64_t end) {
    for (std::int64_t e = begin; e < end; ++e) {
      const std::int64_t b = e / s.batch_stride % s.batch, q = e / s.seq_stride % s.seq;
      const std::int64_t len = indexing::load_index(lens.data, lens.type, b);
      const std::int64_t from = q < len ? e + (len - 1 - 2 * q) * s.seq_stride : e;
      std::memcpy(dst + e * es, src + from * es, static_cast<std::size_t>(es));
    }
  });
}

namespace ops {

extern const OpKernel kReverseSequenceKernel = {LayerType::kREVERSE_SEQUENCE, nullptr, nullptr, [](const OpCall& c) {
      reverse_sequence(std::get<ReverseSequenceParams>(c.node.params), ref(c.in[0]), ref(c.in[1]), ref(c.out));
    }};

}  // namespace ops

}  // namespace tensoracle::cpu
