#pragma once
// What the commands that read and write arrays share: opening .npy/.npz/.safetensors files,
// writing .npz/.safetensors, input shapes and generated inputs, and compare's report.
#include <cstdint>
#include <functional>
#include <map>
#include <memory>
#include <optional>
#include <random>
#include <string>
#include <variant>
#include <vector>

#include "io/npy.h"
#include "tensoracle/compare.h"
#include "tensoracle/engine.h"
#include "tensoracle/safetensors.h"
#include "tensoracle/types.h"

namespace tensoracle::tools {

// The arrays of one file, by name; `named` is false for a .npy file (one unnamed array).
// Arrays are read one at a time (load): an .npz's compressed arrays are inflated only when
// loaded, so a caller can hold one array of a file at a time.
struct TensorFile {
  std::string path;
  bool named = true;
  std::vector<std::string> names;
  std::variant<std::monostate, npy::File, safetensors::File> holder;  // keeps the bytes alive

  struct Loaded {
    ArrayView view;
    std::shared_ptr<const void> owner;  // what an .npz entry inflated to (freed when dropped)
  };
  Loaded load(std::size_t i) const;
};

// Opens .npy, .npz (by their first bytes) or safetensors (anything else: its parser says what
// is wrong with it).
TensorFile open_tensor_file(const std::string& path, const npy::Limits& limits = {});

// Writes named arrays to `path`: .npz (NumPy's own dtypes) or .safetensors (any), chosen by the
// extension; atomically. `command` prefixes messages.
void save_arrays(const std::string& path, const std::vector<npy::NamedArray>& arrays, const std::string& command);

// "'a', 'b' and 3 more" (at most 10 names).
std::string name_list(const std::vector<std::string>& names);
// "(2, 3)", "(4,)", "()".
std::string shape_text(const std::vector<std::int64_t>& shape);

// "images=8x3x224x224" (or with commas) -> ("images", dims); InvalidArgument prefixed
// "[command] --shape".
std::pair<std::string, Dims> parse_shape(const std::string& spec, const std::string& command);

// trtexec's "--shapes=a:2x3,b:4x5" (or with '='): the entries as parse_shape's "a=2x3".
std::vector<std::string> split_shapes(const std::string& list, const std::string& command);

// The input shapes given by --shape (NAME=DIMS each) and --shapes (lists), in order, with the
// spec each came from: every name an input of `engine`, none given twice (InvalidArgument
// prefixed "[command]").
struct GivenShape {
  std::string name;
  Dims dims;
  std::string spec;
};
std::vector<GivenShape> given_shapes(const Engine& engine, const std::vector<std::string>& shapes,
                                     const std::vector<std::string>& shape_lists, const std::string& command);

// Runs `fn` (which sets input shapes and infers the others); when that fails while some inputs
// kept their profile's opt shape because no flag gave theirs, the error (same type) gains a hint
// naming them and the flag that sets every input's shape at once. `defaulted`: "name (dims)".
void with_shape_hint(const std::vector<std::string>& defaulted, bool some_given, const std::string& command,
                     const std::function<void()>& fn);

// Fills an input the commands generate: floating types uniform in [-1, 1) from `rng`; integer,
// bool and quantized types zero (a valid index for any gather).
void fill_generated(std::vector<std::byte>& bytes, DataType type, std::mt19937& rng);

// compare's report over tensors compared in order (text table or JSON).
struct ComparedTensor {
  std::string name;  // empty: the unnamed array of a .npy file
  OutputComparison result;
};
// Passed: no non-finite value, nothing outside the tolerances (only meaningful with them).
bool comparison_passed(const OutputComparison& c);
void print_comparison(const std::string& candidate, const std::string& reference, const std::optional<double>& atol,
                      const std::optional<double>& rtol, const std::vector<ComparedTensor>& tensors,
                      const std::string& plot, bool json);

}  // namespace tensoracle::tools
