"""How the core finds and opens the CUDA backend library (runtime/devices.cpp), on any machine:
each case runs in a fresh process (the library is opened once per process) with
$TENSORACLE_CUDA_BACKEND pointing at something that is not a usable backend; asking for
cuda:0 must then raise BuildError saying why, never crash."""

from __future__ import annotations

import re
import shutil
import subprocess
import sys
import textwrap
from pathlib import Path

import pytest

# A one-layer network, then what each script does with it.
GRAPH = textwrap.dedent(
    """
    import sys
    import tensoracle
    import tensoracle.trt as trt

    def graph(net):
        x = net.add_input("x", trt.float32, (2,))
        y = net.add_identity(x).get_output(0)
        y.name = "y"
        net.mark_output(y)
    """
)

BUILD_CUDA = GRAPH + textwrap.dedent(
    """
    decl = tensoracle.EngineBuild({"x": tensoracle.InputShape.fixed((2,))}, tensoracle.BuilderSettings(device="cuda:0"))
    try:
        tensoracle.build_serialized_engine(graph, decl)
    except tensoracle.BuildError as e:
        print("BuildError:", e)
        sys.exit(0)
    print("built")
    """
)


def build_with(env_path: str) -> str:
    import os

    env = dict(os.environ, TENSORACLE_CUDA_BACKEND=env_path)
    done = subprocess.run([sys.executable, "-c", BUILD_CUDA], capture_output=True, text=True, env=env, timeout=120)
    assert done.returncode == 0, done.stdout + done.stderr
    return done.stdout


def test_a_missing_library_is_named(tmp_path):
    out = build_with(str(tmp_path / "nowhere" / "libtensoracle_cuda.so"))
    assert "BuildError: [build] device 'cuda:0': [cuda] the CUDA backend library" in out
    assert "nowhere/libtensoracle_cuda.so: not found" in out


def test_a_library_that_is_not_a_backend_is_refused(tmp_path):
    bogus = tmp_path / "libbogus.so"
    bogus.write_bytes(b"\x7fELF not really")
    out = build_with(str(bogus))
    assert "could not be loaded" in out and "libbogus.so" in out


@pytest.mark.skipif(shutil.which("cc") is None, reason="needs a C compiler to make stand-in libraries")
def test_a_shared_library_without_the_entry_point_or_failing_is_refused(tmp_path):
    plain = tmp_path / "libplain.so"
    src = tmp_path / "plain.c"
    src.write_text("int something(void) { return 1; }\n")
    subprocess.run(["cc", "-shared", "-fPIC", "-o", str(plain), str(src)], check=True)
    assert "does not export tensoracle_cuda_backend; it is not a tensoracle CUDA backend" in build_with(str(plain))

    # A library with the entry point that reports a failure: its words reach the user.
    failing = tmp_path / "libfailing.so"
    src = tmp_path / "failing.c"
    src.write_text(
        "#include <stdio.h>\n"
        "#include <string.h>\n"
        "const void* tensoracle_cuda_backend(int abi, const char* identity, int device, char* error,\n"
        "                                    unsigned long size) {\n"
        '  snprintf(error, size, "stand-in backend: abi %d, identity of %d characters, device %d", abi,\n'
        "           (int)strlen(identity), device);\n"
        "  return 0;\n"
        "}\n"
    )
    subprocess.run(["cc", "-shared", "-fPIC", "-o", str(failing), str(src)], check=True)
    header = (Path(__file__).resolve().parents[2] / "cpp" / "src" / "backends" / "backend.h").read_text()
    abi = re.search(r"kBackendAbiVersion = (\d+);", header).group(1)
    # The core passes its backend interface version (backends/backend.h) and its build identity.
    assert (
        f"BuildError: [build] device 'cuda:0': [cuda] stand-in backend: abi {abi}, identity of 64 characters, device 0"
        in build_with(str(failing))
    )


def installed_backend() -> Path | None:
    import tensoracle

    path = Path(tensoracle.__file__).resolve().parent / "libtensoracle_cuda.so"
    return path if path.exists() else None


@pytest.mark.skipif(installed_backend() is None, reason="this build of tensoracle has no CUDA backend")
def test_the_backend_refuses_a_core_built_from_other_sources():
    """The real library checks the core's build identity (backends/build_identity.h) before
    anything else: a stranger's identity, or none, is refused with both named."""
    import ctypes

    lib = ctypes.CDLL(str(installed_backend()), mode=ctypes.RTLD_LOCAL)
    entry = lib.tensoracle_cuda_backend
    entry.restype = ctypes.c_void_p
    entry.argtypes = [ctypes.c_int, ctypes.c_char_p, ctypes.c_int, ctypes.c_char_p, ctypes.c_size_t]
    header = (Path(__file__).resolve().parents[2] / "cpp" / "src" / "backends" / "backend.h").read_text()
    abi = int(re.search(r"kBackendAbiVersion = (\d+);", header).group(1))
    for identity in (b"0" * 64, None):
        error = ctypes.create_string_buffer(1024)
        assert entry(abi, identity, 0, error, len(error)) is None
        text = error.value.decode()
        assert "libtensoracle_cuda.so was built from other sources than this core" in text, text
        assert re.search(r"build identity [0-9a-f]{64}, the core's " + ("0" * 64 if identity else "none"), text), text
    # An older core (another interface version) is refused before the identity is read.
    error = ctypes.create_string_buffer(1024)
    assert entry(abi - 1, None, 0, error, len(error)) is None
    assert f"speaks backend interface version {abi}, the core version {abi - 1}" in error.value.decode()


@pytest.mark.skipif(installed_backend() is None, reason="this build of tensoracle has no CUDA backend")
def test_the_backend_built_with_this_core_passes_the_identity_check():
    """The library installed beside this core accepts it: the build goes on to the device (built
    where there is one; a machine without a CUDA driver or device says so, not 'other sources')."""
    out = build_with(str(installed_backend()))
    assert "other sources" not in out and "interface version" not in out, out
    assert out.strip() == "built" or any(
        reason in out for reason in ("no NVIDIA driver on this machine", "older than this build's CUDA",
                                     "finds no GPU", "no usable CUDA driver or device")), out


AUTO_BUILD = GRAPH + textwrap.dedent(
    """
    for device in ("auto", "auto", "cpu"):
        decl = tensoracle.EngineBuild({"x": tensoracle.InputShape.fixed((2,))}, tensoracle.BuilderSettings(device=device))
        print(tensoracle.deserialize_engine(tensoracle.build_serialized_engine(graph, decl)).device)
    """
)


def test_auto_says_once_when_a_driver_is_there_but_the_backend_is_not(tmp_path):
    """device='auto' on a machine with an NVIDIA driver whose CUDA backend cannot be used builds
    for the CPU, and says so on stderr, once per process (a stub libcuda.so.1 plays the driver)."""
    import os

    cc = shutil.which("gcc") or shutil.which("cc")
    assert cc, "no C compiler (Debian's gcc, scripts/apt-packages.txt) to build the stub driver"
    stub = tmp_path / "stub.c"
    stub.write_text("int tensoracle_test_stub_driver(void) { return 0; }\n")
    subprocess.run([cc, "-shared", "-fPIC", "-o", str(tmp_path / "libcuda.so.1"), str(stub)], check=True)
    env = dict(os.environ, LD_LIBRARY_PATH=f"{tmp_path}:{os.environ.get('LD_LIBRARY_PATH', '')}",
               TENSORACLE_CUDA_BACKEND=str(tmp_path / "nowhere" / "libtensoracle_cuda.so"))
    done = subprocess.run([sys.executable, "-c", AUTO_BUILD], capture_output=True, text=True, env=env, timeout=120)
    assert done.returncode == 0, done.stdout + done.stderr
    assert done.stdout.split() == ["cpu", "cpu", "cpu"]
    notices = [line for line in done.stderr.splitlines() if "device='auto' builds for the CPU" in line]
    assert len(notices) == 1, done.stderr
    assert "NVIDIA driver but the CUDA backend is unavailable" in notices[0]
    assert "Why: [cuda]" in notices[0] and "nowhere/libtensoracle_cuda.so: not found" in done.stderr
    # Without a driver, 'auto' choosing the CPU is what is expected: no notice.
    env.pop("LD_LIBRARY_PATH")
    done = subprocess.run([sys.executable, "-c", AUTO_BUILD], capture_output=True, text=True, env=env, timeout=120)
    assert done.returncode == 0 and "device='auto'" not in done.stderr, done.stderr
