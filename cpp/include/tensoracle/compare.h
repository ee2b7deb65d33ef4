// tensoracle/compare.h — measure how far a candidate output is from a reference output.
//
//   // The fp32 engine's output is the reference; a bf16 engine's output the candidate.
//   std::vector<float> reference = ..., candidate = ...;       // 16 x 16 each
//   tensoracle::CompareOptions options;
//   options.atol = 0.01;                                     // both tolerances given: the
//   options.rtol = 0.0;                                      // outside-tolerance counts
//   tensoracle::OutputComparison c = tensoracle::compare_outputs(
//       tensoracle::ArrayView::of(candidate.data(), {16, 16}),
//       tensoracle::ArrayView::of(reference.data(), {16, 16}), options);
//   bool accepted = c.candidate_nonfinite_count == 0 && c.reference_nonfinite_count == 0 &&
//                   c.outside_tolerance_count == 0 && c.relative_l2_error < 0.01;
//
// Every metric is computed in float64 from the arrays' values, in one multi-threaded pass
// (see compare_outputs below for the accumulation). The arrays are borrowed: compare_outputs
// reads them during the call only.
//
// Metrics (the fields of OutputComparison):
//   candidate_nonfinite_count, reference_nonfinite_count
//       NaN and ±inf elements in each array (always 0 for integer and bool arrays).
//   max_absolute_error   max |c − r|
//   relative_l2_error    ‖c − r‖₂ / ‖r‖₂            (empty when ‖r‖₂ = 0)
//   cosine_similarity    c·r / (‖c‖₂ ‖r‖₂), clamped to [−1, 1]  (empty when a norm is 0)
//       These three are computed only for floating arrays (float64/32/16, bfloat16, fp8) in
//       which both arrays are entirely finite and hold at least one element; otherwise they
//       are empty.
//   outside_tolerance_count, outside_tolerance_fraction
//       Elements where NOT |c − r| <= atol + rtol·|r| (numpy.isclose's rule, evaluated in
//       float64), and their share of element_count. Computed only when both atol and rtol
//       are given and neither array holds a non-finite value — for integer and bool arrays
//       too; the fraction is empty for empty arrays.
#pragma once

#include <cstddef>
#include <cstdint>
#include <initializer_list>
#include <optional>
#include <string>
#include <vector>

#include "tensoracle/safetensors.h"
#include "tensoracle/types.h"

namespace tensoracle {

// A borrowed, row-major (C-contiguous) array: `data` holds product(shape) elements of
// `dtype`, little-endian, with no alignment requirement. A rank-0 array (empty shape) holds
// one element. The element types are safetensors' (a superset of DataType: F64, I16, U16,
// U32, U64, F8_E5M2 and the FNUZ fp8 types exist in NumPy and files, not in engines).
struct ArrayView {
  const void* data = nullptr;
  safetensors::Dtype dtype = safetensors::Dtype::F32;
  std::vector<std::int64_t> shape;

  // Convenience constructors.
  static ArrayView of(const float* data, std::vector<std::int64_t> shape) {
    return {data, safetensors::Dtype::F32, std::move(shape)};
  }
  static ArrayView of(const double* data, std::vector<std::int64_t> shape) {
    return {data, safetensors::Dtype::F64, std::move(shape)};
  }
  // An engine tensor's type and dims (e.g. a HostTensor returned by Execution::run).
  static ArrayView of(const void* data, DataType type, const Dims& dims);
};

// The safetensors dtype of an engine DataType (kFLOAT → F32, kFP8 → F8_E4M3, ...).
safetensors::Dtype to_dtype(DataType type) noexcept;
// NumPy's name of a dtype ("float32", "bfloat16", "float8_e4m3fn", "bool", ...); empty for
// dtypes NumPy (with ml_dtypes) has no name for.
std::string_view numpy_name(safetensors::Dtype dtype) noexcept;

struct CompareOptions {
  // Both must be given for the outside-tolerance metrics; each must be >= 0 (not NaN).
  std::optional<double> atol;
  std::optional<double> rtol;
  // Names what is compared in error messages ("tensor 'result'"); may be empty.
  std::string label;
};

struct OutputComparison {
  std::vector<std::int64_t> shape;
  safetensors::Dtype dtype = safetensors::Dtype::F32;
  std::int64_t element_count = 0;

  std::int64_t candidate_nonfinite_count = 0;
  std::int64_t reference_nonfinite_count = 0;
  std::optional<double> max_absolute_error;
  std::optional<double> relative_l2_error;
  std::optional<double> cosine_similarity;
  std::optional<std::int64_t> outside_tolerance_count;
  std::optional<double> outside_tolerance_fraction;
};

// Compares two arrays of the same shape and dtype (no conversion between types: a
// mismatch is a caller's error). Runs on the CPU backend's threads (cpu_threads()).
//
// Accumulation: every element is converted to float64; the array is cut into fixed chunks of
// 65,536 elements, each summed in 8 interleaved float64 lanes that are then added pairwise;
// chunk results are added pairwise as well. The cut does not depend on the thread count, so
// a result is the same on 1 or 64 threads (and with or without the AVX2 build of the loop,
// which x86 CPUs that have AVX2 run). float64 arrays whose magnitudes are outside
// [2^-200, 2^200] are summed in a second pass scaled by powers of two, so that their sums of
// squares neither overflow nor underflow (no narrower type can).
//
// Throws InvalidArgument when shapes or dtypes differ, a dim is negative, the element count
// overflows, data is null for a non-empty array, or a tolerance is negative or NaN;
// UnsupportedError for dtypes without element values to compare (F4, F6_*, F8_E8M0, C64).
OutputComparison compare_outputs(const ArrayView& candidate, const ArrayView& reference,
                                 const CompareOptions& options = {});

// The distribution of the errors, for plots (`tensoracle compare --plot`). Only pairs where
// both values are finite are counted.
struct ErrorDistribution {
  double max_error = 0;                   // max |c − r|: the histogram spans [0, max_error]
  double max_reference = 0;               // max |r|
  std::vector<std::int64_t> histogram;    // `bins` equal-width bins of |c − r|
  std::int64_t nonfinite_pairs = 0;       // pairs left out: c or r is NaN or ±inf
  // Up to `max_points` pairs (|r|, |c − r|): an even sample of the array plus the largest
  // errors (a tenth of the points), in no particular order.
  std::vector<std::pair<double, double>> points;
};

// Same argument rules as compare_outputs; bins >= 1.
ErrorDistribution error_distribution(const ArrayView& candidate, const ArrayView& reference,
                                     int bins = 40, std::size_t max_points = 2000,
                                     const std::string& label = {});

}  // namespace tensoracle
