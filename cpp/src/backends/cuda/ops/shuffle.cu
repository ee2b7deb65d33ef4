// The CUDA backend's shuffle (kernels.h): second_transpose(reshape(first_transpose(x))) as
// plan copies and tiled transposes (layout_util.cuh), raw elements of every type.
#include <cstddef>
#include <cstdint>
#include <string>

#include "backends/cuda/device_util.cuh"
#include "backends/cuda/kernels.h"
#include "backends/cuda/layout_util.cuh"

namespace tensoracle::cuda {

namespace {

using namespace layout;  // layout_util.cuh

// Output dim i of a transpose of `d` by `perm` is input dim perm[i].
HostPlan transpose_plan(const Dims& d, const Permutation& perm) {
  i64 st[kMaxRank];
  strides_of(d, st);
  HostPlan p;
  for (int i = 0; i < d.rank(); ++i) {
    const int k = perm.order[static_cast<std::size_t>(i)];
    push_dim(p, d[k], st[k]);
  }
  finish(p);
  return p;
}

// ---- shuffle helpers (the CPU's) -----------------------------------------------------------

bool is_permutation(const Permutation& p, int rank) {
  bool seen[kMaxRank] = {};
  for (int i = 0; i < rank; ++i) {
    const int v = p.order[static_cast<std::size_t>(i)];
    if (v < 0 || v >= rank || seen[v]) return false;
    seen[v] = true;
  }
  return true;
}

std::string perm_text(const Permutation& p, int rank) {
  std::string s = "(";
  for (int i = 0; i < rank; ++i) s += (i ? ", " : "") + std::to_string(p.order[static_cast<std::size_t>(i)]);
  return s + ")";
}

}  // namespace

// ---- shuffle -------------------------------------------------------------------------------

void shuffle(const ShuffleParams& p, const TensorRef& x, const TensorRef& out, cudaStream_t stream) {
  const i64 n = checked_volume(x, "shuffle", "the input");
  if (checked_volume(out, "shuffle", "the output") != n || out.type != x.type)
    fail("shuffle: the output " + tn(out.type) + out.dims.str() + " differs in type or volume from the input " + tn(x.type) +
         x.dims.str());
  const int r1 = x.dims.rank(), r2 = out.dims.rank();
  if (!is_permutation(p.first_transpose, r1))
    fail("shuffle: first_transpose " + perm_text(p.first_transpose, r1) + " is not a permutation");
  if (!is_permutation(p.second_transpose, r2))
    fail("shuffle: second_transpose " + perm_text(p.second_transpose, r2) + " is not a permutation");
  // The reshaped tensor's dims follow from the output's: out.dims[j] = reshaped[second[j]].
  Dims reshaped = out.dims;
  for (int j = 0; j < r2; ++j) reshaped[p.second_transpose.order[static_cast<std::size_t>(j)]] = out.dims[j];
  if (!p.reshape_dims) {
    Dims first = x.dims;
    for (int i = 0; i < r1; ++i) first[i] = x.dims[p.first_transpose.order[static_cast<std::size_t>(i)]];
    if (!(first == reshaped))
      fail("shuffle: the output dims " + out.dims.str() + " do not follow from the input " + x.dims.str() +
           " and the transposes");
  }
  if (n == 0) return;
  const std::size_t es = element_size(x.type);
  // Output index -> (second transpose) linear index into the reshaped tensor, which is the
  // first-transposed tensor's linear index -> (first transpose) offset into x.
  const HostPlan second = transpose_plan(reshaped, p.second_transpose);
  const HostPlan first = transpose_plan(x.dims, p.first_transpose);
  const bool id1 = is_identity(first), id2 = is_identity(second);
  if (id1 && id2) {
    if (x.data != out.data) memcpy_async(out.data, x.data, n * static_cast<i64>(es), stream, "shuffle");
    return;
  }
  if (id1) plan_copy(x.data, out.data, n, es, 0, second, nullptr, n, stream, "shuffle");
  else if (id2) plan_copy(x.data, out.data, n, es, 0, first, nullptr, n, stream, "shuffle");
  else plan_copy(x.data, out.data, n, es, 0, first, &second, n, stream, "shuffle");
}

}  // namespace tensoracle::cuda
