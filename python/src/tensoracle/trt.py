"""TensorRT's Python names over tensoracle, so graph functions written for TensorRT run after
changing only ``import tensorrt as trt`` to ``import tensoracle.trt as trt``.

    import tensoracle.trt as trt

    def graph(network):
        x = network.add_input("x", trt.float32, (16, 32))
        y = network.add_activation(x, trt.ActivationType.RELU).get_output(0)
        y.name = "y"
        network.mark_output(y)
"""

# The TensorRT Python API release this module follows (tools compare it to pick code paths);
# tensoracle's own version is tensoracle.__version__.
__version__ = "10.15.0"

import builtins as _builtins
import enum as _enum

from tensoracle._native import (
    ActivationType,
    AttentionNormalizationOp,
    CumulativeOperation,
    DataType,
    ElementWiseOperation,
    Engine as ICudaEngine,
    ErrorCode,
    FillOperation,
    GatherMode,
    IActivationLayer,
    IAttention,
    ICastLayer,
    IConcatenationLayer,
    IConditionLayer,
    IConstantLayer,
    IConvolutionLayer,
    ICumulativeLayer,
    IDeconvolutionLayer,
    IDequantizeLayer,
    IEinsumLayer,
    IElementWiseLayer,
    IFillLayer,
    IGatherLayer,
    IIdentityLayer,
    IIfConditional,
    IIfConditionalBoundaryLayer,
    IIfConditionalInputLayer,
    IIfConditionalOutputLayer,
    IIteratorLayer,
    ILoop,
    ILoopBoundaryLayer,
    ILoopOutputLayer,
    ILRNLayer,
    ILayer,
    IMatrixMultiplyLayer,
    INetworkDefinition,
    INormalizationLayer,
    IOneHotLayer,
    IParametricReLULayer,
    IPaddingLayer,
    IPluginLayer,
    IPoolingLayer,
    IQuantizeLayer,
    IRecurrenceLayer,
    IReduceLayer,
    IResizeLayer,
    IReverseSequenceLayer,
    IScaleLayer,
    IScatterLayer,
    ISelectLayer,
    IShapeLayer,
    IShuffleLayer,
    ISliceLayer,
    ISoftMaxLayer,
    ISqueezeLayer,
    ITensor,
    ITopKLayer,
    ITripLimitLayer,
    IUnaryLayer,
    IUnsqueezeLayer,
    InterpolationMode,
    LayerType,
    LoopOutput,
    MatrixOperation,
    OnnxParser,
    PaddingMode,
    ParserError,
    PluginFieldType,
    PoolingType,
    ReduceOperation,
    ResizeCoordinateTransformation,
    ResizeRoundMode,
    ResizeSelector,
    SampleMode,
    ScaleMode,
    ScatterMode,
    TensorIOMode,
    TopKOperation,
    TripLimit,
    UnaryOperation,
)

from tensoracle._native import (  # noqa: E402
    BuildCancelled as _BuildCancelled,
    BuilderSettings as _BuilderSettings,
    EngineBuild as _EngineBuild,
    InputShape as _InputShape,
    UnsupportedError as _UnsupportedError,
    build_serialized_network as _build_serialized_network,
)
from tensoracle.plugins import PluginField, PluginFieldCollection  # noqa: E402

float32 = DataType.FLOAT
float16 = DataType.HALF
bfloat16 = DataType.BF16
fp8 = DataType.FP8
int8 = DataType.INT8
int32 = DataType.INT32
int64 = DataType.INT64
uint8 = DataType.UINT8
bool = DataType.BOOL  # noqa: A001  (TensorRT's name)


def Dims(shape=()):  # noqa: N802  (TensorRT's name)
    """TensorRT's Dims: here simply a tuple of ints."""
    return tuple(int(d) for d in shape)


def Dims2(d0, d1):  # noqa: N802
    return (int(d0), int(d1))


def DimsHW(h, w):  # noqa: N802
    return (int(h), int(w))


def Dims3(d0, d1, d2):  # noqa: N802
    return (int(d0), int(d1), int(d2))


def Dims4(d0, d1, d2, d3):  # noqa: N802
    return (int(d0), int(d1), int(d2), int(d3))


def volume(shape) -> int:
    """The product of the dims (TensorRT's trt.volume); 1 for a scalar's empty shape."""
    v = 1
    for d in shape:
        v *= int(d)
    return v


def nptype(dtype):
    """The NumPy type of a DataType (TensorRT's trt.nptype); bfloat16 and fp8 from ml_dtypes."""
    import ml_dtypes
    import numpy as np

    table = {DataType.FLOAT: np.float32, DataType.HALF: np.float16, DataType.INT8: np.int8, DataType.INT32: np.int32,
             DataType.INT64: np.int64, DataType.BOOL: np.bool_, DataType.UINT8: np.uint8,
             DataType.BF16: ml_dtypes.bfloat16, DataType.FP8: ml_dtypes.float8_e4m3fn}
    return table[dtype]


def Weights(a=None):  # noqa: N802
    """TensorRT's Weights: here the NumPy array itself (add_constant and the layers take arrays);
    Weights() is an empty float32 array (TensorRT's "no weights")."""
    import numpy as np

    return np.zeros(0, np.float32) if a is None else np.ascontiguousarray(a)


def Permutation(order):  # noqa: N802
    """TensorRT's Permutation: here simply a tuple of ints."""
    return tuple(int(i) for i in order)


class _Context:
    """``with obj as x:`` as TensorRT's objects allow: gives the object, keeps it afterwards."""

    def __enter__(self):
        return self

    def __exit__(self, *exc):
        return False


class IOutputAllocator:
    """TensorRT's output allocator: subclass it and give an instance to
    ``context.set_output_allocator(name, allocator)``. Before each ``execute_async_v3`` the
    context asks it for the output's memory (``reallocate_output_async(name, memory, size,
    alignment, stream)``, else ``reallocate_output(name, memory, size, alignment)``: an address
    of at least ``size`` bytes) and after the run tells it the shape (``notify_shape``). Output
    shapes here never depend on the data, so the size asked is the output's at the current input
    shapes."""

    def __init__(self):
        pass

    def reallocate_output(self, tensor_name, memory, size, alignment):
        return 0

    def notify_shape(self, tensor_name, shape):
        pass


class ILogger:
    """TensorRT's logger interface: subclasses override ``log(severity, msg)``. tensoracle reports
    errors through exceptions, so nothing calls ``log`` here; a subclass is accepted wherever a
    logger is."""

    def __init__(self):
        pass

    def log(self, severity, msg):
        pass


class Logger(ILogger):
    """Accepted where TensorRT wants a logger; tensoracle reports through exceptions."""

    class Severity(_enum.IntEnum):
        INTERNAL_ERROR = 0
        ERROR = 1
        WARNING = 2
        INFO = 3
        VERBOSE = 4

    INTERNAL_ERROR, ERROR, WARNING, INFO, VERBOSE = Severity

    def __init__(self, min_severity=WARNING):
        self.min_severity = min_severity


class DeviceType(_enum.IntEnum):
    """TensorRT's values; every layer runs on the engine's device (GPU or CPU): no DLA."""

    GPU = 0
    DLA = 1


class TensorFormat(_enum.IntEnum):
    """TensorRT's values. Every I/O tensor here is LINEAR (row-major); the others are named so
    that programs comparing with them run."""

    LINEAR = 0
    CHW2 = 1
    HWC8 = 2
    CHW4 = 3
    CHW16 = 4
    CHW32 = 5
    DHWC8 = 6
    CDHW32 = 7
    HWC = 8
    DLA_LINEAR = 9
    DLA_HWC4 = 10
    HWC16 = 11
    DHWC = 12


class NetworkDefinitionCreationFlag(_enum.IntEnum):
    """TensorRT's values. EXPLICIT_BATCH (deprecated in TensorRT 10) changes nothing. A
    STRONGLY_TYPED network computes every layer in the type its layers give it, and the builder
    refuses BuilderFlag.FP16 / BF16 for it (TensorRT's rule); a network without the flag is
    weakly typed: with FP16 or BF16 set, the builder computes float32 layers in that type where
    it may (BuilderSettings.weak_precision)."""

    EXPLICIT_BATCH = 0
    STRONGLY_TYPED = 1
    PREFER_JIT_PYTHON_PLUGINS = 2
    PREFER_AOT_PYTHON_PLUGINS = 3


class BuilderFlag(_enum.IntEnum):
    """TensorRT's values. See IBuilderConfig.set_flag for what each does here."""

    FP16 = 0
    INT8 = 1
    DEBUG = 2
    GPU_FALLBACK = 3
    REFIT = 4
    DISABLE_TIMING_CACHE = 5
    TF32 = 6
    SPARSE_WEIGHTS = 7
    SAFETY_SCOPE = 8
    OBEY_PRECISION_CONSTRAINTS = 9
    PREFER_PRECISION_CONSTRAINTS = 10
    DIRECT_IO = 11
    REJECT_EMPTY_ALGORITHMS = 12
    VERSION_COMPATIBLE = 13
    EXCLUDE_LEAN_RUNTIME = 14
    FP8 = 15
    ERROR_ON_TIMING_CACHE_MISS = 16
    BF16 = 17
    DISABLE_COMPILATION_CACHE = 18
    STRIP_PLAN = 19
    REFIT_IDENTICAL = 20
    WEIGHT_STREAMING = 21
    INT4 = 22
    REFIT_INDIVIDUAL = 23
    STRICT_NANS = 24
    MONITOR_MEMORY = 25
    FP4 = 26


class MemoryPoolType(_enum.IntEnum):
    WORKSPACE = 0
    DLA_MANAGED_SRAM = 1
    DLA_LOCAL_DRAM = 2
    DLA_GLOBAL_DRAM = 3
    TACTIC_DRAM = 4
    TACTIC_SHARED_MEMORY = 5


# Flags honoured: FP16 / BF16 lower float32 layers of a weakly typed network (weak typing; both:
# float16); INT8/FP8/FP4/INT4 permit lower precisions, which here come from the network's Q/DQ
# layers (TensorRT may also keep a layer in its declared type); DEBUG, GPU_FALLBACK,
# DISABLE_TIMING_CACHE, DISABLE_COMPILATION_CACHE, DIRECT_IO, REJECT_EMPTY_ALGORITHMS,
# ERROR_ON_TIMING_CACHE_MISS, MONITOR_MEMORY concern machinery tensoracle does not have; STRICT_NANS
# is what tensoracle always does (no 0*x => 0 rewrites); PREFER/OBEY_PRECISION_CONSTRAINTS hold
# since layers run in their declared types; VERSION_COMPATIBLE is what every tensoracle engine is
# (any tensoracle release reading the same engine format runs it: the reader checks the format and
# the device, never the release), and EXCLUDE_LEAN_RUNTIME holds since no engine carries a runtime.
_HONOURED_FLAGS = {BuilderFlag.FP16, BuilderFlag.BF16, BuilderFlag.INT8, BuilderFlag.FP8, BuilderFlag.FP4,
                   BuilderFlag.INT4, BuilderFlag.DEBUG, BuilderFlag.GPU_FALLBACK, BuilderFlag.DISABLE_TIMING_CACHE,
                   BuilderFlag.DISABLE_COMPILATION_CACHE, BuilderFlag.DIRECT_IO, BuilderFlag.REJECT_EMPTY_ALGORITHMS,
                   BuilderFlag.ERROR_ON_TIMING_CACHE_MISS, BuilderFlag.MONITOR_MEMORY, BuilderFlag.STRICT_NANS,
                   BuilderFlag.PREFER_PRECISION_CONSTRAINTS, BuilderFlag.OBEY_PRECISION_CONSTRAINTS,
                   BuilderFlag.VERSION_COMPATIBLE, BuilderFlag.EXCLUDE_LEAN_RUNTIME}


class IOptimizationProfile(_Context):
    """Input shapes of one profile: set_shape(name, min, opt, max) per input."""

    def __init__(self):
        self._shapes = {}

    def set_shape(self, input, min, opt, max):  # noqa: A002  (TensorRT's parameter names)
        self._shapes[input] = (Dims(min), Dims(opt), Dims(max))

    def get_shape(self, input):  # noqa: A002
        return [list(d) for d in self._shapes[input]] if input in self._shapes else []

    def set_shape_input(self, input, min, opt, max):  # noqa: A002
        raise _UnsupportedError(f"[trt] set_shape_input('{input}'): shape-tensor inputs with profiles of values are not "
                                "supported; give the values as a constant or an execution-time input tensor")

    def __bool__(self):
        return True


class IProgressMonitor:
    """TensorRT's build progress callbacks: subclass it, override the three methods and set an
    instance as ``config.progress_monitor``. The builder reports nested phases ("Building engine",
    then "Optimizing the graph", "Choosing tactics", "Sizing scratch memory", "Writing the
    engine") and their steps; ``step_complete`` returning False cancels the build, after which
    ``build_serialized_network`` returns None, as TensorRT's does."""

    def __init__(self):
        pass

    def phase_start(self, phase_name, parent_phase, num_steps):
        pass

    def step_complete(self, phase_name, step):
        return True

    def phase_finish(self, phase_name):
        pass


class IBuilderConfig(_Context):
    """Builder settings: the workspace pool, optimization level, flags and the profile. One addition
    of tensoracle's: ``device`` ("auto", "cpu" or "cuda:N"; TensorRT always builds for the GPU)."""

    def __init__(self):
        self._level = 3
        self.device = "auto"
        self._flags = 0
        self._workspace = 0
        self._profiles = []
        self.int8_calibrator = None
        self._monitor = None

    @property
    def builder_optimization_level(self):
        """0..5 (TensorRT's default 3): 0 takes each node's first tactic, 2 and above time them."""
        return self._level

    @builder_optimization_level.setter
    def builder_optimization_level(self, level):
        if not 0 <= int(level) <= 5:
            raise ValueError(f"[trt] builder_optimization_level {level} is outside 0..5")
        self._level = int(level)

    @property
    def DLA_core(self):  # noqa: N802  (TensorRT's name)
        """-1: no DLA core (tensoracle has no DLA backend)."""
        return -1

    @DLA_core.setter
    def DLA_core(self, core):  # noqa: N802
        if int(core) != -1:
            raise _UnsupportedError(f"[trt] DLA_core = {core}: tensoracle has no DLA backend")

    @property
    def default_device_type(self):
        """DeviceType.GPU: layers run on the engine's device (no DLA)."""
        return DeviceType.GPU

    @default_device_type.setter
    def default_device_type(self, device_type):
        if DeviceType(device_type) != DeviceType.GPU:
            raise _UnsupportedError("[trt] default_device_type = DLA: tensoracle has no DLA backend")

    @property
    def progress_monitor(self):
        """An IProgressMonitor told of the build's phases and steps, or None."""
        return self._monitor

    @progress_monitor.setter
    def progress_monitor(self, monitor):
        if monitor is not None and not all(callable(getattr(monitor, m, None))
                                           for m in ("phase_start", "step_complete", "phase_finish")):
            raise TypeError("[trt] progress_monitor must be an IProgressMonitor (phase_start, step_complete, "
                            "phase_finish)")
        self._monitor = monitor

    def set_memory_pool_limit(self, pool, pool_size):
        if MemoryPoolType(pool) != MemoryPoolType.WORKSPACE:
            raise _UnsupportedError(f"[trt] set_memory_pool_limit({MemoryPoolType(pool).name}): only the WORKSPACE "
                                    "pool exists here (no DLA, no separate tactic pools)")
        self._workspace = int(pool_size)

    def get_memory_pool_limit(self, pool):
        return self._workspace if MemoryPoolType(pool) == MemoryPoolType.WORKSPACE else 0

    def set_flag(self, flag):
        flag = BuilderFlag(flag)
        if flag == BuilderFlag.TF32:
            raise _UnsupportedError("[trt] BuilderFlag.TF32: tensoracle never computes float32 in TF32 (the "
                                    "results would change); leave the flag cleared")
        if flag not in _HONOURED_FLAGS:
            raise _UnsupportedError(f"[trt] BuilderFlag.{flag.name} is not supported by tensoracle's builder")
        self._flags |= 1 << int(flag)

    def clear_flag(self, flag):
        self._flags &= ~(1 << int(BuilderFlag(flag)))

    def get_flag(self, flag):
        return _builtins.bool(self._flags >> int(BuilderFlag(flag)) & 1)

    @property
    def flags(self):
        return self._flags

    @flags.setter
    def flags(self, value):
        for flag in BuilderFlag:
            if value >> int(flag) & 1:
                self.set_flag(flag)
        self._flags = int(value)

    def add_optimization_profile(self, profile):
        if self._profiles:
            raise _UnsupportedError("[trt] add_optimization_profile: one profile per engine here; build one engine "
                                    "per profile")
        self._profiles.append(profile)
        return len(self._profiles) - 1

    @property
    def num_optimization_profiles(self):
        return len(self._profiles)


class IHostMemory(_Context, bytes):
    """The serialized engine (TensorRT's IHostMemory): the engine file's bytes."""

    @property
    def nbytes(self):
        return len(self)


class Builder(_Context):
    """TensorRT's IBuilder: network, config and profiles, then build_serialized_network. The
    network is defined once, layer by layer, before its shapes are declared, as TensorRT does."""

    def __init__(self, logger=None):
        self.logger = logger
        self.max_threads = 0
        self._strongly_typed = []  # the networks this builder made with STRONGLY_TYPED

    def create_network(self, flags=0):
        unknown = int(flags) & ~((1 << 4) - 1)
        if unknown:
            raise _UnsupportedError(f"[trt] create_network: unknown NetworkDefinitionCreationFlag bits {unknown:#x}")
        network = INetworkDefinition()
        if int(flags) >> int(NetworkDefinitionCreationFlag.STRONGLY_TYPED) & 1:
            self._strongly_typed.append(network)
        return network

    def create_builder_config(self):
        return IBuilderConfig()

    def create_optimization_profile(self):
        return IOptimizationProfile()

    @property
    def platform_has_fast_fp16(self):
        return True

    @property
    def platform_has_tf32(self):
        return False

    def is_network_supported(self, network, config):
        try:
            self.build_serialized_network(network, config)
        except Exception:  # noqa: BLE001  (TensorRT's contract: a yes or no)
            return False
        return True

    def build_serialized_network(self, network, config):
        """The engine's bytes; inputs with -1 dims take their shapes from the config's profile,
        fully static inputs their own dims."""
        if config.int8_calibrator is not None:
            raise _UnsupportedError("[trt] int8_calibrator: implicit INT8 quantization with a calibrator (deprecated in "
                                    "TensorRT 10) is not supported; quantize explicitly with add_quantize / "
                                    "add_dequantize and their scales")
        profile = config._profiles[0]._shapes if config._profiles else {}
        inputs = {}
        for i in range(network.num_inputs):
            tensor = network.get_input(i)
            name, dims = tensor.name, tuple(tensor.shape)
            if name in profile:
                inputs[name] = _InputShape.ranged(*profile[name])
            elif all(d >= 0 for d in dims):
                inputs[name] = _InputShape.fixed(dims)
            else:
                raise _UnsupportedError(f"[trt] input '{name}' {dims} has dynamic dims and no shape in the optimization "
                                        "profile (builder.create_optimization_profile(), profile.set_shape(...), "
                                        "config.add_optimization_profile(profile))")
        unknown = set(profile) - set(inputs)
        if unknown:
            raise _UnsupportedError(f"[trt] the optimization profile names {sorted(unknown)}, which are not inputs of "
                                    "the network")
        weak = [f for f in (BuilderFlag.FP16, BuilderFlag.BF16) if config.get_flag(f)]
        if weak and any(network is n for n in self._strongly_typed):
            raise _UnsupportedError(f"[trt] BuilderFlag.{weak[0].name} on a STRONGLY_TYPED network: its layers compute in "
                                    "the types the network gives them (TensorRT refuses the flag too); clear the flag or "
                                    "create the network without STRONGLY_TYPED")
        settings = _BuilderSettings(optimization_level=config.builder_optimization_level, device=config.device,
                                    workspace_limit=config._workspace, progress_monitor=config.progress_monitor,
                                    weak_precision=(float16 if BuilderFlag.FP16 in weak else bfloat16) if weak else float32)
        try:
            return IHostMemory(_build_serialized_network(network, _EngineBuild(inputs, settings)))
        except _BuildCancelled:
            return None  # TensorRT's answer to a build its progress monitor cancelled


class Runtime(_Context):
    """``trt.Runtime(logger).deserialize_cuda_engine(data)`` opens an engine from bytes."""

    def __init__(self, logger=None):
        self.logger = logger
        # TensorRT asks for this before it runs a version-compatible engine's embedded lean
        # runtime; tensoracle's engines carry no code, so either value opens them.
        self.engine_host_code_allowed = False

    def deserialize_cuda_engine(self, data):
        return ICudaEngine.deserialize(bytes(data))


def init_libnvinfer_plugins(logger, namespace):
    """TensorRT registers its own plugin library here. tensoracle has none of NVIDIA's plugins
    (its plugins are C ABI libraries: tensoracle.load_plugin_libraries), so this registers
    nothing and returns True; a network that asks for one of NVIDIA's plugins fails when the
    layer is added, naming the creator."""
    return True


def register_as_tensorrt():
    """Opt-in, for this process only: ``import tensorrt`` gives this module from now on, so that
    tools written against TensorRT's Python API run on tensoracle's engines. Setting the
    environment variable TENSORACLE_AS_TENSORRT=1 does the same when the interpreter starts (the
    package installs a small .pth hook that reads it); tensoracle never does it otherwise.
    Refused when the real ``tensorrt`` is already imported."""
    import sys

    this = sys.modules[__name__]
    present = sys.modules.get("tensorrt")
    if present is not None and present is not this:
        raise RuntimeError("[trt] register_as_tensorrt: the module 'tensorrt' is already imported in this process "
                           f"({getattr(present, '__file__', present)!r}); register before anything imports it")
    sys.modules["tensorrt"] = this
    return this


__all__ = [name for name in dir() if not name.startswith("_")]
