// Bindings of tensoracle/builder.h and tensoracle/engine.h.
#include <algorithm>
#include <memory>

#include <nanobind/ndarray.h>
#include <nanobind/stl/filesystem.h>
#include <nanobind/stl/map.h>
#include <nanobind/stl/optional.h>
#include <nanobind/stl/string.h>
#include <nanobind/stl/string_view.h>
#include <nanobind/stl/vector.h>

#include "arrays.h"
#include "bindings.h"
#include "tensoracle/builder.h"
#include "tensoracle/engine.h"
#include "tensoracle/errors.h"
#include "tensoracle/info.h"
#include "tensoracle/plugin_library.h"

namespace nb = nanobind;

namespace tensoracle::python {

namespace {

// A Python object with TensorRT's IProgressMonitor methods (phase_start, step_complete,
// phase_finish) as the builder's ProgressMonitor. An exception a method raises ends the build
// and reaches the caller; step_complete's result is read as a bool (None: go on).
class PyProgressMonitor final : public ProgressMonitor {
 public:
  explicit PyProgressMonitor(nb::object o) : o_(std::move(o)) {}
  ~PyProgressMonitor() override {
    nb::gil_scoped_acquire gil;
    o_.reset();
  }
  void phase_start(const std::string& phase, const std::string& parent, int num_steps) override {
    nb::gil_scoped_acquire gil;
    o_.attr("phase_start")(phase, parent.empty() ? nb::none() : nb::cast(parent), num_steps);
  }
  bool step_complete(const std::string& phase, int step) override {
    nb::gil_scoped_acquire gil;
    nb::object r = o_.attr("step_complete")(phase, step);
    return r.is_none() || nb::cast<bool>(nb::bool_(r));
  }
  void phase_finish(const std::string& phase) override {
    nb::gil_scoped_acquire gil;
    o_.attr("phase_finish")(phase);
  }
  const nb::object& object() const { return o_; }

 private:
  nb::object o_;
};

std::shared_ptr<ProgressMonitor> monitor_of(nb::handle o) {
  if (o.is_none()) return nullptr;
  for (const char* m : {"phase_start", "step_complete", "phase_finish"})
    if (!nb::hasattr(o, m))
      throw InvalidArgument(std::string("[build] progress_monitor: the object has no method '") + m +
                            "' (subclass tensoracle.trt.IProgressMonitor)");
  return std::make_shared<PyProgressMonitor>(nb::borrow(o));
}

std::string mode_name(TensorIOMode m) { return m == TensorIOMode::kINPUT ? "input" : "output"; }

std::string type_of(nb::handle obj) { return nb::cast<std::string>(nb::str(obj.type().attr("__name__"))); }

// The tensoracle type of a DLPack dtype, if it has one.
std::optional<DataType> dlpack_type(const nb::dlpack::dtype& d) {
  using C = nb::dlpack::dtype_code;
  const auto code = static_cast<C>(d.code);
  if (d.lanes != 1) return std::nullopt;
  if (code == C::Float && d.bits == 32) return DataType::kFLOAT;
  if (code == C::Float && d.bits == 16) return DataType::kHALF;
  if (code == C::Bfloat && d.bits == 16) return DataType::kBF16;
  if (code == C::Int && d.bits == 8) return DataType::kINT8;
  if (code == C::Int && d.bits == 32) return DataType::kINT32;
  if (code == C::Int && d.bits == 64) return DataType::kINT64;
  if (code == C::UInt && d.bits == 8) return DataType::kUINT8;
  if (code == C::Bool && d.bits == 8) return DataType::kBOOL;
  return std::nullopt;
}

// A Python int that fits a pointer (0 .. 2**64 - 1), else InvalidArgument: "<what><value> is not
// <expected> (an int in 0..2**64-1)". True and False are ints to Python, not addresses.
void* pointer_of(nb::handle obj, const std::string& what, const char* expected) {
  std::uintptr_t value = 0;
  if (PyBool_Check(obj.ptr()) || !nb::try_cast(obj, value))
    throw InvalidArgument(what + nb::cast<std::string>(nb::repr(obj)) + " is not " + expected + " (an int in 0..2**" +
                          std::to_string(8 * sizeof(void*)) + "-1)");
  return reinterpret_cast<void*>(value);
}

// set_tensor_address with an int (a raw address: the caller keeps its memory alive) or a tensor
// that speaks DLPack (PyTorch, CuPy, JAX, NumPy): checked against the engine's tensor (type,
// C-contiguity, device; an output must be writable), and for an input its shape becomes the
// input's shape. The execution keeps a tensor alive while it is bound.
void bind_address(PyExecution& e, const std::string& name, nb::handle obj) {
  const std::string what = "[execution] set_tensor_address('" + name + "'): ";
  if (nb::isinstance<nb::int_>(obj)) {
    e.set_tensor_address(name, pointer_of(obj, what + "address ", "an address"));
    if (auto it = e.bound.find(name); it != e.bound.end()) e.bound.erase(it);
    return;
  }
  const IOTensorInfo& info = e.engine().io_tensor(name);
  nb::ndarray<nb::ro> arr;  // an input is only read: read-only arrays are fine
  if (!nb::try_cast(obj, arr))
    throw InvalidArgument(what + "expected an int address or a tensor with DLPack support (PyTorch, CuPy, JAX, NumPy); got " +
                          type_of(obj));
  if (nb::ndarray<> writable; info.mode == TensorIOMode::kOUTPUT && !nb::try_cast(obj, writable))
    throw InvalidArgument(what + "the array is read-only; the engine writes its output there (pass a writable array)");
  auto type = dlpack_type(arr.dtype());
  if (!type || *type != info.type)
    throw InvalidArgument(what + "the tensor's dtype is " + (type ? std::string(type_name(*type)) : std::string("not one tensoracle has")) +
                          ", the engine's " + mode_name(info.mode) + " is " + std::string(type_name(info.type)));
  const bool want_cuda = e.engine().device().rfind("cuda", 0) == 0;
  const int dev = arr.device_type();
  if (want_cuda ? dev != nb::device::cuda::value : dev != nb::device::cpu::value)
    throw InvalidArgument(what + "the tensor is in " + (dev == nb::device::cuda::value ? "GPU" : dev == nb::device::cpu::value ? "host" : "other") +
                          " memory; the engine runs on " + e.engine().device() + " and needs " + (want_cuda ? "GPU" : "host") + " memory");
  if (want_cuda && ("cuda:" + std::to_string(arr.device_id())) != e.engine().device())
    throw InvalidArgument(what + "the tensor is on cuda:" + std::to_string(arr.device_id()) + ", the engine runs on " + e.engine().device());
  std::vector<std::int64_t> shape(arr.ndim());
  std::int64_t expect = 1;
  for (std::size_t i = arr.ndim(); i-- > 0;) {
    shape[i] = static_cast<std::int64_t>(arr.shape(i));
    if (arr.shape(i) != 1 && arr.stride(i) != expect)
      throw InvalidArgument(what + "the tensor is not C-contiguous (call .contiguous() / ascontiguousarray first)");
    expect *= static_cast<std::int64_t>(arr.shape(i));
  }
  Dims dims{std::span<const std::int64_t>(shape)};
  if (info.mode == TensorIOMode::kINPUT) {
    e.set_input_shape(name, dims);
  } else {
    Dims need = e.tensor_shape(name);
    if (!(need == dims))
      throw InvalidArgument(what + "the tensor's shape " + dims.str() + " is not the output's shape " + need.str() +
                            " at the current input shapes");
  }
  e.set_tensor_address(name, const_cast<void*>(arr.data()));
  e.bound.insert_or_assign(name, std::move(arr));
}

// Before a run: each output with an allocator gets its memory from it (TensorRT's
// IOutputAllocator: reallocate_output_async(name, current, bytes, alignment, stream), falling
// back to reallocate_output without the stream), at the output's size for the current input
// shapes. Shapes here never depend on the data, so the size is known before the run.
void allocate_outputs(PyExecution& e, nb::handle stream) {
  for (auto& [name, allocator] : e.allocators) {
    const Dims shape = e.tensor_shape(name);
    const std::uint64_t bytes = static_cast<std::uint64_t>(std::max<std::int64_t>(shape.volume(), 1)) *
                                element_size(e.engine().io_tensor(name).type);
    nb::object ptr = nb::hasattr(allocator, "reallocate_output_async")
                         ? allocator.attr("reallocate_output_async")(name, 0, bytes, 256, stream)
                         : allocator.attr("reallocate_output")(name, 0, bytes, 256);
    if (ptr.is_none() || nb::cast<std::uint64_t>(ptr) == 0)
      throw InvalidArgument("[execution] the output allocator of '" + name + "' gave no memory for " +
                            std::to_string(bytes) + " bytes");
    e.set_tensor_address(name, pointer_of(ptr, "[execution] output allocator of '" + name + "': ", "an address"));
    e.bound.erase(name);
  }
}

// After a run: each allocator is told its output's shape (notify_shape).
void notify_outputs(PyExecution& e) {
  for (auto& [name, allocator] : e.allocators) {
    const Dims shape = e.tensor_shape(name);
    allocator.attr("notify_shape")(name, nb::tuple(nb::cast(shape.vec())));
  }
}

// A stream argument: an int (cudaStream_t), None, or a stream object (torch.cuda.Stream's
// cuda_stream, CuPy's ptr).
void* stream_of(nb::handle obj) {
  if (obj.is_none()) return nullptr;
  const std::string what = "[execution] stream: ";
  if (nb::isinstance<nb::int_>(obj)) return pointer_of(obj, what, "a cudaStream_t");
  for (const char* attr : {"cuda_stream", "ptr"})
    if (nb::hasattr(obj, attr)) return pointer_of(obj.attr(attr), what + type_of(obj) + "." + attr + " = ", "a cudaStream_t");
  throw InvalidArgument("[execution] stream: expected an int (cudaStream_t), None, or a stream object (torch.cuda.Stream, "
                        "cupy.cuda.Stream); got " + type_of(obj));
}

}  // namespace

void bind_engine(nb::module_& m) {
  nb::class_<InputShape>(m, "InputShape", "Execution-time shapes of one input: min <= opt <= max")
      .def_static("fixed", &InputShape::fixed, nb::arg("shape"))
      .def_static("ranged", &InputShape::ranged, nb::arg("min"), nb::arg("opt"), nb::arg("max"))
      .def_ro("min", &InputShape::min)
      .def_ro("opt", &InputShape::opt)
      .def_ro("max", &InputShape::max)
      .def("__repr__", [](const InputShape& s) {
        return s.is_fixed() ? "InputShape.fixed(" + s.opt.str() + ")"
                            : "InputShape.ranged(" + s.min.str() + ", " + s.opt.str() + ", " + s.max.str() + ")";
      });

  nb::class_<BuilderSettings>(m, "BuilderSettings")
      .def(
          "__init__",
          [](BuilderSettings* s, int level, std::string device, std::uint64_t workspace_limit, bool tf32, bool verbose,
             nb::handle progress_monitor, DataType weak_precision) {
            new (s) BuilderSettings{level, std::move(device), workspace_limit, tf32, verbose, monitor_of(progress_monitor),
                                    weak_precision};
            s->validate();
          },
          nb::kw_only(), nb::arg("optimization_level") = 3, nb::arg("device") = "auto", nb::arg("workspace_limit") = 0,
          nb::arg("tf32") = false, nb::arg("verbose") = false, nb::arg("progress_monitor") = nb::none(),
          nb::arg("weak_precision") = DataType::kFLOAT)
      .def_ro("weak_precision", &BuilderSettings::weak_precision,
              "float32: layers compute in the network's types; float16 / bfloat16: TensorRT's weak typing")
      .def_prop_ro(
          "progress_monitor",
          [](const BuilderSettings& s) -> nb::object {
            const auto* m = dynamic_cast<const PyProgressMonitor*>(s.progress.get());
            return m ? m->object() : nb::none();
          },
          "The object told of the build's progress (TensorRT's IProgressMonitor methods), or None")
      .def_ro("optimization_level", &BuilderSettings::optimization_level)
      .def_ro("device", &BuilderSettings::device)
      .def_ro("workspace_limit", &BuilderSettings::workspace_limit)
      .def_ro("tf32", &BuilderSettings::tf32)
      .def_ro("verbose", &BuilderSettings::verbose);

  nb::class_<EngineBuild>(m, "EngineBuild", "Input shapes and builder settings of an engine")
      .def(
          "__init__",
          [](EngineBuild* e, std::map<std::string, InputShape> inputs, std::optional<BuilderSettings> settings) {
            new (e) EngineBuild{std::move(inputs), settings.value_or(BuilderSettings{})};
          },
          nb::arg("inputs"), nb::arg("settings") = nb::none())
      .def_ro("inputs", &EngineBuild::inputs)
      .def_ro("settings", &EngineBuild::settings)
      .def("canonical", &EngineBuild::canonical);

  m.def(
      "info",
      [] {
        const LibraryInfo info = library_info();
        nb::dict d, backends;
        d["version"] = info.version;
        d["engine_format"] = info.engine_format;
        d["build"] = info.build;
        for (const auto& b : info.backends) {
          nb::dict e, libs;
          e["available"] = b.available;
          e["device"] = b.available ? nb::cast(b.device) : nb::none();
          e["detail"] = b.available ? nb::cast(b.detail) : nb::none();
          for (const auto& [name, version] : b.libraries) libs[name.c_str()] = version;
          e["libraries"] = libs;
          e["reason"] = b.available ? nb::none() : nb::cast(b.reason);
          backends[b.name.c_str()] = e;
        }
        d["backends"] = backends;
        return d;
      },
      "This build and this machine: version, engine format, build identity, and per backend whether it runs "
      "here (device, libraries) or why not");

  m.def("set_cpu_threads", &set_cpu_threads, nb::arg("n"),
        "Threads the CPU backend's kernels use, process-wide (0: the machine's cores)");
  m.def("cpu_threads", &cpu_threads);

  m.def(
      "build_serialized_engine",
      [](nb::callable graph, const EngineBuild& decl, const std::vector<std::filesystem::path>& paths) {
        // The graph function may keep the network, its layers and tensors: they stay valid.
        auto call = [&](Network& net) { graph(network_for_graph(net)); };
        auto bytes = build_serialized_engine(call, decl, paths);
        return nb::bytes(bytes.data(), bytes.size());
      },
      nb::arg("graph"), nb::arg("declaration"), nb::arg("plugins") = std::vector<std::filesystem::path>{},
      "Calls graph(network) once, builds the network into an engine and returns the engine file's bytes");

  m.def(
      "build_serialized_network",
      [](const Network& network, const EngineBuild& decl) {
        auto bytes = build_serialized_network(network, decl);
        return nb::bytes(bytes.data(), bytes.size());
      },
      nb::arg("network"), nb::arg("declaration"),
      "Builds a network defined beforehand (trt.Builder's build_serialized_network) and returns the engine file's bytes");

  m.def(
      "save_engine",
      [](nb::bytes data, const std::filesystem::path& path) {
        save_engine(std::span(static_cast<const std::byte*>(data.data()), data.size()), path);
      },
      nb::arg("data"), nb::arg("path"),
      "Writes engine bytes to path atomically (temporary file, fsync, rename): readers never see a partial "
      "file, and engines open on the old file keep running");

  nb::class_<IOTensorInfo>(m, "IOTensorInfo")
      .def_ro("name", &IOTensorInfo::name)
      .def_prop_ro("mode", [](const IOTensorInfo& t) { return mode_name(t.mode); })
      .def_ro("dtype", &IOTensorInfo::type)
      .def_ro("shape", &IOTensorInfo::dims)
      .def_ro("min", &IOTensorInfo::min)
      .def_ro("opt", &IOTensorInfo::opt)
      .def_ro("max", &IOTensorInfo::max)
      .def("__repr__", [](const IOTensorInfo& t) {
        return "IOTensorInfo('" + t.name + "', " + mode_name(t.mode) + ", " + std::string(type_name(t.type)) + ", " +
               t.dims.str() + ")";
      });

  nb::class_<LayerInfo>(m, "LayerInfo")
      .def_ro("name", &LayerInfo::name)
      .def_ro("type", &LayerInfo::type)
      .def_ro("fused", &LayerInfo::fused)
      .def_ro("precision", &LayerInfo::precision)
      .def_ro("tactic", &LayerInfo::tactic)
      .def_ro("inputs", &LayerInfo::inputs)
      .def_ro("output", &LayerInfo::output)
      .def_ro("outputs", &LayerInfo::outputs)
      .def_ro("output_layout", &LayerInfo::output_layout);

  auto execution_class = nb::class_<PyExecution>(m, "Execution", "One execution context: activation memory, shapes and bindings");
  context_manager(execution_class);
  execution_class
      .def("set_input_shape", &Execution::set_input_shape, nb::arg("name"), nb::arg("shape"))
      .def_prop_ro("active_optimization_profile", [](const PyExecution&) { return 0; },
                   "0: engines here have one optimization profile")
      .def("get_tensor_shape", &Execution::tensor_shape, nb::arg("name"))
      .def("set_tensor_address", &bind_address, nb::arg("name"), nb::arg("address"),
           "Binds an int address or a DLPack tensor (PyTorch, CuPy, NumPy) to an input or output")
      .def(
          "enqueue",
          [](PyExecution& e, nb::handle stream) {
            void* s = stream_of(stream);
            nb::gil_scoped_release release;
            e.enqueue(s);
          },
          nb::arg("stream") = nb::none(),
          "Runs the engine on the bound buffers (CPU: to completion; CUDA: queued on the stream)")
      .def(
          "execute_async_v3",
          [](PyExecution& e, nb::handle stream) {
            void* s = stream_of(stream);
            allocate_outputs(e, stream);
            {
              nb::gil_scoped_release release;
              e.enqueue(s);
            }
            notify_outputs(e);
            return true;
          },
          nb::arg("stream_handle") = nb::none(),
          "TensorRT's name for enqueue (outputs with an output allocator get their memory from it first)")
      .def(
          "set_output_allocator",
          [](PyExecution& e, const std::string& name, nb::handle allocator) {
            if (e.engine().io_tensor(name).mode != TensorIOMode::kOUTPUT)
              throw InvalidArgument("[execution] set_output_allocator('" + name + "'): not an output of the engine");
            if (allocator.is_none()) {
              e.allocators.erase(name);
              return true;
            }
            for (const char* m : {"reallocate_output", "notify_shape"})
              if (!nb::hasattr(allocator, m))
                throw InvalidArgument(std::string("[execution] set_output_allocator('") + name + "'): the object has no '" + m +
                                      "' (subclass tensoracle.trt.IOutputAllocator)");
            e.allocators.insert_or_assign(name, nb::borrow(allocator));
            return true;
          },
          nb::arg("name"), nb::arg("output_allocator"),
          "TensorRT's IOutputAllocator for an output: asked for its memory before each execute_async_v3, told its "
          "shape after (None removes it)")
      .def(
          "get_output_allocator",
          [](const PyExecution& e, const std::string& name) -> nb::object {
            auto it = e.allocators.find(name);
            return it == e.allocators.end() ? nb::none() : it->second;
          },
          nb::arg("name"))
      .def(
          "execute_v2",
          [](PyExecution& e, const std::vector<nb::handle>& bindings) {
            const auto& io = e.engine().io_tensors();
            if (bindings.size() != io.size())
              throw InvalidArgument("[execution] execute_v2: " + std::to_string(bindings.size()) +
                                    " bindings for the engine's " + std::to_string(io.size()) +
                                    " I/O tensors (one address each, in get_tensor_name order)");
            for (std::size_t i = 0; i < io.size(); ++i) bind_address(e, io[i].name, bindings[i]);
            nb::gil_scoped_release release;
            e.enqueue(nullptr);
            e.engine().synchronize(nullptr);
            return true;
          },
          nb::arg("bindings"),
          "TensorRT's synchronous execution: one address per I/O tensor, in get_tensor_name order; returns when done")
      .def_prop_ro("engine", [](const PyExecution& e) { return e.engine(); }, "The engine this context runs")
      .def_prop_rw("graph_replay", &Execution::graph_replay, &Execution::set_graph_replay,
                   "CUDA: replay repeated enqueues of unchanged shapes and addresses as a CUDA graph (default True)")
      .def(
          "run",
          [](PyExecution& e, const nb::dict& inputs) {
            std::vector<ArrayView> keep;
            std::map<std::string, HostTensorView> views;
            for (auto [k, v] : inputs) {
              if (!nb::isinstance<nb::str>(k))
                throw nb::type_error(("[execution] run(inputs): keys are input names (str); got " + type_of(k)).c_str());
              std::string name = nb::cast<std::string>(k);
              keep.push_back(array_view(v, "input '" + name + "'"));
              views[name] = {keep.back().type, keep.back().dims, keep.back().data};
            }
            std::map<std::string, HostTensor> out;
            {
              nb::gil_scoped_release release;
              out = e.run(views);
            }
            nb::dict result;
            for (const auto& [name, t] : out) result[name.c_str()] = to_numpy(t);
            return result;
          },
          nb::arg("inputs"), "Runs on NumPy arrays {name: array}; returns {name: array} of the outputs");

  nb::enum_<TensorIOMode>(m, "TensorIOMode", nb::is_arithmetic())
      .value("NONE", TensorIOMode::kNONE).value("INPUT", TensorIOMode::kINPUT).value("OUTPUT", TensorIOMode::kOUTPUT);

  auto engine_class = nb::class_<Engine>(m, "Engine", "An opened engine: immutable, shareable between threads");
  context_manager(engine_class);
  engine_class
      .def_static(
          "deserialize",
          [](nb::bytes data, const std::vector<std::filesystem::path>& plugins) {
            load_plugin_libraries(plugins);
            return Engine::deserialize(std::span(static_cast<const std::byte*>(data.data()), data.size()));
          },
          nb::arg("data"), nb::arg("plugins") = std::vector<std::filesystem::path>{},
          "Opens engine bytes; plugins: libraries its plugin layers need, loaded first")
      .def_static(
          "load",
          [](const std::filesystem::path& path, const std::vector<std::filesystem::path>& plugins) {
            load_plugin_libraries(plugins);
            return Engine::load(path);
          },
          nb::arg("path"), nb::arg("plugins") = std::vector<std::filesystem::path>{},
          "Opens an engine file; plugins: libraries its plugin layers need, loaded first")
      .def_prop_ro("name", &Engine::name)
      .def_prop_ro("io_tensors", &Engine::io_tensors)
      .def("io_tensor", &Engine::io_tensor, nb::arg("name"), nb::rv_policy::reference_internal)
      .def_prop_ro("num_io_tensors", [](const Engine& e) { return e.io_tensors().size(); })
      .def("get_tensor_name", [](const Engine& e, std::size_t i) {
        if (i >= e.io_tensors().size()) throw InvalidArgument("[engine] no I/O tensor " + std::to_string(i));
        return e.io_tensors()[i].name;
      })
      // TensorRT's ICudaEngine getters, by tensor name (one optimization profile: index 0).
      .def("get_tensor_mode",
           [](const Engine& e, const std::string& name) {
             for (const auto& t : e.io_tensors())
               if (t.name == name) return t.mode;
             return TensorIOMode::kNONE;
           }, nb::arg("name"))
      .def("get_tensor_dtype", [](const Engine& e, const std::string& name) { return e.io_tensor(name).type; },
           nb::arg("name"))
      .def("get_tensor_shape", [](const Engine& e, const std::string& name) { return e.io_tensor(name).dims; },
           nb::arg("name"), "The dims as declared in the network: -1 where they are set at execution time")
      .def("get_tensor_profile_shape",
           [](const Engine& e, const std::string& name, int profile) {
             if (profile != 0)
               throw InvalidArgument("[engine] optimization profile " + std::to_string(profile) +
                                     ": engines here have one profile (index 0)");
             const auto& t = e.io_tensor(name);
             if (t.mode != TensorIOMode::kINPUT) throw InvalidArgument("[engine] '" + name + "' is not an input");
             return std::vector<Dims>{t.min, t.opt, t.max};
           }, nb::arg("name"), nb::arg("profile_index"))
      .def_prop_ro("num_optimization_profiles", [](const Engine&) { return 1; })
      .def(
          "get_tensor_format",
          [](const Engine& e, const std::string& name, int profile) {
            e.io_tensor(name);  // throws for a name the engine lacks
            if (profile != 0)
              throw InvalidArgument("[engine] optimization profile " + std::to_string(profile) +
                                    ": engines here have one profile (index 0)");
            return 0;
          },
          nb::arg("name"), nb::arg("profile_index") = 0,
          "TensorRT's TensorFormat value of an I/O tensor: always 0 (LINEAR, row-major)")
      .def_prop_ro("num_layers", [](const Engine& e) { return e.layers().size(); },
                   "The engine's nodes (fused layers count once), as TensorRT counts its layers")
      .def_prop_ro("refittable", [](const Engine&) { return false; }, "False: weights are rebuilt, not refitted")
      .def_prop_ro("scratch_bytes", &Engine::scratch_bytes)
      .def_prop_ro("device_memory_size", [](const Engine& e) { return e.activation_bytes() + e.scratch_bytes(); },
                   "Bytes an execution allocates: activations (arena) and scratch (TensorRT's name)")
      .def(
          "serialize",
          [](const Engine& e) {
            const auto b = e.serialized();
            return nb::bytes(b.data(), b.size());
          },
          "The engine file's bytes (TensorRT's serialize): what deserialize and save_engine take")
      .def("layers", &Engine::layers)
      .def("target_json", &Engine::target_json)
      .def_prop_ro("device", &Engine::device, "Where the engine runs in this process: 'cpu', 'cuda:0'")
      .def("plan_json", &Engine::plan_json)
      .def_prop_ro("activation_bytes", &Engine::activation_bytes)
      .def_prop_ro("naive_activation_bytes", &Engine::naive_activation_bytes)
      .def_prop_ro("weight_bytes", &Engine::weight_bytes)
      .def("create_execution", [](const Engine& e) { return PyExecution(e.create_execution()); })
      .def("create_execution_context", [](const Engine& e) { return PyExecution(e.create_execution()); },
           "TensorRT's name for create_execution");
}

}  // namespace tensoracle::python
