"""needle.nn: Parameter, Module, its containers and the layers, normalisations and losses
built on them."""

from . import utils
from .containers import ModuleDict, ModuleList
from .conv import Conv
from .embedding import Embedding
from .layers import Dropout, Flatten, Identity, Linear, ReLU, Residual, Sequential, Sigmoid, Tanh
from .loss import CrossEntropyLoss, MSELoss, SoftmaxLoss
from .module import Module, Parameter
from .norm import BatchNorm1d, BatchNorm2d, LayerNorm1d
from .pool import AvgPool2d, MaxPool2d
from .rnn import LSTM, RNN, LSTMCell, RNNCell
from .transformer import AttentionLayer, MultiHeadAttention, Transformer, TransformerLayer

__all__ = [
    "Module", "Parameter", "Identity", "Flatten", "ReLU", "Tanh", "Sigmoid", "Sequential",
    "Residual", "Linear", "Dropout", "BatchNorm1d", "BatchNorm2d", "LayerNorm1d", "SoftmaxLoss",
    "Conv", "MaxPool2d", "AvgPool2d", "Embedding", "utils",
    "RNNCell", "RNN", "LSTMCell", "LSTM",
    "MultiHeadAttention", "AttentionLayer", "TransformerLayer", "Transformer",
    "ModuleList", "ModuleDict", "CrossEntropyLoss", "MSELoss",
]
