"""needle.data: datasets, the DataLoader, image transforms, and the MNIST and CIFAR-10 readers."""

from . import transforms
from .cifar10 import CIFAR10Dataset
from .dataloader import DataLoader
from .dataset import Dataset, NDArrayDataset
from .mnist import MNIST_FILES, MNISTDataset, builtin_mnist_dir, find_mnist_files, parse_mnist
from .transforms import RandomCrop, RandomFlipHorizontal, Transform

__all__ = [
    "Dataset", "NDArrayDataset", "DataLoader", "MNISTDataset", "parse_mnist", "transforms",
    "Transform", "RandomFlipHorizontal", "RandomCrop",
    "builtin_mnist_dir", "find_mnist_files", "MNIST_FILES",
    "CIFAR10Dataset",
]
