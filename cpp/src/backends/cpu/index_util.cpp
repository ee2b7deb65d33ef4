// The CPU backend's indexing helpers that are not inline (index_util.h).
#include "backends/cpu/index_util.h"

#include <cstdint>
#include <cstring>
#include <vector>

namespace tensoracle::cpu::indexing {

void table_copy(const TensorRef& x, const TensorRef& out, const std::vector<std::vector<i64>>& table,
                const void* fill, const char* kernel) {
  by_size(element_size(x.type), kernel, [&](auto tag) {
    using T = decltype(tag);
    T f{};
    if (fill != nullptr) std::memcpy(&f, fill, sizeof(T));
    table_copy_typed(static_cast<const T*>(x.data), static_cast<T*>(out.data), out.dims, table, f);
  });
}

}  // namespace tensoracle::cpu::indexing
