// tensoracle::convert_pth and inspect_pth (see tensoracle/convert.h).
#include "tensoracle/convert.h"

#include <fcntl.h>
#include <sys/stat.h>
#include <unistd.h>

#include <cerrno>
#include <map>

#include "convert/checkpoint.h"
#include "convert/writer.h"
#include "core/file_stat.h"
#include "core/mapped_file.h"

namespace tensoracle {

std::optional<ConvertDtype> parse_convert_dtype(std::string_view text) noexcept {
  if (text == "keep") return ConvertDtype::kKeep;
  if (text == "float32" || text == "fp32") return ConvertDtype::kFloat32;
  if (text == "float16" || text == "fp16") return ConvertDtype::kFloat16;
  if (text == "bfloat16" || text == "bf16") return ConvertDtype::kBFloat16;
  return std::nullopt;
}

std::string_view convert_dtype_name(ConvertDtype dtype) noexcept {
  switch (dtype) {
    case ConvertDtype::kKeep: return "keep";
    case ConvertDtype::kFloat32: return "float32";
    case ConvertDtype::kFloat16: return "float16";
    case ConvertDtype::kBFloat16: return "bfloat16";
  }
  return "?";
}

namespace {

void check_options(const ConvertOptions& o) {
  if (static_cast<int>(o.dtype) > static_cast<int>(ConvertDtype::kBFloat16))
    throw InvalidArgument("[convert] invalid dtype option " + std::to_string(static_cast<int>(o.dtype)));
  if (o.max_pickle_memory < (1u << 20))
    throw InvalidArgument("[convert] max_pickle_memory must be at least 1 MiB");
}

// A read-only descriptor of `path`, kept only if it names the file `mapped` describes.
struct ReadFd {
  int fd = -1;
  ReadFd(const std::filesystem::path& path, const core::FileStat& mapped) {
    fd = ::open(path.c_str(), O_RDONLY | O_CLOEXEC | O_NONBLOCK);
    struct stat st {};
    if (fd >= 0 && (::fstat(fd, &st) != 0 || !(core::FileStat::of(st) == mapped))) {
      ::close(fd);
      fd = -1;
    }
  }
  ~ReadFd() {
    if (fd >= 0) ::close(fd);
  }
  ReadFd(const ReadFd&) = delete;
  ReadFd& operator=(const ReadFd&) = delete;
};

}  // namespace

ConvertReport convert_pth(const std::filesystem::path& in, const std::filesystem::path& out,
                          const ConvertOptions& options) {
  check_options(options);
  // Refuse early, before reading gigabytes; the final rename checks again, atomically.
  std::error_code ec;
  if (!options.overwrite && std::filesystem::symlink_status(out, ec).type() != std::filesystem::file_type::not_found && !ec)
    throw IoError("[convert] " + out.string() + ": already exists; pass overwrite (--force) to replace it",
                  EEXIST, out.string());
  core::MappedFile map(in, false, "pth");
  pth::Checkpoint c = pth::read_checkpoint(map.bytes(), in.string(), options);
  // The file open once more, so that contiguous tensors are copied by the kernel
  // (copy_file_range) — if it is still the file that was mapped; else copies come from the map.
  ReadFd fd(in, map.stat());
  pth::InputFile input{map.bytes().data(), fd.fd};
  pth::Output o = pth::plan_output(c, options, &input);
  safetensors::save_file_streaming(out, o.sources, o.metadata, options.overwrite);
  return o.report;
}

CheckpointInfo inspect_pth(const std::filesystem::path& in, const ConvertOptions& options) {
  check_options(options);
  core::MappedFile map(in, false, "pth");
  pth::Checkpoint c = pth::read_checkpoint(map.bytes(), in.string(), options);
  CheckpointInfo info;
  info.file = in.string();
  info.file_size = map.bytes().size();
  info.archive = c.archive;
  info.byteorder = c.byteorder;
  info.format_version = c.version;
  info.pickle_protocol = c.pickle.protocol;
  info.storages = c.pickle.storages.size();
  for (const pth::Storage* s : c.pickle.storages) info.storage_bytes += s->data.size();
  std::map<const pth::Storage*, std::vector<std::string>> by_storage;
  for (const auto& e : c.tensors)
    if (e.numel > 0) by_storage[e.tensor->storage].push_back(e.name);
  for (const auto& e : c.tensors) {
    const pth::Tensor& t = *e.tensor;
    CheckpointTensor x;
    x.name = e.name;
    x.torch_dtype = std::string(pth::dtype_info(t.dtype).name);
    x.dtype = pth::output_dtype(t, options.dtype);
    x.shape = t.size;
    x.stride = t.stride;
    x.storage_offset = t.offset;
    x.storage = t.storage->record;
    x.nbytes = e.nbytes;
    x.contiguous = e.contiguous;
    x.parameter = t.parameter;
    x.requires_grad = t.requires_grad;
    if (e.numel > 0)
      for (const auto& other : by_storage[t.storage])
        if (other != e.name) x.shares_storage_with.push_back(other);
    info.tensors.push_back(std::move(x));
  }
  info.values = c.values;
  return info;
}

}  // namespace tensoracle
