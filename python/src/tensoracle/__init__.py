"""tensoracle: build, save, reuse and execute inference engines from safetensors weights.

This package is a thin layer over the C++ core (``tensoracle._native``). Available now:

- :mod:`tensoracle.safetensors` — hardened, zero-copy safetensors reading and atomic writing.
- The error classes below, shared by every part of tensoracle.
"""

from tensoracle._native import (
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
from tensoracle import safetensors

__version__ = "0.1.0"

__all__ = [
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
    "safetensors",
]
