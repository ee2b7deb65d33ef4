// Test models with quantize/dequantize pairs, shared by the CPU and CUDA engine tests.
#pragma once

#include <string>
#include <vector>

#include "st_helpers.h"
#include "tensoracle/network.h"

namespace tensoracle::testing {

// Two quantized layers, features [-1, 32] -> [-1, 8]: DQ(Q(x)) @ DQ(Q(w1)), GELU (erf), then
// DQ(Q(hidden)) @ DQ(Q(w2)), per-tensor scales, in `quantized` (int8 or fp8) around products of
// `compute` (float32 or float16; the result is cast back to float32). With `keep_apart`, the
// GELU output is a network output too ("hidden"), which keeps the second quantize (q_h) a node
// of its own instead of part of the first product's epilogue.
inline auto two_quantized_layers(DataType quantized, DataType compute, bool keep_apart) {
  return [=](Network& net) {
    static const std::vector<float> m1 = uniform(32 * 32, -0.25f, 0.25f, 61), m2 = uniform(32 * 8, -0.25f, 0.25f, 62);
    const float top = quantized == DataType::kINT8 ? 127.f : 448.f;
    const float xs = 1.f / top, w1s = 0.25f / top, hs = 0.5f / top, w2s = 0.25f / top;
    auto constant = [&](Dims d, const float* v) {
      return net.add_constant(d, Weights::copy_of(DataType::kFLOAT, v, d.volume()))->get_output(0);
    };
    auto qdq = [&](Tensor* t, const float& scale, const char* name) {
      auto* s = constant({1}, &scale);
      auto* q = net.add_quantize(t, s, quantized);
      q->set_name(std::string("q_") + name);
      return net.add_dequantize(q->get_output(0), s, compute)->get_output(0);
    };
    auto* x = net.add_input("features", DataType::kFLOAT, {-1, 32});
    Tensor* xc = compute == DataType::kFLOAT ? x : net.add_cast(x, compute)->get_output(0);
    auto* h = net.add_matrix_multiply(qdq(xc, xs, "x"), MatrixOperation::kNONE, qdq(constant({32, 32}, m1.data()), w1s, "w1"),
                                      MatrixOperation::kNONE)
                  ->get_output(0);
    auto* g = net.add_activation(h, ActivationType::kGELU_ERF);
    g->set_name("gelu");
    if (keep_apart) {
      g->get_output(0)->set_name("hidden");
      net.mark_output(g->get_output(0));
    }
    auto* y = net.add_matrix_multiply(qdq(g->get_output(0), hs, "h"), MatrixOperation::kNONE,
                                      qdq(constant({32, 8}, m2.data()), w2s, "w2"), MatrixOperation::kNONE)
                  ->get_output(0);
    if (compute != DataType::kFLOAT) y = net.add_cast(y, DataType::kFLOAT)->get_output(0);
    y->set_name("result");
    net.mark_output(y);
  };
}

}  // namespace tensoracle::testing
