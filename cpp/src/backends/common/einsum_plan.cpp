// The einsum plan both backends run (einsum_plan.h).
#include "backends/common/einsum_plan.h"

#include <cstddef>
#include <span>
#include <string>
#include <vector>

#include "graph/ops.h"
#include "tensoracle/errors.h"

namespace tensoracle::backends::common {

namespace {

i64 letters_volume(const EinsumPlan& p, const std::string& ls) {
  i64 v = 1;
  for (char c : ls) v *= p.size[c - 'a'];
  return v;
}

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

}  // namespace

bool contains(const std::string& s, char c) { return s.find(c) != std::string::npos; }

EinsumPlan plan_einsum(const Fail& fail, const EinsumParams& params, std::span<const TensorRef> inputs,
                       const TensorRef& out, EinsumGemm gemm) {
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
  p.type = type;
  if (!is_float_type(type)) fail("einsum: input 0 has type " + tn(type) + "; einsum takes float32, float16 or bfloat16");
  for (std::size_t i = 0; i < inputs.size(); ++i) {
    const TensorRef& t = inputs[i];
    const std::string& ls = spec.operands[i];
    if (t.type != type)
      fail("einsum: input " + std::to_string(i) + " has type " + tn(t.type) + "; input 0 has " + tn(type));
    if (!t.dims.all_known()) fail("einsum: input " + std::to_string(i) + " has unknown dims " + t.dims.str());
    if (static_cast<int>(ls.size()) != t.dims.rank())
      fail("einsum: operand '" + ls + "' has " + std::to_string(ls.size()) + " letters but input " + std::to_string(i) +
           " has dims " + t.dims.str());
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
  p.gemm_type = gemm == EinsumGemm::kInputType && p.sum_a.empty() && p.sum_b.empty() ? type : DataType::kFLOAT;
  // Read in place only what already is in the GEMM's type (and not reduced).
  if (p.gemm_type == type) {
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

EinsumPlan check_einsum(const Fail& fail, const EinsumParams& params, std::span<const TensorRef> inputs,
                        const TensorRef& out, EinsumGemm gemm, i64& n) {
  for (std::size_t i = 0; i < inputs.size(); ++i)
    checked_volume(fail, inputs[i], "einsum", ("input " + std::to_string(i)).c_str());
  n = checked_volume(fail, out, "einsum", "the output");
  return plan_einsum(fail, params, inputs, out, gemm);
}

std::string einsum_reduced_letters(const EinsumPlan& p) {
  std::string reduced;
  for (char c : p.view[0].letters)
    if (!contains(p.out, c)) reduced += c;
  return reduced;
}

void einsum_c_strides(const EinsumPlan& p, i64 (&stride)[26]) {
  i64 s = 1;
  const std::string seq = p.batch + p.mfree + p.nfree;
  for (auto it = seq.rbegin(); it != seq.rend(); ++it) {
    stride[*it - 'a'] = s;
    s *= p.size[*it - 'a'];
  }
}

}  // namespace tensoracle::backends::common
