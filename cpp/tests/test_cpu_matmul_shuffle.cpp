// Tests of the CPU backend's matmul, shuffle and copy kernels and its thread setting
// (backends/cpu/kernels.h) against scalar reference loops written here and in
// cpu_kernels_test_helpers.h: double-precision references rounded to the output type as
// kernels.h states (computed in float32, rounded once when stored).
#include <gtest/gtest.h>

#include <cmath>
#include <cstdint>
#include <cstring>
#include <optional>
#include <random>
#include <span>
#include <string>
#include <thread>
#include <utility>
#include <vector>

#include "backends/cpu/kernels.h"
#include "cpu_kernels_test_helpers.h"
#include "tensoracle/errors.h"

namespace {

using namespace tensoracle;
using namespace tensoracle::testing::cpu_kernels;
using MO = MatrixOperation;

// ---- matmul -----------------------------------------------------------------------------

Dims mm_out_dims(const MatrixMultiplyParams& p, const Dims& a, const Dims& b) {
  const int br = a.rank() - (p.op0 == MO::kVECTOR ? 1 : 2);
  std::vector<i64> d;
  for (int i = 0; i < br; ++i) d.push_back(a[i] == 1 ? b[i] : a[i]);
  if (p.op0 != MO::kVECTOR) d.push_back(p.op0 == MO::kTRANSPOSE ? a[a.rank() - 1] : a[a.rank() - 2]);
  if (p.op1 != MO::kVECTOR) d.push_back(p.op1 == MO::kTRANSPOSE ? b[b.rank() - 2] : b[b.rank() - 1]);
  return Dims(std::span<const i64>(d));
}

// Element (r, c) of op(X) for batch index `batch` (already broadcast-resolved).
double mm_elem(const Buf& x, MO op, i64 batch, i64 r, i64 c, bool is_a) {
  const Dims& d = x.dims;
  if (op == MO::kVECTOR) {
    const i64 k = is_a ? c : r;  // A: 1 x K row; B: K x 1 column
    return x.get(batch * d[d.rank() - 1] + k);
  }
  const i64 rows = d[d.rank() - 2], cols = d[d.rank() - 1];
  if (op == MO::kTRANSPOSE) std::swap(r, c);
  return x.get((batch * rows + r) * cols + c);
}

// Double-precision reference; `mag` gets sum |a * b| per output element.
std::vector<double> ref_matmul(const MatrixMultiplyParams& p, const Buf& a, const Buf& b, std::vector<double>* mag) {
  const Dims out = mm_out_dims(p, a.dims, b.dims);
  const int br = a.dims.rank() - (p.op0 == MO::kVECTOR ? 1 : 2);
  const i64 K = p.op0 == MO::kVECTOR ? a.dims[a.dims.rank() - 1]
                                     : (p.op0 == MO::kTRANSPOSE ? a.dims[a.dims.rank() - 2] : a.dims[a.dims.rank() - 1]);
  std::vector<double> r(static_cast<std::size_t>(out.volume()));
  mag->assign(r.size(), 0);
  for (i64 f = 0; f < out.volume(); ++f) {
    i64 idx[Dims::kMaxRank], rem = f;
    for (int k = out.rank() - 1; k >= 0; --k) idx[k] = rem % out[k], rem /= out[k];
    i64 ab = 0, bb = 0;
    for (int k = 0; k < br; ++k) {
      ab = ab * a.dims[k] + (a.dims[k] == 1 ? 0 : idx[k]);
      bb = bb * b.dims[k] + (b.dims[k] == 1 ? 0 : idx[k]);
    }
    const i64 m = p.op0 != MO::kVECTOR ? idx[br] : 0;
    const i64 n = p.op1 != MO::kVECTOR ? idx[out.rank() - 1] : 0;
    double s = 0, g = 0;
    for (i64 k = 0; k < K; ++k) {
      const double t = mm_elem(a, p.op0, ab, m, k, true) * mm_elem(b, p.op1, bb, k, n, false);
      s += t;
      g += std::fabs(t);
    }
    r[static_cast<std::size_t>(f)] = s;
    (*mag)[static_cast<std::size_t>(f)] = g;
  }
  return r;
}

// Runs the multiply with operands in [lo, hi] on `grid` (0: any value) and checks it.
// exact: operands are multiples of 1/4 in [-2, 2], so the float32 GEMM is exact and the
// result must be the exact sum rounded once.
void check_matmul(DataType t, MO op0, MO op1, const Dims& da, const Dims& db, std::uint32_t seed, bool exact = false) {
  const MatrixMultiplyParams p{op0, op1};
  std::mt19937 rng(seed);
  Buf a(t, da), b(t, db);
  fill_random(a, rng, -1, 1);
  fill_random(b, rng, -1, 1);
  if (exact) {
    for (i64 i = 0; i < a.size(); ++i) a.set(i, std::round(a.get(i) * 8) / 4);
    for (i64 i = 0; i < b.size(); ++i) b.set(i, std::round(b.get(i) * 8) / 4);
  }
  const Dims od = mm_out_dims(p, da, db);
  Buf out(t, od);
  for (i64 i = 0; i < out.size(); ++i) out.set(i, 12345);  // garbage
  const std::size_t ws = cpu::matmul_workspace_bytes(p, a.ref(), b.ref());
  if (t == DataType::kFLOAT) {
    EXPECT_EQ(ws, 0u);
  }
  std::vector<float> workspace(ws / sizeof(float) + 1);
  cpu::matmul(p, a.ref(), b.ref(), out.ref(), ws ? workspace.data() : nullptr);
  std::vector<double> mag;
  const std::vector<double> want = ref_matmul(p, a, b, &mag);
  const i64 K = mag.empty() ? 0 : (op0 == MO::kVECTOR ? da[da.rank() - 1] : (op0 == MO::kTRANSPOSE ? da[da.rank() - 2] : da[da.rank() - 1]));
  Checker check;
  for (i64 i = 0; i < out.size(); ++i) {
    const double w = round_to(t, want[static_cast<std::size_t>(i)]);
    const double got = out.get(i);
    // float32 accumulation error bound, plus one ulp of the output type for the rounding.
    const double tol = exact ? 0 : ulp_of(t, w) + 2.0 * static_cast<double>(K) * std::ldexp(1.0, -24) * mag[static_cast<std::size_t>(i)];
    check(std::fabs(got - w) <= tol, std::string(type_name(t)) + " " + da.str() + " op" + std::to_string(static_cast<int>(op0)) + " x " +
                                         db.str() + " op" + std::to_string(static_cast<int>(op1)) + " " + at(i, got, w));
  }
}

TEST(CpuKernelsMatmul, TransposeCombinations) {
  for (DataType t : kFloatTypes) {
    check_matmul(t, MO::kNONE, MO::kNONE, {5, 7}, {7, 3}, 1);
    check_matmul(t, MO::kTRANSPOSE, MO::kNONE, {7, 5}, {7, 3}, 2);
    check_matmul(t, MO::kNONE, MO::kTRANSPOSE, {5, 7}, {3, 7}, 3);
    check_matmul(t, MO::kTRANSPOSE, MO::kTRANSPOSE, {7, 5}, {3, 7}, 4);
    check_matmul(t, MO::kTRANSPOSE, MO::kTRANSPOSE, {2, 7, 5}, {2, 3, 7}, 5);
  }
}

TEST(CpuKernelsMatmul, VectorOperations) {
  for (DataType t : kFloatTypes) {
    check_matmul(t, MO::kVECTOR, MO::kNONE, {7}, {7, 3}, 11);                // (3)
    check_matmul(t, MO::kNONE, MO::kVECTOR, {5, 7}, {7}, 12);                // (5)
    check_matmul(t, MO::kVECTOR, MO::kVECTOR, {7}, {7}, 13);                 // ()
    check_matmul(t, MO::kVECTOR, MO::kNONE, {4, 7}, {4, 7, 3}, 14);          // (4, 3)
    check_matmul(t, MO::kNONE, MO::kVECTOR, {4, 5, 7}, {4, 7}, 15);          // (4, 5)
    check_matmul(t, MO::kVECTOR, MO::kTRANSPOSE, {2, 7}, {2, 3, 7}, 16);     // (2, 3)
    check_matmul(t, MO::kTRANSPOSE, MO::kVECTOR, {3, 7, 5}, {1, 7}, 17);     // (3, 5)
    check_matmul(t, MO::kVECTOR, MO::kNONE, {6, 7}, {1, 7, 3}, 18);          // collapsed: (6, 3)
    check_matmul(t, MO::kVECTOR, MO::kVECTOR, {2, 3, 7}, {2, 1, 7}, 19);     // (2, 3) dot products
  }
}

TEST(CpuKernelsMatmul, BatchBroadcast) {
  for (DataType t : kFloatTypes) {
    check_matmul(t, MO::kNONE, MO::kNONE, {2, 1, 5, 7}, {1, 3, 7, 4}, 21);  // both sides broadcast
    check_matmul(t, MO::kNONE, MO::kNONE, {3, 5, 7}, {1, 7, 4}, 22);        // collapsed to one GEMM
    check_matmul(t, MO::kNONE, MO::kNONE, {2, 3, 5, 7}, {1, 1, 7, 4}, 23);  // collapsed, rank 4
    check_matmul(t, MO::kNONE, MO::kNONE, {1, 5, 7}, {3, 7, 4}, 24);        // A broadcast
    check_matmul(t, MO::kTRANSPOSE, MO::kNONE, {3, 7, 5}, {1, 7, 4}, 25);   // transposed A: per batch
    check_matmul(t, MO::kNONE, MO::kTRANSPOSE, {2, 3, 5, 7}, {2, 1, 4, 7}, 26);
    check_matmul(t, MO::kNONE, MO::kNONE, {3, 5, 7}, {3, 7, 4}, 27);        // no broadcast
  }
}

TEST(CpuKernelsMatmul, NarrowTypesRoundOnceExactly) {
  for (DataType t : {DataType::kHALF, DataType::kBF16}) {
    check_matmul(t, MO::kNONE, MO::kNONE, {9, 33}, {33, 10}, 31, /*exact=*/true);
    check_matmul(t, MO::kTRANSPOSE, MO::kVECTOR, {2, 33, 9}, {2, 33}, 32, true);
    check_matmul(t, MO::kNONE, MO::kNONE, {3, 9, 33}, {1, 33, 10}, 33, true);
  }
}

TEST(CpuKernelsMatmul, LargeAndThreaded) {
  check_matmul(DataType::kFLOAT, MO::kNONE, MO::kNONE, {2, 128, 256}, {1, 256, 192}, 41);
  check_matmul(DataType::kFLOAT, MO::kNONE, MO::kTRANSPOSE, {130, 300}, {200, 300}, 42);
  check_matmul(DataType::kHALF, MO::kNONE, MO::kNONE, {4, 64, 96}, {4, 96, 80}, 43);
  check_matmul(DataType::kBF16, MO::kTRANSPOSE, MO::kNONE, {96, 200}, {96, 170}, 44);
}

TEST(CpuKernelsMatmul, EmptyDims) {
  check_matmul(DataType::kFLOAT, MO::kNONE, MO::kNONE, {3, 0}, {0, 4}, 51);  // K = 0: zeros
  check_matmul(DataType::kHALF, MO::kNONE, MO::kNONE, {2, 3, 0}, {2, 0, 4}, 52);
  check_matmul(DataType::kFLOAT, MO::kNONE, MO::kNONE, {0, 3, 4}, {0, 4, 2}, 53);  // no batches
  check_matmul(DataType::kFLOAT, MO::kNONE, MO::kNONE, {0, 4}, {4, 2}, 54);        // M = 0
}

TEST(CpuKernelsMatmul, WorkspaceAndErrors) {
  Buf a(DataType::kHALF, {2, 3, 4}), b(DataType::kHALF, {1, 4, 5}), out(DataType::kHALF, {2, 3, 5});
  const MatrixMultiplyParams p{};
  EXPECT_EQ(cpu::matmul_workspace_bytes(p, a.ref(), b.ref()), (24u + 20u + 30u) * 4u);
  EXPECT_THROW(cpu::matmul(p, a.ref(), b.ref(), out.ref(), nullptr), InvalidArgument);
  Buf f(DataType::kFLOAT, {3, 4}), g(DataType::kFLOAT, {5, 6}), fo(DataType::kFLOAT, {3, 6});
  EXPECT_THROW(cpu::matmul(p, f.ref(), g.ref(), fo.ref(), nullptr), InvalidArgument);  // K differs
  Buf g2(DataType::kFLOAT, {4, 6}), bad(DataType::kFLOAT, {6, 3});
  EXPECT_THROW(cpu::matmul(p, f.ref(), g2.ref(), bad.ref(), nullptr), InvalidArgument);  // wrong output dims
  EXPECT_THROW(cpu::matmul(p, f.ref(), a.ref(), fo.ref(), nullptr), InvalidArgument);    // mixed types
  Buf i(DataType::kINT32, {3, 4}), j(DataType::kINT32, {4, 6}), io(DataType::kINT32, {3, 6});
  EXPECT_THROW(cpu::matmul(p, i.ref(), j.ref(), io.ref(), nullptr), InvalidArgument);
  Buf c3(DataType::kFLOAT, {2, 3, 4});
  EXPECT_THROW(cpu::matmul(p, c3.ref(), g2.ref(), fo.ref(), nullptr), InvalidArgument);  // batch ranks differ
}

// ---- shuffle ----------------------------------------------------------------------------

Dims permute(const Dims& d, const Permutation& p) {
  Dims o = d;
  for (int i = 0; i < d.rank(); ++i) o[i] = d[p.order[static_cast<std::size_t>(i)]];
  return o;
}

Permutation perm(std::initializer_list<int> v) {
  Permutation p;
  int i = 0;
  for (int x : v) p.order[static_cast<std::size_t>(i++)] = x;
  return p;
}

// Index in x of the element that lands at flat position `f` of the transposed tensor.
i64 transpose_source(const Dims& in, const Permutation& p, i64 f) {
  const Dims od = permute(in, p);
  i64 oidx[Dims::kMaxRank], iidx[Dims::kMaxRank];
  for (int k = od.rank() - 1; k >= 0; --k) oidx[k] = f % od[k], f /= od[k];
  for (int k = 0; k < od.rank(); ++k) iidx[p.order[static_cast<std::size_t>(k)]] = oidx[k];
  i64 s = 0;
  for (int k = 0; k < in.rank(); ++k) s = s * in[k] + iidx[k];
  return s;
}

// Checks shuffle(x) against the definition; `reshaped` is the resolved reshape (or none).
void check_shuffle(DataType t, const Dims& xd, const Permutation& p1, std::optional<Dims> reshape_spec,
                   const Dims& reshaped, const Permutation& p2) {
  ShuffleParams p;
  p.first_transpose = p1;
  p.reshape_dims = reshape_spec;
  p.second_transpose = p2;
  const Dims od = permute(reshaped, p2);
  Buf x(t, xd), out(t, od);
  const std::uint64_t mask = element_size(t) == 8 ? ~0ull : (1ull << (8 * element_size(t))) - 1;
  for (i64 i = 0; i < x.size(); ++i) x.set_raw(i, (static_cast<std::uint64_t>(i) * 2654435761ull + 7) & mask);
  cpu::shuffle(p, x.ref(), out.ref());
  Checker check;
  for (i64 f = 0; f < out.size(); ++f) {
    const i64 r = transpose_source(reshaped, p2, f);       // flat index in the reshaped tensor
    const i64 s = transpose_source(xd, p1, r);             // ... = flat index in first_transpose(x)
    check(out.raw(f) == x.raw(s), std::string(type_name(t)) + " " + xd.str() + " -> " + od.str() + " at " + std::to_string(f));
  }
}

TEST(CpuKernelsShuffle, Transpose3DEveryElementSize) {
  for (DataType t : {DataType::kUINT8, DataType::kHALF, DataType::kFLOAT, DataType::kINT64}) {
    check_shuffle(t, {2, 3, 4}, perm({2, 0, 1}), std::nullopt, {4, 2, 3}, perm({0, 1, 2}));
    check_shuffle(t, {2, 3, 4}, perm({1, 0, 2}), std::nullopt, {3, 2, 4}, perm({0, 1, 2}));  // rows stay contiguous
    check_shuffle(t, {2, 3, 4}, perm({0, 2, 1}), std::nullopt, {2, 4, 3}, perm({0, 1, 2}));
  }
}

TEST(CpuKernelsShuffle, Transpose5D) {
  for (DataType t : {DataType::kBOOL, DataType::kBF16, DataType::kINT32, DataType::kINT64}) {
    check_shuffle(t, {2, 3, 4, 5, 6}, perm({4, 1, 3, 0, 2}), std::nullopt, {6, 3, 5, 2, 4}, perm({0, 1, 2, 3, 4}));
    check_shuffle(t, {2, 3, 4, 5, 6}, perm({0, 1, 2, 3, 4}), std::nullopt, {2, 3, 4, 5, 6}, perm({3, 4, 0, 2, 1}));
  }
}

TEST(CpuKernelsShuffle, LargeTiledAndRowCopies) {
  check_shuffle(DataType::kFLOAT, {301, 257}, perm({1, 0}), std::nullopt, {257, 301}, perm({0, 1}));
  check_shuffle(DataType::kHALF, {1000, 70}, perm({1, 0}), std::nullopt, {70, 1000}, perm({0, 1}));
  check_shuffle(DataType::kUINT8, {3, 200, 190}, perm({0, 2, 1}), std::nullopt, {3, 190, 200}, perm({0, 1, 2}));
  check_shuffle(DataType::kFLOAT, {8, 16, 32, 64}, perm({1, 0, 2, 3}), std::nullopt, {16, 8, 32, 64}, perm({0, 1, 2, 3}));
  check_shuffle(DataType::kINT64, {64, 3, 2, 100}, perm({3, 2, 1, 0}), std::nullopt, {100, 2, 3, 64}, perm({0, 1, 2, 3}));
}

TEST(CpuKernelsShuffle, SizeOneDimsAndIdentity) {
  check_shuffle(DataType::kFLOAT, {1, 5, 1, 7}, perm({3, 2, 1, 0}), std::nullopt, {7, 1, 5, 1}, perm({0, 1, 2, 3}));
  check_shuffle(DataType::kFLOAT, {5, 1, 7}, perm({1, 0, 2}), std::nullopt, {1, 5, 7}, perm({0, 1, 2}));  // a copy
  check_shuffle(DataType::kFLOAT, {2, 3, 4}, perm({0, 1, 2}), std::nullopt, {2, 3, 4}, perm({0, 1, 2}));
  check_shuffle(DataType::kFLOAT, {}, perm({}), std::nullopt, {}, perm({}));
}

TEST(CpuKernelsShuffle, ReshapeBetweenTransposes) {
  // Reshape only: a copy.
  check_shuffle(DataType::kFLOAT, {2, 3, 4}, perm({0, 1, 2}), Dims{6, 4}, {6, 4}, perm({0, 1}));
  // First transpose, then reshape.
  check_shuffle(DataType::kFLOAT, {2, 3, 4}, perm({1, 0, 2}), Dims{3, 8}, {3, 8}, perm({0, 1}));
  // Reshape, then second transpose.
  check_shuffle(DataType::kHALF, {2, 3, 4}, perm({0, 1, 2}), Dims{4, 6}, {4, 6}, perm({1, 0}));
  // Both transposes move data.
  check_shuffle(DataType::kFLOAT, {2, 3, 4}, perm({2, 1, 0}), Dims{8, 3}, {8, 3}, perm({1, 0}));
  check_shuffle(DataType::kINT8, {2, 3, 4}, perm({0, 2, 1}), Dims{0, -1}, {2, 12}, perm({1, 0}));
  check_shuffle(DataType::kFLOAT, {4, 6, 10, 8}, perm({0, 2, 1, 3}), Dims{4, 10, 2, 3, 8}, {4, 10, 2, 3, 8},
                perm({0, 2, 1, 3, 4}));
  check_shuffle(DataType::kFLOAT, {60, 50, 40}, perm({2, 1, 0}), Dims{40, 3000}, {40, 3000}, perm({1, 0}));
}

TEST(CpuKernelsShuffle, Errors) {
  Buf x(DataType::kFLOAT, {2, 3}), out(DataType::kFLOAT, {3, 2}), bad(DataType::kFLOAT, {2, 3});
  ShuffleParams p;
  p.first_transpose = perm({0, 0});
  EXPECT_THROW(cpu::shuffle(p, x.ref(), out.ref()), InvalidArgument);
  p.first_transpose = perm({1, 0});
  EXPECT_THROW(cpu::shuffle(p, x.ref(), bad.ref()), InvalidArgument);  // dims do not follow
  cpu::shuffle(p, x.ref(), out.ref());
  Buf h(DataType::kHALF, {3, 2});
  EXPECT_THROW(cpu::shuffle(p, x.ref(), h.ref()), InvalidArgument);
}

// ---- copy and threads -------------------------------------------------------------------

TEST(CpuKernelsCopy, CopiesBytes) {
  for (i64 n : {i64{0}, i64{7}, i64{3} << 20}) {
    Buf x(DataType::kINT32, {n}), out(DataType::kINT32, {n});
    for (i64 i = 0; i < n; ++i) x.set_int(i, i * 7 - 3);
    cpu::copy(x.ref(), out.ref());
    EXPECT_EQ(std::memcmp(x.data(), out.data(), static_cast<std::size_t>(n) * 4), 0);
  }
  Buf a(DataType::kFLOAT, {2, 3}), b(DataType::kFLOAT, {6}), c(DataType::kINT32, {6}), d(DataType::kFLOAT, {5});
  a.set(4, 2.5);
  cpu::copy(a.ref(), b.ref());  // same volume, other dims
  EXPECT_EQ(b.get(4), 2.5);
  EXPECT_THROW(cpu::copy(a.ref(), c.ref()), InvalidArgument);
  EXPECT_THROW(cpu::copy(a.ref(), d.ref()), InvalidArgument);
}

TEST(CpuKernelsThreads, SettingAndResults) {
  const unsigned hw = std::thread::hardware_concurrency();
  cpu::set_num_threads(0);
  EXPECT_EQ(cpu::num_threads(), hw > 0 ? static_cast<int>(hw) : 1);
  EXPECT_THROW(cpu::set_num_threads(-1), InvalidArgument);
  for (int n : {1, 3, 7}) {  // 7: more threads than this machine may have: many range splits
    cpu::set_num_threads(n);
    EXPECT_EQ(cpu::num_threads(), n);
    check_float_elementwise(E::kSUB, DataType::kFLOAT, {64, 301, 8}, {64, 1, 8}, 61);
    check_matmul(DataType::kFLOAT, MO::kNONE, MO::kNONE, {3, 64, 128}, {3, 128, 96}, 62);
    check_shuffle(DataType::kFLOAT, {301, 257}, perm({1, 0}), std::nullopt, {257, 301}, perm({0, 1}));
  }
  cpu::set_num_threads(0);
  EXPECT_EQ(cpu::num_threads(), hw > 0 ? static_cast<int>(hw) : 1);
}

}  // namespace
