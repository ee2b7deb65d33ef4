// The CPU backend's identity (kernels.h): copy, a parallel memcpy.
#include <cstddef>
#include <cstdint>
#include <cstring>
#include <string>

#include "backends/cpu/kernels.h"
#include "backends/cpu/op_kernel.h"
#include "backends/cpu/kernels_util.h"

namespace tensoracle::cpu {

void copy(const TensorRef& x, const TensorRef& out) {
  std::int64_t n = detail::checked_volume(x, "copy", "input");
  std::int64_t m = detail::checked_volume(out, "copy", "output");
  if (x.type != out.type || n != m)
    detail::fail("copy: input " + std::string(type_name(x.type)) + x.dims.str() + " and output " +
                 std::string(type_name(out.type)) + out.dims.str() + " differ in type or volume");
  if (n == 0 || x.data == out.data) return;
  const auto* src = static_cast<const unsigned char*>(x.data);
  auto* dst = static_cast<unsigned char*>(out.data);
  std::int64_t bytes = n * static_cast<std::int64_t>(element_size(x.type));
  // Memory bound: several threads pay only from a few MiB on.
  detail::parallel_ranges(
      bytes,
      [&](std::int64_t b, std::int64_t e) { std::memcpy(dst + b, src + b, static_cast<std::size_t>(e - b)); },
      std::int64_t{4} << 20);
}

// ---- the node kernel's entry (op_kernel.h) -----------------------------------------------------

namespace ops {

extern const OpKernel kIdentityKernel = {LayerType::kIDENTITY, nullptr, nullptr,
                                        [](const OpCall& c) { copy(ref(c.in[0]), ref(c.out)); }};

}  // namespace ops

}  // namespace tensoracle::cpu
