// Helpers of the engine cache's tests (test_cache.cpp, test_cache_safety.cpp): a model package
// in miniature and small probes of what the cache read.
#pragma once

#include <gtest/gtest.h>

#include <atomic>
#include <chrono>
#include <filesystem>
#include <fstream>
#include <span>
#include <string>
#include <thread>
#include <vector>

#include "cache/digest_memo.h"
#include "st_helpers.h"
#include "tensoracle/cache.h"
#include "tensoracle/safetensors.h"

namespace tensoracle::testing::cache_model {

namespace fs = std::filesystem;
namespace st = tensoracle::safetensors;

// File times tick coarsely, so a record taken within core::racy's margin (25 ms) of a file's
// last change is re-checked by content (by design). Tests that assert "nothing was re-read"
// wait a little longer than that after writing a file.
inline void settle() { std::this_thread::sleep_for(std::chrono::milliseconds(60)); }

inline std::uint64_t hashed() { return core::hash_counters().files_hashed.load(); }
inline std::uint64_t engine_checks() { return cache::counters().engine_digest_checks.load(); }

// A model package in miniature: weights in a safetensors file, a graph function that reads
// them (counting its calls), the declaration and I/O it promises.
struct Model {
  TempDir tmp;
  fs::path weights = tmp.path / "linear.safetensors";
  fs::path cache_dir = tmp.path / "cache";
  std::atomic<int> calls{0};
  int sleep_ms = 0;  // inside the graph function, to widen races

  explicit Model(float scale = 1.f) { write_weights(scale); }

  void write_weights(float scale, const fs::path& to = {}) {
    std::vector<float> m(32 * 16);
    for (std::size_t i = 0; i < m.size(); ++i) m[i] = scale * static_cast<float>(static_cast<int>(i % 7) - 2) / 8.f;
    st::save_file(to.empty() ? weights : to, {{"matrix", st::Dtype::F32, {32, 16}, std::as_bytes(std::span(m))}});
  }

  GraphFunction graph() {
    return [this](Network& net) {
      calls.fetch_add(1);
      if (sleep_ms > 0) std::this_thread::sleep_for(std::chrono::milliseconds(sleep_ms));
      auto f = st::File::open(weights);
      auto m = f.view("matrix").as<float>();
      auto* x = net.add_input("features", DataType::kFLOAT, {-1, 32});
      auto* w = net.add_constant({32, 16}, Weights::copy_of(DataType::kFLOAT, m.data(), 512))->get_output(0);
      auto* y = net.add_matrix_multiply(x, MatrixOperation::kNONE, w, MatrixOperation::kNONE)->get_output(0);
      y = net.add_activation(y, ActivationType::kRELU)->get_output(0);
      y->set_name("result");
      net.mark_output(y);
    };
  }

  static EngineBuild declaration() {
    EngineBuild d;
    d.inputs["features"] = InputShape::ranged({1, 32}, {16, 32}, {64, 32});
    d.settings.device = "cpu";
    d.settings.optimization_level = 0;
    return d;
  }

  OpenOptions options() const {
    OpenOptions o;
    o.name = "linear";
    o.graph_version = "1";
    o.weights = {weights};
    o.io.inputs["features"] = {DataType::kFLOAT, {-1, 32}};
    o.io.outputs["result"] = {DataType::kFLOAT, {-1, 16}};
    o.cache_dir = cache_dir;
    return o;
  }

  EngineHandle open(const OpenOptions& o) { return open_engine(graph(), declaration(), o); }
  EngineHandle open() { return open(options()); }

  // Hidden files (temporaries) in the cache folder.
  std::vector<std::string> temporaries() const {
    std::vector<std::string> out;
    for (auto& e : fs::directory_iterator(cache_dir))
      if (e.path().filename().string().find(".tmp-") != std::string::npos) out.push_back(e.path().filename());
    return out;
  }
};

// Runs the engine on 4 rows of ones; every output is sum(max(0, column of the matrix)).
inline float run_once(const EngineHandle& h) {
  auto exec = h.create_execution();
  std::vector<float> x(4 * 32, 1.f);
  auto out = exec.run({{"features", {DataType::kFLOAT, {4, 32}, x.data()}}});
  return reinterpret_cast<const float*>(out.at("result").data.get())[0];
}

inline void flip_byte(const fs::path& p, std::size_t at) {
  auto b = read_bytes(p);
  b.at(at) ^= std::byte{0x5a};
  // In place, as damage would be (not by rename).
  std::fstream f(p, std::ios::in | std::ios::out | std::ios::binary);
  f.seekp(static_cast<std::streamoff>(at));
  f.write(reinterpret_cast<const char*>(&b[at]), 1);
}


}  // namespace tensoracle::testing::cache_model
