// Internal to the backends: the host-side checks of the indexing layers both backends run
// (gather, slice, padding, concatenation, shuffle, topk, resize: backends/cpu/ops/*.cpp,
// backends/cuda/ops/*.cu), with what they derive from the shapes. Plain host C++ (checks.h).
#pragma once

#include <span>

#include "backends/common/checks.h"
#include "tensoracle/network.h"

namespace tensoracle::backends::common {

// A gather's checks for its mode (throws for an unknown one).
struct GatherShape {
  i64 n = 0;      // output elements
  i64 ni = 0;     // indices
  int axis = 0;   // DEFAULT, ELEMENT: the gathered data dim
  int nb = 0;     // DEFAULT, ND: num_elementwise_dims
  i64 last = 0;   // ND: the indices' last dim (data dims each index tuple picks)
  int after = 0;  // ND: the first data dim copied whole (nb + last)
};
GatherShape check_gather(const Fail& fail, const GatherParams& p, const TensorRef& data, const TensorRef& indices,
                         const TensorRef& out);

// A slice's checks (fill: the optional fill value); returns the output's volume.
i64 check_slice(const Fail& fail, const SliceParams& p, const TensorRef& x, const TensorRef* fill, const TensorRef& out);

// A padding's checks; returns the output's volume.
i64 check_padding(const Fail& fail, const PaddingParams& p, const TensorRef& x, const TensorRef& out);

// A concatenation's checks; returns the output's volume.
i64 check_concatenation(const Fail& fail, int axis, std::span<const TensorRef> inputs, const TensorRef& out);

// A shuffle's checks; the volume and the reshaped tensor's dims (between the transposes).
struct ShuffleShape {
  i64 n = 0;
  Dims reshaped;
};
ShuffleShape check_shuffle(const Fail& fail, const ShuffleParams& p, const TensorRef& x, const TensorRef& out);

// A topk's checks: the output's volume (m), the axis, its length (n) and k.
struct TopKShape {
  i64 m = 0;
  int axis = 0;
  i64 n = 0, k = 0;
};
// `values` and `indices`: the outputs a kernel writes (null: not this one; one at least).
TopKShape check_topk(const Fail& fail, const TopKParams& p, const TensorRef& x, const TensorRef* values,
                     const TensorRef* indices);

// A resize's checks (the output's dims from output_dims or the scales); returns the output's
// volume. Past it, when that is not 0, no input dim is empty.
i64 check_resize(const Fail& fail, const ResizeParams& p, const TensorRef& x, const TensorRef& out);

// A scatter's checks (ScatterParams).
struct ScatterShape {
  i64 n = 0;        // the data's (and output's) volume
  i64 nu = 0;       // the updates' volume
  int axis = 0;     // ELEMENT: the scattered dim
  i64 depth = 0;    // ND: the indices' last dim (data dims each index tuple picks)
  i64 rows = 0;     // ND: index tuples
  i64 slice = 0;    // ND: elements each tuple's update holds (data's dims from depth on)
  // ELEMENT: the updates' lines along the axis (nu / updates' dim there) and the stride of the
  // axis in the updates; a reduction runs each line in order (lines never share a target).
  i64 lines = 0, line_inner = 1;
};
ScatterShape check_scatter(const Fail& fail, const ScatterParams& p, const TensorRef& data, const TensorRef& indices,
                           const TensorRef& updates, const TensorRef& out);
// A one-hot's checks: the output is [outer, depth, inner] with indices [outer, inner].
struct OneHotShape {
  i64 n = 0;
  i64 outer = 1, depth = 1, inner = 1;
};
OneHotShape check_one_hot(const Fail& fail, const OneHotParams& p, const TensorRef& indices, const TensorRef& values,
                          const TensorRef& out);

// A reverse-sequence's checks: element e of the output sits at batch entry (e / batch_stride) %
// batch and position (e / seq_stride) % seq of its sequence.
struct ReverseSequenceShape {
  i64 n = 0;
  i64 batch = 0, batch_stride = 1, seq = 0, seq_stride = 1;
};
ReverseSequenceShape check_reverse_sequence(const Fail& fail, const ReverseSequenceParams& p, const TensorRef& x,
                                            const TensorRef& lens, const TensorRef& out);

// Squeeze and unsqueeze (a copy): the volume; input and output agree in type and volume, and the
// output's dims are the input's with the axes removed or inserted.
i64 check_squeeze(const Fail& fail, const LayerParams& p, const TensorRef& x, const TensorRef& out);

}  // namespace tensoracle::backends::common
