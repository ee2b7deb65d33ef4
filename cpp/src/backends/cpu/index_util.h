// Internal to the CPU backend: what its indexing layers share (ops/concatenation.cpp, einsum,
// gather, padding, resize, select, slice, topk): row-major index arithmetic, raw element access
// by size, float element access, and the "table copy" of slice, padding and nearest resize.
//
// Data movement works on raw elements of 1, 2, 4 or 8 bytes (no conversion), so every type is
// supported. Slice, padding and nearest resize are separable: each output index of each dim
// maps to one input index (or to the fill value), so they share one table copy: per dim, a
// table of input offsets; a row of the output is then one memcpy when its table is contiguous.
// Defined in index_util.cpp where not inline.
#pragma once

#include <algorithm>
#include <atomic>
#include <cstddef>
#include <cstdint>
#include <cstring>
#include <string>
#include <type_traits>
#include <vector>

#include "backends/cpu/kernels.h"
#include "backends/cpu/kernels_util.h"
#include "core/numeric.h"

namespace tensoracle::cpu::indexing {

using i64 = std::int64_t;
using detail::desc;
using detail::fail;
using detail::is_float_type;
using detail::num;
using detail::tn;

constexpr i64 kParallelMin = 32 * 1024;  // elements

// Row-major strides, in elements; the product of d[from, to) (backends/common/checks.h).
using backends::common::prod;
using backends::common::strides_of;

// Calls f(T{}) with the unsigned integer type of `size` bytes.
template <class F>
void by_size(std::size_t size, const char* kernel, F&& f) {
  switch (size) {
    case 1: f(std::uint8_t{}); break;
    case 2: f(std::uint16_t{}); break;
    case 4: f(std::uint32_t{}); break;
    case 8: f(std::uint64_t{}); break;
    default: fail(std::string(kernel) + ": unsupported element size " + std::to_string(size));
  }
}

// ---- indices (gather, scatter) ------------------------------------------------------------

// Records the first out-of-range index seen by any thread.
struct BadIndex {
  std::atomic<bool> seen{false};
  i64 value = 0, dim = 0;
  void report(i64 v, i64 d) {
    bool expected = false;
    if (seen.compare_exchange_strong(expected, true)) {
      value = v;
      dim = d;
    }
  }
};

// Maps an index in [-dim, dim) to [0, dim); false when outside.
inline bool normalize_index(i64& v, i64 dim) {
  if (v < -dim || v >= dim) return false;
  if (v < 0) v += dim;
  return true;
}

inline i64 load_index(const void* p, DataType t, i64 i) {
  return t == DataType::kINT32 ? static_cast<i64>(static_cast<const std::int32_t*>(p)[i])
                               : static_cast<const std::int64_t*>(p)[i];
}

// ---- float element access ----------------------------------------------------------------

template <DataType T>
inline float load_f(const void* p, i64 i) {
  if constexpr (T == DataType::kFLOAT) return static_cast<const float*>(p)[i];
  else if constexpr (T == DataType::kHALF) return core::half_to_float(static_cast<const std::uint16_t*>(p)[i]);
  else return core::bf16_to_float(static_cast<const std::uint16_t*>(p)[i]);
}

template <DataType T>
inline void store_f(void* p, i64 i, float v) {
  if constexpr (T == DataType::kFLOAT) static_cast<float*>(p)[i] = v;
  else if constexpr (T == DataType::kHALF) static_cast<std::uint16_t*>(p)[i] = core::float_to_half(v);
  else static_cast<std::uint16_t*>(p)[i] = core::float_to_bf16(v);
}

// Calls f(std::integral_constant<DataType, t>{}) for a float type.
template <class F>
void by_float_type(DataType t, const char* kernel, F&& f) {
  switch (t) {
    case DataType::kFLOAT: f(std::integral_constant<DataType, DataType::kFLOAT>{}); break;
    case DataType::kHALF: f(std::integral_constant<DataType, DataType::kHALF>{}); break;
    case DataType::kBF16: f(std::integral_constant<DataType, DataType::kBF16>{}); break;
    default: fail(std::string(kernel) + ": type " + tn(t) + " is not float32, float16 or bfloat16");
  }
}

// ---- row walks ------------------------------------------------------------------------------

// The index over the first r - 1 dims of `d` (rank r) of row `row` (a row: d's last dim), then
// of each next row: the walk of a row loop over a row-major array.
struct RowIndex {
  const Dims& d;
  int r;
  i64 idx[Dims::kMaxRank] = {};
  RowIndex(const Dims& dims, int rank, i64 row) : d(dims), r(rank) {
    for (int k = r - 2; k >= 0; --k) {
      idx[k] = row % d[k];
      row /= d[k];
    }
  }
  void next() noexcept {
    for (int k = r - 2; k >= 0; --k) {
      if (++idx[k] < d[k]) break;
      idx[k] = 0;
    }
  }
};

// ---- table copy (slice, padding, nearest resize) ----------------------------------------

// out[o] = x[sum_d table[d][o_d]], or `fill` when any table entry of o is negative. table[d]
// has out_dims[d] entries, each an input offset (index * input stride) or -1.
template <class T>
void table_copy_typed(const T* x, T* out, const Dims& od, const std::vector<std::vector<i64>>& table, T fill) {
  const int r = od.rank();
  if (r == 0) {
    out[0] = x[0];
    return;
  }
  const i64 inner = od[r - 1];
  const i64 rows = prod(od, 0, r - 1);
  if (inner == 0 || rows == 0) return;
  const std::vector<i64>& last = table[static_cast<std::size_t>(r - 1)];
  bool contiguous = last[0] >= 0;
  for (i64 j = 1; j < inner && contiguous; ++j) contiguous = last[static_cast<std::size_t>(j)] == last[0] + j;
  detail::parallel_ranges(
      rows,
      [&](i64 begin, i64 end) {
        RowIndex at(od, r, begin);
        const i64* const idx = at.idx;
        for (i64 row = begin; row < end; ++row) {
          i64 base = 0;
          bool outside = false;
          for (int k = 0; k < r - 1; ++k) {
            const i64 t = table[static_cast<std::size_t>(k)][static_cast<std::size_t>(idx[k])];
            if (t < 0) outside = true;
            base += t;
          }
          T* dst = out + row * inner;
          if (outside) {
            std::fill_n(dst, inner, fill);
          } else if (contiguous) {
            std::memcpy(dst, x + base + last[0], static_cast<std::size_t>(inner) * sizeof(T));
          } else {
            for (i64 j = 0; j < inner; ++j) {
              const i64 t = last[static_cast<std::size_t>(j)];
              dst[j] = t < 0 ? fill : x[base + t];
            }
          }
          at.next();
        }
      },
      std::max<i64>(1, kParallelMin / std::max<i64>(1, inner)));
}

void table_copy(const TensorRef& x, const TensorRef& out, const std::vector<std::vector<i64>>& table,
                const void* fill, const char* kernel);

}  // namespace tensoracle::cpu::indexing
