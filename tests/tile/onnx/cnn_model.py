"""A small ResNet-like CNN for the tile --verify tests (light_resnet50's op types, a few channels)."""

from __future__ import annotations

import numpy as np
import onnx
from onnx import TensorProto, helper, numpy_helper


def small_cnn(path, batch: int = 4, channels: int = 8, classes: int = 8) -> str:
    """conv -> bn -> relu -> maxpool -> depthwise conv -> conv, + residual (Sum) -> relu -> global
    average pool -> flatten -> gemm -> softmax, with random weights."""
    rng = np.random.default_rng(0)

    def w(name, shape, positive=False):
        value = rng.standard_normal(shape).astype(np.float32)
        return numpy_helper.from_array(np.abs(value) + 0.5 if positive else value, name)

    c = channels
    inits = [w("w1", [c, 3, 3, 3]), w("b1", [c]), w("s", [c]), w("bb", [c]), w("m", [c]), w("v", [c], True),
             w("wd", [c, 1, 3, 3]), w("w2", [c, c, 1, 1]), w("wf", [c, classes]), w("bf", [classes])]
    n = helper.make_node
    nodes = [n("Conv", ["x", "w1", "b1"], ["c1"], name="conv1", pads=[1, 1, 1, 1]),
             n("BatchNormalization", ["c1", "s", "bb", "m", "v"], ["n1"], name="bn1"),
             n("Relu", ["n1"], ["r1"], name="relu1"),
             n("MaxPool", ["r1"], ["p1"], name="pool1", kernel_shape=[2, 2], strides=[2, 2]),
             n("Conv", ["p1", "wd"], ["d1"], name="depthwise", group=c, pads=[1, 1, 1, 1]),
             n("Conv", ["d1", "w2"], ["c2"], name="conv2"),
             n("Sum", ["c2", "p1"], ["s1"], name="residual"),
             n("Relu", ["s1"], ["r2"], name="relu2"),
             n("GlobalAveragePool", ["r2"], ["g"], name="gap"),
             n("Flatten", ["g"], ["f"], name="flatten"),
             n("Gemm", ["f", "wf", "bf"], ["logits"], name="fc"),
             n("Softmax", ["logits"], ["y"], name="softmax", axis=1)]
    graph = helper.make_graph(nodes, "small_cnn", [helper.make_tensor_value_info("x", TensorProto.FLOAT, [batch, 3, 8, 8])],
                              [helper.make_tensor_value_info("y", TensorProto.FLOAT, [batch, classes])], inits)
    onnx.save(helper.make_model(graph, opset_imports=[helper.make_opsetid("", 17)]), str(path))
    return str(path)
