// How the CUDA backend writes a cuDNN convolution (backends/cuda/cudnn_tactic.h) and a matrix
// multiply (backends/cuda/gemm_tactic.h) into an engine's tactic and reads them back:
// CUDA-free, so it runs here. Engine files are untrusted input: everything but the format
// functions' own output is refused.
#include <gtest/gtest.h>

#include <random>
#include <string>

#include "backends/cuda/cudnn_tactic.h"
#include "backends/cuda/gemm_tactic.h"
#include "backends/cuda/layouts.h"

using namespace tensoracle;
using namespace tensoracle::cuda;

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

// `text` with the first `from` replaced by `to` (from must occur).
std::string replaced_in(std::string text, const std::string& from, const std::string& to) {
  text.replace(text.find(from), from.size(), to);
  return text;
}

}  // namespace

TEST(CudnnTactic, RoundTrips) {
  for (int variant = 0; variant < 5; ++variant) {
    CudnnTactic t = variant >= 3 ? channels_last_sample() : sample();
    t.out_channels_last = variant == 4;
    if (variant == 1) {  // 3-D, bfloat16, no bias, no knobs
      t.shape = {DataType::kBF16, {1, 4, 6, 7, 8}, {8, 4, 3, 3, 3}, {1, 8, 6, 7, 8}, {1, 1, 1}, {1, 1, 1}, {1, 1, 1},
                 {1, 1, 1}, false};
      t.config = "7";
      t.workspace = 0;
    }
    if (variant == 2) t.shape.type = DataType::kFLOAT;
    const std::string text = format_cudnn_tactic(t);
    CudnnTactic back;
    ASSERT_TRUE(parse_cudnn_tactic(text, back)) << text;
    EXPECT_EQ(back.shape, t.shape) << text;
    EXPECT_EQ(back.config, t.config);
    EXPECT_EQ(back.workspace, t.workspace);
    EXPECT_EQ(back.out_channels_last, t.out_channels_last);
    EXPECT_EQ(format_cudnn_tactic(back), text);
  }
  EXPECT_EQ(format_cudnn_tactic(sample()),
            "cuda.convolution.cudnn/t:1/x:32x64x56x56/w:64x64x3x3/y:32x64x56x56/s:1x1/d:1x1/p:1x1/q:1x1/a:1"
            "/cfg:62,2=4,13=0,18=0,25=1,27=7,28=1/ws:4096");
  EXPECT_EQ(format_cudnn_tactic(channels_last_sample()),
            "cuda.convolution.cudnn/t:1/x:8x3x224x224/w:64x3x7x7/y:8x64x112x112/s:2x2/d:1x1/p:3x3/q:3x3/a:0/l:4"
            "/cfg:5,2=1/ws:0");
  CudnnTactic chained = channels_last_sample();
  chained.out_channels_last = true;
  EXPECT_EQ(format_cudnn_tactic(chained),
            "cuda.convolution.cudnn/t:1/x:8x3x224x224/w:64x3x7x7/y:8x64x112x112/s:2x2/d:1x1/p:3x3/q:3x3/a:0/l:4/o:1"
            "/cfg:5,2=1/ws:0");
  CudnnTactic packed = sample();  // a packed plan writing a channels-last output
  packed.shape.accumulate = false;
  packed.out_channels_last = true;
  EXPECT_EQ(format_cudnn_tactic(packed),
            "cuda.convolution.cudnn/t:1/x:32x64x56x56/w:64x64x3x3/y:32x64x56x56/s:1x1/d:1x1/p:1x1/q:1x1/a:0/o:1"
            "/cfg:62,2=4,13=0,18=0,25=1,27=7,28=1/ws:4096");
}

// The output-layout field: "o:1", after a:0 and the channels-last field if any.
TEST(CudnnTactic, RefusesOutputLayoutItDoesNotWrite) {
  CudnnTactic chained = channels_last_sample();
  chained.out_channels_last = true;
  const std::string good = format_cudnn_tactic(chained);
  for (const std::string& s : {good, replaced_in(good, "/l:4/o:1", "/o:1")}) {
    CudnnTactic t;
    ASSERT_TRUE(parse_cudnn_tactic(s, t)) << s;
    EXPECT_TRUE(t.out_channels_last);
    EXPECT_EQ(format_cudnn_tactic(t), s);
  }
  const std::string bad[] = {
      replaced_in(good, "o:1", "o:0"),
      replaced_in(good, "o:1", "o:2"),
      replaced_in(good, "o:1", "o:"),
      replaced_in(good, "o:1", "o:01"),
      replaced_in(good, "/l:4/o:1", "/o:1/l:4"),             // out of order
      replaced_in(good, "/o:1", "/o:1/o:1"),
      replaced_in(good, "/o:1/cfg:5,2=1", "/cfg:5,2=1/o:1"),
      replaced_in(format_cudnn_tactic(sample()), "/a:1", "/a:1/o:1"),  // onto a bias written first: never
  };
  for (const auto& s : bad) {
    CudnnTactic t;
    EXPECT_FALSE(parse_cudnn_tactic(s, t)) << s;
  }
}

// The channels-last field: only where the builder writes it (groups 1, no accumulation, the
// padded count within 8 of the channels).
TEST(CudnnTactic, RefusesChannelsLastItDoesNotWrite) {
  const std::string good = format_cudnn_tactic(channels_last_sample());
  auto replaced = [&](const std::string& from, const std::string& to) { return replaced_in(good, from, to); };
  for (const char* l : {"l:3", "l:8", "l:10"}) {  // 3 to 10 channels hold 3
    CudnnTactic t;
    EXPECT_TRUE(parse_cudnn_tactic(replaced("l:4", l), t)) << l;
  }
  const std::string bad[] = {
      replaced("l:4", "l:0"),
      replaced("l:4", "l:2"),                              // fewer than the 3 channels
      replaced("l:4", "l:11"),                             // 8 or more beyond them
      replaced("l:4", "l:04"),
      replaced("l:4", "l:-4"),
      replaced("l:4", "l:"),
      replaced("a:0", "a:1"),                              // accumulating onto a copy: never written
      replaced("w:64x3x7x7", "w:64x1x7x7"),                // groups
      replaced("/a:0/l:4", "/l:4/a:0"),                    // out of order
      replaced("/l:4/cfg:5,2=1", "/cfg:5,2=1/l:4"),
      replaced("/l:4", "/l:4/l:4"),
  };
  for (const auto& s : bad) {
    CudnnTactic t;
    EXPECT_FALSE(parse_cudnn_tactic(s, t)) << s;
  }
}

TEST(CudnnTactic, RefusesWhatItDoesNotWrite) {
  const std::string good = format_cudnn_tactic(sample());
  auto replaced = [&](const std::string& from, const std::string& to) { return replaced_in(good, from, to); };
  const std::string bad[] = {
      "",
      "cuda.convolution",
      "cuda.convolution.cudnn/",
      good.substr(0, good.size() - 5),                 // cut inside ws
      good + "/",                                      // trailing field separator
      good + "x",                                      // ws not a number
      replaced("t:1", "t:2"),                          // int8: not a float type
      replaced("t:1", "t:-0"),
      replaced("x:32x64x56x56", "x:32x64x56"),         // rank 3
      replaced("x:32x64x56x56", "x:32x64x0x56"),       // empty dim
      replaced("x:32x64x56x56", "x:32x64x56x56x1x1x1x1x1"),
      replaced("x:32x64x56x56", "x:32xx64x56x56"),
      replaced("x:32x64x56x56", "x:32x64x56x99999999999999999999"),
      replaced("s:1x1", "s:1"),                        // spatial rank mismatch
      replaced("s:1x1", "s:0x1"),
      replaced("p:1x1", "p:-1x1"),
      replaced("a:1", "a:2"),
      replaced("cfg:62,", "cfg:-62,"),
      replaced("cfg:62,", "cfg:62,,"),
      replaced("2=4", "2=="),
      replaced("2=4", "=4"),
      replaced("/w:", "/W:"),
      replaced("/s:1x1/d:1x1", "/d:1x1/s:1x1"),       // fields out of order
      replaced("/ws:4096", "/ws:-1"),
      replaced("/ws:4096", ""),
  };
  for (const auto& s : bad) {
    CudnnTactic t;
    EXPECT_FALSE(parse_cudnn_tactic(s, t)) << s;
  }
}

// Random edits of a good tactic (bytes changed, inserted, removed, truncated): the parser
// accepts only strings that format back to themselves, and never reads out of bounds (the
// sanitizers of the fuzz build check that; fuzz_cuda_tactic does the same on arbitrary bytes).
TEST(CudnnTactic, RandomEditsParseOnlyToCanonicalForms) {
  CudnnTactic chained = channels_last_sample();
  chained.out_channels_last = true;
  const std::string good[] = {format_cudnn_tactic(sample()), format_cudnn_tactic(channels_last_sample()),
                              format_cudnn_tactic(chained)};
  const std::string alphabet = "0123456789x/:,=-tawyqpdsclo";
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
    CudnnTactic t;
    if (parse_cudnn_tactic(s, t)) {
      ++accepted;
      EXPECT_EQ(format_cudnn_tactic(t), s);
    }
  }
  EXPECT_GT(accepted, 0);  // e.g. a digit changed inside a number
}

// "cfg:direct" (the backend's own kernel for few input channels) parses only for the problems
// that kernel runs: channels-last with 4 padded channels, float16/bfloat16, 2-D, no groups, a
// multiple of 64 output channels, dilation 1, windows up to 32, strides up to 16, int-sized.
TEST(CudnnTactic, TheDirectKernelsConfigurationOnlyForItsProblems) {
  CudnnTactic t = channels_last_sample();
  t.config = std::string(kDirectConfig);
  EXPECT_TRUE(direct_conv_supported(t.shape));
  for (bool out : {false, true}) {
    t.out_channels_last = out;
    const std::string text = format_cudnn_tactic(t);
    EXPECT_NE(text.find("/l:4/"), std::string::npos) << text;
    CudnnTactic back;
    ASSERT_TRUE(parse_cudnn_tactic(text, back)) << text;
    EXPECT_EQ(back.config, "direct");
    EXPECT_EQ(back.out_channels_last, out);
    EXPECT_EQ(format_cudnn_tactic(back), text);
  }
  t.out_channels_last = false;
  auto refused = [&](const char* why, auto edit) {
    CudnnTactic u = t;
    edit(u.shape);
    EXPECT_FALSE(direct_conv_supported(u.shape)) << why;
    CudnnTactic back;
    EXPECT_FALSE(parse_cudnn_tactic(format_cudnn_tactic(u), back)) << why << ": " << format_cudnn_tactic(u);
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
  // Found by fuzz_cuda_tactic: the sizes' products overflowed before they were bounded.
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
  // A cuDNN configuration that is not a number is still refused.
  CudnnTactic back;
  EXPECT_FALSE(parse_cudnn_tactic(replaced_in(format_cudnn_tactic(t), "cfg:direct", "cfg:direkt"), back));
  EXPECT_FALSE(parse_cudnn_tactic(replaced_in(format_cudnn_tactic(t), "cfg:direct", "cfg:direct,2=1"), back));
}

TEST(GemmTactic, RoundTripsEveryShapeTheBuilderWrites) {
  const std::string hex = std::string(64, '0') + std::string(64, 'f');
  const GemmTactic tactics[] = {
      {"cuda.gemm.cublaslt", "", std::nullopt},
      {"cuda.gemm.cublaslt.epilogue2", "", std::nullopt},
      {"cuda.gemm.cublaslt.int8.epilogue1", hex, std::nullopt},
      {"cuda.gemm.cublaslt.fp8", "", std::uint64_t{0}},
      {"cuda.gemm.cublaslt.epilogue1", hex, std::uint64_t{1048320}},
  };
  for (const auto& t : tactics) {
    const std::string text = format_gemm_tactic(t);
    GemmTactic back;
    ASSERT_TRUE(parse_gemm_tactic(text, back)) << text;
    EXPECT_EQ(back, t) << text;
  }
  EXPECT_EQ(format_gemm_tactic(tactics[4]), "cuda.gemm.cublaslt.epilogue1/algo:" + hex + "/ws:1048320");
}

TEST(GemmTactic, RefusesWhatItDoesNotWrite) {
  const std::string bad[] = {
      "",
      "cuda.gemm",
      "cuda.gemm.cublasLt",
      "cuda.gemm.cublaslt.",
      "cuda.gemm.cublaslt.int4",
      "cuda.gemm.cublaslt.fp8.int8",
      "cuda.gemm.cublaslt.epilogue",
      "cuda.gemm.cublaslt.epilogue0",
      "cuda.gemm.cublaslt.epilogue01",
      "cuda.gemm.cublaslt.epilogue-1",
      "cuda.gemm.cublaslt.epilogue1.int8",
      "cuda.gemm.cublaslt/",
      "cuda.gemm.cublaslt/algo:",
      "cuda.gemm.cublaslt/algo:ABCD",
      "cuda.gemm.cublaslt/algo:12/",
      "cuda.gemm.cublaslt/ws:",
      "cuda.gemm.cublaslt/ws:-1",
      "cuda.gemm.cublaslt/ws:01",
      "cuda.gemm.cublaslt/ws:99999999999999999999999",
      "cuda.gemm.cublaslt/ws:10/algo:12",  // fields out of order
      "cuda.gemm.cublaslt/algo:12/algo:12",
      "cuda.gemm.cublaslt/ws:10/ws:10",
      "cuda.gemm.cublaslt/other:1",
  };
  for (const auto& s : bad) {
    GemmTactic t;
    EXPECT_FALSE(parse_gemm_tactic(s, t)) << s;
  }
}

TEST(GemmTactic, TheFusedFp8GemmsTacticNamesTwoOrThreeOps) {
  for (int ops : {2, 3}) {
    const std::string text = format_fused_fp8_tactic(ops);
    EXPECT_EQ(text, "cuda.gemm.sm90.fp8.epilogue" + std::to_string(ops));
    int back = 0;
    ASSERT_TRUE(parse_fused_fp8_tactic(text, back)) << text;
    EXPECT_EQ(back, ops);
    GemmTactic g;
    EXPECT_FALSE(parse_gemm_tactic(text, g)) << text;  // not a cuBLASLt tactic
  }
  for (const char* bad : {"", "cuda.gemm.sm90.fp8", "cuda.gemm.sm90.fp8.epilogue", "cuda.gemm.sm90.fp8.epilogue1",
                          "cuda.gemm.sm90.fp8.epilogue4", "cuda.gemm.sm90.fp8.epilogue03", "cuda.gemm.sm90.fp8.epilogue-3",
                          "cuda.gemm.sm90.fp8.epilogue3/algo:12", "cuda.gemm.sm90.fp8.epilogue3/ws:0", "cuda.gemm.sm90.fp8.epilogue3 ",
                          "cuda.gemm.sm90.int8.epilogue3", "cuda.gemm.cublaslt.fp8.epilogue3"}) {
    int ops = 0;
    EXPECT_FALSE(parse_fused_fp8_tactic(bad, ops)) << bad;
  }
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
  static std::string tactic(bool out_channels_last) {
    CudnnTactic t = channels_last_sample();
    t.out_channels_last = out_channels_last;
    return format_cudnn_tactic(t);
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

// A value's layout is its producer's tactic; only a convolution's "o:1" makes it channels-last.
TEST(ChannelsLastValues, FollowTheProducersTactic) {
  Chain c;
  EXPECT_FALSE(channels_last_value(c.g, 0));  // the network input: no producer
  EXPECT_FALSE(channels_last_value(c.g, 2));
  c.g.nodes[0].tactic = Chain::tactic(false);
  EXPECT_FALSE(channels_last_value(c.g, 2));
  c.g.nodes[0].tactic = Chain::tactic(true);
  EXPECT_TRUE(channels_last_value(c.g, 2));
  c.g.nodes[0].tactic = Chain::tactic(true) + "x";  // malformed: not channels-last (the loader refuses it)
  EXPECT_FALSE(channels_last_value(c.g, 2));
  // A pooling's own tactic says it; a convolution's tactic on another layer says nothing.
  c.g.nodes[2].tactic = std::string(kPoolingChannelsLastTactic);
  EXPECT_TRUE(channels_last_value(c.g, 5));
  c.g.nodes[2].tactic = "cuda.pooling";
  EXPECT_FALSE(channels_last_value(c.g, 5));
  c.g.nodes[2].tactic = Chain::tactic(true);
  EXPECT_FALSE(channels_last_value(c.g, 5));
  c.g.nodes[2].params = ElementWiseParams{};
  EXPECT_FALSE(channels_last_value(c.g, 5));
  c.g.nodes[0].tactic = std::string(kPoolingChannelsLastTactic);  // on a convolution
  EXPECT_FALSE(channels_last_value(c.g, 2));
}

// What the loader accepts for a node whose tactic says o:1: a convolution or a pooling without
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
  c.g.nodes[1].tactic = Chain::tactic(true);  // r channels-last
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
    d.g.nodes[1].tactic = Chain::tactic(false);
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
  d.g.nodes[2].tactic = std::string(kPoolingChannelsLastTactic);
  std::string why;
  EXPECT_TRUE(channels_last_readers_ok(d.g, d.g.nodes[2], &why)) << why;
  EXPECT_TRUE(channels_last_value(d.g, 5));
}
