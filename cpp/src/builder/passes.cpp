#include "builder/passes.h"

#include <algorithm>
#include <cmath>
#include <limits>
#include <numeric>
#include <optional>
#include <tuple>
#include <utility>

#include "core/numeric.h"
#include "graph/ops.h"

namespace tensoracle::builder {

using graph::Graph;
using graph::Node;

PassLog dead_code(Graph& g) {
  PassLog log{"dead_code", {}};
  std::vector<bool> live_value(g.values.size(), false);
  for (int v : g.outputs) live_value[static_cast<std::size_t>(v)] = true;
  std::vector<bool> dead(g.nodes.size(), true);
  for (std::size_t i = g.nodes.size(); i-- > 0;) {
    const Node& n = g.nodes[i];
    const auto outs = n.outputs();  // a node runs while any of its outputs is read
    if (std::none_of(outs.begin(), outs.end(), [&](int v) { return live_value[static_cast<std::size_t>(v)]; })) continue;
    dead[i] = false;
    for (int v : n.all_inputs()) live_value[static_cast<std::size_t>(v)] = true;
  }
  for (std::size_t i = 0; i < g.nodes.size(); ++i)
    if (dead[i]) log.changes.push_back("removed node '" + g.nodes[i].name + "' (its result reaches no output)");
  std::size_t before = g.values.size();
  graph::compact(g, dead);
  if (g.values.size() + log.changes.size() < before)
    log.changes.push_back("removed " + std::to_string(before - g.values.size() - log.changes.size()) +
                          " unused constants");
  return log;
}

PassLog constant_fold(Graph& g, const ConstantEvaluator& evaluate, std::uint64_t max_bytes) {
  PassLog log{"constant_fold", {}};
  std::vector<bool> folded(g.nodes.size(), false);
  for (std::size_t i = 0; i < g.nodes.size(); ++i) {
    Node& n = g.nodes[i];
    // Dequantize stays (quantized weights stay quantized); a plugin runs only where the engine
    // runs (it may have no CPU implementation, and its fields, not its result, are what engines
    // store).
    // A node of several outputs (topk) stays too: the evaluator gives one.
    if (n.type() == LayerType::kDEQUANTIZE || n.type() == LayerType::kPLUGIN || !n.extra_outputs.empty()) continue;
    auto ins = n.all_inputs();
    bool all_const = std::all_of(ins.begin(), ins.end(), [&](int v) {
      return g.values[static_cast<std::size_t>(v)].constant.has_value();
    });
    auto& out = g.values[static_cast<std::size_t>(n.output)];
    auto volume = out.desc.dims.volume();
    // A network output stays computed: outputs are written by a node (a constant has none).
    if (!all_const || out.is_output || volume < 0 || static_cast<std::uint64_t>(volume) * element_size(out.desc.type) > max_bytes)
      continue;
    out.constant = evaluate(g, n);
    out.producer = -1;
    folded[i] = true;
    log.changes.push_back("folded node '" + n.name + "' into a constant " + out.desc.dims.str() + " " +
                          std::string(type_name(out.desc.type)));
  }
  graph::compact(g, folded);
  return log;
}

namespace {

// The dequantize node producing value `v` with a per-tensor float32 constant scale, or null.
const Node* per_tensor_dequantize(const Graph& g, int v) {
  const int p = g.values[static_cast<std::size_t>(v)].producer;
  if (p < 0) return nullptr;
  const Node& dq = g.nodes[static_cast<std::size_t>(p)];
  if (dq.type() != LayerType::kDEQUANTIZE || !dq.epilogue.empty() || dq.quantized()) return nullptr;
  const auto& scale = g.values[static_cast<std::size_t>(dq.inputs[1])];
  if (!scale.constant || scale.desc.type != DataType::kFLOAT || scale.desc.dims.volume() != 1) return nullptr;
  return &dq;
}

// A transposed copy of a rank-2 constant (any element size).
Weights transposed(const Weights& w, const Dims& dims) {
  const auto rows = static_cast<std::size_t>(dims[0]), cols = static_cast<std::size_t>(dims[1]);
  const std::size_t es = element_size(w.type());
  std::vector<std::byte> out(rows * cols * es);
  const auto* src = static_cast<const std::byte*>(w.values());
  for (std::size_t r = 0; r < rows; ++r)
    for (std::size_t c = 0; c < cols; ++c)
      std::copy_n(src + (r * cols + c) * es, es, out.data() + (c * rows + r) * es);
  return Weights::copy_of(w.type(), out.data(), static_cast<std::int64_t>(rows * cols));
}

}  // namespace

PassLog fold_qdq(Graph& g) {
  PassLog log{"fold_qdq", {}};
  for (std::size_t i = 0; i < g.nodes.size(); ++i) {
    Node& n = g.nodes[i];
    const auto* mm = std::get_if<MatrixMultiplyParams>(&n.params);
    if (!mm || n.quantized() || !n.epilogue.empty() || mm->op0 != MatrixOperation::kNONE ||
        mm->op1 == MatrixOperation::kVECTOR)
      continue;
    const Node* da = per_tensor_dequantize(g, n.inputs[0]);
    const Node* db = per_tensor_dequantize(g, n.inputs[1]);
    if (!da || !db) continue;
    int qa = da->inputs[0], qb = db->inputs[0];
    const DataType qt = g.values[static_cast<std::size_t>(qa)].desc.type;
    if (g.values[static_cast<std::size_t>(qb)].desc.type != qt) continue;
    if (g.values[static_cast<std::size_t>(qa)].desc.dims.rank() < 2) continue;
    MatrixMultiplyParams p = *mm;
    if (p.op1 == MatrixOperation::kNONE) {
      const auto& b = g.values[static_cast<std::size_t>(qb)];
      if (!b.constant || b.desc.dims.rank() != 2 || !b.desc.dims.all_known()) continue;
      graph::Value t;
      t.name = b.name + ".transposed";
      t.desc = {b.desc.type, Dims{b.desc.dims[1], b.desc.dims[0]}};
      t.constant = transposed(*b.constant, b.desc.dims);
      qb = static_cast<int>(g.values.size());
      g.values.push_back(std::move(t));
      p.op1 = MatrixOperation::kTRANSPOSE;
    }
    const std::string names = "'" + da->name + "' and '" + db->name + "'";
    n.folded_dequantize = {da->name, db->name};
    n.inputs = {qa, qb, da->inputs[1], db->inputs[1]};
    n.params = p;
    log.changes.push_back("folded dequantize " + names + " into node '" + n.name + "': an " +
                          std::string(type_name(qt)) + " matrix multiply");
  }
  return log;
}

namespace {

bool is_pointwise(const LayerParams& p) {
  return std::holds_alternative<ActivationParams>(p) || std::holds_alternative<CastParams>(p) ||
         std::holds_alternative<ElementWiseParams>(p) || std::holds_alternative<QuantizeParams>(p);
}

// A quantize fuses only with a per-tensor scale (one constant value): the epilogue applies it
// to every element alike.
bool per_tensor_scale(const Graph& g, int v) {
  const auto& s = g.values[static_cast<std::size_t>(v)];
  return s.constant.has_value() && s.desc.dims.volume() == 1;
}

// The other operand of a binary pointwise op must broadcast into `mine`, so that the result
// keeps `mine`'s dims: each of its dims is 1 or equal to mine. Two dynamic (-1) dims count as
// equal — the residual add of a dynamic batch — and the runtime re-checks actual shapes.
bool broadcasts_into(const Dims& other, const Dims& mine) {
  if (other.rank() != mine.rank()) return false;
  for (int i = 0; i < mine.rank(); ++i) {
    if (other[i] == 1 || other[i] == mine[i]) continue;
    return false;
  }
  return true;
}

}  // namespace

PassLog fuse_pointwise(Graph& g, const FusionPolicy& can_fuse) {
  PassLog log{"fuse_pointwise", {}};
  std::vector<bool> absorbed(g.nodes.size(), false);
  bool changed = true;
  while (changed) {
    changed = false;
    auto consumers = g.consumers();
    for (std::size_t pi = 0; pi < g.nodes.size() && !changed; ++pi) {
      if (absorbed[pi]) continue;
      Node& prod = g.nodes[pi];
      if (!prod.extra_outputs.empty()) continue;  // several outputs: no epilogue
      // A shape node's dims are read on the host (graph::infer_shapes), not run: nothing fuses
      // into it (what reads the shape runs as its own node, evaluated on the host too).
      if (std::holds_alternative<ShapeParams>(prod.params)) continue;
      int v = prod.output;
      const auto& val = g.values[static_cast<std::size_t>(v)];
      const auto& readers = consumers[static_cast<std::size_t>(v)];
      if (val.is_output || readers.size() != 1) continue;
      auto ci = static_cast<std::size_t>(readers[0]);
      Node& cons = g.nodes[ci];
      if (absorbed[ci] || !cons.epilogue.empty() || !is_pointwise(cons.params)) continue;
      graph::EpilogueOp op;
      op.layer = cons.name;
      op.params = cons.params;
      op.desc = g.values[static_cast<std::size_t>(cons.output)].desc;
      if (std::holds_alternative<QuantizeParams>(cons.params)) {
        if (cons.inputs[0] != v || !per_tensor_scale(g, cons.inputs[1])) continue;
        op.operand = cons.inputs[1];
      } else if (cons.inputs.size() == 2) {
        if (cons.inputs[0] == v && cons.inputs[1] == v) continue;  // x OP x: keep separate
        op.operand_first = cons.inputs[1] == v;
        op.operand = op.operand_first ? cons.inputs[0] : cons.inputs[1];
        if (!broadcasts_into(g.values[static_cast<std::size_t>(op.operand)].desc.dims, val.desc.dims)) continue;
        if (op.desc.dims != val.desc.dims) continue;
      }
      if (!can_fuse(g, prod, op)) continue;
      // The consumer must come after its extra operand's producer; moving its work into the
      // producer is legal only if that operand exists by then.
      if (op.operand >= 0) {
        int op_prod = g.values[static_cast<std::size_t>(op.operand)].producer;
        if (op_prod >= static_cast<int>(pi)) continue;
      }
      prod.epilogue.push_back(op);
      g.values[static_cast<std::size_t>(cons.output)].producer = static_cast<int>(pi);
      prod.output = cons.output;
      absorbed[ci] = true;
      log.changes.push_back("fused '" + cons.name + "' (" + std::string(layer_type_name(cons.type())) +
                            ") into node '" + prod.name + "'");
      changed = true;
    }
  }
  // Absorbed nodes go; so do the intermediate values they read, which nothing references now.
  graph::compact(g, absorbed);
  return log;
}


namespace {

// The node producing value `v` when `v` has exactly one reader and is no network output (a
// rewrite may then drop it), else null.
Node* sole_producer(Graph& g, const std::vector<std::vector<int>>& readers, int v) {
  const auto& val = g.values[static_cast<std::size_t>(v)];
  if (val.producer < 0 || val.is_output || readers[static_cast<std::size_t>(v)].size() != 1) return nullptr;
  Node& n = g.nodes[static_cast<std::size_t>(val.producer)];
  if (!n.epilogue.empty() || !n.extra_outputs.empty() || n.quantized()) return nullptr;
  return &n;
}

// The value of a one-element float constant, or nothing.
std::optional<double> scalar_constant(const Graph& g, int v) {
  const auto& val = g.values[static_cast<std::size_t>(v)];
  if (!val.constant || val.desc.dims.volume() != 1) return std::nullopt;
  const void* p = val.constant->values();
  switch (val.desc.type) {
    case DataType::kFLOAT: return static_cast<double>(*static_cast<const float*>(p));
    case DataType::kHALF: return static_cast<double>(core::half_to_float(*static_cast<const std::uint16_t*>(p)));
    case DataType::kBF16: return static_cast<double>(core::bf16_to_float(*static_cast<const std::uint16_t*>(p)));
    default: return std::nullopt;
  }
}

bool is_float_desc(const graph::TensorDesc& d) {
  return d.type == DataType::kFLOAT || d.type == DataType::kHALF || d.type == DataType::kBF16;
}

}  // namespace

PassLog fuse_gelu(Graph& g) {
  PassLog log{"fuse_gelu", {}};
  const auto readers = g.consumers();
  std::vector<bool> removed(g.nodes.size(), false);
  auto near = [](std::optional<double> v, double want) { return v && std::fabs(*v - want) <= 1e-3 * std::fabs(want); };
  // The other operand of a binary elementwise node `n` of operation `op` whose one input is `v`.
  auto other = [&](const Node& n, ElementWiseOperation op, int v) -> int {
    const auto* ew = std::get_if<ElementWiseParams>(&n.params);
    if (!ew || ew->op != op || n.inputs.size() != 2) return -1;
    if (n.inputs[0] == v) return n.inputs[1];
    if (n.inputs[1] == v) return n.inputs[0];
    return -1;
  };
  // The single reader of value v (a node without epilogue), or null.
  auto sole_reader = [&](int v) -> Node* {
    const auto& r = readers[static_cast<std::size_t>(v)];
    if (r.size() != 1 || g.values[static_cast<std::size_t>(v)].is_output) return nullptr;
    Node& n = g.nodes[static_cast<std::size_t>(r[0])];
    return n.epilogue.empty() && n.extra_outputs.empty() && !n.quantized() ? &n : nullptr;
  };
  for (std::size_t i = 0; i < g.nodes.size(); ++i) {
    Node& erf = g.nodes[i];
    const auto* u = std::get_if<UnaryParams>(&erf.params);
    if (removed[i] || !u || u->op != UnaryOperation::kERF || !erf.epilogue.empty()) continue;
    // d = x / sqrt(2) or x * (1 / sqrt(2))
    Node* scale = sole_producer(g, readers, erf.inputs[0]);
    if (!scale) continue;
    const auto* sew = std::get_if<ElementWiseParams>(&scale->params);
    if (!sew || scale->inputs.size() != 2) continue;
    int x = -1;
    if (sew->op == ElementWiseOperation::kDIV && near(scalar_constant(g, scale->inputs[1]), std::sqrt(2.0))) x = scale->inputs[0];
    if (sew->op == ElementWiseOperation::kPROD) {
      if (near(scalar_constant(g, scale->inputs[1]), std::sqrt(0.5))) x = scale->inputs[0];
      else if (near(scalar_constant(g, scale->inputs[0]), std::sqrt(0.5))) x = scale->inputs[1];
    }
    if (x < 0 || !is_float_desc(g.values[static_cast<std::size_t>(x)].desc)) continue;
    // a = erf + 1
    Node* add = sole_reader(erf.output);
    if (!add) continue;
    const int one = other(*add, ElementWiseOperation::kSUM, erf.output);
    if (one < 0 || !near(scalar_constant(g, one), 1.0)) continue;
    // then * x and * 0.5, in either order
    Node* first = sole_reader(add->output);
    if (!first) continue;
    const int f = other(*first, ElementWiseOperation::kPROD, add->output);
    Node* second = f >= 0 ? sole_reader(first->output) : nullptr;
    if (!second) continue;
    const int s2 = other(*second, ElementWiseOperation::kPROD, first->output);
    const bool x_then_half = f == x && near(scalar_constant(g, s2), 0.5);
    const bool half_then_x = s2 == x && near(scalar_constant(g, f), 0.5);
    if (!x_then_half && !half_then_x) continue;
    const auto& out = g.values[static_cast<std::size_t>(second->output)].desc;
    if (!(out == g.values[static_cast<std::size_t>(x)].desc)) continue;  // no broadcast beyond x
    for (Node* n : {scale, static_cast<Node*>(&erf), add, first}) {
      removed[static_cast<std::size_t>(n - g.nodes.data())] = true;
      second->absorbed.push_back(n->name);
    }
    second->params = ActivationParams{ActivationType::kGELU_ERF, 0.f, 0.f};
    second->inputs = {x};
    second->main_desc = out;
    log.changes.push_back("fused '" + scale->name + "' .. '" + second->name + "' into a GELU (erf)");
  }
  graph::compact(g, removed);
  return log;
}

PassLog fuse_attention(Graph& g, const AttentionPolicy& accept) {
  PassLog log{"fuse_attention", {}};
  const auto readers = g.consumers();
  std::vector<bool> removed(g.nodes.size(), false);
  auto index_of = [&](const Node* n) { return static_cast<std::size_t>(n - g.nodes.data()); };
  for (std::size_t i = 0; i < g.nodes.size(); ++i) {
    Node& pv = g.nodes[i];
    const auto* pv_mm = std::get_if<MatrixMultiplyParams>(&pv.params);
    if (removed[i] || !pv_mm || pv_mm->op0 != MatrixOperation::kNONE || pv_mm->op1 != MatrixOperation::kNONE ||
        pv.quantized() || !pv.epilogue.empty())
      continue;
    // P = softmax(S) over the last of four dims
    Node* softmax = sole_producer(g, readers, pv.inputs[0]);
    if (!softmax || softmax->type() != LayerType::kSOFTMAX) continue;
    const graph::TensorDesc& scores = g.values[static_cast<std::size_t>(softmax->output)].desc;
    if (scores.dims.rank() != 4 || graph::softmax_axis(std::get<SoftmaxParams>(softmax->params), 4) != 3) continue;
    std::vector<Node*> chain = {softmax};
    // S = ((Q · Kᵀ) * c + M), the scaling and the mask each optional, in either order
    int cur = softmax->inputs[0], mask = -1;
    double scale = 1.0;
    bool scaled = false, ok = true;
    Node* qk = nullptr;
    for (int step = 0; step < 3 && ok && !qk; ++step) {
      Node* n = sole_producer(g, readers, cur);
      if (!n) ok = false;
      else if (const auto* mm = std::get_if<MatrixMultiplyParams>(&n->params)) {
        ok = mm->op0 == MatrixOperation::kNONE && mm->op1 == MatrixOperation::kTRANSPOSE;
        qk = n;
      } else if (const auto* ew = std::get_if<ElementWiseParams>(&n->params)) {
        const int a = n->inputs[0], b = n->inputs[1];
        const auto sa = scalar_constant(g, a), sb = scalar_constant(g, b);
        if (ew->op == ElementWiseOperation::kPROD && !scaled && (sa || sb)) {
          scale *= sb ? *sb : *sa;
          cur = sb ? a : b;
          scaled = true;
        } else if (ew->op == ElementWiseOperation::kDIV && !scaled && sb && *sb != 0.0) {
          scale /= *sb;
          cur = a;
          scaled = true;
        } else if (ew->op == ElementWiseOperation::kSUM && mask < 0 && !sa && !sb) {
          // the scores are the operand of the scores' dims that a product or a scaling produced
          auto continues = [&](int v) {
            const int p = g.values[static_cast<std::size_t>(v)].producer;
            return p >= 0 && g.values[static_cast<std::size_t>(v)].desc.dims == scores.dims &&
                   (g.nodes[static_cast<std::size_t>(p)].type() == LayerType::kMATRIX_MULTIPLY ||
                    g.nodes[static_cast<std::size_t>(p)].type() == LayerType::kELEMENTWISE);
          };
          if (continues(a)) std::tie(cur, mask) = std::pair{a, b};
          else if (continues(b)) std::tie(cur, mask) = std::pair{b, a};
          else ok = false;
        } else {
          ok = false;
        }
        if (ok) chain.push_back(n);
      } else {
        ok = false;
      }
    }
    if (!ok || !qk) continue;
    chain.push_back(qk);
    const int q = qk->inputs[0], k = qk->inputs[1], v = pv.inputs[1];
    const auto& qd = g.values[static_cast<std::size_t>(q)].desc;
    const auto& kd = g.values[static_cast<std::size_t>(k)].desc;
    const auto& vd = g.values[static_cast<std::size_t>(v)].desc;
    if (!is_float_desc(qd) || kd.type != qd.type || vd.type != qd.type || scores.type != qd.type) continue;
    if (qd.dims.rank() != 4 || kd.dims.rank() != 4 || !(kd.dims == vd.dims)) continue;
    if (qd.dims[0] != kd.dims[0] || qd.dims[3] != kd.dims[3]) continue;  // no batch broadcast; one head size
    if (!(qd.dims[1] == kd.dims[1] || kd.dims[1] == 1)) continue;
    if (mask >= 0) {
      const auto& md = g.values[static_cast<std::size_t>(mask)].desc;
      if (md.type != qd.type || md.dims.rank() != 4) continue;
      if (const int mp = g.values[static_cast<std::size_t>(mask)].producer; mp >= static_cast<int>(i)) continue;
    }
    if (!std::isfinite(scale) || std::fabs(scale) > std::numeric_limits<float>::max()) continue;
    AttentionParams p;
    p.scale = static_cast<float>(scale);
    Node candidate;
    candidate.name = pv.name;
    candidate.params = p;
    candidate.inputs = {q, k, v};
    if (mask >= 0) candidate.inputs.push_back(mask);
    candidate.output = pv.output;
    candidate.main_desc = pv.main_desc;
    if (!accept(g, candidate)) continue;
    std::string names;
    for (auto it = chain.rbegin(); it != chain.rend(); ++it) {
      removed[index_of(*it)] = true;
      pv.absorbed.push_back((*it)->name);
      names += "'" + (*it)->name + "', ";
    }
    pv.params = p;
    pv.inputs = {q, k, v};
    if (mask >= 0) pv.inputs.push_back(mask);
    log.changes.push_back("fused " + names + "'" + pv.name + "' into one attention node '" + pv.name + "' (scale " +
                          std::to_string(p.scale) + (mask >= 0 ? ", mask '" + g.values[static_cast<std::size_t>(mask)].name + "'" : "") + ")");
  }
  graph::compact(g, removed);
  return log;
}

}  // namespace tensoracle::builder
