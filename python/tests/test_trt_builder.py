"""TensorRT's builder object model over tensoracle: trt.Builder -> create_network -> layers ->
create_builder_config / optimization profile -> build_serialized_network -> trt.Runtime ->
deserialize_cuda_engine -> create_execution_context -> execute_async_v3, as TensorRT programs
write it (the network API MNIST sample's sequence of calls), checked against PyTorch; TensorRT's
enum values and int conversion; the module helpers (Dims*, volume, nptype, Weights); and that
nothing tensoracle does not honour is accepted silently."""

from __future__ import annotations

import numpy as np
import pytest
import torch

import tensoracle
import tensoracle.trt as trt

RNG = np.random.default_rng(11)
CONV1_W = (0.2 * RNG.standard_normal((20, 1, 5, 5))).astype(np.float32)
CONV1_B = (0.1 * RNG.standard_normal(20)).astype(np.float32)
CONV2_W = (0.05 * RNG.standard_normal((50, 20, 5, 5))).astype(np.float32)
CONV2_B = (0.1 * RNG.standard_normal(50)).astype(np.float32)
FC1_W = (0.02 * RNG.standard_normal((500, 800))).astype(np.float32)
FC1_B = (0.1 * RNG.standard_normal(500)).astype(np.float32)
FC2_W = (0.05 * RNG.standard_normal((10, 500))).astype(np.float32)
FC2_B = (0.1 * RNG.standard_normal(10)).astype(np.float32)


def populate_network(network, batch=-1):
    """LeNet as the MNIST network-API sample builds it: conv, max pool, conv, max pool, two fully
    connected layers as matrix multiplies with the weights transposed, ReLU between them."""
    x = network.add_input(name="data", dtype=trt.float32, shape=(batch, 1, 28, 28))
    conv1 = network.add_convolution_nd(input=x, num_output_maps=20, kernel_shape=(5, 5),
                                       kernel=trt.Weights(CONV1_W), bias=trt.Weights(CONV1_B))
    conv1.stride_nd = (1, 1)
    pool1 = network.add_pooling_nd(input=conv1.get_output(0), type=trt.PoolingType.MAX, window_size=(2, 2))
    pool1.stride_nd = trt.Dims2(2, 2)
    conv2 = network.add_convolution_nd(pool1.get_output(0), 50, (5, 5), trt.Weights(CONV2_W), trt.Weights(CONV2_B))
    conv2.stride_nd = (1, 1)
    pool2 = network.add_pooling_nd(conv2.get_output(0), trt.PoolingType.MAX, (2, 2))
    pool2.stride_nd = (2, 2)

    def fully_connected(x, w, b, k, n):
        flat = network.add_shuffle(x)
        flat.reshape_dims = (-1, k)
        weight = network.add_constant((n, k), trt.Weights(w)).get_output(0)
        bias = network.add_constant((1, n), trt.Weights(b.reshape(1, n))).get_output(0)
        mm = network.add_matrix_multiply(flat.get_output(0), trt.MatrixOperation.NONE, weight, trt.MatrixOperation.TRANSPOSE)
        return network.add_elementwise(mm.get_output(0), bias, trt.ElementWiseOperation.SUM).get_output(0)

    fc1 = fully_connected(pool2.get_output(0), FC1_W, FC1_B, 800, 500)
    relu1 = network.add_activation(input=fc1, type=trt.ActivationType.RELU)
    fc2 = fully_connected(relu1.get_output(0), FC2_W, FC2_B, 500, 10)
    fc2.name = "prob"
    network.mark_output(tensor=fc2)


def torch_lenet(x):
    t = torch.from_numpy
    y = torch.nn.functional.conv2d(t(x), t(CONV1_W), t(CONV1_B))
    y = torch.nn.functional.max_pool2d(y, 2, 2)
    y = torch.nn.functional.conv2d(y, t(CONV2_W), t(CONV2_B))
    y = torch.nn.functional.max_pool2d(y, 2, 2).reshape(-1, 800)
    y = torch.relu(y @ t(FC1_W).T + t(FC1_B))
    return (y @ t(FC2_W).T + t(FC2_B)).numpy()


def build_engine(batch=-1, device="cpu"):
    logger = trt.Logger(trt.Logger.WARNING)
    builder = trt.Builder(logger)
    network = builder.create_network(1 << int(trt.NetworkDefinitionCreationFlag.STRONGLY_TYPED))
    config = builder.create_builder_config()
    config.set_memory_pool_limit(trt.MemoryPoolType.WORKSPACE, 1 << 30)
    config.device = device  # tensoracle's addition: TensorRT always builds for the GPU
    populate_network(network, batch)
    if batch == -1:
        profile = builder.create_optimization_profile()
        profile.set_shape("data", (1, 1, 28, 28), (4, 1, 28, 28), (16, 1, 28, 28))
        assert config.add_optimization_profile(profile) == 0
    plan = builder.build_serialized_network(network, config)
    assert plan.nbytes == len(plan) > 0
    return trt.Runtime(logger).deserialize_cuda_engine(plan)


@pytest.mark.parametrize("batch", [-1, 3], ids=["profile", "static"])
def test_the_mnist_sample_sequence_builds_and_runs(batch):
    engine = build_engine(batch)
    context = engine.create_execution_context()
    n = 5 if batch == -1 else batch
    x = RNG.uniform(0, 1, (n, 1, 28, 28)).astype(np.float32)
    out = np.zeros((n, 10), np.float32)
    context.set_input_shape("data", x.shape)
    context.set_tensor_address("data", x.ctypes.data)
    context.set_tensor_address("prob", out.ctypes.data)
    assert context.execute_async_v3(0)
    np.testing.assert_allclose(out, torch_lenet(x), rtol=1e-4, atol=1e-4)
    names = [engine.get_tensor_name(i) for i in range(engine.num_io_tensors)]
    assert names == ["data", "prob"]


def test_the_network_is_built_as_it_stands_and_may_be_built_again():
    builder = trt.Builder(trt.Logger())
    network = builder.create_network(0)
    x = network.add_input("x", trt.float32, (2, 3))
    y = network.add_unary(x, trt.UnaryOperation.EXP).get_output(0)
    y.name = "y"
    network.mark_output(y)
    config = builder.create_builder_config()
    config.device = "cpu"
    first = builder.build_serialized_network(network, config)
    second = builder.build_serialized_network(network, config)
    assert bytes(first) == bytes(second)
    got = tensoracle.deserialize_engine(bytes(first)).create_execution().run({"x": np.ones((2, 3), np.float32)})["y"]
    np.testing.assert_allclose(got, np.full((2, 3), np.e, np.float32), rtol=1e-6)


def test_config_flags_and_limits():
    config = trt.Builder().create_builder_config()
    assert config.builder_optimization_level == 3 and not config.get_flag(trt.BuilderFlag.TF32)
    config.set_flag(trt.BuilderFlag.FP16)
    assert config.get_flag(trt.BuilderFlag.FP16) and config.flags == 1 << int(trt.BuilderFlag.FP16)
    config.clear_flag(trt.BuilderFlag.FP16)
    assert config.flags == 0
    config.set_memory_pool_limit(trt.MemoryPoolType.WORKSPACE, 123)
    assert config.get_memory_pool_limit(trt.MemoryPoolType.WORKSPACE) == 123
    with pytest.raises(tensoracle.UnsupportedError, match="never computes float32 in TF32"):
        config.set_flag(trt.BuilderFlag.TF32)
    with pytest.raises(tensoracle.UnsupportedError, match="REFIT is not supported"):
        config.set_flag(trt.BuilderFlag.REFIT)
    with pytest.raises(tensoracle.UnsupportedError, match="only the WORKSPACE pool"):
        config.set_memory_pool_limit(trt.MemoryPoolType.TACTIC_SHARED_MEMORY, 1)
    builder = trt.Builder()
    config.add_optimization_profile(builder.create_optimization_profile())
    with pytest.raises(tensoracle.UnsupportedError, match="one profile per engine"):
        config.add_optimization_profile(builder.create_optimization_profile())


def test_what_the_builder_cannot_honour_is_refused():
    builder = trt.Builder()
    network = builder.create_network()
    x = network.add_input("x", trt.float32, (-1, 3))
    network.mark_output(network.add_identity(x).get_output(0))
    config = builder.create_builder_config()
    config.device = "cpu"
    with pytest.raises(tensoracle.UnsupportedError, match=r"input 'x' \(-1, 3\) has dynamic dims and no shape"):
        builder.build_serialized_network(network, config)
    profile = builder.create_optimization_profile()
    profile.set_shape("x", (1, 3), (2, 3), (4, 3))
    profile.set_shape("nope", (1,), (1,), (1,))
    config.add_optimization_profile(profile)
    with pytest.raises(tensoracle.UnsupportedError, match=r"names \['nope'\], which are not inputs"):
        builder.build_serialized_network(network, config)
    config = builder.create_builder_config()
    config.int8_calibrator = object()
    with pytest.raises(tensoracle.UnsupportedError, match="quantize explicitly"):
        builder.build_serialized_network(network, config)
    with pytest.raises(tensoracle.UnsupportedError, match="set_shape_input"):
        builder.create_optimization_profile().set_shape_input("x", (1,), (1,), (1,))


def test_enums_convert_to_tensorrts_values():
    assert int(trt.PoolingType.MAX) == 0 and int(trt.PoolingType.AVERAGE) == 1
    assert int(trt.ActivationType.RELU) == 0 and int(trt.ActivationType.SIGMOID) == 1
    assert int(trt.DataType.FLOAT) == 0 and int(trt.DataType.HALF) == 1 and int(trt.DataType.BF16) == 7
    assert int(trt.ElementWiseOperation.SUM) == 0 and int(trt.MatrixOperation.TRANSPOSE) == 1
    assert 1 << int(trt.NetworkDefinitionCreationFlag.STRONGLY_TYPED) == 2
    assert "MAX" in trt.PoolingType.__members__ and int(trt.BuilderFlag.BF16) == 17


def test_module_helpers():
    assert trt.Dims2(2, 3) == (2, 3) and trt.Dims3(1, 2, 3) == (1, 2, 3) and trt.Dims4(1, 2, 3, 4) == (1, 2, 3, 4)
    assert trt.DimsHW(5, 6) == (5, 6) and trt.volume((2, 3, 4)) == 24 and trt.volume(()) == 1
    assert trt.nptype(trt.float16) is np.float16 and trt.nptype(trt.int32) is np.int32
    assert trt.Weights().size == 0 and trt.Weights(np.ones(3)).shape == (3,)


def test_engine_and_context_getters_as_tensorrt_names_them():
    engine = build_engine(-1)
    assert engine.get_tensor_mode("data") == trt.TensorIOMode.INPUT and int(trt.TensorIOMode.OUTPUT) == 2
    assert engine.get_tensor_mode("prob") == trt.TensorIOMode.OUTPUT
    assert engine.get_tensor_mode("nothing") == trt.TensorIOMode.NONE
    assert engine.get_tensor_dtype("prob") == trt.float32
    assert tuple(engine.get_tensor_shape("data")) == (-1, 1, 28, 28)
    assert [tuple(d) for d in engine.get_tensor_profile_shape("data", 0)] == [(1, 1, 28, 28), (4, 1, 28, 28),
                                                                               (16, 1, 28, 28)]
    assert engine.num_optimization_profiles == 1
    with pytest.raises(tensoracle.InvalidArgument, match="one profile"):
        engine.get_tensor_profile_shape("data", 1)
    context = engine.create_execution_context()
    assert context.engine.get_tensor_name(0) == "data"
    x = RNG.uniform(0, 1, (2, 1, 28, 28)).astype(np.float32)
    out = np.zeros((2, 10), np.float32)
    context.set_input_shape("data", x.shape)
    assert context.execute_v2([x.ctypes.data, out.ctypes.data])
    np.testing.assert_allclose(out, torch_lenet(x), rtol=1e-4, atol=1e-4)
    with pytest.raises(tensoracle.InvalidArgument, match="1 bindings for the engine's 2 I/O tensors"):
        context.execute_v2([x.ctypes.data])
    assert trt.Logger.Severity.WARNING == trt.Logger.WARNING == 2


def test_getters_return_tensorrts_defaults():
    network = trt.Builder().create_network()
    x = network.add_input("x", trt.float32, (1, 3, 4, 5))
    softmax = network.add_softmax(x)
    assert softmax.axes == 1 << 1  # rank - 3
    softmax.axes = 1 << 3
    assert softmax.axes == 1 << 3
    assert network.add_softmax(network.add_input("y", trt.float32, (3, 4))).axes == 1  # below rank 3: axis 0
    assert network.add_concatenation([x, x]).axis == 1
    pool = network.add_pooling_nd(x, trt.PoolingType.MAX, (2, 2))
    assert tuple(pool.stride_nd) == (1, 1) and tuple(pool.padding_nd) == (0, 0) and tuple(pool.post_padding) == (0, 0)
    conv = network.add_convolution_nd(x, 2, (3, 3), np.ones((2, 3, 3, 3), np.float32), None)
    assert tuple(conv.stride_nd) == (1, 1) and tuple(conv.dilation_nd) == (1, 1) and tuple(conv.pre_padding) == (0, 0)
    conv.stride_nd = (2, 2)
    assert tuple(conv.stride_nd) == (2, 2)


def test_serialize_gives_back_the_engine_file(tmp_path):
    engine = build_engine(3)
    data = engine.serialize()
    path = tmp_path / "lenet.engine"
    with open(path, "wb") as f:  # as TensorRT programs save their engines
        f.write(data)
    again = trt.Runtime(trt.Logger()).deserialize_cuda_engine(path.read_bytes())
    assert again.serialize() == data
    x = RNG.uniform(0, 1, (3, 1, 28, 28)).astype(np.float32)
    np.testing.assert_allclose(again.create_execution().run({"data": x})["prob"], torch_lenet(x), rtol=1e-4, atol=1e-4)
    assert tensoracle.load_engine(path).serialize() == data


def test_the_network_is_a_sequence_of_its_layers():
    # Inputs are no layers, as in TensorRT.
    network = trt.Builder().create_network()
    x = network.add_input("x", trt.float32, (2, 3))
    relu = network.add_activation(x, trt.ActivationType.RELU)
    exp = network.add_unary(relu.get_output(0), trt.UnaryOperation.EXP)
    assert len(network) == network.num_layers == 2 and network.num_inputs == 1
    assert [layer.name for layer in network] == [relu.name, exp.name]
    assert network[-1].name == exp.name and network.get_layer(0).name == relu.name
    assert network.get_layer(network.num_layers - 1).get_output(0).name == exp.get_output(0).name
    with pytest.raises(IndexError):
        network[2]
    with pytest.raises(tensoracle.InvalidArgument, match="the network has 2 layers"):
        network.get_layer(2)


def test_precision_constraints_are_refused_not_ignored():
    network = trt.Builder().create_network()
    x = network.add_input("x", trt.float32, (2, 3))
    relu = network.add_activation(x, trt.ActivationType.RELU)
    assert relu.precision == trt.float32 and not relu.precision_is_set
    assert relu.get_output_type(0) == trt.float32 and not relu.output_type_is_set(0)
    with pytest.raises(tensoracle.UnsupportedError, match="strongly typed.*add_cast"):
        relu.precision = trt.float16
    with pytest.raises(tensoracle.UnsupportedError, match=r"set_output_type\(0, ...\) is not supported"):
        relu.set_output_type(0, trt.float16)
    relu.reset_precision()


def test_set_input_takes_a_tensor_made_after_the_layer():
    # TensorRT's any-order set_input: the slice's size comes from a shape computed later, and the
    # layers reading the slice move after it too; the engine computes what NumPy does.
    network = trt.Builder().create_network()
    x = network.add_input("x", trt.float32, (4, 6))
    cut = network.add_slice(x, (0, 0), (1, 1), (1, 1))
    neg = network.add_unary(cut.get_output(0), trt.UnaryOperation.NEG)
    neg.get_output(0).name = "y"
    network.mark_output(neg.get_output(0))
    size = network.add_constant((2,), np.array([2, 3], np.int32))
    cut.set_input(2, size.get_output(0))
    names = [layer.name for layer in network]
    assert names.index(size.name) < names.index(cut.name) < names.index(neg.name)
    assert tuple(neg.get_output(0).shape) == (2, 3)
    data = np.arange(24, dtype=np.float32).reshape(4, 6)
    config = trt.Builder().create_builder_config()
    config.device = "cpu"
    engine = trt.Runtime().deserialize_cuda_engine(trt.Builder().build_serialized_network(network, config))
    np.testing.assert_array_equal(engine.create_execution().run({"x": data})["y"], -data[:2, :3])


def test_set_input_that_would_close_a_cycle_is_refused():
    network = trt.Builder().create_network()
    x = network.add_input("x", trt.float32, (2, 3))
    a = network.add_unary(x, trt.UnaryOperation.EXP)
    b = network.add_unary(a.get_output(0), trt.UnaryOperation.NEG)
    with pytest.raises(tensoracle.InvalidArgument, match="computed from the layer's own output; set_input would make a cycle"):
        a.set_input(0, b.get_output(0))
    assert [layer.name for layer in network] == [a.name, b.name]  # nothing moved


class RecordingMonitor(trt.IProgressMonitor):
    """TensorRT's progress monitor sample, reduced: records every call; cancels at a chosen
    step of a chosen phase."""

    def __init__(self, cancel_at=None):
        trt.IProgressMonitor.__init__(self)
        self.calls = []
        self.cancel_at = cancel_at

    def phase_start(self, phase_name, parent_phase, num_steps):
        self.calls.append(("start", phase_name, parent_phase, num_steps))

    def step_complete(self, phase_name, step):
        self.calls.append(("step", phase_name, step))
        return (phase_name, step) != self.cancel_at

    def phase_finish(self, phase_name):
        self.calls.append(("finish", phase_name))


def mnist_config(monitor, level=3):
    builder = trt.Builder(trt.Logger())
    network = builder.create_network(0)
    populate_network(network, 2)
    config = builder.create_builder_config()
    config.device = "cpu"
    config.builder_optimization_level = level
    config.progress_monitor = monitor
    return builder, network, config


def test_progress_monitor_sees_every_phase_and_step():
    monitor = RecordingMonitor()
    builder, network, config = mnist_config(monitor)
    assert config.progress_monitor is monitor
    assert builder.build_serialized_network(network, config) is not None
    starts = [c for c in monitor.calls if c[0] == "start"]
    assert [c[1] for c in starts] == ["Building engine", "Optimizing the graph", "Choosing tactics", "Sizing scratch memory",
                                      "Writing the engine"]
    assert starts[0][2] is None and all(c[2] == "Building engine" for c in starts[1:])
    # Each phase reports exactly its announced steps, 0..n-1 in order, before it finishes; phases
    # nest: the top one finishes last.
    for _, phase, _, n in starts:
        steps = [c[2] for c in monitor.calls if c[0] == "step" and c[1] == phase]
        assert steps == list(range(n)), phase
    finishes = [c[1] for c in monitor.calls if c[0] == "finish"]
    assert finishes == [c[1] for c in starts[1:]] + ["Building engine"]
    assert monitor.calls[-1] == ("finish", "Building engine")
    tactics = next(c for c in starts if c[1] == "Choosing tactics")
    assert tactics[3] >= 5  # the network's nodes (two convolutions, two poolings, the products, ...)


def test_progress_monitor_cancels_the_build():
    monitor = RecordingMonitor(cancel_at=("Choosing tactics", 1))
    builder, network, config = mnist_config(monitor)
    assert builder.build_serialized_network(network, config) is None  # TensorRT's answer to a cancelled build
    assert monitor.calls[-1] == ("step", "Choosing tactics", 1)
    # tensoracle's own API raises instead, naming where it stopped
    decl = tensoracle.EngineBuild({"x": tensoracle.InputShape.fixed((2, 3))},
                                  tensoracle.BuilderSettings(device="cpu", progress_monitor=RecordingMonitor(("Writing the engine", 0))))
    with pytest.raises(tensoracle.BuildCancelled, match="phase 'Writing the engine' at step 0"):
        tensoracle.build_serialized_engine(lambda n: n.mark_output(n.add_identity(n.add_input("x", trt.float32, (2, 3))).get_output(0)),
                                           decl)
    assert issubclass(tensoracle.BuildCancelled, tensoracle.BuildError)


def test_progress_monitor_errors_reach_the_caller():
    class Broken(RecordingMonitor):
        def step_complete(self, phase_name, step):
            raise KeyError("monitor bug")

    builder, network, config = mnist_config(Broken())
    with pytest.raises(KeyError, match="monitor bug"):
        builder.build_serialized_network(network, config)
    with pytest.raises(TypeError, match="IProgressMonitor"):
        config.progress_monitor = object()
    with pytest.raises(tensoracle.InvalidArgument, match="no method 'phase_finish'"):
        tensoracle.BuilderSettings(progress_monitor=type("Half", (), {"phase_start": 0, "step_complete": 0})())


def test_optimization_level_is_checked_and_used():
    config = trt.Builder().create_builder_config()
    with pytest.raises(ValueError, match="outside 0..5"):
        config.builder_optimization_level = 6
    builder, network, config = mnist_config(None, level=0)
    engine = tensoracle.deserialize_engine(bytes(builder.build_serialized_network(network, config)))
    assert "\"optimization_level\":0" in engine.plan_json().replace(" ", "")


def lenet_plan(flags=(), network_flags=0):
    builder = trt.Builder(trt.Logger())
    network = builder.create_network(network_flags)
    populate_network(network, 4)
    config = builder.create_builder_config()
    config.device = "cpu"
    for f in flags:
        config.set_flag(f)
    return builder, network, config


@pytest.mark.parametrize("flag,tolerance", [(trt.BuilderFlag.FP16, 1e-2), (trt.BuilderFlag.BF16, 6e-2)])
def test_fp16_and_bf16_flags_lower_a_weakly_typed_network(flag, tolerance):
    """TensorRT's weak typing: the float32 LeNet computes in the lower precision (convolutions,
    products, pooling), keeps float32 input and output, and stays within that precision of
    PyTorch's float32 result."""
    x = RNG.uniform(0, 1, (4, 1, 28, 28)).astype(np.float32)
    outs = {}
    for flags in ((), (flag,)):
        builder, network, config = lenet_plan(flags)
        engine = tensoracle.deserialize_engine(bytes(builder.build_serialized_network(network, config)))
        assert engine.get_tensor_dtype("data") == trt.float32 and engine.get_tensor_dtype("prob") == trt.float32
        outs[flags] = (engine.create_execution().run({"data": x})["prob"], engine.plan_json().replace(" ", ""))
    ref = torch_lenet(x)
    low, plan = outs[(flag,)]
    np.testing.assert_allclose(outs[()][0], ref, rtol=1e-4, atol=1e-4)
    np.testing.assert_allclose(low, ref, rtol=tolerance, atol=tolerance * np.abs(ref).max())
    assert not np.array_equal(low, outs[()][0])
    name = "float16" if flag == trt.BuilderFlag.FP16 else "bfloat16"
    assert f'"weak_precision":"{name}"' in plan and "computesin" + name in plan


def test_precision_flags_on_a_strongly_typed_network_are_refused():
    builder, network, config = lenet_plan((trt.BuilderFlag.FP16,), 1 << int(trt.NetworkDefinitionCreationFlag.STRONGLY_TYPED))
    with pytest.raises(tensoracle.UnsupportedError, match="FP16 on a STRONGLY_TYPED network"):
        builder.build_serialized_network(network, config)
    config.clear_flag(trt.BuilderFlag.FP16)
    assert builder.build_serialized_network(network, config) is not None


@pytest.mark.gpu
def test_fp16_flag_on_cuda():
    """Weak typing on the CUDA backend: the float32 LeNet in float16 (cuDNN / cuBLASLt float16
    kernels), float32 at the engine's edges, within float16's precision of PyTorch."""
    builder, network, config = lenet_plan((trt.BuilderFlag.FP16,))
    config.device = "cuda:0"
    engine = tensoracle.deserialize_engine(bytes(builder.build_serialized_network(network, config)))
    x = RNG.uniform(0, 1, (4, 1, 28, 28)).astype(np.float32)
    got = engine.create_execution().run({"data": x})["prob"]
    ref = torch_lenet(x)
    assert got.dtype == np.float32
    np.testing.assert_allclose(got, ref, rtol=1e-2, atol=1e-2 * np.abs(ref).max())
    assert "computesinfloat16" in engine.plan_json().replace(" ", "")


def test_objects_open_in_with_statements_as_nvidias_samples_write_them():
    class QuietLogger(trt.ILogger):
        def __init__(self):
            trt.ILogger.__init__(self)

        def log(self, severity, msg):
            raise AssertionError("tensoracle reports through exceptions, not the logger")

    logger = QuietLogger()
    with trt.Builder(logger) as builder, builder.create_network(0) as network, \
            builder.create_builder_config() as config:
        config.device = "cpu"
        x = network.add_input("x", trt.float32, (2, 3))
        shape = network.add_shape(x).get_output(0)
        y = network.add_activation(x, trt.ActivationType.RELU).get_output(0)
        y.name = "y"
        network.mark_output(y)
        assert shape.is_shape_tensor and not x.is_shape_tensor and not y.is_shape_tensor and y.is_execution_tensor
        assert config.DLA_core == -1 and config.default_device_type == trt.DeviceType.GPU
        with pytest.raises(tensoracle.UnsupportedError, match="no DLA backend"):
            config.DLA_core = 0
        with builder.build_serialized_network(network, config) as plan, trt.Runtime(logger) as runtime, \
                runtime.deserialize_cuda_engine(plan) as engine, engine.create_execution_context() as context:
            assert engine.get_tensor_format("x") == trt.TensorFormat.LINEAR == 0
            assert engine.device_memory_size == engine.activation_bytes + engine.scratch_bytes
            assert engine.num_layers == 1 and not engine.refittable and context.active_optimization_profile == 0
            x_host = np.array([[-1, 2, -3], [4, -5, 6]], np.float32)
            assert np.array_equal(context.run({"x": x_host})["y"], np.maximum(x_host, 0))


def test_output_allocator_gives_each_output_its_memory():
    """TensorRT's IOutputAllocator as Polygraphy's TrtRunner uses it: asked for the output's
    bytes before execute_async_v3, told its shape after (here in host memory: a CPU engine)."""

    class HostAllocator(trt.IOutputAllocator):
        def __init__(self):
            trt.IOutputAllocator.__init__(self)
            self.buffers, self.shapes, self.calls = {}, {}, []

        def reallocate_output_async(self, tensor_name, memory, size, alignment, stream):
            self.calls.append((tensor_name, size, alignment))
            self.buffers[tensor_name] = np.zeros(size, np.uint8)
            return self.buffers[tensor_name].ctypes.data

        def notify_shape(self, tensor_name, shape):
            self.shapes[tensor_name] = tuple(shape)

    engine = build_engine(-1)
    context = engine.create_execution_context()
    allocator = HostAllocator()
    assert context.set_output_allocator("prob", allocator) and context.get_output_allocator("prob") is allocator
    x = RNG.uniform(0, 1, (3, 1, 28, 28)).astype(np.float32)
    context.set_input_shape("data", x.shape)
    context.set_tensor_address("data", x.ctypes.data)
    assert context.execute_async_v3(0)
    assert allocator.calls == [("prob", 3 * 10 * 4, 256)] and allocator.shapes == {"prob": (3, 10)}
    out = allocator.buffers["prob"].view(np.float32).reshape(3, 10)
    np.testing.assert_allclose(out, torch_lenet(x), rtol=1e-4, atol=1e-4)
    with pytest.raises(tensoracle.InvalidArgument, match="not an output"):
        context.set_output_allocator("data", allocator)
    with pytest.raises(tensoracle.InvalidArgument, match="no 'reallocate_output'"):
        context.set_output_allocator("prob", object())
