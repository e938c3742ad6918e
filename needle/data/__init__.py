"""needle.data: datasets, the DataLoader, image transforms and the MNIST reader."""

from . import transforms
from .dataloader import DataLoader
from .dataset import Dataset, NDArrayDataset
from .mnist import MNIST_FILES, MNISTDataset, builtin_mnist_dir, find_mnist_files, parse_mnist
from .transforms import RandomCrop, RandomFlipHorizontal, Transform

__all__ = [
    "Dataset", "NDArrayDataset", "DataLoader", "MNISTDataset", "parse_mnist", "transforms",
    "Transform", "RandomFlipHorizontal", "RandomCrop",
    "builtin_mnist_dir", "find_mnist_files", "MNIST_FILES",
]
