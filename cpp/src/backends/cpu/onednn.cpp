// The CPU backend's oneDNN tactics (see onednn.h).
//
// A node keeps one plan per distinct set of input shapes (and thread count): the primitive,
// its post-op operands' descriptions, the reorders between the graph's plain layouts and the
// layouts oneDNN chose, and the constant weights reordered once into oneDNN's layout (on the
// first run that has their bytes). Plans are made under a mutex and then only read, so
// executions on several threads share them, and may run one primitive at the same time. Every
// primitive is therefore made in oneDNN's user-scratchpad mode, and each run passes scratch of
// its calling thread (thread_scratchpad): in oneDNN's default library mode a primitive owns one
// scratchpad, which two threads running it at once would both write. The scratchpad's size
// depends on the thread count at run time, which the engine's workspace, planned at build time,
// cannot know; the workspace holds only the reordered activations.
#include "backends/cpu/onednn.h"

#ifndef TENSORACLE_HAVE_ONEDNN
// Built without oneDNN: no node takes a oneDNN tactic, and an engine that names one (built
// where oneDNN exists) is refused when the engine is opened (see cpu_backend.cpp's target).
namespace tensoracle::cpu::onednn {
bool applicable(const graph::Graph&, const graph::Node&) { return false; }
bool output_channels_last(const graph::Graph&, const graph::Node&) { return false; }
bool pooling_channels_last(const graph::Graph&, const graph::Node&) { return false; }
std::string pooling_channels_last_refusal(const graph::Graph&, const graph::Node&) {
  return "this build of the CPU backend has no oneDNN";
}
std::unique_ptr<Accelerated> make(const graph::Graph&, const graph::Node&) { return nullptr; }
std::string version() { return ""; }
}  // namespace tensoracle::cpu::onednn
#else

#ifdef _OPENMP
#include <omp.h>
#endif

#include <algorithm>
#include <cstdlib>
#include <cstring>
#include <memory>
#include <map>
#include <mutex>
#include <oneapi/dnnl/dnnl.hpp>
#include <optional>
#include <unordered_map>
#include <vector>

#include "backends/cpu/kernels.h"
#include "graph/ops.h"
#include "tensoracle/errors.h"

namespace tensoracle::cpu::onednn {

namespace {

using i64 = std::int64_t;
using backends::Buffer;
using dt = dnnl::memory::data_type;
using tag = dnnl::memory::format_tag;
using MO = MatrixOperation;

constexpr std::size_t kAlign = 64;
std::size_t align_up(std::size_t n) { return (n + kAlign - 1) / kAlign * kAlign; }

const dnnl::engine& cpu_engine() {
  static const dnnl::engine e(dnnl::engine::kind::cpu, 0);
  return e;
}

dnnl::stream& thread_stream() {
  thread_local dnnl::stream s(cpu_engine());
  return s;
}

// Scratch for one primitive run on the calling thread, grown as needed and kept for the
// thread's later runs (see the top of this file).
dnnl::memory thread_scratchpad(const dnnl::memory::desc& d) {
  struct Free {
    void operator()(std::byte* p) const noexcept { std::free(p); }
  };
  thread_local std::unique_ptr<std::byte, Free> buffer;
  thread_local std::size_t capacity = 0;
  const std::size_t need = d.get_size();
  if (need > capacity) {
    const std::size_t bytes = (need + 63) / 64 * 64;
    buffer.reset(static_cast<std::byte*>(std::aligned_alloc(64, bytes)));
    capacity = buffer ? bytes : 0;
    if (!buffer) throw std::bad_alloc();
  }
  return dnnl::memory(d, cpu_engine(), buffer.get());
}

// Attributes every primitive here is made with: user scratchpad (passed per run).
dnnl::primitive_attr user_scratchpad() {
  dnnl::primitive_attr attr;
  attr.set_scratchpad_mode(dnnl::scratchpad_mode::user);
  return attr;
}

// Adds the calling thread's scratchpad to a primitive's arguments when it needs one.
void add_scratchpad(std::unordered_map<int, dnnl::memory>& args, const dnnl::memory::desc& scratch) {
  if (scratch.get_size() > 0) args.emplace(DNNL_ARG_SCRATCHPAD, thread_scratchpad(scratch));
}

// A reorder between two layouts, made in user-scratchpad mode.
struct Reorder {
  dnnl::reorder prim;
  dnnl::memory::desc scratch;

  Reorder(const dnnl::memory::desc& from, const dnnl::memory::desc& to) {
    dnnl::reorder::primitive_desc pd(cpu_engine(), from, cpu_engine(), to, user_scratchpad());
    prim = dnnl::reorder(pd);
    scratch = pd.scratchpad_desc();
  }
  void run(dnnl::stream& s, dnnl::memory& from, dnnl::memory& to) const {
    std::unordered_map<int, dnnl::memory> args{{DNNL_ARG_FROM, from}, {DNNL_ARG_TO, to}};
    add_scratchpad(args, scratch);
    prim.execute(s, args);
  }
};

dnnl::memory::dims to_dims(const Dims& d) { return d.vec(); }

// Row-major strides of `d`.
dnnl::memory::dims plain_strides(const dnnl::memory::dims& d) {
  dnnl::memory::dims s(d.size(), 1);
  for (std::size_t i = d.size(); i-- > 1;) s[i - 1] = s[i] * std::max<i64>(d[i], 1);
  return s;
}

dnnl::memory::desc plain(const dnnl::memory::dims& d) { return {d, dt::f32, plain_strides(d)}; }

// [N, C, spatial...] stored channels-last: [N, spatial..., C].
dnnl::memory::desc nhwc(const dnnl::memory::dims& d) {
  dnnl::memory::dims permuted{d[0]};
  permuted.insert(permuted.end(), d.begin() + 2, d.end());
  permuted.push_back(d[1]);
  auto ps = plain_strides(permuted);
  dnnl::memory::dims strides(d.size());
  strides[0] = ps[0];
  strides[1] = ps.back();
  for (std::size_t i = 2; i < d.size(); ++i) strides[i] = ps[i - 1];
  return {d, dt::f32, strides};
}

// One epilogue op as a post-op.
struct PostOp {
  enum Kind { kEltwise, kBinary, kSum } kind = kEltwise;
  dnnl::algorithm alg = dnnl::algorithm::undef;
  float alpha = 0.f, beta = 0.f;
  std::size_t operand = 0;  // index into the node's inputs (binary, sum)
};

std::optional<PostOp> eltwise_of(const ActivationParams& a) {
  using A = ActivationType;
  using alg = dnnl::algorithm;
  switch (a.type) {
    case A::kRELU: return PostOp{PostOp::kEltwise, alg::eltwise_relu, 0.f, 0.f};
    case A::kLEAKY_RELU: return PostOp{PostOp::kEltwise, alg::eltwise_relu, a.alpha, 0.f};
    case A::kSIGMOID: return PostOp{PostOp::kEltwise, alg::eltwise_logistic, 0.f, 0.f};
    case A::kTANH: return PostOp{PostOp::kEltwise, alg::eltwise_tanh, 0.f, 0.f};
    case A::kELU: return PostOp{PostOp::kEltwise, alg::eltwise_elu, a.alpha, 0.f};
    case A::kGELU_ERF: return PostOp{PostOp::kEltwise, alg::eltwise_gelu_erf, 0.f, 0.f};
    case A::kGELU_TANH: return PostOp{PostOp::kEltwise, alg::eltwise_gelu_tanh, 0.f, 0.f};
    case A::kCLIP:
      if (!(a.alpha <= a.beta)) return std::nullopt;  // TensorRT's max(alpha, min(beta, x)) differs then
      return PostOp{PostOp::kEltwise, alg::eltwise_clip, a.alpha, a.beta};
    default: return std::nullopt;
  }
}

std::optional<dnnl::algorithm> binary_of(ElementWiseOperation op, bool operand_first) {
  using E = ElementWiseOperation;
  using alg = dnnl::algorithm;
  switch (op) {
    case E::kSUM: return alg::binary_add;
    case E::kPROD: return alg::binary_mul;
    case E::kMAX: return alg::binary_max;
    case E::kMIN: return alg::binary_min;
    case E::kSUB: return operand_first ? std::nullopt : std::optional(alg::binary_sub);
    case E::kDIV: return operand_first ? std::nullopt : std::optional(alg::binary_div);
    default: return std::nullopt;
  }
}

bool is_f32(const graph::Graph& g, int v) { return g.values[static_cast<std::size_t>(v)].desc.type == DataType::kFLOAT; }

// The epilogue prefix that can run as post-ops: float32 all along. Convolutions take one
// residual add (a sum post-op); matrix multiplies any binary op.
std::vector<PostOp> fusable_prefix(const graph::Graph& g, const graph::Node& n, bool conv) {
  std::vector<PostOp> ops;
  std::size_t k = n.inputs.size();
  bool have_sum = false;
  for (const auto& e : n.epilogue) {
    if (e.desc.type != DataType::kFLOAT) break;
    if (const auto* a = std::get_if<ActivationParams>(&e.params)) {
      auto p = eltwise_of(*a);
      if (!p) break;
      ops.push_back(*p);
      continue;
    }
    const auto* ew = std::get_if<ElementWiseParams>(&e.params);
    if (ew == nullptr || e.operand < 0 || !is_f32(g, e.operand)) break;
    auto alg = binary_of(ew->op, e.operand_first);
    if (!alg) break;
    if (conv) {
      if (*alg != dnnl::algorithm::binary_add || have_sum) break;
      ops.push_back({PostOp::kSum, *alg, 0.f, 0.f, k});
      have_sum = true;
    } else {
      ops.push_back({PostOp::kBinary, *alg, 0.f, 0.f, k});
    }
    ++k;
  }
  return ops;
}

bool has_ref_impl(const dnnl::primitive_desc_base& pd) {
  std::string impl = pd.impl_info_str();
  return impl.rfind("ref", 0) == 0;
}

// ---- plans shared by both kinds -----------------------------------------------------------

struct Plan {
  std::size_t workspace = 0;
  virtual ~Plan() = default;
};

template <class P>
class PlanCache {
 public:
  // The plan for these shapes, made by make() the first time (null: oneDNN does not run them).
  template <class Make>
  std::shared_ptr<const P> get(std::span<const Buffer> in, Make&& make) const {
    std::vector<i64> key{num_threads()};
    for (const auto& b : in) {
      key.push_back(b.dims.rank());
      for (i64 d : b.dims) key.push_back(d);
    }
    std::lock_guard lock(mu_);
    auto it = plans_.find(key);
    if (it != plans_.end()) return it->second;
    std::shared_ptr<const P> plan;
    try {
      cpu::ThreadScope threads;
      plan = make();
    } catch (const dnnl::error&) {
      plan = nullptr;  // unimplemented for these shapes or post-ops: the generic kernels run
    }
    plans_.emplace(std::move(key), plan);
    return plan;
  }

 private:
  mutable std::mutex mu_;
  mutable std::map<std::vector<i64>, std::shared_ptr<const P>> plans_;
};

// Constant weights in oneDNN's layout, reordered on the first run that has their bytes.
struct PackedWeights {
  dnnl::memory::desc user, packed;
  mutable std::once_flag once;
  mutable dnnl::memory memory;

  const dnnl::memory& get(const void* data) const {
    std::call_once(once, [&] {
      dnnl::memory src(user, cpu_engine(), const_cast<void*>(data));
      memory = dnnl::memory(packed, cpu_engine());
      dnnl::stream s(cpu_engine());
      Reorder(user, packed).run(s, src, memory);
      s.wait();
    });
    return memory;
  }
};

void add_post_ops(dnnl::post_ops& po, const std::vector<PostOp>& ops, const std::vector<dnnl::memory::desc>& operand_descs) {
  std::size_t b = 0;
  for (const auto& op : ops) {
    switch (op.kind) {
      case PostOp::kEltwise: po.append_eltwise(1.f, op.alg, op.alpha, op.beta); break;
      case PostOp::kSum: po.append_sum(1.f); break;
      case PostOp::kBinary: po.append_binary(op.alg, operand_descs[b++]); break;
    }
  }
}

dnnl::primitive_attr attributes(const std::vector<PostOp>& ops, const std::vector<dnnl::memory::desc>& operand_descs) {
  dnnl::post_ops po;
  add_post_ops(po, ops, operand_descs);
  dnnl::primitive_attr attr = user_scratchpad();
  attr.set_post_ops(po);
  return attr;
}

// ---- matrix multiply ----------------------------------------------------------------------

struct MatmulPlan : Plan {
  dnnl::matmul::primitive_desc pd;
  dnnl::matmul prim;
  dnnl::memory::desc src, weights, dst;
  std::vector<dnnl::memory::desc> operands;  // binary post-ops' operands, in order
  std::unique_ptr<PackedWeights> packed;     // constant weights
};

class Matmul final : public Accelerated {
 public:
  Matmul(const graph::Graph& g, const graph::Node& n)
      : p_(std::get<MatrixMultiplyParams>(n.params)),
        weights_constant_(g.values[static_cast<std::size_t>(n.inputs[1])].constant.has_value()),
        ops_(fusable_prefix(g, n, false)) {}

  std::size_t fused() const override { return ops_.size(); }

  bool fits(std::span<const Buffer> in, const Dims& main_out, std::size_t& workspace) const override {
    auto plan = plan_for(in, main_out);
    if (plan) workspace = plan->workspace;
    return plan != nullptr;
  }

  void run(std::span<const Buffer> in, const Dims& main_out, const Buffer& out, void*) const override {
    auto plan = plan_for(in, main_out);
    if (!plan) throw BuildError("[cpu] matmul: no oneDNN plan for these shapes");
    const auto& eng = cpu_engine();
    cpu::ThreadScope threads;
    dnnl::memory src(plan->src, eng, in[0].data), dst(plan->dst, eng, out.data);
    dnnl::memory weights = plan->packed ? plan->packed->get(in[1].data) : dnnl::memory(plan->weights, eng, in[1].data);
    std::unordered_map<int, dnnl::memory> args{{DNNL_ARG_SRC, src}, {DNNL_ARG_WEIGHTS, weights}, {DNNL_ARG_DST, dst}};
    std::size_t b = 0;
    for (std::size_t i = 0; i < ops_.size(); ++i)
      if (ops_[i].kind == PostOp::kBinary)
        args.emplace(DNNL_ARG_ATTR_MULTIPLE_POST_OP(static_cast<int>(i)) | DNNL_ARG_SRC_1,
                     dnnl::memory(plan->operands[b++], eng, in[ops_[i].operand].data));
    add_scratchpad(args, plan->pd.scratchpad_desc());
    auto& s = thread_stream();
    plan->prim.execute(s, args);
    s.wait();
  }

 private:
  std::shared_ptr<const MatmulPlan> plan_for(std::span<const Buffer> in, const Dims& main_out) const {
    return cache_.get(in, [&]() -> std::shared_ptr<const MatmulPlan> { return make_plan(in, main_out); });
  }

  std::shared_ptr<const MatmulPlan> make_plan(std::span<const Buffer> in, const Dims& out) const {
    const Dims& da = in[0].dims;
    const Dims& db = in[1].dims;
    const int r = da.rank();
    if (r < 2 || db.rank() != r || out.rank() != r || out.volume() <= 0 || da.volume() <= 0 || db.volume() <= 0)
      return nullptr;
    const bool ta = p_.op0 == MO::kTRANSPOSE, tb = p_.op1 == MO::kTRANSPOSE;
    const i64 N = out[r - 1], K = ta ? da[r - 2] : da[r - 1];
    bool b_unbatched = true;
    for (int i = 0; i < r - 2; ++i) b_unbatched = b_unbatched && db[i] == 1;
    auto plan = std::make_shared<MatmulPlan>();
    // Stored [.., rows, cols]; the logical operand is its transpose when asked.
    auto operand = [](const Dims& d, bool transpose) {
      auto dims = d.vec();
      auto strides = plain_strides(dims);
      if (transpose) {
        std::swap(dims[dims.size() - 1], dims[dims.size() - 2]);
        std::swap(strides[strides.size() - 1], strides[strides.size() - 2]);
      }
      return dnnl::memory::desc(dims, dt::f32, strides);
    };
    const bool collapse = b_unbatched && !ta;  // one GEMM of [batches * M, K] rows
    i64 rows = 1;
    if (collapse) {
      rows = da.volume() / K;
      plan->src = plain({rows, K});
      plan->dst = plain({rows, N});
      plan->weights = tb ? dnnl::memory::desc({K, N}, dt::f32, dnnl::memory::dims{1, K}) : plain({K, N});
    } else {
      plan->src = operand(da, ta);
      plan->dst = plain(to_dims(out));
      plan->weights = operand(db, tb);
    }
    for (const auto& op : ops_) {
      if (op.kind != PostOp::kBinary) continue;
      const Dims& od = in[op.operand].dims;
      if (od.rank() != r) return nullptr;
      for (int i = 0; i < r; ++i)
        if (od[i] != 1 && od[i] != out[i]) return nullptr;  // the result would be larger than the product
      if (!collapse) {
        plan->operands.push_back(plain(to_dims(od)));
        continue;
      }
      bool row = true;
      for (int i = 0; i + 1 < r; ++i) row = row && od[i] == 1;
      if (row) plan->operands.push_back(plain({1, od[r - 1]}));
      else if (od == out) plan->operands.push_back(plain({rows, N}));
      else return nullptr;
    }
    const bool pack = weights_constant_ && collapse;
    dnnl::memory::desc wdesc = pack ? dnnl::memory::desc({K, N}, dt::f32, tag::any) : plan->weights;
    auto attr = attributes(ops_, plan->operands);
    plan->pd = dnnl::matmul::primitive_desc(dnnl::matmul::desc(plan->src, wdesc, plan->dst), attr, cpu_engine());
    if (has_ref_impl(plan->pd)) return nullptr;
    if (pack) {
      plan->packed = std::make_unique<PackedWeights>();
      plan->packed->user = plan->weights;
      plan->packed->packed = plan->pd.weights_desc();
    }
    plan->prim = dnnl::matmul(plan->pd);
    return plan;
  }

  MatrixMultiplyParams p_;
  bool weights_constant_;
  std::vector<PostOp> ops_;
  PlanCache<MatmulPlan> cache_;
};

// ---- convolution --------------------------------------------------------------------------

struct ConvPlan : Plan {
  dnnl::convolution_forward::primitive_desc pd;
  dnnl::convolution_forward prim;
  dnnl::memory::desc user_src, user_dst, user_residual, user_weights, bias;
  std::optional<Reorder> to_src, to_weights, from_dst, residual_to_dst;
  std::size_t src_offset = 0, dst_offset = 0, weights_offset = 0;
  std::unique_ptr<PackedWeights> packed;
};

class Convolution final : public Accelerated {
 public:
  Convolution(const graph::Graph& g, const graph::Node& n)
      : name_(n.name),
        p_(std::get<ConvolutionParams>(n.params)),
        weights_constant_(g.values[static_cast<std::size_t>(n.inputs[1])].constant.has_value()),
        has_bias_(n.inputs.size() > 2),
        ops_(fusable_prefix(g, n, true)),
        src_cl_(graph::channels_last_value(g, n.inputs[0])),
        dst_cl_(graph::channels_last_value(g, n.output)) {
    for (const auto& op : ops_)
      if (op.kind == PostOp::kSum) residual_cl_ = graph::channels_last_value(g, n.all_inputs()[op.operand]);
  }

  std::size_t fused() const override { return ops_.size(); }

  bool fits(std::span<const Buffer> in, const Dims& main_out, std::size_t& workspace) const override {
    if (main_out.volume() == 0 && (src_cl_ || dst_cl_ || residual_cl_)) return true;  // nothing to compute
    auto plan = plan_for(in, main_out);
    if (plan) workspace = plan->workspace;
    return plan != nullptr;
  }

  void run(std::span<const Buffer> in, const Dims& main_out, const Buffer& out, void* workspace) const override {
    if (main_out.volume() == 0) return;
    auto plan = plan_for(in, main_out);
    if (!plan) throw BuildError("[cpu] convolution '" + name_ + "': no oneDNN plan for these shapes");
    const auto& eng = cpu_engine();
    auto* ws = static_cast<std::byte*>(workspace);
    cpu::ThreadScope threads;
    auto& s = thread_stream();
    dnnl::memory user_src(plan->user_src, eng, in[0].data), user_dst(plan->user_dst, eng, out.data);
    dnnl::memory src = user_src, dst = user_dst;
    if (plan->to_src) {
      src = dnnl::memory(plan->pd.src_desc(), eng, ws + plan->src_offset);
      plan->to_src->run(s, user_src, src);
    }
    if (plan->from_dst) dst = dnnl::memory(plan->pd.dst_desc(), eng, ws + plan->dst_offset);
    dnnl::memory weights;
    if (plan->packed) {
      weights = plan->packed->get(in[1].data);
    } else {
      dnnl::memory user_w(plan->user_weights, eng, in[1].data);
      weights = user_w;
      if (plan->to_weights) {
        weights = dnnl::memory(plan->pd.weights_desc(), eng, ws + plan->weights_offset);
        plan->to_weights->run(s, user_w, weights);
      }
    }
    for (const auto& op : ops_) {
      if (op.kind != PostOp::kSum) continue;
      const Buffer& residual = in[op.operand];
      if (plan->residual_to_dst) {
        dnnl::memory user_res(plan->user_residual, eng, residual.data);
        plan->residual_to_dst->run(s, user_res, dst);
      } else {  // the same layout: bytes
        copy({residual.data, DataType::kFLOAT, residual.dims}, {dst.get_data_handle(), DataType::kFLOAT, out.dims});
      }
    }
    std::unordered_map<int, dnnl::memory> args{{DNNL_ARG_SRC, src}, {DNNL_ARG_WEIGHTS, weights}, {DNNL_ARG_DST, dst}};
    if (has_bias_) args.emplace(DNNL_ARG_BIAS, dnnl::memory(plan->bias, eng, in[2].data));
    add_scratchpad(args, plan->pd.scratchpad_desc());
    plan->prim.execute(s, args);
    if (plan->from_dst) plan->from_dst->run(s, dst, user_dst);
    s.wait();
  }

 private:
  std::shared_ptr<const ConvPlan> plan_for(std::span<const Buffer> in, const Dims& main_out) const {
    return required(cache_.get(in, [&]() -> std::shared_ptr<const ConvPlan> { return make_plan(in, main_out); }),
                    "oneDNN cannot run it at these shapes, and its channels-last data has no generic kernel");
  }

  std::shared_ptr<const ConvPlan> make_plan(std::span<const Buffer> in, const Dims& out) const {
    const Dims& x = in[0].dims;
    const int sp = x.rank() - 2;
    if (sp < 1 || sp > 3 || out.rank() != x.rank() || out.volume() <= 0 || x.volume() <= 0) return nullptr;
    const i64 groups = p_.num_groups;
    const i64 K = out[1], C = x[1];
    if (groups < 1 || C % groups != 0 || K % groups != 0 || p_.kernel_size.rank() != sp) return nullptr;
    // The kernel's values are [K, C / groups, k...] whatever dims the constant was given.
    dnnl::memory::dims wd{K, C / groups};
    for (int i = 0; i < sp; ++i) wd.push_back(p_.kernel_size[i]);
    if (in[1].dims.volume() != Dims(std::span<const i64>(wd)).volume()) return nullptr;
    if (groups > 1) {
      wd[0] = K / groups;
      wd.insert(wd.begin(), groups);
    }
    for (const auto& op : ops_)
      if (op.kind == PostOp::kSum && !(in[op.operand].dims == out)) return nullptr;
    const Dims pre = graph::window_pre_padding(x, p_.kernel_size, p_.stride, p_.pre_padding, p_.post_padding, p_.dilation,
                                               p_.padding_mode, false);
    auto at = [](const Dims& d, int i, i64 fallback) { return i < d.rank() ? d[i] : fallback; };
    dnnl::memory::dims strides, dilates, pad_l, pad_r;
    for (int i = 0; i < sp; ++i) {
      const i64 k = p_.kernel_size[i], s = at(p_.stride, i, 1), d = at(p_.dilation, i, 1), l = pre[i];
      const i64 span = (k - 1) * d + 1;
      // oneDNN wants (in + l + r - span) / s + 1 == out; padding past the data reads zeros,
      // as the layer's own padding does.
      const i64 r = std::max<i64>(0, (out[2 + i] - 1) * s + span - x[2 + i] - l);
      if ((x[2 + i] + l + r - span) / s + 1 != out[2 + i] || s < 1 || d < 1 || l < 0) return nullptr;
      strides.push_back(s);
      dilates.push_back(d - 1);
      pad_l.push_back(l);
      pad_r.push_back(r);
    }
    auto plan = std::make_shared<ConvPlan>();
    const bool channels_last = src_cl_ || dst_cl_ || residual_cl_;
    plan->user_src = src_cl_ ? nhwc(to_dims(x)) : plain(to_dims(x));
    plan->user_dst = dst_cl_ ? nhwc(to_dims(out)) : plain(to_dims(out));
    plan->user_residual = residual_cl_ ? nhwc(to_dims(out)) : plain(to_dims(out));
    plan->user_weights = plain(wd);
    plan->bias = plain({K});
    auto any = [](const dnnl::memory::dims& d) { return dnnl::memory::desc(d, dt::f32, tag::any); };
    auto attr = attributes(ops_, {});
    dnnl::memory::desc bias = has_bias_ ? plan->bias : dnnl::memory::desc();
    auto desc = dnnl::convolution_forward::desc(dnnl::prop_kind::forward_inference, dnnl::algorithm::convolution_direct,
                                                src_cl_ ? plan->user_src : any(to_dims(x)), any(wd), bias,
                                                dst_cl_ ? plan->user_dst : any(to_dims(out)), strides, dilates, pad_l, pad_r);
    plan->pd = dnnl::convolution_forward::primitive_desc(desc, attr, cpu_engine());
    if (has_ref_impl(plan->pd) && !channels_last) return nullptr;  // slower than the generic kernel
    plan->prim = dnnl::convolution_forward(plan->pd);
    std::size_t offset = 0;
    if (plan->pd.src_desc() != plan->user_src) {
      plan->to_src.emplace(plan->user_src, plan->pd.src_desc());
      plan->src_offset = offset;
      offset += align_up(plan->pd.src_desc().get_size());
    }
    if (plan->pd.dst_desc() != plan->user_dst) {
      plan->from_dst.emplace(plan->pd.dst_desc(), plan->user_dst);
      plan->dst_offset = offset;
      offset += align_up(plan->pd.dst_desc().get_size());
    }
    if (plan->pd.dst_desc() != plan->user_residual)
      plan->residual_to_dst.emplace(plan->user_residual, plan->pd.dst_desc());
    if (weights_constant_) {
      plan->packed = std::make_unique<PackedWeights>();
      plan->packed->user = plan->user_weights;
      plan->packed->packed = plan->pd.weights_desc();
    } else if (plan->pd.weights_desc() != plan->user_weights) {
      plan->to_weights.emplace(plan->user_weights, plan->pd.weights_desc());
      plan->weights_offset = offset;
      offset += align_up(plan->pd.weights_desc().get_size());
    }
    plan->workspace = offset;
    return plan;
  }

  // A plan the generic kernels cannot stand in for (channels-last data): its absence is an error.
  std::shared_ptr<const ConvPlan> required(std::shared_ptr<const ConvPlan> plan, const char* why) const {
    if (plan || !(src_cl_ || dst_cl_ || residual_cl_)) return plan;
    throw InvalidArgument("[cpu] convolution '" + name_ + "': " + why);
  }

  std::string name_;
  ConvolutionParams p_;
  bool weights_constant_;
  bool has_bias_;
  std::vector<PostOp> ops_;
  bool src_cl_, dst_cl_, residual_cl_ = false;
  PlanCache<ConvPlan> cache_;
};

bool all_f32(const graph::Graph& g, const graph::Node& n) {
  for (int v : n.inputs)
    if (!is_f32(g, v)) return false;
  return n.main_desc.type == DataType::kFLOAT;
}

}  // namespace

bool applicable(const graph::Graph& g, const graph::Node& n) {
  if (!all_f32(g, n)) return false;
  if (const auto* mm = std::get_if<MatrixMultiplyParams>(&n.params))
    return mm->op0 != MO::kVECTOR && mm->op1 != MO::kVECTOR;
  if (const auto* c = std::get_if<ConvolutionParams>(&n.params)) {
    const int sp = g.values[static_cast<std::size_t>(n.inputs[0])].desc.dims.rank() - 2;
    return sp >= 1 && sp <= 3 && c->num_groups >= 1;
  }
  return false;
}

namespace {

// Whether node c reads value v (of dims d) only where a oneDNN convolution takes channels-last
// data: as its data input, or as the residual of a fused sum post-op of the same dims.
bool conv_takes_channels_last(const graph::Graph& g, const graph::Node& c, int v, const Dims& d) {
  if (!std::holds_alternative<ConvolutionParams>(c.params) || !applicable(g, c)) return false;
  if (c.inputs[1] == v || (c.inputs.size() > 2 && c.inputs[2] == v)) return false;
  auto ops = fusable_prefix(g, c, true);
  for (std::size_t i = 0; i < c.epilogue.size(); ++i) {
    if (c.epilogue[i].operand != v) continue;
    const bool fused_sum = i < ops.size() && ops[i].kind == PostOp::kSum;
    if (!fused_sum || !(d == c.main_desc.dims)) return false;
  }
  return true;
}

// Whether every reader of node n's output (there is one at least) passes `ok`, and the output is
// an internal value of 4 or more dims.
template <class Ok>
bool readers_all(const graph::Graph& g, const graph::Node& n, Ok&& ok) {
  const auto& out = g.values[static_cast<std::size_t>(n.output)];
  if (out.is_output || out.desc.dims.rank() < 4) return false;
  bool read = false;
  for (const auto& c : g.nodes) {
    auto all = c.all_inputs();
    if (std::find(all.begin(), all.end(), n.output) == all.end()) continue;
    if (!ok(c, out.desc.dims)) return false;
    read = true;
  }
  return read;
}

// A float32 pooling without epilogue whose output only oneDNN convolutions read (as above).
bool pooling_readers_take_channels_last(const graph::Graph& g, const graph::Node& n) {
  if (!std::holds_alternative<PoolingParams>(n.params) || !n.epilogue.empty()) return false;
  if (!is_f32(g, n.inputs[0]) || n.main_desc.type != DataType::kFLOAT) return false;
  return readers_all(g, n, [&](const graph::Node& c, const Dims& d) { return conv_takes_channels_last(g, c, n.output, d); });
}

}  // namespace

bool output_channels_last(const graph::Graph& g, const graph::Node& n) {
  if (!std::holds_alternative<ConvolutionParams>(n.params) || !applicable(g, n)) return false;
  if (fusable_prefix(g, n, true).size() != n.epilogue.size()) return false;  // generic passes would read it
  return readers_all(g, n, [&](const graph::Node& c, const Dims& d) {
    if (std::holds_alternative<PoolingParams>(c.params)) return pooling_readers_take_channels_last(g, c);
    return conv_takes_channels_last(g, c, n.output, d);
  });
}

bool pooling_channels_last(const graph::Graph& g, const graph::Node& n) {
  if (!pooling_readers_take_channels_last(g, n)) return false;
  const int p = g.values[static_cast<std::size_t>(n.inputs[0])].producer;
  return p >= 0 && output_channels_last(g, g.nodes[static_cast<std::size_t>(p)]);
}

std::string pooling_channels_last_refusal(const graph::Graph& g, const graph::Node& n) {
  if (!graph::channels_last_value(g, n.inputs[0])) return "its input is not stored channels-last";
  if (!pooling_readers_take_channels_last(g, n)) return "not every reader of its output takes it channels-last";
  return "";
}

std::unique_ptr<Accelerated> make(const graph::Graph& g, const graph::Node& n) {
  if (!applicable(g, n)) return nullptr;  // an engine file's tactic is not trusted to fit the node
  if (n.tactic.kernel == kMatmulTactic && std::holds_alternative<MatrixMultiplyParams>(n.params))
    return std::make_unique<Matmul>(g, n);
  if (n.tactic.kernel == kConvTactic && std::holds_alternative<ConvolutionParams>(n.params))
    return std::make_unique<Convolution>(g, n);
  return nullptr;
}

std::string version() {
  const dnnl_version_t* v = dnnl_version();
  return std::to_string(v->major) + "." + std::to_string(v->minor) + "." + std::to_string(v->patch);
}

}  // namespace tensoracle::cpu::onednn

#endif  // TENSORACLE_HAVE_ONEDNN
