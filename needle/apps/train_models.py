"""needle-train's models: one registry entry per model (what it is, its display name, data
set, kind, builder, own defaults and the settings it has no use for), and the two kinds of
model, which say how a model is fed and how its results read."""

from __future__ import annotations

from collections.abc import Callable
from dataclasses import dataclass, field
from typing import Any

import needle.nn as nn
from needle.apps import train_data
from needle.apps.curves import perplexity
from needle.apps.epoch_loop import LMWindows
from needle.apps.mlp_resnet import MLPResNet
from needle.apps.mnist_cnn import MNISTConvNet
from needle.apps.models import LanguageModel, ResNet9
from needle.backends import Device

LM_SEQ_LEN = 40  # tokens per window (the course's bptt)


class Kind:
    """Image classifiers: DataLoader batches, scored by error rate, reported as accuracy."""

    words = "image models"
    language_model = False  # the curves' columns: accuracy, not perplexity
    distributes = True  # --distributed can shard its data

    def batches(self, data: Any, device: Device) -> Any:
        """What `run_epoch` iterates over for one pass over `data`."""
        return data

    def sizes(self, train: Any, test: Any) -> str:
        """The amount of data, for the header line."""
        return f"{len(train.dataset)} training / {len(test.dataset)} test images"

    def epoch_line(self, epoch: int, m: dict[str, Any]) -> str:
        """The line printed after `epoch`, from its metrics."""
        return (f"epoch {epoch:3d}  train err {m['train_err']:.4f} loss {m['train_loss']:.4f}"
                f"  test err {m['test_err']:.4f} loss {m['test_loss']:.4f}")

    def results(self, m: dict[str, Any]) -> tuple[str, str]:
        """(the test result, the training result) in words, for the summary."""
        return (f"test accuracy {100 * (1 - m['test_err']):.2f}%",
                f"train accuracy {100 * (1 - m['train_err']):.2f}%")


class LanguageModels(Kind):
    """Language models: windows of batchified token ids (the hidden state carried), scored by
    the per-token loss, reported as perplexity."""

    words = "language models"
    language_model = True
    distributes = False

    def batches(self, data: Any, device: Device) -> LMWindows:
        return LMWindows(data, LM_SEQ_LEN, device, "float32")

    def sizes(self, train: Any, test: Any) -> str:
        return f"{train.size} training / {test.size} held-out tokens"

    def epoch_line(self, epoch: int, m: dict[str, Any]) -> str:
        return (f"epoch {epoch:3d}  train perplexity {_perplexity(m['train_loss'])}"
                f"  held-out perplexity {_perplexity(m['test_loss'])} (loss "
                f"{m['test_loss']:.4f})")

    def results(self, m: dict[str, Any]) -> tuple[str, str]:
        return (f"held-out perplexity {_perplexity(m['test_loss'])}",
                f"train perplexity {_perplexity(m['train_loss'])}")


def _perplexity(loss: float) -> str:
    return f"{perplexity(loss):.2f}"


IMAGE, LANGUAGE = Kind(), LanguageModels()

# builders: (settings, device, vocabulary size or None) -> a fresh model on the device


def _mlp(cfg: dict[str, Any], device: Device, vocab: int | None) -> nn.Module:
    return MLPResNet(784, cfg["hidden_dim"], device=device)


def _cnn(cfg: dict[str, Any], device: Device, vocab: int | None) -> nn.Module:
    return MNISTConvNet(device=device)


def _resnet9(cfg: dict[str, Any], device: Device, vocab: int | None) -> nn.Module:
    return ResNet9(device=device)


def _language_model(cfg: dict[str, Any], device: Device, vocab: int | None) -> nn.Module:
    h = cfg["hidden_dim"]
    return LanguageModel(h, vocab, h, seq_model=cfg["model"], seq_len=LM_SEQ_LEN, device=device)


@dataclass(frozen=True)
class Model:
    """A model needle-train trains: `about` it for --help, its `title` in the header and the
    figure (formatted with the run's settings), its data set, kind and builder, its own
    `defaults` over the common settings, and the settings it `ignores` (given, they must be
    0)."""

    about: str
    title: str
    data: train_data.DataSet
    kind: Kind
    build: Callable[[dict[str, Any], Device, int | None], nn.Module]
    defaults: dict[str, Any] = field(default_factory=dict)
    ignores: tuple[str, ...] = ()

    def display(self, cfg: dict[str, Any]) -> str:
        """The model in words, e.g. "MLPResNet(hidden 256)"."""
        return self.title.format(**cfg)


# the course's language-model recipe (train_ptb): SGD lr 4 at a constant rate, batch 20,
# windows of LM_SEQ_LEN tokens; plus gradient clipping at norm 0.25, without which it diverges
_PTB_RECIPE = {"epochs": 5, "batch_size": 20, "optimizer": "sgd", "lr": 4.0, "weight_decay": 0.0,
               "hidden_dim": 100, "schedule": "constant", "augment": 0, "clip": 0.25}

# in the order --help lists them
REGISTRY: dict[str, Model] = {
    "mlp": Model("the course's MLPResNet", "MLPResNet(hidden {hidden_dim})", train_data.MNIST,
                 IMAGE, _mlp),
    # lr 0.01: the course's conv init draws weights sqrt(6) times wider than PyTorch's, and
    # with BatchNorm after each conv that only shrinks Adam's relative steps; on the built-in
    # set seeds 0, 1, 2 reach 98.86%, 98.89%, 98.75% (lr 0.003: 98.63%, 98.67%, 98.53%)
    "cnn": Model("MNISTConvNet, conv-BN-ReLU-pool blocks", "MNISTConvNet", train_data.MNIST,
                 IMAGE, _cnn, {"epochs": 15, "lr": 0.01}, ignores=("hidden_dim",)),
    "resnet9": Model("the course's ResNet9", "ResNet9", train_data.CIFAR10, IMAGE, _resnet9,
                     {"epochs": 10, "augment": 4}, ignores=("hidden_dim",)),
    "rnn": Model("the course's LanguageModel with an RNN", "LanguageModel(rnn, hidden "
                 "{hidden_dim})", train_data.PTB, LANGUAGE, _language_model, dict(_PTB_RECIPE),
                 ignores=("augment",)),
    "lstm": Model("the course's LanguageModel with an LSTM", "LanguageModel(lstm, hidden "
                  "{hidden_dim})", train_data.PTB, LANGUAGE, _language_model, dict(_PTB_RECIPE),
                  ignores=("augment",)),
    # the decoder-only transformer (embedding = feed-forward width = hidden_dim, 8 heads of
    # 32, one layer) trains with Adam instead
    "transformer": Model("the course's LanguageModel with a decoder-only Transformer",
                         "LanguageModel(transformer, hidden {hidden_dim})", train_data.PTB,
                         LANGUAGE, _language_model,
                         {"epochs": 5, "batch_size": 20, "optimizer": "adam", "lr": 0.001,
                          "weight_decay": 0.0, "hidden_dim": 64, "schedule": "cosine",
                          "augment": 0, "clip": 0.25},
                         ignores=("augment",)),
}
