// Op unit: the slice layer. How backends run it: backends/cpu/ops/slice.cpp and
// backends/cuda/ops/slice.cu where they exist. Every layer's unit is listed in
// graph/ops/registry.cpp.
#include <array>
#include <bit>
#include <string_view>

#include "graph/ops/common.h"

namespace tensoracle::graph {

namespace ops {

namespace {

constexpr std::array<std::string_view, 5> kSample = {"STRICT_BOUNDS", "WRAP", "CLAMP", "FILL", "REFLECT"};

std::vector<TensorDesc> infer_op(const SliceParams& given, std::span<const TensorDesc> in, std::span<const InputFacts> facts,
                                   bool full) {
  const Dims& x = in[0].dims;
  int rank = x.rank();
  if (given.tensor_inputs > 0xF) invalid("unknown slice inputs " + std::to_string(given.tensor_inputs));
  if (in.size() != static_cast<std::size_t>(1 + std::popcount(static_cast<unsigned>(given.tensor_inputs))))
    invalid("the slice has " + std::to_string(in.size()) + " inputs but its parameters name " +
            std::to_string(1 + std::popcount(static_cast<unsigned>(given.tensor_inputs))));
  // Start, size and stride from shape tensors: their values when known, else unknown dims.
  SliceParams p = given;
  bool known = true;
  const char* names[] = {"", "start", "size", "stride"};
  for (int index : {kSliceStart, kSliceSize, kSliceStride}) {
    int pos = slice_input_position(p, index);
    if (pos < 0) continue;
    const TensorDesc& t = in[static_cast<std::size_t>(pos)];
    if (!is_int(t.type) || t.dims.rank() != 1 || t.dims[0] != rank)
      invalid("input " + std::to_string(index) + " (" + names[index] + ") is " + tname(t.type) + t.dims.str() +
              "; it must be a 1-D int32 or int64 shape tensor with one value per input dimension (" + std::to_string(rank) + ")");
    const auto& values = facts[static_cast<std::size_t>(pos)].values;
    if (!values) {
      known = false;
      continue;
    }
    const Dims d{std::span<const std::int64_t>(*values)};
    (index == kSliceStart ? p.start : index == kSliceSize ? p.size : p.stride) = d;
  }
  if (!known) {
    int size_pos = slice_input_position(p, kSliceSize);
    if (size_pos >= 0 && !facts[static_cast<std::size_t>(size_pos)].values) {
      std::vector<std::int64_t> unknown(static_cast<std::size_t>(rank), -1);
      return {{in[0].type, Dims(std::span<const std::int64_t>(unknown))}};
    }
    if (p.size.rank() != rank) invalid("size " + p.size.str() + " must have the input's rank " + std::to_string(rank));
    return {{in[0].type, p.size}};  // start or stride known at run time only: checked then
  }
  for (const auto* d : {&p.start, &p.size, &p.stride})
    if (d->rank() != rank)
      invalid("start " + p.start.str() + ", size " + p.size.str() + " and stride " + p.stride.str() +
              " must each have the input's rank " + std::to_string(rank));
  for (int i = 0; i < rank; ++i) {
    if (p.size[i] < 0) invalid("size " + p.size.str() + " has a negative dimension");
    if (p.stride[i] == 0 && p.size[i] > 1) invalid("stride " + p.stride.str() + " is 0 in dimension " + std::to_string(i));
    // Bounds wait for the build: the mode may still be set (TensorRT's order).
    if (full && p.mode == SampleMode::kSTRICT_BOUNDS && x[i] >= 0 && p.size[i] > 0) {
      std::int64_t first = p.start[i],
                   last = narrow_dim(Wide{p.start[i]} + (Wide{p.size[i]} - 1) * p.stride[i], [i] { return "the last index read in dimension " + std::to_string(i); });
      if (std::min(first, last) < 0 || std::max(first, last) >= x[i])
        invalid("dimension " + std::to_string(i) + " reads indices " + std::to_string(first) + ".." + std::to_string(last) +
                " of an input of size " + std::to_string(x[i]) + "; use mode WRAP, CLAMP, FILL or REFLECT to read outside");
    }
    if (full && p.mode != SampleMode::kSTRICT_BOUNDS && p.mode != SampleMode::kFILL && x[i] == 0 && p.size[i] > 0)
      invalid("dimension " + std::to_string(i) + " of the input is empty; only FILL can read from it");
  }
  if (int pos = slice_input_position(p, kSliceFill); pos >= 0) {
    const TensorDesc& f = in[static_cast<std::size_t>(pos)];
    if (full && p.mode != SampleMode::kFILL) invalid("input 4 (fill value) is only used by mode FILL");
    if (f.type != in[0].type) invalid("input 4 (fill value) has type " + tname(f.type) + "; it must be " + tname(in[0].type));
    if (f.dims.volume() != 1 && f.dims.all_known()) invalid("input 4 (fill value) " + f.dims.str() + " must hold one element");
  }
  return {{in[0].type, p.size}};
}

json params_to_json(const SliceParams& p) {
  return {{"start", dims_json(p.start)}, {"size", dims_json(p.size)}, {"stride", dims_json(p.stride)},
          {"mode", enum_name(kSample, p.mode)}, {"tensor_inputs", p.tensor_inputs}};
}

SliceParams params_from_json(const json& j) {
  return SliceParams{dims_of(j.at("start")), dims_of(j.at("size")), dims_of(j.at("stride")),
                     enum_value<SampleMode>(kSample, j.at("mode")), j.value<std::uint8_t>("tensor_inputs", 0)};
}

}  // namespace

// Optional start, size, stride, fill value.
extern const OpTraits kSliceOp =
    make_op<SliceParams, infer_op, params_to_json, params_from_json>("slice", {1, 5});

}  // namespace ops

}  // namespace tensoracle::graph
