// The CUDA backend's channels-last values (label gpu): cuDNN's channels-last plans, values kept
// channels-last between convolutions and poolings, and the direct first-layer kernel, against
// the CPU backend.
#include <gtest/gtest.h>

#include <cmath>
#include <optional>
#include <random>

#include "cuda_test_helpers.h"
#include "nlohmann/json.hpp"
#include "plan/plan.h"
#include "st_helpers.h"
#include "tensoracle/builder.h"
#include "tensoracle/engine.h"
#include "tensoracle/errors.h"

using namespace tensoracle;
using tensoracle::testing::fixed_engine;
using tensoracle::testing::output_y;
using tensoracle::testing::to_16bit;
using tensoracle::testing::uniform;

namespace {

// n integers drawn uniformly from [lo, hi], as floats (sums of their products stay exact).
std::vector<float> integers(std::size_t n, int lo, int hi, unsigned seed) {
  std::mt19937 rng(seed);
  std::uniform_int_distribution<int> d(lo, hi);
  std::vector<float> v(n);
  for (auto& e : v) e = static_cast<float>(d(rng));
  return v;
}

// How many of the n 16-bit values differ between a and b; `first`: the lowest index that does.
std::size_t differing(const std::uint16_t* a, const std::uint16_t* b, std::size_t n, std::size_t& first) {
  std::size_t differ = 0;
  for (std::size_t i = n; i-- > 0;)
    if (a[i] != b[i]) ++differ, first = i;
  return differ;
}

}  // namespace

// Channels-last cuDNN plans (the tactic's channels_last, cudnn_tactic.h): x and the kernel transposed into
// the workspace with their channels padded (3 -> 4, 12 -> 16, 64 stays), y transposed back with
// the bias and the activation. TENSORACLE_CUDNN_LAYOUT=nhwc makes the builder take them at any
// level (the timing alone picks them where they win); "nchw" keeps them out of the timing.
// float16 and bfloat16 agree with the CPU backend; reopened engines rebuild the same plan.
TEST(Cuda, ChannelsLastCudnnConvolutionsMatchTheCpuBackend) {
  struct Case {
    Dims x, kernel, stride, pad;
    int k;
    bool bias;
    std::optional<ActivationType> act;
    int padded;  // the channel count of the copies
  };
  const std::vector<Case> cases = {
      {{2, 3, 30, 30}, {7, 7}, {2, 2}, {3, 3}, 16, true, ActivationType::kRELU, 4},  // a ResNet stem
      {{2, 64, 9, 9}, {3, 3}, {1, 1}, {1, 1}, 32, true, std::nullopt, 64},
      {{1, 12, 10, 11}, {3, 3}, {1, 2}, {0, 1}, 8, false, ActivationType::kGELU_ERF, 16},
      {{3, 8, 40}, {3}, {1}, {1}, 16, true, ActivationType::kSIGMOID, 8},  // 1-D: 2-D with a leading 1
  };
  struct Env {  // TENSORACLE_CUDNN_LAYOUT for this test only
    explicit Env(const char* v) { setenv("TENSORACLE_CUDNN_LAYOUT", v, 1); }
    ~Env() { unsetenv("TENSORACLE_CUDNN_LAYOUT"); }
  };
  int seed = 300;
  for (const Case& c : cases) {
    for (DataType t : {DataType::kHALF, DataType::kBF16}) {
      std::int64_t kvol = 1;
      for (int i = 0; i < c.kernel.rank(); ++i) kvol *= c.kernel[i];
      auto narrow = [&](const std::vector<float>& v) { return to_16bit(t, v); };
      const auto w = narrow(uniform(static_cast<std::size_t>(c.k * c.x[1] * kvol), -0.3f, 0.3f, ++seed));
      const auto b = narrow(uniform(static_cast<std::size_t>(c.k), -0.5f, 0.5f, ++seed));
      const auto x = narrow(uniform(static_cast<std::size_t>(c.x.volume()), -1.f, 1.f, ++seed));
      auto graph = [&](Network& net) {
        auto* in = net.add_input("x", t, c.x);
        auto* l = net.add_convolution_nd(in, c.k, c.kernel, Weights(t, w.data(), static_cast<std::int64_t>(w.size()), nullptr),
                                         c.bias ? Weights(t, b.data(), c.k, nullptr) : Weights());
        ConvolutionParams p = l->get();
        p.stride = c.stride;
        p.pre_padding = p.post_padding = c.pad;
        l->set(p);
        auto* y = l->get_output(0);
        if (c.act) y = net.add_activation(y, *c.act)->get_output(0);
        y->set_name("y");
        net.mark_output(y);
      };
      const std::string what = "x " + c.x.str() + " kernel " + c.kernel.str() + (t == DataType::kHALF ? " float16" : " bfloat16");
      auto build = [&](const char* device, int level) { return fixed_engine(graph, c.x, device, level); };
      auto values = [&](const std::vector<std::byte>& bytes) { return output_y(bytes, t, c.x, x.data()); };
      const std::vector<float> ref = values(build("cpu", 0));
      const std::string field = " channels_last:" + std::to_string(c.padded) + " ";
      for (int level : {0, 3}) {
        std::vector<std::byte> bytes;
        {
          Env env("nhwc");
          bytes = build("cuda:0", level);
        }
        Engine e = Engine::deserialize(bytes);
        if (nlohmann::json::parse(e.target_json()).value("cudnn", 0) == 0) GTEST_SKIP() << "cuDNN is not available on this machine";
        const std::string tactic = e.layers()[0].tactic;
        ASSERT_NE(tactic.find(field), std::string::npos) << what << " level " << level << ": " << tactic;
        const std::vector<float> got = values(bytes);
        ASSERT_EQ(got.size(), ref.size()) << what;
        // The result rounded to the type before the bias (as every cuDNN plan): 1-2 ulp.
        const double tol = t == DataType::kHALF ? 4e-3 : 2.5e-2;
        for (std::size_t i = 0; i < got.size(); ++i)
          ASSERT_NEAR(got[i], ref[i], tol * (1 + std::fabs(ref[i]))) << what << " level " << level << " at " << i << " (" << tactic << ")";
        EXPECT_EQ(values(bytes), got) << what << ": reopened";
      }
      Env env("nchw");
      const std::string tactic = Engine::deserialize(build("cuda:0", 3)).layers()[0].tactic;
      EXPECT_EQ(tactic.find(" channels_last:"), std::string::npos) << what << ": " << tactic;
    }
  }
}

// Channels-last values between convolutions (Value::layout): a residual
// network whose convolutions read and write channels-last values (as data, and as the residual
// operand of a fused add), starting from an NCHW input used as a residual and ending in a
// network output read back as NCHW, in float16 and bfloat16, against the CPU backend; the same
// engine with every cuDNN plan replaced by the backend's own path (packed copies around it);
// TENSORACLE_CUDNN_LAYOUT=nchw keeps every value packed; a tactic that stores a network output
// channels-last is a CorruptEngineError.
TEST(Cuda, ChannelsLastValuesBetweenConvolutionsMatchTheCpuBackend) {
  const Dims xd{2, 16, 12, 12};
  struct Env {
    explicit Env(const char* v) { setenv("TENSORACLE_CUDNN_LAYOUT", v, 1); }
    ~Env() { unsetenv("TENSORACLE_CUDNN_LAYOUT"); }
  };
  int seed = 500;
  for (DataType t : {DataType::kHALF, DataType::kBF16}) {
    auto narrow = [&](const std::vector<float>& v) { return to_16bit(t, v); };
    std::vector<std::vector<std::uint16_t>> weights;  // kept alive while building
    auto conv = [&](Network& net, Tensor* in, int cin, int k, int size, int stride, bool bias) {
      weights.push_back(narrow(uniform(static_cast<std::size_t>(k * cin * size * size), -0.25f, 0.25f, ++seed)));
      const auto& w = weights.back();
      Weights b;
      if (bias) {
        weights.push_back(narrow(uniform(static_cast<std::size_t>(k), -0.3f, 0.3f, ++seed)));
        b = Weights(t, weights.back().data(), k, nullptr);
      }
      auto* l = net.add_convolution_nd(in, k, {size, size}, Weights(t, w.data(), static_cast<std::int64_t>(w.size()), nullptr), b);
      ConvolutionParams p = l->get();
      p.stride = {stride, stride};
      p.pre_padding = p.post_padding = {size / 2, size / 2};
      l->set(p);
      return l->get_output(0);
    };
    auto relu = [](Network& net, Tensor* v) { return net.add_activation(v, ActivationType::kRELU)->get_output(0); };
    auto add = [](Network& net, Tensor* a, Tensor* b) { return net.add_elementwise(a, b, ElementWiseOperation::kSUM)->get_output(0); };
    auto graph = [&](Network& net) {
      weights.clear();
      weights.reserve(16);  // no reallocation: the network keeps pointers into these
      seed = 500;
      auto* x = net.add_input("x", t, xd);
      auto* a = relu(net, conv(net, x, 16, 16, 3, 1, true));                      // reads x packed
      auto* r1 = relu(net, add(net, conv(net, a, 16, 16, 3, 1, true), x));      // x: a packed residual
      auto* c = relu(net, conv(net, r1, 16, 32, 3, 2, true));                   // stride 2
      auto* d = conv(net, r1, 16, 32, 1, 2, false);                             // 1x1 shortcut
      auto* r2 = relu(net, add(net, d, conv(net, c, 32, 32, 3, 1, true)));      // residual first
      auto* y = add(net, conv(net, r2, 32, 32, 3, 1, false), r2);               // read back as NCHW
      y->set_name("y");
      net.mark_output(y);
    };
    auto x = narrow(uniform(static_cast<std::size_t>(xd.volume()), -1.f, 1.f, 501));
    auto build = [&](const char* device, int level) { return fixed_engine(graph, xd, device, level); };
    auto values = [&](const std::vector<std::byte>& bytes) { return output_y(bytes, t, xd, x.data()); };
    const std::string what = t == DataType::kHALF ? "float16" : "bfloat16";
    const std::vector<float> ref = values(build("cpu", 0));
    // Six layers of products, each result rounded to the type, the last one a sum that cancels:
    // a few ulp of the inputs' magnitude (bfloat16's ulp is 8 times float16's). A wrong layout
    // would put most elements off by about their own size: the mean error is also bounded.
    const double tol = t == DataType::kHALF ? 1e-2 : 8e-2;
    auto expect_close = [&](const std::vector<float>& got, const std::string& how) {
      ASSERT_EQ(got.size(), ref.size()) << what << " " << how;
      double err = 0, mag = 0;
      for (std::size_t i = 0; i < got.size(); ++i) {
        ASSERT_NEAR(got[i], ref[i], tol * (1 + std::fabs(ref[i]))) << what << " " << how << " at " << i;
        err += std::fabs(got[i] - ref[i]);
        mag += std::fabs(ref[i]);
      }
      EXPECT_LT(err, 0.1 * mag) << what << " " << how;
    };
    for (int level : {0, 3}) {
      std::vector<std::byte> bytes;
      if (level == 0) {
        Env env("nhwc");  // level 0 takes channels-last plans only when told to
        bytes = build("cuda:0", 0);
      } else {
        bytes = build("cuda:0", 3);
      }
      Engine e = Engine::deserialize(bytes);
      if (nlohmann::json::parse(e.target_json()).value("cudnn", 0) == 0) GTEST_SKIP() << "cuDNN is not available on this machine";
      const auto layers = e.layers();
      ASSERT_EQ(layers.size(), 6u) << what;
      std::string tactics;
      int chained = 0;
      for (const auto& l : layers) {
        tactics += l.tactic + " -> " + l.output_layout + "\n";
        chained += l.output_layout == "channels_last";
      }
      // Every convolution but the last (a network output) writes channels-last.
      EXPECT_EQ(chained, 5) << what << " level " << level << ":\n" << tactics;
      EXPECT_EQ(layers[5].output_layout, "linear") << what;
      const std::vector<float> got = values(bytes);
      expect_close(got, "level " + std::to_string(level));
      EXPECT_EQ(values(bytes), got) << what << ": reopened";
      if (level != 3) continue;
      // Every cuDNN plan replaced by the backend's own path: same layouts, packed copies around it.
      plan::Plan pl = plan::read_engine(bytes, "test", nullptr);
      for (auto& n : pl.graph.nodes)
        if (auto* cfg = std::get_if<graph::CudnnConvConfig>(&n.tactic.config)) {
          cfg->engine = 999999;
          cfg->knobs.clear();
          cfg->workspace = 0;
        }
      expect_close(values(plan::write_engine(pl)), "own path");
      // A network output stored channels-last (the last node's, with the first node's tactic):
      // malformed.
      plan::Plan bad = plan::read_engine(bytes, "test", nullptr);
      auto& last = bad.graph.nodes.back();
      last.tactic = bad.graph.nodes.front().tactic;
      bad.graph.values[static_cast<std::size_t>(last.output)].layout = graph::Layout::kChannelsLast;
      EXPECT_THROW(Engine::deserialize(plan::write_engine(bad)), CorruptEngineError) << what;
      // A value stored channels-last by the backend's own path (not a cuDNN tactic): malformed.
      plan::Plan own = plan::read_engine(bytes, "test", nullptr);
      own.graph.nodes.front().tactic = graph::Tactic("cuda.convolution");
      EXPECT_THROW(Engine::deserialize(plan::write_engine(own)), CorruptEngineError) << what;
    }
    Env env("nchw");
    const auto bytes = build("cuda:0", 3);
    for (const auto& l : Engine::deserialize(bytes).layers()) EXPECT_EQ(l.output_layout, "linear") << l.tactic;
    expect_close(values(bytes), "nchw");
  }
}

// Poolings reading a convolution's channels-last output (every window path: max, average with
// and without the padding counted, blend, a window over the whole image; 2-D and 1-D; a packed
// output and, read by a convolution, a channels-last one) give the CPU's values bit for bit.
// The convolutions' values are small integers, exact in float16 and bfloat16 on both backends,
// so any difference is the pooling's.
TEST(Cuda, PoolingsOfChannelsLastValuesMatchTheCpuBackendExactly) {
  struct Pool {
    PoolingType type;
    Dims window, stride, pre, post;
    bool exclude;
    float blend;
    const char* name;
  };
  for (DataType t : {DataType::kHALF, DataType::kBF16}) {
    auto narrow = [&](const std::vector<float>& v) { return to_16bit(t, v); };
    for (int rank : {2, 1}) {
      const Dims xd = rank == 2 ? Dims{2, 16, 13, 11} : Dims{2, 16, 29};
      const Dims window = rank == 2 ? Dims{3, 3} : Dims{3}, pad = rank == 2 ? Dims{1, 1} : Dims{1};
      // Data in [-1, 1], kernel in {-1, 0, 1}, bias in [-4, 4]: every value an integer below 160.
      const auto x = narrow(integers(static_cast<std::size_t>(xd.volume()), -1, 1, 601));
      const auto w = narrow(integers(static_cast<std::size_t>(16 * 16 * (rank == 2 ? 9 : 3)), -1, 1, 602));
      const auto bias = narrow(integers(16, -4, 4, 603));
      std::vector<float> eye(16 * 16, 0.f);
      for (int k = 0; k < 16; ++k) eye[static_cast<std::size_t>(k * 16 + k)] = 1.f;
      const auto identity = narrow(eye);
      const std::vector<Pool> pools =
          rank == 2 ? std::vector<Pool>{{PoolingType::kMAX, {3, 3}, {2, 2}, {1, 1}, {1, 1}, true, 0.f, "max"},
                                        {PoolingType::kAVERAGE, {3, 3}, {2, 2}, {1, 1}, {1, 1}, true, 0.f, "average"},
                                        {PoolingType::kAVERAGE, {2, 2}, {2, 2}, {1, 0}, {1, 1}, false, 0.f, "average_padded"},
                                        {PoolingType::kMAX_AVERAGE_BLEND, {3, 2}, {1, 2}, {0, 1}, {0, 1}, true, 0.25f, "blend"},
                                        {PoolingType::kAVERAGE, {13, 11}, {1, 1}, {0, 0}, {0, 0}, true, 0.f, "global"}}
                    : std::vector<Pool>{{PoolingType::kMAX, {3}, {2}, {1}, {1}, true, 0.f, "max"},
                                        {PoolingType::kAVERAGE, {4}, {3}, {2}, {2}, false, 0.f, "average_padded"},
                                        {PoolingType::kMAX_AVERAGE_BLEND, {5}, {2}, {0}, {0}, true, 0.5f, "blend"}};
      auto graph = [&](Network& net) {
        auto* in = net.add_input("x", t, xd);
        auto* c = net.add_convolution_nd(in, 16, window, Weights(t, w.data(), static_cast<std::int64_t>(w.size()), nullptr),
                                         Weights(t, bias.data(), 16, nullptr));
        ConvolutionParams cp = c->get();
        cp.pre_padding = cp.post_padding = pad;
        c->set(cp);
        auto add_pool = [&](const Pool& pool, const char* name) {
          auto* l = net.add_pooling_nd(c->get_output(0), pool.type, pool.window);
          PoolingParams q = l->get();
          q.stride = pool.stride;
          q.pre_padding = pool.pre;
          q.post_padding = pool.post;
          q.average_count_excludes_padding = pool.exclude;
          q.blend_factor = pool.blend;
          l->set(q);
          l->set_name(name);
          return l->get_output(0);
        };
        for (const auto& pool : pools) {
          auto* y = add_pool(pool, pool.name);
          y->set_name(pool.name);
          net.mark_output(y);
        }
        // The first pooling again, read by an identity 1 x 1 convolution: it stores its output
        // channels-last, which the convolution reads in place (exact: one tap of weight 1).
        auto* chained = add_pool(pools.front(), "chained_pool");
        auto* id = net.add_convolution_nd(chained, 16, rank == 2 ? Dims{1, 1} : Dims{1},
                                          Weights(t, identity.data(), static_cast<std::int64_t>(identity.size()), nullptr),
                                          Weights{});
        id->get_output(0)->set_name("chained");
        net.mark_output(id->get_output(0));
      };
      auto build = [&](const char* device) { return fixed_engine(graph, xd, device, 3); };
      auto run = [&](const std::vector<std::byte>& bytes) { return Engine::deserialize(bytes).create_execution().run({{"x", {t, xd, x.data()}}}); };
      const std::string what = std::string(t == DataType::kHALF ? "float16" : "bfloat16") + " rank " + std::to_string(rank);
      const auto bytes = build("cuda:0");
      Engine e = Engine::deserialize(bytes);
      if (nlohmann::json::parse(e.target_json()).value("cudnn", 0) == 0) GTEST_SKIP() << "cuDNN is not available on this machine";
      const auto layers = e.layers();
      ASSERT_EQ(layers.size(), pools.size() + 3) << what;
      EXPECT_EQ(layers[0].output_layout, "channels_last") << what << ": " << layers[0].tactic;
      for (const auto& l : layers) {
        if (l.type != "pooling") continue;  // the network's outputs packed, the chained one not
        EXPECT_EQ(l.tactic, "cuda.pooling") << what << " " << l.name;
        EXPECT_EQ(l.output_layout, l.name == "chained_pool" ? "channels_last" : "linear") << what << " " << l.name;
      }
      const auto ref = run(build("cpu"));
      const auto got = run(bytes);
      std::vector<std::string> names{"chained"};
      for (const auto& pool : pools) names.push_back(pool.name);
      for (const auto& name : names) {
        const auto& a = ref.at(name);
        const auto& b = got.at(name);
        ASSERT_EQ(a.dims, b.dims) << what << " " << name;
        const auto* pa = reinterpret_cast<const std::uint16_t*>(a.data.get());
        const auto* pb = reinterpret_cast<const std::uint16_t*>(b.data.get());
        std::size_t first = 0;
        const std::size_t differ = differing(pa, pb, static_cast<std::size_t>(a.dims.volume()), first);
        EXPECT_EQ(differ, 0u) << what << " " << name << ": first at " << first << " (cpu " << pa[first] << ", cuda "
                              << pb[first] << ")";
      }
    }
  }
}

// A max-pool between channels-last convolutions (ResNet's stem, max-pool and first block) keeps
// the layout: the stem, the pool and the block's convolutions store their outputs channels-last,
// the pool's output read in place as data and as the block's residual; the average pool at the
// end reads a channels-last value into a packed output. The loader refuses a pooling tactic that
// stores a network output channels-last or that it does not know.
TEST(Cuda, AMaxPoolBetweenChannelsLastConvolutionsMatchesTheCpuBackend) {
  const Dims xd{2, 8, 20, 20};
  for (DataType t : {DataType::kHALF, DataType::kBF16}) {
    auto narrow = [&](const std::vector<float>& v) { return to_16bit(t, v); };
    std::vector<std::vector<std::uint16_t>> weights;
    int seed = 700;
    auto conv = [&](Network& net, Tensor* in, int cin, int k, int size, int stride) {
      weights.push_back(narrow(uniform(static_cast<std::size_t>(k * cin * size * size), -0.25f, 0.25f, ++seed)));
      const auto& w = weights.back();
      weights.push_back(narrow(uniform(static_cast<std::size_t>(k), -0.3f, 0.3f, ++seed)));
      auto* l = net.add_convolution_nd(in, k, {size, size}, Weights(t, w.data(), static_cast<std::int64_t>(w.size()), nullptr),
                                       Weights(t, weights.back().data(), k, nullptr));
      ConvolutionParams p = l->get();
      p.stride = {stride, stride};
      p.pre_padding = p.post_padding = {size / 2, size / 2};
      l->set(p);
      return l->get_output(0);
    };
    auto relu = [](Network& net, Tensor* v) { return net.add_activation(v, ActivationType::kRELU)->get_output(0); };
    auto graph = [&](Network& net) {
      weights.clear();
      weights.reserve(16);
      seed = 700;
      auto* x = net.add_input("x", t, xd);
      auto* stem = relu(net, conv(net, x, 8, 16, 5, 2));  // 10 x 10
      auto* pl = net.add_pooling_nd(stem, PoolingType::kMAX, {3, 3});
      PoolingParams q = pl->get();
      q.stride = {2, 2};
      q.pre_padding = q.post_padding = {1, 1};
      pl->set(q);
      auto* p = pl->get_output(0);  // 5 x 5
      auto* a = relu(net, conv(net, p, 16, 16, 3, 1));
      auto* r = relu(net, net.add_elementwise(conv(net, a, 16, 16, 3, 1), p, ElementWiseOperation::kSUM)->get_output(0));
      auto* y = net.add_pooling_nd(r, PoolingType::kAVERAGE, {5, 5})->get_output(0);
      y->set_name("y");
      net.mark_output(y);
    };
    auto x = narrow(uniform(static_cast<std::size_t>(xd.volume()), -1.f, 1.f, 701));
    auto build = [&](const char* device) { return fixed_engine(graph, xd, device, 3); };
    auto values = [&](const std::vector<std::byte>& bytes) { return output_y(bytes, t, xd, x.data()); };
    const std::string what = t == DataType::kHALF ? "float16" : "bfloat16";
    const auto bytes = build("cuda:0");
    Engine e = Engine::deserialize(bytes);
    if (nlohmann::json::parse(e.target_json()).value("cudnn", 0) == 0) GTEST_SKIP() << "cuDNN is not available on this machine";
    const auto layers = e.layers();
    ASSERT_EQ(layers.size(), 5u) << what;
    std::string tactics;
    for (const auto& l : layers) tactics += l.name + ": " + l.tactic + " -> " + l.output_layout + "\n";
    for (std::size_t i : {0, 1, 2, 3}) EXPECT_EQ(layers[i].output_layout, "channels_last") << what << ":\n" << tactics;
    EXPECT_EQ(layers[1].tactic, "cuda.pooling") << what << ":\n" << tactics;
    EXPECT_EQ(layers[4].tactic, "cuda.pooling") << what << ":\n" << tactics;
    EXPECT_EQ(layers[4].output_layout, "linear") << what << ":\n" << tactics;
    // Four layers of products rounded to the type (bfloat16's ulp is 8 times float16's); a wrong
    // layout would put most elements off by about their own size.
    const std::vector<float> ref = values(build("cpu"));
    const std::vector<float> got = values(bytes);
    ASSERT_EQ(got.size(), ref.size());
    const double tol = t == DataType::kHALF ? 1e-2 : 8e-2;
    double err = 0, mag = 0;
    for (std::size_t i = 0; i < got.size(); ++i) {
      ASSERT_NEAR(got[i], ref[i], tol * (1 + std::fabs(ref[i]))) << what << " at " << i;
      err += std::fabs(got[i] - ref[i]);
      mag += std::fabs(ref[i]);
    }
    EXPECT_LT(err, 0.1 * mag) << what;
    EXPECT_EQ(values(bytes), got) << what << ": reopened";
    // Malformed: the average pool (a network output) stored channels-last; a tactic no pooling has.
    {
      plan::Plan bad = plan::read_engine(bytes, "test", nullptr);
      bad.graph.values[static_cast<std::size_t>(bad.graph.nodes.back().output)].layout = graph::Layout::kChannelsLast;
      EXPECT_THROW(Engine::deserialize(plan::write_engine(bad)), CorruptEngineError) << what;
    }
    for (const char* bad_tactic : {"cuda.pooling.nhwc", "cuda.reduce"}) {
      plan::Plan bad = plan::read_engine(bytes, "test", nullptr);
      bad.graph.nodes.back().tactic = graph::Tactic(bad_tactic);
      EXPECT_THROW(Engine::deserialize(plan::write_engine(bad)), CorruptEngineError) << what << ": " << bad_tactic;
    }
    // Stored packed by a builder that keeps NCHW plans: the same values within the tolerance.
    setenv("TENSORACLE_CUDNN_LAYOUT", "nchw", 1);
    const auto packed = build("cuda:0");
    unsetenv("TENSORACLE_CUDNN_LAYOUT");
    for (const auto& l : Engine::deserialize(packed).layers()) EXPECT_EQ(l.output_layout, "linear") << l.tactic;
    const std::vector<float> nchw = values(packed);
    for (std::size_t i = 0; i < got.size(); ++i) ASSERT_NEAR(nchw[i], ref[i], tol * (1 + std::fabs(ref[i]))) << what << " nchw at " << i;
  }
}

// The backend's direct kernel for an image's first layer (3 channels padded to 4, channels-last
// copies, tensor cores; tactic configuration "direct"), taken where TENSORACLE_CONV_DIRECT=1 says
// so: with the bias and a ReLU in the kernel, with another activation as a pass, without bias,
// writing channels-last for a max-pool, with 128 output channels (two blocks of 64), output rows
// longer than one 128-position segment and strides of 2 and (1, 2). Integer data keeps every sum
// exact on both backends, so the results equal the CPU's bit for bit.
TEST(Cuda, TheDirectFirstLayerKernelMatchesTheCpuBackendExactly) {
  struct Env {
    Env() { setenv("TENSORACLE_CONV_DIRECT", "1", 1); }
    ~Env() { unsetenv("TENSORACLE_CONV_DIRECT"); }
  };
  const Dims xd{2, 3, 21, 300};
  for (DataType t : {DataType::kHALF, DataType::kBF16}) {
    auto narrow = [&](const std::vector<float>& v) { return to_16bit(t, v); };
    // |sums| <= 3 * 49 * 4 + 8: integers, exact in float16; bfloat16 rounds the same exact sum once on both.
    const auto x = narrow(integers(static_cast<std::size_t>(xd.volume()), -2, 2, 801));
    const auto w7 = narrow(integers(64 * 3 * 49, -2, 2, 802)), w5 = narrow(integers(128 * 3 * 15, -2, 2, 803));
    const auto b64 = narrow(integers(64, -8, 8, 804));
    for (int variant = 0; variant < 3; ++variant) {
      auto graph = [&](Network& net) {
        auto* in = net.add_input("x", t, xd);
        if (variant < 2) {  // 7 x 7 / 2 with bias, then ReLU (fused) or a leaky ReLU (a pass)
          auto* c = net.add_convolution_nd(in, 64, {7, 7}, Weights(t, w7.data(), static_cast<std::int64_t>(w7.size()), nullptr),
                                           Weights(t, b64.data(), 64, nullptr));
          ConvolutionParams p = c->get();
          p.stride = {2, 2};
          p.pre_padding = p.post_padding = {3, 3};
          c->set(p);
          auto* a = net.add_activation(c->get_output(0), variant == 0 ? ActivationType::kRELU : ActivationType::kLEAKY_RELU);
          if (variant == 1) a->set_alpha(0.125f);
          a->get_output(0)->set_name("y");
          net.mark_output(a->get_output(0));
        } else {  // 5 x 3, stride (1, 2), 128 channels, no bias, into a max-pool (channels-last)
          auto* c = net.add_convolution_nd(in, 128, {5, 3}, Weights(t, w5.data(), static_cast<std::int64_t>(w5.size()), nullptr),
                                           Weights{});
          ConvolutionParams p = c->get();
          p.stride = {1, 2};
          p.pre_padding = p.post_padding = {2, 1};
          c->set(p);
          auto* pl = net.add_pooling_nd(c->get_output(0), PoolingType::kMAX, {3, 3});
          PoolingParams q = pl->get();
          q.stride = {2, 2};
          pl->set(q);
          pl->get_output(0)->set_name("y");
          net.mark_output(pl->get_output(0));
        }
      };
      auto build = [&](const char* device) { return fixed_engine(graph, xd, device, 3); };
      const std::string what = std::string(t == DataType::kHALF ? "float16" : "bfloat16") + " variant " + std::to_string(variant);
      std::vector<std::byte> bytes;
      {
        Env env;
        bytes = build("cuda:0");
      }
      Engine e = Engine::deserialize(bytes);
      if (nlohmann::json::parse(e.target_json()).value("cudnn", 0) == 0) GTEST_SKIP() << "cuDNN is not available on this machine";
      const auto layers = e.layers();
      ASSERT_FALSE(layers.empty());
      EXPECT_NE(layers[0].tactic.find(" channels_last:4 "), std::string::npos) << what << ": " << layers[0].tactic;
      EXPECT_NE(layers[0].tactic.find(" direct"), std::string::npos) << what << ": " << layers[0].tactic;
      EXPECT_EQ(layers[0].output_layout == "channels_last", variant == 2) << what << ": " << layers[0].tactic;
      auto run = [&](const std::vector<std::byte>& b) { return Engine::deserialize(b).create_execution().run({{"x", {t, xd, x.data()}}}); };
      const auto ref = run(build("cpu"));
      const auto got = run(bytes);
      const auto& ra = ref.at("y");
      const auto& ga = got.at("y");
      ASSERT_EQ(ra.dims, ga.dims) << what;
      const auto* pa = reinterpret_cast<const std::uint16_t*>(ra.data.get());
      const auto* pb = reinterpret_cast<const std::uint16_t*>(ga.data.get());
      std::size_t first = 0;
      const std::size_t differ = differing(pa, pb, static_cast<std::size_t>(ra.dims.volume()), first);
      EXPECT_EQ(differ, 0u) << what << ": first at " << first << " (cpu " << pa[first] << ", cuda " << pb[first] << ")";
      EXPECT_EQ(run(bytes).at("y").dims, ga.dims) << what;  // reopened
    }
  }
}
