"""needle's ops: each a small class with `compute` and `gradient`, plus a lowercase function."""

from ..backend_ndarray import course_getattr
from .elementwise import (
    AddN, EWiseAdd, EWiseDiv, EWiseMul, EWisePow, Negate, ScaleShift, add, add_n, divide,
    multiply, negate, power, scale_shift,
)
from .scalar import (
    AddScalar, DivScalar, MulScalar, PowerScalar, RPowerScalar, add_scalar, as_scalar,
    divide_scalar, mul_scalar, power_scalar, rpower_scalar,
)
from .unary import Exp, Log, ReLU, Sigmoid, Sqrt, Tanh, exp, log, relu, sigmoid, sqrt, tanh
from .dtypes import AsType, astype
from .conv import BiasGrad, Conv, ConvGrads, ConvInputGrad, ConvWeightGrad, conv
from .im2col import Col2Im, Im2Col, Pad, Taps, im2col, pad
from .dropout import DropoutMask, dropout_mask
from .embedding import EmbeddingLookup, SegmentSum, embedding
from .linalg import Affine, MatMul, affine, matmul
from .lstm import (
    LSTMCellOutput, LSTMCellOutputGrad, LSTMCellState, LSTMCellStateGrad, lstm_cell_output,
    lstm_cell_state,
)
from .movement import (
    BroadcastTo, Dilate, Flip, GetItem, Permute, Reshape, ScatterItem, SumToShape, Transpose,
    UnDilate, broadcast_to, dilate, flip, get_item, permute, reshape, sum_to_shape, transpose,
    undilate,
)
from .norm import Normalize, NormalizeGrad, normalize
from .affine_norm import (BatchNorm, BatchNormGrad, LayerNorm, LayerNormGrad, batch_norm,
                          layer_norm)
from .pool import (
    AvgPool2dOp, Fold2d, MaxPool2dOp, Unfold2d, avg_pool2d, fold2d, max_pool2d, unfold2d,
)
from .reduce import (
    LogSoftmax, LogSumExp, Max, SoftmaxCrossEntropy, SoftmaxCrossEntropyGrad, Summation,
    logsoftmax, logsumexp, max, mean, softmax_cross_entropy, summation,
)
from .softmax import Softmax, SoftmaxGrad, softmax
from .tuple import (
    FusedAddScalars, MakeTensorTuple, OneHotTuple, Split, Stack, TupleGetItem, fused_add_scalars,
    make_tuple, split, stack, tuple_get_item,
)

__all__ = [
    "AddN", "AddScalar", "DivScalar", "EWiseAdd", "EWiseDiv", "EWiseMul", "EWisePow", "Exp",
    "Log", "MulScalar", "Negate", "PowerScalar", "ReLU", "RPowerScalar", "Sigmoid", "Tanh",
    "add", "add_n", "add_scalar", "divide", "divide_scalar", "exp", "log", "mul_scalar",
    "multiply", "negate", "power", "power_scalar", "relu", "rpower_scalar", "sigmoid", "tanh",
    "Sqrt", "sqrt",
    "MatMul", "matmul", "Affine", "affine", "BroadcastTo", "Dilate", "Flip", "GetItem",
    "Permute", "Reshape",
    "ScatterItem", "Transpose", "UnDilate", "broadcast_to", "dilate", "flip", "get_item",
    "permute", "reshape", "transpose", "undilate", "LogSoftmax", "LogSumExp", "Max",
    "Summation", "SumToShape", "logsoftmax", "logsumexp", "max", "mean", "sum_to_shape",
    "summation",
    "FusedAddScalars", "MakeTensorTuple", "OneHotTuple", "Split", "Stack", "TupleGetItem",
    "fused_add_scalars", "make_tuple", "split", "stack", "tuple_get_item", "as_scalar",
    "Normalize", "NormalizeGrad", "normalize", "BatchNorm", "BatchNormGrad", "batch_norm",
    "LayerNorm", "LayerNormGrad", "layer_norm",
    "Conv", "ConvInputGrad", "ConvWeightGrad", "ConvGrads", "BiasGrad", "Im2Col", "Col2Im",
    "Taps", "Pad", "conv",
    "im2col", "pad",
    "AvgPool2dOp", "Fold2d", "MaxPool2dOp", "Unfold2d", "avg_pool2d", "fold2d",
    "max_pool2d", "unfold2d", "EmbeddingLookup", "SegmentSum", "embedding",
    "DropoutMask", "dropout_mask",
    "SoftmaxCrossEntropy", "SoftmaxCrossEntropyGrad", "softmax_cross_entropy",
    "Softmax", "SoftmaxGrad", "softmax", "ScaleShift", "scale_shift",
    "LSTMCellState", "LSTMCellOutput", "LSTMCellStateGrad", "LSTMCellOutputGrad",
    "lstm_cell_state", "lstm_cell_output",
    "AsType", "astype",
]

__getattr__ = course_getattr(__name__)  # the course's `array_api` and `NDArray`, lazily
