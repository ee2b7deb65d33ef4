"""ResNet-18 from PyTorch to a tensoracle CPU engine, the way TensorRT users build it by hand.

The script

1. defines ResNet-18 in plain ``torch.nn`` (BasicBlock x [2, 2, 2, 2], 64-128-256-512 channels,
   1000 classes), initialises it at random from a seed — BatchNorm's running statistics and
   affine parameters too, so that folding them is not a no-op — and saves its ``state_dict``
   with safetensors,
2. builds the network with TensorRT's Python API from that file (``graph``): every BatchNorm is
   folded into the preceding convolution's kernel and bias in NumPy (float32); convolutions with
   bias, ReLU, max pool 3x3/2, residual adds, global average pool (reduce AVG over H and W), and
   the fully connected layer as a matrix multiply with the transposed weight plus a bias,
3. builds an engine with a dynamic batch (1..8), runs it, compares the logits with the PyTorch
   model in fp32 (eval mode), and prints the engine's nodes (what the fusion pass folded into
   each convolution) and its activation memory.

    python examples/resnet18.py [--dir DIR] [--batch 2] [--size 224] [--seed 0]

The graph function's only change from a TensorRT script is its import: ``import tensoracle.trt
as trt`` instead of ``import tensorrt as trt``.
"""

from __future__ import annotations

import argparse
import pathlib
import sys
import tempfile
import time

import numpy as np
import torch
from safetensors.numpy import load_file
from safetensors.torch import save_file
from torch import nn

import tensoracle
import tensoracle.trt as trt
from tensoracle import BuilderSettings, EngineBuild, InputShape

BLOCKS = (2, 2, 2, 2)
WIDTHS = (64, 128, 256, 512)
CLASSES = 1000
BN_EPS = 1e-5
MAX_BATCH = 8
# The requirement: max abs error against PyTorch fp32.
MAX_ABS_ERROR = 1e-4


# --- the PyTorch model ---------------------------------------------------------------------
class BasicBlock(nn.Module):
    def __init__(self, inplanes: int, planes: int, stride: int):
        super().__init__()
        self.conv1 = nn.Conv2d(inplanes, planes, 3, stride=stride, padding=1, bias=False)
        self.bn1 = nn.BatchNorm2d(planes, eps=BN_EPS)
        self.conv2 = nn.Conv2d(planes, planes, 3, stride=1, padding=1, bias=False)
        self.bn2 = nn.BatchNorm2d(planes, eps=BN_EPS)
        self.relu = nn.ReLU()
        self.downsample = None
        if stride != 1 or inplanes != planes:
            self.downsample = nn.Sequential(
                nn.Conv2d(inplanes, planes, 1, stride=stride, bias=False), nn.BatchNorm2d(planes, eps=BN_EPS)
            )

    def forward(self, x: torch.Tensor) -> torch.Tensor:
        identity = x if self.downsample is None else self.downsample(x)
        out = self.relu(self.bn1(self.conv1(x)))
        out = self.bn2(self.conv2(out))
        return self.relu(out + identity)


class ResNet18(nn.Module):
    def __init__(self, classes: int = CLASSES):
        super().__init__()
        self.conv1 = nn.Conv2d(3, 64, 7, stride=2, padding=3, bias=False)
        self.bn1 = nn.BatchNorm2d(64, eps=BN_EPS)
        self.relu = nn.ReLU()
        self.maxpool = nn.MaxPool2d(3, stride=2, padding=1)
        inplanes = 64
        for i, (blocks, planes) in enumerate(zip(BLOCKS, WIDTHS)):
            layer = []
            for b in range(blocks):
                layer.append(BasicBlock(inplanes, planes, stride=2 if (b == 0 and i > 0) else 1))
                inplanes = planes
            setattr(self, f"layer{i + 1}", nn.Sequential(*layer))
        self.avgpool = nn.AdaptiveAvgPool2d(1)
        self.fc = nn.Linear(512, classes)

    def forward(self, x: torch.Tensor) -> torch.Tensor:
        x = self.maxpool(self.relu(self.bn1(self.conv1(x))))
        x = self.layer4(self.layer3(self.layer2(self.layer1(x))))
        return self.fc(torch.flatten(self.avgpool(x), 1))


def make_model(seed: int) -> ResNet18:
    """ResNet-18 in eval mode with deterministic random parameters and BatchNorm statistics.

    Convolutions: He-normal (fan_out), as torchvision initialises ResNets. BatchNorm: gamma in
    [0.5, 1.5], beta ~ N(0, 0.1), running mean ~ N(0, 0.1), running var in [0.5, 2] — far from
    the identity, so folding them into the convolutions changes every kernel. Linear: PyTorch's
    default bounds (uniform in +-1/sqrt(512)). Activations grow through the residual adds to a
    few units; the logits have a standard deviation of about 1 and extremes of a few units.
    """
    generator = torch.Generator().manual_seed(seed)
    model = ResNet18()
    with torch.no_grad():
        for module in model.modules():
            if isinstance(module, nn.Conv2d):
                fan_out = module.out_channels * module.kernel_size[0] * module.kernel_size[1]
                module.weight.normal_(0.0, (2.0 / fan_out) ** 0.5, generator=generator)
            elif isinstance(module, nn.BatchNorm2d):
                c = module.num_features
                gamma = torch.rand(c, generator=generator) + 0.5
                module.weight.copy_(gamma)
                module.bias.copy_(torch.randn(c, generator=generator) * 0.1)
                module.running_mean.copy_(torch.randn(c, generator=generator) * 0.1)
                module.running_var.copy_(torch.rand(c, generator=generator) * 1.5 + 0.5)
            elif isinstance(module, nn.Linear):
                bound = 1.0 / module.in_features**0.5
                module.weight.uniform_(-bound, bound, generator=generator)
                module.bias.uniform_(-bound, bound, generator=generator)
    return model.eval()


def save_weights(path, seed: int = 0) -> ResNet18:
    """Writes the seeded model's state_dict to `path` (safetensors); returns the model."""
    model = make_model(seed)
    state = {k: v.contiguous() for k, v in model.state_dict().items() if not k.endswith("num_batches_tracked")}
    save_file(state, str(path))
    return model


def images(batch: int, size: int = 224, seed: int = 1) -> np.ndarray:
    return np.random.default_rng(seed).standard_normal((batch, 3, size, size), dtype=np.float32)


# --- the graph function (TensorRT's Python API) ----------------------------------------------
def graph(path, size=224, batch=-1, dtype=trt.float32):
    """The graph function: ResNet-18 from the safetensors file at `path`.

    Input "images": float32 (batch, 3, size, size), batch -1 (dynamic) by default; output
    "logits" (batch, 1000). With dtype=trt.float16 the input, the weights (folded in float32,
    then rounded) and every activation are float16.
    """

    numpy_type = {trt.float32: np.float32, trt.float16: np.float16}[dtype]

    def define(network):
        weights = load_file(str(path))

        def folded(prefix_conv, prefix_bn):
            """The convolution's kernel and bias with its BatchNorm folded in (float32)."""
            kernel = weights[prefix_conv + ".weight"].astype(np.float32)
            gamma = weights[prefix_bn + ".weight"].astype(np.float32)
            beta = weights[prefix_bn + ".bias"].astype(np.float32)
            mean = weights[prefix_bn + ".running_mean"].astype(np.float32)
            var = weights[prefix_bn + ".running_var"].astype(np.float32)
            scale = gamma / np.sqrt(var + np.float32(BN_EPS))
            kernel = np.ascontiguousarray(kernel * scale[:, None, None, None], dtype=np.float32)
            bias = np.ascontiguousarray(beta - mean * scale, dtype=np.float32)
            return kernel.astype(numpy_type), bias.astype(numpy_type)

        def conv_bn(x, prefix_conv, prefix_bn, stride, padding, name):
            kernel, bias = folded(prefix_conv, prefix_bn)
            maps, _, kh, kw = kernel.shape
            layer = network.add_convolution_nd(x, maps, (kh, kw), kernel, bias)
            layer.stride_nd = (stride, stride)
            layer.padding_nd = (padding, padding)
            layer.name = name
            return layer.get_output(0)

        def relu(x, name):
            layer = network.add_activation(x, trt.ActivationType.RELU)
            layer.name = name
            return layer.get_output(0)

        x = network.add_input("images", dtype, (batch, 3, size, size))
        x = relu(conv_bn(x, "conv1", "bn1", 2, 3, "conv1"), "relu")
        pool = network.add_pooling_nd(x, trt.PoolingType.MAX, (3, 3))
        pool.stride_nd = (2, 2)
        pool.padding_nd = (1, 1)
        pool.name = "maxpool"
        x = pool.get_output(0)

        inplanes = 64
        for i, (blocks, planes) in enumerate(zip(BLOCKS, WIDTHS)):
            for b in range(blocks):
                p = f"layer{i + 1}.{b}"
                stride = 2 if (b == 0 and i > 0) else 1
                # The shortcut first: the residual add can then run as the epilogue of conv2,
                # whose other operand already exists when conv2 runs.
                identity = x
                if stride != 1 or inplanes != planes:
                    identity = conv_bn(x, f"{p}.downsample.0", f"{p}.downsample.1", stride, 0, f"{p}.downsample")
                out = relu(conv_bn(x, f"{p}.conv1", f"{p}.bn1", stride, 1, f"{p}.conv1"), f"{p}.relu1")
                out = conv_bn(out, f"{p}.conv2", f"{p}.bn2", 1, 1, f"{p}.conv2")
                add = network.add_elementwise(out, identity, trt.ElementWiseOperation.SUM)
                add.name = f"{p}.add"
                x = relu(add.get_output(0), f"{p}.relu2")
                inplanes = planes

        # Global average pool: mean over H and W (axes 2 and 3), (N, 512, h, w) -> (N, 512).
        avg = network.add_reduce(x, trt.ReduceOperation.AVG, (1 << 2) | (1 << 3), False)
        avg.name = "avgpool"
        # Fully connected: (N, 512) x fc.weight^T (512 x 1000) + bias (1 x 1000).
        fc_weight = np.ascontiguousarray(weights["fc.weight"], dtype=numpy_type)
        fc_bias = np.ascontiguousarray(weights["fc.bias"], dtype=numpy_type).reshape(1, -1)
        w = network.add_constant(fc_weight.shape, fc_weight).get_output(0)
        bias = network.add_constant(fc_bias.shape, fc_bias).get_output(0)
        fc = network.add_matrix_multiply(avg.get_output(0), trt.MatrixOperation.NONE, w, trt.MatrixOperation.TRANSPOSE)
        fc.name = "fc"
        logits = network.add_elementwise(fc.get_output(0), bias, trt.ElementWiseOperation.SUM)
        logits.name = "fc.bias"
        out = logits.get_output(0)
        out.name = "logits"
        network.mark_output(out)

    return define
# -------------------------------------------------------------------------------------------


def build_engine(path, size: int = 224, max_batch: int = MAX_BATCH):
    """Engine bytes for batch 1..max_batch (opt: max_batch) at size x size."""
    declaration = EngineBuild(
        {"images": InputShape.ranged((1, 3, size, size), (max_batch, 3, size, size), (max_batch, 3, size, size))},
        BuilderSettings(device="cpu"),
    )
    return tensoracle.build_serialized_engine(graph(path, size), declaration)


def torch_logits(model: nn.Module, x: np.ndarray) -> np.ndarray:
    with torch.inference_mode():
        return model(torch.from_numpy(x)).numpy()


def errors(candidate: np.ndarray, reference: np.ndarray) -> tuple[float, float]:
    """Max abs error and relative L2 error, in float64."""
    difference = candidate.astype(np.float64) - reference.astype(np.float64)
    return float(np.max(np.abs(difference))), float(np.linalg.norm(difference) / np.linalg.norm(reference))


def float64_logits(model: nn.Module, x: np.ndarray) -> np.ndarray:
    """The same model evaluated in float64 (a copy): the arbiter of the fp32 peers' rounding."""
    import copy

    with torch.inference_mode():
        return copy.deepcopy(model).double()(torch.from_numpy(x).double()).numpy()


def describe(engine) -> None:
    layers = engine.layers()
    print(f"engine nodes ({len(layers)}):")
    for layer in layers:
        fused = f"  + fused [{', '.join(layer.fused)}]" if layer.fused else ""
        print(f"  {layer.name:22s} {layer.type:16s} {layer.tactic:22s}{fused}")
    act, naive = engine.activation_bytes, engine.naive_activation_bytes
    print(f"activation memory: {act / 2**20:.2f} MiB (planned arena) vs {naive / 2**20:.2f} MiB naive "
          f"(every value its own buffer): {act / max(1, naive):.0%}; weights {engine.weight_bytes / 2**20:.2f} MiB")


def main(argv: list[str]) -> int:
    parser = argparse.ArgumentParser(description=__doc__.splitlines()[0])
    parser.add_argument("--dir", type=pathlib.Path, default=None, help="folder for the weights and the engine")
    parser.add_argument("--batch", type=int, default=2, help=f"batch to run, 1..{MAX_BATCH} (default 2)")
    parser.add_argument("--size", type=int, default=224, help="image height and width (default 224)")
    parser.add_argument("--seed", type=int, default=0, help="weights' seed (default 0)")
    args = parser.parse_args(argv)
    if not 1 <= args.batch <= MAX_BATCH:
        parser.error(f"--batch must be in 1..{MAX_BATCH}")
    folder = args.dir or pathlib.Path(tempfile.mkdtemp(prefix="tensoracle-resnet18-"))
    folder.mkdir(parents=True, exist_ok=True)
    weights = folder / "resnet18.safetensors"
    model = save_weights(weights, args.seed)
    print(f"weights: {weights} ({weights.stat().st_size / 2**20:.1f} MiB, seed {args.seed})")

    t0 = time.perf_counter()
    data = build_engine(weights, args.size)
    tensoracle.save_engine(data, folder / "resnet18.engine")  # atomic: a reader never sees half a file
    engine = tensoracle.deserialize_engine(data)
    print(f"engine: {folder / 'resnet18.engine'} ({len(data) / 2**20:.1f} MiB), built in {time.perf_counter() - t0:.2f} s "
          f"for images (1..{MAX_BATCH}, 3, {args.size}, {args.size})")
    describe(engine)

    x = images(args.batch, args.size)
    t0 = time.perf_counter()
    got = engine.create_execution().run({"images": x})["logits"]
    t_run = time.perf_counter() - t0
    expected = torch_logits(model, x)
    exact = float64_logits(model, x)
    max_abs, rel = errors(got, expected)
    print()
    print(f"batch {args.batch}: logits {got.shape}, first run {t_run * 1e3:.1f} ms; |logits| max "
          f"{np.max(np.abs(expected)):.3f}, std {np.std(expected):.3f}")
    print(f"  tensoracle vs PyTorch fp32: max abs error {max_abs:.3e}, relative L2 error {rel:.3e}")
    print(f"  against float64:            tensoracle {errors(got, exact)[0]:.3e}, PyTorch fp32 "
          f"{errors(expected, exact)[0]:.3e} (max abs)")
    same_top1 = np.array_equal(np.argmax(got, 1), np.argmax(expected, 1))
    ok = max_abs <= MAX_ABS_ERROR and np.all(np.isfinite(got)) and same_top1
    print(f"  requirement max abs error <= {MAX_ABS_ERROR:g}: {'met' if ok else 'NOT MET'}"
          f" (top-1 classes {'identical' if same_top1 else 'DIFFER'})")
    return 0 if ok else 1


if __name__ == "__main__":
    sys.exit(main(sys.argv[1:]))
