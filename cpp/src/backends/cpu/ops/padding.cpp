// The CPU backend's padding (kernels.h): a table copy (index_util.h) of raw elements, every type.
#include <cstddef>
#include <cstdint>
#include <string>
#include <vector>

#include "backends/common/index_checks.h"
#include "backends/cpu/index_util.h"
#include "backends/cpu/kernels.h"
#include "backends/cpu/op_kernel.h"
#include "backends/cpu/kernels_util.h"

namespace tensoracle::cpu {

using namespace indexing;  // index_util.h

// ---- padding ----------------------------------------------------------------------------

void padding(const PaddingParams& p, const TensorRef& x, const TensorRef& out) {
  const i64 n = backends::common::check_padding(detail::kFail, p, x, out);
  const int r = x.dims.rank(), np = p.pre_padding.rank();
  if (n == 0) return;
  i64 st[Dims::kMaxRank];
  strides_of(x.dims, st);
  std::vector<std::vector<i64>> table(static_cast<std::size_t>(r));
  for (int d = 0; d < r; ++d) {
    const i64 pre = d >= r - np ? p.pre_padding[d - (r - np)] : 0;
    auto& tab = table[static_cast<std::size_t>(d)];
    tab.resize(static_cast<std::size_t>(out.dims[d]));
    for (i64 o = 0; o < out.dims[d]; ++o) {
      const i64 i = o - pre;
      tab[static_cast<std::size_t>(o)] = i >= 0 && i < x.dims[d] ? i * st[d] : -1;
    }
  }
  table_copy(x, out, table, nullptr, "padding");
}

// ---- the node kernel's entry (op_kernel.h) -----------------------------------------------------

namespace ops {

extern const OpKernel kPaddingKernel = {
    LayerType::kPADDING, nullptr, nullptr,
    [](const OpCall& c) { padding(std::get<PaddingParams>(c.node.params), ref(c.in[0]), ref(c.out)); }};

}  // namespace ops

}  // namespace tensoracle::cpu
