// Network definition: strong typing and validation when layers are added, TensorRT's rules.
#include <gtest/gtest.h>

#include <set>
#include <string_view>
#include <variant>

#include "backends/cpu/op_kernel.h"
#include "graph/op.h"
#include "tensoracle/errors.h"
#include "tensoracle/network.h"

using namespace tensoracle;

namespace {

Weights floats(std::vector<float> v) { return Weights::copy_of(DataType::kFLOAT, v.data(), static_cast<std::int64_t>(v.size())); }

template <typename F>
std::string error_of(F&& f) {
  try {
    f();
  } catch (const InvalidArgument& e) {
    return e.what();
  }
  return "(no error)";
}

// The loop and conditional boundary layers: they describe control flow in a network, which the
// builder turns into ordinary nodes.
bool is_loop_boundary(LayerType t) {
  return t >= LayerType::kTRIP_LIMIT && t <= LayerType::kCONDITIONAL_OUTPUT;
}

#define EXPECT_INVALID(stmt, needle)                                       \
  do {                                                                     \
    std::string msg_ = error_of([&] { stmt; });                            \
    EXPECT_NE(msg_.find(needle), std::string::npos) << "message: " << msg_; \
  } while (0)

}  // namespace

TEST(Network, MatrixMultiplyShapesAndTypes) {
  Network net;
  auto* a = net.add_input("a", DataType::kFLOAT, {4, 16, 32});
  auto* b = net.add_input("b", DataType::kFLOAT, {1, 32, 8});
  auto* mm = net.add_matrix_multiply(a, MatrixOperation::kNONE, b, MatrixOperation::kNONE);
  EXPECT_EQ(mm->get_output(0)->dims(), (Dims{4, 16, 8}));
  EXPECT_EQ(mm->get_output(0)->type(), DataType::kFLOAT);
  auto* bt = net.add_input("bt", DataType::kFLOAT, {4, 8, 32});
  EXPECT_EQ(net.add_matrix_multiply(a, MatrixOperation::kNONE, bt, MatrixOperation::kTRANSPOSE)->get_output(0)->dims(),
            (Dims{4, 16, 8}));
  auto* v = net.add_input("v", DataType::kFLOAT, {4, 32});
  EXPECT_EQ(net.add_matrix_multiply(a, MatrixOperation::kNONE, v, MatrixOperation::kVECTOR)->get_output(0)->dims(),
            (Dims{4, 16}));
  auto* dyn = net.add_input("dyn", DataType::kFLOAT, {-1, 16, 32});
  EXPECT_EQ(net.add_matrix_multiply(dyn, MatrixOperation::kNONE, b, MatrixOperation::kNONE)->get_output(0)->dims(),
            (Dims{-1, 16, 8}));

  auto* h = net.add_input("h", DataType::kHALF, {1, 32, 8});
  EXPECT_INVALID(net.add_matrix_multiply(a, MatrixOperation::kNONE, h, MatrixOperation::kNONE),
                 "input 0 has type float32 but input 1 has type float16");
  auto* i32 = net.add_input("i", DataType::kINT32, {4, 32, 8});
  EXPECT_INVALID(net.add_matrix_multiply(a, MatrixOperation::kNONE, i32, MatrixOperation::kNONE),
                 "input 1 has type int32; matrix multiply takes float32, float16 or bfloat16");
  auto* wrong_k = net.add_input("k", DataType::kFLOAT, {4, 31, 8});
  EXPECT_INVALID(net.add_matrix_multiply(a, MatrixOperation::kNONE, wrong_k, MatrixOperation::kNONE),
                 "inner dimensions differ");
  auto* rank2 = net.add_input("r2", DataType::kFLOAT, {32, 8});
  EXPECT_INVALID(net.add_matrix_multiply(a, MatrixOperation::kNONE, rank2, MatrixOperation::kNONE),
                 "batch dimensions differ in count");
  // The message names the layer and its type.
  EXPECT_INVALID(net.add_matrix_multiply(a, MatrixOperation::kNONE, rank2, MatrixOperation::kNONE),
                 "[network] layer 'matrix_multiply_");
}

TEST(Network, ElementwiseBroadcastingAndTypes) {
  Network net;
  auto* x = net.add_input("x", DataType::kFLOAT, {2, 3, 4});
  auto* bias = net.add_constant({1, 1, 4}, floats({1, 2, 3, 4}))->get_output(0);
  EXPECT_EQ(net.add_elementwise(x, bias, ElementWiseOperation::kSUM)->get_output(0)->dims(), (Dims{2, 3, 4}));
  auto* cmp = net.add_elementwise(x, bias, ElementWiseOperation::kGREATER)->get_output(0);
  EXPECT_EQ(cmp->type(), DataType::kBOOL);
  EXPECT_EQ(net.add_elementwise(cmp, cmp, ElementWiseOperation::kAND)->get_output(0)->type(), DataType::kBOOL);
  EXPECT_INVALID(net.add_elementwise(x, cmp, ElementWiseOperation::kSUM), "input 0 has type float32 but input 1 has type bool");
  EXPECT_INVALID(net.add_elementwise(x, x, ElementWiseOperation::kAND), "AND, OR and XOR take bool");
  auto* row = net.add_constant({4}, floats({1, 2, 3, 4}))->get_output(0);
  EXPECT_INVALID(net.add_elementwise(x, row, ElementWiseOperation::kSUM), "of different rank");
  auto* bad = net.add_constant({1, 2, 4}, floats({1, 2, 3, 4, 5, 6, 7, 8}))->get_output(0);
  EXPECT_INVALID(net.add_elementwise(x, bad, ElementWiseOperation::kSUM), "dimension 1 is neither equal nor 1");
  auto* ints = net.add_input("n", DataType::kINT32, {2, 3, 4});
  EXPECT_INVALID(net.add_elementwise(ints, ints, ElementWiseOperation::kPOW), "POW takes float32, float16 or bfloat16");
  EXPECT_EQ(net.add_elementwise(ints, ints, ElementWiseOperation::kFLOOR_DIV)->get_output(0)->type(), DataType::kINT32);
}

TEST(Network, ActivationCastQuantizeRules) {
  Network net;
  auto* x = net.add_input("x", DataType::kFLOAT, {2, 4});
  auto* ints = net.add_input("n", DataType::kINT32, {2, 4});
  EXPECT_INVALID(net.add_activation(ints, ActivationType::kRELU), "activation takes float32, float16 or bfloat16");
  auto* leaky = net.add_activation(x, ActivationType::kLEAKY_RELU);
  EXPECT_FLOAT_EQ(leaky->alpha(), 0.01f);  // TensorRT's default
  EXPECT_EQ(net.add_cast(x, DataType::kBF16)->get_output(0)->type(), DataType::kBF16);
  EXPECT_INVALID(net.add_cast(x, DataType::kFP8), "fp8 values come from add_quantize");

  auto* scale = net.add_constant({1}, floats({0.5f}))->get_output(0);
  auto* q = net.add_quantize(x, scale, DataType::kINT8);
  EXPECT_EQ(q->get_output(0)->type(), DataType::kINT8);
  auto* dq = net.add_dequantize(q->get_output(0), scale, DataType::kHALF);
  EXPECT_EQ(dq->get_output(0)->type(), DataType::kHALF);
  EXPECT_INVALID(net.add_quantize(x, scale, DataType::kHALF), "is not a quantized type");
  EXPECT_INVALID(net.add_quantize(x, x, DataType::kINT8), "scale) must be a constant");
  EXPECT_INVALID(net.add_dequantize(x, scale, DataType::kFLOAT), "dequantize takes int8 or fp8");
  // Per-channel: 1-D scale matching the axis.
  auto* per_ch = net.add_constant({4}, floats({1, 2, 3, 4}))->get_output(0);
  auto* qc = net.add_quantize(x, per_ch, DataType::kFP8);
  // As in TensorRT, the channel axis is checked when the network is built: properties may be
  // set in any order.
  qc->set_axis(0);
  net.mark_output(qc->get_output(0));
  EXPECT_INVALID(net.validate(), "per-channel scales need 1-D dims (2)");
  qc->set_axis(-1);
  EXPECT_EQ(qc->axis(), -1);
  net.unmark_output(qc->get_output(0));
  auto* x3 = net.add_input("x3", DataType::kFLOAT, {3, 4, 5});
  auto* s3 = net.add_constant({3}, floats({1, 2, 3}))->get_output(0);
  auto* q3 = net.add_quantize(x3, s3, DataType::kINT8);  // axis 1 (4) for now: not an error yet
  q3->set_axis(0);
  net.mark_output(q3->get_output(0));
  net.validate();
}

TEST(Network, ShuffleReshapeAndTranspose) {
  Network net;
  auto* x = net.add_input("x", DataType::kHALF, {2, 3, 4});
  auto* s = net.add_shuffle(x);
  s->set_reshape_dims({0, -1});
  EXPECT_EQ(s->get_output(0)->dims(), (Dims{2, 12}));
  Permutation p;
  p.order = {1, 0, 2, 3, 4, 5, 6, 7};
  s->set_second_transpose(p);
  EXPECT_EQ(s->get_output(0)->dims(), (Dims{12, 2}));
  Permutation first;
  first.order = {2, 0, 1, 3, 4, 5, 6, 7};
  s->set_first_transpose(first);  // (4, 2, 3) -> reshape (0, -1) = (4, 6) -> transpose
  EXPECT_EQ(s->get_output(0)->dims(), (Dims{6, 4}));
  // Reshape volumes are checked when the network is built (other properties may still change).
  s->set_reshape_dims({5, -1});
  net.mark_output(s->get_output(0));
  EXPECT_INVALID(net.validate(), "cannot hold the 24 elements");
  s->set_reshape_dims({0, -1});
  net.validate();
  Permutation bad;
  bad.order = {0, 0, 1, 3, 4, 5, 6, 7};
  EXPECT_INVALID(s->set_first_transpose(bad), "is not a permutation");
  // Properties can be set in any order: a zero placeholder checked only at build time.
  auto* z = net.add_input("z", DataType::kFLOAT, {0, 5});
  auto* zs = net.add_shuffle(z);
  zs->set_reshape_dims({5, 0});
  zs->set_zero_is_placeholder(false);
  EXPECT_EQ(zs->get_output(0)->dims(), (Dims{5, 0}));
  auto* dyn = net.add_input("d", DataType::kFLOAT, {-1, 8});
  auto* r = net.add_shuffle(dyn);
  r->set_reshape_dims({-1, 2, 4});
  EXPECT_EQ(r->get_output(0)->dims(), (Dims{-1, 2, 4}));
}

TEST(Network, SetterInvalidatingALaterLayerIsReportedByValidate) {
  Network net;
  auto* x = net.add_input("x", DataType::kFLOAT, {2, 4});
  auto* w = net.add_constant({4, 3}, floats(std::vector<float>(12, 1.f)))->get_output(0);
  auto* s = net.add_shuffle(x);
  auto* mm = net.add_matrix_multiply(s->get_output(0), MatrixOperation::kNONE, w, MatrixOperation::kNONE);
  net.mark_output(mm->get_output(0));
  net.validate();
  s->set_reshape_dims({4, 2});  // valid for the shuffle, but K no longer matches
  EXPECT_INVALID(net.validate(), "inner dimensions differ");
}

TEST(Network, OutputsAndNames) {
  Network net;
  EXPECT_INVALID(net.validate(), "no outputs");
  auto* x = net.add_input("x", DataType::kFLOAT, {2});
  EXPECT_INVALID(net.add_input("x", DataType::kFLOAT, {2}), "exists already");
  net.mark_output(x);
  EXPECT_INVALID(net.validate(), "is a network input");
  net.unmark_output(x);
  auto* y = net.add_identity(x)->get_output(0);
  y->set_name("x");
  net.mark_output(y);
  EXPECT_INVALID(net.validate(), "another input or output has this name");
  y->set_name("y");
  net.validate();
  EXPECT_INVALID(net.get_layer(99), "no layer 99");
  Network other;
  auto* z = other.add_input("z", DataType::kFLOAT, {2});
  EXPECT_INVALID(net.add_identity(z), "belongs to another network");
}

TEST(Network, ConstantWeightsMustMatchShape) {
  Network net;
  EXPECT_INVALID(net.add_constant({2, 3}, floats({1, 2, 3})), "weights hold 3 values but shape (2, 3) needs 6");
  std::vector<float> data(6, 1.f);
  // Borrowed weights: no copy, the caller keeps the bytes alive.
  auto* c = net.add_constant({2, 3}, Weights(DataType::kFLOAT, data.data(), 6, nullptr));
  EXPECT_EQ(c->weights().values(), data.data());
}

// The op units' table: one entry per LayerType, in order, with unique names that find_op finds
// again; the kinds that are plan nodes read back what they write.
TEST(OpRegistry, OneUnitPerLayerTypeInOrder) {
  std::set<std::string_view> names;
  for (std::size_t i = 0; i < std::variant_size_v<LayerParams>; ++i) {
    const auto type = static_cast<LayerType>(i);
    const graph::OpTraits& op = graph::op_traits(type);
    EXPECT_EQ(op.type, type) << op.name;
    EXPECT_EQ(layer_type_name(type), op.name);
    EXPECT_TRUE(names.insert(op.name).second) << op.name << " is named twice";
    EXPECT_EQ(graph::find_op(op.name), &op);
    EXPECT_NE(op.infer, nullptr);
    EXPECT_NE(op.to_json, nullptr);
    const bool never_a_node = type == LayerType::kINPUT || type == LayerType::kCONSTANT || is_loop_boundary(type);
    EXPECT_EQ(op.from_json == nullptr, never_a_node) << op.name;
    EXPECT_LE(op.arity.min, op.arity.max < 0 ? op.arity.min : op.arity.max) << op.name;
  }
  EXPECT_EQ(graph::find_op("no_such_layer"), nullptr);
  EXPECT_THROW(graph::op_traits(static_cast<LayerType>(std::variant_size_v<LayerParams>)), InvalidArgument);
  PoolingParams pool;
  pool.window = Dims{3, 3};
  pool.stride = Dims{2, 2};
  pool.padding_mode = PaddingMode::kSAME_UPPER;
  const auto& op = graph::op_traits(LayerType::kPOOLING);
  const auto back = std::get<PoolingParams>(op.from_json(op.to_json(pool)));
  EXPECT_EQ(back.window, pool.window);
  EXPECT_EQ(back.stride, pool.stride);
  EXPECT_EQ(back.padding_mode, pool.padding_mode);
  EXPECT_THROW(op.from_json(nlohmann::json{{"type", "NOT_A_POOL"}}), CorruptEngineError);
}

// The CPU backend's table (backends/cpu/ops/registry.cpp): an entry per kind that runs, in
// LayerType order, each with a kernel; none for input and constant.
TEST(OpRegistry, CpuKernelPerLayerTypeInOrder) {
  for (std::size_t i = 0; i < std::variant_size_v<LayerParams>; ++i) {
    const auto type = static_cast<LayerType>(i);
    const cpu::OpKernel* op = cpu::op_kernel(type);
    const bool runs = type != LayerType::kINPUT && type != LayerType::kCONSTANT && !is_loop_boundary(type);
    ASSERT_EQ(op != nullptr, runs) << layer_type_name(type);
    if (!op) continue;
    EXPECT_EQ(op->type, type) << layer_type_name(type);
    EXPECT_NE(op->run, nullptr) << layer_type_name(type);
  }
  EXPECT_THROW(cpu::op_kernel(static_cast<LayerType>(std::variant_size_v<LayerParams>)), InvalidArgument);
}

// Dims arithmetic on hostile sizes is refused with a message (found by fuzz_engine_plan: each
// case was a signed overflow, undefined behaviour, under UBSan).
TEST(Network, SizesThatOverflowSixtyFourBitsAreRefused) {
  constexpr std::int64_t kHuge = INT64_MAX;
  Network net;
  auto* x = net.add_input("x", DataType::kFLOAT, {1, 1, 6, 6});
  auto* pool = net.add_pooling_nd(x, PoolingType::kMAX, Dims{2, 2});
  PoolingParams pp = pool->get();
  pp.post_padding = Dims{1, kHuge};
  EXPECT_INVALID(pool->set(pp), "must be <=");
  auto* pad = net.add_padding_nd(x, Dims{0, 0}, Dims{0, 0});
  PaddingParams padding = pad->get();
  padding.post_padding = Dims{0, kHuge};
  EXPECT_INVALID(pad->set(padding), "does not fit in 64 bits");
  auto* wide = net.add_input("wide", DataType::kFLOAT, {kHuge, 1});
  EXPECT_INVALID(net.add_concatenation({wide, wide})->get_output(0), "does not fit in 64 bits");
  ShuffleParams reshape;
  reshape.reshape_dims = Dims{std::int64_t{1} << 62, 36};
  const graph::TensorDesc x_desc{DataType::kFLOAT, Dims{1, 1, 6, 6}};
  const graph::InputFacts no_facts;
  EXPECT_INVALID(graph::infer(reshape, std::span(&x_desc, 1), std::span(&no_facts, 1)), "more elements than 64 bits");
  auto* resize = net.add_resize(x);
  ResizeParams rp = resize->get();
  rp.output_dims.reset();
  rp.scales = {1.f, 1.f, 1e30f, 1.f};
  EXPECT_INVALID(resize->set(rp), "too large");
}
