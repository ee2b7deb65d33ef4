// Internal: the process's plugin registry — libraries loaded by plugin_library.h's functions and
// their creators by (namespace, name, version) — and making plugins from fields.
#pragma once

#include <memory>
#include <string>
#include <vector>

#include "plugin/instance.h"
#include "tensoracle/network.h"

namespace tensoracle::plugin {

// "ns::Name/1", or "Name/1" without a namespace.
std::string creator_key(const std::string& plugin_namespace, const std::string& name, const std::string& version);

// The plugin of creator (plugin_namespace, name, version) made from `fields`, which are
// checked against the creator's schema first (known names, no duplicates, the type and count
// it declares). `layer` names the layer in messages. Throws InvalidArgument when the creator
// is not registered (the message says to pass its library in `plugins`), when a field breaks
// the schema or the creator refuses the fields; PluginLibraryError for a plugin of another ABI
// version.
std::shared_ptr<const PluginInstance> create(const std::string& layer, const PluginParams& params);

// Whether the creator is registered.
bool has_creator(const std::string& plugin_namespace, const std::string& name, const std::string& version);

}  // namespace tensoracle::plugin
