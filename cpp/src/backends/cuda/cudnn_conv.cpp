// cuDNN forward convolutions (cudnn_conv.h): the library opened with dlopen, the graph API's
// descriptors built by hand (tensors, convolution, operation graph, heuristics, engine
// configuration, execution plan, variant pack).
#include "backends/cuda/cudnn_conv.h"

#include <dlfcn.h>

#include <algorithm>
#include <cstdlib>
#include <string_view>
#include <utility>

#include "tensoracle/errors.h"

#if TENSORACLE_HAVE_CUDNN
#include <cudnn_graph.h>
#endif

namespace tensoracle::cuda {

#if TENSORACLE_HAVE_CUDNN

namespace {

// The entry points used, typed from cuDNN's own declarations.
struct Api {
  decltype(&::cudnnGetVersion) GetVersion = nullptr;
  decltype(&::cudnnGetErrorString) GetErrorString = nullptr;
  decltype(&::cudnnCreate) Create = nullptr;
  decltype(&::cudnnDestroy) Destroy = nullptr;
  decltype(&::cudnnSetStream) SetStream = nullptr;
  decltype(&::cudnnBackendCreateDescriptor) CreateDescriptor = nullptr;
  decltype(&::cudnnBackendDestroyDescriptor) DestroyDescriptor = nullptr;
  decltype(&::cudnnBackendSetAttribute) SetAttribute = nullptr;
  decltype(&::cudnnBackendGetAttribute) GetAttribute = nullptr;
  decltype(&::cudnnBackendFinalize) Finalize = nullptr;
  decltype(&::cudnnBackendExecute) Execute = nullptr;
};

// Opened once per process; nullptr when libcudnn.so.9 is missing or lacks an entry point.
const Api* api() {
  static const Api* loaded = [] () -> const Api* {
    if (const char* env = std::getenv("TENSORACLE_CUDNN"); env && std::string_view(env) == "0") return nullptr;
    void* lib = dlopen("libcudnn.so.9", RTLD_NOW | RTLD_LOCAL);
    if (!lib) return nullptr;
    static Api a;
    bool ok = true;
    auto get = [&](auto& fn, const char* name) {
      fn = reinterpret_cast<std::remove_reference_t<decltype(fn)>>(dlsym(lib, name));
      ok = ok && fn != nullptr;
    };
    get(a.GetVersion, "cudnnGetVersion");
    get(a.GetErrorString, "cudnnGetErrorString");
    get(a.Create, "cudnnCreate");
    get(a.Destroy, "cudnnDestroy");
    get(a.SetStream, "cudnnSetStream");
    get(a.CreateDescriptor, "cudnnBackendCreateDescriptor");
    get(a.DestroyDescriptor, "cudnnBackendDestroyDescriptor");
    get(a.SetAttribute, "cudnnBackendSetAttribute");
    get(a.GetAttribute, "cudnnBackendGetAttribute");
    get(a.Finalize, "cudnnBackendFinalize");
    get(a.Execute, "cudnnBackendExecute");
    if (!ok || a.GetVersion() < 90000) return nullptr;  // the graph API as used here is cuDNN 9's
    return &a;
  }();
  return loaded;
}

void ok(cudnnStatus_t s, const std::string& what) {
  if (s != CUDNN_STATUS_SUCCESS)
    throw Error("[cuda] cuDNN: " + what + ": " + api()->GetErrorString(s) + " (status " + std::to_string(s) + ")");
}

// One backend descriptor, destroyed with its owner.
class Desc {
 public:
  Desc() = default;
  explicit Desc(cudnnBackendDescriptorType_t type, const char* what) {
    ok(api()->CreateDescriptor(type, &d_), std::string("creating a ") + what + " descriptor");
  }
  ~Desc() {
    if (d_) api()->DestroyDescriptor(d_);
  }
  Desc(Desc&& o) noexcept : d_(std::exchange(o.d_, nullptr)) {}
  Desc& operator=(Desc&& o) noexcept {
    std::swap(d_, o.d_);
    return *this;
  }
  cudnnBackendDescriptor_t get() const { return d_; }
  cudnnBackendDescriptor_t* addr() { return &d_; }

  template <class T>
  Desc& set(cudnnBackendAttributeName_t name, cudnnBackendAttributeType_t type, const T* values, std::int64_t count) {
    ok(api()->SetAttribute(d_, name, type, count, values), "setting attribute " + std::to_string(name));
    return *this;
  }
  template <class T>
  Desc& set(cudnnBackendAttributeName_t name, cudnnBackendAttributeType_t type, const T& value) {
    return set(name, type, &value, 1);
  }
  Desc& set_desc(cudnnBackendAttributeName_t name, const Desc& d) {
    cudnnBackendDescriptor_t v = d.get();
    return set(name, CUDNN_TYPE_BACKEND_DESCRIPTOR, &v, 1);
  }
  Desc& set_ints(cudnnBackendAttributeName_t name, const std::vector<std::int64_t>& v) {
    return set(name, CUDNN_TYPE_INT64, v.data(), static_cast<std::int64_t>(v.size()));
  }
  // Status instead of a throw: a refused configuration is an answer, not an error.
  cudnnStatus_t try_finalize() { return api()->Finalize(d_); }
  Desc& finalize(const char* what) {
    ok(try_finalize(), std::string("finalizing the ") + what);
    return *this;
  }

 private:
  cudnnBackendDescriptor_t d_ = nullptr;
};

// The execution plan's and operation graph's handle attributes are deprecated in recent cuDNN 9
// releases (the handle moved to execute) but still required by older 9.x, which this supports.
#pragma GCC diagnostic push
#pragma GCC diagnostic ignored "-Wdeprecated-declarations"
constexpr cudnnBackendAttributeName_t kPlanHandle = CUDNN_ATTR_EXECUTION_PLAN_HANDLE;
constexpr cudnnBackendAttributeName_t kGraphHandle = CUDNN_ATTR_OPERATIONGRAPH_HANDLE;
#pragma GCC diagnostic pop

cudnnDataType_t dnn_type(DataType t) {
  switch (t) {
    case DataType::kHALF: return CUDNN_DATA_HALF;
    case DataType::kBF16: return CUDNN_DATA_BFLOAT16;
    default: return CUDNN_DATA_FLOAT;
  }
}

std::vector<std::int64_t> packed_strides(const std::vector<std::int64_t>& dims) {
  std::vector<std::int64_t> s(dims.size(), 1);
  for (std::size_t i = dims.size(); i-- > 1;) s[i - 1] = s[i] * dims[i];
  return s;
}

// Strides of dims [N, C, spatial...] stored channels-last: [N, spatial..., C].
std::vector<std::int64_t> channels_last_strides(const std::vector<std::int64_t>& dims) {
  std::vector<std::int64_t> s(dims.size(), 1);
  std::int64_t acc = dims[1];
  for (std::size_t i = dims.size(); i-- > 2;) {
    s[i] = acc;
    acc *= dims[i];
  }
  s[0] = acc;
  return s;
}

constexpr std::int64_t kX = 'x', kW = 'w', kY = 'y';  // the tensors' unique ids

// An engine configuration's engine: its global index, notes, and whether tensoracle may run it.
struct EngineInfo {
  std::int64_t global = -1;
  bool allowed = false;
};

EngineInfo inspect(const Desc& cfg, DataType type) {
  EngineInfo info;
  Desc engine(CUDNN_BACKEND_ENGINE_DESCRIPTOR, "engine");
  std::int64_t n = 0;
  if (api()->GetAttribute(cfg.get(), CUDNN_ATTR_ENGINECFG_ENGINE, CUDNN_TYPE_BACKEND_DESCRIPTOR, 1, &n,
                          engine.addr()) != CUDNN_STATUS_SUCCESS || n != 1)
    return info;
  if (api()->GetAttribute(engine.get(), CUDNN_ATTR_ENGINE_GLOBAL_INDEX, CUDNN_TYPE_INT64, 1, &n, &info.global) !=
      CUDNN_STATUS_SUCCESS)
    return info;
  cudnnBackendNumericalNote_t notes[CUDNN_NUMERICAL_NOTE_TYPE_COUNT];
  if (api()->GetAttribute(engine.get(), CUDNN_ATTR_ENGINE_NUMERICAL_NOTE, CUDNN_TYPE_NUMERICAL_NOTE,
                          CUDNN_NUMERICAL_NOTE_TYPE_COUNT, &n, notes) != CUDNN_STATUS_SUCCESS)
    return info;
  for (std::int64_t i = 0; i < n; ++i) {
    switch (notes[i]) {
      case CUDNN_NUMERICAL_NOTE_TENSOR_CORE:
      case CUDNN_NUMERICAL_NOTE_DOWN_CONVERT_INPUTS:
        if (type == DataType::kFLOAT) return info;  // TF32 (or lower) for float32 data: never
        break;
      case CUDNN_NUMERICAL_NOTE_REDUCED_PRECISION_REDUCTION:
      case CUDNN_NUMERICAL_NOTE_FFT:
      case CUDNN_NUMERICAL_NOTE_NONDETERMINISTIC:
      case CUDNN_NUMERICAL_NOTE_WINOGRAD:
      case CUDNN_NUMERICAL_NOTE_WINOGRAD_TILE_4x4:
      case CUDNN_NUMERICAL_NOTE_WINOGRAD_TILE_6x6:
      case CUDNN_NUMERICAL_NOTE_WINOGRAD_TILE_13x13: return info;
      default: break;
    }
  }
  cudnnBackendBehaviorNote_t behavior[CUDNN_BEHAVIOR_NOTE_TYPE_COUNT];
  if (api()->GetAttribute(engine.get(), CUDNN_ATTR_ENGINE_BEHAVIOR_NOTE, CUDNN_TYPE_BEHAVIOR_NOTE,
                          CUDNN_BEHAVIOR_NOTE_TYPE_COUNT, &n, behavior) != CUDNN_STATUS_SUCCESS)
    return info;
  for (std::int64_t i = 0; i < n; ++i)
    if (behavior[i] == CUDNN_BEHAVIOR_NOTE_RUNTIME_COMPILATION ||
        behavior[i] == CUDNN_BEHAVIOR_NOTE_REQUIRES_FILTER_INT8x32_REORDER ||
        behavior[i] == CUDNN_BEHAVIOR_NOTE_REQUIRES_BIAS_INT8x32_REORDER)
      return info;
  info.allowed = true;
  return info;
}

// "<global>[,<knob>=<value>]..." of a configuration from the heuristics.
std::string describe(const Desc& cfg, std::int64_t global) {
  constexpr int kMaxKnobs = 64;
  std::vector<Desc> knobs;
  std::vector<cudnnBackendDescriptor_t> raw;
  for (int i = 0; i < kMaxKnobs; ++i) {
    knobs.emplace_back(CUDNN_BACKEND_KNOB_CHOICE_DESCRIPTOR, "knob choice");
    raw.push_back(knobs.back().get());
  }
  std::int64_t n = 0;
  ok(api()->GetAttribute(cfg.get(), CUDNN_ATTR_ENGINECFG_KNOB_CHOICES, CUDNN_TYPE_BACKEND_DESCRIPTOR, kMaxKnobs, &n,
                         raw.data()),
     "reading a configuration's knobs");
  std::string s = std::to_string(global);
  for (std::int64_t i = 0; i < std::min<std::int64_t>(n, kMaxKnobs); ++i) {
    cudnnBackendKnobType_t type{};
    std::int64_t value = 0, got = 0;
    ok(api()->GetAttribute(raw[static_cast<std::size_t>(i)], CUDNN_ATTR_KNOB_CHOICE_KNOB_TYPE, CUDNN_TYPE_KNOB_TYPE, 1,
                           &got, &type),
       "reading a knob");
    ok(api()->GetAttribute(raw[static_cast<std::size_t>(i)], CUDNN_ATTR_KNOB_CHOICE_KNOB_VALUE, CUDNN_TYPE_INT64, 1,
                           &got, &value),
       "reading a knob");
    s += "," + std::to_string(static_cast<int>(type)) + "=" + std::to_string(value);
  }
  return s;
}

}  // namespace

int cudnn_version() {
  const Api* a = api();
  return a ? static_cast<int>(a->GetVersion()) : 0;
}

CudnnContext::~CudnnContext() {
  if (handle_) api()->Destroy(static_cast<cudnnHandle_t>(handle_));
}

void* CudnnContext::handle() const {
  std::lock_guard lock(init_mutex_);
  if (!tried_) {
    tried_ = true;
    if (api()) {
      int previous = -1;
      cudaGetDevice(&previous);
      cudaSetDevice(device_);
      cudnnHandle_t h = nullptr;
      if (api()->Create(&h) == CUDNN_STATUS_SUCCESS) handle_ = h;
      if (previous >= 0) cudaSetDevice(previous);
    }
  }
  return handle_;
}

struct CudnnConv::State {
  Desc x, w, y, conv, op, graph;
  Desc engine, config, plan;
  std::vector<Desc> knobs;
  std::int64_t workspace = 0;
  bool ready = false;
};

CudnnConv::CudnnConv(const CudnnContext& ctx, CudnnConvShape shape)
    : ctx_(ctx), shape_(std::move(shape)), state_(std::make_unique<State>()) {
  auto handle = static_cast<cudnnHandle_t>(ctx_.handle());
  if (!handle) throw Error("[cuda] cuDNN is not available (libcudnn.so.9 did not open)");
  const cudnnDataType_t dt = dnn_type(shape_.type);
  const std::int64_t align = kCudnnAlign;
  const bool last = shape_.channels_last > 0;
  auto tensor = [&](Desc& d, std::vector<std::int64_t> dims, std::int64_t id, const char* what) {
    if (last && id != kY) dims[1] = shape_.channels_last;  // x's and w's channels, padded
    d = Desc(CUDNN_BACKEND_TENSOR_DESCRIPTOR, what);
    d.set(CUDNN_ATTR_TENSOR_DATA_TYPE, CUDNN_TYPE_DATA_TYPE, dt)
        .set_ints(CUDNN_ATTR_TENSOR_DIMENSIONS, dims)
        .set_ints(CUDNN_ATTR_TENSOR_STRIDES, last ? channels_last_strides(dims) : packed_strides(dims))
        .set(CUDNN_ATTR_TENSOR_UNIQUE_ID, CUDNN_TYPE_INT64, id)
        .set(CUDNN_ATTR_TENSOR_BYTE_ALIGNMENT, CUDNN_TYPE_INT64, align)
        .finalize(what);
  };
  State& s = *state_;
  tensor(s.x, shape_.x, kX, "input tensor");
  tensor(s.w, shape_.w, kW, "kernel tensor");
  tensor(s.y, shape_.y, kY, "output tensor");
  const std::int64_t spatial = static_cast<std::int64_t>(shape_.x.size()) - 2;
  const cudnnDataType_t compute = CUDNN_DATA_FLOAT;
  const cudnnConvolutionMode_t mode = CUDNN_CROSS_CORRELATION;
  s.conv = Desc(CUDNN_BACKEND_CONVOLUTION_DESCRIPTOR, "convolution");
  s.conv.set(CUDNN_ATTR_CONVOLUTION_SPATIAL_DIMS, CUDNN_TYPE_INT64, spatial)
      .set(CUDNN_ATTR_CONVOLUTION_COMP_TYPE, CUDNN_TYPE_DATA_TYPE, compute)
      .set(CUDNN_ATTR_CONVOLUTION_CONV_MODE, CUDNN_TYPE_CONVOLUTION_MODE, mode)
      .set_ints(CUDNN_ATTR_CONVOLUTION_DILATIONS, shape_.dilation)
      .set_ints(CUDNN_ATTR_CONVOLUTION_FILTER_STRIDES, shape_.stride)
      .set_ints(CUDNN_ATTR_CONVOLUTION_PRE_PADDINGS, shape_.pre)
      .set_ints(CUDNN_ATTR_CONVOLUTION_POST_PADDINGS, shape_.post)
      .finalize("convolution descriptor");
  const float alpha = 1.f, beta = shape_.accumulate ? 1.f : 0.f;
  s.op = Desc(CUDNN_BACKEND_OPERATION_CONVOLUTION_FORWARD_DESCRIPTOR, "forward convolution");
  s.op.set_desc(CUDNN_ATTR_OPERATION_CONVOLUTION_FORWARD_X, s.x)
      .set_desc(CUDNN_ATTR_OPERATION_CONVOLUTION_FORWARD_W, s.w)
      .set_desc(CUDNN_ATTR_OPERATION_CONVOLUTION_FORWARD_Y, s.y)
      .set_desc(CUDNN_ATTR_OPERATION_CONVOLUTION_FORWARD_CONV_DESC, s.conv)
      .set(CUDNN_ATTR_OPERATION_CONVOLUTION_FORWARD_ALPHA, CUDNN_TYPE_FLOAT, alpha)
      .set(CUDNN_ATTR_OPERATION_CONVOLUTION_FORWARD_BETA, CUDNN_TYPE_FLOAT, beta)
      .finalize("forward convolution operation");
  s.graph = Desc(CUDNN_BACKEND_OPERATIONGRAPH_DESCRIPTOR, "operation graph");
  s.graph.set(kGraphHandle, CUDNN_TYPE_HANDLE, handle).set_desc(CUDNN_ATTR_OPERATIONGRAPH_OPS, s.op);
  s.graph.finalize("operation graph");
}

CudnnConv::~CudnnConv() = default;

std::vector<CudnnConv::Candidate> CudnnConv::candidates(std::size_t max, std::size_t max_workspace) const {
  auto handle = static_cast<cudnnHandle_t>(ctx_.handle());
  std::vector<Candidate> out;
  for (cudnnBackendHeurMode_t mode : {CUDNN_HEUR_MODE_A, CUDNN_HEUR_MODE_FALLBACK}) {
    // Up to `max` from each list: the fallback list holds kernels the heuristics leave out
    // (for float32, some of the fastest); with max == 1, the fallback only when A has nothing.
    if (max == 1 && !out.empty()) break;
    const std::size_t limit = out.size() + max;
    Desc heur(CUDNN_BACKEND_ENGINEHEUR_DESCRIPTOR, "heuristics");
    heur.set_desc(CUDNN_ATTR_ENGINEHEUR_OPERATION_GRAPH, state_->graph)
        .set(CUDNN_ATTR_ENGINEHEUR_MODE, CUDNN_TYPE_HEUR_MODE, mode);
    if (heur.try_finalize() != CUDNN_STATUS_SUCCESS) continue;
    std::int64_t count = 0;
    if (api()->GetAttribute(heur.get(), CUDNN_ATTR_ENGINEHEUR_RESULTS, CUDNN_TYPE_BACKEND_DESCRIPTOR, 0, &count,
                            nullptr) != CUDNN_STATUS_SUCCESS ||
        count <= 0)
      continue;
    std::vector<Desc> cfgs;
    std::vector<cudnnBackendDescriptor_t> raw;
    for (std::int64_t i = 0; i < count; ++i) {
      cfgs.emplace_back(CUDNN_BACKEND_ENGINECFG_DESCRIPTOR, "engine configuration");
      raw.push_back(cfgs.back().get());
    }
    std::int64_t got = 0;
    if (api()->GetAttribute(heur.get(), CUDNN_ATTR_ENGINEHEUR_RESULTS, CUDNN_TYPE_BACKEND_DESCRIPTOR, count, &got,
                            raw.data()) != CUDNN_STATUS_SUCCESS)
      continue;
    for (std::int64_t i = 0; i < std::min(got, count) && out.size() < limit; ++i) {
      const Desc& cfg = cfgs[static_cast<std::size_t>(i)];
      const EngineInfo info = inspect(cfg, shape_.type);
      if (!info.allowed) continue;
      Desc plan(CUDNN_BACKEND_EXECUTION_PLAN_DESCRIPTOR, "execution plan");
      plan.set(kPlanHandle, CUDNN_TYPE_HANDLE, handle).set_desc(CUDNN_ATTR_EXECUTION_PLAN_ENGINE_CONFIG, cfg);
      if (plan.try_finalize() != CUDNN_STATUS_SUCCESS) continue;
      std::int64_t ws = 0, n = 0;
      if (api()->GetAttribute(plan.get(), CUDNN_ATTR_EXECUTION_PLAN_WORKSPACE_SIZE, CUDNN_TYPE_INT64, 1, &n, &ws) !=
              CUDNN_STATUS_SUCCESS ||
          ws < 0 || static_cast<std::size_t>(ws) > max_workspace)
        continue;
      std::string d = describe(cfg, info.global);
      if (std::none_of(out.begin(), out.end(), [&](const Candidate& c) { return c.config == d; }))
        out.push_back({std::move(d), static_cast<std::size_t>(ws)});
    }
  }
  return out;
}

void CudnnConv::select(const std::string& config) {
  std::int64_t global = 0;
  std::vector<std::pair<int, std::int64_t>> knobs;
  if (!parse_cudnn_config(config, global, knobs))
    throw CorruptEngineError("[cuda] malformed cuDNN configuration '" + config + "'");
  auto handle = static_cast<cudnnHandle_t>(ctx_.handle());
  State& s = *state_;
  s.ready = false;
  s.engine = Desc(CUDNN_BACKEND_ENGINE_DESCRIPTOR, "engine");
  s.engine.set_desc(CUDNN_ATTR_ENGINE_OPERATION_GRAPH, s.graph).set(CUDNN_ATTR_ENGINE_GLOBAL_INDEX, CUDNN_TYPE_INT64, global);
  s.engine.finalize("engine");
  s.knobs.clear();
  std::vector<cudnnBackendDescriptor_t> raw;
  for (auto [type, value] : knobs) {
    Desc k(CUDNN_BACKEND_KNOB_CHOICE_DESCRIPTOR, "knob choice");
    const auto kt = static_cast<cudnnBackendKnobType_t>(type);
    k.set(CUDNN_ATTR_KNOB_CHOICE_KNOB_TYPE, CUDNN_TYPE_KNOB_TYPE, kt).set(CUDNN_ATTR_KNOB_CHOICE_KNOB_VALUE, CUDNN_TYPE_INT64, value);
    k.finalize("knob choice");
    raw.push_back(k.get());
    s.knobs.push_back(std::move(k));
  }
  s.config = Desc(CUDNN_BACKEND_ENGINECFG_DESCRIPTOR, "engine configuration");
  s.config.set_desc(CUDNN_ATTR_ENGINECFG_ENGINE, s.engine);
  if (!raw.empty())
    s.config.set(CUDNN_ATTR_ENGINECFG_KNOB_CHOICES, CUDNN_TYPE_BACKEND_DESCRIPTOR, raw.data(), static_cast<std::int64_t>(raw.size()));
  s.config.finalize("engine configuration");
  if (!inspect(s.config, shape_.type).allowed)
    throw Error("[cuda] cuDNN engine " + std::to_string(global) + " does not keep tensoracle's numerics here");
  s.plan = Desc(CUDNN_BACKEND_EXECUTION_PLAN_DESCRIPTOR, "execution plan");
  s.plan.set(kPlanHandle, CUDNN_TYPE_HANDLE, handle).set_desc(CUDNN_ATTR_EXECUTION_PLAN_ENGINE_CONFIG, s.config);
  s.plan.finalize("execution plan");
  std::int64_t n = 0;
  ok(api()->GetAttribute(s.plan.get(), CUDNN_ATTR_EXECUTION_PLAN_WORKSPACE_SIZE, CUDNN_TYPE_INT64, 1, &n, &s.workspace),
     "reading the plan's workspace size");
  s.ready = true;
}

std::size_t CudnnConv::workspace_bytes() const { return state_->ready ? static_cast<std::size_t>(state_->workspace) : 0; }

void CudnnConv::run(const void* x, const void* w, void* y, void* workspace, cudaStream_t stream) const {
  const State& s = *state_;
  if (!s.ready) throw Error("[cuda] cuDNN convolution run before a configuration was selected");
  const std::int64_t ids[3] = {kX, kW, kY};
  void* ptrs[3] = {const_cast<void*>(x), const_cast<void*>(w), y};
  Desc pack(CUDNN_BACKEND_VARIANT_PACK_DESCRIPTOR, "variant pack");
  pack.set(CUDNN_ATTR_VARIANT_PACK_UNIQUE_IDS, CUDNN_TYPE_INT64, ids, 3)
      .set(CUDNN_ATTR_VARIANT_PACK_DATA_POINTERS, CUDNN_TYPE_VOID_PTR, ptrs, 3)
      .set(CUDNN_ATTR_VARIANT_PACK_WORKSPACE, CUDNN_TYPE_VOID_PTR, workspace)
      .finalize("variant pack");
  auto handle = static_cast<cudnnHandle_t>(ctx_.handle());
  std::lock_guard lock(ctx_.mutex());
  ok(api()->SetStream(handle, stream), "setting the stream");
  ok(api()->Execute(handle, s.plan.get(), pack.get()), "running the convolution");
}

#else  // no cuDNN headers at build time: never available

int cudnn_version() { return 0; }
CudnnContext::~CudnnContext() = default;
void* CudnnContext::handle() const { return nullptr; }
struct CudnnConv::State {};
CudnnConv::CudnnConv(const CudnnContext& ctx, CudnnConvShape shape) : ctx_(ctx), shape_(std::move(shape)) {
  throw Error("[cuda] this build of the CUDA backend has no cuDNN support");
}
CudnnConv::~CudnnConv() = default;
std::vector<CudnnConv::Candidate> CudnnConv::candidates(std::size_t, std::size_t) const { return {}; }
void CudnnConv::select(const std::string&) { throw Error("[cuda] no cuDNN support in this build"); }
std::size_t CudnnConv::workspace_bytes() const { return 0; }
void CudnnConv::run(const void*, const void*, void*, void*, cudaStream_t) const {
  throw Error("[cuda] no cuDNN support in this build");
}

#endif

}  // namespace tensoracle::cuda
