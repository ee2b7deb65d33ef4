// Bindings of tensoracle/cache.h: open_engine, EngineIO, TensorSpec, EngineHandle, and the
// cache folder's management (re-exported by tensoracle/cache.py).
#include <nanobind/stl/filesystem.h>
#include <nanobind/stl/map.h>
#include <nanobind/stl/optional.h>
#include <nanobind/stl/string.h>
#include <nanobind/stl/variant.h>
#include <nanobind/stl/vector.h>

#include <variant>

#include "arrays.h"
#include "bindings.h"
#include "tensoracle/cache.h"
#include "tensoracle/errors.h"
#include "tensoracle/onnx_parser.h"

namespace nb = nanobind;
namespace fs = std::filesystem;

namespace tensoracle::python {

namespace {

std::string spec_repr(const TensorSpec& s) {
  return "TensorSpec(" + std::string(type_name(s.type)) + ", " + s.shape.str() + ")";
}

// A timezone-aware UTC datetime.
nb::object utc_datetime(std::chrono::system_clock::time_point t) {
  nb::module_ datetime = nb::module_::import_("datetime");
  double seconds = std::chrono::duration<double>(t.time_since_epoch()).count();
  return datetime.attr("datetime").attr("fromtimestamp")(seconds, datetime.attr("timezone").attr("utc"));
}

fs::path folder(const std::optional<fs::path>& dir) { return dir.value_or(fs::path()); }

}  // namespace

void bind_cache(nb::module_& m) {
  nb::class_<TensorSpec>(m, "TensorSpec", "The type and build-time shape (-1: set at execution) of an engine I/O tensor")
      .def(
          "__init__", [](TensorSpec* s, DataType type, const Dims& shape) { new (s) TensorSpec{type, shape}; },
          nb::arg("dtype"), nb::arg("shape"))
      .def_ro("dtype", &TensorSpec::type)
      .def_ro("shape", &TensorSpec::shape)
      .def("__eq__", [](const TensorSpec& a, const TensorSpec& b) { return a.type == b.type && a.shape == b.shape; })
      .def("__repr__", &spec_repr);

  nb::class_<EngineIO>(m, "EngineIO", "The inputs and outputs an engine must have: {name: TensorSpec} each")
      .def(
          "__init__",
          [](EngineIO* io, std::map<std::string, TensorSpec> inputs, std::map<std::string, TensorSpec> outputs) {
            new (io) EngineIO{std::move(inputs), std::move(outputs)};
          },
          nb::arg("inputs"), nb::arg("outputs"))
      .def_ro("inputs", &EngineIO::inputs)
      .def_ro("outputs", &EngineIO::outputs)
      .def("__repr__", [](const EngineIO& io) {
        auto side = [](const std::map<std::string, TensorSpec>& specs) {
          std::string s = "{";
          for (const auto& [n, spec] : specs) s += (s.size() > 1 ? ", '" : "'") + n + "': " + spec_repr(spec);
          return s + "}";
        };
        return "EngineIO(" + side(io.inputs) + ", " + side(io.outputs) + ")";
      });

  nb::class_<EngineHandle>(m, "EngineHandle", "What open_engine returns")
      .def_ro("engine", &EngineHandle::engine)
      .def_ro("path", &EngineHandle::path)
      .def_ro("identity", &EngineHandle::identity)
      .def_ro("built", &EngineHandle::built, "True when this call built the engine (the graph function ran)")
      .def("create_execution", [](const EngineHandle& h) { return PyExecution(h.create_execution()); })
      .def("__repr__", [](const EngineHandle& h) {
        return "EngineHandle(path='" + h.path.string() + "', identity='" + h.identity +
               "', built=" + (h.built ? "True" : "False") + ")";
      });

  nb::class_<EngineIdentity>(m, "EngineIdentity")
      .def_ro("identity", &EngineIdentity::identity)
      .def_ro("text", &EngineIdentity::text, "the canonical JSON the identity is the XXH3-128 of");

  auto options = [](std::string name, std::string graph_version, std::vector<fs::path> weights, EngineIO io,
                    std::vector<fs::path> plugins, bool force_rebuild, std::optional<std::string> device,
                    std::optional<fs::path> cache_dir) {
    OpenOptions o;
    o.name = std::move(name);
    o.graph_version = std::move(graph_version);
    o.weights = std::move(weights);
    o.io = std::move(io);
    o.plugins = std::move(plugins);
    o.force_rebuild = force_rebuild;
    o.device = std::move(device);
    o.cache_dir = folder(cache_dir);
    return o;
  };

  m.def(
      "open_engine",
      [options](nb::object graph, const EngineBuild& declaration, std::string name, std::string graph_version,
                std::vector<fs::path> weights, EngineIO io, std::vector<fs::path> plugins, bool force_rebuild,
                std::optional<std::string> device, std::optional<fs::path> cache_dir) {
        OpenOptions o = options(std::move(name), std::move(graph_version), std::move(weights), std::move(io),
                                std::move(plugins), force_rebuild, std::move(device), std::move(cache_dir));
        // An ONNX file as the graph: the model and its external data files join the weights.
        if (nb::isinstance<nb::str>(graph) || nb::hasattr(graph, "__fspath__")) {
          const fs::path model = nb::cast<fs::path>(graph);
          nb::gil_scoped_release release;
          auto files = onnx_model_files(model);
          o.weights.insert(o.weights.end(), files.begin(), files.end());
          return open_engine(onnx_graph(model), declaration, o);
        }
        if (!PyCallable_Check(graph.ptr()))
          throw InvalidArgument("[open_engine] graph must be a graph function (network) -> None or an ONNX file's path");
        const nb::callable graph_fn = nb::borrow<nb::callable>(graph);
        // Hashing, waiting for another builder's lock and reading run without the GIL (other
        // Python threads may be opening engines too); the graph function takes it back. It may
        // keep the network, its layers and tensors: they stay valid.
        const nb::callable* fn = &graph_fn;
        auto call = [fn](Network& net) {
          nb::gil_scoped_acquire acquire;
          (*fn)(network_for_graph(net));
        };
        nb::gil_scoped_release release;
        return open_engine(call, declaration, o);
      },
      nb::arg("graph"), nb::arg("declaration"), nb::kw_only(), nb::arg("name"), nb::arg("graph_version"),
      nb::arg("weights"), nb::arg("io"), nb::arg("plugins") = std::vector<fs::path>{},
      nb::arg("force_rebuild") = false, nb::arg("device") = nb::none(), nb::arg("cache_dir") = nb::none(),
      "Opens the saved engine for this identity, or calls graph(network) once, builds, saves and opens it; `graph` may "
      "be an ONNX file's path instead (the model and its external data files then count as weights)");

  m.def("onnx_model_files", &onnx_model_files, nb::arg("model"),
        "The files an ONNX model's engine depends on: the model and the external data files it names");

  m.def(
      "engine_identity",
      [options](const EngineBuild& declaration, std::string name, std::string graph_version,
                std::vector<fs::path> weights, std::vector<fs::path> plugins, std::optional<std::string> device,
                std::optional<fs::path> cache_dir) {
        OpenOptions o = options(std::move(name), std::move(graph_version), std::move(weights), EngineIO{},
                                std::move(plugins), false, std::move(device), std::move(cache_dir));
        nb::gil_scoped_release release;
        return engine_identity(declaration, o);
      },
      nb::arg("declaration"), nb::kw_only(), nb::arg("name"), nb::arg("graph_version"), nb::arg("weights"),
      nb::arg("plugins") = std::vector<fs::path>{}, nb::arg("device") = nb::none(), nb::arg("cache_dir") = nb::none(),
      "The identity open_engine would use (hashes the files; builds and opens nothing)");

  m.def("default_cache_dir", &default_cache_dir,
        "$XDG_CACHE_HOME/tensoracle, else <home>/.cache/tensoracle (home: %USERPROFILE% on Windows)");

  // tensoracle.cache (python/src/tensoracle/cache.py re-exports this submodule).
  nb::module_ c = m.def_submodule("cache", "The engine cache's folder");
  c.def(
      "read_counts",
      [] {
        auto r = cache::read_counts();
        nb::dict d;
        d["files_hashed"] = r.files_hashed;
        d["bytes_hashed"] = r.bytes_hashed;
        d["engine_digest_checks"] = r.engine_digest_checks;
        return d;
      },
      "Process-wide counts of what open_engine and the cache functions read (a warm open adds no hashed files)");

  nb::class_<cache::Entry>(c, "Entry", "One saved engine")
      .def_ro("name", &cache::Entry::name)
      .def_ro("graph_version", &cache::Entry::graph_version)
      .def_ro("identity", &cache::Entry::identity)
      .def_ro("device", &cache::Entry::device)
      .def_ro("path", &cache::Entry::path)
      .def_ro("size", &cache::Entry::size, "bytes on disk")
      .def_prop_ro("created", [](const cache::Entry& e) { return utc_datetime(e.created); })
      .def_prop_ro("last_used", [](const cache::Entry& e) { return utc_datetime(e.last_used); })
      .def_ro("has_record", &cache::Entry::has_record)
      .def("__repr__", [](const cache::Entry& e) {
        return "Entry(name='" + e.name + "', graph_version='" + e.graph_version + "', identity='" + e.identity +
               "', size=" + std::to_string(e.size) + ")";
      });
  nb::class_<cache::Check>(c, "Check", "The result of verifying one entry")
      .def_ro("entry", &cache::Check::entry)
      .def_prop_ro("health",
                   [](const cache::Check& k) {
                     switch (k.health) {
                       case cache::Health::kOk: return "ok";
                       case cache::Health::kCorrupt: return "corrupt";
                       case cache::Health::kIncompatible: return "incompatible";
                     }
                     return "?";
                   })
      .def_prop_ro("ok", [](const cache::Check& k) { return k.health == cache::Health::kOk; })
      .def_ro("problem", &cache::Check::problem);

  c.def(
      "list",
      [](std::optional<fs::path> dir) {
        nb::gil_scoped_release release;
        return cache::list(folder(dir));
      },
      nb::arg("cache_dir") = nb::none(), "The saved engines, sorted by name and graph version");
  c.def(
      "verify",
      [](std::optional<fs::path> dir) {
        nb::gil_scoped_release release;
        return cache::verify(folder(dir));
      },
      nb::arg("cache_dir") = nb::none(), "Reads every saved engine in full and checks it");
  c.def(
      "prune",
      [](std::optional<double> older_than_days, std::optional<std::variant<std::uint64_t, std::string>> max_size,
         std::optional<fs::path> dir) {
        std::optional<std::chrono::seconds> age;
        if (older_than_days) {
          if (!(*older_than_days >= 0) || *older_than_days > 1e6)
            throw InvalidArgument("[cache] prune: older_than_days " + std::to_string(*older_than_days) +
                                  " is not a number of days");
          age = std::chrono::seconds(static_cast<std::int64_t>(*older_than_days * 86400.0));
        }
        std::optional<std::uint64_t> limit;
        if (max_size)
          limit = std::holds_alternative<std::uint64_t>(*max_size) ? std::get<std::uint64_t>(*max_size)
                                                                    : cache::parse_size(std::get<std::string>(*max_size));
        nb::gil_scoped_release release;
        return cache::prune(age, limit, folder(dir));
      },
      nb::kw_only(), nb::arg("older_than_days") = nb::none(), nb::arg("max_size") = nb::none(),
      nb::arg("cache_dir") = nb::none(),
      "Removes entries unused for older_than_days, then the least recently used beyond max_size bytes "
      "(an int, or text such as '500M' or '2GiB'); returns the removed entries");
  c.def(
      "clear",
      [](std::optional<std::string> name, std::optional<fs::path> dir) {
        nb::gil_scoped_release release;
        return cache::clear(name, folder(dir));
      },
      nb::kw_only(), nb::arg("name") = nb::none(), nb::arg("cache_dir") = nb::none(),
      "Removes every entry (and the digest memo), or the entries of one name; returns the removed entries");
  c.def("parse_size", &cache::parse_size, nb::arg("text"));
}

}  // namespace tensoracle::python
