// Op unit: the loop boundary layers (trip limit, recurrence, iterator, loop output; TensorRT's
// ILoop). They describe a loop in a Network and never reach a plan: graph/loops.cpp unrolls each
// loop into ordinary nodes when the network is copied into the IR. Every layer's unit is listed
// in graph/ops/registry.cpp.
#include <string>

#include "graph/ops/common.h"

namespace tensoracle::graph {

namespace ops {

namespace {

void require_scalar(const TensorDesc& d, int index, const char* what) {
  if (d.dims.rank() != 0)
    invalid("input " + std::to_string(index) + " (" + what + ") " + d.dims.str() + " must be a 0-D tensor");
}

std::vector<TensorDesc> infer_trip_limit(const TripLimitParams& p, std::span<const TensorDesc> in, std::span<const InputFacts>,
                                         bool) {
  require_scalar(in[0], 0, p.kind == TripLimit::kCOUNT ? "the trip count" : "the condition");
  if (p.kind == TripLimit::kCOUNT && !is_int(in[0].type))
    invalid("a COUNT trip limit takes an int32 or int64 count, not " + tname(in[0].type));
  if (p.kind == TripLimit::kWHILE && in[0].type != DataType::kBOOL)
    invalid("a WHILE trip limit takes a bool condition, not " + tname(in[0].type));
  if (p.kind != TripLimit::kCOUNT && p.kind != TripLimit::kWHILE)
    invalid("kind " + std::to_string(static_cast<int>(p.kind)) + " is not a TripLimit");
  return {};
}

std::vector<TensorDesc> infer_recurrence(const RecurrenceParams&, std::span<const TensorDesc> in, std::span<const InputFacts>,
                                         bool) {
  if (in.size() == 2) {
    if (in[1].type != in[0].type)
      invalid("input 1 (the next value) has type " + tname(in[1].type) + "; the initial value (input 0) has " +
              tname(in[0].type));
    const Dims &a = in[0].dims, &b = in[1].dims;
    bool same = a.rank() == b.rank();
    for (int i = 0; same && i < a.rank(); ++i) same = a[i] < 0 || b[i] < 0 || a[i] == b[i];
    if (!same)
      invalid("input 1 (the next value) " + b.str() + " differs from the initial value (input 0) " + a.str() +
              ": a recurrence keeps its shape across iterations");
  }
  return {in[0]};
}

std::vector<TensorDesc> infer_iterator(const IteratorParams& p, std::span<const TensorDesc> in, std::span<const InputFacts>,
                                       bool) {
  const Dims& x = in[0].dims;
  if (x.rank() < 1) invalid("input 0 is 0-D; an iterator needs a dim to iterate over");
  const int axis = normalize_axis(p.axis, x.rank(), "axis");
  std::vector<std::int64_t> out;
  for (int k = 0; k < x.rank(); ++k)
    if (k != axis) out.push_back(x[k]);
  return {{in[0].type, Dims(std::span<const std::int64_t>(out))}};
}

std::vector<TensorDesc> infer_loop_output(const LoopOutputParams& p, std::span<const TensorDesc> in,
                                          std::span<const InputFacts> facts, bool) {
  if (p.kind == LoopOutput::kLAST_VALUE) {
    if (in.size() > 1) invalid("a LAST_VALUE loop output takes one input");
    return {in[0]};
  }
  if (p.kind != LoopOutput::kCONCATENATE && p.kind != LoopOutput::kREVERSE)
    invalid("kind " + std::to_string(static_cast<int>(p.kind)) + " is not a LoopOutput");
  if (in.size() < 2)
    invalid("a CONCATENATE or REVERSE loop output needs its length: a 0-D int32 tensor as input 1 (set_input(1, length))");
  require_scalar(in[1], 1, "the length");
  if (!is_int(in[1].type)) invalid("input 1 (the length) has type " + tname(in[1].type) + "; it must be int32 or int64");
  const Dims& x = in[0].dims;
  if (p.axis < 0 || p.axis > x.rank())
    invalid("axis " + std::to_string(p.axis) + " is outside [0, " + std::to_string(x.rank()) + "] for input 0 " + x.str());
  if (x.rank() + 1 > Dims::kMaxRank) invalid("input 0 " + x.str() + " has no room for the concatenation axis");
  std::int64_t length = -1;
  if (facts.size() > 1 && facts[1].values && facts[1].values->size() == 1) length = facts[1].values->front();
  if (length < -1) invalid("input 1 (the length) is " + std::to_string(length) + "; it must not be negative");
  std::vector<std::int64_t> out;
  for (int k = 0; k <= x.rank(); ++k) {
    if (k == p.axis) out.push_back(length);
    if (k < x.rank()) out.push_back(x[k]);
  }
  return {{in[0].type, Dims(std::span<const std::int64_t>(out))}};
}

json trip_limit_json(const TripLimitParams& p) { return {{"loop", p.loop}, {"kind", static_cast<int>(p.kind)}}; }
json recurrence_json(const RecurrenceParams& p) { return {{"loop", p.loop}}; }
json iterator_json(const IteratorParams& p) { return {{"loop", p.loop}, {"axis", p.axis}, {"reverse", p.reverse}}; }
json loop_output_json(const LoopOutputParams& p) {
  return {{"loop", p.loop}, {"kind", static_cast<int>(p.kind)}, {"axis", p.axis}};
}

}  // namespace

extern const OpTraits kTripLimitOp = make_op<TripLimitParams, infer_trip_limit, trip_limit_json, nullptr>("trip_limit", {1, 1});
extern const OpTraits kRecurrenceOp = make_op<RecurrenceParams, infer_recurrence, recurrence_json, nullptr>("recurrence", {1, 2});
extern const OpTraits kIteratorOp = make_op<IteratorParams, infer_iterator, iterator_json, nullptr>("iterator", {1, 1});
extern const OpTraits kLoopOutputOp =
    make_op<LoopOutputParams, infer_loop_output, loop_output_json, nullptr>("loop_output", {1, 2});

}  // namespace ops

}  // namespace tensoracle::graph
