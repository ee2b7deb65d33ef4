#include "graph/tactic.h"

#include <algorithm>
#include <array>
#include <initializer_list>
#include <limits>

#include "tensoracle/errors.h"

namespace tensoracle::graph {

using json = nlohmann::json;

namespace {

[[noreturn]] void bad(const std::string& what) { throw CorruptEngineError("[engine] its plan has a tactic " + what); }

constexpr std::array<std::string_view, 3> kPrecisions = {"native", "int8", "fp8"};

bool kernel_name_ok(std::string_view k) {
  return !k.empty() && k.size() <= 64 && std::all_of(k.begin(), k.end(), [](char c) {
    return (c >= 'a' && c <= 'z') || (c >= '0' && c <= '9') || c == '.' || c == '_';
  });
}

// The object's keys are exactly `keys` (each once: JSON objects hold a key once).
void exact_keys(const json& j, std::initializer_list<std::string_view> keys) {
  for (const auto& [k, v] : j.items())
    if (std::find(keys.begin(), keys.end(), k) == keys.end())
      bad("with an unknown field '" + k + "' (kernel " + j.at("kernel").get<std::string>() + ")");
  for (auto k : keys)
    if (!j.contains(k)) bad("without its field '" + std::string(k) + "' (kernel " + j.at("kernel").get<std::string>() + ")");
}

std::int64_t integer(const json& j, std::string_view key, std::int64_t lo, std::int64_t hi) {
  const json& v = j.at(std::string(key));
  if (!v.is_number_integer()) bad("whose '" + std::string(key) + "' is not an integer");
  // nlohmann keeps integers above INT64_MAX as unsigned: out of every range here.
  if (v.is_number_unsigned() && v.get<std::uint64_t>() > static_cast<std::uint64_t>(std::numeric_limits<std::int64_t>::max()))
    bad("whose '" + std::string(key) + "' is out of range");
  const std::int64_t x = v.get<std::int64_t>();
  if (x < lo || x > hi) bad("whose '" + std::string(key) + "' (" + std::to_string(x) + ") is out of range");
  return x;
}

std::uint64_t unsigned_integer(const json& v, std::string_view key) {
  if (!v.is_number_unsigned() && !(v.is_number_integer() && v.get<std::int64_t>() >= 0))
    bad("whose '" + std::string(key) + "' is not a non-negative integer");
  return v.get<std::uint64_t>();
}

bool boolean(const json& j, std::string_view key) {
  const json& v = j.at(std::string(key));
  if (!v.is_boolean()) bad("whose '" + std::string(key) + "' is not true or false");
  return v.get<bool>();
}

const std::string& text(const json& j, std::string_view key) {
  const json& v = j.at(std::string(key));
  if (!v.is_string()) bad("whose '" + std::string(key) + "' is not a string");
  return v.get_ref<const std::string&>();
}

// A list of 2..5 integers in [lo, 2^40].
std::vector<std::int64_t> dims_list(const json& j, std::string_view key, std::int64_t lo) {
  const json& v = j.at(std::string(key));
  if (!v.is_array() || v.size() < 2 || v.size() > 5) bad("whose '" + std::string(key) + "' is not a list of 2 to 5 integers");
  std::vector<std::int64_t> out;
  for (const auto& e : v) {
    if (!e.is_number_integer() || (e.is_number_unsigned() && e.get<std::uint64_t>() > (std::uint64_t{1} << 40)))
      bad("whose '" + std::string(key) + "' holds something other than an integer in range");
    const std::int64_t x = e.get<std::int64_t>();
    if (x < lo || x > (std::int64_t{1} << 40)) bad("whose '" + std::string(key) + "' holds " + std::to_string(x) + ", out of range");
    out.push_back(x);
  }
  return out;
}

CublasLtConfig cublaslt_of(const json& j) {
  exact_keys(j, {"kernel", "precision", "epilogue_ops", "algo", "workspace"});
  CublasLtConfig c;
  const std::string& p = text(j, "precision");
  const auto it = std::find(kPrecisions.begin(), kPrecisions.end(), p);
  if (it == kPrecisions.end()) bad("whose precision '" + p + "' is not native, int8 or fp8");
  c.precision = static_cast<CublasLtConfig::Precision>(it - kPrecisions.begin());
  c.epilogue_ops = static_cast<int>(integer(j, "epilogue_ops", 0, 64));
  c.algo = text(j, "algo");
  if (c.algo.size() > 1024 || c.algo.size() % 2 || c.algo.find_first_not_of("0123456789abcdef") != std::string::npos)
    bad("whose 'algo' is not lowercase hex bytes");
  const json& ws = j.at("workspace");
  if (!ws.is_null()) c.workspace = unsigned_integer(ws, "workspace");
  return c;
}

CudnnConvConfig cudnn_of(const json& j) {
  exact_keys(j, {"kernel", "type", "x", "w", "y", "stride", "dilation", "pre", "post", "accumulate", "channels_last",
                 "engine", "knobs", "workspace"});
  CudnnConvConfig config;
  ConvProblem& c = config.problem;
  const auto type = parse_type(text(j, "type"));
  if (!type || (*type != DataType::kFLOAT && *type != DataType::kHALF && *type != DataType::kBF16))
    bad("whose type is not float32, float16 or bfloat16");
  c.type = *type;
  c.x = dims_list(j, "x", 1);
  c.w = dims_list(j, "w", 1);
  c.y = dims_list(j, "y", 1);
  c.stride = dims_list(j, "stride", 1);
  c.dilation = dims_list(j, "dilation", 1);
  c.pre = dims_list(j, "pre", 0);
  c.post = dims_list(j, "post", 0);
  const std::size_t r = c.x.size();
  if ((r != 4 && r != 5) || c.w.size() != r || c.y.size() != r)
    bad("whose x, w and y are not all of 4 or all of 5 dims");
  for (const auto* d : {&c.stride, &c.dilation, &c.pre, &c.post})
    if (d->size() != r - 2) bad("whose stride, dilation or padding has other than one entry per spatial dim");
  c.accumulate = boolean(j, "accumulate");
  c.channels_last = integer(j, "channels_last", 0, std::int64_t{1} << 40);
  if (c.channels_last &&
      (c.accumulate || c.w[1] != c.x[1] || c.channels_last < c.x[1] || c.channels_last - c.x[1] >= 8))
    bad("whose channels_last (" + std::to_string(c.channels_last) + ") does not hold x's channels, or comes with groups or accumulate");
  const json& engine = j.at("engine");
  if (engine.is_string()) {
    if (engine.get_ref<const std::string&>() != "direct") bad("whose engine is neither an index nor \"direct\"");
  } else {
    config.engine = integer(j, "engine", 0, std::numeric_limits<std::int64_t>::max());
  }
  const json& knobs = j.at("knobs");
  if (!knobs.is_array() || knobs.size() > 64) bad("whose knobs are not a list of at most 64 pairs");
  for (const auto& k : knobs) {
    if (!k.is_array() || k.size() != 2) bad("whose knobs are not [type, value] pairs");
    const json pair = {{"type", k[0]}, {"value", k[1]}};
    config.knobs.emplace_back(static_cast<int>(integer(pair, "type", 0, std::numeric_limits<int>::max())),
                         integer(pair, "value", std::numeric_limits<std::int64_t>::min(), std::numeric_limits<std::int64_t>::max()));
  }
  if (!config.engine && !config.knobs.empty()) bad("for the direct kernel with cuDNN knobs");
  config.workspace = unsigned_integer(j.at("workspace"), "workspace");
  return config;
}

std::string join(const std::vector<std::int64_t>& v) {
  std::string s;
  for (std::size_t i = 0; i < v.size(); ++i) s += (i ? "x" : "") + std::to_string(v[i]);
  return s;
}

}  // namespace

std::string_view layout_name(Layout l) { return l == Layout::kChannelsLast ? "channels_last" : "linear"; }

Layout layout_of(const json& j) {
  if (j == "linear") return Layout::kLinear;
  if (j == "channels_last") return Layout::kChannelsLast;
  throw CorruptEngineError("[engine] its plan has a value layout other than \"linear\" or \"channels_last\"");
}

json tactic_json(const Tactic& t) {
  json j = {{"kernel", t.kernel}};
  if (const auto* c = std::get_if<CublasLtConfig>(&t.config)) {
    j["precision"] = kPrecisions[static_cast<std::size_t>(c->precision)];
    j["epilogue_ops"] = c->epilogue_ops;
    j["algo"] = c->algo;
    j["workspace"] = c->workspace ? json(*c->workspace) : json(nullptr);
  } else if (const auto* f = std::get_if<FusedFp8GemmConfig>(&t.config)) {
    j["epilogue_ops"] = f->epilogue_ops;
  } else if (const auto* d = std::get_if<CudnnConvConfig>(&t.config)) {
    j["type"] = type_name(d->problem.type);
    j["x"] = d->problem.x;
    j["w"] = d->problem.w;
    j["y"] = d->problem.y;
    j["stride"] = d->problem.stride;
    j["dilation"] = d->problem.dilation;
    j["pre"] = d->problem.pre;
    j["post"] = d->problem.post;
    j["accumulate"] = d->problem.accumulate;
    j["channels_last"] = d->problem.channels_last;
    j["engine"] = d->engine ? json(*d->engine) : json("direct");
    json knobs = json::array();
    for (const auto& [type, value] : d->knobs) knobs.push_back({type, value});
    j["knobs"] = std::move(knobs);
    j["workspace"] = d->workspace;
  }
  return j;
}

Tactic tactic_of(const json& j) {
  if (!j.is_object() || !j.contains("kernel") || !j.at("kernel").is_string()) bad("that is not an object naming its kernel");
  const std::string& kernel = j.at("kernel").get_ref<const std::string&>();
  if (kernel.empty()) {
    if (j.size() != 1) bad("without a kernel but with a configuration");
    return Tactic();
  }
  if (!kernel_name_ok(kernel)) bad("whose kernel name is malformed");
  if (kernel == kCublasLtKernel) return Tactic(cublaslt_of(j));
  if (kernel == kFusedFp8GemmKernel) {
    exact_keys(j, {"kernel", "epilogue_ops"});
    return Tactic(FusedFp8GemmConfig{static_cast<int>(integer(j, "epilogue_ops", 2, 3))});
  }
  if (kernel == kCudnnConvKernel) return Tactic(cudnn_of(j));
  exact_keys(j, {"kernel"});
  return Tactic(kernel);
}

std::string describe(const Tactic& t) {
  std::string s = t.kernel;
  if (const auto* c = std::get_if<CublasLtConfig>(&t.config)) {
    if (c->precision != CublasLtConfig::Precision::kNative) s += " " + std::string(kPrecisions[static_cast<std::size_t>(c->precision)]);
    if (c->epilogue_ops) s += " epilogue:" + std::to_string(c->epilogue_ops);
    if (!c->algo.empty()) s += " algo:" + c->algo;
    if (c->workspace) s += " ws:" + std::to_string(*c->workspace);
  } else if (const auto* f = std::get_if<FusedFp8GemmConfig>(&t.config)) {
    s += " epilogue:" + std::to_string(f->epilogue_ops);
  } else if (const auto* d = std::get_if<CudnnConvConfig>(&t.config)) {
    s += " " + std::string(type_name(d->problem.type)) + " x:" + join(d->problem.x) + " w:" + join(d->problem.w) + " y:" + join(d->problem.y) +
         " stride:" + join(d->problem.stride) + " dilation:" + join(d->problem.dilation) + " pad:" + join(d->problem.pre) + "/" + join(d->problem.post);
    if (d->problem.accumulate) s += " accumulate";
    if (d->problem.channels_last) s += " channels_last:" + std::to_string(d->problem.channels_last);
    s += d->engine ? " engine:" + std::to_string(*d->engine) : std::string(" direct");
    for (const auto& [type, value] : d->knobs) s += " knob" + std::to_string(type) + "=" + std::to_string(value);
    if (d->workspace) s += " ws:" + std::to_string(d->workspace);
  }
  return s;
}

}  // namespace tensoracle::graph
