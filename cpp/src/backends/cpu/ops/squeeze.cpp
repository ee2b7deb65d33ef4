// The CPU backend's squeeze and unsqueeze: row-major data keeps its order, so both are a copy
// (kernels.h's copy) once the dims are checked.
#include "backends/common/index_checks.h"
#include "backends/cpu/kernels.h"
#include "backends/cpu/kernels_util.h"
#include "backends/cpu/op_kernel.h"

namespace tensoracle::cpu {

namespace ops {

namespace {

void run(const OpCall& c) {
  backends::common::check_squeeze(detail::kFail, c.node.params, ref(c.in[0]), ref(c.out));
  copy(ref(c.in[0]), ref(c.out));
}

}  // namespace

extern const OpKernel kSqueezeKernel = {LayerType::kSQUEEZE, nullptr, nullptr, run};
extern const OpKernel kUnsqueezeKernel = {LayerType::kUNSQUEEZE, nullptr, nullptr, run};

}  // namespace ops

}  // namespace tensoracle::cpu
