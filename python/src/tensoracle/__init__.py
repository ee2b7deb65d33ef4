"""tensoracle: build, save, reuse and execute inference engines from safetensors weights.

This package is a thin layer over the C++ core (``tensoracle._native``):

- :func:`build_serialized_engine` turns a graph function (TensorRT's network API, see
  :mod:`tensoracle.trt`) and an :class:`EngineBuild` into engine bytes;
  :func:`deserialize_engine` / :func:`load_engine` open them; ``engine.create_execution()``
  runs them (``Execution.run({name: array})`` on NumPy arrays).
- :func:`open_engine` builds an engine once per machine and identity, saves it in the cache
  folder and reopens it in milliseconds from any process; :class:`EngineIO` and
  :class:`TensorSpec` declare the inputs and outputs it must have; :mod:`tensoracle.cache`
  lists, verifies, prunes and clears the folder.
- :mod:`tensoracle.safetensors` — hardened, zero-copy safetensors reading and atomic writing.
- :func:`compare_outputs` measures a candidate output against a reference output (max absolute
  error, relative L2 error, cosine similarity, non-finite and outside-tolerance counts): the
  quality gate for lower precisions; it returns an :class:`OutputComparison`.
- Plugins: ``plugins=`` of :func:`build_serialized_engine`, :func:`open_engine` and
  :func:`load_engine` load plugin libraries (:func:`load_plugin_libraries`);
  ``network.add_plugin(name, version, inputs, fields)`` adds their layers
  (:class:`PluginField`, :class:`PluginFieldCollection`).
- :class:`OnnxParser` imports an ONNX model into a :class:`Network` (also ``tensoracle.trt.OnnxParser``,
  TensorRT's name).
- :func:`convert_pth` converts a ``torch.save`` checkpoint to safetensors without torch and
  without running its pickle code; :func:`inspect_pth` lists what is inside.
- The error classes below, shared by every part of tensoracle.
"""

import os as _os

# The CPU backend's threads (OpenMP, shared with OpenBLAS) spin only briefly while they wait,
# then sleep, unless the user chose otherwise: spinning workers steal the cores that other work
# needs (on a busy 2-core machine the MiniLM encoder ran 2.8x slower with libgomp's default of
# ~300,000 spins), while waking sleeping workers for every parallel region slowed an idle
# machine's MLP by ~13% and MiniLM by ~6%. 2,000 spins cover the gaps between one pass's
# kernels. A user's OMP_WAIT_POLICY alone is left as it is (GOMP_SPINCOUNT would override it).
# libgomp reads both once, when it is loaded, which importing _native does.
if "OMP_WAIT_POLICY" not in _os.environ:
    _os.environ["OMP_WAIT_POLICY"] = "PASSIVE"
    _os.environ.setdefault("GOMP_SPINCOUNT", "2000")

from tensoracle._native import (  # noqa: E402
    BuilderSettings,
    Engine,
    EngineBuild,
    EngineHandle,
    EngineIdentity,
    EngineIO,
    Execution,
    InputShape,
    INetworkDefinition as Network,
    IOTensorInfo,
    LayerInfo,
    OnnxParser,
    onnx_model_files,
    OutputComparison,
    PluginCreatorInfo,
    PluginFieldType,
    PluginLibraryInfo,
    TensorSpec,
    build_serialized_engine,
    compare_outputs,
    convert_pth,
    cpu_threads,
    info,
    default_cache_dir,
    engine_identity,
    inspect_pth,
    load_plugin_libraries,
    open_engine,
    registered_plugin_creators,
    save_engine,
    set_cpu_threads,
    BuildCancelled,
    BuildError,
    CorruptEngineError,
    EngineIOError,
    Error,
    FormatError,
    IncompatibleEngineError,
    InvalidArgument,
    PluginLibraryError,
    UnsafeCheckpointError,
    UnsupportedError,
)
from tensoracle import cache, safetensors  # noqa: E402
from tensoracle.plugins import PluginField, PluginFieldCollection  # noqa: E402

deserialize_engine = Engine.deserialize
load_engine = Engine.load

__version__ = "0.1.0"


def cmake_prefix_path() -> str:
    """The folder to give CMake (``-DCMAKE_PREFIX_PATH=...``) so that a plugin project's
    ``find_package(tensoracle)`` finds the plugin headers and ``tensoracle_add_cubin_plugin``."""
    return _os.path.join(_os.path.dirname(_os.path.abspath(__file__)), "cpp")


__all__ = [
    "BuilderSettings",
    "Engine",
    "EngineBuild",
    "EngineHandle",
    "EngineIdentity",
    "EngineIO",
    "Execution",
    "InputShape",
    "IOTensorInfo",
    "LayerInfo",
    "Network",
    "OutputComparison",
    "PluginCreatorInfo",
    "PluginField",
    "PluginFieldCollection",
    "PluginFieldType",
    "PluginLibraryInfo",
    "TensorSpec",
    "build_serialized_engine",
    "compare_outputs",
    "convert_pth",
    "cpu_threads",
    "info",
    "default_cache_dir",
    "deserialize_engine",
    "engine_identity",
    "inspect_pth",
    "load_plugin_libraries",
    "open_engine",
    "registered_plugin_creators",
    "set_cpu_threads",
    "load_engine",
    "save_engine",
    "BuildCancelled",
    "BuildError",
    "CorruptEngineError",
    "EngineIOError",
    "Error",
    "FormatError",
    "IncompatibleEngineError",
    "InvalidArgument",
    "PluginLibraryError",
    "UnsafeCheckpointError",
    "UnsupportedError",
    "cache",
    "cmake_prefix_path",
    "safetensors",
]
