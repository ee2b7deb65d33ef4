#include "backends/common/attention_shape.h"

#include <cmath>

namespace tensoracle::backends::common {

namespace {

// The mask's strides, once the scores' shape is known.
void check_mask(const Fail& fail, const AttentionParams& p, const TensorRef* mask, const TensorRef& q, AttentionShape& s) {
  if (!mask) return;
  if (p.causal && p.heads == 0) fail("attention: a causal attention takes no mask");
  checked_volume(fail, *mask, "attention", "the mask");
  if (mask->type != DataType::kBOOL && mask->type != q.type)
    fail("attention: the mask " + desc(*mask) + " must be bool or of the query's type " + tn(q.type));
  if (mask->dims.rank() != 4) fail("attention: the mask " + desc(*mask) + " is not of rank 4");
  const i64 want[4] = {s.batch, s.q_heads, s.queries, s.keys};
  i64 stride = 1;
  for (int d = 3; d >= 0; --d) {
    const i64 n = mask->dims[d];
    if (n != 1 && n != want[d])
      fail("attention: the mask " + desc(*mask) + " does not broadcast to [batch, query heads, queries, keys] " +
           Dims{want[0], want[1], want[2], want[3]}.str());
    s.mask_stride[d] = n == 1 ? 0 : stride;
    stride *= n;
  }
  s.has_mask = true;
  s.bool_mask = mask->type == DataType::kBOOL;
}

// [B, N, S, H], contiguous
HeadRows heads_first(const Dims& d) { return HeadRows{0, d[1] * d[2] * d[3], d[2] * d[3], d[3]}; }

// The sequence-major layout (AttentionParams::heads > 0): rows [B, S, width].
AttentionShape check_rows(const Fail& fail, const AttentionParams& p, const TensorRef& q, const TensorRef& k,
                          const TensorRef& v, const TensorRef& out) {
  const char* names[] = {"the query", "the key", "the value", "the output"};
  const TensorRef* refs[] = {&q, &k, &v, &out};
  if (p.kv_heads <= 0 || p.head_size <= 0 || p.heads % p.kv_heads != 0)
    fail("attention: " + num(p.heads) + " query heads and " + num(p.kv_heads) + " key heads of size " + num(p.head_size));
  for (int i = 0; i < 4; ++i)
    if (refs[i]->dims.rank() != 3)
      fail("attention: " + std::string(names[i]) + " " + desc(*refs[i]) + " is not of rank 3 (rows [batch, sequence, width])");
  AttentionShape s;
  s.batch = q.dims[0];
  s.queries = q.dims[1];
  s.keys = k.dims[1];
  s.q_heads = p.heads;
  s.kv_heads = p.kv_heads;
  s.head_size = p.head_size;
  s.group = p.heads / p.kv_heads;
  if (k.dims[0] != s.batch || v.dims[0] != s.batch || v.dims[1] != s.keys)
    fail("attention: the key " + desc(k) + " and value " + desc(v) + " do not match the query " + desc(q) +
         " in batch and sequence");
  const i64 offsets[3] = {p.q_offset, p.k_offset, p.v_offset};
  const i64 heads[4] = {s.q_heads, s.kv_heads, s.kv_heads, s.q_heads};
  HeadRows* rows[4] = {&s.q, &s.k, &s.v, &s.out};
  for (int i = 0; i < 4; ++i) {
    const i64 width = refs[i]->dims[2], offset = i < 3 ? offsets[i] : 0;
    if (offset < 0 || offset + heads[i] * s.head_size > width || (i == 3 && width != heads[i] * s.head_size))
      fail("attention: " + std::string(names[i]) + " " + desc(*refs[i]) + " has no " + num(heads[i]) + " heads of " +
           num(s.head_size) + " from column " + num(offset));
    *rows[i] = HeadRows{offset, refs[i]->dims[1] * width, s.head_size, width};
  }
  if (out.dims[0] != s.batch || out.dims[1] != s.queries)
    fail("attention: the output " + desc(out) + " must have the query's batch and sequence " + q.dims.str());
  return s;
}

}  // namespace

AttentionShape check_attention(const Fail& fail, const AttentionParams& p, const TensorRef& q, const TensorRef& k,
                               const TensorRef& v, const TensorRef* mask, const TensorRef& out) {
  check_float(fail, q, "attention", "the query");
  const char* names[] = {"the query", "the key", "the value", "the output"};
  const TensorRef* refs[] = {&q, &k, &v, &out};
  for (int i = 0; i < 4; ++i) {
    checked_volume(fail, *refs[i], "attention", names[i]);
    if (refs[i]->type != q.type)
      fail("attention: " + std::string(names[i]) + " " + desc(*refs[i]) + " is not of the query's type " + tn(q.type));
  }
  if (p.normalization != AttentionNormalizationOp::kNONE && p.normalization != AttentionNormalizationOp::kSOFTMAX)
    fail("attention: unknown normalization operation " + num(static_cast<int>(p.normalization)));
  if (!std::isfinite(p.scale)) fail("attention: the scale is not finite");
  if (p.heads > 0) {
    AttentionShape s = check_rows(fail, p, q, k, v, out);
    check_mask(fail, p, mask, q, s);
    return s;
  }
  for (int i = 0; i < 4; ++i)
    if (refs[i]->dims.rank() != 4) fail("attention: " + std::string(names[i]) + " " + desc(*refs[i]) + " is not of rank 4");
  if (!(k.dims == v.dims)) fail("attention: the value " + desc(v) + " must have the key's dims " + k.dims.str());
  if (!(out.dims == q.dims)) fail("attention: the output " + desc(out) + " must have the query's dims " + q.dims.str());
  AttentionShape s;
  s.batch = q.dims[0];
  s.q_heads = q.dims[1];
  s.queries = q.dims[2];
  s.head_size = q.dims[3];
  s.kv_heads = k.dims[1];
  s.keys = k.dims[2];
  if (k.dims[0] != s.batch || k.dims[3] != s.head_size)
    fail("attention: the key " + desc(k) + " does not match the query " + desc(q) + " in batch and head size");
  if (s.kv_heads < 1 || s.q_heads % s.kv_heads != 0)
    fail("attention: the query's " + num(s.q_heads) + " heads are not a multiple of the key's " + num(s.kv_heads));
  s.group = s.q_heads / s.kv_heads;
  s.q = s.out = heads_first(q.dims);
  s.k = s.v = heads_first(k.dims);
  check_mask(fail, p, mask, q, s);
  return s;
}

}  // namespace tensoracle::backends::common
