// Internal to the backends: the attention layer's run-time shape (AttentionParams,
// tensoracle/network.h), checked once for both backends.
#pragma once

#include "backends/common/checks.h"

namespace tensoracle::backends::common {

// Where row `r` of head `n` in batch `b` of a query, key, value or output tensor starts:
// offset + b * batch + n * head + r * row (elements). A row's head_size elements are contiguous.
struct HeadRows {
  i64 offset = 0, batch = 0, head = 0, row = 0;
#ifdef __CUDACC__
  __host__ __device__
#endif
  i64 at(i64 b, i64 n, i64 r) const { return offset + b * batch + n * head + r * row; }
};

struct AttentionShape {
  i64 batch = 0, q_heads = 0, kv_heads = 0, queries = 0, keys = 0, head_size = 0;
  i64 group = 1;  // query heads per key/value head (q_heads / kv_heads)
  // [B, N, S, H] tensors, or the sequence-major rows of AttentionParams::heads > 0
  HeadRows q, k, v, out;
  // The mask's element strides along [batch, query head, query, key]: 0 where it broadcasts.
  i64 mask_stride[4] = {0, 0, 0, 0};
  bool has_mask = false, bool_mask = false;
};

// The shape of an attention over q, k, v (and `mask` when not null) into `out`; throws through
// `fail` naming the tensor that does not fit.
AttentionShape check_attention(const Fail& fail, const AttentionParams& p, const TensorRef& q, const TensorRef& k,
                               const TensorRef& v, const TensorRef* mask, const TensorRef& out);

}  // namespace tensoracle::backends::common
