#include "builder/passes.h"

#include <algorithm>
#include <array>
#include <cmath>
#include <limits>
#include <numeric>
#include <optional>
#include <tuple>
#include <utility>

#include "core/numeric.h"
#include "tensoracle/errors.h"
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

namespace {

// The dims a Gather (axis 0, constant indices) or a static Slice picks from a Shape node's
// output, as a constant of the node's type, when every picked dim is known at build time (the
// others may be unknown: an exported model reads the head size from a query whose batch and
// sequence are dynamic). Otherwise nothing.
std::optional<Weights> known_shape_entries(const Graph& g, const Node& n) {
  const auto& out = g.values[static_cast<std::size_t>(n.output)];
  if (!n.epilogue.empty() || n.inputs.empty() || out.is_output || out.desc.dims.rank() > 1 ||
      (out.desc.type != DataType::kINT64 && out.desc.type != DataType::kINT32))
    return std::nullopt;
  const int sp = g.values[static_cast<std::size_t>(n.inputs[0])].producer;
  if (sp < 0) return std::nullopt;
  const Node& shape = g.nodes[static_cast<std::size_t>(sp)];
  if (shape.type() != LayerType::kSHAPE || !shape.epilogue.empty()) return std::nullopt;
  const Dims& d = g.values[static_cast<std::size_t>(shape.inputs[0])].desc.dims;
  const auto rank = static_cast<std::int64_t>(d.rank());
  std::vector<std::int64_t> picked;
  if (const auto* gp = std::get_if<GatherParams>(&n.params)) {
    const auto& idx = g.values[static_cast<std::size_t>(n.inputs[1])];
    if (gp->axis != 0 || gp->mode != GatherMode::kDEFAULT || !idx.constant || idx.desc.dims.rank() > 1) return std::nullopt;
    for (std::int64_t k = 0; k < idx.constant->count(); ++k) {
      std::int64_t i = idx.desc.type == DataType::kINT64 ? static_cast<const std::int64_t*>(idx.constant->values())[k]
                       : idx.desc.type == DataType::kINT32 ? static_cast<const std::int32_t*>(idx.constant->values())[k]
                                                           : -rank - 1;
      if (i < 0) i += rank;
      if (i < 0 || i >= rank) return std::nullopt;
      picked.push_back(d[static_cast<int>(i)]);
    }
  } else if (const auto* sl = std::get_if<SliceParams>(&n.params)) {
    if (sl->tensor_inputs != 0 || sl->mode != SampleMode::kSTRICT_BOUNDS || sl->start.rank() != 1 || n.inputs.size() != 1)
      return std::nullopt;
    for (std::int64_t k = 0; k < sl->size[0]; ++k) {
      const std::int64_t i = sl->start[0] + k * sl->stride[0];
      if (i < 0 || i >= rank) return std::nullopt;
      picked.push_back(d[static_cast<int>(i)]);
    }
  } else {
    return std::nullopt;
  }
  if (static_cast<std::int64_t>(picked.size()) != std::max<std::int64_t>(out.desc.dims.volume(), 0)) return std::nullopt;
  for (auto v : picked)
    if (v < 0) return std::nullopt;
  if (out.desc.type == DataType::kINT64)
    return Weights::copy_of(DataType::kINT64, picked.data(), static_cast<std::int64_t>(picked.size()));
  std::vector<std::int32_t> narrow;
  for (auto v : picked) {
    if (v > std::numeric_limits<std::int32_t>::max()) return std::nullopt;
    narrow.push_back(static_cast<std::int32_t>(v));
  }
  return Weights::copy_of(DataType::kINT32, narrow.data(), static_cast<std::int64_t>(narrow.size()));
}

}  // namespace

PassLog constant_fold(Graph& g, const ConstantEvaluator& evaluate, std::uint64_t max_bytes) {
  PassLog log{"constant_fold", {}};
  std::vector<bool> folded(g.nodes.size(), false);
  for (std::size_t i = 0; i < g.nodes.size(); ++i) {
    Node& n = g.nodes[i];
    if (auto w = known_shape_entries(g, n)) {
      auto& out = g.values[static_cast<std::size_t>(n.output)];
      out.constant = std::move(*w);
      out.producer = -1;
      folded[i] = true;
      log.changes.push_back("folded node '" + n.name + "' into a constant " + out.desc.dims.str() +
                            ": the dims it reads are known");
      continue;
    }
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


// ---- shuffle chains around attention (the sequence-major layout) -------------------------------

// One step of a chain of shuffles: a transpose (output dim i is input dim perm[i]) or a reshape.
struct ShuffleStep {
  bool reshape = false;
  std::array<int, Dims::kMaxRank> perm{};
  Dims from, to;
  // reshape: whether dim i of `to` is provably dim i of `from` (a placeholder 0, or both known
  // and equal, or the one left when the rest are)
  std::array<bool, Dims::kMaxRank> kept{};
};

bool identity_perm(const std::array<int, Dims::kMaxRank>& p, int rank) {
  for (int i = 0; i < rank; ++i)
    if (p[static_cast<std::size_t>(i)] != i) return false;
  return true;
}

Dims permuted(const Dims& d, const std::array<int, Dims::kMaxRank>& p) {
  Dims r = d;
  for (int i = 0; i < d.rank(); ++i) r[i] = d[p[static_cast<std::size_t>(i)]];
  return r;
}

// Appends the steps of shuffle node `n` (one input: no run-time reshape dims) to `steps`, the
// transposes of consecutive steps composed and reshapes that change nothing left out. False
// when `n` is not such a shuffle.
bool append_shuffle_steps(const Graph& g, const Node& n, std::vector<ShuffleStep>& steps) {
  const auto* sp = std::get_if<ShuffleParams>(&n.params);
  if (!sp || n.inputs.size() != 1 || !n.epilogue.empty()) return false;
  const Dims& in = g.values[static_cast<std::size_t>(n.inputs[0])].desc.dims;
  const Dims& out = n.main_desc.dims;
  Dims cur = in;
  auto transpose = [&](const Permutation& perm, int rank) {
    std::array<int, Dims::kMaxRank> p{};
    for (int i = 0; i < rank; ++i) p[static_cast<std::size_t>(i)] = perm.order[static_cast<std::size_t>(i)];
    if (identity_perm(p, rank)) return;
    const Dims next = permuted(cur, p);
    if (!steps.empty() && !steps.back().reshape) {  // compose with the transpose before
      ShuffleStep& last = steps.back();
      std::array<int, Dims::kMaxRank> c{};
      for (int i = 0; i < rank; ++i) c[static_cast<std::size_t>(i)] = last.perm[static_cast<std::size_t>(p[static_cast<std::size_t>(i)])];
      last.perm = c;
      last.to = next;
      if (identity_perm(c, rank)) steps.pop_back();
    } else {
      ShuffleStep s;
      s.perm = p;
      s.from = cur;
      s.to = next;
      steps.push_back(s);
    }
    cur = next;
  };
  transpose(sp->first_transpose, in.rank());
  if (sp->reshape_dims) {
    const int r = out.rank();
    Dims target = out;  // the reshaped dims: the output before the second transpose
    for (int i = 0; i < r; ++i) target[sp->second_transpose.order[static_cast<std::size_t>(i)]] = out[i];
    ShuffleStep s;
    s.reshape = true;
    s.from = cur;
    s.to = target;
    const Dims& spec = *sp->reshape_dims;
    int unknown = -1, missing = 0;
    for (int i = 0; i < r; ++i) {
      const bool placeholder = sp->zero_is_placeholder && i < spec.rank() && spec[i] == 0 && i < cur.rank();
      s.kept[static_cast<std::size_t>(i)] = placeholder || (i < cur.rank() && cur[i] >= 0 && cur[i] == target[i]);
      if (!s.kept[static_cast<std::size_t>(i)]) ++missing, unknown = i;
    }
    // one dim not proven kept, the others kept and the ranks equal: the volume keeps it too
    if (missing == 1 && r == cur.rank()) s.kept[static_cast<std::size_t>(unknown)] = true, missing = 0;
    if (!(missing == 0 && r == cur.rank())) steps.push_back(s);
    cur = target;
  }
  transpose(sp->second_transpose, out.rank());
  return true;
}

// Whether `steps` turn a [B, S, W] tensor into [B, N, S, H] (W = N·H split, heads moved before
// the sequence; keys_last: [B, N, H, S], a transposed key). Sets heads and size.
bool splits_heads(const std::vector<ShuffleStep>& steps, bool keys_last, std::int64_t& heads, std::int64_t& size) {
  if (steps.size() != 2 || !steps[0].reshape || steps[1].reshape) return false;
  const ShuffleStep& r = steps[0];
  // the width splits exactly, so the reshape keeps B·S: one of B and S kept keeps the other
  if (r.from.rank() != 3 || r.to.rank() != 4 || !(r.kept[0] || r.kept[1])) return false;
  if (r.to[2] <= 0 || r.to[3] <= 0 || r.from[2] != r.to[2] * r.to[3]) return false;
  const std::array<int, Dims::kMaxRank> want{0, 2, keys_last ? 3 : 1, keys_last ? 1 : 3};
  if (!std::equal(want.begin(), want.begin() + 4, steps[1].perm.begin())) return false;
  heads = r.to[2];
  size = r.to[3];
  return true;
}

// Whether `steps` turn [B, N, S, H] into [B, S, N·H] (the heads moved back and merged).
bool merges_heads(const std::vector<ShuffleStep>& steps, std::int64_t heads, std::int64_t size) {
  if (steps.size() != 2 || steps[0].reshape || !steps[1].reshape) return false;
  const std::array<int, Dims::kMaxRank> want{0, 2, 1, 3};
  if (!std::equal(want.begin(), want.begin() + 4, steps[0].perm.begin())) return false;
  const ShuffleStep& r = steps[1];
  // the heads merge exactly, so the reshape keeps B·S: one of B and S kept keeps the other
  return r.from.rank() == 4 && r.to.rank() == 3 && (r.kept[0] || r.kept[1]) && r.from[2] == heads && r.from[3] == size &&
         r.to[2] == heads * size;
}

// Up to three shuffles producing value v, each read once, that split the heads of a [B, S, W]
// tensor (splits_heads). Returns the [B, S, W] value (or -1) and the shuffles in `nodes`.
int head_split_source(Graph& g, const std::vector<std::vector<int>>& readers, int v, bool keys_last, std::int64_t& heads,
                      std::int64_t& size, std::vector<Node*>& nodes) {
  std::vector<Node*> chain;
  int cur = v;
  for (int depth = 0; depth < 3; ++depth) {
    Node* n = sole_producer(g, readers, cur);
    if (!n || !std::holds_alternative<ShuffleParams>(n->params)) return -1;
    chain.push_back(n);
    cur = n->inputs[0];
    std::vector<ShuffleStep> steps;
    bool plain = true;
    for (auto it = chain.rbegin(); it != chain.rend() && plain; ++it) plain = append_shuffle_steps(g, **it, steps);
    if (!plain) return -1;
    if (splits_heads(steps, keys_last, heads, size)) {
      nodes = chain;
      return cur;
    }
  }
  return -1;
}

// Up to three shuffles after value v (each the sole reader of its input, none a network
// output but the last) that merge [B, N, S, H] into [B, S, N·H]. Returns the merged value (or
// -1) and the shuffles in `nodes`.
int head_merge_target(Graph& g, const std::vector<std::vector<int>>& readers, int v, std::int64_t heads,
                      std::int64_t size, std::vector<Node*>& nodes) {
  std::vector<Node*> chain;
  int cur = v;
  for (int depth = 0; depth < 3; ++depth) {
    const auto& r = readers[static_cast<std::size_t>(cur)];
    if (r.size() != 1 || g.values[static_cast<std::size_t>(cur)].is_output) return -1;
    Node& n = g.nodes[static_cast<std::size_t>(r[0])];
    if (!std::holds_alternative<ShuffleParams>(n.params) || !n.extra_outputs.empty()) return -1;
    chain.push_back(&n);
    cur = n.output;
    std::vector<ShuffleStep> steps;
    bool plain = true;
    for (Node* m : chain) plain = plain && append_shuffle_steps(g, *m, steps);
    if (!plain) return -1;
    if (merges_heads(steps, heads, size)) {
      nodes = chain;
      return cur;
    }
  }
  return -1;
}

// A product by a one-element float constant producing v, read once: its factor (the value it
// scales in `v`), else nothing.
std::optional<double> peel_scale(Graph& g, const std::vector<std::vector<int>>& readers, int& v, std::vector<Node*>& chain) {
  Node* n = sole_producer(g, readers, v);
  const auto* ew = n ? std::get_if<ElementWiseParams>(&n->params) : nullptr;
  if (!ew || ew->op != ElementWiseOperation::kPROD || n->inputs.size() != 2) return std::nullopt;
  const auto sa = scalar_constant(g, n->inputs[0]), sb = scalar_constant(g, n->inputs[1]);
  if (!sa == !sb) return std::nullopt;
  const int other = sb ? n->inputs[0] : n->inputs[1];
  if (!(g.values[static_cast<std::size_t>(other)].desc == g.values[static_cast<std::size_t>(v)].desc)) return std::nullopt;
  v = other;
  chain.push_back(n);
  return sb ? sb : sa;
}

// Where(IsNaN(P), 0, P) producing v (P read by those two alone): the guard exporters put after
// the softmax for rows whose every key is masked out (NaN there), which the attention kernels
// give as zeros by themselves. Returns the node producing P (its softmax, checked by the
// caller) and the guard's two nodes in `guard`, else null.
Node* nan_guarded_probs(Graph& g, const std::vector<std::vector<int>>& readers, int v, std::vector<Node*>& guard) {
  Node* where = sole_producer(g, readers, v);
  if (!where || !std::holds_alternative<SelectParams>(where->params) || where->inputs.size() != 3) return nullptr;
  const int cond = where->inputs[0], zero = where->inputs[1], p = where->inputs[2];
  Node* isnan = sole_producer(g, readers, cond);
  const auto* u = isnan ? std::get_if<UnaryParams>(&isnan->params) : nullptr;
  if (!u || u->op != UnaryOperation::kISNAN || isnan->inputs[0] != p) return nullptr;
  const auto z = scalar_constant(g, zero);
  const auto& probs = g.values[static_cast<std::size_t>(p)];
  if (!z || *z != 0.0 || probs.is_output || probs.producer < 0 || readers[static_cast<std::size_t>(p)].size() != 2) return nullptr;
  if (!(g.values[static_cast<std::size_t>(where->output)].desc == probs.desc)) return nullptr;
  Node& n = g.nodes[static_cast<std::size_t>(probs.producer)];
  if (!n.epilogue.empty() || !n.extra_outputs.empty() || n.quantized()) return nullptr;
  guard = {isnan, where};
  return &n;
}

// Whether constant value v is a causal mask over s x s scores (leading dims 1): 0 where the key
// is at or before the query, and a value no softmax weight survives above the diagonal (-inf, or
// at most float16's lowest for 16-bit types, -1e30 for float32: what models add there).
bool causal_constant(const Graph& g, int v, std::int64_t s) {
  const auto& val = g.values[static_cast<std::size_t>(v)];
  const Dims& d = val.desc.dims;
  if (!val.constant || d.rank() != 4 || d[0] != 1 || d[1] != 1 || d[2] != s || d[3] != s || s <= 0 || s > 65536)
    return false;
  const double cut = val.desc.type == DataType::kFLOAT ? -1e30 : -65504.0;
  const void* p = val.constant->values();
  auto at = [&](std::int64_t i) -> double {
    switch (val.desc.type) {
      case DataType::kFLOAT: return static_cast<const float*>(p)[i];
      case DataType::kHALF: return core::half_to_float(static_cast<const std::uint16_t*>(p)[i]);
      case DataType::kBF16: return core::bf16_to_float(static_cast<const std::uint16_t*>(p)[i]);
      default: return std::numeric_limits<double>::quiet_NaN();
    }
  };
  for (std::int64_t i = 0; i < s; ++i)
    for (std::int64_t j = 0; j < s; ++j) {
      const double x = at(i * s + j);
      if (j <= i ? x != 0.0 : !(x <= cut)) return false;
    }
  return true;
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
    std::vector<Node*> guard;
    Node* softmax = nan_guarded_probs(g, readers, pv.inputs[0], guard);
    if (!softmax) softmax = sole_producer(g, readers, pv.inputs[0]);
    if (!softmax || softmax->type() != LayerType::kSOFTMAX) continue;
    const graph::TensorDesc& scores = g.values[static_cast<std::size_t>(softmax->output)].desc;
    if (scores.dims.rank() != 4 || graph::softmax_axis(std::get<SoftmaxParams>(softmax->params), 4) != 3) continue;
    std::vector<Node*> chain = {softmax};
    chain.insert(chain.end(), guard.begin(), guard.end());
    // S = ((Q · Kᵀ) * c + M), the scaling and the mask each optional, in either order
    int cur = softmax->inputs[0], mask = -1;
    double scale = 1.0;
    bool scaled = false, ok = true;
    Node* qk = nullptr;
    for (int step = 0; step < 3 && ok && !qk; ++step) {
      Node* n = sole_producer(g, readers, cur);
      if (!n) ok = false;
      else if (const auto* mm = std::get_if<MatrixMultiplyParams>(&n->params)) {
        ok = mm->op0 == MatrixOperation::kNONE;  // op1 NONE: Kᵀ given, read through a head split below
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
    const bool key_transposed = std::get<MatrixMultiplyParams>(qk->params).op1 == MatrixOperation::kNONE;
    int q = qk->inputs[0], k = qk->inputs[1], v = pv.inputs[1];
    // scalings of the query and the key (exporters split 1/sqrt(H) between them) join the scale
    for (int* side : {&q, &k})
      if (auto c = peel_scale(g, readers, *side, chain)) scale *= *c;
    const auto& qd = g.values[static_cast<std::size_t>(q)].desc;
    const auto& kd = g.values[static_cast<std::size_t>(k)].desc;
    const auto& vd = g.values[static_cast<std::size_t>(v)].desc;
    if (!is_float_desc(qd) || kd.type != qd.type || vd.type != qd.type || scores.type != qd.type) continue;
    if (!std::isfinite(scale) || std::fabs(scale) > std::numeric_limits<float>::max()) continue;
    AttentionParams p;
    p.scale = static_cast<float>(scale);
    // The sequence-major layout: Q, K and V split from [B, S, W] rows by shuffles and the output
    // merged back; the attention then reads and writes the rows, and the shuffles go.
    std::int64_t nq = 0, hq = 0, nk = 0, hk = 0, nv = 0, hv = 0;
    std::vector<Node*> q_split, k_split, v_split, merge;
    const int xq = head_split_source(g, readers, q, false, nq, hq, q_split);
    const int xk = head_split_source(g, readers, k, key_transposed, nk, hk, k_split);
    const int xv = head_split_source(g, readers, v, false, nv, hv, v_split);
    int y = -1;
    if (xq >= 0 && xk >= 0 && xv >= 0 && hq == hk && hk == hv && nk == nv && nk > 0 && nq % nk == 0 &&
        nq <= std::numeric_limits<std::int32_t>::max() && hq <= std::numeric_limits<std::int32_t>::max())
      y = head_merge_target(g, readers, pv.output, nq, hq, merge);
    const bool rows = y >= 0;
    if (rows) {
      p.heads = static_cast<std::int32_t>(nq);
      p.kv_heads = static_cast<std::int32_t>(nk);
      p.head_size = static_cast<std::int32_t>(hq);
    } else {
      if (key_transposed) continue;  // Kᵀ as [B, N, H, S]: only the rows layout reads it
      if (qd.dims.rank() != 4 || kd.dims.rank() != 4 || !(kd.dims == vd.dims)) continue;
      if (qd.dims[0] != kd.dims[0] || qd.dims[3] != kd.dims[3]) continue;  // no batch broadcast; one head size
      if (!(qd.dims[1] == kd.dims[1] || kd.dims[1] == 1)) continue;
    }
    if (mask >= 0) {
      const auto& md = g.values[static_cast<std::size_t>(mask)].desc;
      if (md.type != qd.type || md.dims.rank() != 4) continue;
      if (const int mp = g.values[static_cast<std::size_t>(mask)].producer; mp >= static_cast<int>(i)) continue;
    }
    // A causal mask written as a constant (alone, or added to a padding mask) becomes the node's
    // causal flag: the kernels then skip the keys after each query instead of adding to them.
    if (rows && mask >= 0) {
      const std::int64_t sq = g.values[static_cast<std::size_t>(xq)].desc.dims[1];
      const std::int64_t skv = g.values[static_cast<std::size_t>(xk)].desc.dims[1];
      if (sq > 0 && sq == skv) {
        if (causal_constant(g, mask, sq)) {
          p.causal = true;
          mask = -1;
        } else if (const int mp = g.values[static_cast<std::size_t>(mask)].producer; mp >= 0) {
          const Node& add = g.nodes[static_cast<std::size_t>(mp)];
          const auto* ew = std::get_if<ElementWiseParams>(&add.params);
          if (ew && ew->op == ElementWiseOperation::kSUM && add.inputs.size() == 2 && add.epilogue.empty()) {
            for (int side = 0; side < 2 && !p.causal; ++side) {
              const int c = add.inputs[static_cast<std::size_t>(side)], other = add.inputs[static_cast<std::size_t>(1 - side)];
              const auto& od = g.values[static_cast<std::size_t>(other)].desc;
              if (causal_constant(g, c, sq) && od.type == qd.type && od.dims.rank() == 4) {
                p.causal = true;
                mask = other;
              }
            }
          }
        }
      }
    }
    Node candidate;
    candidate.name = pv.name;
    candidate.params = p;
    candidate.inputs = rows ? std::vector<int>{xq, xk, xv} : std::vector<int>{q, k, v};
    if (mask >= 0) candidate.inputs.push_back(mask);
    candidate.output = rows ? y : pv.output;
    candidate.main_desc = g.values[static_cast<std::size_t>(candidate.output)].desc;
    if (!accept(g, candidate)) continue;
    if (rows) {
      for (auto* split : {&q_split, &k_split, &v_split}) chain.insert(chain.end(), split->begin(), split->end());
      for (Node* n : merge) {
        removed[index_of(n)] = true;
        pv.absorbed.push_back(n->name);
      }
      g.values[static_cast<std::size_t>(y)].producer = static_cast<int>(i);
    }
    // the absorbed layers in graph order
    std::sort(chain.begin(), chain.end());
    std::string names;
    for (Node* n : chain) {
      removed[index_of(n)] = true;
      names += "'" + n->name + "', ";
    }
    std::vector<std::string> absorbed;
    for (Node* n : chain) absorbed.push_back(n->name);
    absorbed.insert(absorbed.end(), pv.absorbed.begin(), pv.absorbed.end());
    pv.absorbed = std::move(absorbed);
    pv.params = p;
    pv.inputs = candidate.inputs;
    pv.output = candidate.output;
    pv.main_desc = candidate.main_desc;
    log.changes.push_back("fused " + names + "'" + pv.name + "' into one attention node '" + pv.name + "' (scale " +
                          std::to_string(p.scale) + (mask >= 0 ? ", mask '" + g.values[static_cast<std::size_t>(mask)].name + "'" : "") +
                          (rows ? ", " + std::to_string(nq) + " heads of " + std::to_string(hq) + " read and written as rows" : "") + ")");
  }
  graph::compact(g, removed);
  return log;
}

PassLog merge_projections(Graph& g) {
  PassLog log{"merge_projections", {}};
  const auto readers = g.consumers();
  std::vector<bool> removed(g.nodes.size(), false);
  // One projection: x · W (+ b), W (and b) constants, its result read by the attention alone.
  struct Projection {
    Node* product = nullptr;
    Node* bias = nullptr;
    int weights = -1, bias_value = -1;
    std::int64_t width = 0;
  };
  auto projection = [&](int v, Projection& p) {
    Node* last = sole_producer(g, readers, v);
    if (!last) return false;
    if (const auto* ew = std::get_if<ElementWiseParams>(&last->params)) {
      if (ew->op != ElementWiseOperation::kSUM || last->inputs.size() != 2) return false;
      const bool first = g.values[static_cast<std::size_t>(last->inputs[0])].constant.has_value();
      const int b = last->inputs[first ? 0 : 1], rest = last->inputs[first ? 1 : 0];
      if (!g.values[static_cast<std::size_t>(b)].constant) return false;
      p.bias = last;
      p.bias_value = b;
      last = sole_producer(g, readers, rest);
      if (!last) return false;
    }
    const auto* mm = std::get_if<MatrixMultiplyParams>(&last->params);
    if (!mm || mm->op0 != MatrixOperation::kNONE || last->inputs.size() != 2) return false;
    const auto& w = g.values[static_cast<std::size_t>(last->inputs[1])];
    const Dims& wd = w.desc.dims;
    if (!w.constant || wd.rank() < 2 || !wd.all_known()) return false;
    for (int d = 0; d + 2 < wd.rank(); ++d)
      if (wd[d] != 1) return false;
    p.product = last;
    p.weights = last->inputs[1];
    p.width = mm->op1 == MatrixOperation::kNONE ? wd[wd.rank() - 1] : wd[wd.rank() - 2];
    if (p.bias) {  // a bias of [1, ..., 1, width]
      const Dims& bd = g.values[static_cast<std::size_t>(p.bias_value)].desc.dims;
      const Dims& od = g.values[static_cast<std::size_t>(last->output)].desc.dims;
      if (bd.rank() != od.rank() || bd[bd.rank() - 1] != p.width || bd.volume() != p.width) return false;
    }
    return true;
  };
  for (std::size_t i = 0; i < g.nodes.size(); ++i) {
    Node& a = g.nodes[i];
    const auto* ap = std::get_if<AttentionParams>(&a.params);
    if (!ap || ap->heads == 0 || ap->q_offset != 0 || ap->k_offset != 0 || ap->v_offset != 0) continue;
    Projection pr[3];
    bool ok = true;
    for (int j = 0; j < 3 && ok; ++j) ok = projection(a.inputs[static_cast<std::size_t>(j)], pr[j]);
    if (!ok) continue;
    const auto& mm0 = std::get<MatrixMultiplyParams>(pr[0].product->params);
    const auto& w0 = g.values[static_cast<std::size_t>(pr[0].weights)].desc;
    for (int j = 1; j < 3 && ok; ++j) {
      const auto& mm = std::get<MatrixMultiplyParams>(pr[j].product->params);
      const auto& w = g.values[static_cast<std::size_t>(pr[j].weights)].desc;
      const int r = w.dims.rank();
      const int k_axis = mm.op1 == MatrixOperation::kNONE ? r - 2 : r - 1;
      ok = pr[j].product->inputs[0] == pr[0].product->inputs[0] && mm.op1 == mm0.op1 && w.type == w0.type &&
           r == w0.dims.rank() && w.dims[k_axis] == w0.dims[k_axis] && !pr[j].product->quantized() &&
           (pr[j].bias != nullptr) == (pr[0].bias != nullptr) &&
           (!pr[j].bias || g.values[static_cast<std::size_t>(pr[j].bias_value)].desc.type ==
                               g.values[static_cast<std::size_t>(pr[0].bias_value)].desc.type);
    }
    if (!ok || pr[0].product->quantized() || pr[0].product == pr[1].product || pr[1].product == pr[2].product) continue;
    // The products run before the attention; the merged one runs where the query's did, so the
    // key's and value's products may not read anything produced after it (they read x alone).
    const std::int64_t total = pr[0].width + pr[1].width + pr[2].width;
    const int r = w0.dims.rank();
    const std::size_t esize = element_size(w0.type);
    // The merged weights: widths side by side ([K, N] rows interleaved; [N, K] appended).
    std::vector<std::byte> wbytes;
    wbytes.reserve(static_cast<std::size_t>(w0.dims.volume() / pr[0].width * total) * esize);
    if (mm0.op1 == MatrixOperation::kNONE) {
      const std::int64_t rows = w0.dims[r - 2];
      for (std::int64_t row = 0; row < rows; ++row)
        for (const auto& p : pr) {
          const auto bytes = g.values[static_cast<std::size_t>(p.weights)].constant->bytes();
          const std::size_t n = static_cast<std::size_t>(p.width) * esize;
          wbytes.insert(wbytes.end(), bytes.begin() + static_cast<std::ptrdiff_t>(static_cast<std::size_t>(row) * n),
                        bytes.begin() + static_cast<std::ptrdiff_t>(static_cast<std::size_t>(row + 1) * n));
        }
    } else {
      for (const auto& p : pr) {
        const auto bytes = g.values[static_cast<std::size_t>(p.weights)].constant->bytes();
        wbytes.insert(wbytes.end(), bytes.begin(), bytes.end());
      }
    }
    Dims wd = w0.dims;
    wd[mm0.op1 == MatrixOperation::kNONE ? r - 1 : r - 2] = total;
    auto add_constant = [&](const std::string& name, DataType type, const Dims& dims, const std::vector<std::byte>& bytes) {
      graph::Value v;
      v.name = name;
      v.desc = graph::TensorDesc{type, dims};
      v.constant = Weights::copy_of(type, bytes.data(), static_cast<std::int64_t>(bytes.size() / element_size(type)));
      g.values.push_back(std::move(v));
      return static_cast<int>(g.values.size() - 1);
    };
    Node& q = *pr[0].product;
    q.inputs[1] = add_constant(q.name + ".qkv_weights", w0.type, wd, wbytes);
    const int q_out = q.output;
    Dims od = g.values[static_cast<std::size_t>(q_out)].desc.dims;
    od[od.rank() - 1] = total;
    g.values[static_cast<std::size_t>(q_out)].desc.dims = od;
    q.main_desc.dims = od;
    int merged = q_out;
    if (pr[0].bias) {
      std::vector<std::byte> bbytes;
      for (const auto& p : pr) {
        const auto bytes = g.values[static_cast<std::size_t>(p.bias_value)].constant->bytes();
        bbytes.insert(bbytes.end(), bytes.begin(), bytes.end());
      }
      const auto& b0 = g.values[static_cast<std::size_t>(pr[0].bias_value)].desc;
      Dims bd = b0.dims;
      bd[bd.rank() - 1] = total;
      Node& qb = *pr[0].bias;
      const int slot = qb.inputs[0] == pr[0].bias_value ? 0 : 1;
      qb.inputs[static_cast<std::size_t>(slot)] = add_constant(qb.name + ".qkv_bias", b0.type, bd, bbytes);
      merged = qb.output;
      g.values[static_cast<std::size_t>(merged)].desc.dims = od;
      qb.main_desc.dims = od;
    }
    auto& params = std::get<AttentionParams>(a.params);
    params.q_offset = 0;
    params.k_offset = pr[0].width;
    params.v_offset = pr[0].width + pr[1].width;
    a.inputs[0] = a.inputs[1] = a.inputs[2] = merged;
    for (int j = 1; j < 3; ++j) {  // the key's and value's products (and biases) are the merged node's now
      removed[static_cast<std::size_t>(pr[j].product - g.nodes.data())] = true;
      q.absorbed.push_back(pr[j].product->name);
      if (pr[j].bias) {
        removed[static_cast<std::size_t>(pr[j].bias - g.nodes.data())] = true;
        q.absorbed.push_back(pr[j].bias->name);
      }
    }
    log.changes.push_back("merged the products '" + pr[0].product->name + "', '" + pr[1].product->name + "' and '" +
                          pr[2].product->name + "' (one input, " + std::to_string(total) +
                          " columns) for attention '" + a.name + "', which reads its three parts by column offsets");
  }
  graph::compact(g, removed);
  return log;
}

}  // namespace tensoracle::builder
