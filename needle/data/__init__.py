"""needle.data: datasets, DataLoader, transforms, the MNIST, CIFAR-10 and PTB readers."""

from . import transforms
from .cifar10 import CIFAR10Dataset
from .dataloader import DataLoader
from .dataset import Dataset, NDArrayDataset
from .mnist import MNIST_FILES, MNISTDataset, builtin_mnist_dir, find_mnist_files, parse_mnist
from .ptb import Corpus, Dictionary, batchify, builtin_ptb_corpus, builtin_ptb_dir, get_batch
from .transforms import RandomCrop, RandomFlipHorizontal, Transform

__all__ = [
    "Dataset", "NDArrayDataset", "DataLoader", "MNISTDataset", "parse_mnist", "transforms",
    "Transform", "RandomFlipHorizontal", "RandomCrop",
    "builtin_mnist_dir", "find_mnist_files", "MNIST_FILES",
    "CIFAR10Dataset",
    "Dictionary", "Corpus", "batchify", "get_batch", "builtin_ptb_dir", "builtin_ptb_corpus",
]
