// Internal: strict readers of NumPy's .npy and .npz files (for `tensoracle compare`).
//
//   npy::File f = npy::File::open("outputs.npz");        // .npy or .npz, told by content
//   for (std::size_t i = 0; i < f.size(); ++i) {          // npz: archive order
//     npy::Array a = f.read(i);                           // one array at a time
//     use(a.name, a.dtype, a.shape, a.data);              // C order, little-endian
//   }                                                     // dropping `a` frees what it inflated
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
// the strict zip reader of .pth checkpoints (io/zip_reader.h). Opening reads only the
// central directory; read(i) reads entry i: a stored entry in place (no copy), a deflated one
// inflated into memory that the returned Array owns. Sizes are checked before any memory is
// taken for them:
//   - a deflated entry's declared (uncompressed) size may be at most kMaxInflateRatio times
//     its compressed size (plus 1 KiB): deflate cannot expand further, so a larger claim is a lie;
//   - the declared sizes of one archive's deflated entries may add up to at most
//     Limits::max_inflated_bytes (kDefaultMaxInflatedBytes unless the caller raises it);
//   - the .npy header inflated first must need exactly the declared size (header + shape ×
//     element size), and inflation stops, with an error, as soon as it would pass that size.
//
// Every file is untrusted: any violation throws FormatError "[npy] FILE: ..." or
// "[npz] FILE: entry 'x.npy': ..."; no input reads outside its bytes. Memory the system
// refuses (std::bad_alloc) for an array is IoError ENOMEM naming the file and entry.
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

// The most an .npz's deflated entries may inflate to, in total, unless Limits says otherwise
// (`tensoracle compare --max-inflated SIZE`). Compare holds one array of each file at a time,
// so this also bounds what a hostile archive can make it allocate.
inline constexpr std::uint64_t kDefaultMaxInflatedBytes = std::uint64_t{16} << 30;  // 16 GiB
// Deflate's own limit: a 258-byte match costs at least 2 bits, so no stream inflates more than
// ~1032 times its size. np.savez_compressed of an all-zero array comes close (~1029:1), so no
// lower cap can be set without refusing such files.
inline constexpr std::uint64_t kMaxInflateRatio = 1032;

struct Limits {
  std::uint64_t max_inflated_bytes = kDefaultMaxInflatedBytes;
};

struct Array {
  std::string name;                   // npz: the entry's name without ".npy"; npy: empty
  safetensors::Dtype dtype{};
  std::vector<std::int64_t> shape;    // empty for a 0-d array
  std::span<const std::byte> data;    // C order; not necessarily aligned
  std::shared_ptr<const void> owner;  // keeps `data` alive (inflated or transposed bytes, or the mapping)
};

class File {
 public:
  // Maps `path` and parses it as .npy or .npz (by its first bytes): the .npy header, or the
  // .npz's directory with the limits above. Throws IoError, FormatError, UnsupportedError.
  static File open(const std::filesystem::path& path, const Limits& limits = {});
  // Parse bytes held by the caller (which must outlive the File and its Arrays);
  // `display_name` names them in messages.
  static File parse_npy(std::span<const std::byte> bytes, std::string display_name);
  static File parse_npz(std::span<const std::byte> bytes, std::string display_name, const Limits& limits = {});

  File(File&&) noexcept;
  File& operator=(File&&) noexcept;
  ~File();

  // How many arrays, and their names (known without reading any array).
  std::size_t size() const noexcept { return names_.size(); }
  const std::vector<std::string>& names() const noexcept { return names_; }
  // Array `i` (< size()), read now; see above. Throws FormatError, UnsupportedError, IoError.
  Array read(std::size_t i) const;
  // Every array at once: for small files (tests); compare reads one at a time.
  std::vector<Array> read_all() const;

  bool is_npz() const noexcept { return npz_; }
  const std::string& display_name() const noexcept { return name_; }

 private:
  File();
  struct Zip;
  std::shared_ptr<const void> mapping_;  // keeps mapped bytes alive (open)
  std::span<const std::byte> bytes_;
  std::unique_ptr<Zip> zip_;             // npz: the directory
  std::vector<std::string> names_;
  std::string name_;
  bool npz_ = false;
};

// Writing. An array to write: `data` holds product(shape) elements of `dtype`, C order,
// little-endian (borrowed for the call).
struct NamedArray {
  std::string name;
  safetensors::Dtype dtype{};
  std::vector<std::int64_t> shape;
  std::span<const std::byte> data;
};

// The bytes of one .npy file (format 1.0, as np.save writes it: the header padded with spaces
// to a multiple of 64 bytes). Only NumPy's own dtypes (float64/32/16, int8..64, uint8..64,
// bool): UnsupportedError names the array and says to use safetensors for bfloat16, fp8 and
// fp4, which NumPy stores only as raw bytes. InvalidArgument when data's size is not
// shape × element size. `where` prefixes messages.
std::vector<std::byte> npy_bytes(const NamedArray& array, const std::string& where);

// Writes an .npz archive of `arrays` as np.savez does (stored zip entries NAME.npy, CRC-32s),
// atomically (a temporary file renamed over `path`; nothing is left on failure). Names must be
// unique, non-empty and free of '/' and NUL; the archive must stay under 4 GiB (no zip64):
// larger outputs go to safetensors. `component` prefixes messages ("[run]").
void write_npz(const std::filesystem::path& path, const std::vector<NamedArray>& arrays, const std::string& component);

// Whether `bytes` start with the .npy magic (\x93NUMPY) / a zip record signature (PK).
bool looks_like_npy(std::span<const std::byte> bytes) noexcept;
bool looks_like_zip(std::span<const std::byte> bytes) noexcept;

}  // namespace tensoracle::npy
