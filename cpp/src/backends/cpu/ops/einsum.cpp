// The CPU backend's einsum (kernels.h): permutes/reduces its operands into float32 matrices in the
// workspace (or uses them in place when they already have the layout) and runs one batched GEMM
// (cblas_sgemm).
#include <cblas.h>

#include <algorithm>
#include <climits>
#include <cstddef>
#include <cstdint>
#include <span>
#include <string>
#include <vector>

#include "backends/common/einsum_plan.h"
#include "backends/cpu/index_util.h"
#include "backends/cpu/kernels.h"
#include "backends/cpu/op_kernel.h"
#include "backends/cpu/kernels_util.h"
#include "graph/ops.h"
#include "tensoracle/errors.h"

namespace tensoracle::cpu {

namespace {

using namespace indexing;  // index_util.h
using backends::common::EinsumPlan;

// The plan (backends/common/einsum_plan.h): the CPU's GEMM always multiplies float32.
constexpr auto kGemm = backends::common::EinsumGemm::kFloat32;

// dst (contiguous, dims dsize[0..nd)) = the sum over the reduced dims (rsize, rstride) of src
// read with strides sstride per destination dim; accumulated in double, stored as DT.
template <DataType ST, DataType DT>
void permute_reduce_typed(const void* src, int nd, const i64* dsize, const i64* sstride, int nr, const i64* rsize,
                          const i64* rstride, void* dst) {
  i64 n = 1;
  for (int k = 0; k < nd; ++k) n *= dsize[k];
  i64 rn = 1;
  for (int k = 0; k < nr; ++k) rn *= rsize[k];
  if (n == 0) return;
  detail::parallel_ranges(
      n,
      [&](i64 begin, i64 end) {
        i64 idx[26] = {};
        i64 off = 0, rem = begin;
        for (int k = nd - 1; k >= 0; --k) {
          idx[k] = rem % dsize[k];
          rem /= dsize[k];
          off += idx[k] * sstride[k];
        }
        for (i64 e = begin; e < end; ++e) {
          float v;
          if (nr == 0) {
            v = load_f<ST>(src, off);
          } else {
            double acc = 0;
            i64 ridx[26] = {};
            i64 roff = 0;
            for (i64 t = 0; t < rn; ++t) {
              acc += load_f<ST>(src, off + roff);
              for (int k = nr - 1; k >= 0; --k) {
                roff += rstride[k];
                if (++ridx[k] < rsize[k]) break;
                roff -= ridx[k] * rstride[k];
                ridx[k] = 0;
              }
            }
            v = static_cast<float>(acc);
          }
          store_f<DT>(dst, e, v);
          for (int k = nd - 1; k >= 0; --k) {
            off += sstride[k];
            if (++idx[k] < dsize[k]) break;
            off -= idx[k] * sstride[k];
            idx[k] = 0;
          }
        }
      },
      std::max<i64>(1, kParallelMin / std::max<i64>(1, rn)));
}

void permute_reduce(const void* src, DataType st, const std::string& dest_letters, const i64* letter_stride,
                    const std::string& reduce_letters, const EinsumPlan& p, void* dst, DataType dt) {
  i64 dsize[26], sstride[26], rsize[26], rstride[26];
  const int nd = static_cast<int>(dest_letters.size()), nr = static_cast<int>(reduce_letters.size());
  for (int k = 0; k < nd; ++k) {
    dsize[k] = p.size[dest_letters[static_cast<std::size_t>(k)] - 'a'];
    sstride[k] = letter_stride[dest_letters[static_cast<std::size_t>(k)] - 'a'];
  }
  for (int k = 0; k < nr; ++k) {
    rsize[k] = p.size[reduce_letters[static_cast<std::size_t>(k)] - 'a'];
    rstride[k] = letter_stride[reduce_letters[static_cast<std::size_t>(k)] - 'a'];
  }
  by_float_type(st, "einsum", [&](auto s) {
    by_float_type(dt, "einsum", [&](auto d) {
      permute_reduce_typed<decltype(s)::value, decltype(d)::value>(src, nd, dsize, sstride, nr, rsize, rstride, dst);
    });
  });
}

void check_blas_int(i64 v, const char* what) {
  if (v > INT_MAX)
    throw UnsupportedError("[cpu] einsum: " + std::string(what) + " " + num(v) +
                           " exceeds the BLAS interface's 32-bit limit");
}

}  // namespace

// ---- einsum -----------------------------------------------------------------------------

std::size_t einsum_workspace_bytes(const EinsumParams& p, std::span<const TensorRef> inputs, const TensorRef& out) {
  // Sizing only: the buffers need not exist yet (the builder asks before allocating).
  const EinsumPlan plan = backends::common::plan_einsum(detail::kFail, p, inputs, out, kGemm);
  return static_cast<std::size_t>(plan.wa + plan.wb + plan.wc) * sizeof(float);
}

void einsum(const EinsumParams& p, std::span<const TensorRef> inputs, const TensorRef& out, void* workspace) {
  i64 n = 0;
  const EinsumPlan plan = backends::common::check_einsum(detail::kFail, p, inputs, out, kGemm, n);
  if (n == 0) return;
  const DataType type = out.type;
  if (plan.inputs == 1) {
    permute_reduce(inputs[0].data, type, plan.out, plan.view[0].stride, backends::common::einsum_reduced_letters(plan), plan,
                   out.data, type);
    return;
  }
  if (plan.wa + plan.wb + plan.wc > 0 && workspace == nullptr)
    fail("einsum: '" + p.equation + "' needs a workspace (einsum_workspace_bytes)");
  float* ws = static_cast<float*>(workspace);
  const float* A;
  const float* Bm;
  float* C;
  if (plan.a_direct) {
    A = static_cast<const float*>(inputs[0].data);
  } else {
    float* wa = ws;
    permute_reduce(inputs[0].data, type, plan.batch + plan.mfree + plan.kcon, plan.view[0].stride, plan.sum_a, plan, wa,
                   DataType::kFLOAT);
    A = wa;
  }
  if (plan.b_direct) {
    Bm = static_cast<const float*>(inputs[1].data);
  } else {
    float* wb = ws + plan.wa;
    permute_reduce(inputs[1].data, type, plan.batch + plan.kcon + plan.nfree, plan.view[1].stride, plan.sum_b, plan, wb,
                   DataType::kFLOAT);
    Bm = wb;
  }
  C = plan.c_direct ? static_cast<float*>(out.data) : ws + plan.wa + plan.wb;

  const i64 M = plan.M, N = plan.N, K = plan.K, mn = M * N;
  if (K == 0) {
    std::fill_n(C, plan.B * mn, 0.f);
  } else {
    check_blas_int(M, "M");
    check_blas_int(N, "N");
    check_blas_int(K, "K");
    detail::ensure_blas_threads();
    const CBLAS_TRANSPOSE ta = plan.a_trans ? CblasTrans : CblasNoTrans;
    const CBLAS_TRANSPOSE tb = plan.b_trans ? CblasTrans : CblasNoTrans;
    const int lda = static_cast<int>(plan.a_trans ? M : K), ldb = static_cast<int>(plan.b_trans ? K : N);
    for (i64 b = 0; b < plan.B; ++b)
      cblas_sgemm(CblasRowMajor, ta, tb, static_cast<int>(M), static_cast<int>(N), static_cast<int>(K), 1.0f, A + b * M * K,
                  lda, Bm + b * K * N, ldb, 0.0f, C + b * mn, static_cast<int>(N));
  }
  if (plan.c_direct) return;
  // C[batch, M, N] into the output's letter order, rounded to its type once.
  i64 cstride[26] = {};
  backends::common::einsum_c_strides(plan, cstride);
  permute_reduce(C, DataType::kFLOAT, plan.out, cstride, "", plan, out.data, type);
}

// ---- the node kernel's entry (op_kernel.h) -----------------------------------------------------

namespace ops {

extern const OpKernel kEinsumKernel = {
    LayerType::kEINSUM, nullptr,
    [](const OpCall& c) { return einsum_workspace_bytes(std::get<EinsumParams>(c.node.params), input_refs(c), ref(c.out)); },
    [](const OpCall& c) { einsum(std::get<EinsumParams>(c.node.params), input_refs(c), ref(c.out), c.workspace); }};

}  // namespace ops

}  // namespace tensoracle::cpu
