"""Plugin fields in TensorRT's shape: ``PluginField(name, data, type)`` and a
``PluginFieldCollection`` of them, for ``network.add_plugin(name, version, inputs, fields)``.

    import numpy as np
    import tensoracle.trt as trt

    fields = trt.PluginFieldCollection([
        trt.PluginField("epsilon", np.array([1e-6], dtype=np.float32), trt.PluginFieldType.FLOAT32),
    ])
    layer = network.add_plugin("RMSNorm", "1", [x, weight], fields, namespace="tensoracle.examples")

``data`` is a NumPy array (or anything ``numpy.asarray`` takes: a number, a list), a ``str`` or
``bytes``. Without a ``type``, the creator's schema decides (its library must be loaded:
``plugins=`` of ``build_serialized_engine``), else the array's dtype. A plain dict
``{"epsilon": 1e-6}`` works as well.
"""


class PluginField:
    """One named, typed creator field (TensorRT's ``trt.PluginField``)."""

    __slots__ = ("name", "data", "type")

    def __init__(self, name, data=None, type=None):  # noqa: A002  (TensorRT's name)
        if not isinstance(name, str) or not name:
            raise ValueError("PluginField: the name must be a non-empty str")
        self.name = name
        self.data = data
        self.type = type

    def __repr__(self):
        return f"PluginField({self.name!r}, {self.data!r}, {self.type!r})"


class PluginFieldCollection(list):
    """A list of :class:`PluginField` (TensorRT's ``trt.PluginFieldCollection``)."""

    def __init__(self, fields=()):
        fields = list(fields)
        for f in fields:
            if not isinstance(f, PluginField):
                raise TypeError(f"PluginFieldCollection holds PluginField objects, not {type(f).__name__}")
        super().__init__(fields)
