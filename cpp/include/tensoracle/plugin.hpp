// tensoracle/plugin.hpp — write a plugin as a C++17 class; the C ABI of plugin.h is generated.
//
//   namespace tp = tensoracle::plugin;
//
//   class Scale final : public tp::Plugin {
//    public:
//     explicit Scale(float factor) : factor_(factor) {}
//     int num_outputs() const override { return 1; }
//     void output_descs(tp::Descs in, tp::MutableDescs out) const override {
//       tp::require(in.size() == 1 && in[0].type == TENSORACLE_TYPE_FLOAT32, "Scale takes one float32 tensor");
//       out[0] = in[0];
//     }
//     void enqueue_cpu(tp::Descs in, const void* const* x, tp::Descs, void* const* y, void*, std::uint64_t) const override {
//       const auto n = tp::volume(in[0]);
//       for (std::int64_t i = 0; i < n; ++i)
//         static_cast<float*>(y[0])[i] = factor_ * static_cast<const float*>(x[0])[i];
//     }
//    private:
//     float factor_;
//   };
//
//   struct ScaleCreator {
//     static constexpr const char* kName = "Scale";
//     static constexpr const char* kVersion = "1";
//     static constexpr const char* kNamespace = "";
//     static std::vector<TensoraclePluginFieldSpec> fields() { return {{"factor", TENSORACLE_FIELD_FLOAT32, 1}}; }
//     static std::unique_ptr<tp::Plugin> create(const tp::Fields& f) {
//       return std::make_unique<Scale>(f.scalar<float>("factor", 1.0f));
//     }
//   };
//
//   TENSORACLE_EXPORT_PLUGINS(ScaleCreator)   // getCreators, once per library
//
// Every ABI entry point generated here is noexcept: an exception thrown by the plugin or the
// creator becomes the call's error code and message (tp::Error's code, else
// TENSORACLE_PLUGIN_ERROR with what()). Throw tp::InvalidArgument for inputs or fields the
// plugin refuses, tp::Unsupported for valid requests it does not run.
//
// A creator is a type with the static members above; `fields()` is called once, and the names
// it returns must be string literals (they must outlive the library's use). A plugin's methods
// other than the constructor may run on several threads at once: keep them const.
#ifndef TENSORACLE_PLUGIN_HPP
#define TENSORACLE_PLUGIN_HPP

#include <cstdint>
#include <cstdio>
#include <cstring>
#include <exception>
#include <initializer_list>
#include <memory>
#include <new>
#include <stdexcept>
#include <string>
#include <type_traits>
#include <vector>

#include "tensoracle/plugin.h"

namespace tensoracle {
namespace plugin {

using Desc = TensoraclePluginTensorDesc;

// A plugin's error: its message and the ABI code it becomes.
class Error : public std::runtime_error {
 public:
  explicit Error(const std::string& message, std::int32_t code = TENSORACLE_PLUGIN_ERROR)
      : std::runtime_error(message), code_(code) {}
  std::int32_t code() const noexcept { return code_; }

 private:
  std::int32_t code_;
};
class InvalidArgument : public Error {
 public:
  explicit InvalidArgument(const std::string& m) : Error(m, TENSORACLE_PLUGIN_INVALID_ARGUMENT) {}
};
class Unsupported : public Error {
 public:
  explicit Unsupported(const std::string& m) : Error(m, TENSORACLE_PLUGIN_UNSUPPORTED) {}
};

// Throws InvalidArgument(message) unless `condition`.
inline void require(bool condition, const std::string& message) {
  if (!condition) throw InvalidArgument(message);
}

// A read-only array of tensor descriptions.
class Descs {
 public:
  Descs(const Desc* data, std::int32_t count) : data_(data), count_(count < 0 ? 0 : count) {}
  std::size_t size() const noexcept { return static_cast<std::size_t>(count_); }
  const Desc& operator[](std::size_t i) const noexcept { return data_[i]; }
  const Desc* begin() const noexcept { return data_; }
  const Desc* end() const noexcept { return data_ + count_; }

 private:
  const Desc* data_;
  std::int32_t count_;
};

// The outputs' descriptions, to fill in output_descs.
class MutableDescs {
 public:
  MutableDescs(Desc* data, std::int32_t count) : data_(data), count_(count < 0 ? 0 : count) {}
  std::size_t size() const noexcept { return static_cast<std::size_t>(count_); }
  Desc& operator[](std::size_t i) const noexcept { return data_[i]; }

 private:
  Desc* data_;
  std::int32_t count_;
};

// The number of elements of `d` (-1 when a dim is -1).
inline std::int64_t volume(const Desc& d) noexcept {
  std::int64_t v = 1;
  for (std::int32_t i = 0; i < d.rank; ++i) {
    if (d.dims[i] < 0) return -1;
    v *= d.dims[i];
  }
  return v;
}

// A description of `type` and `dims` (at most TENSORACLE_PLUGIN_MAX_RANK of them).
inline Desc make_desc(std::int32_t type, std::initializer_list<std::int64_t> dims) {
  require(dims.size() <= TENSORACLE_PLUGIN_MAX_RANK, "too many dims");
  Desc d{};
  d.type = type;
  d.rank = static_cast<std::int32_t>(dims.size());
  std::int32_t i = 0;
  for (auto v : dims) d.dims[i++] = v;
  return d;
}

// The fields a creator receives (checked against its schema by tensoracle).
class Fields {
 public:
  Fields(const TensoraclePluginField* fields, std::int32_t count) : fields_(fields), count_(count < 0 ? 0 : count) {}

  const TensoraclePluginField* find(const char* name) const noexcept {
    for (std::int32_t i = 0; i < count_; ++i)
      if (fields_[i].name && std::strcmp(fields_[i].name, name) == 0) return &fields_[i];
    return nullptr;
  }
  bool has(const char* name) const noexcept { return find(name) != nullptr; }

  // The values of numeric field `name` (T: int32_t, int64_t, float, double); `fallback` when absent.
  template <typename T>
  std::vector<T> values(const char* name, std::vector<T> fallback = {}) const {
    const TensoraclePluginField* f = find(name);
    if (!f) return fallback;
    if (f->type != field_type<T>())
      throw InvalidArgument(std::string("field '") + name + "' has another type than the plugin reads");
    std::vector<T> out(static_cast<std::size_t>(f->count));
    if (f->count > 0) std::memcpy(out.data(), f->data, out.size() * sizeof(T));
    return out;
  }
  // The one value of numeric field `name`; `fallback` when absent.
  template <typename T>
  T scalar(const char* name, T fallback) const {
    const TensoraclePluginField* f = find(name);
    if (!f) return fallback;
    auto v = values<T>(name);
    if (v.size() != 1) throw InvalidArgument(std::string("field '") + name + "' must hold one value");
    return v[0];
  }
  // A string or bytes field's contents; `fallback` when absent.
  std::string text(const char* name, const std::string& fallback = {}) const {
    const TensoraclePluginField* f = find(name);
    if (!f) return fallback;
    if (f->type != TENSORACLE_FIELD_STRING && f->type != TENSORACLE_FIELD_BYTES)
      throw InvalidArgument(std::string("field '") + name + "' is not a string or bytes field");
    return std::string(static_cast<const char*>(f->data), static_cast<std::size_t>(f->count));
  }

 private:
  template <typename T>
  static constexpr std::int32_t field_type() {
    static_assert(std::is_same<T, std::int32_t>::value || std::is_same<T, std::int64_t>::value ||
                      std::is_same<T, float>::value || std::is_same<T, double>::value,
                  "numeric fields are int32_t, int64_t, float or double");
    return std::is_same<T, std::int32_t>::value   ? TENSORACLE_FIELD_INT32
           : std::is_same<T, std::int64_t>::value ? TENSORACLE_FIELD_INT64
           : std::is_same<T, float>::value        ? TENSORACLE_FIELD_FLOAT32
                                                  : TENSORACLE_FIELD_FLOAT64;
  }
  const TensoraclePluginField* fields_;
  std::int32_t count_;
};

// The base class of a plugin. Override num_outputs, output_descs, and the enqueue of each
// backend named in backends().
class Plugin {
 public:
  virtual ~Plugin() = default;
  virtual int num_outputs() const = 0;
  // Fills out[i] (type, rank, dims; -1 where a -1 input dim decides it). Throw to refuse.
  virtual void output_descs(Descs inputs, MutableDescs outputs) const = 0;
  // TENSORACLE_BACKEND_* bits of the enqueue functions this plugin implements.
  virtual std::int32_t backends() const { return TENSORACLE_BACKEND_CPU; }
  // Whether `backend` runs these types and dims; by default: the backend is in backends().
  virtual bool supports(std::int32_t backend, Descs inputs, Descs outputs) const {
    (void)inputs;
    (void)outputs;
    return (backends() & backend) != 0;
  }
  virtual std::uint64_t workspace_size(std::int32_t backend, Descs inputs, Descs outputs) const {
    (void)backend;
    (void)inputs;
    (void)outputs;
    return 0;
  }
  virtual void enqueue_cpu(Descs input_descs, const void* const* inputs, Descs output_descs, void* const* outputs,
                           void* workspace, std::uint64_t workspace_bytes) const {
    (void)input_descs, (void)inputs, (void)output_descs, (void)outputs, (void)workspace, (void)workspace_bytes;
    throw Unsupported("this plugin has no CPU implementation");
  }
  virtual void enqueue_cuda(Descs input_descs, const void* const* inputs, Descs output_descs, void* const* outputs,
                            void* workspace, std::uint64_t workspace_bytes, void* stream) const {
    (void)input_descs, (void)inputs, (void)output_descs, (void)outputs, (void)workspace, (void)workspace_bytes,
        (void)stream;
    throw Unsupported("this plugin has no CUDA implementation");
  }
};

namespace detail {

inline void write_error(char* error, std::size_t size, const char* message) noexcept {
  if (error && size > 0) std::snprintf(error, size, "%s", message ? message : "");
}

// Runs `f` and turns whatever it throws into a code and message.
template <typename F>
std::int32_t guard(char* error, std::size_t error_size, F&& f) noexcept {
  try {
    f();
    return TENSORACLE_PLUGIN_OK;
  } catch (const Error& e) {
    write_error(error, error_size, e.what());
    return e.code() == TENSORACLE_PLUGIN_OK ? TENSORACLE_PLUGIN_ERROR : e.code();
  } catch (const std::bad_alloc&) {
    write_error(error, error_size, "out of memory");
    return TENSORACLE_PLUGIN_ERROR;
  } catch (const std::exception& e) {
    write_error(error, error_size, e.what());
    return TENSORACLE_PLUGIN_ERROR;
  } catch (...) {
    write_error(error, error_size, "an unknown C++ exception");
    return TENSORACLE_PLUGIN_ERROR;
  }
}

inline const Plugin& self(const TensoraclePlugin* p) noexcept { return *static_cast<const Plugin*>(p->self); }

inline std::int32_t abi_num_outputs(const TensoraclePlugin* p, std::int32_t* n, char* e, std::size_t es) noexcept {
  return guard(e, es, [&] { *n = self(p).num_outputs(); });
}
inline std::int32_t abi_output_descs(const TensoraclePlugin* p, const Desc* in, std::int32_t nin, Desc* out,
                                     std::int32_t nout, char* e, std::size_t es) noexcept {
  return guard(e, es, [&] { self(p).output_descs(Descs(in, nin), MutableDescs(out, nout)); });
}
inline std::int32_t abi_supports(const TensoraclePlugin* p, std::int32_t backend, const Desc* in, std::int32_t nin,
                                 const Desc* out, std::int32_t nout, std::int32_t* ok, char* e, std::size_t es) noexcept {
  return guard(e, es, [&] { *ok = self(p).supports(backend, Descs(in, nin), Descs(out, nout)) ? 1 : 0; });
}
inline std::int32_t abi_workspace(const TensoraclePlugin* p, std::int32_t backend, const Desc* in, std::int32_t nin,
                                  const Desc* out, std::int32_t nout, std::uint64_t* bytes, char* e, std::size_t es) noexcept {
  return guard(e, es, [&] { *bytes = self(p).workspace_size(backend, Descs(in, nin), Descs(out, nout)); });
}
inline std::int32_t abi_enqueue_cpu(const TensoraclePlugin* p, const Desc* ind, const void* const* in, std::int32_t nin,
                                    const Desc* outd, void* const* out, std::int32_t nout, void* ws, std::uint64_t wsb,
                                    char* e, std::size_t es) noexcept {
  return guard(e, es, [&] { self(p).enqueue_cpu(Descs(ind, nin), in, Descs(outd, nout), out, ws, wsb); });
}
inline std::int32_t abi_enqueue_cuda(const TensoraclePlugin* p, const Desc* ind, const void* const* in, std::int32_t nin,
                                     const Desc* outd, void* const* out, std::int32_t nout, void* ws, std::uint64_t wsb,
                                     void* stream, char* e, std::size_t es) noexcept {
  return guard(e, es, [&] { self(p).enqueue_cuda(Descs(ind, nin), in, Descs(outd, nout), out, ws, wsb, stream); });
}
inline void abi_destroy(TensoraclePlugin* p) noexcept {
  if (!p) return;
  delete static_cast<Plugin*>(p->self);
  delete p;
}

// The ABI struct around a C++ plugin (takes ownership).
inline TensoraclePlugin* wrap(std::unique_ptr<Plugin> plugin) {
  if (!plugin) throw Error("the creator returned no plugin");
  auto* p = new TensoraclePlugin{};
  p->abi_version = TENSORACLE_PLUGIN_ABI_VERSION;
  const std::int32_t backends = plugin->backends();
  p->get_num_outputs = &abi_num_outputs;
  p->get_output_descs = &abi_output_descs;
  p->supports = &abi_supports;
  p->workspace_size = &abi_workspace;
  p->enqueue_cpu = (backends & TENSORACLE_BACKEND_CPU) ? &abi_enqueue_cpu : nullptr;
  p->enqueue_cuda = (backends & TENSORACLE_BACKEND_CUDA) ? &abi_enqueue_cuda : nullptr;
  p->destroy = &abi_destroy;
  p->self = plugin.release();
  return p;
}

template <typename C>
std::int32_t abi_create(const TensoraclePluginCreator*, const TensoraclePluginField* fields, std::int32_t count,
                        TensoraclePlugin** out, char* e, std::size_t es) noexcept {
  return guard(e, es, [&] {
    *out = nullptr;
    *out = wrap(C::create(Fields(fields, count)));
  });
}

template <typename C>
TensoraclePluginCreator make_creator() {
  static const std::vector<TensoraclePluginFieldSpec> specs = C::fields();
  TensoraclePluginCreator c{};
  c.abi_version = TENSORACLE_PLUGIN_ABI_VERSION;
  c.name = C::kName;
  c.version = C::kVersion;
  c.plugin_namespace = C::kNamespace;
  c.fields = specs.empty() ? nullptr : specs.data();
  c.num_fields = static_cast<std::int32_t>(specs.size());
  c.user = nullptr;
  c.create = &abi_create<C>;
  return c;
}

template <typename... Cs>
const TensoraclePluginCreator* const* export_creators(std::int32_t* count) noexcept {
  try {
    static const TensoraclePluginCreator creators[] = {make_creator<Cs>()...};
    static const std::vector<const TensoraclePluginCreator*> list = [] {
      std::vector<const TensoraclePluginCreator*> v;
      for (const auto& c : creators) v.push_back(&c);
      return v;
    }();
    if (count) *count = static_cast<std::int32_t>(list.size());
    return list.data();
  } catch (...) {
    if (count) *count = 0;
    return nullptr;
  }
}

}  // namespace detail
}  // namespace plugin
}  // namespace tensoracle

// Defines the library's getCreators, exporting the creator types given (one or more).
#define TENSORACLE_EXPORT_PLUGINS(...)                                                                      \
  extern "C" TENSORACLE_PLUGIN_EXPORT const TensoraclePluginCreator* const* getCreators(int32_t* count) { \
    return ::tensoracle::plugin::detail::export_creators<__VA_ARGS__>(count);                              \
  }

#endif  // TENSORACLE_PLUGIN_HPP
