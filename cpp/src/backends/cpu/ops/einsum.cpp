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

#include "backends/cpu/index_util.h"
#include "backends/cpu/kernels.h"
#include "backends/cpu/kernels_util.h"
#include "graph/ops.h"
#include "tensoracle/errors.h"

namespace tensoracle::cpu {

namespace {

using namespace indexing;  // index_util.h

// ---- einsum plan ------------------------------------------------------------------------

// One operand as a strided view over its distinct letters (a repeated letter, as in "ii",
// reads the diagonal: its stride is the sum of the repeated positions' strides).
struct EinsumView {
  std::string letters;
  i64 stride[26] = {};
};

struct EinsumPlan {
  int inputs = 1;
  i64 size[26] = {};
  EinsumView view[2];
  std::string out;  // output letters
  // Two inputs: C[batch, M, N] = A[batch, M, K] x B[batch, K, N].
  std::string batch, mfree, nfree, kcon, sum_a, sum_b;
  i64 B = 1, M = 1, N = 1, K = 1;
  bool a_direct = false, a_trans = false, b_direct = false, b_trans = false, c_direct = false;
  i64 wa = 0, wb = 0, wc = 0;  // workspace floats per part
};

i64 letters_volume(const EinsumPlan& p, const std::string& ls) {
  i64 v = 1;
  for (char c : ls) v *= p.size[c - 'a'];
  return v;
}

bool contains(const std::string& s, char c) { return s.find(c) != std::string::npos; }

// True when the view, read in the letter order `seq`, is a contiguous row-major array.
bool is_contiguous(const EinsumPlan& p, const EinsumView& v, const std::string& seq) {
  i64 expected = 1;
  for (auto it = seq.rbegin(); it != seq.rend(); ++it) {
    const i64 n = p.size[*it - 'a'];
    if (n == 1) continue;
    if (v.stride[*it - 'a'] != expected) return false;
    expected *= n;
  }
  return true;
}

EinsumPlan plan_einsum(const EinsumParams& params, std::span<const TensorRef> inputs, const TensorRef& out) {
  if (inputs.size() < 1 || inputs.size() > 2)
    fail("einsum: takes one or two inputs, got " + std::to_string(inputs.size()));
  graph::EinsumSpec spec;
  try {
    spec = graph::parse_einsum(params.equation, inputs.size());
  } catch (const InvalidArgument& e) {
    fail(std::string("einsum: ") + e.what());
  }
  EinsumPlan p;
  p.inputs = static_cast<int>(inputs.size());
  for (auto& s : p.size) s = -1;
  const DataType type = inputs[0].type;
  if (!is_float_type(type)) fail("einsum: input 0 has type " + tn(type) + "; einsum takes float32, float16 or bfloat16");
  for (std::size_t i = 0; i < inputs.size(); ++i) {
    const TensorRef& t = inputs[i];
    const std::string& ls = spec.operands[i];
    if (t.type != type)
      fail("einsum: input " + std::to_string(i) + " has type " + tn(t.type) + "; input 0 has " + tn(type));
    if (!t.dims.all_known()) fail("einsum: input " + std::to_string(i) + " has unknown dims " + t.dims.str());
    if (static_cast<int>(ls.size()) != t.dims.rank())
      fail("einsum: operand '" + ls + "' has " + std::to_string(ls.size()) + " letters but input " +
           std::to_string(i) + " has dims " + t.dims.str());
    i64 st[Dims::kMaxRank];
    strides_of(t.dims, st);
    EinsumView& v = p.view[i];
    for (std::size_t k = 0; k < ls.size(); ++k) {
      const int c = ls[k] - 'a';
      const i64 d = t.dims[static_cast<int>(k)];
      if (p.size[c] < 0) p.size[c] = d;
      else if (p.size[c] != d)
        fail("einsum: letter '" + std::string(1, ls[k]) + "' of '" + params.equation + "' has sizes " + num(p.size[c]) +
             " and " + num(d));
      if (!contains(v.letters, ls[k])) v.letters += ls[k];
      v.stride[c] += st[k];
    }
  }
  p.out = spec.output;
  std::vector<i64> od;
  for (char c : p.out) od.push_back(p.size[c - 'a']);
  const Dims expected{std::span<const i64>(od)};
  if (out.type != type || !(out.dims == expected))
    fail("einsum: the output is " + desc(out) + "; '" + params.equation + "' gives " + tn(type) + expected.str());
  if (p.inputs == 1) return p;

  const std::string& la = p.view[0].letters;
  const std::string& lb = p.view[1].letters;
  for (char c : p.out) {
    const bool a = contains(la, c), b = contains(lb, c);
    if (a && b) p.batch += c;
    else if (a) p.mfree += c;
    else p.nfree += c;
  }
  for (char c : la) {
    if (contains(p.out, c)) continue;
    if (contains(lb, c)) p.kcon += c;
    else p.sum_a += c;
  }
  for (char c : lb)
    if (!contains(p.out, c) && !contains(la, c)) p.sum_b += c;
  p.B = letters_volume(p, p.batch);
  p.M = letters_volume(p, p.mfree);
  p.N = letters_volume(p, p.nfree);
  p.K = letters_volume(p, p.kcon);
  if (type == DataType::kFLOAT) {
    if (p.sum_a.empty()) {
      if (is_contiguous(p, p.view[0], p.batch + p.mfree + p.kcon)) p.a_direct = true;
      else if (is_contiguous(p, p.view[0], p.batch + p.kcon + p.mfree)) p.a_direct = p.a_trans = true;
    }
    if (p.sum_b.empty()) {
      if (is_contiguous(p, p.view[1], p.batch + p.kcon + p.nfree)) p.b_direct = true;
      else if (is_contiguous(p, p.view[1], p.batch + p.nfree + p.kcon)) p.b_direct = p.b_trans = true;
    }
    // The output in the order of C: its own strides, read in C's letter order.
    EinsumView ov;
    i64 st[Dims::kMaxRank];
    strides_of(out.dims, st);
    for (std::size_t k = 0; k < p.out.size(); ++k) ov.stride[p.out[k] - 'a'] = st[k];
    p.c_direct = is_contiguous(p, ov, p.batch + p.mfree + p.nfree);
  }
  if (!p.a_direct) p.wa = p.B * p.M * p.K;
  if (!p.b_direct) p.wb = p.B * p.K * p.N;
  if (!p.c_direct) p.wc = p.B * p.M * p.N;
  return p;
}

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
  const EinsumPlan plan = plan_einsum(p, inputs, out);
  return static_cast<std::size_t>(plan.wa + plan.wb + plan.wc) * sizeof(float);
}

void einsum(const EinsumParams& p, std::span<const TensorRef> inputs, const TensorRef& out, void* workspace) {
  for (std::size_t i = 0; i < inputs.size(); ++i)
    detail::checked_volume(inputs[i], "einsum", ("input " + std::to_string(i)).c_str());
  const i64 n = detail::checked_volume(out, "einsum", "the output");
  const EinsumPlan plan = plan_einsum(p, inputs, out);
  if (n == 0) return;
  const DataType type = out.type;
  if (plan.inputs == 1) {
    std::string reduced;
    for (char c : plan.view[0].letters)
      if (!contains(plan.out, c)) reduced += c;
    permute_reduce(inputs[0].data, type, plan.out, plan.view[0].stride, reduced, plan, out.data, type);
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
  i64 s = 1;
  const std::string seq = plan.batch + plan.mfree + plan.nfree;
  for (auto it = seq.rbegin(); it != seq.rend(); ++it) {
    cstride[*it - 'a'] = s;
    s *= plan.size[*it - 'a'];
  }
  permute_reduce(C, DataType::kFLOAT, plan.out, cstride, "", plan, out.data, type);
}

}  // namespace tensoracle::cpu
