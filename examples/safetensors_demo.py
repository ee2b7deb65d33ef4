"""The main job of `make demo` (for now): safetensors in and out of tensoracle.

1. Save a small model's weights (fp32, bf16, fp8) with tensoracle, atomically.
2. Read them back lazily and zero-copy, and check them against the arrays saved.
3. Read the same file with the official `safetensors` package, where it can.
4. Show the file with the `tensoracle inspect` command-line program.
5. Show what a damaged file produces: a FormatError naming the file and the rule.
"""

import pathlib
import shutil
import subprocess
import sys
import tempfile

import ml_dtypes
import numpy as np

import tensoracle
from tensoracle.safetensors import load_file, safe_open, save_file


def main() -> int:
    folder = pathlib.Path(tempfile.mkdtemp(prefix="tensoracle-demo-"))
    try:
        path = folder / "linear.safetensors"
        rng = np.random.default_rng(29)
        matrix = rng.uniform(-0.25, 0.25, (32, 16)).astype(np.float32)
        weights = {
            "matrix": matrix,
            "bias": rng.uniform(-0.1, 0.1, (1, 16)).astype(np.float32),
            "matrix.bf16": matrix.astype(ml_dtypes.bfloat16),
            "matrix.fp8": (matrix / (np.abs(matrix).max() / 448)).astype(ml_dtypes.float8_e4m3fn),
            "fp8.weight_scale": np.array([np.abs(matrix).max() / 448], np.float32),
        }
        save_file(weights, path, metadata={"format": "np", "model": "linear 32x16"})
        print(f"saved {len(weights)} tensors to {path.name} ({path.stat().st_size} bytes)")

        with safe_open(path) as f:
            print(f"metadata: {f.metadata()}")
            for name in f.keys():
                info = f.tensor_info(name)
                print(f"  {name:18} {info['dtype']:8} {str(info['shape']):10} offsets {info['data_offsets']}")
        loaded = load_file(path)
        for name, array in weights.items():
            assert loaded[name].dtype == array.dtype and np.array_equal(
                loaded[name].view(np.uint8), array.view(np.uint8)
            ), name
        print("tensoracle read back every tensor bit-exactly (bf16 and fp8 as ml_dtypes arrays)")

        try:
            import safetensors.numpy as official
        except ImportError:
            print("the official safetensors package is not installed: skipping the peer check")
        else:
            fp32 = {k: v for k, v in weights.items() if v.dtype == np.float32}
            peer = folder / "peer.safetensors"
            official.save_file(fp32, str(peer))
            same = peer.read_bytes() == tensoracle.safetensors.save(fp32)
            print(f"official safetensors writes the same bytes as tensoracle: {same}")
            assert same

        cli = shutil.which("tensoracle") or str(pathlib.Path(sys.executable).parent / "tensoracle")
        print(f"\n$ tensoracle inspect {path.name}")
        subprocess.run([cli, "inspect", str(path)], check=True)

        damaged = folder / "damaged.safetensors"
        data = bytearray(path.read_bytes())
        data[-1:] = b""  # one byte short: the data section no longer covers the tensors
        damaged.write_bytes(bytes(data))
        try:
            load_file(damaged)
        except tensoracle.FormatError as error:
            print(f"\na truncated copy is refused:\n  {error}")
        return 0
    finally:
        shutil.rmtree(folder)


if __name__ == "__main__":
    sys.exit(main())
