// Bindings of tensoracle/plugin_library.h and the Python side of plugin fields: NumPy arrays,
// numbers, str and bytes become typed PluginFields, typed by the creator's schema when the
// caller gives no type.
#include <nanobind/stl/filesystem.h>
#include <nanobind/stl/string.h>
#include <nanobind/stl/vector.h>

#include <cstring>

#include "bindings.h"
#include "tensoracle/errors.h"
#include "tensoracle/plugin_library.h"

namespace nb = nanobind;
using namespace nb::literals;

namespace tensoracle::python {

namespace {

const char* numpy_dtype_of(PluginFieldType t) {
  switch (t) {
    case PluginFieldType::kINT32: return "<i4";
    case PluginFieldType::kINT64: return "<i8";
    case PluginFieldType::kFLOAT32: return "<f4";
    case PluginFieldType::kFLOAT64: return "<f8";
    default: return nullptr;
  }
}

// The schema's type of field `field` of the creator, when registered and declared.
std::optional<PluginFieldType> schema_type(const std::string& ns, const std::string& name, const std::string& version,
                                           const std::string& field) {
  for (const auto& c : registered_plugin_creators())
    if (c.plugin_namespace == ns && c.name == name && c.version == version)
      for (const auto& f : c.fields)
        if (f.name == field) return f.type;
  return std::nullopt;
}

PluginField field_of(const std::string& field, nb::handle data, std::optional<PluginFieldType> type) {
  auto bad = [&](const std::string& why) { return InvalidArgument("[network] plugin field '" + field + "': " + why); };
  if (nb::isinstance<nb::str>(data)) {
    if (type && *type != PluginFieldType::kSTRING && *type != PluginFieldType::kBYTES)
      throw bad("a str is given for a " + std::string(plugin_field_type_name(*type)) + " field");
    PluginField f = PluginField::string(field, nb::cast<std::string>(data));
    if (type) f.type = *type;
    return f;
  }
  if (nb::isinstance<nb::bytes>(data) || PyByteArray_Check(data.ptr()) || PyMemoryView_Check(data.ptr())) {
    nb::bytes b(PyBytes_FromObject(data.ptr()), nb::detail::steal_t{});
    if (!b.is_valid()) throw nb::python_error();
    if (type && *type != PluginFieldType::kSTRING && *type != PluginFieldType::kBYTES)
      throw bad("bytes are given for a " + std::string(plugin_field_type_name(*type)) + " field");
    PluginField f = PluginField::bytes(field, std::span(static_cast<const std::byte*>(static_cast<const void*>(b.c_str())), b.size()));
    if (type) f.type = *type;
    return f;
  }
  nb::object np = nb::module_::import_("numpy");
  nb::object array = np.attr("asarray")(data);
  if (!type) {
    const std::string kind = nb::cast<std::string>(array.attr("dtype").attr("kind"));
    const auto size = nb::cast<int>(array.attr("dtype").attr("itemsize"));
    if (kind == "f" && (size == 4 || size == 8)) type = size == 4 ? PluginFieldType::kFLOAT32 : PluginFieldType::kFLOAT64;
    else if ((kind == "i" || kind == "u") && size <= 4) type = PluginFieldType::kINT32;
    else if (kind == "i" || kind == "u") type = PluginFieldType::kINT64;
    else throw bad("values of dtype " + nb::cast<std::string>(nb::str(array.attr("dtype"))) +
                   " are not a field type (int32, int64, float32, float64, str, bytes)");
  }
  const char* dtype = numpy_dtype_of(*type);
  if (!dtype) throw bad("a " + std::string(plugin_field_type_name(*type)) + " field takes str or bytes");
  // Values must survive the conversion: 1.5 is no int32, 2**40 no int32, 1e300 no float32.
  nb::object converted = np.attr("ascontiguousarray")(array, "dtype"_a = dtype).attr("ravel")();
  nb::object back = converted.attr("astype")(array.attr("dtype"));
  const bool same = nb::cast<bool>(np.attr("array_equal")(back, array.attr("ravel")()));
  const bool float_to_float = nb::cast<std::string>(array.attr("dtype").attr("kind")) == "f" &&
                              (*type == PluginFieldType::kFLOAT32 || *type == PluginFieldType::kFLOAT64);
  if (!same && !float_to_float)  // rounding a float into float32 is expected; 1.5 into int32 is not
    throw bad("its values do not fit " + std::string(plugin_field_type_name(*type)));
  nb::bytes raw = nb::cast<nb::bytes>(converted.attr("tobytes")());
  PluginField f;
  f.name = field;
  f.type = *type;
  f.data.resize(raw.size());
  if (raw.size()) std::memcpy(f.data.data(), raw.c_str(), raw.size());
  return f;
}

}  // namespace

std::vector<PluginField> plugin_fields_from(nb::handle fields, const std::string& ns, const std::string& name,
                                            const std::string& version) {
  std::vector<PluginField> out;
  if (fields.is_none()) return out;
  auto one = [&](const std::string& field, nb::handle data, nb::handle type) {
    std::optional<PluginFieldType> t;
    if (PluginFieldType given; !type.is_none()) {
      if (!nb::try_cast(type, given))
        throw nb::type_error(("[network] add_plugin(fields): field '" + field + "': type is a PluginFieldType or None; got " +
                              nb::cast<std::string>(nb::str(type.type().attr("__name__"))))
                                 .c_str());
      t = given;
    } else {
      t = schema_type(ns, name, version, field);
    }
    out.push_back(field_of(field, data, t));
  };
  auto field_name = [](nb::handle n) {
    if (!nb::isinstance<nb::str>(n))
      throw nb::type_error(("[network] add_plugin(fields): field names are str; got " +
                            nb::cast<std::string>(nb::str(n.type().attr("__name__"))))
                               .c_str());
    return nb::cast<std::string>(n);
  };
  if (nb::isinstance<nb::dict>(fields)) {
    for (auto [k, v] : nb::borrow<nb::dict>(fields)) one(field_name(k), v, nb::none());
    return out;
  }
  // PluginFieldCollection / a list of PluginField(name, data, type).
  if (!nb::isinstance<nb::iterable>(fields))
    throw nb::type_error("[network] add_plugin(fields): expected a dict {name: value} or PluginField objects");
  for (nb::handle f : fields) {
    if (!nb::hasattr(f, "name") || !nb::hasattr(f, "data"))
      throw InvalidArgument("[network] add_plugin: fields must be a dict {name: value} or PluginField objects");
    one(field_name(f.attr("name")), f.attr("data"), nb::hasattr(f, "type") ? f.attr("type") : nb::none());
  }
  return out;
}

void bind_plugins(nb::module_& m) {
  nb::enum_<PluginFieldType>(m, "PluginFieldType", nb::is_arithmetic())
      .value("INT32", PluginFieldType::kINT32).value("INT64", PluginFieldType::kINT64)
      .value("FLOAT32", PluginFieldType::kFLOAT32).value("FLOAT64", PluginFieldType::kFLOAT64)
      .value("STRING", PluginFieldType::kSTRING).value("BYTES", PluginFieldType::kBYTES);

  nb::class_<PluginLibraryInfo>(m, "PluginLibraryInfo", "A loaded plugin library")
      .def_ro("path", &PluginLibraryInfo::path)
      .def_ro("digest", &PluginLibraryInfo::digest)
      .def_ro("size", &PluginLibraryInfo::size)
      .def_ro("creators", &PluginLibraryInfo::creators)
      .def("__repr__", [](const PluginLibraryInfo& i) { return "PluginLibraryInfo('" + i.path.string() + "', " + i.digest + ")"; });

  nb::class_<PluginFieldSpec>(m, "PluginFieldSpec")
      .def_ro("name", &PluginFieldSpec::name)
      .def_ro("type", &PluginFieldSpec::type)
      .def_ro("count", &PluginFieldSpec::count, "elements; -1: any number");

  nb::class_<PluginCreatorInfo>(m, "PluginCreatorInfo", "A registered plugin creator")
      .def_ro("name", &PluginCreatorInfo::name)
      .def_ro("version", &PluginCreatorInfo::version)
      .def_ro("plugin_namespace", &PluginCreatorInfo::plugin_namespace)
      .def_ro("fields", &PluginCreatorInfo::fields)
      .def_ro("library", &PluginCreatorInfo::library)
      .def("__repr__", [](const PluginCreatorInfo& c) {
        return "PluginCreatorInfo('" + (c.plugin_namespace.empty() ? "" : c.plugin_namespace + "::") + c.name + "', '" +
               c.version + "')";
      });

  m.def(
      "load_plugin_libraries",
      [](const std::vector<std::filesystem::path>& paths) {
        nb::gil_scoped_release release;
        return load_plugin_libraries(paths);
      },
      nb::arg("paths"), "Loads plugin libraries into this process (once each) and returns what was loaded");
  m.def("registered_plugin_creators", &registered_plugin_creators, "Every plugin creator registered in this process");
}

}  // namespace tensoracle::python
