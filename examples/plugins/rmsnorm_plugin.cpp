// An example plugin library: RMSNorm, y = x * rsqrt(mean(x^2 over the last axis) + epsilon) * weight,
// for float32 x of any rank >= 1 and a weight of the last dimension's size (1-D, or of x's rank
// with every other dimension 1). One field: epsilon (float32, default 1e-6). Runs on the CPU,
// and on CUDA GPUs when built with TENSORACLE_EXAMPLE_CUBINS: its kernel (rmsnorm_kernels.cu)
// then comes from cubins embedded by tensoracle_add_cubin_plugin and loaded by
// tensoracle/cubin_loader.hpp for the device's architecture.
//
// Built as a shared library against tensoracle's headers alone — the plugin does not link
// tensoracle (nor CUDA: the loader opens the driver when a CUDA engine first runs it). Load it with plugins=("libtensoracle_example_plugins.so",) and add the layer with
//   network.add_plugin("RMSNorm", "1", [x, weight], {"epsilon": 1e-6}, namespace="tensoracle.examples")
#include <cmath>
#include <cstdint>
#include <memory>
#include <string>
#include <vector>

#include "tensoracle/plugin.hpp"
#ifdef TENSORACLE_EXAMPLE_CUBINS
#include "tensoracle/cubin_loader.hpp"

// Written by tensoracle_add_cubin_plugin (SYMBOL rmsnorm_cubins).
extern const tensoracle::cubin::Embedded rmsnorm_cubins[];
extern const std::size_t rmsnorm_cubins_count;
#endif

namespace {

namespace tp = tensoracle::plugin;

std::string dims_text(const tp::Desc& d) {
  std::string s = "(";
  for (std::int32_t i = 0; i < d.rank; ++i) s += (i ? ", " : "") + std::to_string(d.dims[i]);
  return s + ")";
}

class RmsNorm final : public tp::Plugin {
 public:
  explicit RmsNorm(float epsilon) : epsilon_(epsilon) {}

  int num_outputs() const override { return 1; }

  void output_descs(tp::Descs in, tp::MutableDescs out) const override {
    tp::require(in.size() == 2, "RMSNorm takes 2 inputs (x, weight), got " + std::to_string(in.size()));
    const tp::Desc& x = in[0];
    const tp::Desc& w = in[1];
    tp::require(x.type == TENSORACLE_TYPE_FLOAT32 && w.type == TENSORACLE_TYPE_FLOAT32,
                "RMSNorm takes float32 x and weight");
    tp::require(x.rank >= 1, "x must have rank >= 1");
    tp::require(w.rank == 1 || w.rank == x.rank, "weight " + dims_text(w) + " must be 1-D or of x's rank");
    for (std::int32_t i = 0; i + 1 < w.rank; ++i)
      tp::require(w.dims[i] == 1 || w.dims[i] == -1, "weight " + dims_text(w) + " may vary only along its last dimension");
    const std::int64_t d = x.dims[x.rank - 1], wd = w.dims[w.rank - 1];
    tp::require(d < 0 || wd < 0 || d == wd,
                "weight " + dims_text(w) + " does not match x's last dimension " + std::to_string(d));
    out[0] = x;
  }

#ifdef TENSORACLE_EXAMPLE_CUBINS
  std::int32_t backends() const override { return TENSORACLE_BACKEND_CPU | TENSORACLE_BACKEND_CUDA; }

  void enqueue_cuda(tp::Descs in, const void* const* inputs, tp::Descs, void* const* outputs, void*, std::uint64_t,
                    void* stream) const override {
    static tensoracle::cubin::Module module(rmsnorm_cubins, rmsnorm_cubins_count);
    const tp::Desc& x = in[0];
    long long d = x.dims[x.rank - 1];
    const std::int64_t rows = d == 0 ? 0 : tp::volume(x) / d;
    if (rows == 0) return;
    tp::require(rows <= 0x7fffffff, "RMSNorm on CUDA takes at most 2^31 - 1 rows");
    const void* src = inputs[0];
    const void* weight = inputs[1];
    void* dst = outputs[0];
    float epsilon = epsilon_;
    void* args[] = {&src, &weight, &dst, &d, &epsilon};
    module.launch("rmsnorm_f32", {static_cast<unsigned>(rows), 1, 1}, {256, 1, 1}, 0, stream, args);
  }
#endif

  void enqueue_cpu(tp::Descs in, const void* const* inputs, tp::Descs, void* const* outputs, void*,
                   std::uint64_t) const override {
    const tp::Desc& x = in[0];
    const std::int64_t d = x.dims[x.rank - 1];
    const std::int64_t rows = d == 0 ? 0 : tp::volume(x) / d;
    const auto* src = static_cast<const float*>(inputs[0]);
    const auto* weight = static_cast<const float*>(inputs[1]);
    auto* dst = static_cast<float*>(outputs[0]);
    for (std::int64_t r = 0; r < rows; ++r) {
      const float* row = src + r * d;
      double sum = 0;  // accumulated in double: the mean of squares of a long row stays exact
      for (std::int64_t i = 0; i < d; ++i) sum += static_cast<double>(row[i]) * row[i];
      const float scale = 1.0f / std::sqrt(static_cast<float>(sum / static_cast<double>(d)) + epsilon_);
      for (std::int64_t i = 0; i < d; ++i) dst[r * d + i] = row[i] * scale * weight[i];
    }
  }

 private:
  float epsilon_;
};

struct RmsNormCreator {
  static constexpr const char* kName = "RMSNorm";
  static constexpr const char* kVersion = "1";
  static constexpr const char* kNamespace = "tensoracle.examples";
  static std::vector<TensoraclePluginFieldSpec> fields() { return {{"epsilon", TENSORACLE_FIELD_FLOAT32, 1}}; }
  static std::unique_ptr<tp::Plugin> create(const tp::Fields& f) {
    const float epsilon = f.scalar<float>("epsilon", 1e-6f);
    tp::require(std::isfinite(epsilon) && epsilon >= 0, "epsilon must be finite and >= 0, got " + std::to_string(epsilon));
    return std::make_unique<RmsNorm>(epsilon);
  }
};

}  // namespace

TENSORACLE_EXPORT_PLUGINS(RmsNormCreator)
