"""TensorRT's Python names over tensoracle, so graph functions written for TensorRT run after
changing only ``import tensorrt as trt`` to ``import tensoracle.trt as trt``.

    import tensoracle.trt as trt

    def graph(network):
        x = network.add_input("x", trt.float32, (16, 32))
        y = network.add_activation(x, trt.ActivationType.RELU).get_output(0)
        y.name = "y"
        network.mark_output(y)
"""

from tensoracle._native import (
    ActivationType,
    AttentionNormalizationOp,
    DataType,
    ElementWiseOperation,
    Engine as ICudaEngine,
    GatherMode,
    IActivationLayer,
    IAttention,
    ICastLayer,
    IConcatenationLayer,
    IConstantLayer,
    IConvolutionLayer,
    IDeconvolutionLayer,
    IDequantizeLayer,
    IEinsumLayer,
    IElementWiseLayer,
    IGatherLayer,
    IIdentityLayer,
    ILayer,
    IMatrixMultiplyLayer,
    INetworkDefinition,
    INormalizationLayer,
    IPaddingLayer,
    IPluginLayer,
    IPoolingLayer,
    IQuantizeLayer,
    IReduceLayer,
    IResizeLayer,
    ISelectLayer,
    IShapeLayer,
    IShuffleLayer,
    ISliceLayer,
    ISoftMaxLayer,
    ITensor,
    ITopKLayer,
    IUnaryLayer,
    InterpolationMode,
    LayerType,
    MatrixOperation,
    PaddingMode,
    PluginFieldType,
    PoolingType,
    ReduceOperation,
    ResizeCoordinateTransformation,
    ResizeRoundMode,
    ResizeSelector,
    SampleMode,
    TopKOperation,
    UnaryOperation,
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


def Permutation(order):  # noqa: N802
    """TensorRT's Permutation: here simply a tuple of ints."""
    return tuple(int(i) for i in order)


class Logger:
    """Accepted where TensorRT wants a logger; tensoracle reports through exceptions."""

    INTERNAL_ERROR, ERROR, WARNING, INFO, VERBOSE = range(5)

    def __init__(self, min_severity=WARNING):
        self.min_severity = min_severity


class Runtime:
    """``trt.Runtime(logger).deserialize_cuda_engine(data)`` opens an engine from bytes."""

    def __init__(self, logger=None):
        self.logger = logger

    def deserialize_cuda_engine(self, data):
        return ICudaEngine.deserialize(bytes(data))


__all__ = [name for name in dir() if not name.startswith("_")]
