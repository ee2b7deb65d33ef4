// The attention layer on the CUDA backend (label gpu) against the CPU backend's engine of the same
// network: float16 and bfloat16 through the tensor-core kernel (head sizes 32, 64, 128) and the
// row kernel (TENSORACLE_ATTENTION_KERNEL=rows, and head sizes the tensor-core kernel does not
// take), float32, grouped-query heads, an additive padding mask, causal.
#include <gtest/gtest.h>

#include <cmath>
#include <cstdlib>
#include <cstring>
#include <map>
#include <string>
#include <vector>

#include "cuda_test_helpers.h"
#include "st_helpers.h"
#include "tensoracle/builder.h"
#include "tensoracle/engine.h"

using namespace tensoracle;

namespace {

struct Case {
  DataType type;
  std::int64_t b, nq, nkv, sq, skv, h;
  bool causal;
};

std::vector<float> values(std::size_t n, unsigned seed) { return tensoracle::testing::uniform(n, -1.f, 1.f, seed); }

// Stored bytes of `v` in type t (float32, or float16 / bfloat16 bits).
std::vector<std::byte> stored(DataType t, const std::vector<float>& v) {
  std::vector<std::byte> out(v.size() * element_size(t));
  if (t == DataType::kFLOAT) {
    std::memcpy(out.data(), v.data(), out.size());
  } else {
    auto bits = tensoracle::testing::to_16bit(t, v);
    std::memcpy(out.data(), bits.data(), out.size());
  }
  return out;
}

std::vector<float> as_floats(const HostTensor& t) {
  std::vector<float> v(static_cast<std::size_t>(t.dims.volume()));
  const auto* p = t.data.get();
  for (std::size_t i = 0; i < v.size(); ++i) {
    if (t.type == DataType::kFLOAT) {
      std::memcpy(&v[i], p + 4 * i, 4);
    } else {
      std::uint16_t h;
      std::memcpy(&h, p + 2 * i, 2);
      v[i] = t.type == DataType::kHALF ? core::half_to_float(h) : core::bf16_to_float(h);
    }
  }
  return v;
}

// Output "y" of the attention engine for `device`.
std::vector<float> run(const Case& c, const char* device) {
  const Dims qd{c.b, c.nq, c.sq, c.h}, kd{c.b, c.nkv, c.skv, c.h}, md{c.b, 1, 1, c.skv};
  auto graph = [&](Network& net) {
    auto* q = net.add_input("q", c.type, qd);
    auto* k = net.add_input("k", c.type, kd);
    auto* v = net.add_input("v", c.type, kd);
    auto* layer = net.add_attention(q, k, v, AttentionNormalizationOp::kSOFTMAX, c.causal);
    if (!c.causal) net.set_layer_input(layer, 3, net.add_input("mask", c.type, md));
    AttentionParams p = layer->get();
    p.scale = 1.f / std::sqrt(static_cast<float>(c.h));
    layer->set(p);
    layer->get_output(0)->set_name("y");
    net.mark_output(layer->get_output(0));
  };
  EngineBuild d;
  d.inputs["q"] = InputShape::fixed(qd);
  d.inputs["k"] = d.inputs["v"] = InputShape::fixed(kd);
  if (!c.causal) d.inputs["mask"] = InputShape::fixed(md);
  d.settings.device = device;
  auto q = stored(c.type, values(static_cast<std::size_t>(qd.volume()), 1));
  auto k = stored(c.type, values(static_cast<std::size_t>(kd.volume()), 2));
  auto v = stored(c.type, values(static_cast<std::size_t>(kd.volume()), 3));
  std::vector<float> m(static_cast<std::size_t>(md.volume()));
  for (std::int64_t i = 0; i < c.b; ++i)
    for (std::int64_t j = 0; j < c.skv; ++j) m[static_cast<std::size_t>(i * c.skv + j)] = j < c.skv - 3 * i ? 0.f : -10000.f;
  auto mask = stored(c.type, m);
  std::map<std::string, HostTensorView> in = {{"q", {c.type, qd, q.data()}}, {"k", {c.type, kd, k.data()}},
                                              {"v", {c.type, kd, v.data()}}};
  if (!c.causal) in["mask"] = {c.type, md, mask.data()};
  auto out = Engine::deserialize(build_serialized_engine(graph, d)).create_execution().run(in);
  return as_floats(out.at("y"));
}

void expect_matches_cpu(const Case& c, double tolerance) {
  auto cpu = run(c, "cpu");
  auto gpu = run(c, "cuda:0");
  ASSERT_EQ(cpu.size(), gpu.size());
  double worst = 0;
  for (std::size_t i = 0; i < cpu.size(); ++i) {
    ASSERT_FALSE(std::isnan(gpu[i])) << i;
    worst = std::max(worst, std::fabs(double(cpu[i]) - gpu[i]));
  }
  EXPECT_LE(worst, tolerance) << "type " << static_cast<int>(c.type) << " head " << c.h << " causal " << c.causal;
}

const Case kCases[] = {
    {DataType::kHALF, 2, 4, 2, 70, 130, 64, false}, {DataType::kHALF, 1, 2, 2, 129, 129, 128, true},
    {DataType::kBF16, 3, 2, 1, 33, 17, 32, false},  {DataType::kBF16, 1, 4, 4, 64, 200, 64, true},
    {DataType::kHALF, 2, 2, 2, 17, 40, 80, false},  {DataType::kFLOAT, 2, 4, 2, 20, 90, 64, true},
};

double tolerance(DataType t) { return t == DataType::kFLOAT ? 1e-5 : t == DataType::kHALF ? 2e-3 : 1.6e-2; }

}  // namespace

TEST(CudaAttention, TensorCoreAndRowKernelsMatchTheCpu) {
  for (const Case& c : kCases) expect_matches_cpu(c, tolerance(c.type));
  setenv("TENSORACLE_ATTENTION_KERNEL", "rows", 1);
  for (const Case& c : kCases) expect_matches_cpu(c, tolerance(c.type));
  unsetenv("TENSORACLE_ATTENTION_KERNEL");
}
