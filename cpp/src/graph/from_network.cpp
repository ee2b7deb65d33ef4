// graph::from_network: a Network copied into the IR, one node per layer, with its loops unrolled.
//
// A loop (tensoracle/network.h, Loop) is a set of boundary layers (trip limit, recurrences,
// iterators, loop outputs) and a body: the layers that read, directly or through each other, a
// recurrence's or an iterator's output. The IR has no loops: each loop becomes its body copied
// once per iteration ("<layer>[i]", values "<tensor>[i]"), an iterator a gather of slice i, a
// recurrence the value its input 1 had in the iteration before, and a loop output the value of
// the last iteration (an identity) or every iteration's value stacked along a new axis (unsqueeze
// and concatenation). The trip count and a stacked output's length must be values the builder can
// compute: constants, or shape values that are the same at every shape of the profile (the
// builder's ShapeValueOf). While loops are refused.
//
// A conditional (IfConditional) becomes, per output, a select between its branches' values, both
// computed; a condition the builder can compute (outside loops: a constant or shape values)
// keeps only its branch.
#include <algorithm>
#include <map>
#include <queue>
#include <set>
#include <string>
#include <unordered_map>
#include <vector>

#include "graph/graph.h"
#include "tensoracle/errors.h"

namespace tensoracle::graph {

namespace {

bool is_boundary(LayerType t) {
  return t == LayerType::kTRIP_LIMIT || t == LayerType::kRECURRENCE || t == LayerType::kITERATOR ||
         t == LayerType::kLOOP_OUTPUT;
}

std::int32_t loop_index(const Layer& l) {
  std::int32_t index = -1;
  std::visit([&](const auto& p) {
    if constexpr (requires { p.loop; }) index = p.loop;
  }, l.params());
  return index;
}

class Copier {
 public:
  Copier(const Network& net, const ShapeValueOf& value_of) : net_(net), value_of_(value_of) {}

  Graph run() {
    classify();
    for (int unit : unit_order()) {
      if (unit < net_.num_layers()) copy_layer(*net_.get_layer(unit));
      else unroll(unit - net_.num_layers());
    }
    for (int i = 0; i < net_.num_inputs(); ++i) g_.inputs.push_back(ids_.at(net_.get_input(i)));
    for (int i = 0; i < net_.num_outputs(); ++i) {
      const Tensor* t = net_.get_output(i);
      if (inside_.count(t))
        throw InvalidArgument("[network] output '" + t->name() + "' is computed inside loop '" +
                              net_.get_loop(inside_.at(t))->name() + "'; values leave a loop through add_loop_output");
      g_.outputs.push_back(ids_.at(t));
    }
    return std::move(g_);
  }

 private:
  [[noreturn]] void fail_loop(int loop, const std::string& msg) const {
    throw InvalidArgument("[network] loop '" + net_.get_loop(loop)->name() + "': " + msg);
  }

  // The tensors layer `l` reads: its inputs, and a conditional output's condition.
  std::vector<const Tensor*> reads(const Layer& l) const {
    std::vector<const Tensor*> in(l.stored_inputs().begin(), l.stored_inputs().end());
    if (const auto* p = std::get_if<ConditionalOutputParams>(&l.params())) in.push_back(condition(p->conditional, l));
    return in;
  }

  const Tensor* condition(int conditional, const Layer& output) const {
    auto it = conditions_.find(conditional);
    if (it == conditions_.end())
      throw InvalidArgument("[network] layer '" + output.name() + "': conditional '" +
                            net_.get_conditional(conditional)->name() + "' has no condition (set_condition)");
    return it->second;
  }

  // Which loop each layer belongs to (-1: none) and which tensors are computed inside a loop.
  void classify() {
    const int n = net_.num_layers();
    for (int i = 0; i < n; ++i)
      if (const auto* c = std::get_if<ConditionParams>(&net_.get_layer(i)->params()))
        conditions_[c->conditional] = net_.get_layer(i)->get_input(0);
    loop_of_.assign(static_cast<std::size_t>(n), -1);
    for (int i = 0; i < n; ++i) {
      const Layer& l = *net_.get_layer(i);
      auto in_loop = [&](const Tensor* t) { return inside_.count(t) ? inside_.at(t) : -1; };
      if (is_boundary(l.type())) {
        const int lp = loop_index(l);
        if (lp < 0 || lp >= net_.num_loops()) throw InvalidArgument("[network] layer '" + l.name() + "': no such loop");
        loop_of_[static_cast<std::size_t>(i)] = lp;
        const int from = in_loop(l.get_input(0));
        if ((l.type() == LayerType::kRECURRENCE || l.type() == LayerType::kITERATOR) && from >= 0)
          throw UnsupportedError("[network] layer '" + l.name() + "': its input is computed inside loop '" +
                                 net_.get_loop(from)->name() + "'; nested loops are not supported yet");
        if (l.type() == LayerType::kLOOP_OUTPUT && from != lp)
          throw InvalidArgument("[network] layer '" + l.name() + "': input 0 ('" + l.get_input(0)->name() +
                                "') must be computed inside loop '" + net_.get_loop(lp)->name() +
                                "' (from one of its recurrences or iterators)");
        if (l.type() == LayerType::kTRIP_LIMIT && std::get<TripLimitParams>(l.params()).kind == TripLimit::kCOUNT && from >= 0)
          throw InvalidArgument("[network] layer '" + l.name() + "': the trip count must be computed before the loop");
        if (l.type() == LayerType::kLOOP_OUTPUT && l.num_inputs() > 1 && in_loop(l.get_input(1)) >= 0)
          throw InvalidArgument("[network] layer '" + l.name() + "': the length (input 1) must be computed before the loop");
        if (l.type() == LayerType::kRECURRENCE || l.type() == LayerType::kITERATOR) inside_[l.get_output(0)] = lp;
        continue;
      }
      int lp = -1;
      for (const Tensor* t : reads(l)) {
        const int k = in_loop(t);
        if (k < 0) continue;
        if (lp >= 0 && k != lp)
          throw InvalidArgument("[network] layer '" + l.name() + "' reads tensors of two loops ('" + net_.get_loop(lp)->name() +
                                "' and '" + net_.get_loop(k)->name() + "'); values leave a loop through add_loop_output");
        lp = k;
      }
      loop_of_[static_cast<std::size_t>(i)] = lp;
      if (lp >= 0)
        for (int o = 0; o < l.num_outputs(); ++o) inside_[l.get_output(o)] = lp;
    }
    for (int i = 0; i < n; ++i) {
      const Layer& l = *net_.get_layer(i);
      if (l.type() == LayerType::kRECURRENCE && l.num_inputs() > 1) {
        const int k = inside_.count(l.get_input(1)) ? inside_.at(l.get_input(1)) : -1;
        if (k >= 0 && k != loop_of_[static_cast<std::size_t>(i)])
          throw InvalidArgument("[network] layer '" + l.name() + "': its next value (input 1) is computed inside another loop");
      }
    }
  }

  // The order in which layers (unit i < num_layers) and whole loops (num_layers + loop) are
  // copied: every unit after the units it reads, a recurrence's next value aside (the back edge),
  // and otherwise in the network's order.
  std::vector<int> unit_order() const {
    const int n = net_.num_layers();
    auto unit_of = [&](int layer) { return loop_of_[static_cast<std::size_t>(layer)] >= 0 ? n + loop_of_[static_cast<std::size_t>(layer)] : layer; };
    const int units = n + net_.num_loops();
    std::vector<std::set<int>> next(static_cast<std::size_t>(units));
    std::vector<int> waiting(static_cast<std::size_t>(units), 0), first(static_cast<std::size_t>(units), -1);
    std::vector<bool> used(static_cast<std::size_t>(units), false);
    std::unordered_map<const Layer*, int> position;
    for (int i = 0; i < n; ++i) position[net_.get_layer(i)] = i;
    for (int i = 0; i < n; ++i) {
      const Layer& l = *net_.get_layer(i);
      const int u = unit_of(i);
      used[static_cast<std::size_t>(u)] = true;
      if (first[static_cast<std::size_t>(u)] < 0) first[static_cast<std::size_t>(u)] = i;
      const auto in = reads(l);
      for (std::size_t k = 0; k < in.size(); ++k) {
        if (l.type() == LayerType::kRECURRENCE && k == 1) continue;
        const int p = unit_of(position.at(in[k]->producer()));
        if (p != u && next[static_cast<std::size_t>(p)].insert(u).second) ++waiting[static_cast<std::size_t>(u)];
      }
    }
    using Item = std::pair<int, int>;  // (first layer, unit): network order among the ready units
    std::priority_queue<Item, std::vector<Item>, std::greater<Item>> ready;
    for (int u = 0; u < units; ++u)
      if (used[static_cast<std::size_t>(u)] && waiting[static_cast<std::size_t>(u)] == 0) ready.push({first[static_cast<std::size_t>(u)], u});
    std::vector<int> order;
    while (!ready.empty()) {
      const int u = ready.top().second;
      ready.pop();
      order.push_back(u);
      for (int v : next[static_cast<std::size_t>(u)])
        if (--waiting[static_cast<std::size_t>(v)] == 0) ready.push({first[static_cast<std::size_t>(v)], v});
    }
    for (int u = n; u < units; ++u)
      if (used[static_cast<std::size_t>(u)] && waiting[static_cast<std::size_t>(u)] > 0)
        fail_loop(u - n, "it reads a value computed from one of its own loop outputs");
    return order;
  }

  int add_value(std::string name, const TensorDesc& desc) {
    Value v;
    v.name = std::move(name);
    v.desc = desc;
    g_.values.push_back(std::move(v));
    return static_cast<int>(g_.values.size() - 1);
  }

  int bind(const Tensor* t, int value) {
    ids_[t] = value;
    g_.values[static_cast<std::size_t>(value)].is_output = t->is_network_output();
    return value;
  }

  // A node for `params` reading `inputs`; its outputs described by `outs` and named `names`.
  std::vector<int> add_node(const std::string& name, LayerParams params, std::vector<int> inputs,
                            const std::vector<TensorDesc>& outs, const std::vector<std::string>& names) {
    Node node;
    node.name = name;
    node.params = std::move(params);
    node.inputs = std::move(inputs);
    node.main_desc = outs.at(0);
    std::vector<int> ids;
    for (std::size_t k = 0; k < outs.size(); ++k) ids.push_back(add_value(names[k], outs[k]));
    node.output = ids[0];
    node.extra_outputs.assign(ids.begin() + 1, ids.end());
    for (int v : ids) g_.values[static_cast<std::size_t>(v)].producer = static_cast<int>(g_.nodes.size());
    g_.nodes.push_back(std::move(node));
    return ids;
  }

  // A node whose outputs follow from graph::infer (the nodes unrolling adds).
  int add_inferred(const std::string& name, LayerParams params, std::vector<int> inputs, const std::string& value_name = {}) {
    std::vector<TensorDesc> in;
    std::vector<InputFacts> facts;
    for (int v : inputs) {
      const Value& val = g_.values[static_cast<std::size_t>(v)];
      in.push_back(val.desc);
      facts.push_back({val.constant.has_value(), val.constant ? shape_values_of(*val.constant) : std::nullopt});
    }
    std::vector<TensorDesc> out;
    try {
      out = infer(params, in, facts);
    } catch (const InvalidArgument& e) {
      throw InvalidArgument("[network] layer '" + name + "': " + e.what());
    }
    return add_node(name, std::move(params), std::move(inputs), out, {value_name.empty() ? name : value_name})[0];
  }

  int add_constant(const std::string& name, Weights w, const Dims& dims) {
    const int v = add_value(name, {w.type(), dims});
    g_.values[static_cast<std::size_t>(v)].constant = std::move(w);
    return v;
  }

  // One layer outside loops (`suffix` empty) or one iteration's copy of a body layer, the values
  // of the tensors it reads from `value`; returns its outputs' values.
  template <typename Lookup>
  std::vector<int> copy_node(const Layer& l, const Lookup& value, const std::string& suffix) {
    std::vector<int> inputs;
    for (const Tensor* t : l.stored_inputs()) inputs.push_back(value(t));
    switch (l.type()) {
      case LayerType::kCONDITION: return {};
      case LayerType::kCONDITIONAL_INPUT:
        return {add_inferred(l.name() + suffix, IdentityParams{}, inputs, l.get_output(0)->name() + suffix)};
      case LayerType::kCONDITIONAL_OUTPUT: {
        const int c = value(condition(std::get<ConditionalOutputParams>(l.params()).conditional, l));
        // A condition the builder knows picks its branch (the other one is dead code);
        // otherwise both branches run and a select keeps one.
        const auto known = suffix.empty() || g_.values[static_cast<std::size_t>(c)].constant ? scalar_of(c) : std::nullopt;
        const std::string name = l.name() + suffix, out = l.get_output(0)->name() + suffix;
        if (known) return {add_inferred(name, IdentityParams{}, {inputs[*known ? 0 : 1]}, out)};
        const int rank = g_.values[static_cast<std::size_t>(inputs[0])].desc.dims.rank();
        int cond = c;
        if (rank > 0) {
          ShuffleParams reshape;
          reshape.reshape_dims = Dims(std::span<const std::int64_t>(std::vector<std::int64_t>(static_cast<std::size_t>(rank), 1)));
          cond = add_inferred(name + ".condition", reshape, {c});
        }
        return {add_inferred(name, SelectParams{}, {cond, inputs[0], inputs[1]}, out)};
      }
      default: break;
    }
    LayerParams params = l.params();
    // A layer of several outputs (topk, plugins) writes them all in one run: `output` -1.
    const int all = l.num_outputs() > 1 ? -1 : 0;
    if (auto* topk = std::get_if<TopKParams>(&params)) topk->output = all;
    if (auto* plugin = std::get_if<PluginParams>(&params)) plugin->output = all;
    std::vector<TensorDesc> outs;
    std::vector<std::string> names;
    for (int o = 0; o < l.num_outputs(); ++o) {
      outs.push_back({l.get_output(o)->type(), l.get_output(o)->dims()});
      names.push_back(l.get_output(o)->name() + suffix);
    }
    return add_node(l.name() + suffix, std::move(params), inputs, outs, names);
  }

  void copy_layer(const Layer& l) {
    if (l.type() == LayerType::kINPUT) {
      const Tensor* t = l.get_output(0);
      bind(t, add_value(t->name(), {t->type(), t->dims()}));
      g_.values[static_cast<std::size_t>(ids_.at(t))].is_input = true;
      return;
    }
    if (l.type() == LayerType::kCONSTANT) {
      const Tensor* t = l.get_output(0);
      bind(t, add_constant(t->name(), std::get<ConstantParams>(l.params()).weights, t->dims()));
      return;
    }
    const auto outs = copy_node(l, [&](const Tensor* t) { return ids_.at(t); }, "");
    for (int o = 0; o < l.num_outputs(); ++o) bind(l.get_output(o), outs[static_cast<std::size_t>(o)]);
  }

  // The one value of a 0-D shape tensor, when constant or known to the builder.
  std::optional<std::int64_t> scalar_of(int value) const {
    const Value& v = g_.values[static_cast<std::size_t>(value)];
    std::optional<std::vector<std::int64_t>> values;
    if (v.constant) {
      values = shape_values_of(*v.constant);
    } else if (value_of_) {
      // The part of the graph the value depends on, as a graph of its own.
      Graph sub = g_;
      std::vector<bool> needed(sub.values.size(), false), dead(sub.nodes.size(), true);
      needed[static_cast<std::size_t>(value)] = true;
      for (int n = static_cast<int>(sub.nodes.size()) - 1; n >= 0; --n) {
        const Node& node = sub.nodes[static_cast<std::size_t>(n)];
        bool wanted = false;
        for (int o : node.outputs()) wanted = wanted || needed[static_cast<std::size_t>(o)];
        if (!wanted) continue;
        dead[static_cast<std::size_t>(n)] = false;
        for (int i : node.all_inputs()) needed[static_cast<std::size_t>(i)] = true;
      }
      sub.inputs.clear();
      for (int i = 0; i < net_.num_inputs(); ++i)
        if (auto it = ids_.find(net_.get_input(i)); it != ids_.end() && needed[static_cast<std::size_t>(it->second)])
          sub.inputs.push_back(it->second);
      sub.outputs = {value};
      compact(sub, dead);
      values = value_of_(sub, sub.outputs[0]);
    }
    if (!values || values->size() != 1) return std::nullopt;
    return values->front();
  }

  // The length of the dim an iterator slices: the network's dim, or the value the builder
  // computes from the input's shape (dims fixed in the profile).
  std::int64_t iterator_length(const Layer& it) {
    const auto& p = std::get<IteratorParams>(it.params());
    const Tensor* x = it.get_input(0);
    const int axis = p.axis < 0 ? p.axis + x->dims().rank() : p.axis;
    if (x->dims()[axis] >= 0) return x->dims()[axis];
    // shape(x)[axis], as nodes that dead-code elimination removes again.
    const std::string name = it.name() + ".length";
    const int shape = add_inferred(name + ".shape", ShapeParams{}, {ids_.at(x)});
    const std::int32_t k = axis;
    const int index = add_constant(name + ".axis", Weights::copy_of(DataType::kINT32, &k, 1), Dims{});
    const auto len = scalar_of(add_inferred(name, GatherParams{0, GatherMode::kDEFAULT, 0}, {shape, index}));
    if (!len)
      throw UnsupportedError("[network] layer '" + it.name() + "': it iterates over dim " + std::to_string(axis) + " of '" +
                             x->name() + "', which varies within the profile; loops are unrolled when the engine is built");
    return *len;
  }

  void unroll(int loop) {
    const std::string& loop_name = net_.get_loop(loop)->name();
    std::vector<const Layer*> recurrences, iterators, outputs, body;
    const Layer *count = nullptr, *condition = nullptr;
    for (int i = 0; i < net_.num_layers(); ++i) {
      if (loop_of_[static_cast<std::size_t>(i)] != loop) continue;
      const Layer* l = net_.get_layer(i);
      switch (l->type()) {
        case LayerType::kRECURRENCE: recurrences.push_back(l); break;
        case LayerType::kITERATOR: iterators.push_back(l); break;
        case LayerType::kLOOP_OUTPUT: outputs.push_back(l); break;
        case LayerType::kTRIP_LIMIT:
          (std::get<TripLimitParams>(l->params()).kind == TripLimit::kCOUNT ? count : condition) = l;
          break;
        default: body.push_back(l);
      }
    }
    if (outputs.empty()) return;  // nothing leaves the loop: nothing to compute
    if (condition)
      throw UnsupportedError("[network] loop '" + loop_name + "': WHILE trip limits ('" + condition->name() +
                             "') are not supported yet: loops are unrolled when the engine is built, which needs a COUNT "
                             "trip limit the builder can compute");
    for (const Layer* r : recurrences)
      if (r->num_inputs() < 2)
        fail_loop(loop, "recurrence '" + r->name() + "' has no next value (set_input(1, tensor) on it)");

    // The trip count: the COUNT limit's value, else the iterators' length.
    std::int64_t trips = -1;
    if (count) {
      auto c = scalar_of(ids_.at(count->get_input(0)));
      if (!c)
        throw UnsupportedError("[network] loop '" + loop_name + "': its trip count ('" + count->get_input(0)->name() +
                               "') is not a value the builder can compute (a constant, or computed from shapes fixed in "
                               "the profile); loops with trip counts known only at run time are not supported yet");
      if (*c < 0) fail_loop(loop, "its trip count is " + std::to_string(*c));
      trips = *c;
    }
    std::vector<std::int64_t> lengths;
    for (const Layer* it : iterators) lengths.push_back(iterator_length(*it));
    if (trips < 0) {
      if (lengths.empty()) fail_loop(loop, "it has no trip limit (add_trip_limit) and no iterator");
      trips = *std::min_element(lengths.begin(), lengths.end());
    }
    for (std::size_t k = 0; k < iterators.size(); ++k)
      if (lengths[k] < trips)
        throw InvalidArgument("[network] layer '" + iterators[k]->name() + "': it has " + std::to_string(lengths[k]) +
                              " slices for the " + std::to_string(trips) + " iterations of loop '" + loop_name + "'");
    constexpr std::int64_t kMaxUnrolledNodes = 1 << 20;
    if (trips * static_cast<std::int64_t>(body.size() + iterators.size() + 1) > kMaxUnrolledNodes)
      throw UnsupportedError("[network] loop '" + loop_name + "': " + std::to_string(trips) + " iterations of " +
                             std::to_string(body.size()) + " layers are more than tensoracle unrolls");

    // Iterations: each body layer copied, reading this iteration's values.
    std::unordered_map<const Tensor*, int> state;  // recurrence output -> its value this iteration
    for (const Layer* r : recurrences) state[r->get_output(0)] = ids_.at(r->get_input(0));
    std::map<const Layer*, std::vector<int>> history;  // loop output -> its input's value per iteration
    for (std::int64_t i = 0; i < trips; ++i) {
      const std::string suffix = "[" + std::to_string(i) + "]";
      std::unordered_map<const Tensor*, int> now(state);
      auto value = [&](const Tensor* t) {
        auto it = now.find(t);
        return it != now.end() ? it->second : ids_.at(t);
      };
      for (std::size_t k = 0; k < iterators.size(); ++k) {
        const Layer* it = iterators[k];
        const auto& p = std::get<IteratorParams>(it->params());
        const Dims& x = it->get_input(0)->dims();
        const int axis = p.axis < 0 ? p.axis + x.rank() : p.axis;
        const std::int64_t len = lengths[k];
        const std::int32_t index = static_cast<std::int32_t>(p.reverse ? len - 1 - i : i);
        const std::string name = it->get_output(0)->name() + suffix;
        const int idx = add_constant(name + ".index", Weights::copy_of(DataType::kINT32, &index, 1), Dims{});
        now[it->get_output(0)] = add_inferred(name, GatherParams{axis, GatherMode::kDEFAULT, 0}, {ids_.at(it->get_input(0)), idx});
      }
      for (const Layer* l : body) {
        const auto outs = copy_node(*l, value, suffix);
        for (int o = 0; o < l->num_outputs(); ++o) now[l->get_output(o)] = outs[static_cast<std::size_t>(o)];
      }
      for (const Layer* o : outputs) history[o].push_back(value(o->get_input(0)));
      for (const Layer* r : recurrences) state[r->get_output(0)] = value(r->get_input(1));
    }

    for (const Layer* o : outputs) {
      const auto& p = std::get<LoopOutputParams>(o->params());
      const Tensor* src = o->get_input(0);
      const Tensor* out = o->get_output(0);
      if (p.kind == LoopOutput::kLAST_VALUE) {
        // A recurrence's last value is the one its next value left after the last iteration.
        int v = -1;
        if (state.count(src)) v = state.at(src);
        else if (trips > 0) v = history.at(o).back();
        else fail_loop(loop, "loop output '" + o->name() + "' has no last value: the loop runs 0 times");
        bind(out, add_inferred(out->name(), IdentityParams{}, {v}));
        continue;
      }
      if (o->num_inputs() < 2) fail_loop(loop, "loop output '" + o->name() + "' needs its length as input 1");
      auto length = scalar_of(ids_.at(o->get_input(1)));
      if (!length || *length < 0)
        throw UnsupportedError("[network] layer '" + o->name() + "': its length ('" + o->get_input(1)->name() +
                               "') is not a value the builder can compute");
      std::vector<int> items = history[o];
      if (static_cast<std::int64_t>(items.size()) > *length) items.resize(static_cast<std::size_t>(*length));
      if (p.kind == LoopOutput::kREVERSE) std::reverse(items.begin(), items.end());
      std::vector<int> parts;
      for (std::size_t k = 0; k < items.size(); ++k)
        parts.push_back(add_inferred(out->name() + "[" + std::to_string(k) + "]", UnsqueezeParams{Dims{static_cast<std::int64_t>(p.axis)}}, {items[k]}));
      if (*length > static_cast<std::int64_t>(items.size())) {
        // TensorRT fills the iterations beyond the trip count with zeros.
        const Dims& d = src->dims();
        if (!d.all_known())
          throw UnsupportedError("[network] layer '" + o->name() + "': its length exceeds the trip count and '" + src->name() +
                                 "' has dims known only at run time (the zeros beyond it need them)");
        std::vector<std::int64_t> pad;
        for (int k = 0; k <= d.rank(); ++k) {
          if (k == p.axis) pad.push_back(*length - static_cast<std::int64_t>(items.size()));
          if (k < d.rank()) pad.push_back(d[k]);
        }
        const Dims pd{std::span<const std::int64_t>(pad)};
        const std::vector<std::byte> zeros(static_cast<std::size_t>(pd.volume()) * element_size(src->type()));
        parts.push_back(add_constant(out->name() + ".zeros", Weights::copy_of(src->type(), zeros.data(), pd.volume()), pd));
      }
      if (parts.empty())
        throw UnsupportedError("[network] layer '" + o->name() + "': a loop output of length 0 is not supported");
      bind(out, add_inferred(out->name(), ConcatenationParams{p.axis}, parts));
    }
  }

  const Network& net_;
  const ShapeValueOf& value_of_;
  Graph g_;
  std::unordered_map<const Tensor*, int> ids_;
  std::unordered_map<const Tensor*, int> inside_;  // tensors computed inside a loop -> the loop
  std::vector<int> loop_of_;                       // per layer: its loop, or -1
  std::unordered_map<int, const Tensor*> conditions_;  // conditional -> its condition
};

}  // namespace

Graph from_network(const Network& net, const ShapeValueOf& value_of) { return Copier(net, value_of).run(); }

}  // namespace tensoracle::graph
