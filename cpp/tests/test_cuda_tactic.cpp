// How the CUDA backend writes a cuDNN convolution (backends/cuda/cudnn_tactic.h) and a matrix
// multiply (backends/cuda/gemm_tactic.h) into an engine's tactic and reads them back:
// CUDA-free, so it runs here. Engine files are untrusted input: everything but the format
// functions' own output is refused.
#include <gtest/gtest.h>

#include <random>
#include <string>

#include "backends/cuda/cudnn_tactic.h"
#include "backends/cuda/gemm_tactic.h"

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
