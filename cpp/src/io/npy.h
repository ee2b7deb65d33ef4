// Internal: strict readers of NumPy's .npy and .npz files (for `tensoracle compare`).
//
//   npy::File f = npy::File::open("outputs.npz");        // .npy or .npz, told by content
//   for (const npy::Array& a : f.arrays())                // npz: archive order
//     use(a.name, a.dtype, a.shape, a.data);              // C order, little-endian
//
// .npy: format versions 1.0, 2.0 and 3.0; the header must be the dict NumPy writes
// ({'descr': ..., 'fortran_order': ..., 'shape': (...)}, nothing else), the data exactly
// shape × element size bytes. dtypes: float64/32/16, int8..int64, uint8..uint64, bool and
// complex64 (which compare refuses); Fortran-order arrays are transposed into C order.
// Refused with UnsupportedError: object arrays (they need pickle: never loaded), structured,
// string and datetime dtypes, big-endian multi-byte data, and void dtypes — the way np.save
// writes ml_dtypes' bfloat16 and fp8 arrays ('<V2', '<V1'), which loses their type.
//
// .npz: a zip archive of .npy entries (np.savez: stored; np.savez_compressed: deflated, read
// with zlib), each named NAME.npy; CRC-32s are checked. The archive's structure is read by
// the .pth converter's strict zip reader (convert/zip_reader.h).
//
// Every file is untrusted: any violation throws FormatError "[npy] FILE: ..." or
// "[npz] FILE: entry 'x.npy': ..."; no input reads outside its bytes, and a deflated entry
// may not expand past what deflate can encode in its compressed size.
#pragma once

#include <cstddef>
#include <cstdint>
#include <filesystem>
#include <memory>
#include <span>
#include <string>
#include <vector>

#include "tensoracle/safetensors.h"

namespace tensoracle::npy {

struct Array {
  std::string name;                   // npz: the entry's name without ".npy"; npy: empty
  safetensors::Dtype dtype{};
  std::vector<std::int64_t> shape;    // empty for a 0-d array
  std::span<const std::byte> data;    // C order; not necessarily aligned
};

class File {
 public:
  // Maps `path` and parses it as .npy or .npz (by its first bytes). Throws IoError,
  // FormatError, UnsupportedError.
  static File open(const std::filesystem::path& path);
  // Parse bytes held by the caller (which must outlive the File); `display_name` names
  // them in messages.
  static File parse_npy(std::span<const std::byte> bytes, std::string display_name);
  static File parse_npz(std::span<const std::byte> bytes, std::string display_name);

  const std::vector<Array>& arrays() const noexcept { return arrays_; }
  bool is_npz() const noexcept { return npz_; }
  const std::string& display_name() const noexcept { return name_; }

 private:
  std::shared_ptr<const void> mapping_;                  // keeps mapped bytes alive
  std::vector<std::shared_ptr<std::byte[]>> owned_;      // inflated or transposed data
  std::vector<Array> arrays_;
  std::string name_;
  bool npz_ = false;
};

// Whether `bytes` start with the .npy magic (\x93NUMPY) / a zip record signature (PK).
bool looks_like_npy(std::span<const std::byte> bytes) noexcept;
bool looks_like_zip(std::span<const std::byte> bytes) noexcept;

}  // namespace tensoracle::npy
