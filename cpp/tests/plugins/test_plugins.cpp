// Plugins for the plugin tests (namespace "tensoracle.tests"), written with plugin.hpp (C++17):
//   Throws     its creator throws a std::runtime_error
//   BadShapes  get_output_descs misbehaves as field "mode" says (0 negative dim, 1 rank 9,
//              2 -1 although inputs are known, 3 type 42, 4 throws, 5 copies its input)
//   MinMax     two outputs: min and max over the last axis (kept as 1); uses a workspace; each
//              CPU run appends a byte to the file $TENSORACLE_TESTS_MINMAX_RUNS names, if set
//              (the library is loaded from a private copy: the tests count its runs so)
//   CudaOnly   a copy with only a CUDA enqueue
//   FailsAtRun enqueue_cpu throws
//   Echo       every field type; output = input followed by six values derived from the fields
//   Grows      a copy whose workspace grows as its input shrinks
#include <cmath>
#include <cstdio>
#include <cstdlib>
#include <cstdint>
#include <cstring>
#include <limits>
#include <memory>
#include <stdexcept>
#include <string>
#include <vector>

#include "tensoracle/plugin.hpp"

namespace {

namespace tp = tensoracle::plugin;
#ifndef TEST_PLUGIN_NAMESPACE
#define TEST_PLUGIN_NAMESPACE "tensoracle.tests"
#endif
constexpr const char* kNs = TEST_PLUGIN_NAMESPACE;

void require_float(tp::Descs in, std::size_t n) {
  tp::require(in.size() == n, "expected " + std::to_string(n) + " inputs, got " + std::to_string(in.size()));
  for (const auto& d : in) tp::require(d.type == TENSORACLE_TYPE_FLOAT32, "inputs must be float32");
}

class Copy : public tp::Plugin {
 public:
  int num_outputs() const override { return 1; }
  void output_descs(tp::Descs in, tp::MutableDescs out) const override {
    require_float(in, 1);
    out[0] = in[0];
  }
  void enqueue_cpu(tp::Descs in, const void* const* x, tp::Descs, void* const* y, void*, std::uint64_t) const override {
    std::memcpy(y[0], x[0], static_cast<std::size_t>(tp::volume(in[0])) * 4);
  }
};

struct ThrowsCreator {
  static constexpr const char* kName = "Throws";
  static constexpr const char* kVersion = "1";
  static constexpr const char* kNamespace = kNs;
  static std::vector<TensoraclePluginFieldSpec> fields() { return {}; }
  static std::unique_ptr<tp::Plugin> create(const tp::Fields&) { throw std::runtime_error("boom from the creator"); }
};

class BadShapes final : public Copy {
 public:
  explicit BadShapes(int mode) : mode_(mode) {}
  void output_descs(tp::Descs in, tp::MutableDescs out) const override {
    out[0] = in[0];
    switch (mode_) {
      case 0: out[0].dims[0] = -5; break;
      case 1: out[0].rank = 9; break;
      case 2: out[0].dims[0] = -1; break;
      case 3: out[0].type = 42; break;
      case 4: throw std::logic_error("shape function exploded");
      default: break;
    }
  }

 private:
  int mode_;
};

struct BadShapesCreator {
  static constexpr const char* kName = "BadShapes";
  static constexpr const char* kVersion = "1";
  static constexpr const char* kNamespace = kNs;
  static std::vector<TensoraclePluginFieldSpec> fields() { return {{"mode", TENSORACLE_FIELD_INT32, 1}}; }
  static std::unique_ptr<tp::Plugin> create(const tp::Fields& f) {
    return std::make_unique<BadShapes>(f.scalar<std::int32_t>("mode", 0));
  }
};

class MinMax final : public tp::Plugin {
 public:
  int num_outputs() const override { return 2; }
  void output_descs(tp::Descs in, tp::MutableDescs out) const override {
    require_float(in, 1);
    tp::require(in[0].rank >= 1, "MinMax needs rank >= 1");
    out[0] = in[0];
    out[0].dims[in[0].rank - 1] = 1;
    out[1] = out[0];
  }
  std::uint64_t workspace_size(std::int32_t, tp::Descs in, tp::Descs) const override {
    const auto n = tp::volume(in[0]), d = in[0].dims[in[0].rank - 1];
    return static_cast<std::uint64_t>(d == 0 ? 0 : n / d) * 2 * sizeof(float);
  }
  void enqueue_cpu(tp::Descs in, const void* const* x, tp::Descs, void* const* y, void* ws, std::uint64_t wsb) const override {
    const auto d = in[0].dims[in[0].rank - 1];
    const auto rows = d == 0 ? 0 : tp::volume(in[0]) / d;
    if (wsb < static_cast<std::uint64_t>(rows) * 2 * sizeof(float)) throw tp::Error("workspace too small");
    if (const char* log = std::getenv("TENSORACLE_TESTS_MINMAX_RUNS"))
      if (std::FILE* f = std::fopen(log, "ab")) {
        std::fputc('r', f);
        std::fclose(f);
      }
    auto* scratch = static_cast<float*>(ws);  // min and max per row, then copied out
    const auto* src = static_cast<const float*>(x[0]);
    for (std::int64_t r = 0; r < rows; ++r) {
      float lo = std::numeric_limits<float>::infinity(), hi = -lo;
      for (std::int64_t i = 0; i < d; ++i) {
        lo = std::fmin(lo, src[r * d + i]);
        hi = std::fmax(hi, src[r * d + i]);
      }
      scratch[2 * r] = lo;
      scratch[2 * r + 1] = hi;
    }
    for (std::int64_t r = 0; r < rows; ++r) {
      static_cast<float*>(y[0])[r] = scratch[2 * r];
      static_cast<float*>(y[1])[r] = scratch[2 * r + 1];
    }
  }
};

struct MinMaxCreator {
  static constexpr const char* kName = "MinMax";
  static constexpr const char* kVersion = "1";
  static constexpr const char* kNamespace = kNs;
  static std::vector<TensoraclePluginFieldSpec> fields() { return {}; }
  static std::unique_ptr<tp::Plugin> create(const tp::Fields&) { return std::make_unique<MinMax>(); }
};

class CudaOnly final : public Copy {
 public:
  std::int32_t backends() const override { return TENSORACLE_BACKEND_CUDA; }
};

struct CudaOnlyCreator {
  static constexpr const char* kName = "CudaOnly";
  static constexpr const char* kVersion = "1";
  static constexpr const char* kNamespace = kNs;
  static std::vector<TensoraclePluginFieldSpec> fields() { return {}; }
  static std::unique_ptr<tp::Plugin> create(const tp::Fields&) { return std::make_unique<CudaOnly>(); }
};

class FailsAtRun final : public Copy {
 public:
  void enqueue_cpu(tp::Descs, const void* const*, tp::Descs, void* const*, void*, std::uint64_t) const override {
    throw tp::Error("the kernel failed on purpose");
  }
};

struct FailsAtRunCreator {
  static constexpr const char* kName = "FailsAtRun";
  static constexpr const char* kVersion = "1";
  static constexpr const char* kNamespace = kNs;
  static std::vector<TensoraclePluginFieldSpec> fields() { return {}; }
  static std::unique_ptr<tp::Plugin> create(const tp::Fields&) { return std::make_unique<FailsAtRun>(); }
};

// Output: x, then sum(i32), sum(i64), sum(f32), sum(f64), string length * 1000 + its first byte,
// sum(bytes) — so a test sees every field after an engine round trip.
class Echo final : public tp::Plugin {
 public:
  explicit Echo(std::vector<float> extra) : extra_(std::move(extra)) {}
  int num_outputs() const override { return 1; }
  void output_descs(tp::Descs in, tp::MutableDescs out) const override {
    require_float(in, 1);
    tp::require(in[0].rank == 1, "Echo takes a 1-D input");
    out[0] = in[0];
    if (in[0].dims[0] >= 0) out[0].dims[0] = in[0].dims[0] + static_cast<std::int64_t>(extra_.size());
  }
  void enqueue_cpu(tp::Descs in, const void* const* x, tp::Descs, void* const* y, void*, std::uint64_t) const override {
    const auto n = static_cast<std::size_t>(in[0].dims[0]);
    std::memcpy(y[0], x[0], n * 4);
    std::memcpy(static_cast<float*>(y[0]) + n, extra_.data(), extra_.size() * 4);
  }

 private:
  std::vector<float> extra_;
};

struct EchoCreator {
  static constexpr const char* kName = "Echo";
  static constexpr const char* kVersion = "2";
  static constexpr const char* kNamespace = kNs;
  static std::vector<TensoraclePluginFieldSpec> fields() {
    return {{"i32", TENSORACLE_FIELD_INT32, -1},  {"i64", TENSORACLE_FIELD_INT64, 2},
            {"f32", TENSORACLE_FIELD_FLOAT32, -1}, {"f64", TENSORACLE_FIELD_FLOAT64, 1},
            {"text", TENSORACLE_FIELD_STRING, -1}, {"blob", TENSORACLE_FIELD_BYTES, -1}};
  }
  static std::unique_ptr<tp::Plugin> create(const tp::Fields& f) {
    std::vector<float> extra(6, 0.f);
    for (auto v : f.values<std::int32_t>("i32")) extra[0] += static_cast<float>(v);
    std::int64_t i64 = 0;
    for (auto v : f.values<std::int64_t>("i64")) i64 += v;
    extra[1] = static_cast<float>(i64);
    for (auto v : f.values<float>("f32")) extra[2] += v;
    for (auto v : f.values<double>("f64")) extra[3] += static_cast<float>(v);
    const std::string text = f.text("text");
    if (f.has("text")) {
      const auto* raw = static_cast<const char*>(f.find("text")->data);
      tp::require(raw[text.size()] == '\0', "string fields end with a NUL");
    }
    extra[4] = static_cast<float>(text.size() * 1000 + (text.empty() ? 0 : static_cast<unsigned char>(text[0])));
    for (unsigned char c : f.text("blob")) extra[5] += c;
    return std::make_unique<Echo>(std::move(extra));
  }
};

class Grows final : public Copy {
 public:
  std::uint64_t workspace_size(std::int32_t, tp::Descs in, tp::Descs) const override {
    return static_cast<std::uint64_t>(1 << 20) / static_cast<std::uint64_t>(tp::volume(in[0]) + 1);
  }
};

struct GrowsCreator {
  static constexpr const char* kName = "Grows";
  static constexpr const char* kVersion = "1";
  static constexpr const char* kNamespace = kNs;
  static std::vector<TensoraclePluginFieldSpec> fields() { return {}; }
  static std::unique_ptr<tp::Plugin> create(const tp::Fields&) { return std::make_unique<Grows>(); }
};

}  // namespace

TENSORACLE_EXPORT_PLUGINS(ThrowsCreator, BadShapesCreator, MinMaxCreator, CudaOnlyCreator, FailsAtRunCreator,
                          EchoCreator, GrowsCreator)
