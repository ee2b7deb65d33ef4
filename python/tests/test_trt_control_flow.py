"""Loops (TensorRT's ILoop: trip limits, recurrences, iterators, loop outputs) written as
TensorRT programs write them, through tensoracle.trt, on every backend: TensorRT's semantics
(a recurrence's last value is the one after the last iteration; a stacked output beyond the
trip count is filled with zeros), an LSTM against PyTorch's, trip counts from shapes, and the
refusals of what the builder cannot unroll.

Every engine-building test takes the `device` fixture ("cpu", and "cuda:0" marked `gpu`)."""

from __future__ import annotations

import numpy as np
import pytest
import torch

import tensoracle
import tensoracle.trt as trt

RNG = np.random.default_rng(34)


def scalar(network, value, dtype=np.int32):
    return network.add_constant((), np.array(value, dtype)).get_output(0)


def build(device, populate, profiles=None):
    """Builds with trt.Builder as TensorRT programs do; returns the engine."""
    logger = trt.Logger(trt.Logger.ERROR)
    builder = trt.Builder(logger)
    network = builder.create_network(1 << int(trt.NetworkDefinitionCreationFlag.STRONGLY_TYPED))
    config = builder.create_builder_config()
    config.device = device
    populate(network)
    if profiles:
        profile = builder.create_optimization_profile()
        for name, (lo, opt, hi) in profiles.items():
            profile.set_shape(name, lo, opt, hi)
        config.add_optimization_profile(profile)
    plan = builder.build_serialized_network(network, config)
    return trt.Runtime(logger).deserialize_cuda_engine(plan)


def run(device, populate, inputs, profiles=None):
    return build(device, populate, profiles).create_execution().run(inputs)


def doubling(trips, length, axis=0):
    """The shape of TensorRT's counted-loop example: x doubled `trips` times; the recurrence's
    last value, every doubled value stacked, and the recurrence's values reversed."""

    def populate(network):
        x = network.add_input("x", trt.float32, (1, 3, 4, 5))
        loop = network.add_loop()
        limit = scalar(network, trips)
        loop.add_trip_limit(limit, trt.TripLimit.COUNT)
        r = loop.add_recurrence(x)
        twice = network.add_elementwise(r.get_output(0), r.get_output(0), trt.ElementWiseOperation.SUM)
        r.set_input(1, twice.get_output(0))
        last = loop.add_loop_output(r.get_output(0), trt.LoopOutput.LAST_VALUE, 0)
        every = loop.add_loop_output(twice.get_output(0), trt.LoopOutput.CONCATENATE, axis)
        every.set_input(1, scalar(network, length))
        back = loop.add_loop_output(r.get_output(0), trt.LoopOutput.REVERSE, axis)
        back.set_input(1, scalar(network, length))
        for name, layer in (("last", last), ("every", every), ("back", back)):
            layer.get_output(0).name = name
            network.mark_output(layer.get_output(0))

    return populate


@pytest.mark.parametrize("trips,length", [(6, 6), (6, 3), (3, 6), (0, 2)])
@pytest.mark.parametrize("axis", [0, 2, 4])
def test_counted_loop_outputs(device, trips, length, axis):
    x = RNG.uniform(-1, 1, (1, 3, 4, 5)).astype(np.float32)
    out = run(device, doubling(trips, length, axis), {"x": x})
    np.testing.assert_array_equal(out["last"], x * 2.0**trips)  # the value after the last iteration
    doubled = [x * 2.0 ** (i + 1) if i < trips else np.zeros_like(x) for i in range(length)]
    np.testing.assert_array_equal(out["every"], np.stack(doubled, axis))
    used = min(trips, length)
    before = [x * 2.0**i for i in range(used)][::-1] + [np.zeros_like(x)] * (length - used)
    np.testing.assert_array_equal(out["back"], np.stack(before, axis))


def test_loop_objects_as_tensorrt_names_them():
    network = trt.INetworkDefinition()
    x = network.add_input("x", trt.float32, (4, 5))
    loop = network.add_loop()
    assert loop.name == "loop_0"
    loop.name = "scan"
    limit = loop.add_trip_limit(scalar(network, 5), trt.TripLimit.COUNT)
    it = loop.add_iterator(x, 1, False)
    r = loop.add_recurrence(network.add_constant((4,), np.zeros(4, np.float32)).get_output(0))
    out = loop.add_loop_output(it.get_output(0), trt.LoopOutput.LAST_VALUE)
    assert isinstance(limit, trt.ITripLimitLayer) and isinstance(limit, trt.ILoopBoundaryLayer)
    assert limit.type == trt.LayerType.TRIP_LIMIT and limit.kind == trt.TripLimit.COUNT and limit.num_outputs == 0
    assert isinstance(it, trt.IIteratorLayer) and it.axis == 1 and not it.reverse and it.get_output(0).shape == (4,)
    it.reverse = True
    it.axis = 0
    assert it.get_output(0).shape == (5,) and it.reverse
    assert isinstance(r, trt.IRecurrenceLayer) and r.num_inputs == 1
    assert out.kind == trt.LoopOutput.LAST_VALUE and out.loop.name == "scan" and r.loop.name == "scan"
    out.set_input(1, scalar(network, 7))  # a length makes it a concatenation, as in TensorRT
    assert out.kind == trt.LoopOutput.CONCATENATE and out.get_output(0).shape == (7, 5)
    out.axis = 1
    assert out.get_output(0).shape == (5, 7)
    assert int(trt.TripLimit.WHILE) == 1 and int(trt.LoopOutput.REVERSE) == 2
    with pytest.raises(tensoracle.InvalidArgument, match="COUNT trip limit already"):
        loop.add_trip_limit(scalar(network, 2), trt.TripLimit.COUNT)
    with pytest.raises(tensoracle.InvalidArgument, match="int32 or int64 count"):
        network.add_loop().add_trip_limit(scalar(network, 2.0, np.float32), trt.TripLimit.COUNT)


@pytest.mark.parametrize("reverse", [False, True])
def test_iterator_scan(device, reverse):
    """A running sum over the columns of x (iterator on axis 1), each partial sum stacked."""
    x = RNG.uniform(-1, 1, (3, 6)).astype(np.float32)

    def populate(network):
        t = network.add_input("x", trt.float32, (3, 6))
        loop = network.add_loop()
        loop.add_trip_limit(scalar(network, 6), trt.TripLimit.COUNT)
        column = loop.add_iterator(t, 1, reverse)
        r = loop.add_recurrence(network.add_constant((3,), np.zeros(3, np.float32)).get_output(0))
        total = network.add_elementwise(r.get_output(0), column.get_output(0), trt.ElementWiseOperation.SUM)
        r.set_input(1, total.get_output(0))
        sums = loop.add_loop_output(total.get_output(0), trt.LoopOutput.CONCATENATE, 1)
        sums.set_input(1, scalar(network, 6))
        sums.get_output(0).name = "sums"
        network.mark_output(sums.get_output(0))

    got = run(device, populate, {"x": x})["sums"]
    ref = np.cumsum(x[:, ::-1] if reverse else x, axis=1, dtype=np.float64)
    np.testing.assert_allclose(got, ref, rtol=1e-6, atol=1e-6)


def lstm_network(w_ih, w_hh, b_ih, b_hh, seq, batch, hidden, trip_from_shape):
    """One LSTM layer over x [seq, batch, input] as a TensorRT loop: an iterator over time, h and
    c as recurrences, the gates from two matrix multiplies (PyTorch's i, f, g, o order)."""

    def populate(network):
        x = network.add_input("x", trt.float32, (seq, batch, w_ih.shape[1]))
        h0 = network.add_input("h0", trt.float32, (batch, hidden))
        c0 = network.add_input("c0", trt.float32, (batch, hidden))
        loop = network.add_loop()
        if trip_from_shape:
            # As programs write it for any sequence: the count is shape(x)[0].
            shape = network.add_shape(x).get_output(0)
            n = network.add_gather(shape, scalar(network, 0), 0).get_output(0)
            n = network.add_cast(n, trt.int32).get_output(0)
        else:
            n = scalar(network, seq)
        loop.add_trip_limit(n, trt.TripLimit.COUNT)
        xt = loop.add_iterator(x, 0, False).get_output(0)
        h = loop.add_recurrence(h0)
        c = loop.add_recurrence(c0)

        def const(a):
            return network.add_constant(a.shape, np.ascontiguousarray(a)).get_output(0)

        def mm(a, w):
            return network.add_matrix_multiply(a, trt.MatrixOperation.NONE, const(w), trt.MatrixOperation.TRANSPOSE).get_output(0)

        def ew(a, b, op):
            return network.add_elementwise(a, b, op).get_output(0)

        S = trt.ElementWiseOperation
        gates = ew(ew(mm(xt, w_ih), mm(h.get_output(0), w_hh), S.SUM), const((b_ih + b_hh).reshape(1, -1)), S.SUM)

        def gate(k, act):
            part = network.add_slice(gates, (0, k * hidden), (batch, hidden), (1, 1)).get_output(0)
            return network.add_activation(part, act).get_output(0)

        A = trt.ActivationType
        i, f, g, o = gate(0, A.SIGMOID), gate(1, A.SIGMOID), gate(2, A.TANH), gate(3, A.SIGMOID)
        c_next = ew(ew(f, c.get_output(0), S.PROD), ew(i, g, S.PROD), S.SUM)
        h_next = ew(o, network.add_activation(c_next, A.TANH).get_output(0), S.PROD)
        h.set_input(1, h_next)
        c.set_input(1, c_next)
        ys = loop.add_loop_output(h_next, trt.LoopOutput.CONCATENATE, 0)
        ys.set_input(1, n)
        h_last = loop.add_loop_output(h.get_output(0), trt.LoopOutput.LAST_VALUE, 0)
        c_last = loop.add_loop_output(c.get_output(0), trt.LoopOutput.LAST_VALUE, 0)
        for name, layer in (("y", ys), ("hn", h_last), ("cn", c_last)):
            layer.get_output(0).name = name
            network.mark_output(layer.get_output(0))

    return populate


@pytest.mark.parametrize("trip_from_shape", [False, True])
def test_lstm_matches_pytorch(device, trip_from_shape):
    seq, batch, inputs, hidden = 7, 3, 10, 16
    lstm = torch.nn.LSTM(inputs, hidden)
    torch.nn.init.uniform_(lstm.weight_ih_l0, -0.4, 0.4)
    w = {k: v.detach().numpy().astype(np.float32) for k, v in lstm.state_dict().items()}
    x = RNG.uniform(-1, 1, (seq, batch, inputs)).astype(np.float32)
    h0 = RNG.uniform(-0.5, 0.5, (batch, hidden)).astype(np.float32)
    c0 = RNG.uniform(-0.5, 0.5, (batch, hidden)).astype(np.float32)
    populate = lstm_network(w["weight_ih_l0"], w["weight_hh_l0"], w["bias_ih_l0"], w["bias_hh_l0"], seq, batch, hidden,
                            trip_from_shape)
    out = run(device, populate, {"x": x, "h0": h0, "c0": c0})
    with torch.no_grad():
        y, (hn, cn) = lstm(torch.from_numpy(x), (torch.from_numpy(h0)[None], torch.from_numpy(c0)[None]))
    tol = dict(rtol=2e-5, atol=2e-5)
    np.testing.assert_allclose(out["y"], y.numpy(), **tol)
    np.testing.assert_allclose(out["hn"], hn[0].numpy(), **tol)
    np.testing.assert_allclose(out["cn"], cn[0].numpy(), **tol)


def test_trip_count_from_a_dynamic_dim_fixed_by_the_profile(device):
    """shape(x)[0] as the trip count over a dynamic dim: built when the profile fixes the dim,
    refused when the dim varies (loops are unrolled when the engine is built)."""

    def populate(network):
        x = network.add_input("x", trt.float32, (-1, 4))
        loop = network.add_loop()
        n = network.add_gather(network.add_shape(x).get_output(0), scalar(network, 0), 0).get_output(0)
        loop.add_trip_limit(network.add_cast(n, trt.int32).get_output(0), trt.TripLimit.COUNT)
        row = loop.add_iterator(x, 0, True)
        r = loop.add_recurrence(network.add_constant((4,), np.zeros(4, np.float32)).get_output(0))
        m = network.add_elementwise(r.get_output(0), row.get_output(0), trt.ElementWiseOperation.MAX).get_output(0)
        r.set_input(1, m)
        out = loop.add_loop_output(r.get_output(0), trt.LoopOutput.LAST_VALUE)
        out.get_output(0).name = "m"
        network.mark_output(out.get_output(0))

    x = RNG.uniform(-1, 1, (5, 4)).astype(np.float32)
    got = run(device, populate, {"x": x}, {"x": ((5, 4), (5, 4), (5, 4))})["m"]
    np.testing.assert_array_equal(got, np.maximum(x.max(axis=0), 0))
    with pytest.raises(tensoracle.UnsupportedError, match="trip count"):
        build(device, populate, {"x": ((1, 4), (5, 4), (8, 4))})


def test_what_cannot_be_unrolled_or_is_malformed_is_refused():
    def while_loop(network):
        x = network.add_input("x", trt.float32, (2,))
        loop = network.add_loop()
        r = loop.add_recurrence(x)
        y = network.add_elementwise(r.get_output(0), r.get_output(0), trt.ElementWiseOperation.SUM).get_output(0)
        r.set_input(1, y)
        total = network.add_reduce(r.get_output(0), trt.ReduceOperation.SUM, 1, False).get_output(0)
        go = network.add_elementwise(total, scalar(network, 100.0, np.float32), trt.ElementWiseOperation.LESS)
        loop.add_trip_limit(go.get_output(0), trt.TripLimit.WHILE)
        network.mark_output(loop.add_loop_output(r.get_output(0), trt.LoopOutput.LAST_VALUE).get_output(0))

    with pytest.raises(tensoracle.UnsupportedError, match="WHILE trip limits"):
        build("cpu", while_loop)

    def nested(network):
        x = network.add_input("x", trt.float32, (3, 2))
        outer = network.add_loop()
        outer.add_trip_limit(scalar(network, 3), trt.TripLimit.COUNT)
        row = outer.add_iterator(x)
        inner = network.add_loop()
        inner.add_trip_limit(scalar(network, 2), trt.TripLimit.COUNT)
        inner.add_iterator(row.get_output(0))
        network.mark_output(outer.add_loop_output(row.get_output(0), trt.LoopOutput.LAST_VALUE).get_output(0))

    with pytest.raises(tensoracle.UnsupportedError, match="nested loops"):
        build("cpu", nested)

    def short_iterator(network):
        x = network.add_input("x", trt.float32, (3, 2))
        loop = network.add_loop()
        loop.add_trip_limit(scalar(network, 4), trt.TripLimit.COUNT)
        it = loop.add_iterator(x)
        network.mark_output(loop.add_loop_output(it.get_output(0), trt.LoopOutput.LAST_VALUE).get_output(0))

    with pytest.raises(tensoracle.InvalidArgument, match="3 slices for the 4 iterations"):
        build("cpu", short_iterator)

    def leaking(network):
        x = network.add_input("x", trt.float32, (3, 2))
        loop = network.add_loop()
        loop.add_trip_limit(scalar(network, 3), trt.TripLimit.COUNT)
        it = loop.add_iterator(x)
        network.mark_output(network.add_activation(it.get_output(0), trt.ActivationType.RELU).get_output(0))

    with pytest.raises(tensoracle.InvalidArgument, match="add_loop_output"):
        build("cpu", leaking)

    def unfinished_concat(network):
        x = network.add_input("x", trt.float32, (3, 2))
        loop = network.add_loop()
        loop.add_trip_limit(scalar(network, 3), trt.TripLimit.COUNT)
        it = loop.add_iterator(x)
        network.mark_output(loop.add_loop_output(it.get_output(0), trt.LoopOutput.CONCATENATE).get_output(0))

    with pytest.raises(tensoracle.InvalidArgument, match="needs its length"):
        build("cpu", unfinished_concat)


def test_unrolled_layers_are_named_by_iteration():
    engine = build("cpu", doubling(3, 3))
    names = [layer.name for layer in engine.layers()]
    assert any(n.endswith("[2]") for n in names), names


# ---- conditionals -----------------------------------------------------------------------------


def conditional_network(condition_from):
    """y = relu(x) * 2 if the condition holds, else -x; the condition from the data (sum(x) > 0),
    from a bool input, or a constant."""

    def populate(network):
        x = network.add_input("x", trt.float32, (2, 3))
        cond = network.add_if_conditional()
        if condition_from == "data":
            total = network.add_reduce(x, trt.ReduceOperation.SUM, 0b11, False).get_output(0)
            c = network.add_elementwise(total, scalar(network, 0.0, np.float32), trt.ElementWiseOperation.GREATER)
            condition = c.get_output(0)
        else:
            condition = network.add_constant((), np.array(condition_from == "true", np.bool_)).get_output(0)
        cond.set_condition(condition)
        inside = cond.add_input(x).get_output(0)
        relu = network.add_activation(inside, trt.ActivationType.RELU).get_output(0)
        twice = network.add_elementwise(relu, relu, trt.ElementWiseOperation.SUM).get_output(0)
        neg = network.add_unary(inside, trt.UnaryOperation.NEG).get_output(0)
        out = cond.add_output(twice, neg)
        out.get_output(0).name = "y"
        network.mark_output(out.get_output(0))

    return populate


@pytest.mark.parametrize("condition_from", ["data", "true", "false"])
def test_if_conditional(device, condition_from):
    engine = build(device, conditional_network(condition_from))
    for sign in (1, -1):
        x = (sign * RNG.uniform(0.1, 1, (2, 3))).astype(np.float32)
        x[0, 0] = -x[0, 0]
        taken = x.sum() > 0 if condition_from == "data" else condition_from == "true"
        got = engine.create_execution().run({"x": x})["y"]
        np.testing.assert_array_equal(got, 2 * np.maximum(x, 0) if taken else -x)
    kinds = [layer.type for layer in engine.layers()]
    assert ("select" in kinds) == (condition_from == "data"), kinds


def test_conditional_objects_and_refusals():
    network = trt.INetworkDefinition()
    x = network.add_input("x", trt.float32, (2, 3))
    cond = network.add_if_conditional()
    assert cond.name == "conditional_0"
    cond.name = "branch"
    c = cond.set_condition(network.add_constant((), np.array(True)).get_output(0))
    i = cond.add_input(x)
    o = cond.add_output(i.get_output(0), i.get_output(0))
    assert isinstance(c, trt.IConditionLayer) and c.type == trt.LayerType.CONDITION and c.num_outputs == 0
    assert isinstance(i, trt.IIfConditionalInputLayer) and i.conditional.name == "branch"
    assert isinstance(o, trt.IIfConditionalOutputLayer) and o.type == trt.LayerType.CONDITIONAL_OUTPUT
    with pytest.raises(tensoracle.InvalidArgument, match="condition is set already"):
        cond.set_condition(network.add_constant((), np.array(False)).get_output(0))
    with pytest.raises(tensoracle.InvalidArgument, match="0-D bool"):
        network.add_if_conditional().set_condition(x)
    y = network.add_input("y", trt.float32, (3, 2))
    with pytest.raises(tensoracle.InvalidArgument, match="one shape"):
        cond.add_output(x, y)


def test_conditional_inside_a_loop(device):
    """A data-dependent branch in each iteration: halve the state while its sum exceeds 10, else
    triple it (both branches run in every unrolled iteration; the select keeps one)."""

    def populate(network):
        x = network.add_input("x", trt.float32, (3,))
        loop = network.add_loop()
        loop.add_trip_limit(scalar(network, 8), trt.TripLimit.COUNT)
        r = loop.add_recurrence(x)
        total = network.add_reduce(r.get_output(0), trt.ReduceOperation.SUM, 1, False).get_output(0)
        big = network.add_elementwise(total, scalar(network, 10.0, np.float32), trt.ElementWiseOperation.GREATER)
        cond = network.add_if_conditional()
        cond.set_condition(big.get_output(0))
        v = cond.add_input(r.get_output(0)).get_output(0)
        half = network.add_elementwise(v, network.add_constant((1,), np.array([0.5], np.float32)).get_output(0),
                                       trt.ElementWiseOperation.PROD).get_output(0)
        triple = network.add_elementwise(v, network.add_constant((1,), np.array([3.0], np.float32)).get_output(0),
                                         trt.ElementWiseOperation.PROD).get_output(0)
        nxt = cond.add_output(half, triple).get_output(0)
        r.set_input(1, nxt)
        steps = loop.add_loop_output(nxt, trt.LoopOutput.CONCATENATE, 0)
        steps.set_input(1, scalar(network, 8))
        steps.get_output(0).name = "steps"
        network.mark_output(steps.get_output(0))

    x = np.array([1.0, 2.0, 0.5], np.float32)
    got = run(device, populate, {"x": x})["steps"]
    state, ref = x.astype(np.float64), []
    for _ in range(8):
        state = state * 0.5 if state.sum() > 10 else state * 3
        ref.append(state)
    np.testing.assert_allclose(got, np.array(ref), rtol=1e-6)


# ---- NVIDIA's refactored "construct a network with layer APIs" sample ------------------------

# The sample's sequence of calls, written here (not copied): `import tensorrt` (given
# tensoracle.trt by TENSORACLE_AS_TENSORRT=1), builder.create_network() without flags, an LSTM
# cell of constants, matrix multiplies, slices and activations in a loop (a COUNT trip limit
# from a constant of shape () holding [seq_len], recurrences for h and c, an iterator over the
# sequence, a CONCATENATE output whose length is the trip limit), a progress monitor,
# VERSION_COMPATIBLE, the plan saved to a file, then run with Polygraphy's TrtRunner on a GPU,
# or opened with trt.Runtime and run on the CPU.
SAMPLE = r'''
import sys
import numpy as np
import tensorrt as trt

seq_len, batch, inputs, hidden = 5, 1, 1, 2
W = np.full((inputs, 4 * hidden), 0.01, np.float32)
U = np.full((hidden, 4 * hidden), 0.05, np.float32)
B = np.full((4 * hidden,), 0.3, np.float32)
h0 = np.full((batch, hidden), 0.1, np.float32)
c0 = np.full((batch, hidden), 0.2, np.float32)

def cell(network, x, h, c):
    w = network.add_constant(W.shape, trt.Weights(W)).get_output(0)
    u = network.add_constant(U.shape, U).get_output(0)
    b = network.add_constant((1, 4 * hidden), np.expand_dims(B, 0)).get_output(0)
    wx = network.add_matrix_multiply(x, trt.MatrixOperation.NONE, w, trt.MatrixOperation.NONE).get_output(0)
    uh = network.add_matrix_multiply(h, trt.MatrixOperation.NONE, u, trt.MatrixOperation.NONE).get_output(0)
    gates = network.add_elementwise(network.add_elementwise(wx, uh, trt.ElementWiseOperation.SUM).get_output(0), b,
                                    trt.ElementWiseOperation.SUM).get_output(0)
    size = x.shape[0]
    part = [network.add_slice(input=gates, start=(0, k * hidden), shape=(size, hidden), stride=(1, 1)).get_output(0)
            for k in range(4)]
    acts = [trt.ActivationType.SIGMOID, trt.ActivationType.SIGMOID, trt.ActivationType.TANH, trt.ActivationType.SIGMOID]
    i, f, g, o = (network.add_activation(p, a).get_output(0) for p, a in zip(part, acts))
    c_next = network.add_elementwise(network.add_elementwise(f, c, trt.ElementWiseOperation.PROD).get_output(0),
                                     network.add_elementwise(i, g, trt.ElementWiseOperation.PROD).get_output(0),
                                     trt.ElementWiseOperation.SUM).get_output(0)
    tanh_c = network.add_activation(c_next, trt.ActivationType.TANH).get_output(0)
    return network.add_elementwise(o, tanh_c, trt.ElementWiseOperation.PROD).get_output(0), c_next

class Monitor(trt.IProgressMonitor):
    def __init__(self):
        trt.IProgressMonitor.__init__(self)
        self.phases = []
    def phase_start(self, phase_name, parent_phase, num_steps):
        self.phases.append(phase_name)
    def phase_finish(self, phase_name):
        pass
    def step_complete(self, phase_name, step):
        return True

logger = trt.Logger(trt.Logger.INFO)
builder = trt.Builder(logger)
network = builder.create_network()
x = network.add_input(name="input", dtype=trt.float32, shape=(seq_len, batch, inputs))
loop = network.add_loop()
loop.name = "Time_Loop_Layer"
limit = network.add_constant((), np.array([seq_len], dtype=np.int32)).get_output(0)
loop.add_trip_limit(limit, trt.TripLimit.COUNT)
h = loop.add_recurrence(network.add_constant(h0.shape, h0).get_output(0))
c = loop.add_recurrence(network.add_constant(c0.shape, c0).get_output(0))
x_t = loop.add_iterator(x, axis=0).get_output(0)
h_next, c_next = cell(network, x_t, h.get_output(0), c.get_output(0))
h.set_input(1, h_next)
c.set_input(1, c_next)
out = loop.add_loop_output(h_next, trt.LoopOutput.CONCATENATE, axis=0)
out.set_input(1, limit)
out.get_output(0).name = "hidden_state_sequence"
network.mark_output(out.get_output(0))

config = builder.create_builder_config()
config.set_memory_pool_limit(trt.MemoryPoolType.WORKSPACE, 1 << 28)
monitor = Monitor()
config.progress_monitor = monitor
config.set_flag(trt.BuilderFlag.VERSION_COMPATIBLE)
plan = builder.build_serialized_network(network, config)
assert "Building engine" in monitor.phases, monitor.phases
with open("lstm_network.plan", "wb") as f:
    f.write(plan)

feed = np.ones((seq_len, batch, inputs), np.float32)
if sys.argv[1] == "polygraphy":
    from polygraphy.backend.common import BytesFromPath
    from polygraphy.backend.trt import EngineFromBytes, TrtRunner
    with TrtRunner(EngineFromBytes(BytesFromPath("lstm_network.plan"))) as runner:
        y = runner.infer(feed_dict={"input": feed})["hidden_state_sequence"]
else:
    runtime = trt.Runtime(logger)
    runtime.engine_host_code_allowed = True
    engine = runtime.deserialize_cuda_engine(open("lstm_network.plan", "rb").read())
    y = engine.create_execution().run({"input": feed})["hidden_state_sequence"]
np.save("y.npy", np.asarray(y))
'''


def sample_reference():
    def sigmoid(v):
        return 1 / (1 + np.exp(-v))

    h = np.full((1, 2), 0.1)
    c = np.full((1, 2), 0.2)
    w, u, b = np.full((1, 8), 0.01), np.full((2, 8), 0.05), np.full(8, 0.3)
    ys = []
    for _ in range(5):
        g = np.ones((1, 1)) @ w + h @ u + b
        i, f, cand, o = sigmoid(g[:, 0:2]), sigmoid(g[:, 2:4]), np.tanh(g[:, 4:6]), sigmoid(g[:, 6:8])
        c = f * c + i * cand
        h = o * np.tanh(c)
        ys.append(h)
    return np.stack(ys)


def run_sample(tmp_path, how):
    import os
    import subprocess
    import sys

    (tmp_path / "sample.py").write_text(SAMPLE)
    env = {**os.environ, "TENSORACLE_AS_TENSORRT": "1"}
    r = subprocess.run([sys.executable, "sample.py", how], cwd=tmp_path, env=env, capture_output=True, text=True, timeout=300)
    assert r.returncode == 0, r.stdout + r.stderr
    return np.load(tmp_path / "y.npy")


def test_nvidia_lstm_sample_runs_with_only_tensorrt_resolved_to_tensoracle(tmp_path):
    np.testing.assert_allclose(run_sample(tmp_path, "runtime"), sample_reference(), rtol=1e-5, atol=1e-6)


@pytest.mark.gpu
def test_nvidia_lstm_sample_runs_with_polygraphys_trt_runner(tmp_path):
    pytest.importorskip("polygraphy")
    np.testing.assert_allclose(run_sample(tmp_path, "polygraphy"), sample_reference(), rtol=1e-5, atol=1e-6)
