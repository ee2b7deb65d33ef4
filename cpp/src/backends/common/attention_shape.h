// Internal to the backends: the attention layer's run-time shape (AttentionParams,
// tensoracle/network.h), checked once for both backends.
#pragma once

#include "backends/common/checks.h"

namespace tensoracle::backends::common {

struct AttentionShape {
  i64 batch = 0, q_heads = 0, kv_heads = 0, queries = 0, keys = 0, head_size = 0;
  i64 group = 1;  // query heads per key/value head (q_heads / kv_heads)
  // The mask's element strides along [batch, query head, query, key]: 0 where it broadcasts.
  i64 mask_stride[4] = {0, 0, 0, 0};
  bool has_mask = false, bool_mask = false;
};

// The shape of an attention over q, k, v (and `mask` when not null) into `out`; throws through
// `fail` naming the tensor that does not fit.
AttentionShape check_attention(const Fail& fail, const AttentionParams& p, const TensorRef& q, const TensorRef& k,
                               const TensorRef& v, const TensorRef* mask, const TensorRef& out);

}  // namespace tensoracle::backends::common
