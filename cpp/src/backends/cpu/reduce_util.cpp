// The CPU backend's reduce-view helpers that are not inline (reduce_util.h).
#include "backends/cpu/reduce_util.h"

#include <algorithm>
#include <cstdint>

namespace tensoracle::cpu::reduction {

i64 min_items(i64 work) { return std::max<i64>(1, kParallelWork / std::max<i64>(1, work)); }

}  // namespace tensoracle::cpu::reduction
