// The checks several layers share (graph/ops/common.h).
#include "graph/ops/common.h"

namespace tensoracle::graph {

namespace ops {

void require_float(const TensorDesc& d, int index, const char* what) {
  if (!is_float(d.type))
    invalid("input " + std::to_string(index) + " has type " + tname(d.type) + "; " + what +
            " takes float32, float16 or bfloat16");
}

void require_same_type(std::span<const TensorDesc> in, const char* what) {
  if (in[0].type != in[1].type)
    invalid("input 0 has type " + tname(in[0].type) + " but input 1 has type " + tname(in[1].type) +
            "; " + what + " needs both of one type (add a cast layer)");
}

int normalize_axis(std::int32_t axis, int rank, const char* what) {
  if (axis < -rank || axis >= rank)
    invalid(std::string(what) + " " + std::to_string(axis) + " is out of range for rank " + std::to_string(rank));
  return axis < 0 ? axis + rank : axis;
}

void check_axes(std::uint32_t axes, int rank, const char* what) {
  if (rank < 32 && (axes >> rank) != 0)
    invalid(std::string(what) + " mask " + std::to_string(axes) + " names a dimension beyond rank " + std::to_string(rank));
}

}  // namespace ops

using namespace ops;

int default_axis(int rank) { return std::max(0, rank - 3); }

std::vector<TensorDesc> infer_more(const SoftmaxParams& p, std::span<const TensorDesc> in, std::span<const InputFacts>, bool) {
  require_float(in[0], 0, "softmax");
  int rank = in[0].dims.rank();
  if (rank == 0) invalid("input 0 is a scalar; softmax needs rank >= 1");
  check_axes(p.axes, rank, "axes");
  if (p.axes != 0 && (p.axes & (p.axes - 1)) != 0)
    invalid("axes mask " + std::to_string(p.axes) + " names more than one dimension; softmax takes one");
  return {in[0]};
}

}  // namespace tensoracle::graph
