// A node's tactic as the plan stores it (graph/tactic.h: one strict reader for every backend's
// tactics) and the CUDA backend's reading of a cuDNN convolution's (backends/cuda/cudnn_tactic.h),
// then where the CUDA backend stores values channels-last (layouts.h): CUDA-free, so it runs
// here. Engine files are untrusted input: everything but what the writer writes is refused.
#include <gtest/gtest.h>

#include <random>
#include <string>

#include "backends/cuda/cudnn_tactic.h"
#include "backends/cuda/layouts.h"
#include "graph/tactic.h"
#include "tensoracle/errors.h"

using namespace tensoracle;
using namespace tensoracle::cuda;
using nlohmann::json;

namespace {

CudnnTactic sample() {
  CudnnTactic t;
  t.shape.type = DataType::kHALF;
  t.shape.x = {32, 64, 56, 56};
  t.shape.w = {64, 64, 3, 3};
  t.shape.y = {32, 64, 56, 56};
  t.shape.stride = {1, 1};
  t.shape.dilation = {1, 1};
  t.shape.pre = {1, 1};
  t.shape.post = {1, 1};
  t.shape.accumulate = true;
  t.config = "62,2=4,13=0,18=0,25=1,27=7,28=1";
  t.workspace = 4096;
  return t;
}

// A float16 ResNet stem run channels-last, its 3 input channels padded to 4.
CudnnTactic channels_last_sample() {
  CudnnTactic t;
  t.shape = {DataType::kHALF, {8, 3, 224, 224}, {64, 3, 7, 7}, {8, 64, 112, 112}, {2, 2}, {1, 1}, {3, 3}, {3, 3},
             false, 4};
  t.config = "5,2=1";
  t.workspace = 0;
  return t;
}

// Whether the plan's reader takes `j`; when it does, it must write back exactly `j`.
bool reads(const json& j) {
  try {
    const graph::Tactic t = graph::tactic_of(j);
    EXPECT_EQ(graph::tactic_json(t), j);
    return true;
  } catch (const CorruptEngineError&) {
    return false;
  }
}

// `j` with field `key` set to `v` (or removed, for a discarded value).
json with(json j, const std::string& key, const json& v) {
  if (v.is_discarded()) j.erase(key);
  else j[key] = v;
  return j;
}

const json kRemoved = json::value_t::discarded;

}  // namespace

TEST(Tactic, RoundTripsEveryKindTheBackendsWrite) {
  const std::string hex = std::string(64, '0') + std::string(64, 'f');
  std::vector<graph::Tactic> tactics = {
      graph::Tactic("cpu.gemm.onednn"),
      graph::Tactic("cuda.reduce.split"),
      graph::Tactic(graph::CublasLtConfig{}),
      graph::Tactic(graph::CublasLtConfig{graph::CublasLtConfig::Precision::kInt8, 1, hex, std::nullopt}),
      graph::Tactic(graph::CublasLtConfig{graph::CublasLtConfig::Precision::kFp8, 0, "", std::uint64_t{0}}),
      graph::Tactic(graph::CublasLtConfig{graph::CublasLtConfig::Precision::kNative, 2, hex, std::uint64_t{1048320}}),
      graph::Tactic(graph::FusedFp8GemmConfig{2}),
      graph::Tactic(graph::FusedFp8GemmConfig{3}),
      to_tactic(sample()),
      to_tactic(channels_last_sample()),
  };
  CudnnTactic three_d = sample();  // 3-D, bfloat16, no bias, no knobs
  three_d.shape = {DataType::kBF16, {1, 4, 6, 7, 8}, {8, 4, 3, 3, 3}, {1, 8, 6, 7, 8}, {1, 1, 1}, {1, 1, 1}, {1, 1, 1},
                   {1, 1, 1}, false};
  three_d.config = "7";
  tactics.push_back(to_tactic(three_d));
  for (const auto& t : tactics) {
    const json j = graph::tactic_json(t);
    EXPECT_EQ(graph::tactic_of(j), t) << j.dump();
    EXPECT_EQ(graph::tactic_of(json::parse(j.dump())), t) << j.dump();  // through the file's text
  }
  EXPECT_EQ(graph::tactic_json(tactics[0]), json({{"kernel", "cpu.gemm.onednn"}}));
  EXPECT_EQ(graph::tactic_json(tactics[5]).dump(),
            R"({"algo":")" + hex + R"(","epilogue_ops":2,"kernel":"cuda.gemm.cublaslt","precision":"native","workspace":1048320})");
  EXPECT_EQ(graph::tactic_json(tactics[8]).dump(),
            R"({"accumulate":true,"channels_last":0,"dilation":[1,1],"engine":62,"kernel":"cuda.convolution.cudnn",)"
            R"("knobs":[[2,4],[13,0],[18,0],[25,1],[27,7],[28,1]],"post":[1,1],"pre":[1,1],"stride":[1,1],)"
            R"("type":"float16","w":[64,64,3,3],"workspace":4096,"x":[32,64,56,56],"y":[32,64,56,56]})");
  EXPECT_EQ(graph::describe(tactics[3]), "cuda.gemm.cublaslt int8 epilogue:1 algo:" + hex);
  EXPECT_EQ(graph::describe(tactics[6]), "cuda.gemm.sm90.fp8 epilogue:2");
  EXPECT_EQ(graph::describe(graph::Tactic()), "");
  // The backend reads a cuDNN tactic back as it wrote it.
  for (const CudnnTactic& c : {sample(), channels_last_sample(), three_d}) {
    CudnnTactic back;
    ASSERT_TRUE(from_tactic(to_tactic(c), back));
    EXPECT_EQ(back.shape, c.shape);
    EXPECT_EQ(back.config, c.config);
    EXPECT_EQ(back.workspace, c.workspace);
  }
  CudnnTactic back;
  EXPECT_FALSE(from_tactic(tactics[2], back));  // a GEMM's: not a convolution's
}

TEST(Tactic, RefusesWhatItDoesNotWrite) {
  const json gemm = graph::tactic_json(graph::Tactic(graph::CublasLtConfig{}));
  const json conv = graph::tactic_json(to_tactic(sample()));
  const json bad[] = {
      json(),
      json("cpu.gemm.onednn"),  // engine format 1's string
      json::array(),
      json::object(),
      json({{"kernel", 3}}),
      json({{"kernel", "CPU.gemm"}}),
      json({{"kernel", "cpu gemm"}}),
      json({{"kernel", std::string(65, 'a')}}),
      json({{"kernel", ""}, {"algo", ""}}),
      json({{"kernel", "cpu.gemm.onednn"}, {"workspace", 0}}),  // a configuration for a kernel without one
      with(gemm, "precision", "int4"),
      with(gemm, "precision", kRemoved),
      with(gemm, "epilogue_ops", -1),
      with(gemm, "epilogue_ops", 65),
      with(gemm, "epilogue_ops", 1.0),
      with(gemm, "epilogue_ops", "1"),
      with(gemm, "algo", "ABCD"),
      with(gemm, "algo", "abc"),
      with(gemm, "algo", 12),
      with(gemm, "workspace", -1),
      with(gemm, "workspace", "0"),
      with(gemm, "other", 1),
      json({{"kernel", "cuda.gemm.sm90.fp8"}, {"epilogue_ops", 1}}),
      json({{"kernel", "cuda.gemm.sm90.fp8"}, {"epilogue_ops", 4}}),
      json({{"kernel", "cuda.gemm.sm90.fp8"}}),
      json({{"kernel", "cuda.gemm.sm90.fp8"}, {"epilogue_ops", 3}, {"algo", ""}}),
      with(conv, "type", "int8"),
      with(conv, "type", "float64"),
      with(conv, "x", json({32, 64, 56})),                    // rank 3
      with(conv, "x", json({32, 64, 0, 56})),                 // empty dim
      with(conv, "x", json({32, 64, 56, 56, 1, 1})),
      with(conv, "x", json({32, 64, 56, std::uint64_t{1} << 41})),
      with(conv, "x", json({32, 64, 56, -1})),
      with(conv, "stride", json({1})),                         // spatial rank mismatch
      with(conv, "stride", json({0, 1})),
      with(conv, "pre", json({-1, 1})),
      with(conv, "accumulate", 1),
      with(conv, "engine", -62),
      with(conv, "engine", "cudnn"),
      with(conv, "knobs", json({json({2})})),
      with(conv, "knobs", json({json({-2, 4})})),
      with(conv, "knobs", json({json({2, 4, 5})})),
      with(conv, "workspace", -1),
      with(conv, "workspace", kRemoved),
      with(conv, "engine", "direct"),  // the direct kernel with cuDNN's knobs
  };
  for (const auto& j : bad) EXPECT_FALSE(reads(j)) << j.dump();
  try {
    graph::tactic_of(with(gemm, "epilogue_ops", 65));
  } catch (const CorruptEngineError& e) {
    EXPECT_STREQ(e.what(), "[engine] its plan has a tactic whose 'epilogue_ops' (65) is out of range");
  }
}

// Random edits of good tactics' text (bytes changed, inserted, removed, truncated): the reader
// accepts only documents that write back to themselves (fuzz_tactic does the same on arbitrary
// bytes, with the sanitizers).
TEST(Tactic, RandomEditsReadOnlyToCanonicalForms) {
  const std::string good[] = {graph::tactic_json(to_tactic(sample())).dump(),
                              graph::tactic_json(to_tactic(channels_last_sample())).dump(),
                              graph::tactic_json(graph::Tactic(graph::CublasLtConfig{
                                  graph::CublasLtConfig::Precision::kFp8, 1, "00ff", std::uint64_t{7}})).dump()};
  const std::string alphabet = "0123456789,:[]{}\"-.etrufalsn";
  std::mt19937 rng(7);
  int accepted = 0;
  for (int i = 0; i < 20000; ++i) {
    std::string s = good[i % 3];
    for (int e = 0, edits = 1 + static_cast<int>(rng() % 3); e < edits && !s.empty(); ++e) {
      const std::size_t at = rng() % s.size();
      const char c = alphabet[rng() % alphabet.size()];
      switch (rng() % 4) {
        case 0: s[at] = c; break;
        case 1: s.insert(s.begin() + static_cast<std::ptrdiff_t>(at), c); break;
        case 2: s.erase(at, 1); break;
        default: s.resize(at); break;
      }
    }
    const json j = json::parse(s, nullptr, false);
    if (!j.is_discarded() && reads(j)) ++accepted;
  }
  EXPECT_GT(accepted, 0);  // e.g. a digit changed inside a number
}

// The channels-last field: only where the builder writes it (groups 1, no accumulation, the
// padded count within 8 of the channels).
TEST(CudnnTactic, RefusesChannelsLastItDoesNotWrite) {
  const json good = graph::tactic_json(to_tactic(channels_last_sample()));
  for (int l : {3, 8, 10}) EXPECT_TRUE(reads(with(good, "channels_last", l))) << l;  // 3 to 10 channels hold 3
  const json bad[] = {
      with(good, "channels_last", 2),     // fewer than the 3 channels
      with(good, "channels_last", 11),    // 8 or more beyond them
      with(good, "channels_last", -4),
      with(good, "accumulate", true),     // accumulating onto a copy: never written
      with(good, "w", json({64, 1, 7, 7})),  // groups
  };
  for (const auto& j : bad) EXPECT_FALSE(reads(j)) << j.dump();
}

// The direct kernel (engine "direct": the backend's own kernel for few input channels) is read
// only for the problems it runs: channels-last with 4 padded channels, float16/bfloat16, 2-D,
// no groups, a multiple of 64 output channels, dilation 1, windows up to 32, strides up to 16,
// int-sized. (The plan's reader takes the others; the backend refuses them.)
TEST(CudnnTactic, TheDirectKernelsConfigurationOnlyForItsProblems) {
  CudnnTactic t = channels_last_sample();
  t.config = std::string(kDirectConfig);
  EXPECT_TRUE(direct_conv_supported(t.shape));
  const graph::Tactic tactic = to_tactic(t);
  EXPECT_FALSE(std::get<graph::CudnnConvConfig>(tactic.config).engine.has_value());
  EXPECT_EQ(graph::tactic_json(tactic)["engine"], "direct");
  CudnnTactic back;
  ASSERT_TRUE(from_tactic(tactic, back));
  EXPECT_EQ(back.config, "direct");
  EXPECT_EQ(back.shape, t.shape);
  auto refused = [&](const char* why, auto edit) {
    CudnnTactic u = t;
    edit(u.shape);
    EXPECT_FALSE(direct_conv_supported(u.shape)) << why;
    CudnnTactic b;
    EXPECT_FALSE(from_tactic(to_tactic(u), b)) << why;
  };
  refused("float32", [](CudnnConvShape& s) { s.type = DataType::kFLOAT; });
  refused("8 padded channels", [](CudnnConvShape& s) { s.channels_last = 8; });
  refused("packed", [](CudnnConvShape& s) { s.channels_last = 0; });
  refused("96 output channels", [](CudnnConvShape& s) { s.w[0] = s.y[1] = 96; });
  refused("dilation 2", [](CudnnConvShape& s) { s.dilation = {2, 1}; });
  refused("a 33-wide window", [](CudnnConvShape& s) { s.w[3] = 33; });
  refused("stride 17", [](CudnnConvShape& s) { s.stride = {1, 17}; });
  refused("groups", [](CudnnConvShape& s) { s.w[1] = 1; });
  refused("3-D", [](CudnnConvShape& s) {
    s = {DataType::kHALF, {1, 3, 6, 7, 8}, {64, 3, 3, 3, 3}, {1, 64, 6, 7, 8}, {1, 1, 1}, {1, 1, 1}, {1, 1, 1}, {1, 1, 1},
         false, 4};
  });
  refused("2^31 output elements", [](CudnnConvShape& s) { s.x[0] = s.y[0] = 4096; });
  // Found by the fuzzer: the sizes' products overflowed before they were bounded.
  refused("a batch of 6466666666666666666", [](CudnnConvShape& s) { s.y[0] = 6466666666666666666; });
  refused("another batch in y", [](CudnnConvShape& s) { s.y[0] = 7; });
  refused("an image 2^40 wide", [](CudnnConvShape& s) { s.x[3] = std::int64_t{1} << 40; });
  // Shared memory past 200 KiB: a 32 x 32 window at stride 16.
  refused("too wide a tile", [](CudnnConvShape& s) {
    s.w[2] = s.w[3] = 32;
    s.stride = {16, 16};
    s.x[2] = s.x[3] = 1024;
    s.y[2] = s.y[3] = 61;
  });
}

// The builder now describes a strided convolution's padding after as symmetric where that
// gives the same output; engines that stored the least padding the last window needs describe
// the same problem, and run the same cuDNN plan. Anything else is another problem.
TEST(CudnnTactic, PaddingAfterThatChangesNothingIsTheSameProblem) {
  CudnnConvShape least = sample().shape;  // 7x7 stride 2 stem: 224 -> 112 with pre 3
  least.x = {64, 3, 224, 224};
  least.w = {64, 3, 7, 7};
  least.y = {64, 64, 112, 112};
  least.stride = {2, 2};
  least.pre = {3, 3};
  least.post = {2, 2};
  CudnnConvShape symmetric = least;
  symmetric.post = {3, 3};
  EXPECT_TRUE(same_cudnn_problem(symmetric, least));
  EXPECT_TRUE(same_cudnn_problem(least, symmetric));
  EXPECT_TRUE(same_cudnn_problem(least, least));
  CudnnConvShape other = least;
  other.post = {1, 2};  // the last window would read past the padding
  EXPECT_FALSE(same_cudnn_problem(least, other));
  other.post = {4, 2};  // a larger output would follow
  EXPECT_FALSE(same_cudnn_problem(least, other));
  other.post = {-1, 2};
  EXPECT_FALSE(same_cudnn_problem(least, other));
  other = symmetric;
  other.pre = {2, 3};  // any other field differing: another problem
  EXPECT_FALSE(same_cudnn_problem(symmetric, other));
  other = symmetric;
  other.accumulate = !symmetric.accumulate;
  EXPECT_FALSE(same_cudnn_problem(symmetric, other));
  other = symmetric;
  other.post = {3};  // malformed sizes: never the same
  EXPECT_FALSE(same_cudnn_problem(symmetric, other));
  EXPECT_FALSE(same_cudnn_problem(other, symmetric));
  other = symmetric;
  other.stride = {0, 2};
  EXPECT_FALSE(same_cudnn_problem(other, other));
}

// ---- channels-last values (layouts.h) -----------------------------------------------------

namespace {

// x -> conv0 -> a -> conv1 (+ x, fused) -> r -> pool -> out (a network output); float16.
struct Chain {
  graph::Graph g;
  Chain() {
    const graph::TensorDesc act{DataType::kHALF, Dims{2, 16, 8, 8}}, w{DataType::kHALF, Dims{16 * 16 * 9}};
    auto value = [&](const std::string& name, graph::TensorDesc d, int producer) {
      graph::Value v;
      v.name = name;
      v.desc = d;
      v.producer = producer;
      g.values.push_back(v);
      return static_cast<int>(g.values.size()) - 1;
    };
    const int x = value("x", act, -1), w0 = value("w0", w, -1), a = value("a", act, 0), w1 = value("w1", w, -1),
              r = value("r", act, 1), out = value("out", act, 2);
    g.values[static_cast<std::size_t>(x)].is_input = true;
    g.values[static_cast<std::size_t>(out)].is_output = true;
    g.inputs = {x};
    g.outputs = {out};
    graph::Node conv0;
    conv0.name = "conv0";
    conv0.params = ConvolutionParams{};
    conv0.inputs = {x, w0};
    conv0.main_desc = act;
    conv0.output = a;
    graph::Node conv1 = conv0;
    conv1.name = "conv1";
    conv1.inputs = {a, w1};
    conv1.output = r;
    graph::EpilogueOp add;
    add.layer = "add";
    add.params = ElementWiseParams{ElementWiseOperation::kSUM};
    add.operand = x;
    add.desc = act;
    conv1.epilogue = {add};
    graph::Node pool;
    pool.name = "pool";
    pool.params = PoolingParams{};
    pool.inputs = {r};
    pool.main_desc = act;
    pool.output = out;
    g.nodes = {conv0, conv1, pool};
  }
  // Node `i` on a cuDNN tactic, its output stored channels-last or not.
  void store(std::size_t i, bool channels_last) {
    g.nodes[i].tactic = to_tactic(channels_last_sample());
    g.values[static_cast<std::size_t>(g.nodes[i].output)].layout =
        channels_last ? graph::Layout::kChannelsLast : graph::Layout::kLinear;
  }
  CudnnConvShape shape(DataType type = DataType::kHALF, std::int64_t k = 16) const {
    CudnnConvShape s;
    s.type = type;
    s.x = {2, 16, 8, 8};
    s.w = {k, 16, 3, 3};
    s.y = {2, k, 8, 8};
    return s;
  }
  std::vector<graph::TensorDesc> inputs(const graph::Node& n) const {
    std::vector<graph::TensorDesc> d;
    for (int v : n.all_inputs()) d.push_back(g.values[static_cast<std::size_t>(v)].desc);
    return d;
  }
  bool chain(const graph::Node& n, const CudnnConvShape& s) const {
    const auto in = inputs(n);
    return chain_output(g, n, s, in, n.main_desc);
  }
};

}  // namespace

// A value's layout is Value::layout, which the builder sets with its producer's tactic; the
// loader accepts a channels-last output only from a convolution on cuDNN's tactic or a pooling
// over a channels-last value, with readers as channels_last_readers_ok asks.
TEST(ChannelsLastValues, AreTheValuesLayoutWhereItsWriterMayStoreIt) {
  Chain c;
  EXPECT_FALSE(channels_last_value(c.g, 0));  // the network input
  EXPECT_FALSE(channels_last_value(c.g, 2));
  c.store(0, false);
  EXPECT_FALSE(channels_last_value(c.g, 2));
  c.store(0, true);
  EXPECT_TRUE(channels_last_value(c.g, 2));
  std::string why;
  EXPECT_TRUE(channels_last_writer_ok(c.g, c.g.nodes[0], &why)) << why;
  c.g.nodes[0].tactic = graph::Tactic("cuda.convolution");  // the backend's own path never stores it so
  EXPECT_FALSE(channels_last_writer_ok(c.g, c.g.nodes[0], &why));
  EXPECT_NE(why.find("not a cuDNN convolution's"), std::string::npos) << why;
  // A pooling over a packed value, then over a channels-last one (its output a network output:
  // refused by the readers' check).
  EXPECT_FALSE(channels_last_writer_ok(c.g, c.g.nodes[2], &why));
  EXPECT_EQ(why, "its input is not");
  c.store(1, true);
  EXPECT_FALSE(channels_last_writer_ok(c.g, c.g.nodes[2], &why));
  EXPECT_NE(why.find("network output"), std::string::npos) << why;
}

// What the loader accepts for a node whose output is stored channels-last: a convolution or a pooling without
// epilogue layers writes it; only convolutions and poolings read the value, as data, or
// convolutions as an elementwise epilogue operand; never the network, a kernel or a bias input,
// a quantize's scale, or another layer.
TEST(ChannelsLastValues, OnlyConvolutionsAndPoolingsMayReadThem) {
  Chain c;
  std::string why;
  EXPECT_TRUE(channels_last_readers_ok(c.g, c.g.nodes[0], &why)) << why;
  EXPECT_TRUE(channels_last_readers_ok(c.g, c.g.nodes[1], &why)) << why;  // the pooling reads r
  EXPECT_FALSE(channels_last_readers_ok(c.g, c.g.nodes[2], &why));          // the pooling's output
  EXPECT_NE(why.find("network output"), std::string::npos) << why;
  {
    Chain d;  // r read by an activation instead of the pooling
    d.g.nodes[2].params = ActivationParams{};
    EXPECT_FALSE(channels_last_readers_ok(d.g, d.g.nodes[1], &why));
    EXPECT_NE(why.find("layer 'pool' reads it as input 0"), std::string::npos) << why;
    d.g.values[5].is_output = false;  // nor may the activation write one
    EXPECT_FALSE(channels_last_readers_ok(d.g, d.g.nodes[2], &why));
    EXPECT_NE(why.find("neither a convolution nor a pooling"), std::string::npos) << why;
  }
  {
    Chain d;  // a pooling with a fused epilogue layer
    d.g.values[5].is_output = false;
    d.g.nodes[2].epilogue = {graph::EpilogueOp{}};
    d.g.nodes[2].epilogue[0].params = ActivationParams{};
    EXPECT_FALSE(channels_last_readers_ok(d.g, d.g.nodes[2], &why));
    EXPECT_NE(why.find("fused into its epilogue"), std::string::npos) << why;
  }
  {
    Chain d;  // r read by nothing but the network
    d.g.nodes.pop_back();
    d.g.values[4].is_output = true;
    EXPECT_FALSE(channels_last_readers_ok(d.g, d.g.nodes[1], &why));
    EXPECT_NE(why.find("network output"), std::string::npos) << why;
  }
  {
    Chain d;  // a as conv1's fused residual too
    d.g.nodes[1].epilogue[0].operand = 2;
    EXPECT_TRUE(channels_last_readers_ok(d.g, d.g.nodes[0], &why)) << why;
    d.g.nodes[1].epilogue[0].params = QuantizeParams{};  // as a quantize's scale
    EXPECT_FALSE(channels_last_readers_ok(d.g, d.g.nodes[0], &why));
    EXPECT_NE(why.find("input 2"), std::string::npos) << why;
  }
  {
    Chain d;  // a as conv1's kernel
    d.g.nodes[1].inputs = {0, 2};
    EXPECT_FALSE(channels_last_readers_ok(d.g, d.g.nodes[0], &why));
    EXPECT_NE(why.find("layer 'conv1' reads it as input 1"), std::string::npos) << why;
  }
}

// Where the builder stores a convolution's output channels-last.
TEST(ChannelsLastValues, TheBuilderChainsConvolutionsOfOneTypeWithoutGroups) {
  Chain c;
  EXPECT_TRUE(c.chain(c.g.nodes[0], c.shape()));
  EXPECT_FALSE(c.chain(c.g.nodes[0], c.shape(DataType::kFLOAT)));
  EXPECT_FALSE(c.chain(c.g.nodes[0], c.shape(DataType::kHALF, 12)));  // readers would pad channels
  EXPECT_TRUE(c.chain(c.g.nodes[1], c.shape()));  // a pooling of its type reads it
  {
    Chain d;  // a pooling of another type
    d.g.nodes[2].main_desc.type = DataType::kFLOAT;
    EXPECT_FALSE(d.chain(d.g.nodes[1], d.shape()));
  }
  {
    Chain d;  // groups: the copies hold C / groups channels per kernel
    CudnnConvShape s = d.shape();
    s.w[1] = 8;
    EXPECT_FALSE(d.chain(d.g.nodes[0], s));
  }
  {
    Chain d;  // a reader with groups
    std::get<ConvolutionParams>(d.g.nodes[1].params).num_groups = 2;
    EXPECT_FALSE(d.chain(d.g.nodes[0], d.shape()));
  }
  {
    Chain d;  // a reader of another type
    d.g.nodes[1].main_desc.type = DataType::kBF16;
    EXPECT_FALSE(d.chain(d.g.nodes[0], d.shape()));
  }
  {
    Chain d;  // read as a residual whose dims differ from the reader's result
    d.g.nodes[1].epilogue[0].operand = 2;
    EXPECT_TRUE(d.chain(d.g.nodes[0], d.shape()));
    d.g.nodes[1].main_desc.dims = Dims{2, 16, 1, 1};
    EXPECT_FALSE(d.chain(d.g.nodes[0], d.shape()));
  }
  {
    Chain d;  // its own epilogue operand broadcasts: not once the result is channels-last
    d.g.nodes[2].inputs = {4};
    d.g.nodes.back().params = ConvolutionParams{};
    d.g.values[5].is_output = true;
    d.g.values[0].desc.dims = Dims{1, 16, 1, 1};
    EXPECT_FALSE(d.chain(d.g.nodes[1], d.shape()));
    d.g.values[0].desc.dims = Dims{1, 1, 1, 1};  // a single value: fine
    EXPECT_TRUE(d.chain(d.g.nodes[1], d.shape()));
  }
  {
    Chain d;  // read by nothing
    d.g.nodes[1].inputs = {0, 3};
    EXPECT_FALSE(d.chain(d.g.nodes[0], d.shape()));
  }
}

namespace {

// Chain with the pooling's output read by one more convolution (conv2 -> y, the network output).
Chain pooled_chain() {
  Chain c;
  c.g.values[5].is_output = false;
  graph::Value y = c.g.values[5];
  y.name = "y";
  y.producer = 3;
  y.is_output = true;
  c.g.values.push_back(y);  // 6
  c.g.outputs = {6};
  graph::Node conv2 = c.g.nodes[0];
  conv2.name = "conv2";
  conv2.inputs = {5, 3};
  conv2.output = 6;
  c.g.nodes.push_back(conv2);
  c.store(1, true);  // r channels-last
  return c;
}

}  // namespace

// Where the builder stores a pooling's output channels-last: it reads a channels-last value and
// its readers would take the value in place, as a convolution's readers must.
TEST(ChannelsLastValues, APoolingBetweenChainedConvolutionsKeepsTheLayout) {
  const Chain c = pooled_chain();
  EXPECT_TRUE(pooling_chain_output(c.g, c.g.nodes[2]));
  EXPECT_FALSE(pooling_chain_output(c.g, c.g.nodes[1]));  // not a pooling
  {
    Chain d = c;  // its input packed
    d.store(1, false);
    EXPECT_FALSE(pooling_chain_output(d.g, d.g.nodes[2]));
  }
  for (DataType t : {DataType::kFLOAT, DataType::kINT8}) {
    Chain d = c;
    d.g.values[5].desc.type = t;
    EXPECT_FALSE(pooling_chain_output(d.g, d.g.nodes[2]));
  }
  {
    Chain d = c;  // 12 channels: a reader would pad them
    d.g.values[5].desc.dims = Dims{2, 12, 4, 4};
    EXPECT_FALSE(pooling_chain_output(d.g, d.g.nodes[2]));
    d.g.values[5].desc.dims = Dims{2, 24, 4, 4};
    EXPECT_TRUE(pooling_chain_output(d.g, d.g.nodes[2]));
  }
  {
    Chain d = c;  // an epilogue layer
    d.g.nodes[2].epilogue = {graph::EpilogueOp{}};
    d.g.nodes[2].epilogue[0].params = ActivationParams{};
    EXPECT_FALSE(pooling_chain_output(d.g, d.g.nodes[2]));
  }
  {
    Chain d = c;  // its reader a convolution with groups, or of another type
    std::get<ConvolutionParams>(d.g.nodes[3].params).num_groups = 2;
    EXPECT_FALSE(pooling_chain_output(d.g, d.g.nodes[2]));
    d = c;
    d.g.nodes[3].main_desc.type = DataType::kBF16;
    EXPECT_FALSE(pooling_chain_output(d.g, d.g.nodes[2]));
  }
  {
    Chain d = c;  // its output a network output too
    d.g.values[5].is_output = true;
    EXPECT_FALSE(pooling_chain_output(d.g, d.g.nodes[2]));
  }
  {
    Chain d = c;  // read by nothing
    d.g.nodes[3].inputs = {4, 3};
    EXPECT_FALSE(pooling_chain_output(d.g, d.g.nodes[2]));
  }
  Chain d = c;  // so stored, the loader's check holds
  d.g.values[5].layout = graph::Layout::kChannelsLast;
  std::string why;
  EXPECT_TRUE(channels_last_writer_ok(d.g, d.g.nodes[2], &why)) << why;
  EXPECT_TRUE(channels_last_value(d.g, 5));
}
