// Streaming tensor data out of a checkpoint's storages (see writer.h).
#include "convert/writer.h"

#include <sys/mman.h>
#include <unistd.h>

#include <algorithm>
#include <cmath>
#include <cstring>
#include <functional>

#include "core/numeric.h"

namespace tensoracle::pth {

namespace st = tensoracle::safetensors;

namespace {

// Returns the pages under [p, p + n) of a read-only file mapping to the kernel (the partial
// pages at both ends included: they are clean file pages, which a later access reads again
// from the page cache).
void release(const std::byte* p, std::uint64_t n) {
  static const auto page = static_cast<std::uintptr_t>(::sysconf(_SC_PAGESIZE));
  if (n == 0) return;
  auto start = reinterpret_cast<std::uintptr_t>(p) & ~(page - 1);
  auto end = reinterpret_cast<std::uintptr_t>(p) + n;
  ::madvise(reinterpret_cast<void*>(start), end - start, MADV_DONTNEED);  // advisory: errors ignored
}

// torch's float -> bfloat16: round to nearest even, every NaN to 0x7FC0.
std::uint16_t bf16_like_torch(float x) {
  return std::isnan(x) ? std::uint16_t{0x7FC0} : core::float_to_bf16(x);
}

void cast(const std::byte* in, TorchDtype from, std::byte* out, st::Dtype to, std::size_t n) {
  for (std::size_t i = 0; i < n; ++i) {
    float v;
    switch (from) {
      case TorchDtype::kFloat64: {  // to float32 first, also on the way to 16 bits (as torch)
        double d;
        std::memcpy(&d, in + 8 * i, 8);
        v = static_cast<float>(d);
        break;
      }
      case TorchDtype::kFloat32: std::memcpy(&v, in + 4 * i, 4); break;
      case TorchDtype::kFloat16: {
        std::uint16_t h;
        std::memcpy(&h, in + 2 * i, 2);
        v = core::half_to_float(h);
        break;
      }
      default: {  // kBFloat16
        std::uint16_t b;
        std::memcpy(&b, in + 2 * i, 2);
        v = core::bf16_to_float(b);
        break;
      }
    }
    if (to == st::Dtype::F32) {
      std::memcpy(out + 4 * i, &v, 4);
    } else {
      std::uint16_t h = to == st::Dtype::F16 ? core::float_to_half(v) : bf16_like_torch(v);
      std::memcpy(out + 2 * i, &h, 2);
    }
  }
}

void byte_swap(std::byte* p, std::uint64_t bytes, int unit) {
  for (std::uint64_t i = 0; i + static_cast<std::uint64_t>(unit) <= bytes; i += static_cast<std::uint64_t>(unit))
    std::reverse(p + i, p + i + unit);
}

// Flips the sign bit (the top bit of the last byte, little-endian) of every `unit`-byte word
// at `first` within each `period`-byte element.
void flip_signs(std::byte* p, std::uint64_t bytes, int period, int unit, int first) {
  for (std::uint64_t i = static_cast<std::uint64_t>(first + unit - 1); i < bytes; i += static_cast<std::uint64_t>(period))
    p[i] ^= std::byte{0x80};
}

// Row-major iteration over a strided tensor's elements, by runs along its innermost
// (collapsed) dimension.
class ElementWalker {
 public:
  ElementWalker(const Tensor& t) : offset_(t.offset) {
    for (std::size_t i = 0; i < t.size.size(); ++i) {
      if (t.size[i] == 1) continue;
      if (!dims_.empty() && dims_.back().stride == t.stride[i] * t.size[i]) {
        dims_.back() = {dims_.back().size * t.size[i], t.stride[i]};  // merge with the outer one
      } else {
        dims_.push_back({t.size[i], t.stride[i]});
      }
    }
    if (dims_.empty()) dims_.push_back({1, 1});
    index_.assign(dims_.size(), 0);
  }

  // Copies the next `count` elements of `is` bytes from `base` to `out`.
  void gather(const std::byte* base, std::size_t is, std::byte* out, std::uint64_t count) {
    const Dim inner = dims_.back();
    while (count > 0) {
      std::uint64_t run = std::min<std::uint64_t>(count, static_cast<std::uint64_t>(inner.size - index_.back()));
      const std::byte* src = base + static_cast<std::uint64_t>(offset_ + index_.back() * inner.stride) * is;
      if (inner.stride == 1) {
        std::memcpy(out, src, run * is);
      } else {
        std::uint64_t step = static_cast<std::uint64_t>(inner.stride) * is;
        switch (is) {
          case 1: for (std::uint64_t i = 0; i < run; ++i) out[i] = src[i * step]; break;
          case 2: for (std::uint64_t i = 0; i < run; ++i) std::memcpy(out + 2 * i, src + i * step, 2); break;
          case 4: for (std::uint64_t i = 0; i < run; ++i) std::memcpy(out + 4 * i, src + i * step, 4); break;
          case 8: for (std::uint64_t i = 0; i < run; ++i) std::memcpy(out + 8 * i, src + i * step, 8); break;
          default: for (std::uint64_t i = 0; i < run; ++i) std::memcpy(out + is * i, src + i * step, is); break;
        }
      }
      out += run * is;
      count -= run;
      index_.back() += static_cast<std::int64_t>(run);
      if (index_.back() == inner.size) advance_outer();
    }
  }

 private:
  struct Dim {
    std::int64_t size, stride;
  };
  void advance_outer() {
    index_.back() = 0;
    for (std::size_t d = dims_.size() - 1; d-- > 0;) {
      offset_ += dims_[d].stride;
      if (++index_[d] < dims_[d].size) return;
      offset_ -= dims_[d].stride * dims_[d].size;
      index_[d] = 0;
    }
  }
  std::vector<Dim> dims_;
  std::vector<std::int64_t> index_;
  std::int64_t offset_;  // element offset of the current outer position
};

// Writes one tensor's bytes as the output wants them.
class TensorWriter {
 public:
  TensorWriter(const Entry& e, st::Dtype out_dtype, bool big_endian, const InputFile* input,
               std::shared_ptr<ConvertProgress> progress, std::function<void(const ConvertProgress&)> report)
      : e_(e), t_(*e.tensor), info_(dtype_info(t_.dtype)), out_dtype_(out_dtype),
        swap_(big_endian && info_.swap_unit > 1), cast_(info_.castable && out_dtype != *info_.st),
        release_(input != nullptr), input_(input), progress_(std::move(progress)), report_(std::move(report)) {}

  void operator()(st::ByteSink& out) {
    if (e_.numel > 0) {
      if (e_.contiguous && !swap_ && !cast_ && !t_.conj && !t_.neg) copy(out);
      else transform(out);
    }
    ++progress_->tensors_done;
    tell();
  }

 private:
  void tell() {
    if (report_) report_(*progress_);
  }
  void advance(std::uint64_t n) {
    progress_->bytes_done += n;
    tell();
  }

  void copy(st::ByteSink& out) {
    auto is = static_cast<std::uint64_t>(info_.itemsize);
    const std::byte* p = t_.storage->data.data() + static_cast<std::uint64_t>(t_.offset) * is;
    for (std::uint64_t left = e_.nbytes; left > 0;) {
      std::uint64_t n = std::min(left, kChunkBytes);
      if (input_ && input_->fd >= 0) {
        out.write_from_file(input_->fd, static_cast<std::uint64_t>(p - input_->mapping), n);
      } else {
        out.write({p, static_cast<std::size_t>(n)});
        if (release_) release(p, n);
      }
      p += n;
      left -= n;
      advance(n);
    }
  }

  void transform(st::ByteSink& out) {
    auto is = static_cast<std::size_t>(info_.itemsize);
    std::size_t os = cast_ ? static_cast<std::size_t>(st::dtype_bits(out_dtype_) / 8) : is;
    std::uint64_t per_chunk = std::max<std::uint64_t>(1, kChunkBytes / std::max(is, os));
    std::vector<std::byte> a(static_cast<std::size_t>(std::min(per_chunk, e_.numel)) * is);
    std::vector<std::byte> b(cast_ ? static_cast<std::size_t>(std::min(per_chunk, e_.numel)) * os : 0);
    const std::byte* base = t_.storage->data.data();
    ElementWalker walk(t_);
    std::uint64_t done = 0;
    while (done < e_.numel) {
      std::uint64_t n = std::min(per_chunk, e_.numel - done);
      std::uint64_t bytes = n * is;
      walk.gather(base, is, a.data(), n);
      if (swap_) byte_swap(a.data(), bytes, info_.swap_unit);
      if (t_.conj) flip_signs(a.data(), bytes, 8, 4, 4);  // complex64: the imaginary float
      if (t_.neg) flip_signs(a.data(), bytes, info_.swap_unit, info_.swap_unit, 0);
      if (cast_) {
        cast(a.data(), t_.dtype, b.data(), out_dtype_, static_cast<std::size_t>(n));
        out.write({b.data(), static_cast<std::size_t>(n * os)});
        advance(n * os);
      } else {
        out.write({a.data(), static_cast<std::size_t>(bytes)});
        advance(bytes);
      }
      if (release_ && e_.contiguous) release(base + (static_cast<std::uint64_t>(t_.offset) + done) * is, bytes);
      done += n;
    }
    if (release_ && !e_.contiguous) release(base, t_.storage->data.size());
  }

  const Entry& e_;
  const Tensor& t_;
  const TorchDtypeInfo& info_;
  st::Dtype out_dtype_;
  bool swap_, cast_, release_;
  const InputFile* input_;
  std::shared_ptr<ConvertProgress> progress_;
  std::function<void(const ConvertProgress&)> report_;
};

}  // namespace

Output plan_output(const Checkpoint& c, const ConvertOptions& options, const InputFile* input) {
  Output o;
  o.progress = std::make_shared<ConvertProgress>();
  o.metadata = output_metadata(c);
  bool big = c.byteorder == "big";
  for (const Entry& e : c.tensors) {
    check_writable(c, e, options.dtype);
    st::Dtype dtype = *output_dtype(*e.tensor, options.dtype);
    auto shape = output_shape(*e.tensor);
    std::uint64_t out_bytes = e.nbytes;
    const TorchDtypeInfo& info = dtype_info(e.tensor->dtype);
    if (info.castable && dtype != *info.st)
      out_bytes = e.numel * static_cast<std::uint64_t>(st::dtype_bits(dtype) / 8);
    o.progress->bytes_total += out_bytes;
    o.report.tensor_bytes += out_bytes;
    if (!e.contiguous && e.numel > 0) ++o.report.views_made_contiguous;
    o.sources.push_back({e.name, dtype, std::move(shape),
                         TensorWriter(e, dtype, big, input, o.progress, options.progress)});
  }
  o.progress->tensors_total = c.tensors.size();
  o.report.tensors = c.tensors.size();
  o.report.metadata_entries = o.metadata.size();
  o.report.shared_storages = c.shared.size();
  o.report.byte_swapped = big;
  return o;
}

}  // namespace tensoracle::pth
