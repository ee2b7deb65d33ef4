// The CPU backend's shape layer: the input's dims, as int64 values.
#include <cstdint>

#include "backends/cpu/op_kernel.h"

namespace tensoracle::cpu::ops {

extern const OpKernel kShapeKernel = {LayerType::kSHAPE, nullptr, nullptr, [](const OpCall& c) {
                                        auto* y = static_cast<std::int64_t*>(c.out.data);
                                        for (int i = 0; i < c.in[0].dims.rank(); ++i) y[i] = c.in[0].dims[i];
                                      }};

}  // namespace tensoracle::cpu::ops
