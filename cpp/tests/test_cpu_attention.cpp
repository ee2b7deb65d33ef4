// The CPU backend's attention kernel (backends/cpu/kernels.h) called directly against a double
// reference written here: grouped-query heads, bool and additive masks that broadcast, causal,
// no normalization, float16 storage, fully masked rows; and the refusals of buffers that do not
// fit (an engine file's shapes are not trusted). Runs under `make sanitize` (ASan + UBSan) too.
#include <gtest/gtest.h>

#include <cmath>
#include <cstdlib>
#include <cstdint>
#include <limits>
#include <string>
#include <tuple>
#include <vector>

#include "backends/cpu/kernels.h"
#include "core/numeric.h"
#include "st_helpers.h"
#include "tensoracle/errors.h"

namespace {

using namespace tensoracle;
using i64 = std::int64_t;

struct Shape {
  i64 b, nq, nkv, sq, skv, h;
};

std::vector<float> uniform(i64 n, unsigned seed) { return tensoracle::testing::uniform(static_cast<std::size_t>(n), -1.f, 1.f, seed); }

// out[b, n, i, :] in double; mask (bool as 0/1 in `keep`, or additive in `add`) indexed by its
// broadcast dims md.
std::vector<double> reference(const Shape& s, const std::vector<float>& q, const std::vector<float>& k,
                              const std::vector<float>& v, const Dims* md, const std::vector<std::uint8_t>* keep,
                              const std::vector<float>* add, bool causal, bool softmax, double scale) {
  std::vector<double> out(static_cast<std::size_t>(s.b * s.nq * s.sq * s.h), 0.0);
  const i64 group = s.nq / s.nkv;
  for (i64 b = 0; b < s.b; ++b)
    for (i64 n = 0; n < s.nq; ++n)
      for (i64 i = 0; i < s.sq; ++i) {
        std::vector<double> w(static_cast<std::size_t>(s.skv));
        std::vector<bool> on(static_cast<std::size_t>(s.skv), true);
        double mx = -std::numeric_limits<double>::infinity();
        for (i64 j = 0; j < s.skv; ++j) {
          double dot = 0;
          for (i64 d = 0; d < s.h; ++d)
            dot += double(q[static_cast<std::size_t>(((b * s.nq + n) * s.sq + i) * s.h + d)]) *
                   k[static_cast<std::size_t>(((b * s.nkv + n / group) * s.skv + j) * s.h + d)];
          dot *= scale;
          if (causal && j > i) on[static_cast<std::size_t>(j)] = false;
          if (md) {
            const i64 idx[4] = {b, n, i, j};
            i64 off = 0;
            for (int d = 0; d < 4; ++d) off = off * (*md)[d] + ((*md)[d] == 1 ? 0 : idx[d]);
            if (keep) on[static_cast<std::size_t>(j)] = on[static_cast<std::size_t>(j)] && (*keep)[static_cast<std::size_t>(off)];
            if (add) dot += (*add)[static_cast<std::size_t>(off)];
          }
          w[static_cast<std::size_t>(j)] = dot;
          if (on[static_cast<std::size_t>(j)]) mx = std::max(mx, dot);
        }
        double sum = 0;
        for (i64 j = 0; j < s.skv; ++j) {
          auto& x = w[static_cast<std::size_t>(j)];
          if (!on[static_cast<std::size_t>(j)]) x = 0;
          else if (softmax) x = std::exp(x - mx);
          sum += x;
        }
        for (i64 j = 0; j < s.skv; ++j)
          for (i64 d = 0; d < s.h; ++d) {
            const double p = softmax ? (sum > 0 ? w[static_cast<std::size_t>(j)] / sum : 0.0) : w[static_cast<std::size_t>(j)];
            out[static_cast<std::size_t>(((b * s.nq + n) * s.sq + i) * s.h + d)] +=
                p * v[static_cast<std::size_t>(((b * s.nkv + n / group) * s.skv + j) * s.h + d)];
          }
      }
  return out;
}

double worst(const std::vector<float>& got, const std::vector<double>& want) {
  double w = 0;
  for (std::size_t i = 0; i < got.size(); ++i) w = std::max(w, std::fabs(got[i] - want[i]));
  return w;
}

using cpu::TensorRef;

}  // namespace

// Head sizes of 16·k take the AVX-512 products where the CPU has them (24 never does); each
// size runs both ways (TENSORACLE_ATTENTION_NO_AVX512 takes the BLAS products).
class CpuAttentionHeads : public ::testing::TestWithParam<std::tuple<i64, bool>> {
 protected:
  void SetUp() override {
    if (std::get<1>(GetParam())) setenv("TENSORACLE_ATTENTION_NO_AVX512", "1", 1);
  }
  void TearDown() override { unsetenv("TENSORACLE_ATTENTION_NO_AVX512"); }
};

TEST_P(CpuAttentionHeads, Float32MasksCausalAndGroupedHeadsMatchTheReference) {
  const Shape s{2, 4, 2, 37, 150, std::get<0>(GetParam())};
  auto q = uniform(s.b * s.nq * s.sq * s.h, 1), k = uniform(s.b * s.nkv * s.skv * s.h, 2),
       v = uniform(s.b * s.nkv * s.skv * s.h, 3);
  const Dims qd{s.b, s.nq, s.sq, s.h}, kd{s.b, s.nkv, s.skv, s.h};
  std::vector<float> out(q.size());
  TensorRef Q{q.data(), DataType::kFLOAT, qd}, K{k.data(), DataType::kFLOAT, kd}, V{v.data(), DataType::kFLOAT, kd},
      O{out.data(), DataType::kFLOAT, qd};
  for (bool softmax : {true, false}) {
    AttentionParams p;
    p.normalization = softmax ? AttentionNormalizationOp::kSOFTMAX : AttentionNormalizationOp::kNONE;
    p.scale = 0.2f;
    // bool mask per batch and query, broadcast over heads; one query of batch 1 sees no key
    const Dims bmd{s.b, 1, s.sq, s.skv};
    std::vector<std::uint8_t> keep(static_cast<std::size_t>(bmd.volume()));
    for (std::size_t i = 0; i < keep.size(); ++i) keep[i] = (i * 7 + i / 5) % 3 != 0;
    for (i64 j = 0; j < s.skv; ++j) keep[static_cast<std::size_t>((1 * s.sq + 4) * s.skv + j)] = 0;
    TensorRef M{keep.data(), DataType::kBOOL, bmd};
    cpu::attention(p, Q, K, V, &M, O);
    EXPECT_LE(worst(out, reference(s, q, k, v, &bmd, &keep, nullptr, false, softmax, 0.2)), 2e-5) << softmax;
    for (i64 n = 0; n < s.nq && softmax; ++n)
      for (i64 d = 0; d < s.h; ++d)
        EXPECT_EQ(out[static_cast<std::size_t>(((1 * s.nq + n) * s.sq + 4) * s.h + d)], 0.f);  // the empty row
    // additive mask per head and key, broadcast over batch and queries
    const Dims amd{1, s.nq, 1, s.skv};
    auto add = uniform(amd.volume(), 4);
    TensorRef A{add.data(), DataType::kFLOAT, amd};
    cpu::attention(p, Q, K, V, &A, O);
    EXPECT_LE(worst(out, reference(s, q, k, v, &amd, nullptr, &add, false, softmax, 0.2)), 2e-5) << softmax;
    // causal, no mask
    p.causal = true;
    cpu::attention(p, Q, K, V, nullptr, O);
    EXPECT_LE(worst(out, reference(s, q, k, v, nullptr, nullptr, nullptr, true, softmax, 0.2)), 2e-5) << softmax;
  }
}

INSTANTIATE_TEST_SUITE_P(HeadSizes, CpuAttentionHeads,
                         ::testing::Combine(::testing::Values<i64>(24, 32, 48, 128), ::testing::Bool()),
                         [](const auto& info) {
                           return "h" + std::to_string(std::get<0>(info.param)) +
                                  (std::get<1>(info.param) ? "_blas" : "_default");
                         });

TEST(CpuAttention, Float16StorageRoundsOnceAtTheEnd) {
  const Shape s{1, 2, 1, 130, 70, 64};
  auto q = uniform(s.b * s.nq * s.sq * s.h, 5), k = uniform(s.b * s.nkv * s.skv * s.h, 6),
       v = uniform(s.b * s.nkv * s.skv * s.h, 7);
  auto half = [](std::vector<float>& x) {
    std::vector<std::uint16_t> h(x.size());
    for (std::size_t i = 0; i < x.size(); ++i) {
      h[i] = core::float_to_half(x[i]);
      x[i] = core::half_to_float(h[i]);  // the reference reads the stored values
    }
    return h;
  };
  auto qh = half(q), kh = half(k), vh = half(v);
  std::vector<std::uint16_t> oh(qh.size());
  const Dims qd{s.b, s.nq, s.sq, s.h}, kd{s.b, s.nkv, s.skv, s.h};
  AttentionParams p;
  p.scale = 0.125f;
  p.causal = true;
  cpu::attention(p, {qh.data(), DataType::kHALF, qd}, {kh.data(), DataType::kHALF, kd}, {vh.data(), DataType::kHALF, kd},
                 nullptr, {oh.data(), DataType::kHALF, qd});
  std::vector<float> out(oh.size());
  for (std::size_t i = 0; i < out.size(); ++i) out[i] = core::half_to_float(oh[i]);
  const auto want = reference(s, q, k, v, nullptr, nullptr, nullptr, true, true, 0.125);
  for (std::size_t i = 0; i < out.size(); ++i)  // within one float16 ulp of the exact value (plus float32 noise)
    ASSERT_LE(std::fabs(out[i] - want[i]), std::ldexp(1.0, std::ilogb(std::max(std::fabs(want[i]), 6.1e-5)) - 10) + 1e-6) << i;
}

TEST(CpuAttention, RefusesBuffersThatDoNotFit) {
  std::vector<float> buf(4096);
  auto ref = [&](const Dims& d, DataType t = DataType::kFLOAT) { return TensorRef{buf.data(), t, d}; };
  const Dims qd{1, 4, 8, 16}, kd{1, 2, 9, 16};
  auto expect_refused = [](auto&& call, const std::string& what) {
    try {
      call();
      ADD_FAILURE() << "accepted: " << what;
    } catch (const InvalidArgument& e) {
      EXPECT_NE(std::string(e.what()).find("attention"), std::string::npos) << e.what();
      EXPECT_NE(std::string(e.what()).find(what), std::string::npos) << e.what();
    }
  };
  AttentionParams p;
  expect_refused([&] { cpu::attention(p, ref(qd), ref(kd), ref({1, 2, 9, 8}), nullptr, ref(qd)); }, "the key's dims");
  expect_refused([&] { cpu::attention(p, ref(qd), ref(kd), ref(kd), nullptr, ref({1, 4, 8, 8})); }, "the query's dims");
  expect_refused([&] { cpu::attention(p, ref(qd), ref({1, 3, 9, 16}), ref({1, 3, 9, 16}), nullptr, ref(qd)); }, "not a multiple");
  const TensorRef bad_mask = ref({1, 1, 3, 9}, DataType::kBOOL);
  expect_refused([&] { cpu::attention(p, ref(qd), ref(kd), ref(kd), &bad_mask, ref(qd)); }, "does not broadcast");
  const TensorRef int_mask = ref({1, 1, 8, 9}, DataType::kINT32);
  expect_refused([&] { cpu::attention(p, ref(qd), ref(kd), ref(kd), &int_mask, ref(qd)); }, "must be bool");
  p.causal = true;
  const TensorRef mask = ref({1, 1, 8, 9}, DataType::kBOOL);
  expect_refused([&] { cpu::attention(p, ref(qd), ref(kd), ref(kd), &mask, ref(qd)); }, "takes no mask");
}

// The sequence-major layout (AttentionParams::heads): Q, K and V read from one packed
// [B, S, Wq + 2·Wkv] buffer by column offsets (a merged Q/K/V product), the output written as
// [B, Sq, Nq·H] rows; the same numbers as the [B, N, S, H] layout of the same data.
TEST(CpuAttention, ReadsAndWritesRowsThroughColumnOffsets) {
  for (i64 h : {32, 24}) {  // 32: the AVX-512 products where the CPU has them; 24: BLAS
    const Shape s{2, 4, 2, 19, 19, h};
    const i64 wq = s.nq * h, wkv = s.nkv * h, width = wq + 2 * wkv + 8;  // 8 columns of padding
    auto packed = uniform(s.b * s.sq * width, 11);
    // the same values as [B, N, S, H] tensors for the reference
    auto heads_first = [&](i64 offset, i64 n_heads) {
      std::vector<float> t(static_cast<std::size_t>(s.b * n_heads * s.sq * h));
      for (i64 b = 0; b < s.b; ++b)
        for (i64 n = 0; n < n_heads; ++n)
          for (i64 i = 0; i < s.sq; ++i)
            for (i64 d = 0; d < h; ++d)
              t[static_cast<std::size_t>(((b * n_heads + n) * s.sq + i) * h + d)] =
                  packed[static_cast<std::size_t>((b * s.sq + i) * width + offset + n * h + d)];
      return t;
    };
    const auto q = heads_first(0, s.nq), k = heads_first(wq, s.nkv), v = heads_first(wq + wkv, s.nkv);
    AttentionParams p;
    p.scale = 0.3f;
    p.heads = static_cast<std::int32_t>(s.nq);
    p.kv_heads = static_cast<std::int32_t>(s.nkv);
    p.head_size = static_cast<std::int32_t>(h);
    p.k_offset = wq;
    p.v_offset = wq + wkv;
    const Dims rows{s.b, s.sq, width}, od{s.b, s.sq, wq};
    std::vector<float> out(static_cast<std::size_t>(od.volume()));
    const Dims amd{s.b, 1, 1, s.skv};
    auto add = uniform(amd.volume(), 12);
    TensorRef X{packed.data(), DataType::kFLOAT, rows}, A{add.data(), DataType::kFLOAT, amd},
        O{out.data(), DataType::kFLOAT, od};
    cpu::attention(p, X, X, X, &A, O);
    const auto want = reference(s, q, k, v, &amd, nullptr, &add, false, true, 0.3);
    double err = 0;
    for (i64 b = 0; b < s.b; ++b)
      for (i64 n = 0; n < s.nq; ++n)
        for (i64 i = 0; i < s.sq; ++i)
          for (i64 d = 0; d < h; ++d)
            err = std::max(err, std::fabs(out[static_cast<std::size_t>((b * s.sq + i) * wq + n * h + d)] -
                                          want[static_cast<std::size_t>(((b * s.nq + n) * s.sq + i) * h + d)]));
    EXPECT_LE(err, 2e-5) << "head size " << h;
  }
}

TEST(CpuAttention, RefusesRowsThatDoNotHoldTheHeads) {
  std::vector<float> buf(4096);
  auto ref = [&](const Dims& d) { return TensorRef{buf.data(), DataType::kFLOAT, d}; };
  auto expect_refused = [](auto&& call, const std::string& what) {
    try {
      call();
      ADD_FAILURE() << "accepted: " << what;
    } catch (const InvalidArgument& e) {
      EXPECT_NE(std::string(e.what()).find(what), std::string::npos) << e.what();
    }
  };
  AttentionParams p;
  p.heads = 2;
  p.kv_heads = 1;
  p.head_size = 8;
  const Dims q{1, 5, 16}, kv{1, 6, 8}, o{1, 5, 16};
  EXPECT_NO_THROW(cpu::attention(p, ref(q), ref(kv), ref(kv), nullptr, ref(o)));
  expect_refused([&] { cpu::attention(p, ref({1, 5, 15}), ref(kv), ref(kv), nullptr, ref(o)); }, "has no 2 heads of 8");
  expect_refused([&] { cpu::attention(p, ref(q), ref(kv), ref(kv), nullptr, ref({1, 5, 24})); }, "has no 2 heads of 8");
  expect_refused([&] { cpu::attention(p, ref(q), ref(kv), ref({1, 7, 8}), nullptr, ref(o)); }, "batch and sequence");
  expect_refused([&] { cpu::attention(p, ref({1, 2, 5, 8}), ref(kv), ref(kv), nullptr, ref(o)); }, "not of rank 3");
  p.k_offset = 4;
  expect_refused([&] { cpu::attention(p, ref(q), ref(kv), ref(kv), nullptr, ref(o)); }, "from column 4");
  p.k_offset = -8;
  expect_refused([&] { cpu::attention(p, ref(q), ref(kv), ref(kv), nullptr, ref(o)); }, "from column -8");
  p.k_offset = 0;
  p.kv_heads = 3;
  expect_refused([&] { cpu::attention(p, ref(q), ref(kv), ref(kv), nullptr, ref(o)); }, "query heads and 3 key heads");
}
