"""needle's ops: each a small class with `compute` and `gradient`, plus a lowercase function."""

from .elementwise import (
    AddN, AddScalar, DivScalar, EWiseAdd, EWiseDiv, EWiseMul, EWisePow, Exp, Log, MulScalar,
    Negate, PowerScalar, ReLU, Sigmoid, Tanh, add, add_n, add_scalar, as_scalar, divide,
    divide_scalar, exp, log, math_log, mul_scalar, multiply, negate, power, power_scalar, relu,
    sigmoid, tanh,
)
from .linalg import MatMul, matmul
from .movement import (
    BroadcastTo, Dilate, Flip, GetItem, Permute, Reshape, ScatterItem, Transpose, UnDilate,
    broadcast_to, dilate, flip, get_item, permute, reshape, transpose, undilate,
)
from .norm import Normalize, NormalizeGrad, normalize
from .reduce import (
    LogSumExp, Max, Summation, SumToShape, logsoftmax, logsumexp, max, sum_to_shape,
    summation,
)
from .tuple import (
    FusedAddScalars, MakeTensorTuple, Split, Stack, TupleGetItem, fused_add_scalars,
    make_tuple, split, stack, tuple_get_item,
)

__all__ = [
    "AddN", "AddScalar", "DivScalar", "EWiseAdd", "EWiseDiv", "EWiseMul", "EWisePow", "Exp",
    "Log", "MulScalar", "Negate", "PowerScalar", "ReLU", "Sigmoid", "Tanh", "add", "add_n",
    "add_scalar", "divide", "divide_scalar", "exp", "log", "mul_scalar", "multiply", "negate",
    "power", "power_scalar", "relu", "sigmoid", "tanh", "MatMul", "matmul", "BroadcastTo",
    "Dilate", "Flip", "GetItem", "Permute", "Reshape", "ScatterItem", "Transpose", "UnDilate",
    "broadcast_to", "dilate", "flip", "get_item", "permute", "reshape", "transpose", "undilate",
    "LogSumExp", "Max", "Summation", "SumToShape", "logsoftmax", "logsumexp", "max",
    "sum_to_shape", "summation", "FusedAddScalars", "MakeTensorTuple", "Split", "Stack",
    "TupleGetItem", "fused_add_scalars", "make_tuple", "split", "stack", "tuple_get_item",
    "as_scalar", "math_log", "Normalize", "NormalizeGrad", "normalize",
]
