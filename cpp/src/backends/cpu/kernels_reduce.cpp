// Placeholder until the kernels land: every entry point reports that it is missing.
#include "backends/cpu/kernels_more.h"
#include "tensoracle/errors.h"

namespace tensoracle::cpu {

void unary(UnaryOperation, const TensorRef&, const TensorRef&) {
  throw UnsupportedError("[cpu] unary: this kernel is not implemented yet");
}

void reduce(const ReduceParams&, const TensorRef&, const TensorRef&) {
  throw UnsupportedError("[cpu] reduce: this kernel is not implemented yet");
}

void softmax(int, const TensorRef&, const TensorRef&) {
  throw UnsupportedError("[cpu] softmax: this kernel is not implemented yet");
}

void normalization(const NormalizationParams&, const TensorRef&, const TensorRef&, const TensorRef&, const TensorRef&) {
  throw UnsupportedError("[cpu] normalization: this kernel is not implemented yet");
}

}  // namespace tensoracle::cpu
