// A plugin with CPU and CUDA implementations for the GPU tests (namespace "tensoracle.tests.cuda"):
//   Axpb  outputs y = a * x + b and z = -x for float32 x; fields a, b (float32, 1 each).
// The CUDA enqueue launches a kernel on the execution's stream with device pointers.
#include <cuda_runtime_api.h>

#include <cstdint>
#include <memory>
#include <string>
#include <vector>

#include "tensoracle/plugin.hpp"

namespace {

namespace tp = tensoracle::plugin;

__global__ void axpb_kernel(const float* x, float* y, float* z, float a, float b, std::int64_t n) {
  const std::int64_t i = static_cast<std::int64_t>(blockIdx.x) * blockDim.x + threadIdx.x;
  if (i < n) {
    y[i] = __fadd_rn(__fmul_rn(a, x[i]), b);
    z[i] = -x[i];
  }
}

class Axpb final : public tp::Plugin {
 public:
  Axpb(float a, float b) : a_(a), b_(b) {}
  int num_outputs() const override { return 2; }
  std::int32_t backends() const override { return TENSORACLE_BACKEND_CPU | TENSORACLE_BACKEND_CUDA; }
  void output_descs(tp::Descs in, tp::MutableDescs out) const override {
    tp::require(in.size() == 1 && in[0].type == TENSORACLE_TYPE_FLOAT32, "Axpb takes one float32 input");
    out[0] = in[0];
    out[1] = in[0];
  }
  void enqueue_cpu(tp::Descs in, const void* const* x, tp::Descs, void* const* out, void*, std::uint64_t) const override {
    const auto n = tp::volume(in[0]);
    const auto* src = static_cast<const float*>(x[0]);
    for (std::int64_t i = 0; i < n; ++i) {
      static_cast<float*>(out[0])[i] = a_ * src[i] + b_;
      static_cast<float*>(out[1])[i] = -src[i];
    }
  }
  void enqueue_cuda(tp::Descs in, const void* const* x, tp::Descs, void* const* out, void*, std::uint64_t,
                    void* stream) const override {
    const auto n = tp::volume(in[0]);
    if (n == 0) return;
    const unsigned blocks = static_cast<unsigned>((n + 255) / 256);
    axpb_kernel<<<blocks, 256, 0, static_cast<cudaStream_t>(stream)>>>(static_cast<const float*>(x[0]),
                                                                       static_cast<float*>(out[0]),
                                                                       static_cast<float*>(out[1]), a_, b_, n);
    if (cudaError_t e = cudaGetLastError(); e != cudaSuccess) throw tp::Error(std::string("launch: ") + cudaGetErrorString(e));
  }

 private:
  float a_, b_;
};

struct AxpbCreator {
  static constexpr const char* kName = "Axpb";
  static constexpr const char* kVersion = "1";
  static constexpr const char* kNamespace = "tensoracle.tests.cuda";
  static std::vector<TensoraclePluginFieldSpec> fields() {
    return {{"a", TENSORACLE_FIELD_FLOAT32, 1}, {"b", TENSORACLE_FIELD_FLOAT32, 1}};
  }
  static std::unique_ptr<tp::Plugin> create(const tp::Fields& f) {
    return std::make_unique<Axpb>(f.scalar<float>("a", 1.f), f.scalar<float>("b", 0.f));
  }
};

}  // namespace

TENSORACLE_EXPORT_PLUGINS(AxpbCreator)
