// Placeholder until the kernels land: every entry point reports that it is missing.
#include "backends/cpu/kernels_more.h"
#include "tensoracle/errors.h"

namespace tensoracle::cpu {

std::size_t convolution_workspace_bytes(const ConvolutionParams&, const TensorRef&, const TensorRef&) {
  throw UnsupportedError("[cpu] convolution_workspace_bytes: this kernel is not implemented yet");
}

void convolution(const ConvolutionParams&, const TensorRef&, const TensorRef&, const TensorRef*, const TensorRef&, void*) {
  throw UnsupportedError("[cpu] convolution: this kernel is not implemented yet");
}

std::size_t deconvolution_workspace_bytes(const DeconvolutionParams&, const TensorRef&, const TensorRef&) {
  throw UnsupportedError("[cpu] deconvolution_workspace_bytes: this kernel is not implemented yet");
}

void deconvolution(const DeconvolutionParams&, const TensorRef&, const TensorRef&, const TensorRef*, const TensorRef&, void*) {
  throw UnsupportedError("[cpu] deconvolution: this kernel is not implemented yet");
}

void pooling(const PoolingParams&, const TensorRef&, const TensorRef&) {
  throw UnsupportedError("[cpu] pooling: this kernel is not implemented yet");
}

}  // namespace tensoracle::cpu
