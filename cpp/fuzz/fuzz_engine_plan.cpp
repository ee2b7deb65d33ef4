// libFuzzer target: an engine file's plan document (its `tensoracle.plan` JSON), which drives
// everything after the container (fuzz_safetensors covers that) and the digest (anyone can
// recompute it). Each input is stored, as it is, as the plan of an engine with a valid digest
// around the constants of a small CPU network built here, and opened: plan::read_engine parses
// and verifies it, Engine::deserialize checks its memory plan and instantiates the CPU
// backend's kernel for every node. What opens is inspected and run once on zeros at the
// profile's opt shapes, then three times more into output buffers filled with two patterns: a
// byte that differs between the two was never written (an output handed back uninitialised);
// the third run must repeat the first (results that drift mean the engine changes its own
// state: a node writing a weight); and what run() returned must equal what the same run wrote
// into the caller's buffers (an array run() allocated and never wrote differs). A
// tensoracle::Error is the expected refusal; anything else escaping, such a byte, or a
// sanitizer report, is a finding.
//
// Structure-aware: byte-level mutations of JSON mostly give text that does not parse, so the
// custom mutator below parses the document and changes it as an attacker would — a number becomes
// 0, -1, 2^31, 2^64 - 1, a neighbouring id or another number of the document; an array loses,
// repeats or reorders elements; an object loses a key or takes another's value; a string becomes
// one of the plan's vocabulary (layer, type, layout and tactic names); a value is nested a few or many
// levels deep. A third of the changes know the plan's schema and edit linked fields together, so
// that the change gets past the checks between them to what allocates and runs: a memory size or a
// value's offset becomes 0 or one that wraps; a node loses inputs or names another value; a node
// writes another value (often one of its output's shape: a constant, an input), that value says so
// and the node's readers follow; an epilogue operand or a graph input names another id; one I/O
// entry takes another's value and shape (the graph's outputs list follows, the layer left without
// a reader goes). Some of the time the mutator starts again from the network's own plan. Byte-
// level mutation stays as one of the choices. Run it with a -max_len well above the seed's size
// (scripts/run-tests.sh passes 65536): libFuzzer's default, the largest seed, would refuse every
// change that lengthens the document.
//
// Seeds are this network's own plan (they must name its constants):
//   TENSORACLE_FUZZ_WRITE_SEEDS=/tmp/plan-seeds build/fuzz/fuzz/fuzz_engine_plan -runs=0
//   build/fuzz/fuzz/fuzz_engine_plan -max_len=65536 /tmp/plan-corpus /tmp/plan-seeds
#include <cstddef>
#include <cstdio>
#include <cstdint>
#include <cstdlib>
#include <cstring>
#include <filesystem>
#include <fstream>
#include <map>
#include <random>
#include <string>
#include <vector>

#include "core/json.h"
#include "nlohmann/json.hpp"
#include "plan/plan.h"
#include "tensoracle/builder.h"
#include "tensoracle/engine.h"
#include "tensoracle/errors.h"
#include "tensoracle/network.h"

using namespace tensoracle;

namespace {

// x [2, 4, 6, 6] -> convolution 3x3 (+ bias, ReLU) -> max pool 2x2 -> reshape [2, 36] ->
// matrix multiply [36, 5] + bias [2, 5] -> softmax; and the reshaped features' sum over axis 1
// as a second output, and a causal attention over the reshaped features as a third; and an
// attention over rows of a second input (fused in the sequence-major layout where the CPU fuses
// attention). Small, and it exercises fusion (epilogues), shuffles and reductions; the
// bias has the shape of the layers' outputs, so that a node pointed at it passes the shape
// checks and writes into the weight.
std::vector<std::byte> seed_engine() {
  static std::vector<float> w(4 * 4 * 9), b(4), m(36 * 5), mb(2 * 5);
  for (std::size_t i = 0; i < w.size(); ++i) w[i] = static_cast<float>(i % 7) * 0.05f - 0.15f;
  for (std::size_t i = 0; i < b.size(); ++i) b[i] = 0.1f * static_cast<float>(i);
  for (std::size_t i = 0; i < m.size(); ++i) m[i] = static_cast<float>(i % 5) * 0.1f - 0.2f;
  for (std::size_t i = 0; i < mb.size(); ++i) mb[i] = -0.1f * static_cast<float>(i);
  auto graph = [&](Network& net) {
    auto* x = net.add_input("x", DataType::kFLOAT, {2, 4, 6, 6});
    auto* conv = net.add_convolution_nd(x, 4, {3, 3}, Weights(DataType::kFLOAT, w.data(), 144, nullptr),
                                        Weights(DataType::kFLOAT, b.data(), 4, nullptr));
    ConvolutionParams p = conv->get();
    p.pre_padding = p.post_padding = {1, 1};
    conv->set(p);
    auto* r = net.add_activation(conv->get_output(0), ActivationType::kRELU)->get_output(0);
    auto* pool = net.add_pooling_nd(r, PoolingType::kMAX, {2, 2});
    PoolingParams pp = pool->get();
    pp.stride = {2, 2};
    pool->set(pp);
    auto* flat = net.add_shuffle(pool->get_output(0));
    flat->set_reshape_dims(Dims{2, 36});
    auto* mat = net.add_constant({36, 5}, Weights(DataType::kFLOAT, m.data(), 180, nullptr))->get_output(0);
    auto* prod = net.add_matrix_multiply(flat->get_output(0), MatrixOperation::kNONE, mat, MatrixOperation::kNONE);
    auto* bias = net.add_constant({2, 5}, Weights(DataType::kFLOAT, mb.data(), 10, nullptr))->get_output(0);
    auto* sum = net.add_elementwise(prod->get_output(0), bias, ElementWiseOperation::kSUM)->get_output(0);
    auto* y = net.add_softmax(sum)->get_output(0);
    y->set_name("y");
    net.mark_output(y);
    auto* total = net.add_reduce(flat->get_output(0), ReduceOperation::kSUM, 0x2, true)->get_output(0);
    total->set_name("total");
    net.mark_output(total);
    // the features as [1, 2, 6, 6] query, key and value of a causal attention (scaled)
    auto* heads = net.add_shuffle(flat->get_output(0));
    heads->set_reshape_dims(Dims{1, 2, 6, 6});
    auto* hv = heads->get_output(0);
    auto* att = net.add_attention(hv, hv, hv, AttentionNormalizationOp::kSOFTMAX, true);
    AttentionParams ap = att->get();
    ap.scale = 0.5f;
    att->set(ap);
    att->get_output(0)->set_name("attention");
    net.mark_output(att->get_output(0));
    // attention written as layers over rows t [1, 4, 32] (2 heads of 16, split and merged by
    // shuffles): where the CPU fuses it (AVX-512), one node of the sequence-major layout
    auto* t = net.add_input("t", DataType::kFLOAT, {1, 4, 32});
    auto split = [&] {
      auto* sh = net.add_shuffle(t);
      sh->set_reshape_dims(Dims{0, 0, 2, 16});
      sh->set_second_transpose(Permutation{{0, 2, 1, 3, 4, 5, 6, 7}});
      return sh->get_output(0);
    };
    auto* tq = split();
    auto* tk = split();
    auto* tv = split();
    auto* ts = net.add_matrix_multiply(tq, MatrixOperation::kNONE, tk, MatrixOperation::kTRANSPOSE)->get_output(0);
    auto* tsm = net.add_softmax(ts);
    tsm->set(SoftmaxParams{1u << 3});
    auto* tpv = net.add_matrix_multiply(tsm->get_output(0), MatrixOperation::kNONE, tv, MatrixOperation::kNONE);
    auto* merged = net.add_shuffle(tpv->get_output(0));
    merged->set_first_transpose(Permutation{{0, 2, 1, 3, 4, 5, 6, 7}});
    merged->set_reshape_dims(Dims{0, 0, 32});
    merged->get_output(0)->set_name("rows");
    net.mark_output(merged->get_output(0));
    // TensorRT 10's layers of issue 34 on the pooled features [2, 4, 3, 3]: scale, LRN,
    // parametric ReLU, cumulative, scatter (ND) and one-hot
    static const float coef[4] = {0.5f, 1.f, 1.5f, 2.f};
    auto* sc = net.add_scale_nd(pool->get_output(0), ScaleMode::kCHANNEL, Weights(DataType::kFLOAT, coef, 4, nullptr),
                                Weights(DataType::kFLOAT, coef, 4, nullptr), Weights(), 1);
    auto* lrn = net.add_lrn(sc->get_output(0), 3, 0.2f, 0.75f, 1.f);
    static const float slope = 0.25f;
    auto* slope_t = net.add_constant({1, 1, 1, 1}, Weights(DataType::kFLOAT, &slope, 1, nullptr))->get_output(0);
    auto* pr = net.add_parametric_relu(lrn->get_output(0), slope_t);
    static const std::int32_t axis = 1;
    auto* axis_t = net.add_constant(Dims{}, Weights(DataType::kINT32, &axis, 1, nullptr))->get_output(0);
    auto* cum = net.add_cumulative(pr->get_output(0), axis_t, CumulativeOperation::kSUM, true, false);
    static const std::int32_t cells[2][2] = {{0, 1}, {1, 3}};
    auto* cells_t = net.add_constant({2, 2}, Weights(DataType::kINT32, cells, 4, nullptr))->get_output(0);
    static const float rows_of_nine[18] = {};
    auto* upd_t = net.add_constant({2, 3, 3}, Weights(DataType::kFLOAT, rows_of_nine, 18, nullptr))->get_output(0);
    auto* sct = net.add_scatter(cum->get_output(0), cells_t, upd_t, ScatterMode::kND);
    sct->get_output(0)->set_name("scattered");
    net.mark_output(sct->get_output(0));
    auto* hot_i = net.add_shape(x)->get_output(0);
    static const float onoff[2] = {0.f, 1.f};
    auto* onoff_t = net.add_constant({2}, Weights(DataType::kFLOAT, onoff, 2, nullptr))->get_output(0);
    static const std::int64_t depth = 7;
    auto* depth_t = net.add_constant(Dims{}, Weights(DataType::kINT64, &depth, 1, nullptr))->get_output(0);
    auto* hot = net.add_one_hot(hot_i, onoff_t, depth_t, 0);
    hot->get_output(0)->set_name("one_hot");
    net.mark_output(hot->get_output(0));
    static const std::int64_t one_axis[1] = {0};
    auto* one_axis_t = net.add_constant({1}, Weights(DataType::kINT64, one_axis, 1, nullptr))->get_output(0);
    auto* unsq = net.add_unsqueeze(x, one_axis_t);
    auto* sq = net.add_squeeze(unsq->get_output(0), one_axis_t);
    static const std::int32_t lens[4] = {2, 0, 1, 2};
    auto* lens_t = net.add_constant({4}, Weights(DataType::kINT32, lens, 4, nullptr))->get_output(0);
    auto* rev = net.add_reverse_sequence(sq->get_output(0), lens_t);
    rev->get_output(0)->set_name("reversed");
    net.mark_output(rev->get_output(0));
    auto* fill = net.add_fill({5}, FillOperation::kRANDOM_NORMAL, DataType::kHALF);
    fill->get_output(0)->set_name("filled");
    net.mark_output(fill->get_output(0));
    // A loop (unrolled: gathers, the body per iteration, an identity) and a conditional (a select).
    Loop* loop = net.add_loop();
    auto* slice = loop->add_iterator(x, 0);
    static const float zeros[4 * 6 * 6] = {};
    auto* running = loop->add_recurrence(net.add_constant({4, 6, 6}, Weights(DataType::kFLOAT, zeros, 144, nullptr))->get_output(0));
    auto* acc = net.add_elementwise(running->get_output(0), slice->get_output(0), ElementWiseOperation::kSUM);
    net.set_layer_input(running, 1, acc->get_output(0));
    auto* summed = loop->add_loop_output(running->get_output(0), LoopOutput::kLAST_VALUE);
    IfConditional* branch = net.add_if_conditional();
    auto* positive = net.add_reduce(summed->get_output(0), ReduceOperation::kSUM, 0b111, false)->get_output(0);
    branch->set_condition(net.add_elementwise(positive, net.add_constant(Dims{}, Weights(DataType::kFLOAT, zeros, 1, nullptr))->get_output(0),
                                              ElementWiseOperation::kGREATER)->get_output(0));
    auto* negated = net.add_unary(summed->get_output(0), UnaryOperation::kNEG)->get_output(0);
    auto* chosen = branch->add_output(summed->get_output(0), negated);
    chosen->get_output(0)->set_name("looped");
    net.mark_output(chosen->get_output(0));
  };
  EngineBuild d;
  d.inputs["x"] = InputShape::fixed({2, 4, 6, 6});
  d.inputs["t"] = InputShape::fixed({1, 4, 32});
  d.settings.device = "cpu";
  return build_serialized_engine(graph, d);
}

struct Seed {
  std::vector<std::byte> bytes;
  plan::Plan plan;
  Seed() : bytes(seed_engine()), plan(plan::read_engine(bytes, "seed", nullptr)) {}
};

const Seed& seed() {
  static const Seed s;
  return s;
}

// Runs the engine once on zero inputs where its arena, scratch and I/O are small.
void run_small(const Engine& e) {
  const auto doc = nlohmann::json::parse(e.plan_json());
  const auto& memory = doc.at("memory");
  if (memory.at("arena_bytes").get<std::uint64_t>() > (64u << 20) ||
      memory.at("workspace_bytes").get<std::uint64_t>() > (64u << 20))
    return;
  std::map<std::string, std::vector<std::byte>> buffers;
  std::map<std::string, HostTensorView> inputs;
  for (const auto& t : e.io_tensors()) {
    if (t.mode != TensorIOMode::kINPUT) continue;
    const std::int64_t n = t.opt.volume();
    if (n < 0 || n > (1 << 20) || !t.opt.all_known()) return;
    auto& b = buffers[t.name];
    b.assign(static_cast<std::size_t>(n) * element_size(t.type) + 1, std::byte{0});
    inputs[t.name] = {t.type, t.opt, b.data()};
  }
  auto x = e.create_execution();
  for (const auto& [name, view] : inputs) x.set_input_shape(name, view.dims);
  std::map<std::string, std::size_t> output_bytes;
  for (const auto& t : e.io_tensors())
    if (t.mode == TensorIOMode::kOUTPUT) {
      const std::int64_t n = x.tensor_shape(t.name).volume();
      if (n < 0 || n > (1 << 20)) return;
      output_bytes[t.name] = static_cast<std::size_t>(n) * element_size(t.type);
    }
  const auto returned = x.run(inputs);
  // Every byte of every output must be written: run twice into caller buffers filled first with
  // one pattern, then another; a byte that kept its pattern was never written (the engine would
  // hand back whatever memory held: uninitialised heap from run()). A third run, into the first
  // pattern again, must repeat the first: an engine whose results drift from run to run changes
  // its own state (a node writing a weight, say).
  for (auto& [name, view] : inputs) x.set_tensor_address(name, const_cast<void*>(view.data));
  std::map<std::string, std::vector<std::byte>> first, second, third;
  for (auto* outs : {&first, &second, &third}) {
    const auto fill = outs == &second ? std::byte{0xA5} : std::byte{0x00};
    for (const auto& [name, n] : output_bytes) {
      auto& b = (*outs)[name];
      b.assign(n + 1, fill);
      x.set_tensor_address(name, b.data());
    }
    x.enqueue();
  }
  for (const auto& [name, n] : output_bytes) {
    if (std::memcmp(first[name].data(), third[name].data(), n) != 0) {
      std::fprintf(stderr, "fuzz_engine_plan: output %s changes from run to run on the same inputs (the engine "
                   "changes its own state, a weight say)\n", name.c_str());
      std::abort();
    }
    if (std::memcmp(first[name].data(), second[name].data(), n) != 0) {
      std::fprintf(stderr, "fuzz_engine_plan: output %s was not fully written by the run\n", name.c_str());
      std::abort();
    }
    // The engine is deterministic: what run() handed back must be what it wrote into the
    // caller's buffers (an array run() allocated and never wrote holds ASan's malloc fill).
    const auto it = returned.find(name);
    if (it == returned.end() || it->second.nbytes != n || std::memcmp(it->second.data.get(), first[name].data(), n) != 0) {
      std::fprintf(stderr, "fuzz_engine_plan: output %s from run() differs from the same run into caller buffers\n",
                   name.c_str());
      std::abort();
    }
  }
}

}  // namespace

extern "C" int LLVMFuzzerInitialize(int*, char***) {
  if (const char* dir = std::getenv("TENSORACLE_FUZZ_WRITE_SEEDS")) {
    std::filesystem::create_directories(dir);
    std::ofstream(std::filesystem::path(dir) / "plan.json") << plan::plan_to_json(seed().plan).dump();
  }
  // The seed itself must open and run, or the target would only ever see refusals.
  const auto bytes = plan::write_engine_with(seed().plan, [](nlohmann::json&) {});
  run_small(Engine::deserialize(bytes));
  return 0;
}

extern "C" int LLVMFuzzerTestOneInput(const std::uint8_t* data, std::size_t size) {
  const std::string text(reinterpret_cast<const char*>(data), size);
  std::vector<std::byte> bytes;
  try {
    bytes = plan::write_engine_text(seed().plan, text);
  } catch (const Error&) {
    return 0;  // not text the container can store as metadata (invalid UTF-8, say)
  }
  try {
    Engine e = Engine::deserialize(bytes);
    (void)e.layers();
    (void)e.plan_json();
    run_small(e);
  } catch (const Error& e) {
    // refused, with a message: what an engine file that says something wrong should get
    if (std::getenv("TENSORACLE_FUZZ_VERBOSE")) std::fprintf(stderr, "refused: %s\n", e.what());
  }
  return 0;
}

// ---- the structure-aware mutator -------------------------------------------------------

extern "C" std::size_t LLVMFuzzerMutate(std::uint8_t* data, std::size_t size, std::size_t max_size);

namespace {

using json = nlohmann::json;

// Every value of the document, in order (pointers stay valid until the document changes).
void collect(json& j, std::vector<json*>& all) {
  all.push_back(&j);
  if (j.is_structured())
    for (auto& child : j) collect(child, all);
}

const std::vector<std::string>& vocabulary() {
  static const std::vector<std::string> words = {
      "matrix_multiply", "elementwise", "activation", "convolution", "pooling", "shuffle", "reduce", "softmax",
      "concatenation", "slice", "gather", "plugin", "float32", "float16", "int8", "fp8", "int64", "bool", "input",
      "output", "constant", "activation", "cpu.gemm.onednn", "cpu.gemm.openblas", "cpu.conv.onednn",
      "channels_last", "linear", "kernel", "cpu.conv.im2col_gemm", "cuda.gemm.cublaslt", "cpu.pooling", "SUM",
      "RELU", "MAX", "value.0", "value.1", "x", "y", ""};
  return words;
}

json interesting_number(std::mt19937_64& rng, const json& old) {
  static const std::int64_t small[] = {0, -1, 1, 2, 3, 4, 5, 7, 8, 255, 256, 257, 4096, 65536};
  static const std::int64_t large[] = {std::int64_t{1} << 31, (std::int64_t{1} << 31) - 1, std::int64_t{1} << 32,
                                       std::int64_t{1} << 40, std::int64_t{1} << 62, INT64_MAX, INT64_MIN, 1000000000};
  switch (rng() % 5) {
    case 0: return small[rng() % std::size(small)];
    case 1: return large[rng() % std::size(large)];
    case 2: return ~std::uint64_t{0} - rng() % 512;  // wraps when rounded up or added to
    case 3:  // a neighbour, in wrapping arithmetic (the old value may be INT64_MAX)
      if (old.is_number_integer())
        return static_cast<std::int64_t>(static_cast<std::uint64_t>(old.get<std::int64_t>()) + rng() % 5 - 2);
      return static_cast<std::int64_t>(rng() % 16);
    default: return static_cast<double>(rng() % 1000) / 7.0;
  }
}

// A size as an attacker picks one: 0, tiny, off by a little, or a value that wraps when
// rounded up to an alignment or added to another size.
json interesting_size(std::mt19937_64& rng, const json& old) {
  switch (rng() % 6) {
    case 0: return 0;
    case 1: return static_cast<std::int64_t>(1 + rng() % 64);
    case 2: return ~std::uint64_t{0} - rng() % 256;
    case 3: return std::uint64_t{1} << (32 + rng() % 32);
    case 4:
      if (old.is_number_unsigned()) return old.get<std::uint64_t>() / (2 + rng() % 8);
      return 0;
    default: return interesting_number(rng, old);
  }
}

// An id as an attacker picks one: another value of the graph (often one of a special role),
// or one out of range.
json interesting_id(std::mt19937_64& rng, const json& doc) {
  const auto count = doc.contains("values") && doc["values"].is_array() ? doc["values"].size() : 8;
  switch (rng() % 6) {
    case 0: return -1;
    case 1: return static_cast<std::int64_t>(count + rng() % 3);  // just past the end
    case 2: return rng() % 2 ? std::int64_t{1000000000} : INT64_MIN;
    default: return static_cast<std::int64_t>(rng() % (count ? count : 1));
  }
}

json* member(json& j, const char* key) {
  return j.is_object() && j.contains(key) ? &j[key] : nullptr;
}

// A random element of the array `doc[key]`, or null.
json* element(json& doc, const char* key, std::mt19937_64& rng) {
  json* a = member(doc, key);
  if (!a || !a->is_array() || a->empty()) return nullptr;
  return &(*a)[rng() % a->size()];
}

// Every reference to value `from` (nodes' inputs and epilogue operands, the graph's inputs and
// outputs, I/O entries) becomes `to`.
void replace_id(json& doc, const json& from, const json& to) {
  const auto swap_in = [&](json* a) {
    if (a && a->is_array())
      for (auto& id : *a)
        if (id == from) id = to;
  };
  if (json* nodes = member(doc, "nodes"); nodes && nodes->is_array())
    for (auto& n : *nodes) {
      swap_in(member(n, "inputs"));
      if (json* ep = member(n, "epilogue"); ep && ep->is_array())
        for (auto& op : *ep)
          if (json* operand = member(op, "operand"); operand && *operand == from) *operand = to;
    }
  swap_in(member(doc, "inputs"));
  swap_in(member(doc, "outputs"));
  if (json* io = member(doc, "io"); io && io->is_array())
    for (auto& t : *io)
      if (json* v = member(t, "value"); v && *v == from) *v = to;
}

// Removes the nodes that write value `id`; values' producers after them are renumbered.
void erase_writers(json& doc, const json& id) {
  json* nodes = member(doc, "nodes");
  json* values = member(doc, "values");
  if (!nodes || !nodes->is_array()) return;
  for (std::size_t i = nodes->size(); i-- > 0;) {
    json* out = member((*nodes)[i], "output");
    if (!out || *out != id) continue;
    nodes->erase(nodes->begin() + static_cast<std::ptrdiff_t>(i));
    if (values && values->is_array())
      for (auto& v : *values)
        if (json* producer = member(v, "producer"); producer && producer->is_number_integer()) {
          const auto p = producer->get<std::int64_t>();
          if (p == static_cast<std::int64_t>(i)) *producer = -1;
          else if (p > static_cast<std::int64_t>(i)) *producer = p - 1;
        }
  }
}

// One change that knows the plan's schema, often to several fields at once so that the
// checks between them agree and the change reaches what runs: sizes, a node's inputs or
// output, the graph's inputs and outputs, two I/O entries made one. False when the document
// lacks what the change needs.
bool mutate_plan(json& doc, std::mt19937_64& rng) {
  switch (rng() % 7) {
    case 0: {  // a size of the memory plan, or a value's arena offset or size
      if (rng() % 2 == 0) {
        json* memory = member(doc, "memory");
        if (!memory || !memory->is_object() || memory->empty()) return false;
        auto it = memory->begin();
        std::advance(it, static_cast<std::ptrdiff_t>(rng() % memory->size()));
        *it = interesting_size(rng, *it);
        return true;
      }
      json* v = element(doc, "values", rng);
      json* field = v ? member(*v, rng() % 2 ? "arena_offset" : "max_bytes") : nullptr;
      if (!field) return false;
      *field = interesting_size(rng, *field);
      return true;
    }
    case 1: {  // a node's inputs lose one, become empty, or name another value
      json* node = element(doc, "nodes", rng);
      json* inputs = node ? member(*node, "inputs") : nullptr;
      if (!inputs || !inputs->is_array()) return false;
      switch (rng() % 3) {
        case 0: *inputs = json::array(); break;
        case 1:
          if (!inputs->empty()) inputs->erase(inputs->begin() + static_cast<std::ptrdiff_t>(rng() % inputs->size()));
          break;
        default:
          if (inputs->empty()) inputs->push_back(interesting_id(rng, doc));
          else (*inputs)[rng() % inputs->size()] = interesting_id(rng, doc);
      }
      return true;
    }
    case 2: {  // a node writes another value (a constant, an input, another node's output);
               // linked: that value says so, the old one says nobody does, and readers follow
      json* node = element(doc, "nodes", rng);
      json* output = node ? member(*node, "output") : nullptr;
      json* values = member(doc, "values");
      if (!output || !values || !values->is_array() || values->empty()) return false;
      const std::int64_t index = node - &doc["nodes"][0];
      const json old_id = *output;
      const auto in_range = [&](const json& v) {
        return v.is_number_integer() && v.get<std::int64_t>() >= 0 && v.get<std::uint64_t>() < values->size() &&
               (*values)[v.get<std::size_t>()].is_object();
      };
      // Half the time a value of the output's own shape, as an attacker who wants the shape
      // checks to pass picks it.
      json id = interesting_id(rng, doc);
      if (in_range(old_id) && rng() % 2 == 0) {
        std::vector<std::int64_t> same;
        const json& dims = (*values)[old_id.get<std::size_t>()].value("dims", json());
        for (std::size_t i = 0; i < values->size(); ++i)
          if (i != old_id.get<std::size_t>() && (*values)[i].is_object() && (*values)[i].value("dims", json()) == dims)
            same.push_back(static_cast<std::int64_t>(i));
        if (!same.empty()) id = same[rng() % same.size()];
      }
      *output = id;
      if (rng() % 4 == 0 || !in_range(old_id) || !in_range(id)) return true;
      json& was = (*values)[old_id.get<std::size_t>()];
      json& now = (*values)[id.get<std::size_t>()];
      now["producer"] = index;
      was["producer"] = -1;
      if (rng() % 4 != 0) {
        now["is_output"] = was.value("is_output", false);
        was["is_output"] = false;
        was["arena_offset"] = -1;
      }
      if (rng() % 4 != 0) replace_id(doc, old_id, id);
      return true;
    }
    case 3: {  // an epilogue operand names another value
      json* node = element(doc, "nodes", rng);
      json* epilogue = node ? member(*node, "epilogue") : nullptr;
      if (!epilogue || !epilogue->is_array() || epilogue->empty()) return false;
      json& op = (*epilogue)[rng() % epilogue->size()];
      if (!op.is_object()) return false;
      op["operand"] = interesting_id(rng, doc);
      return true;
    }
    case 4: {  // the graph's inputs or outputs name another value
      json* id = element(doc, rng() % 2 ? "inputs" : "outputs", rng);
      if (!id) return false;
      *id = interesting_id(rng, doc);
      return true;
    }
    case 5: {  // two I/O entries of one mode name one value (with its shape, so the shapes agree)
      json* io = member(doc, "io");
      if (!io || !io->is_array() || io->size() < 2) return false;
      json& to = (*io)[rng() % io->size()];
      const json& from = (*io)[rng() % io->size()];
      if (&to == &from || !to.is_object() || !from.is_object()) return false;
      const json old_value = to.contains("value") ? to["value"] : json();
      for (const char* key : {"value", "dims", "min", "opt", "max", "type"})
        if (from.contains(key)) to[key] = from[key];
      if (json* outputs = member(doc, "outputs"); outputs && outputs->is_array() && rng() % 4 != 0) {
        for (auto& id : *outputs)
          if (id == old_value) id = to["value"];
        if (rng() % 2 == 0) erase_writers(doc, old_value);  // the layer whose output is gone
      }
      return true;
    }
    default: {  // a value's role, type or shape changes (its readers and writers do not)
      json* v = element(doc, "values", rng);
      if (!v || !v->is_object()) return false;
      switch (rng() % 3) {
        case 0: (*v)["role"] = std::vector<const char*>{"input", "constant", "output", "activation"}[rng() % 4]; break;
        case 1: (*v)["is_output"] = rng() % 2 == 0; break;
        default: {
          json* dims = member(*v, "dims");
          if (!dims || !dims->is_array() || dims->empty()) return false;
          (*dims)[rng() % dims->size()] = rng() % 2 ? json(static_cast<std::int64_t>(rng() % 5)) : interesting_number(rng, 0);
        }
      }
      return true;
    }
  }
}

// One structural change to the document; false when it found nothing to change.
bool mutate(json& doc, std::mt19937_64& rng) {
  if (rng() % 3 == 0) return mutate_plan(doc, rng);
  std::vector<json*> all;
  collect(doc, all);
  json& target = *all[rng() % all.size()];
  const json& donor = *all[rng() % all.size()];
  switch (rng() % 8) {
    case 0:  // a number
      if (!target.is_number()) return false;
      target = rng() % 4 == 0 && donor.is_number() ? donor : interesting_number(rng, target);
      return true;
    case 1:  // an array loses, repeats or swaps elements, or becomes empty
      if (!target.is_array()) return false;
      if (target.empty() || rng() % 5 == 0) {
        target = target.empty() ? json::array({interesting_number(rng, 0)}) : json::array();
      } else if (rng() % 3 == 0) {
        target.erase(target.begin() + static_cast<std::ptrdiff_t>(rng() % target.size()));
      } else if (rng() % 2 == 0) {
        target.push_back(json(target[rng() % target.size()]));
      } else {
        std::swap(target[rng() % target.size()], target[rng() % target.size()]);
      }
      return true;
    case 2:  // an object loses a key, or a key takes another value of the document
      if (!target.is_object() || target.empty()) return false;
      {
        auto it = target.begin();
        std::advance(it, static_cast<std::ptrdiff_t>(rng() % target.size()));
        if (rng() % 2 == 0) target.erase(it);
        else *it = json(donor);
      }
      return true;
    case 3:  // a string
      if (!target.is_string()) return false;
      target = rng() % 3 == 0 && donor.is_string() ? donor : json(vocabulary()[rng() % vocabulary().size()]);
      return true;
    case 4:  // a value of another kind
      if (&target == &doc) return false;
      target = rng() % 2 == 0 ? json(nullptr) : json(donor);
      return true;
    case 5: {  // nesting, a few levels or far past any sane limit (rarely: one finds it)
      if (&target == &doc || rng() % 4 != 0) return false;
      const int levels = rng() % 4 == 0 ? 100 + static_cast<int>(rng() % 2000) : 1 + static_cast<int>(rng() % 4);
      json wrapped = json(target);
      for (int i = 0; i < levels; ++i) wrapped = json::array({std::move(wrapped)});
      target = std::move(wrapped);
      return true;
    }
    case 6:  // an id-like field takes another id (nodes' inputs and outputs, values' producers)
      if (!target.is_number_integer()) return false;
      target = static_cast<std::int64_t>(rng() % 24) - 2;
      return true;
    default:  // a boolean flips
      if (!target.is_boolean()) return false;
      target = !target.get<bool>();
      return true;
  }
}

}  // namespace

extern "C" std::size_t LLVMFuzzerCustomMutator(std::uint8_t* data, std::size_t size, std::size_t max_size,
                                               unsigned int random_seed) {
  std::mt19937_64 rng(random_seed);
  if (rng() % 8 != 0) {
    // The mutator walks and dumps the document recursively: only documents of bounded depth.
    // A quarter of the time, and whenever the input no longer parses (byte-level mutation broke
    // it), it starts again from the network's own plan: a change that needs the rest of the
    // document intact must not depend on a corpus entry that still has it.
    const std::string_view text(reinterpret_cast<const char*>(data), size);
    auto doc = core::json_nesting_depth(text, 4000) >= 0 ? json::parse(text, nullptr, false) : json(json::value_t::discarded);
    if (doc.is_discarded() || !doc.is_structured() || rng() % 4 == 0) doc = plan::plan_to_json(seed().plan);
    if (!doc.is_discarded() && doc.is_structured()) {
      bool changed = false;
      for (int tries = 0, n = 1 + static_cast<int>(rng() % 3); tries < 64 && n > 0; ++tries) {
        // A linked edit reads fields that earlier changes may have given another type (a
        // value's is_output a number, say): nlohmann then throws, and that change is skipped.
        try {
          if (mutate(doc, rng)) {
            changed = true;
            --n;
          }
        } catch (const nlohmann::json::exception&) {
        }
      }
      if (changed) {
        const std::string text = doc.dump();
        if (text.size() <= max_size) {
          std::memcpy(data, text.data(), text.size());
          return text.size();
        }
      }
    }
  }
  return LLVMFuzzerMutate(data, size, max_size);
}
