// The CUDA backend's reductions against the CPU backend (label gpu): few outputs split over
// blocks, many outputs in one pass.
#include <gtest/gtest.h>

#include <cmath>
#include <cstring>

#include "core/numeric.h"
#include "plan/plan.h"
#include "st_helpers.h"
#include "tensoracle/builder.h"
#include "tensoracle/engine.h"
#include "tensoracle/errors.h"

using namespace tensoracle;
using tensoracle::testing::uniform;

// Few outputs over many elements (a full reduction, a reduced axis of columns, rows of rows)
// are split over blocks (tactic cuda.reduce.split: partials in the workspace, combined in a
// fixed order) and agree with the CPU in every type and operation: integers and MAX/MIN
// exactly, float sums (double on both sides, grouped differently) to the output type's last
// bit. Many outputs keep cuda.reduce; so does a workspace limit below the partials' scratch;
// an engine from before the split (cuda.reduce) runs unsplit with the same results; another
// tactic is a CorruptEngineError.
TEST(Cuda, ReductionsOfFewOutputsSplitOverBlocksMatchTheCpuBackend) {
  struct Case {
    Dims x;
    std::uint32_t axes;
    bool split;
  };
  const std::vector<Case> cases = {
      {{1 << 22}, 1u, true},                // one row of 4 M elements
      {{3, 1 << 20}, 2u, true},             // three long rows
      {{1 << 16, 64}, 1u, true},            // the first axis of 64 columns (column teams)
      {{512, 8, 1024}, 5u, true},           // 8 outputs over 512 rows of 1024
      {{1 << 16, 8, 16}, 5u, true},         // 8 outputs over rows of 16 (flat positions)
      {{4096, 256}, 2u, false},             // 4096 outputs of 256: one team each, as before
  };
  struct Op {
    DataType type;
    ReduceOperation op;
  };
  const std::vector<Op> ops = {{DataType::kFLOAT, ReduceOperation::kSUM},  {DataType::kFLOAT, ReduceOperation::kAVG},
                               {DataType::kFLOAT, ReduceOperation::kMAX},  {DataType::kFLOAT, ReduceOperation::kPROD},
                               {DataType::kHALF, ReduceOperation::kSUM},   {DataType::kHALF, ReduceOperation::kMIN},
                               {DataType::kBF16, ReduceOperation::kAVG},   {DataType::kINT32, ReduceOperation::kSUM},
                               {DataType::kINT32, ReduceOperation::kMAX},  {DataType::kINT64, ReduceOperation::kSUM}};
  unsigned seed = 900;
  for (const auto& c : cases) {
    for (const auto& o : ops) {
      const std::string what = c.x.str() + " axes " + std::to_string(c.axes) + " " + std::string(type_name(o.type)) + " op " +
                               std::to_string(static_cast<int>(o.op));
      SCOPED_TRACE(what);
      const auto n = static_cast<std::size_t>(c.x.volume());
      // values: floats of both signs (PROD: factors near 1), integers that overflow int32 sums
      const auto f = o.op == ReduceOperation::kPROD ? uniform(n, 0.99999f, 1.00001f, ++seed) : uniform(n, -2.f, 2.f, ++seed);
      std::vector<std::byte> data(n * element_size(o.type));
      for (std::size_t i = 0; i < n; ++i) {
        switch (o.type) {
          case DataType::kFLOAT: std::memcpy(&data[i * 4], &f[i], 4); break;
          case DataType::kHALF: {
            const std::uint16_t h = core::float_to_half(f[i]);
            std::memcpy(&data[i * 2], &h, 2);
            break;
          }
          case DataType::kBF16: {
            const std::uint16_t h = core::float_to_bf16(f[i]);
            std::memcpy(&data[i * 2], &h, 2);
            break;
          }
          case DataType::kINT32: {
            const auto v = static_cast<std::int32_t>(f[i] * 5e8f);
            std::memcpy(&data[i * 4], &v, 4);
            break;
          }
          default: {
            const auto v = static_cast<std::int64_t>(f[i] * 4e18f);
            std::memcpy(&data[i * 8], &v, 8);
          }
        }
      }
      auto graph = [&](Network& net) {
        auto* x = net.add_input("x", o.type, c.x);
        auto* y = net.add_reduce(x, o.op, c.axes, false)->get_output(0);
        y->set_name("y");
        net.mark_output(y);
      };
      auto build = [&](const char* device, std::uint64_t limit) {
        EngineBuild d;
        d.inputs["x"] = InputShape::fixed(c.x);
        d.settings.device = device;
        d.settings.optimization_level = 0;
        d.settings.workspace_limit = limit;
        return build_serialized_engine(graph, d);
      };
      auto run = [&](const std::vector<std::byte>& bytes) {
        return Engine::deserialize(bytes).create_execution().run({{"x", {o.type, c.x, data.data()}}}).at("y");
      };
      const HostTensor ref = run(build("cpu", 0));
      auto expect_same = [&](const HostTensor& got, const std::string& how) {
        ASSERT_EQ(got.nbytes, ref.nbytes) << how;
        const std::size_t m = ref.nbytes / element_size(o.type);
        for (std::size_t i = 0; i < m; ++i) {
          if (o.type == DataType::kFLOAT) {
            float a, b;
            std::memcpy(&a, &got.data[i * 4], 4);
            std::memcpy(&b, &ref.data[i * 4], 4);
            if (o.op == ReduceOperation::kMAX) ASSERT_EQ(a, b) << how << " at " << i;
            else ASSERT_NEAR(a, b, 2e-7 * (1 + std::fabs(b))) << how << " at " << i;
          } else if (o.type == DataType::kHALF || o.type == DataType::kBF16) {
            std::uint16_t a, b;
            std::memcpy(&a, &got.data[i * 2], 2);
            std::memcpy(&b, &ref.data[i * 2], 2);
            if (o.op == ReduceOperation::kMIN) ASSERT_EQ(a, b) << how << " at " << i;
            else ASSERT_LE(std::abs(int(a) - int(b)), 1) << how << " at " << i << ": bits " << a << " vs " << b;
          } else {
            ASSERT_EQ(std::memcmp(&got.data[i * element_size(o.type)], &ref.data[i * element_size(o.type)],
                                  element_size(o.type)), 0) << how << " at " << i;
          }
        }
      };
      const auto bytes = build("cuda:0", 0);
      Engine e = Engine::deserialize(bytes);
      EXPECT_EQ(e.layers()[0].tactic, c.split ? "cuda.reduce.split" : "cuda.reduce");
      const HostTensor got = run(bytes);
      expect_same(got, "built");
      if (!c.split) continue;
      // Reopened: the same results, bit for bit.
      const HostTensor again = run(bytes);
      EXPECT_EQ(std::memcmp(again.data.get(), got.data.get(), got.nbytes), 0);
      // No room for the partials: one team per output.
      const auto limited = build("cuda:0", 64 << 10);
      EXPECT_EQ(Engine::deserialize(limited).layers()[0].tactic, "cuda.reduce");
      expect_same(run(limited), "within a 64 KiB workspace limit");
      if (o.type != DataType::kFLOAT || o.op != ReduceOperation::kSUM) continue;
      plan::Plan pl = plan::read_engine(bytes, "test", nullptr);
      ASSERT_EQ(pl.graph.nodes.size(), 1u);
      pl.graph.nodes[0].tactic = graph::Tactic("cuda.reduce");  // the unsplit kernel
      expect_same(run(plan::write_engine(pl)), "unsplit tactic");
      pl.graph.nodes[0].tactic = graph::Tactic("cuda.reduce.splits");
      EXPECT_THROW(Engine::deserialize(plan::write_engine(pl)), CorruptEngineError);
    }
  }
}
