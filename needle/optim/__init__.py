"""needle.optim: the Optimizer base class, SGD, Adam and the lr_scheduler module."""

from . import lr_scheduler
from .adam import Adam
from .optimizer import Optimizer
from .sgd import SGD

__all__ = ["Optimizer", "SGD", "Adam", "lr_scheduler"]
