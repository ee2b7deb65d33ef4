#include "plugin/instance.h"

#include <array>
#include <cstring>

#include "tensoracle/errors.h"

namespace tensoracle {

namespace {

constexpr std::size_t kErrorSize = 1024;
constexpr int kMaxOutputs = 64;

TensoraclePluginTensorDesc to_abi(const PluginTensorDesc& d) {
  TensoraclePluginTensorDesc a{};
  a.type = static_cast<std::int32_t>(d.type);
  a.rank = d.dims.rank();
  for (int i = 0; i < d.dims.rank(); ++i) a.dims[i] = d.dims[i];
  return a;
}

std::vector<TensoraclePluginTensorDesc> to_abi(std::span<const PluginTensorDesc> ds) {
  std::vector<TensoraclePluginTensorDesc> out;
  out.reserve(ds.size());
  for (const auto& d : ds) out.push_back(to_abi(d));
  return out;
}

// The plugin's message, NUL-terminated whatever it wrote.
struct ErrorBuffer {
  std::array<char, kErrorSize> text{};
  const char* c_str() {
    text.back() = '\0';
    return text.data();
  }
};

std::string desc_text(const TensoraclePluginTensorDesc& d) {
  std::string s = "rank " + std::to_string(d.rank) + " (";
  for (int i = 0; i < d.rank && i < TENSORACLE_PLUGIN_MAX_RANK; ++i) s += (i ? ", " : "") + std::to_string(d.dims[i]);
  return s + ")";
}

}  // namespace

PluginInstance::PluginInstance(TensoraclePlugin* plugin, std::string label) : plugin_(plugin), label_(std::move(label)) {
  struct Release {
    TensoraclePlugin*& p;
    bool armed = true;
    ~Release() {
      if (armed && p && p->destroy) p->destroy(p);
    }
  } release{plugin_};
  if (plugin_ == nullptr) throw InvalidArgument(label_ + ": the creator returned success but no plugin");
  if (plugin_->abi_version != TENSORACLE_PLUGIN_ABI_VERSION)
    throw PluginLibraryError(label_ + ": the plugin speaks ABI version " + std::to_string(plugin_->abi_version) +
                             "; this tensoracle speaks version " + std::to_string(TENSORACLE_PLUGIN_ABI_VERSION) +
                             " (rebuild the library against this tensoracle's plugin.h)");
  if (!plugin_->destroy || !plugin_->get_num_outputs || !plugin_->get_output_descs || !plugin_->supports ||
      !plugin_->workspace_size)
    throw PluginLibraryError(label_ + ": the plugin lacks one of destroy, get_num_outputs, get_output_descs, "
                             "supports and workspace_size");
  ErrorBuffer e;
  std::int32_t n = 0;
  if (auto rc = plugin_->get_num_outputs(plugin_, &n, e.text.data(), e.text.size()); rc != TENSORACLE_PLUGIN_OK)
    fail(rc, "get_num_outputs", e.c_str());
  if (n < 1 || n > kMaxOutputs)
    throw InvalidArgument(label_ + ": the plugin reports " + std::to_string(n) + " outputs; a plugin has 1 to " +
                          std::to_string(kMaxOutputs));
  num_outputs_ = n;
  release.armed = false;
}

PluginInstance::~PluginInstance() {
  if (plugin_ && plugin_->destroy) plugin_->destroy(plugin_);
}

void PluginInstance::fail(std::int32_t code, const char* what, const char* message) const {
  std::string m = label_ + ": " + what + " failed";
  if (message && *message) m += ": " + std::string(message);
  switch (code) {
    case TENSORACLE_PLUGIN_INVALID_ARGUMENT: throw InvalidArgument(m);
    case TENSORACLE_PLUGIN_UNSUPPORTED: throw UnsupportedError(m);
    default: throw Error(m + " (error code " + std::to_string(code) + ")");
  }
}

bool PluginInstance::has_backend(int backend_bit) const noexcept {
  if (backend_bit == TENSORACLE_BACKEND_CPU) return plugin_->enqueue_cpu != nullptr;
  if (backend_bit == TENSORACLE_BACKEND_CUDA) return plugin_->enqueue_cuda != nullptr;
  return false;
}

std::vector<PluginTensorDesc> PluginInstance::output_descs(std::span<const PluginTensorDesc> in) const {
  auto abi_in = to_abi(in);
  bool inputs_known = true;
  for (const auto& d : in) inputs_known = inputs_known && d.dims.all_known();
  std::vector<TensoraclePluginTensorDesc> abi_out(static_cast<std::size_t>(num_outputs_));
  for (auto& d : abi_out) d.rank = -1;  // must be written
  ErrorBuffer e;
  auto rc = plugin_->get_output_descs(plugin_, abi_in.data(), static_cast<std::int32_t>(abi_in.size()), abi_out.data(),
                                      num_outputs_, e.text.data(), e.text.size());
  if (rc != TENSORACLE_PLUGIN_OK) {
    std::string m = label_ + " refuses its inputs";
    if (*e.c_str()) m += ": " + std::string(e.c_str());
    if (rc == TENSORACLE_PLUGIN_INVALID_ARGUMENT || rc == TENSORACLE_PLUGIN_UNSUPPORTED) throw InvalidArgument(m);
    throw InvalidArgument(label_ + ": get_output_descs failed" + (*e.c_str() ? ": " + std::string(e.c_str()) : std::string()) +
                          " (error code " + std::to_string(rc) + ")");
  }
  std::vector<PluginTensorDesc> out;
  for (std::size_t i = 0; i < abi_out.size(); ++i) {
    const auto& d = abi_out[i];
    const std::string which = label_ + ": output " + std::to_string(i);
    if (d.rank < 0 || d.rank > TENSORACLE_PLUGIN_MAX_RANK)
      throw InvalidArgument(which + " has rank " + std::to_string(d.rank) + " (get_output_descs must set a rank of 0 to " +
                            std::to_string(TENSORACLE_PLUGIN_MAX_RANK) + ")");
    if (d.type < 0 || d.type >= kDataTypeCount)
      throw InvalidArgument(which + " has type " + std::to_string(d.type) + ", which is not a tensoracle data type");
    for (int k = 0; k < d.rank; ++k) {
      if (d.dims[k] < -1)
        throw InvalidArgument(which + " has dims " + desc_text(d) + ": dimension " + std::to_string(k) + " is negative");
      if (d.dims[k] == -1 && inputs_known)
        throw InvalidArgument(which + " has dims " + desc_text(d) + ": dimension " + std::to_string(k) +
                              " is -1 although every input dim is known");
    }
    PluginTensorDesc t;
    t.type = static_cast<DataType>(d.type);
    t.dims = Dims(std::span<const std::int64_t>(d.dims, static_cast<std::size_t>(d.rank)));
    out.push_back(t);
  }
  return out;
}

std::string PluginInstance::unsupported_reason(int backend_bit, std::span<const PluginTensorDesc> in,
                                               std::span<const PluginTensorDesc> out) const {
  const char* backend = backend_bit == TENSORACLE_BACKEND_CUDA ? "CUDA" : "CPU";
  if (!has_backend(backend_bit)) return label_ + " has no " + backend + " implementation";
  auto abi_in = to_abi(in), abi_out = to_abi(out);
  ErrorBuffer e;
  std::int32_t ok = 0;
  auto rc = plugin_->supports(plugin_, backend_bit, abi_in.data(), static_cast<std::int32_t>(abi_in.size()), abi_out.data(),
                              static_cast<std::int32_t>(abi_out.size()), &ok, e.text.data(), e.text.size());
  if (rc != TENSORACLE_PLUGIN_OK) {
    std::string m = label_ + ": supports failed";
    if (*e.c_str()) m += ": " + std::string(e.c_str());
    return m;
  }
  if (ok) return "";
  std::string m = label_ + " does not run these input/output types on the " + backend + " backend";
  if (*e.c_str()) m += ": " + std::string(e.c_str());
  return m;
}

std::uint64_t PluginInstance::workspace_size(int backend_bit, std::span<const PluginTensorDesc> in,
                                             std::span<const PluginTensorDesc> out) const {
  auto abi_in = to_abi(in), abi_out = to_abi(out);
  ErrorBuffer e;
  std::uint64_t bytes = 0;
  auto rc = plugin_->workspace_size(plugin_, backend_bit, abi_in.data(), static_cast<std::int32_t>(abi_in.size()),
                                    abi_out.data(), static_cast<std::int32_t>(abi_out.size()), &bytes, e.text.data(),
                                    e.text.size());
  if (rc != TENSORACLE_PLUGIN_OK) fail(rc, "workspace_size", e.c_str());
  constexpr std::uint64_t kMax = std::uint64_t{1} << 48;
  if (bytes > kMax) throw InvalidArgument(label_ + ": workspace_size asks for " + std::to_string(bytes) + " bytes");
  return bytes;
}

void PluginInstance::enqueue_cpu(std::span<const PluginTensorDesc> in, const void* const* inputs,
                                 std::span<const PluginTensorDesc> out, void* const* outputs, void* workspace,
                                 std::uint64_t workspace_bytes) const {
  if (!plugin_->enqueue_cpu) throw UnsupportedError(label_ + " has no CPU implementation");
  auto abi_in = to_abi(in), abi_out = to_abi(out);
  ErrorBuffer e;
  auto rc = plugin_->enqueue_cpu(plugin_, abi_in.data(), inputs, static_cast<std::int32_t>(abi_in.size()), abi_out.data(),
                                 outputs, static_cast<std::int32_t>(abi_out.size()), workspace, workspace_bytes,
                                 e.text.data(), e.text.size());
  if (rc != TENSORACLE_PLUGIN_OK) fail(rc, "enqueue_cpu", e.c_str());
}

void PluginInstance::enqueue_cuda(std::span<const PluginTensorDesc> in, const void* const* inputs,
                                  std::span<const PluginTensorDesc> out, void* const* outputs, void* workspace,
                                  std::uint64_t workspace_bytes, void* stream) const {
  if (!plugin_->enqueue_cuda) throw UnsupportedError(label_ + " has no CUDA implementation");
  auto abi_in = to_abi(in), abi_out = to_abi(out);
  ErrorBuffer e;
  auto rc = plugin_->enqueue_cuda(plugin_, abi_in.data(), inputs, static_cast<std::int32_t>(abi_in.size()), abi_out.data(),
                                  outputs, static_cast<std::int32_t>(abi_out.size()), workspace, workspace_bytes, stream,
                                  e.text.data(), e.text.size());
  if (rc != TENSORACLE_PLUGIN_OK) fail(rc, "enqueue_cuda", e.c_str());
}

PluginCall plan_plugin_call(const PluginInstance& plugin, int backend_bit, std::span<const PluginTensorDesc> in, int keep,
                            std::uint64_t align) {
  auto up = [align](std::uint64_t n) { return (n + align - 1) / align * align; };
  PluginCall c;
  c.outputs = plugin.output_descs(in);
  for (const auto& d : c.outputs)
    if (!d.dims.all_known())
      throw InvalidArgument(plugin.label() + ": output dims " + d.dims.str() + " are not known at run time");
  c.plugin_workspace = plugin.workspace_size(backend_bit, in, c.outputs);
  c.workspace = up(c.plugin_workspace);
  c.offsets.assign(c.outputs.size(), 0);
  for (std::size_t k = 0; k < c.outputs.size(); ++k) {
    if (keep < 0 || static_cast<int>(k) == keep) continue;
    c.offsets[k] = c.workspace;
    c.workspace += up(static_cast<std::uint64_t>(c.outputs[k].dims.volume()) * element_size(c.outputs[k].type));
  }
  return c;
}

}  // namespace tensoracle
