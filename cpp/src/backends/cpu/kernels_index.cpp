// Placeholder until the kernels land: every entry point reports that it is missing.
#include "backends/cpu/kernels_more.h"
#include "tensoracle/errors.h"

namespace tensoracle::cpu {

void concatenation(int, std::span<const TensorRef>, const TensorRef&) {
  throw UnsupportedError("[cpu] concatenation: this kernel is not implemented yet");
}

void slice(const SliceParams&, const TensorRef&, const TensorRef*, const TensorRef&) {
  throw UnsupportedError("[cpu] slice: this kernel is not implemented yet");
}

void gather(const GatherParams&, const TensorRef&, const TensorRef&, const TensorRef&) {
  throw UnsupportedError("[cpu] gather: this kernel is not implemented yet");
}

void select(const TensorRef&, const TensorRef&, const TensorRef&, const TensorRef&) {
  throw UnsupportedError("[cpu] select: this kernel is not implemented yet");
}

void padding(const PaddingParams&, const TensorRef&, const TensorRef&) {
  throw UnsupportedError("[cpu] padding: this kernel is not implemented yet");
}

void resize(const ResizeParams&, const TensorRef&, const TensorRef&) {
  throw UnsupportedError("[cpu] resize: this kernel is not implemented yet");
}

std::size_t einsum_workspace_bytes(const EinsumParams&, std::span<const TensorRef>, const TensorRef&) {
  throw UnsupportedError("[cpu] einsum_workspace_bytes: this kernel is not implemented yet");
}

void einsum(const EinsumParams&, std::span<const TensorRef>, const TensorRef&, void*) {
  throw UnsupportedError("[cpu] einsum: this kernel is not implemented yet");
}

}  // namespace tensoracle::cpu
