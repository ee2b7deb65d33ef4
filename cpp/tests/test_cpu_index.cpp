// Tests of the CPU backend's indexing kernels (backends/cpu/kernels.h: concatenation,
// slice, gather, select, padding, resize, einsum) against reference loops written here, one
// output element at a time from the definitions (TensorRT's semantics, ONNX Resize's
// coordinates). Data movement is checked bit for bit on elements of 1, 2, 4 and 8 bytes.
#include <gtest/gtest.h>

#include <algorithm>
#include <bit>
#include <cmath>
#include <cstdint>
#include <cstring>
#include <functional>
#include <map>
#include <random>
#include <span>
#include <string>
#include <vector>

#include "backends/cpu/kernels.h"
#include "core/numeric.h"
#include "tensoracle/errors.h"

namespace {

using namespace tensoracle;
using cpu::TensorRef;
using i64 = std::int64_t;

// ---- buffers ------------------------------------------------------------------------------

class Tensor {
 public:
  Tensor(DataType t, Dims d)
      : type(t), dims(d), words_(static_cast<std::size_t>(std::max<i64>(d.volume(), 0)) * element_size(t) / 8 + 2, 0) {}
  DataType type;
  Dims dims;
  i64 size() const { return dims.volume(); }
  TensorRef ref() { return TensorRef{words_.data(), type, dims}; }
  std::uint64_t raw(i64 i) const {
    std::uint64_t v = 0;
    std::memcpy(&v, bytes() + i * es(), es());
    return v;
  }
  void set_raw(i64 i, std::uint64_t v) { std::memcpy(bytes() + i * es(), &v, es()); }
  double get(i64 i) const {
    const std::uint64_t r = raw(i);
    switch (type) {
      case DataType::kFLOAT: return std::bit_cast<float>(static_cast<std::uint32_t>(r));
      case DataType::kHALF: return core::half_to_float(static_cast<std::uint16_t>(r));
      case DataType::kBF16: return core::bf16_to_float(static_cast<std::uint16_t>(r));
      case DataType::kINT32: return static_cast<std::int32_t>(r);
      case DataType::kINT64: return static_cast<double>(static_cast<i64>(r));
      default: return static_cast<double>(r);
    }
  }
  void set(i64 i, double v) {
    const float f = static_cast<float>(v);
    switch (type) {
      case DataType::kFLOAT: set_raw(i, std::bit_cast<std::uint32_t>(f)); break;
      case DataType::kHALF: set_raw(i, core::float_to_half(f)); break;
      case DataType::kBF16: set_raw(i, core::float_to_bf16(f)); break;
      default: set_raw(i, static_cast<std::uint64_t>(static_cast<i64>(v)));
    }
  }

 private:
  std::size_t es() const { return element_size(type); }
  unsigned char* bytes() { return reinterpret_cast<unsigned char*>(words_.data()); }
  const unsigned char* bytes() const { return reinterpret_cast<const unsigned char*>(words_.data()); }
  std::vector<std::uint64_t> words_;
};

// Distinct bit patterns in every byte of every element (a misplaced byte shows).
void fill_bits(Tensor& t, std::uint32_t seed) {
  std::mt19937_64 rng(seed);
  for (i64 i = 0; i < t.size(); ++i) t.set_raw(i, rng());
}

void fill_uniform(Tensor& t, std::uint32_t seed, double lo = -2, double hi = 2) {
  std::mt19937 rng(seed);
  std::uniform_real_distribution<double> d(lo, hi);
  for (i64 i = 0; i < t.size(); ++i) t.set(i, d(rng));
}

// One type per element size.
const std::vector<DataType> kSizes = {DataType::kUINT8, DataType::kHALF, DataType::kFLOAT, DataType::kINT64};
const std::vector<DataType> kFloats = {DataType::kFLOAT, DataType::kHALF, DataType::kBF16};

std::vector<i64> unflat(const Dims& d, i64 flat) {
  std::vector<i64> idx(static_cast<std::size_t>(d.rank()));
  for (int k = d.rank() - 1; k >= 0; --k) {
    idx[static_cast<std::size_t>(k)] = flat % d[k];
    flat /= d[k];
  }
  return idx;
}

i64 flat_of(const Dims& d, const std::vector<i64>& idx) {
  i64 f = 0;
  for (int k = 0; k < d.rank(); ++k) f = f * d[k] + idx[static_cast<std::size_t>(k)];
  return f;
}

// Compares raw bits with `want(i)` (the expected raw value, or nullopt-like -1 sentinel unused).
void expect_raw(const Tensor& out, const std::function<std::uint64_t(i64)>& want, const std::string& what) {
  int failures = 0;
  for (i64 i = 0; i < out.size(); ++i)
    if (out.raw(i) != want(i) && ++failures <= 5)
      ADD_FAILURE() << what << ": element " << i << " is " << out.raw(i) << ", want " << want(i);
}

double ulp(DataType t, double v) {
  const int mant = t == DataType::kHALF ? 10 : t == DataType::kBF16 ? 7 : 23;
  const int emin = t == DataType::kHALF ? -14 : -126;
  const int e = v != 0 ? std::max(std::ilogb(std::fabs(v)), emin) : emin;
  return std::ldexp(1.0, e - mant);
}

void expect_close(const Tensor& out, const std::vector<double>& want, const std::vector<double>& scale, double rel,
                  const std::string& what) {
  ASSERT_EQ(out.size(), static_cast<i64>(want.size())) << what;
  int failures = 0;
  for (i64 i = 0; i < out.size(); ++i) {
    const double w = want[static_cast<std::size_t>(i)];
    const double tol = ulp(out.type, w) + rel * scale[static_cast<std::size_t>(i)] + 1e-30;
    if (!(std::fabs(out.get(i) - w) <= tol) && ++failures <= 5)
      ADD_FAILURE() << what << ": element " << i << " is " << out.get(i) << ", want " << w << " (tol " << tol << ")";
  }
}

// ---- concatenation ------------------------------------------------------------------------

TEST(CpuIndexConcatenation, EveryAxisEveryElementSize) {
  for (DataType t : kSizes)
    for (int axis = 0; axis < 3; ++axis) {
      std::vector<Dims> shapes;
      for (i64 a : {2, 0, 3, 1}) {
        Dims d{2, 3, 4};
        d[axis] = a;
        shapes.push_back(d);
      }
      std::vector<Tensor> ins;
      for (std::size_t i = 0; i < shapes.size(); ++i) {
        ins.emplace_back(t, shapes[i]);
        fill_bits(ins.back(), static_cast<std::uint32_t>(100 * axis + i));
      }
      Dims od{2, 3, 4};
      od[axis] = 6;
      Tensor out(t, od);
      std::vector<TensorRef> refs;
      for (auto& x : ins) refs.push_back(x.ref());
      cpu::concatenation(axis, refs, out.ref());
      expect_raw(
          out,
          [&](i64 f) {
            auto idx = unflat(od, f);
            i64 a = idx[static_cast<std::size_t>(axis)];
            std::size_t k = 0;
            while (a >= shapes[k][axis]) a -= shapes[k++][axis];
            idx[static_cast<std::size_t>(axis)] = a;
            return ins[k].raw(flat_of(shapes[k], idx));
          },
          std::string(type_name(t)) + " axis " + std::to_string(axis));
    }
}

TEST(CpuIndexConcatenation, LargeAndMismatchedInputs) {
  Tensor a(DataType::kFLOAT, {300, 70}), b(DataType::kFLOAT, {300, 50});
  fill_bits(a, 1);
  fill_bits(b, 2);
  Tensor out(DataType::kFLOAT, {300, 120});
  std::vector<TensorRef> refs{a.ref(), b.ref()};
  cpu::concatenation(1, refs, out.ref());
  expect_raw(
      out, [&](i64 f) { return f % 120 < 70 ? a.raw(f / 120 * 70 + f % 120) : b.raw(f / 120 * 50 + f % 120 - 70); },
      "large");
  Tensor bad(DataType::kFLOAT, {300, 121});
  EXPECT_THROW(cpu::concatenation(1, refs, bad.ref()), InvalidArgument);
  Tensor c(DataType::kINT32, {300, 50});
  std::vector<TensorRef> mixed{a.ref(), c.ref()};
  EXPECT_THROW(cpu::concatenation(1, mixed, out.ref()), InvalidArgument);
}

// ---- slice --------------------------------------------------------------------------------

// The input index that index v of a dim of size n reads in `mode` (-1: the fill value); the
// reflection walks back and forth instead of using a period.
i64 ref_sample(SampleMode mode, i64 v, i64 n) {
  if (v >= 0 && v < n) return v;
  switch (mode) {
    case SampleMode::kWRAP:
      while (v < 0) v += n;
      return v % n;
    case SampleMode::kCLAMP: return v < 0 ? 0 : n - 1;
    case SampleMode::kREFLECT:
      if (n == 1) return 0;
      while (v < 0 || v >= n) v = v < 0 ? -v : 2 * (n - 1) - v;
      return v;
    default: return -1;
  }
}

void check_slice(DataType t, const Dims& in, const Dims& start, const Dims& size, const Dims& stride, SampleMode mode,
                 bool with_fill, std::uint32_t seed) {
  Tensor x(t, in), fill(t, {1}), out(t, size);
  fill_bits(x, seed);
  fill_bits(fill, seed + 1);
  SliceParams p{start, size, stride, mode};
  TensorRef fr = fill.ref();
  cpu::slice(p, x.ref(), with_fill ? &fr : nullptr, out.ref());
  expect_raw(
      out,
      [&](i64 f) -> std::uint64_t {
        auto idx = unflat(size, f);
        for (int d = 0; d < in.rank(); ++d) {
          const i64 v = ref_sample(mode, start[d] + idx[static_cast<std::size_t>(d)] * stride[d], in[d]);
          if (v < 0) return with_fill ? fill.raw(0) : 0;
          idx[static_cast<std::size_t>(d)] = v;
        }
        return x.raw(flat_of(in, idx));
      },
      std::string(type_name(t)) + " slice mode " + std::to_string(static_cast<int>(mode)) + " start " + start.str() +
          " stride " + stride.str());
}

TEST(CpuIndexSlice, StrictBoundsWithNegativeStrides) {
  for (DataType t : kSizes) {
    check_slice(t, {4, 5, 6}, {3, 0, 5}, {2, 3, 3}, {-2, 2, -1}, SampleMode::kSTRICT_BOUNDS, false, 1);
    check_slice(t, {4, 5, 6}, {0, 1, 0}, {4, 4, 6}, {1, 1, 1}, SampleMode::kSTRICT_BOUNDS, false, 2);
  }
  Tensor x(DataType::kFLOAT, {4}), out(DataType::kFLOAT, {3});
  SliceParams p{{2}, {3}, {1}, SampleMode::kSTRICT_BOUNDS};
  EXPECT_THROW(cpu::slice(p, x.ref(), nullptr, out.ref()), InvalidArgument);
}

TEST(CpuIndexSlice, EveryModeOutOfBounds) {
  const SampleMode modes[] = {SampleMode::kWRAP, SampleMode::kCLAMP, SampleMode::kFILL, SampleMode::kREFLECT};
  std::uint32_t seed = 10;
  for (DataType t : kSizes)
    for (SampleMode m : modes) {
      check_slice(t, {3, 4, 5}, {-4, -7, 9}, {5, 9, 7}, {2, 3, -2}, m, false, ++seed);
      check_slice(t, {3, 4, 5}, {5, 2, -3}, {4, 6, 11}, {-1, -1, 1}, m, m == SampleMode::kFILL, ++seed);
      check_slice(t, {1, 4}, {-3, -9}, {5, 30}, {1, 1}, m, m == SampleMode::kFILL, ++seed);  // REFLECT of size 1
    }
}

TEST(CpuIndexSlice, LargeRowsAndFillErrors) {
  check_slice(DataType::kFLOAT, {64, 1024}, {-8, 3}, {80, 1000}, {1, 1}, SampleMode::kFILL, true, 77);
  check_slice(DataType::kHALF, {64, 1024}, {70, 1020}, {80, 1000}, {-1, -1}, SampleMode::kREFLECT, false, 78);
  Tensor x(DataType::kFLOAT, {4}), out(DataType::kFLOAT, {6}), wrong(DataType::kINT32, {1});
  SliceParams p{{-1}, {6}, {1}, SampleMode::kFILL};
  TensorRef w = wrong.ref();
  EXPECT_THROW(cpu::slice(p, x.ref(), &w, out.ref()), InvalidArgument);
}

// ---- gather -------------------------------------------------------------------------------

Tensor make_indices(DataType t, const Dims& d, i64 lo, i64 hi, std::uint32_t seed) {
  Tensor idx(t, d);
  std::mt19937 rng(seed);
  std::uniform_int_distribution<i64> u(lo, hi);
  for (i64 i = 0; i < idx.size(); ++i) idx.set_raw(i, static_cast<std::uint64_t>(u(rng)));
  return idx;
}

i64 index_at(const Tensor& idx, i64 i) {
  return idx.type == DataType::kINT32 ? static_cast<std::int32_t>(idx.raw(i)) : static_cast<i64>(idx.raw(i));
}

TEST(CpuIndexGather, DefaultModeEveryAxisNegativeIndices) {
  const Dims data_dims{3, 4, 5};
  for (DataType t : kSizes)
    for (DataType it : {DataType::kINT32, DataType::kINT64})
      for (int axis = 0; axis < 3; ++axis) {
        const i64 dim = data_dims[axis];
        Tensor data(t, data_dims), idx = make_indices(it, {2, 3}, -dim, dim - 1, 7u + static_cast<std::uint32_t>(axis));
        fill_bits(data, 3);
        std::vector<i64> od;
        for (int i = 0; i < axis; ++i) od.push_back(data_dims[i]);
        od.push_back(2);
        od.push_back(3);
        for (int i = axis + 1; i < 3; ++i) od.push_back(data_dims[i]);
        const Dims odims{std::span<const i64>(od)};
        Tensor out(t, odims);
        GatherParams p{axis, GatherMode::kDEFAULT, 0};
        cpu::gather(p, data.ref(), idx.ref(), out.ref());
        expect_raw(
            out,
            [&](i64 f) {
              auto o = unflat(odims, f);
              std::vector<i64> di;
              for (int i = 0; i < axis; ++i) di.push_back(o[static_cast<std::size_t>(i)]);
              i64 v = index_at(idx, o[static_cast<std::size_t>(axis)] * 3 + o[static_cast<std::size_t>(axis) + 1]);
              di.push_back(v < 0 ? v + dim : v);
              for (int i = axis + 1; i < 3; ++i) di.push_back(o[static_cast<std::size_t>(i) + 1]);
              return data.raw(flat_of(data_dims, di));
            },
            "gather default axis " + std::to_string(axis));
      }
}

TEST(CpuIndexGather, DefaultModeOneElementwiseDim) {
  // out[b, j, k] = data[b, idx[b, j], k]
  for (DataType t : kSizes) {
    Tensor data(t, {3, 5, 4}), idx = make_indices(DataType::kINT32, {3, 6}, -5, 4, 21);
    fill_bits(data, 22);
    Tensor out(t, {3, 6, 4});
    cpu::gather(GatherParams{1, GatherMode::kDEFAULT, 1}, data.ref(), idx.ref(), out.ref());
    expect_raw(
        out,
        [&](i64 f) {
          const i64 b = f / 24, j = f / 4 % 6, k = f % 4;
          i64 v = index_at(idx, b * 6 + j);
          if (v < 0) v += 5;
          return data.raw((b * 5 + v) * 4 + k);
        },
        "gather default nb=1");
  }
}

TEST(CpuIndexGather, ElementMode) {
  for (DataType t : kSizes)
    for (int axis = 0; axis < 3; ++axis) {
      const Dims dd{4, 5, 6}, id{3, 4, 6};  // indices may be smaller than the data
      Tensor data(t, dd), idx = make_indices(DataType::kINT64, id, -dd[axis], dd[axis] - 1, 31u + static_cast<std::uint32_t>(axis));
      fill_bits(data, 32);
      Tensor out(t, id);
      cpu::gather(GatherParams{axis, GatherMode::kELEMENT, 0}, data.ref(), idx.ref(), out.ref());
      expect_raw(
          out,
          [&](i64 f) {
            auto o = unflat(id, f);
            i64 v = index_at(idx, f);
            o[static_cast<std::size_t>(axis)] = v < 0 ? v + dd[axis] : v;
            return data.raw(flat_of(dd, o));
          },
          "gather element axis " + std::to_string(axis));
    }
}

TEST(CpuIndexGather, NdModeWithAndWithoutBatchDims) {
  for (DataType t : kSizes) {
    {  // data (4, 5, 6), indices (2, 3, 2): out (2, 3, 6) = data[i0, i1, :]
      Tensor data(t, {4, 5, 6}), idx(DataType::kINT32, {2, 3, 2}), out(t, {2, 3, 6});
      fill_bits(data, 41);
      std::mt19937 rng(42);
      for (i64 r = 0; r < 6; ++r) {
        idx.set_raw(r * 2, static_cast<std::uint64_t>(static_cast<std::int32_t>(rng() % 8) - 4));
        idx.set_raw(r * 2 + 1, static_cast<std::uint64_t>(static_cast<std::int32_t>(rng() % 10) - 5));
      }
      cpu::gather(GatherParams{0, GatherMode::kND, 0}, data.ref(), idx.ref(), out.ref());
      expect_raw(
          out,
          [&](i64 f) {
            const i64 r = f / 6, k = f % 6;
            i64 a = index_at(idx, r * 2), b = index_at(idx, r * 2 + 1);
            if (a < 0) a += 4;
            if (b < 0) b += 5;
            return data.raw((a * 5 + b) * 6 + k);
          },
          "gather nd");
    }
    {  // one batch dim: data (3, 5, 6), indices (3, 4, 1): out (3, 4, 6) = data[b, i, :]
      Tensor data(t, {3, 5, 6}), idx = make_indices(DataType::kINT64, {3, 4, 1}, -5, 4, 43), out(t, {3, 4, 6});
      fill_bits(data, 44);
      cpu::gather(GatherParams{0, GatherMode::kND, 1}, data.ref(), idx.ref(), out.ref());
      expect_raw(
          out,
          [&](i64 f) {
            const i64 b = f / 24, j = f / 6 % 4, k = f % 6;
            i64 v = index_at(idx, b * 4 + j);
            if (v < 0) v += 5;
            return data.raw((b * 5 + v) * 6 + k);
          },
          "gather nd batch");
    }
    {  // a full index: data (3, 4), indices (5, 2) → out (5)
      Tensor data(t, {3, 4}), idx(DataType::kINT64, {5, 2}), out(t, {5});
      fill_bits(data, 45);
      const i64 pairs[5][2] = {{0, 0}, {2, 3}, {-1, -4}, {1, -1}, {-3, 2}};
      for (int r = 0; r < 5; ++r)
        for (int c = 0; c < 2; ++c) idx.set_raw(r * 2 + c, static_cast<std::uint64_t>(pairs[r][c]));
      cpu::gather(GatherParams{0, GatherMode::kND, 0}, data.ref(), idx.ref(), out.ref());
      expect_raw(
          out,
          [&](i64 r) {
            const i64 a = (pairs[r][0] + 3) % 3, b = (pairs[r][1] + 4) % 4;
            return data.raw(a * 4 + b);
          },
          "gather nd scalar slices");
    }
  }
}

void expect_bad_index(const std::function<void()>& f, const std::string& value, const std::string& dim) {
  try {
    f();
    ADD_FAILURE() << "no exception for index " << value;
  } catch (const InvalidArgument& e) {
    const std::string m = e.what();
    EXPECT_NE(m.find("gather"), std::string::npos) << m;
    EXPECT_NE(m.find(value), std::string::npos) << m;
    EXPECT_NE(m.find("size " + dim), std::string::npos) << m;
  }
}

TEST(CpuIndexGather, OutOfRangeIndexThrows) {
  Tensor data(DataType::kFLOAT, {4, 1000}), out(DataType::kFLOAT, {3, 1000});
  for (i64 bad : {4, -5, 1000000, -1000000}) {
    Tensor idx(DataType::kINT64, {3});
    idx.set_raw(0, 1);
    idx.set_raw(1, static_cast<std::uint64_t>(bad));
    idx.set_raw(2, 0);
    expect_bad_index([&] { cpu::gather(GatherParams{0, GatherMode::kDEFAULT, 0}, data.ref(), idx.ref(), out.ref()); },
                     std::to_string(bad), "4");
  }
  {  // many rows: the bad index is found inside the parallel loop
    Tensor idx = make_indices(DataType::kINT32, {200000}, -2, 1, 5);
    idx.set_raw(123457, static_cast<std::uint32_t>(-3));
    Tensor data2(DataType::kINT32, {2, 30}), out2(DataType::kINT32, {200000, 30});
    expect_bad_index([&] { cpu::gather(GatherParams{0, GatherMode::kDEFAULT, 0}, data2.ref(), idx.ref(), out2.ref()); },
                     "-3", "2");
  }
  {  // ELEMENT
    Tensor d(DataType::kUINT8, {2, 3}), idx(DataType::kINT32, {2, 3}), o(DataType::kUINT8, {2, 3});
    idx.set_raw(4, 3);
    expect_bad_index([&] { cpu::gather(GatherParams{1, GatherMode::kELEMENT, 0}, d.ref(), idx.ref(), o.ref()); }, "3", "3");
  }
  {  // ND: the second index component is checked against dimension 1
    Tensor d(DataType::kHALF, {4, 6, 2}), idx(DataType::kINT64, {3, 2}), o(DataType::kHALF, {3, 2});
    idx.set_raw(3, static_cast<std::uint64_t>(i64{-7}));
    expect_bad_index([&] { cpu::gather(GatherParams{0, GatherMode::kND, 0}, d.ref(), idx.ref(), o.ref()); }, "-7", "6");
  }
  {  // an empty dim: every index is out of range
    Tensor d(DataType::kFLOAT, {0, 3}), idx(DataType::kINT32, {1}), o(DataType::kFLOAT, {1, 3});
    expect_bad_index([&] { cpu::gather(GatherParams{0, GatherMode::kDEFAULT, 0}, d.ref(), idx.ref(), o.ref()); }, "0", "0");
  }
}

// ---- select -------------------------------------------------------------------------------

TEST(CpuIndexSelect, BroadcastEveryElementSize) {
  const Dims cd{2, 1, 5}, td{1, 3, 5}, ed{2, 3, 1}, od{2, 3, 5};
  for (DataType t : kSizes) {
    Tensor c(DataType::kBOOL, cd), a(t, td), b(t, ed), out(t, od);
    std::mt19937 rng(9);
    for (i64 i = 0; i < c.size(); ++i) c.set_raw(i, rng() & 1);
    fill_bits(a, 10);
    fill_bits(b, 11);
    cpu::select(c.ref(), a.ref(), b.ref(), out.ref());
    auto src = [&](const Dims& d, i64 f) {
      auto o = unflat(od, f);
      for (int k = 0; k < 3; ++k)
        if (d[k] == 1) o[static_cast<std::size_t>(k)] = 0;
      return flat_of(d, o);
    };
    expect_raw(out, [&](i64 f) { return c.raw(src(cd, f)) ? a.raw(src(td, f)) : b.raw(src(ed, f)); }, "select");
  }
  Tensor c(DataType::kBOOL, {2, 2}), a(DataType::kFLOAT, {2, 3}), out(DataType::kFLOAT, {2, 3});
  EXPECT_THROW(cpu::select(c.ref(), a.ref(), a.ref(), out.ref()), InvalidArgument);
}

TEST(CpuIndexSelect, LargeSameShape) {
  const Dims d{70, 1000};
  Tensor c(DataType::kBOOL, d), a(DataType::kFLOAT, d), b(DataType::kFLOAT, d), out(DataType::kFLOAT, d);
  std::mt19937 rng(12);
  for (i64 i = 0; i < c.size(); ++i) c.set_raw(i, rng() % 3 == 0);
  fill_bits(a, 13);
  fill_bits(b, 14);
  cpu::select(c.ref(), a.ref(), b.ref(), out.ref());
  expect_raw(out, [&](i64 f) { return c.raw(f) ? a.raw(f) : b.raw(f); }, "select large");
}

// ---- padding ------------------------------------------------------------------------------

TEST(CpuIndexPadding, PadAndCropEveryElementSize) {
  struct Case {
    Dims in, pre, post;
  };
  const Case cases[] = {
      {{2, 3, 4, 5}, {1, 2}, {3, 0}},
      {{2, 3, 4, 5}, {-1, 2}, {1, -3}},
      {{2, 3, 4, 5}, {0, 1, -1}, {2, -2, 0}},
      {{3, 7}, {-2}, {-4}},
      {{3, 7}, {}, {}},
  };
  for (DataType t : kSizes)
    for (const Case& c : cases) {
      Dims od = c.in;
      const int n = c.pre.rank(), r = c.in.rank();
      for (int i = 0; i < n; ++i) od[r - n + i] += c.pre[i] + c.post[i];
      Tensor x(t, c.in), out(t, od);
      fill_bits(x, 5);
      cpu::padding(PaddingParams{c.pre, c.post}, x.ref(), out.ref());
      expect_raw(
          out,
          [&](i64 f) -> std::uint64_t {
            auto o = unflat(od, f);
            for (int i = 0; i < n; ++i) {
              i64& v = o[static_cast<std::size_t>(r - n + i)];
              v -= c.pre[i];
              if (v < 0 || v >= c.in[r - n + i]) return 0;
            }
            return x.raw(flat_of(c.in, o));
          },
          std::string(type_name(t)) + " padding " + c.pre.str() + "/" + c.post.str());
    }
  Tensor x(DataType::kFLOAT, {2, 3}), out(DataType::kFLOAT, {2, 4});
  EXPECT_THROW(cpu::padding(PaddingParams{{1}, {1}}, x.ref(), out.ref()), InvalidArgument);
}

// ---- resize -------------------------------------------------------------------------------

using RCT = ResizeCoordinateTransformation;

// ONNX Resize's x_original for one dim, in double.
double ref_coord(RCT ct, ResizeSelector sel, double scale, i64 o, i64 in, i64 out) {
  if (out == 1 && sel == ResizeSelector::kUPPER) return 0;
  switch (ct) {
    case RCT::kALIGN_CORNERS: return out == 1 ? 0 : static_cast<double>(o) * static_cast<double>(in - 1) / static_cast<double>(out - 1);
    case RCT::kASYMMETRIC: return static_cast<double>(o) / scale;
    default: return (static_cast<double>(o) + 0.5) / scale - 0.5;
  }
}

// Per dim: (input index, weight) pairs of output index o.
std::vector<std::pair<i64, double>> ref_taps(const ResizeParams& p, double scale, i64 o, i64 in, i64 out) {
  const double x = ref_coord(p.coordinate_transformation, p.selector_for_single_pixel, scale, o, in, out);
  auto clampi = [&](i64 i) { return std::min(std::max<i64>(i, 0), in - 1); };
  if (p.mode == InterpolationMode::kNEAREST) {
    double r = 0;
    switch (p.nearest_rounding) {
      case ResizeRoundMode::kHALF_UP: r = (x - std::floor(x) >= 0.5) ? std::floor(x) + 1 : std::floor(x); break;
      case ResizeRoundMode::kHALF_DOWN: r = (x - std::floor(x) > 0.5) ? std::floor(x) + 1 : std::floor(x); break;
      case ResizeRoundMode::kFLOOR: r = std::floor(x); break;
      case ResizeRoundMode::kCEIL: r = std::ceil(x); break;
    }
    return {{clampi(static_cast<i64>(r)), 1.0}};
  }
  if (p.mode == InterpolationMode::kLINEAR) {
    const double c = std::min(std::max(x, 0.0), static_cast<double>(in - 1));
    const i64 i0 = static_cast<i64>(std::floor(c));
    const double f = c - static_cast<double>(i0);
    return {{i0, 1 - f}, {clampi(i0 + 1), f}};
  }
  const double a = p.cubic_coeff;
  auto w = [&](double d) {
    d = std::fabs(d);
    if (d <= 1) return (a + 2) * d * d * d - (a + 3) * d * d + 1;
    if (d < 2) return a * d * d * d - 5 * a * d * d + 8 * a * d - 4 * a;
    return 0.0;
  };
  const i64 i0 = static_cast<i64>(std::floor(x));
  const double f = x - static_cast<double>(i0);
  return {{clampi(i0 - 1), w(1 + f)}, {clampi(i0), w(f)}, {clampi(i0 + 1), w(1 - f)}, {clampi(i0 + 2), w(2 - f)}};
}

// The reference: a direct sum over every combination of every dim's taps.
void check_resize(const ResizeParams& p, DataType t, const Dims& in, std::uint32_t seed, const std::string& what) {
  Dims od = in;
  std::vector<double> scale(static_cast<std::size_t>(in.rank()));
  for (int d = 0; d < in.rank(); ++d) {
    if (p.output_dims) {
      od[d] = (*p.output_dims)[d];
      scale[static_cast<std::size_t>(d)] = static_cast<double>(od[d]) / static_cast<double>(in[d]);
    } else {
      od[d] = static_cast<i64>(std::floor(static_cast<double>(in[d]) * p.scales[static_cast<std::size_t>(d)]));
      scale[static_cast<std::size_t>(d)] = p.scales[static_cast<std::size_t>(d)];
    }
  }
  Tensor x(t, in), out(t, od);
  if (p.mode == InterpolationMode::kNEAREST) fill_bits(x, seed);
  else fill_uniform(x, seed);
  cpu::resize(p, x.ref(), out.ref());
  const int r = in.rank();
  std::vector<double> want(static_cast<std::size_t>(out.size())), mag(want.size());
  std::vector<std::uint64_t> want_raw(want.size());
  for (i64 f = 0; f < out.size(); ++f) {
    const auto o = unflat(od, f);
    std::vector<std::vector<std::pair<i64, double>>> taps;
    for (int d = 0; d < r; ++d)
      taps.push_back(ref_taps(p, scale[static_cast<std::size_t>(d)], o[static_cast<std::size_t>(d)], in[d], od[d]));
    std::vector<std::size_t> c(static_cast<std::size_t>(r), 0);
    double acc = 0, m = 0;
    while (true) {
      std::vector<i64> idx(static_cast<std::size_t>(r));
      double w = 1;
      for (int d = 0; d < r; ++d) {
        idx[static_cast<std::size_t>(d)] = taps[static_cast<std::size_t>(d)][c[static_cast<std::size_t>(d)]].first;
        w *= taps[static_cast<std::size_t>(d)][c[static_cast<std::size_t>(d)]].second;
      }
      const i64 src = flat_of(in, idx);
      if (p.mode == InterpolationMode::kNEAREST) want_raw[static_cast<std::size_t>(f)] = x.raw(src);
      acc += w * x.get(src);
      m += std::fabs(w * x.get(src));
      int d = r - 1;
      while (d >= 0 && ++c[static_cast<std::size_t>(d)] == taps[static_cast<std::size_t>(d)].size()) c[static_cast<std::size_t>(d--)] = 0;
      if (d < 0) break;
    }
    want[static_cast<std::size_t>(f)] = acc;
    mag[static_cast<std::size_t>(f)] = m;
  }
  if (p.mode == InterpolationMode::kNEAREST) expect_raw(out, [&](i64 f) { return want_raw[static_cast<std::size_t>(f)]; }, what);
  else expect_close(out, want, mag, 1e-5, what);
}

TEST(CpuIndexResize, NearestEveryRoundingAndTransformation) {
  const ResizeRoundMode rounds[] = {ResizeRoundMode::kHALF_UP, ResizeRoundMode::kHALF_DOWN, ResizeRoundMode::kFLOOR,
                                    ResizeRoundMode::kCEIL};
  const RCT cts[] = {RCT::kALIGN_CORNERS, RCT::kASYMMETRIC, RCT::kHALF_PIXEL};
  const Dims outs[] = {{2, 3, 8, 12}, {2, 3, 2, 3}, {2, 3, 7, 5}, {1, 3, 1, 1}, {3, 3, 4, 6}};
  std::uint32_t seed = 0;
  for (DataType t : kSizes)
    for (ResizeRoundMode rm : rounds)
      for (RCT ct : cts)
        for (const Dims& o : outs)
          for (ResizeSelector sel : {ResizeSelector::kFORMULA, ResizeSelector::kUPPER}) {
            ResizeParams p;
            p.output_dims = o;
            p.mode = InterpolationMode::kNEAREST;
            p.coordinate_transformation = ct;
            p.nearest_rounding = rm;
            p.selector_for_single_pixel = sel;
            check_resize(p, t, {2, 3, 4, 6}, ++seed,
                         std::string(type_name(t)) + " nearest round " + std::to_string(static_cast<int>(rm)) + " ct " +
                             std::to_string(static_cast<int>(ct)) + " out " + o.str());
          }
}

TEST(CpuIndexResize, NearestWithScales) {
  ResizeParams p;
  p.scales = {1.f, 2.5f, 0.5f};
  p.mode = InterpolationMode::kNEAREST;
  p.coordinate_transformation = RCT::kHALF_PIXEL;
  p.nearest_rounding = ResizeRoundMode::kHALF_DOWN;
  check_resize(p, DataType::kINT64, {2, 3, 9}, 3, "nearest scales");
}

TEST(CpuIndexResize, LinearAndCubicEveryFloatType) {
  const RCT cts[] = {RCT::kALIGN_CORNERS, RCT::kASYMMETRIC, RCT::kHALF_PIXEL};
  std::uint32_t seed = 100;
  for (DataType t : kFloats)
    for (RCT ct : cts)
      for (InterpolationMode m : {InterpolationMode::kLINEAR, InterpolationMode::kCUBIC})
        for (const Dims& o : {Dims{2, 3, 9, 13}, Dims{2, 3, 3, 4}, Dims{2, 3, 1, 7}, Dims{2, 3, 5, 6}}) {
          ResizeParams p;
          p.output_dims = o;
          p.mode = m;
          p.coordinate_transformation = ct;
          p.selector_for_single_pixel = ResizeSelector::kUPPER;
          p.cubic_coeff = m == InterpolationMode::kCUBIC && ct == RCT::kASYMMETRIC ? -0.5f : -0.75f;
          check_resize(p, t, {2, 3, 5, 6}, ++seed,
                       std::string(type_name(t)) + (m == InterpolationMode::kLINEAR ? " linear" : " cubic") + " ct " +
                           std::to_string(static_cast<int>(ct)) + " out " + o.str());
        }
}

TEST(CpuIndexResize, TrilinearAndScales) {
  ResizeParams p;
  p.output_dims = Dims{2, 7, 3, 10};
  p.mode = InterpolationMode::kLINEAR;
  p.coordinate_transformation = RCT::kHALF_PIXEL;
  check_resize(p, DataType::kFLOAT, {2, 4, 5, 6}, 1, "trilinear");
  ResizeParams q;
  q.scales = {1.f, 1.f, 1.5f, 2.f};
  q.mode = InterpolationMode::kLINEAR;
  q.coordinate_transformation = RCT::kASYMMETRIC;
  check_resize(q, DataType::kFLOAT, {1, 2, 5, 6}, 2, "linear scales");
  q.mode = InterpolationMode::kCUBIC;
  q.coordinate_transformation = RCT::kHALF_PIXEL;
  check_resize(q, DataType::kBF16, {1, 2, 5, 6}, 3, "cubic scales");
  ResizeParams big;  // enough rows for several threads
  big.output_dims = Dims{4, 8, 64, 64};
  big.mode = InterpolationMode::kLINEAR;
  big.coordinate_transformation = RCT::kHALF_PIXEL;
  check_resize(big, DataType::kFLOAT, {4, 8, 32, 32}, 4, "bilinear large");
}

TEST(CpuIndexResize, RefusesIntegerLinearAndWrongOutput) {
  ResizeParams p;
  p.output_dims = Dims{2, 4};
  p.mode = InterpolationMode::kLINEAR;
  Tensor x(DataType::kINT32, {2, 2}), out(DataType::kINT32, {2, 4});
  EXPECT_THROW(cpu::resize(p, x.ref(), out.ref()), InvalidArgument);
  Tensor xf(DataType::kFLOAT, {2, 2}), wrong(DataType::kFLOAT, {2, 5});
  EXPECT_THROW(cpu::resize(p, xf.ref(), wrong.ref()), InvalidArgument);
}

// ---- einsum -------------------------------------------------------------------------------

// out[...] = sum over every letter combination of the product of the operands, in double.
void naive_einsum(const std::string& eq, const std::vector<const Tensor*>& in, const Dims& od, std::vector<double>& want,
                  std::vector<double>& mag) {
  const auto arrow = eq.find("->");
  const std::string lhs = eq.substr(0, arrow), rhs = eq.substr(arrow + 2);
  std::vector<std::string> ops;
  std::size_t s = 0;
  while (true) {
    const auto c = lhs.find(',', s);
    ops.push_back(lhs.substr(s, c == std::string::npos ? std::string::npos : c - s));
    if (c == std::string::npos) break;
    s = c + 1;
  }
  std::map<char, i64> size;
  std::string letters;
  for (std::size_t i = 0; i < ops.size(); ++i)
    for (std::size_t k = 0; k < ops[i].size(); ++k) {
      if (!size.count(ops[i][k])) letters += ops[i][k];
      size[ops[i][k]] = in[i]->dims[static_cast<int>(k)];
    }
  want.assign(static_cast<std::size_t>(od.volume()), 0.0);
  mag.assign(want.size(), 0.0);
  std::map<char, i64> v;
  for (char c : letters) v[c] = 0;
  i64 total = 1;
  for (char c : letters) total *= size[c];
  for (i64 t = 0; t < total; ++t) {
    double prod = 1;
    for (std::size_t i = 0; i < ops.size(); ++i) {
      i64 f = 0;
      for (std::size_t k = 0; k < ops[i].size(); ++k) f = f * in[i]->dims[static_cast<int>(k)] + v[ops[i][k]];
      prod *= in[i]->get(f);
    }
    i64 of = 0;
    for (std::size_t k = 0; k < rhs.size(); ++k) of = of * od[static_cast<int>(k)] + v[rhs[k]];
    want[static_cast<std::size_t>(of)] += prod;
    mag[static_cast<std::size_t>(of)] += std::fabs(prod);
    for (auto it = letters.rbegin(); it != letters.rend(); ++it) {
      if (++v[*it] < size[*it]) break;
      v[*it] = 0;
    }
  }
}

void check_einsum(const std::string& eq, DataType t, const std::vector<Dims>& dims, const Dims& od, std::uint32_t seed) {
  std::vector<Tensor> ins;
  for (std::size_t i = 0; i < dims.size(); ++i) {
    ins.emplace_back(t, dims[i]);
    fill_uniform(ins.back(), seed + static_cast<std::uint32_t>(i));
  }
  std::vector<TensorRef> refs, sizing;
  for (auto& x : ins) {
    refs.push_back(x.ref());
    sizing.push_back(TensorRef{nullptr, x.type, x.dims});  // the builder asks before allocating
  }
  Tensor out(t, od);
  const EinsumParams p{eq};
  const std::size_t bytes = cpu::einsum_workspace_bytes(p, sizing, TensorRef{nullptr, t, od});
  std::vector<std::uint64_t> ws(bytes / 8 + 1);
  cpu::einsum(p, refs, out.ref(), bytes ? ws.data() : nullptr);
  std::vector<const Tensor*> ptrs;
  for (auto& x : ins) ptrs.push_back(&x);
  std::vector<double> want, mag;
  naive_einsum(eq, ptrs, od, want, mag);
  expect_close(out, want, mag, t == DataType::kFLOAT ? 1e-5 : 4e-3, eq + " " + std::string(type_name(t)));
}

TEST(CpuIndexEinsum, TransformerEquations) {
  std::uint32_t seed = 1;
  for (DataType t : kFloats) {
    check_einsum("bhqd,bhkd->bhqk", t, {{2, 3, 5, 8}, {2, 3, 7, 8}}, {2, 3, 5, 7}, ++seed);
    check_einsum("bhqk,bhkd->bhqd", t, {{2, 3, 5, 7}, {2, 3, 7, 8}}, {2, 3, 5, 8}, ++seed);
    check_einsum("bsd,de->bse", t, {{2, 5, 6}, {6, 4}}, {2, 5, 4}, ++seed);
    check_einsum("bij,bjk->bik", t, {{3, 4, 5}, {3, 5, 6}}, {3, 4, 6}, ++seed);
    check_einsum("ij,jk->ik", t, {{4, 5}, {5, 6}}, {4, 6}, ++seed);
    check_einsum("bi,bj->bij", t, {{3, 4}, {3, 5}}, {3, 4, 5}, ++seed);
    check_einsum("i,i->", t, {{17}, {17}}, Dims{}, ++seed);
  }
}

TEST(CpuIndexEinsum, PermutedLayoutsAndSums) {
  std::uint32_t seed = 50;
  for (DataType t : kFloats) {
    check_einsum("ki,kj->ij", t, {{5, 4}, {5, 6}}, {4, 6}, ++seed);            // A transposed
    check_einsum("ij,kj->ik", t, {{4, 5}, {6, 5}}, {4, 6}, ++seed);            // B transposed
    check_einsum("bqhd,bkhd->bhqk", t, {{2, 5, 3, 4}, {2, 6, 3, 4}}, {2, 3, 5, 6}, ++seed);  // packed operands
    check_einsum("ij,jk->ki", t, {{4, 5}, {5, 6}}, {6, 4}, ++seed);            // permuted output
    check_einsum("ik,kj->", t, {{3, 4}, {4, 5}}, Dims{}, ++seed);              // letters summed in one operand
    check_einsum("abc,cd->db", t, {{2, 3, 4}, {4, 5}}, {5, 3}, ++seed);
    check_einsum("ij,ij->ij", t, {{3, 4}, {3, 4}}, {3, 4}, ++seed);            // elementwise product
    check_einsum("ij,kl->ijkl", t, {{2, 3}, {3, 2}}, {2, 3, 3, 2}, ++seed);    // outer product
    check_einsum("ii,i->i", t, {{4, 4}, {4}}, {4}, ++seed);                    // a diagonal
    check_einsum("bj,bjk->bk", t, {{3, 0}, {3, 0, 4}}, {3, 4}, ++seed);        // empty contraction: zeros
  }
}

TEST(CpuIndexEinsum, OneInput) {
  std::uint32_t seed = 80;
  for (DataType t : kFloats) {
    check_einsum("ij->ji", t, {{4, 5}}, {5, 4}, ++seed);
    check_einsum("ij->i", t, {{4, 5}}, {4}, ++seed);
    check_einsum("ij->", t, {{4, 5}}, Dims{}, ++seed);
    check_einsum("ii->i", t, {{5, 5}}, {5}, ++seed);
    check_einsum("ii->", t, {{5, 5}}, Dims{}, ++seed);
    check_einsum("abc->cab", t, {{2, 3, 4}}, {4, 2, 3}, ++seed);
  }
}

TEST(CpuIndexEinsum, LargeAttentionShapes) {
  check_einsum("bhqd,bhkd->bhqk", DataType::kFLOAT, {{1, 4, 64, 32}, {1, 4, 48, 32}}, {1, 4, 64, 48}, 7);
  check_einsum("bhqk,bhkd->bhqd", DataType::kBF16, {{1, 4, 64, 48}, {1, 4, 48, 32}}, {1, 4, 64, 32}, 8);
}

TEST(CpuIndexEinsum, Errors) {
  Tensor a(DataType::kFLOAT, {2, 3}), b(DataType::kFLOAT, {4, 5}), out(DataType::kFLOAT, {2, 5});
  std::vector<TensorRef> refs{a.ref(), b.ref()};
  EXPECT_THROW(cpu::einsum(EinsumParams{"ij,jk->ik"}, refs, out.ref(), nullptr), InvalidArgument);  // j: 3 vs 4
  Tensor ai(DataType::kINT32, {2, 3});
  std::vector<TensorRef> one{ai.ref()};
  Tensor oi(DataType::kINT32, {3, 2});
  EXPECT_THROW(cpu::einsum(EinsumParams{"ij->ji"}, one, oi.ref(), nullptr), InvalidArgument);
  std::vector<TensorRef> one_f{a.ref()};
  Tensor o3(DataType::kFLOAT, {3, 3});
  EXPECT_THROW(cpu::einsum(EinsumParams{"ij->ji"}, one_f, o3.ref(), nullptr), InvalidArgument);  // wrong output dims
  Tensor half_a(DataType::kHALF, {2, 3}), half_b(DataType::kHALF, {3, 5}), half_o(DataType::kHALF, {2, 5});
  std::vector<TensorRef> halves{half_a.ref(), half_b.ref()};
  EXPECT_THROW(cpu::einsum(EinsumParams{"ij,jk->ik"}, halves, half_o.ref(), nullptr), InvalidArgument);  // no workspace
}

}  // namespace
