// libFuzzer target: an engine file's plan document (its `tensoracle.plan` JSON), which drives
// everything after the container (fuzz_safetensors covers that) and the digest (anyone can
// recompute it). Each input is written as the plan of an engine with a valid digest, around the
// constants of a small CPU network built here, and opened: plan::read_engine parses it and runs
// graph::verify, Engine::deserialize instantiates the CPU backend's kernel for every node. What
// opens is inspected and, where its memory is small, run once on zeros. A tensoracle::Error is
// the expected refusal; anything else escaping, or a sanitizer report, is a finding.
//
// Seeds are this network's own plan (they must name its constants):
//   TENSORACLE_FUZZ_WRITE_SEEDS=/tmp/plan-seeds build/fuzz/fuzz/fuzz_engine_plan -runs=0
//   build/fuzz/fuzz/fuzz_engine_plan /tmp/plan-corpus /tmp/plan-seeds
#include <cstddef>
#include <cstdint>
#include <cstdlib>
#include <filesystem>
#include <fstream>
#include <map>
#include <vector>

#include "nlohmann/json.hpp"
#include "plan/plan.h"
#include "tensoracle/builder.h"
#include "tensoracle/engine.h"
#include "tensoracle/errors.h"
#include "tensoracle/network.h"

using namespace tensoracle;

namespace {

// x [2, 4, 6, 6] -> convolution 3x3 (+ bias, ReLU) -> max pool 2x2 -> reshape [2, 36] ->
// matrix multiply [36, 5] + bias -> softmax; and the reshaped features' sum over axis 1 as a
// second output. Small, and it exercises fusion (epilogues), shuffles and reductions.
std::vector<std::byte> seed_engine() {
  static std::vector<float> w(4 * 4 * 9), b(4), m(36 * 5), mb(5);
  for (std::size_t i = 0; i < w.size(); ++i) w[i] = static_cast<float>(i % 7) * 0.05f - 0.15f;
  for (std::size_t i = 0; i < b.size(); ++i) b[i] = 0.1f * static_cast<float>(i);
  for (std::size_t i = 0; i < m.size(); ++i) m[i] = static_cast<float>(i % 5) * 0.1f - 0.2f;
  for (std::size_t i = 0; i < mb.size(); ++i) mb[i] = -0.1f * static_cast<float>(i);
  auto graph = [&](Network& net) {
    auto* x = net.add_input("x", DataType::kFLOAT, {2, 4, 6, 6});
    auto* conv = net.add_convolution_nd(x, 4, {3, 3}, Weights(DataType::kFLOAT, w.data(), 144, nullptr),
                                        Weights(DataType::kFLOAT, b.data(), 4, nullptr));
    ConvolutionParams p = conv->get();
    p.pre_padding = p.post_padding = {1, 1};
    conv->set(p);
    auto* r = net.add_activation(conv->get_output(0), ActivationType::kRELU)->get_output(0);
    auto* pool = net.add_pooling_nd(r, PoolingType::kMAX, {2, 2});
    PoolingParams pp = pool->get();
    pp.stride = {2, 2};
    pool->set(pp);
    auto* flat = net.add_shuffle(pool->get_output(0));
    flat->set_reshape_dims(Dims{2, 36});
    auto* mat = net.add_constant({36, 5}, Weights(DataType::kFLOAT, m.data(), 180, nullptr))->get_output(0);
    auto* prod = net.add_matrix_multiply(flat->get_output(0), MatrixOperation::kNONE, mat, MatrixOperation::kNONE);
    auto* bias = net.add_constant({1, 5}, Weights(DataType::kFLOAT, mb.data(), 5, nullptr))->get_output(0);
    auto* sum = net.add_elementwise(prod->get_output(0), bias, ElementWiseOperation::kSUM)->get_output(0);
    auto* y = net.add_softmax(sum)->get_output(0);
    y->set_name("y");
    net.mark_output(y);
    auto* total = net.add_reduce(flat->get_output(0), ReduceOperation::kSUM, 0x2, true)->get_output(0);
    total->set_name("total");
    net.mark_output(total);
  };
  EngineBuild d;
  d.inputs["x"] = InputShape::fixed({2, 4, 6, 6});
  d.settings.device = "cpu";
  return build_serialized_engine(graph, d);
}

struct Seed {
  std::vector<std::byte> bytes;
  plan::Plan plan;
  Seed() : bytes(seed_engine()), plan(plan::read_engine(bytes, "seed", nullptr)) {}
};

const Seed& seed() {
  static const Seed s;
  return s;
}

// Runs the engine once on zero inputs where its arena, scratch and I/O are small.
void run_small(const Engine& e) {
  const auto doc = nlohmann::json::parse(e.plan_json());
  const auto& memory = doc.at("memory");
  if (memory.at("arena_bytes").get<std::uint64_t>() > (64u << 20) ||
      memory.at("workspace_bytes").get<std::uint64_t>() > (64u << 20))
    return;
  std::map<std::string, std::vector<std::byte>> buffers;
  std::map<std::string, HostTensorView> inputs;
  for (const auto& t : e.io_tensors()) {
    if (t.mode != TensorIOMode::kINPUT) continue;
    const std::int64_t n = t.opt.volume();
    if (n < 0 || n > (1 << 20) || !t.opt.all_known()) return;
    auto& b = buffers[t.name];
    b.assign(static_cast<std::size_t>(n) * element_size(t.type) + 1, std::byte{0});
    inputs[t.name] = {t.type, t.opt, b.data()};
  }
  auto x = e.create_execution();
  for (const auto& [name, view] : inputs) x.set_input_shape(name, view.dims);
  for (const auto& t : e.io_tensors())
    if (t.mode == TensorIOMode::kOUTPUT) {
      const std::int64_t n = x.tensor_shape(t.name).volume();
      if (n < 0 || n > (1 << 20)) return;
    }
  x.run(inputs);
}

}  // namespace

extern "C" int LLVMFuzzerInitialize(int*, char***) {
  if (const char* dir = std::getenv("TENSORACLE_FUZZ_WRITE_SEEDS")) {
    std::filesystem::create_directories(dir);
    std::ofstream(std::filesystem::path(dir) / "plan.json") << plan::plan_to_json(seed().plan).dump();
  }
  // The seed itself must open and run, or the target would only ever see refusals.
  const auto bytes = plan::write_engine_with(seed().plan, [](nlohmann::json&) {});
  run_small(Engine::deserialize(bytes));
  return 0;
}

extern "C" int LLVMFuzzerTestOneInput(const std::uint8_t* data, std::size_t size) {
  auto doc = nlohmann::json::parse(data, data + size, nullptr, false);
  if (doc.is_discarded()) return 0;
  std::vector<std::byte> bytes;
  try {
    bytes = plan::write_engine_with(seed().plan, [&](nlohmann::json& j) { j = doc; });
  } catch (const nlohmann::json::exception&) {
    return 0;  // not a document the writer can store (e.g. invalid UTF-8 in a string)
  }
  try {
    Engine e = Engine::deserialize(bytes);
    (void)e.layers();
    (void)e.plan_json();
    run_small(e);
  } catch (const Error&) {
    // refused, with a message: what an engine file that says something wrong should get
  }
  return 0;
}
