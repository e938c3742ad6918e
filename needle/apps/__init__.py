"""The course applications: `simple_ml` (hw1, and hw4's CIFAR-10 and PTB loops), `mlp_resnet`
(hw2), `models` (hw4's ResNet9 and LanguageModel), `mnist_cnn`, `epoch_loop` (the one epoch
loop they share) and the `needle-train` CLI (`train` and its `train_*` modules, `checks`,
`curves`)."""
