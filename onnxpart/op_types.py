"""ONNX op types by kind, shared by coarsening (:mod:`onnxpart.coarsen`) and the analytic cost model
(:mod:`onnxpart.cost_models.analytic`)."""

from __future__ import annotations

from collections.abc import Mapping
from types import MappingProxyType

#: Elementwise op types — elementwise in their activation input, parameters may broadcast — with their
#: FLOPs per output element (1: arithmetic, comparison, logic, casts; 4: transcendental functions and
#: per-channel affine normalization). Non-default-domain entries (QuickGelu, ...) are costed only:
#: coarsening keeps such ops whole (``Op.opaque``).
ELEMENTWISE_FLOPS: Mapping[str, int] = MappingProxyType({
    **dict.fromkeys(["Add", "Sub", "Mul", "Div", "Neg", "Abs", "Relu", "LeakyRelu", "PRelu", "Max", "Min",
                     "Mean", "Sum", "Clip", "Floor", "Ceil", "Round", "Sign", "Mod", "Reciprocal",
                     "Equal", "Greater", "Less", "GreaterOrEqual", "LessOrEqual", "And", "Or", "Xor", "Not",
                     "Where", "BitShift", "IsNaN", "IsInf", "ThresholdedRelu", "Shrink", "Cast",
                     "CastLike", "Dropout", "Identity"], 1),
    **dict.fromkeys(["Sqrt", "Exp", "Log", "Pow", "Sin", "Cos", "Tan", "Asin", "Acos", "Atan", "Sinh",
                     "Cosh", "Asinh", "Acosh", "Atanh", "Erf", "Sigmoid", "HardSigmoid", "HardSwish",
                     "Tanh", "Softplus", "Softsign", "Elu", "Selu", "Celu", "Mish", "Gelu",
                     "QuickGelu", "BiasGelu", "FastGelu", "BatchNormalization"], 4),
})
