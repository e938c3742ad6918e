"""The course applications: `simple_ml` (hw1), `mlp_resnet` (hw2) and the `needle-train` CLI."""
