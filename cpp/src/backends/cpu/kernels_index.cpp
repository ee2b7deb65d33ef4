// The CPU backend's indexing kernels: concatenation, slice, gather, select, padding, resize and
// einsum (TensorRT's semantics; see kernels_more.h).
//
// Data movement works on raw elements of 1, 2, 4 or 8 bytes (no conversion), so every type is
// supported. Slice, padding and nearest resize are separable: each output index of each dim
// maps to one input index (or to the fill value), so they share one "table copy": per dim, a
// table of input offsets; a row of the output is then one memcpy when its table is contiguous.
// Linear and cubic resize compute in float32 over per-dim taps (separable weights) and round
// once. Einsum permutes/reduces its operands into float32 matrices in the workspace (or uses
// them in place when they already have the layout) and runs one batched GEMM (cblas_sgemm).
//
// Errors in the data (an out-of-range gather index) are detected inside the parallel loops
// through a flag (exceptions must not leave an OpenMP region) and thrown afterwards; no loop
// reads or writes out of bounds.
#include <cblas.h>

#include <algorithm>
#include <bit>
#include <atomic>
#include <climits>
#include <cmath>
#include <cstdint>
#include <cstring>
#include <new>
#include <span>
#include <string>
#include <type_traits>
#include <vector>

#include "backends/cpu/kernels_more.h"
#include "backends/cpu/kernels_util.h"
#include "core/numeric.h"
#include "graph/ops.h"
#include "tensoracle/errors.h"

namespace tensoracle::cpu {

namespace {

using i64 = std::int64_t;
using detail::fail;

constexpr i64 kParallelMin = 32 * 1024;  // elements

std::string tn(DataType t) { return std::string(type_name(t)); }
std::string desc(const TensorRef& t) { return tn(t.type) + t.dims.str(); }
std::string num(i64 v) { return std::to_string(v); }

// Row-major strides, in elements.
void strides_of(const Dims& d, i64* s) {
  i64 acc = 1;
  for (int k = d.rank() - 1; k >= 0; --k) {
    s[k] = acc;
    acc *= d[k];
  }
}

i64 prod(const Dims& d, int from, int to) {
  i64 p = 1;
  for (int k = from; k < to; ++k) p *= d[k];
  return p;
}

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

void parallel_memcpy(void* dst, const void* src, i64 bytes) {
  auto* d = static_cast<unsigned char*>(dst);
  const auto* s = static_cast<const unsigned char*>(src);
  detail::parallel_ranges(
      bytes, [&](i64 b, i64 e) { std::memcpy(d + b, s + b, static_cast<std::size_t>(e - b)); }, i64{4} << 20);
}

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

bool is_float_type(DataType t) { return t == DataType::kFLOAT || t == DataType::kHALF || t == DataType::kBF16; }

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
        i64 idx[Dims::kMaxRank] = {};
        i64 rem = begin;
        for (int k = r - 2; k >= 0; --k) {
          idx[k] = rem % od[k];
          rem /= od[k];
        }
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
          for (int k = r - 2; k >= 0; --k) {
            if (++idx[k] < od[k]) break;
            idx[k] = 0;
          }
        }
      },
      std::max<i64>(1, kParallelMin / std::max<i64>(1, inner)));
}

void table_copy(const TensorRef& x, const TensorRef& out, const std::vector<std::vector<i64>>& table,
                const void* fill, const char* kernel) {
  by_size(element_size(x.type), kernel, [&](auto tag) {
    using T = decltype(tag);
    T f{};
    if (fill != nullptr) std::memcpy(&f, fill, sizeof(T));
    table_copy_typed(static_cast<const T*>(x.data), static_cast<T*>(out.data), out.dims, table, f);
  });
}

// ---- einsum plan ------------------------------------------------------------------------

// One operand as a strided view over its distinct letters (a repeated letter, as in "ii",
// reads the diagonal: its stride is the sum of the repeated positions' strides).
struct EinsumView {
  std::string letters;
  i64 stride[26] = {};
};

struct EinsumPlan {
  int inputs = 1;
  i64 size[26] = {};
  EinsumView view[2];
  std::string out;  // output letters
  // Two inputs: C[batch, M, N] = A[batch, M, K] x B[batch, K, N].
  std::string batch, mfree, nfree, kcon, sum_a, sum_b;
  i64 B = 1, M = 1, N = 1, K = 1;
  bool a_direct = false, a_trans = false, b_direct = false, b_trans = false, c_direct = false;
  i64 wa = 0, wb = 0, wc = 0;  // workspace floats per part
};

i64 letters_volume(const EinsumPlan& p, const std::string& ls) {
  i64 v = 1;
  for (char c : ls) v *= p.size[c - 'a'];
  return v;
}

bool contains(const std::string& s, char c) { return s.find(c) != std::string::npos; }

// True when the view, read in the letter order `seq`, is a contiguous row-major array.
bool is_contiguous(const EinsumPlan& p, const EinsumView& v, const std::string& seq) {
  i64 expected = 1;
  for (auto it = seq.rbegin(); it != seq.rend(); ++it) {
    const i64 n = p.size[*it - 'a'];
    if (n == 1) continue;
    if (v.stride[*it - 'a'] != expected) return false;
    expected *= n;
  }
  return true;
}

EinsumPlan plan_einsum(const EinsumParams& params, std::span<const TensorRef> inputs, const TensorRef& out) {
  if (inputs.size() < 1 || inputs.size() > 2)
    fail("einsum: takes one or two inputs, got " + std::to_string(inputs.size()));
  graph::EinsumSpec spec;
  try {
    spec = graph::parse_einsum(params.equation, inputs.size());
  } catch (const InvalidArgument& e) {
    fail(std::string("einsum: ") + e.what());
  }
  EinsumPlan p;
  p.inputs = static_cast<int>(inputs.size());
  for (auto& s : p.size) s = -1;
  const DataType type = inputs[0].type;
  if (!is_float_type(type)) fail("einsum: input 0 has type " + tn(type) + "; einsum takes float32, float16 or bfloat16");
  for (std::size_t i = 0; i < inputs.size(); ++i) {
    const TensorRef& t = inputs[i];
    const std::string& ls = spec.operands[i];
    if (t.type != type)
      fail("einsum: input " + std::to_string(i) + " has type " + tn(t.type) + "; input 0 has " + tn(type));
    if (!t.dims.all_known()) fail("einsum: input " + std::to_string(i) + " has unknown dims " + t.dims.str());
    if (static_cast<int>(ls.size()) != t.dims.rank())
      fail("einsum: operand '" + ls + "' has " + std::to_string(ls.size()) + " letters but input " +
           std::to_string(i) + " has dims " + t.dims.str());
    i64 st[Dims::kMaxRank];
    strides_of(t.dims, st);
    EinsumView& v = p.view[i];
    for (std::size_t k = 0; k < ls.size(); ++k) {
      const int c = ls[k] - 'a';
      const i64 d = t.dims[static_cast<int>(k)];
      if (p.size[c] < 0) p.size[c] = d;
      else if (p.size[c] != d)
        fail("einsum: letter '" + std::string(1, ls[k]) + "' of '" + params.equation + "' has sizes " + num(p.size[c]) +
             " and " + num(d));
      if (!contains(v.letters, ls[k])) v.letters += ls[k];
      v.stride[c] += st[k];
    }
  }
  p.out = spec.output;
  std::vector<i64> od;
  for (char c : p.out) od.push_back(p.size[c - 'a']);
  const Dims expected{std::span<const i64>(od)};
  if (out.type != type || !(out.dims == expected))
    fail("einsum: the output is " + desc(out) + "; '" + params.equation + "' gives " + tn(type) + expected.str());
  if (p.inputs == 1) return p;

  const std::string& la = p.view[0].letters;
  const std::string& lb = p.view[1].letters;
  for (char c : p.out) {
    const bool a = contains(la, c), b = contains(lb, c);
    if (a && b) p.batch += c;
    else if (a) p.mfree += c;
    else p.nfree += c;
  }
  for (char c : la) {
    if (contains(p.out, c)) continue;
    if (contains(lb, c)) p.kcon += c;
    else p.sum_a += c;
  }
  for (char c : lb)
    if (!contains(p.out, c) && !contains(la, c)) p.sum_b += c;
  p.B = letters_volume(p, p.batch);
  p.M = letters_volume(p, p.mfree);
  p.N = letters_volume(p, p.nfree);
  p.K = letters_volume(p, p.kcon);
  if (type == DataType::kFLOAT) {
    if (p.sum_a.empty()) {
      if (is_contiguous(p, p.view[0], p.batch + p.mfree + p.kcon)) p.a_direct = true;
      else if (is_contiguous(p, p.view[0], p.batch + p.kcon + p.mfree)) p.a_direct = p.a_trans = true;
    }
    if (p.sum_b.empty()) {
      if (is_contiguous(p, p.view[1], p.batch + p.kcon + p.nfree)) p.b_direct = true;
      else if (is_contiguous(p, p.view[1], p.batch + p.nfree + p.kcon)) p.b_direct = p.b_trans = true;
    }
    // The output in the order of C: its own strides, read in C's letter order.
    EinsumView ov;
    i64 st[Dims::kMaxRank];
    strides_of(out.dims, st);
    for (std::size_t k = 0; k < p.out.size(); ++k) ov.stride[p.out[k] - 'a'] = st[k];
    p.c_direct = is_contiguous(p, ov, p.batch + p.mfree + p.nfree);
  }
  if (!p.a_direct) p.wa = p.B * p.M * p.K;
  if (!p.b_direct) p.wb = p.B * p.K * p.N;
  if (!p.c_direct) p.wc = p.B * p.M * p.N;
  return p;
}

// dst (contiguous, dims dsize[0..nd)) = the sum over the reduced dims (rsize, rstride) of src
// read with strides sstride per destination dim; accumulated in double, stored as DT.
template <DataType ST, DataType DT>
void permute_reduce_typed(const void* src, int nd, const i64* dsize, const i64* sstride, int nr, const i64* rsize,
                          const i64* rstride, void* dst) {
  i64 n = 1;
  for (int k = 0; k < nd; ++k) n *= dsize[k];
  i64 rn = 1;
  for (int k = 0; k < nr; ++k) rn *= rsize[k];
  if (n == 0) return;
  detail::parallel_ranges(
      n,
      [&](i64 begin, i64 end) {
        i64 idx[26] = {};
        i64 off = 0, rem = begin;
        for (int k = nd - 1; k >= 0; --k) {
          idx[k] = rem % dsize[k];
          rem /= dsize[k];
          off += idx[k] * sstride[k];
        }
        for (i64 e = begin; e < end; ++e) {
          float v;
          if (nr == 0) {
            v = load_f<ST>(src, off);
          } else {
            double acc = 0;
            i64 ridx[26] = {};
            i64 roff = 0;
            for (i64 t = 0; t < rn; ++t) {
              acc += load_f<ST>(src, off + roff);
              for (int k = nr - 1; k >= 0; --k) {
                roff += rstride[k];
                if (++ridx[k] < rsize[k]) break;
                roff -= ridx[k] * rstride[k];
                ridx[k] = 0;
              }
            }
            v = static_cast<float>(acc);
          }
          store_f<DT>(dst, e, v);
          for (int k = nd - 1; k >= 0; --k) {
            off += sstride[k];
            if (++idx[k] < dsize[k]) break;
            off -= idx[k] * sstride[k];
            idx[k] = 0;
          }
        }
      },
      std::max<i64>(1, kParallelMin / std::max<i64>(1, rn)));
}

void permute_reduce(const void* src, DataType st, const std::string& dest_letters, const i64* letter_stride,
                    const std::string& reduce_letters, const EinsumPlan& p, void* dst, DataType dt) {
  i64 dsize[26], sstride[26], rsize[26], rstride[26];
  const int nd = static_cast<int>(dest_letters.size()), nr = static_cast<int>(reduce_letters.size());
  for (int k = 0; k < nd; ++k) {
    dsize[k] = p.size[dest_letters[static_cast<std::size_t>(k)] - 'a'];
    sstride[k] = letter_stride[dest_letters[static_cast<std::size_t>(k)] - 'a'];
  }
  for (int k = 0; k < nr; ++k) {
    rsize[k] = p.size[reduce_letters[static_cast<std::size_t>(k)] - 'a'];
    rstride[k] = letter_stride[reduce_letters[static_cast<std::size_t>(k)] - 'a'];
  }
  by_float_type(st, "einsum", [&](auto s) {
    by_float_type(dt, "einsum", [&](auto d) {
      permute_reduce_typed<decltype(s)::value, decltype(d)::value>(src, nd, dsize, sstride, nr, rsize, rstride, dst);
    });
  });
}

void check_blas_int(i64 v, const char* what) {
  if (v > INT_MAX)
    throw UnsupportedError("[cpu] einsum: " + std::string(what) + " " + num(v) +
                           " exceeds the BLAS interface's 32-bit limit");
}

// ---- resize -----------------------------------------------------------------------------

using RCT = ResizeCoordinateTransformation;

// The input coordinate that output index o of one dim samples.
double resize_coordinate(const ResizeParams& p, int d, i64 o, i64 in, i64 out) {
  if (out == 1 && p.selector_for_single_pixel == ResizeSelector::kUPPER) return 0.0;
  const bool given = !p.scales.empty();
  const double x = static_cast<double>(o);
  const double scale = given ? static_cast<double>(p.scales[static_cast<std::size_t>(d)]) : 0.0;
  switch (p.coordinate_transformation) {
    case RCT::kALIGN_CORNERS:
      return out == 1 ? 0.0 : x * static_cast<double>(in - 1) / static_cast<double>(out - 1);
    case RCT::kASYMMETRIC:
      return given ? x / scale : x * static_cast<double>(in) / static_cast<double>(out);
    case RCT::kHALF_PIXEL:
      return given ? (x + 0.5) / scale - 0.5 : (x + 0.5) * static_cast<double>(in) / static_cast<double>(out) - 0.5;
  }
  fail("resize: unknown coordinate transformation " + std::to_string(static_cast<int>(p.coordinate_transformation)));
}

i64 nearest_index(ResizeRoundMode m, double x, i64 in) {
  double r;
  switch (m) {
    case ResizeRoundMode::kHALF_UP: r = std::floor(x + 0.5); break;
    case ResizeRoundMode::kHALF_DOWN: r = std::ceil(x - 0.5); break;
    case ResizeRoundMode::kFLOOR: r = std::floor(x); break;
    case ResizeRoundMode::kCEIL: r = std::ceil(x); break;
    default: fail("resize: unknown nearest rounding " + std::to_string(static_cast<int>(m)));
  }
  if (!(r >= 0.0)) return 0;  // also NaN
  if (r >= static_cast<double>(in - 1)) return in - 1;
  return static_cast<i64>(r);
}

double cubic_weight(double d, double a) {
  d = std::fabs(d);
  if (d <= 1.0) return ((a + 2.0) * d - (a + 3.0)) * d * d + 1.0;
  if (d < 2.0) return ((a * d - 5.0 * a) * d + 8.0 * a) * d - 4.0 * a;
  return 0.0;
}

// Per output index of one dim: K taps (input offset = index * stride, weight).
struct DimTaps {
  int K = 1;
  std::vector<i64> off;
  std::vector<float> w;
};

DimTaps resize_taps(const ResizeParams& p, int d, i64 in, i64 out, i64 stride) {
  DimTaps t;
  std::vector<double> x(static_cast<std::size_t>(out));
  bool integral = true;
  for (i64 o = 0; o < out; ++o) {
    double v = resize_coordinate(p, d, o, in, out);
    if (p.mode == InterpolationMode::kLINEAR) v = std::clamp(v, 0.0, static_cast<double>(in - 1));
    x[static_cast<std::size_t>(o)] = v;
    integral = integral && std::floor(v) == v && v >= 0.0 && v <= static_cast<double>(in - 1);
  }
  auto clampi = [&](i64 i) { return std::clamp<i64>(i, 0, in - 1); };
  if (integral) {  // every sample sits on an input element: one tap of weight 1
    t.K = 1;
    for (i64 o = 0; o < out; ++o) {
      t.off.push_back(static_cast<i64>(x[static_cast<std::size_t>(o)]) * stride);
      t.w.push_back(1.f);
    }
    return t;
  }
  t.K = p.mode == InterpolationMode::kLINEAR ? 2 : 4;
  for (i64 o = 0; o < out; ++o) {
    const double v = x[static_cast<std::size_t>(o)];
    const double f = std::floor(v);
    const double frac = v - f;
    const i64 i0 = static_cast<i64>(f);
    if (t.K == 2) {
      t.off.push_back(clampi(i0) * stride);
      t.off.push_back(clampi(i0 + 1) * stride);
      t.w.push_back(static_cast<float>(1.0 - frac));
      t.w.push_back(static_cast<float>(frac));
    } else {
      const double a = p.cubic_coeff;
      for (int k = -1; k <= 2; ++k) {
        t.off.push_back(clampi(i0 + k) * stride);
        t.w.push_back(static_cast<float>(cubic_weight(frac - k, a)));
      }
    }
  }
  return t;
}

// KL: the innermost dim's taps (1, 2 or 4), a template argument so the inner loop unrolls.
template <DataType T, int KL>
void resize_interp(const TensorRef& x, const TensorRef& out, const std::vector<DimTaps>& taps) {
  const Dims& od = out.dims;
  const int r = od.rank();
  const i64 inner = od[r - 1];
  const i64 rows = prod(od, 0, r - 1);
  // Outer dims with more than one tap: their combinations per row.
  int multi[Dims::kMaxRank];
  int nm = 0;
  i64 combos = 1;
  for (int k = 0; k < r - 1; ++k)
    if (taps[static_cast<std::size_t>(k)].K > 1) {
      multi[nm++] = k;
      combos *= taps[static_cast<std::size_t>(k)].K;
    }
  const DimTaps& last = taps[static_cast<std::size_t>(r - 1)];
  const i64* loff = last.off.data();
  const float* lw = last.w.data();
  std::atomic<bool> no_memory{false};
  detail::parallel_ranges(
      rows,
      [&](i64 begin, i64 end) {
        std::vector<i64> coff;
        std::vector<float> cw;
        try {
          coff.resize(static_cast<std::size_t>(combos));
          cw.resize(static_cast<std::size_t>(combos));
        } catch (...) {
          no_memory = true;
          return;
        }
        i64 idx[Dims::kMaxRank] = {};
        i64 rem = begin;
        for (int k = r - 2; k >= 0; --k) {
          idx[k] = rem % od[k];
          rem /= od[k];
        }
        for (i64 row = begin; row < end; ++row) {
          i64 base = 0;
          for (int k = 0; k < r - 1; ++k) {
            const DimTaps& t = taps[static_cast<std::size_t>(k)];
            if (t.K == 1) base += t.off[static_cast<std::size_t>(idx[k])];
          }
          // The row's combinations of the outer multi-tap dims.
          int tix[Dims::kMaxRank] = {};
          for (i64 c = 0; c < combos; ++c) {
            i64 off = base;
            float w = 1.f;
            for (int m = 0; m < nm; ++m) {
              const DimTaps& t = taps[static_cast<std::size_t>(multi[m])];
              const std::size_t s = static_cast<std::size_t>(idx[multi[m]] * t.K + tix[m]);
              off += t.off[s];
              w *= t.w[s];
            }
            coff[static_cast<std::size_t>(c)] = off;
            cw[static_cast<std::size_t>(c)] = w;
            for (int m = nm - 1; m >= 0; --m) {
              if (++tix[m] < taps[static_cast<std::size_t>(multi[m])].K) break;
              tix[m] = 0;
            }
          }
          for (i64 j = 0; j < inner; ++j) {
            const i64* jo = loff + j * KL;
            const float* jw = lw + j * KL;
            float acc = 0.f;
            for (i64 c = 0; c < combos; ++c) {
              const i64 o = coff[static_cast<std::size_t>(c)];
              float part = 0.f;
              for (int k = 0; k < KL; ++k) part += jw[k] * load_f<T>(x.data, o + jo[k]);
              acc += cw[static_cast<std::size_t>(c)] * part;
            }
            store_f<T>(out.data, row * inner + j, acc);
          }
          for (int k = r - 2; k >= 0; --k) {
            if (++idx[k] < od[k]) break;
            idx[k] = 0;
          }
        }
      },
      std::max<i64>(1, kParallelMin / std::max<i64>(1, inner * combos * KL)));
  if (no_memory) throw std::bad_alloc();
}

}  // namespace

// ---- concatenation ----------------------------------------------------------------------

void concatenation(int axis, std::span<const TensorRef> inputs, const TensorRef& out) {
  const i64 n = detail::checked_volume(out, "concatenation", "the output");
  if (inputs.empty()) fail("concatenation: needs at least one input");
  const int rank = out.dims.rank();
  if (axis < 0 || axis >= rank) fail("concatenation: axis " + std::to_string(axis) + " is out of range for rank " + std::to_string(rank));
  i64 total = 0;
  for (std::size_t i = 0; i < inputs.size(); ++i) {
    const TensorRef& t = inputs[i];
    const std::string name = "input " + std::to_string(i);
    detail::checked_volume(t, "concatenation", name.c_str());
    if (t.type != out.type) fail("concatenation: " + name + " has type " + tn(t.type) + "; the output is " + tn(out.type));
    if (t.dims.rank() != rank) fail("concatenation: " + name + " has dims " + t.dims.str() + "; the output has " + out.dims.str());
    for (int d = 0; d < rank; ++d)
      if (d != axis && t.dims[d] != out.dims[d])
        fail("concatenation: " + name + " has dims " + t.dims.str() + "; dimension " + std::to_string(d) +
             " differs from the output " + out.dims.str() + " (only axis " + std::to_string(axis) + " may differ)");
    total += t.dims[axis];
  }
  if (total != out.dims[axis])
    fail("concatenation: the inputs add up to " + num(total) + " along axis " + std::to_string(axis) + "; the output has " +
         out.dims.str());
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

// ---- slice ------------------------------------------------------------------------------

void slice(const SliceParams& p, const TensorRef& x, const TensorRef* fill, const TensorRef& out) {
  detail::checked_volume(x, "slice", "the input");
  const i64 n = detail::checked_volume(out, "slice", "the output");
  const int r = x.dims.rank();
  if (p.start.rank() != r || p.size.rank() != r || p.stride.rank() != r)
    fail("slice: start " + p.start.str() + ", size " + p.size.str() + " and stride " + p.stride.str() +
         " must each have the input's rank " + std::to_string(r));
  if (out.type != x.type || !(out.dims == p.size))
    fail("slice: the output is " + desc(out) + "; expected " + tn(x.type) + p.size.str());
  const void* fill_value = nullptr;
  if (fill != nullptr) {
    if (p.mode != SampleMode::kFILL) fail("slice: a fill value is only used by mode FILL");
    if (fill->type != x.type || detail::checked_volume(*fill, "slice", "the fill value") != 1)
      fail("slice: the fill value is " + desc(*fill) + "; it must be one element of " + tn(x.type));
    fill_value = fill->data;
  }
  if (p.mode != SampleMode::kSTRICT_BOUNDS && p.mode != SampleMode::kWRAP && p.mode != SampleMode::kCLAMP &&
      p.mode != SampleMode::kFILL && p.mode != SampleMode::kREFLECT)
    fail("slice: unknown mode " + std::to_string(static_cast<int>(p.mode)));
  if (n == 0) return;
  i64 st[Dims::kMaxRank];
  strides_of(x.dims, st);
  std::vector<std::vector<i64>> table(static_cast<std::size_t>(r));
  for (int d = 0; d < r; ++d) {
    const i64 dim = x.dims[d];
    auto& tab = table[static_cast<std::size_t>(d)];
    tab.resize(static_cast<std::size_t>(p.size[d]));
    for (i64 i = 0; i < p.size[d]; ++i) {
      const i64 v = p.start[d] + i * p.stride[d];
      i64 m = v;
      if (v < 0 || v >= dim) {
        switch (p.mode) {
          case SampleMode::kSTRICT_BOUNDS:
            fail("slice: dimension " + std::to_string(d) + " reads index " + num(v) + " of an input of size " + num(dim) +
                 " in mode STRICT_BOUNDS");
          case SampleMode::kFILL: m = -1; break;
          case SampleMode::kWRAP:
          case SampleMode::kCLAMP:
          case SampleMode::kREFLECT:
            if (dim == 0) fail("slice: dimension " + std::to_string(d) + " of the input is empty; only FILL can read from it");
            if (p.mode == SampleMode::kWRAP) {
              m = ((v % dim) + dim) % dim;
            } else if (p.mode == SampleMode::kCLAMP) {
              m = std::clamp<i64>(v, 0, dim - 1);
            } else if (dim == 1) {
              m = 0;
            } else {
              const i64 period = 2 * dim - 2;
              const i64 q = ((v % period) + period) % period;
              m = q < dim ? q : period - q;
            }
            break;
        }
      }
      tab[static_cast<std::size_t>(i)] = m < 0 ? -1 : m * st[d];
    }
  }
  table_copy(x, out, table, fill_value, "slice");
}

// ---- gather -----------------------------------------------------------------------------

void gather(const GatherParams& p, const TensorRef& data, const TensorRef& indices, const TensorRef& out) {
  detail::checked_volume(data, "gather", "the data");
  const i64 ni = detail::checked_volume(indices, "gather", "the indices");
  const i64 n = detail::checked_volume(out, "gather", "the output");
  if (indices.type != DataType::kINT32 && indices.type != DataType::kINT64)
    fail("gather: the indices have type " + tn(indices.type) + "; indices are int32 or int64");
  if (out.type != data.type) fail("gather: the output has type " + tn(out.type) + "; the data has " + tn(data.type));
  const Dims& D = data.dims;
  const Dims& I = indices.dims;
  const int r = D.rank(), q = I.rank();
  i64 ds[Dims::kMaxRank];
  strides_of(D, ds);
  std::vector<i64> od;
  const std::size_t es = element_size(data.type);
  const auto* src = static_cast<const unsigned char*>(data.data);
  auto* dst = static_cast<unsigned char*>(out.data);
  BadIndex bad;
  auto check_out = [&](const char* mode) {
    const Dims e{std::span<const i64>(od)};
    if (!(out.dims == e))
      fail("gather: the output has dims " + out.dims.str() + "; mode " + mode + " with data " + D.str() + " and indices " +
           I.str() + " gives " + e.str());
  };
  auto resolve_axis = [&]() {
    const int a = p.axis < 0 ? p.axis + r : p.axis;
    if (a < 0 || a >= r) fail("gather: axis " + std::to_string(p.axis) + " is out of range for data " + D.str());
    return a;
  };

  switch (p.mode) {
    case GatherMode::kDEFAULT: {
      const int axis = resolve_axis();
      const int nb = p.num_elementwise_dims;
      if (nb < 0 || nb > 1) fail("gather: num_elementwise_dims " + std::to_string(nb) + " must be 0 or 1 in mode DEFAULT");
      if (nb == 1 && (q < 1 || axis < 1)) fail("gather: num_elementwise_dims 1 needs indices of rank >= 1 and axis >= 1");
      if (nb == 1 && I[0] != D[0])
        fail("gather: with num_elementwise_dims 1 the indices " + I.str() + " and the data " + D.str() +
             " must share dimension 0");
      for (int i = 0; i < axis; ++i) od.push_back(D[i]);
      for (int i = nb; i < q; ++i) od.push_back(I[i]);
      for (int i = axis + 1; i < r; ++i) od.push_back(D[i]);
      check_out("DEFAULT");
      if (n == 0) return;
      const i64 outer = prod(D, 0, axis), dim = D[axis], inner_bytes = prod(D, axis + 1, r) * static_cast<i64>(es);
      const i64 nidx = prod(I, nb, q);
      const i64 outer2 = nb == 1 ? outer / D[0] : outer;  // outer indices per batch
      detail::parallel_ranges(
          outer * nidx,
          [&](i64 begin, i64 end) {
            for (i64 t = begin; t < end; ++t) {
              const i64 o = t / nidx, j = t % nidx;
              const i64 pos = nb == 1 ? (o / outer2) * nidx + j : j;
              i64 v = load_index(indices.data, indices.type, pos);
              const i64 raw = v;
              if (!normalize_index(v, dim)) {
                bad.report(raw, dim);
                continue;
              }
              std::memcpy(dst + t * inner_bytes, src + (o * dim + v) * inner_bytes, static_cast<std::size_t>(inner_bytes));
            }
          },
          std::max<i64>(1, kParallelMin * 4 / std::max<i64>(1, inner_bytes)));
      break;
    }
    case GatherMode::kELEMENT: {
      const int axis = resolve_axis();
      if (q != r) fail("gather: the indices " + I.str() + " must have the data's rank in mode ELEMENT (data " + D.str() + ")");
      for (int i = 0; i < r; ++i)
        if (i != axis && I[i] > D[i])
          fail("gather: the indices " + I.str() + " exceed the data " + D.str() + " in dimension " + std::to_string(i));
      od = I.vec();
      check_out("ELEMENT");
      if (n == 0) return;
      const i64 dim = D[axis];
      const i64 inner = I[r - 1];
      const i64 rows = prod(I, 0, r - 1);
      by_size(es, "gather", [&](auto tag) {
        using T = decltype(tag);
        const T* x = static_cast<const T*>(data.data);
        T* y = static_cast<T*>(out.data);
        detail::parallel_ranges(
            rows,
            [&](i64 begin, i64 end) {
              i64 idx[Dims::kMaxRank] = {};
              i64 rem = begin;
              for (int k = r - 2; k >= 0; --k) {
                idx[k] = rem % I[k];
                rem /= I[k];
              }
              for (i64 row = begin; row < end; ++row) {
                i64 base = 0;
                for (int k = 0; k < r - 1; ++k)
                  if (k != axis) base += idx[k] * ds[k];
                for (i64 j = 0; j < inner; ++j) {
                  const i64 e = row * inner + j;
                  i64 v = load_index(indices.data, indices.type, e);
                  const i64 raw = v;
                  if (!normalize_index(v, dim)) {
                    bad.report(raw, dim);
                    continue;
                  }
                  y[e] = x[base + (axis == r - 1 ? v : j + v * ds[axis])];
                }
                for (int k = r - 2; k >= 0; --k) {
                  if (++idx[k] < I[k]) break;
                  idx[k] = 0;
                }
              }
            },
            std::max<i64>(1, kParallelMin / std::max<i64>(1, inner)));
      });
      break;
    }
    case GatherMode::kND: {
      const int nb = p.num_elementwise_dims;
      if (q < 1) fail("gather: the indices must have rank >= 1 in mode ND");
      const i64 last = I[q - 1];
      if (nb < 0 || nb >= q || nb + last > r)
        fail("gather: indices " + I.str() + " with num_elementwise_dims " + std::to_string(nb) + " do not fit data " + D.str());
      for (int i = 0; i < nb; ++i)
        if (I[i] != D[i])
          fail("gather: batch dimension " + std::to_string(i) + " differs between data " + D.str() + " and indices " + I.str());
      for (int i = 0; i < q - 1; ++i) od.push_back(I[i]);
      const int after = nb + static_cast<int>(last);
      for (int i = after; i < r; ++i) od.push_back(D[i]);
      check_out("ND");
      if (n == 0) return;
      const i64 rows = prod(I, 0, q - 1);
      const i64 per_batch = prod(I, nb, q - 1);
      const i64 batch_stride = prod(D, nb, r);
      const i64 slice_bytes = prod(D, after, r) * static_cast<i64>(es);
      detail::parallel_ranges(
          rows,
          [&](i64 begin, i64 end) {
            for (i64 t = begin; t < end; ++t) {
              i64 off = (t / std::max<i64>(1, per_batch)) * batch_stride;
              bool ok = true;
              for (i64 m = 0; m < last; ++m) {
                i64 v = load_index(indices.data, indices.type, t * last + m);
                const i64 raw = v, dim = D[nb + static_cast<int>(m)];
                if (!normalize_index(v, dim)) {
                  bad.report(raw, dim);
                  ok = false;
                  break;
                }
                off += v * ds[nb + static_cast<int>(m)];
              }
              if (ok)
                std::memcpy(dst + t * slice_bytes, src + off * static_cast<i64>(es), static_cast<std::size_t>(slice_bytes));
            }
          },
          std::max<i64>(1, kParallelMin * 4 / std::max<i64>(1, slice_bytes)));
      break;
    }
    default: fail("gather: unknown mode " + std::to_string(static_cast<int>(p.mode)));
  }
  (void)ni;
  if (bad.seen)
    fail("gather: index " + num(bad.value) + " is out of range for a dimension of size " + num(bad.dim) + " (valid: [" +
         num(-bad.dim) + ", " + num(bad.dim) + "))");
}

// ---- select -----------------------------------------------------------------------------

void select(const TensorRef& condition, const TensorRef& then_input, const TensorRef& else_input, const TensorRef& out) {
  detail::checked_volume(condition, "select", "the condition");
  detail::checked_volume(then_input, "select", "input 1 (then)");
  detail::checked_volume(else_input, "select", "input 2 (else)");
  const i64 n = detail::checked_volume(out, "select", "the output");
  if (condition.type != DataType::kBOOL) fail("select: the condition has type " + tn(condition.type) + "; it must be bool");
  if (then_input.type != out.type || else_input.type != out.type)
    fail("select: inputs " + desc(then_input) + " and " + desc(else_input) + " must have the output's type " + tn(out.type));
  const int r = out.dims.rank();
  i64 s[3][Dims::kMaxRank];
  const TensorRef* ins[3] = {&condition, &then_input, &else_input};
  for (int i = 0; i < 3; ++i) {
    const Dims& d = ins[i]->dims;
    if (d.rank() != r) fail("select: input " + std::to_string(i) + " has dims " + d.str() + "; the output has " + out.dims.str());
    strides_of(d, s[i]);
    for (int k = 0; k < r; ++k) {
      if (d[k] == out.dims[k]) continue;
      if (d[k] != 1)
        fail("select: input " + std::to_string(i) + " dims " + d.str() + " do not broadcast to the output " + out.dims.str());
      s[i][k] = 0;
    }
  }
  if (n == 0) return;
  const Dims& od = out.dims;
  const i64 inner = r == 0 ? 1 : od[r - 1];
  const i64 rows = r == 0 ? 1 : prod(od, 0, r - 1);
  const i64 ci = r == 0 ? 0 : s[0][r - 1], ti = r == 0 ? 0 : s[1][r - 1], ei = r == 0 ? 0 : s[2][r - 1];
  const auto* cond = static_cast<const std::uint8_t*>(condition.data);
  by_size(element_size(out.type), "select", [&](auto tag) {
    using T = decltype(tag);
    const T* a = static_cast<const T*>(then_input.data);
    const T* b = static_cast<const T*>(else_input.data);
    T* y = static_cast<T*>(out.data);
    detail::parallel_ranges(
        rows,
        [&](i64 begin, i64 end) {
          i64 idx[Dims::kMaxRank] = {};
          i64 rem = begin;
          for (int k = r - 2; k >= 0; --k) {
            idx[k] = rem % od[k];
            rem /= od[k];
          }
          for (i64 row = begin; row < end; ++row) {
            i64 oc = 0, ot = 0, oe = 0;
            for (int k = 0; k < r - 1; ++k) {
              oc += idx[k] * s[0][k];
              ot += idx[k] * s[1][k];
              oe += idx[k] * s[2][k];
            }
            T* dst = y + row * inner;
            for (i64 j = 0; j < inner; ++j) dst[j] = cond[oc + j * ci] ? a[ot + j * ti] : b[oe + j * ei];
            for (int k = r - 2; k >= 0; --k) {
              if (++idx[k] < od[k]) break;
              idx[k] = 0;
            }
          }
        },
        std::max<i64>(1, kParallelMin / std::max<i64>(1, inner)));
  });
}

// ---- padding ----------------------------------------------------------------------------

void padding(const PaddingParams& p, const TensorRef& x, const TensorRef& out) {
  detail::checked_volume(x, "padding", "the input");
  const i64 n = detail::checked_volume(out, "padding", "the output");
  const int r = x.dims.rank(), np = p.pre_padding.rank();
  if (p.post_padding.rank() != np)
    fail("padding: pre_padding " + p.pre_padding.str() + " and post_padding " + p.post_padding.str() + " differ in rank");
  if (np > r) fail("padding: padding of rank " + std::to_string(np) + " exceeds the input's rank " + std::to_string(r));
  Dims expected = x.dims;
  for (int i = 0; i < np; ++i) {
    const int d = r - np + i;
    expected[d] = x.dims[d] + p.pre_padding[i] + p.post_padding[i];
    if (expected[d] < 0)
      fail("padding: " + p.pre_padding.str() + "/" + p.post_padding.str() + " crops dimension " + std::to_string(d) +
           " of " + x.dims.str() + " below zero");
  }
  if (out.type != x.type || !(out.dims == expected))
    fail("padding: the output is " + desc(out) + "; expected " + tn(x.type) + expected.str());
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

// ---- resize -----------------------------------------------------------------------------

void resize(const ResizeParams& p, const TensorRef& x, const TensorRef& out) {
  detail::checked_volume(x, "resize", "the input");
  const i64 n = detail::checked_volume(out, "resize", "the output");
  const int r = x.dims.rank();
  if (p.output_dims && !p.scales.empty()) fail("resize: set either output dims or scales, not both");
  Dims expected = x.dims;
  if (p.output_dims) {
    expected = *p.output_dims;
  } else {
    if (static_cast<int>(p.scales.size()) != r)
      fail("resize: " + std::to_string(p.scales.size()) + " scales for an input of rank " + std::to_string(r));
    for (int d = 0; d < r; ++d) {
      const float s = p.scales[static_cast<std::size_t>(d)];
      if (!(s > 0.f)) fail("resize: scales must be > 0");
      expected[d] = static_cast<i64>(std::floor(static_cast<double>(x.dims[d]) * s));
    }
  }
  if (out.type != x.type || !(out.dims == expected))
    fail("resize: the output is " + desc(out) + "; expected " + tn(x.type) + expected.str());
  if (p.mode != InterpolationMode::kNEAREST && p.mode != InterpolationMode::kLINEAR && p.mode != InterpolationMode::kCUBIC)
    fail("resize: unknown interpolation mode " + std::to_string(static_cast<int>(p.mode)));
  if (p.mode != InterpolationMode::kNEAREST && !is_float_type(x.type))
    fail("resize: linear and cubic resize take float32, float16 or bfloat16, not " + tn(x.type));
  if (n == 0) return;
  for (int d = 0; d < r; ++d)
    if (x.dims[d] == 0) fail("resize: dimension " + std::to_string(d) + " of the input " + x.dims.str() + " is empty");
  i64 st[Dims::kMaxRank];
  strides_of(x.dims, st);
  if (p.mode == InterpolationMode::kNEAREST) {
    std::vector<std::vector<i64>> table(static_cast<std::size_t>(r));
    for (int d = 0; d < r; ++d) {
      const i64 in = x.dims[d], on = out.dims[d];
      auto& tab = table[static_cast<std::size_t>(d)];
      for (i64 o = 0; o < on; ++o) tab.push_back(nearest_index(p.nearest_rounding, resize_coordinate(p, d, o, in, on), in) * st[d]);
    }
    table_copy(x, out, table, nullptr, "resize");
    return;
  }
  if (r == 0) {
    std::memcpy(out.data, x.data, element_size(x.type));
    return;
  }
  std::vector<DimTaps> taps;
  for (int d = 0; d < r; ++d) taps.push_back(resize_taps(p, d, x.dims[d], out.dims[d], st[d]));
  by_float_type(x.type, "resize", [&](auto t) {
    constexpr DataType T = decltype(t)::value;
    switch (taps.back().K) {
      case 1: resize_interp<T, 1>(x, out, taps); break;
      case 2: resize_interp<T, 2>(x, out, taps); break;
      default: resize_interp<T, 4>(x, out, taps); break;
    }
  });
}

// ---- einsum -----------------------------------------------------------------------------

std::size_t einsum_workspace_bytes(const EinsumParams& p, std::span<const TensorRef> inputs, const TensorRef& out) {
  // Sizing only: the buffers need not exist yet (the builder asks before allocating).
  const EinsumPlan plan = plan_einsum(p, inputs, out);
  return static_cast<std::size_t>(plan.wa + plan.wb + plan.wc) * sizeof(float);
}

void einsum(const EinsumParams& p, std::span<const TensorRef> inputs, const TensorRef& out, void* workspace) {
  for (std::size_t i = 0; i < inputs.size(); ++i)
    detail::checked_volume(inputs[i], "einsum", ("input " + std::to_string(i)).c_str());
  const i64 n = detail::checked_volume(out, "einsum", "the output");
  const EinsumPlan plan = plan_einsum(p, inputs, out);
  if (n == 0) return;
  const DataType type = out.type;
  if (plan.inputs == 1) {
    std::string reduced;
    for (char c : plan.view[0].letters)
      if (!contains(plan.out, c)) reduced += c;
    permute_reduce(inputs[0].data, type, plan.out, plan.view[0].stride, reduced, plan, out.data, type);
    return;
  }
  if (plan.wa + plan.wb + plan.wc > 0 && workspace == nullptr)
    fail("einsum: '" + p.equation + "' needs a workspace (einsum_workspace_bytes)");
  float* ws = static_cast<float*>(workspace);
  const float* A;
  const float* Bm;
  float* C;
  if (plan.a_direct) {
    A = static_cast<const float*>(inputs[0].data);
  } else {
    float* wa = ws;
    permute_reduce(inputs[0].data, type, plan.batch + plan.mfree + plan.kcon, plan.view[0].stride, plan.sum_a, plan, wa,
                   DataType::kFLOAT);
    A = wa;
  }
  if (plan.b_direct) {
    Bm = static_cast<const float*>(inputs[1].data);
  } else {
    float* wb = ws + plan.wa;
    permute_reduce(inputs[1].data, type, plan.batch + plan.kcon + plan.nfree, plan.view[1].stride, plan.sum_b, plan, wb,
                   DataType::kFLOAT);
    Bm = wb;
  }
  C = plan.c_direct ? static_cast<float*>(out.data) : ws + plan.wa + plan.wb;

  const i64 M = plan.M, N = plan.N, K = plan.K, mn = M * N;
  if (K == 0) {
    std::fill_n(C, plan.B * mn, 0.f);
  } else {
    check_blas_int(M, "M");
    check_blas_int(N, "N");
    check_blas_int(K, "K");
    detail::ensure_blas_threads();
    const CBLAS_TRANSPOSE ta = plan.a_trans ? CblasTrans : CblasNoTrans;
    const CBLAS_TRANSPOSE tb = plan.b_trans ? CblasTrans : CblasNoTrans;
    const int lda = static_cast<int>(plan.a_trans ? M : K), ldb = static_cast<int>(plan.b_trans ? K : N);
    for (i64 b = 0; b < plan.B; ++b)
      cblas_sgemm(CblasRowMajor, ta, tb, static_cast<int>(M), static_cast<int>(N), static_cast<int>(K), 1.0f, A + b * M * K,
                  lda, Bm + b * K * N, ldb, 0.0f, C + b * mn, static_cast<int>(N));
  }
  if (plan.c_direct) return;
  // C[batch, M, N] into the output's letter order, rounded to its type once.
  i64 cstride[26] = {};
  i64 s = 1;
  const std::string seq = plan.batch + plan.mfree + plan.nfree;
  for (auto it = seq.rbegin(); it != seq.rend(); ++it) {
    cstride[*it - 'a'] = s;
    s *= plan.size[*it - 'a'];
  }
  permute_reduce(C, DataType::kFLOAT, plan.out, cstride, "", plan, out.data, type);
}

}  // namespace tensoracle::cpu

// ---- topk -------------------------------------------------------------------------------

namespace tensoracle::cpu {

namespace {

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

void topk(const TopKParams& p, const TensorRef& x, const TensorRef& out) {
  detail::checked_volume(x, "topk", "the input");
  const i64 m = detail::checked_volume(out, "topk", "the output");
  const int r = x.dims.rank();
  if (p.axes == 0 || (p.axes & (p.axes - 1)) != 0 || r < 1 || p.axes >= (1u << r))
    fail("topk: axes " + std::to_string(p.axes) + " must set one bit below the input's rank " + std::to_string(r));
  const int axis = std::countr_zero(p.axes);
  const i64 n = x.dims[axis], k = p.k;
  Dims expect = x.dims;
  expect[axis] = k;
  const bool want_values = p.output != 1, want_indices = p.output != 0;
  if (p.output != 0 && p.output != 1) fail("topk: the kernel computes one output (0 or 1)");
  if (k < 1 || k > n) fail("topk: k " + num(k) + " is outside [1, " + num(n) + "] for input " + desc(x));
  const DataType out_type = want_values ? x.type : DataType::kINT32;
  if (!(out.dims == expect) || out.type != out_type)
    fail("topk: output " + desc(out) + " should be " + tn(out_type) + expect.str() + " for input " + desc(x));
  if (n > INT32_MAX) fail("topk: dimension " + num(n) + " does not fit int32 indices");
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
            if (want_indices) {
              auto* y = static_cast<std::int32_t*>(out.data);
              for (i64 j = 0; j < k; ++j) y[obase + j * inner] = order[static_cast<std::size_t>(j)];
            } else {
              by_size(element_size(x.type), "topk", [&](auto tag) {
                using T = decltype(tag);
                const T* src = static_cast<const T*>(x.data);
                T* y = static_cast<T*>(out.data);
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

}  // namespace tensoracle::cpu
