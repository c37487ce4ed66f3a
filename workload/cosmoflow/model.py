"""The CosmoFlow 3D CNN of the MLPerf HPC reference, in PyTorch.

The reference (mlcommons/hpc ``cosmoflow/models/cosmoflow.py`` ``build_model``, Keras) is::

    n_conv_layers x [Conv3D(conv_size * 2**i, kernel_size, padding="same"), LeakyReLU, MaxPool3D(2)]
    Flatten
    Dense(fc1_size), LeakyReLU, Dropout
    Dense(fc2_size), LeakyReLU, Dropout
    Dense(target_size, tanh) * 1.2

with the current MLPerf configuration (``configs/cosmo.yaml``) ``conv_size=32, kernel_size=3,
n_conv_layers=5, fc1=128, fc2=64, dropout=0.5`` on 128^3 x 4 inputs (:data:`REFERENCE`,
8,907,556 parameters). The v0.7 shape with kernel 2 (5,597,604 parameters) is :data:`V07`; the
seed's original CosmoFlow shape (7 convolutions) is ``n_conv_layers=7``.

Keras equivalence, checked against outputs TensorFlow computed once
(``tests/workload/fixtures/reference/``):

* LeakyReLU slope 0.3; glorot-uniform weights and zero biases (:func:`keras_init`);
* "same" padding is left to the framework (``Conv3d(padding="same")``: symmetric for odd
  kernels, no copy; for even kernels the extra zero goes after, as in Keras);
* Flatten in Keras' (D, H, W, C) order, so a Keras Dense kernel transfers as it is (transposed).

Inputs are channel-last cubes ``(N, D, D, D, C)`` as the TFRecords store them; the model views
them as ``(N, C, D, D, D)`` in the ``channels_last_3d`` memory format (no copy), which is what
cuDNN's fastest 3D kernels want.
"""

from __future__ import annotations

from dataclasses import asdict, dataclass

import torch
from torch import nn


@dataclass(frozen=True)
class ModelConfig:
    """Shape of the network. Defaults are the current MLPerf HPC reference configuration."""

    cube: int = 128
    channels: int = 4
    target_size: int = 4
    conv_size: int = 32
    kernel_size: int = 3
    n_conv_layers: int = 5
    fc1_size: int = 128
    fc2_size: int = 64
    dropout: float = 0.5
    leaky_slope: float = 0.3

    def __post_init__(self) -> None:
        if self.cube % (2 ** self.n_conv_layers):
            raise ValueError(f"cube {self.cube} is not divisible by 2**n_conv_layers = "
                             f"{2 ** self.n_conv_layers}: each conv layer halves the cube")
        for name in ("cube", "channels", "target_size", "conv_size", "kernel_size", "n_conv_layers",
                     "fc1_size", "fc2_size"):
            if getattr(self, name) < 1:
                raise ValueError(f"{name} must be >= 1, got {getattr(self, name)}")
        if not 0.0 <= self.dropout < 1.0:
            raise ValueError(f"dropout must be in [0, 1), got {self.dropout}")

    @property
    def flat_size(self) -> int:
        side = self.cube // 2 ** self.n_conv_layers
        return self.conv_size * 2 ** (self.n_conv_layers - 1) * side ** 3

    def to_dict(self) -> dict:
        return asdict(self)


REFERENCE = ModelConfig()
"""The current MLPerf HPC CosmoFlow configuration (kernel 3; 8,907,556 parameters on 128^3 x 4)."""

V07 = ModelConfig(kernel_size=2)
"""The MLPerf HPC v0.7 shape the seed used (kernel 2; 5,597,604 parameters)."""

SEED_SHAPE = ModelConfig(kernel_size=2, n_conv_layers=7)
"""The original CosmoFlow shape: 7 convolutions (128 -> 1) and 3 dense layers."""

SHAPES = {"reference": REFERENCE, "v0.7": V07}


class CosmoFlow(nn.Module):
    """CosmoFlow regression network: cube of counts -> 4 cosmological parameters in [-1.2, 1.2]."""

    def __init__(self, config: ModelConfig = REFERENCE) -> None:
        super().__init__()
        self.config = config
        layers: list[nn.Module] = []
        in_ch = config.channels
        for i in range(config.n_conv_layers):
            out_ch = config.conv_size * 2 ** i
            layers += [nn.Conv3d(in_ch, out_ch, config.kernel_size, padding="same"),
                       nn.LeakyReLU(config.leaky_slope),
                       nn.MaxPool3d(2)]
            in_ch = out_ch
        self.features = nn.Sequential(*layers)
        self.head = nn.Sequential(
            nn.Linear(config.flat_size, config.fc1_size), nn.LeakyReLU(config.leaky_slope),
            nn.Dropout(config.dropout),
            nn.Linear(config.fc1_size, config.fc2_size), nn.LeakyReLU(config.leaky_slope),
            nn.Dropout(config.dropout),
            nn.Linear(config.fc2_size, config.target_size), nn.Tanh())
        keras_init(self)

    def forward(self, x: torch.Tensor) -> torch.Tensor:
        # (N, D, H, W, C) -> (N, C, D, H, W): a view, channels_last_3d in memory.
        features = self.features(x.permute(0, 4, 1, 2, 3))
        # Keras flattens (D, H, W, C); from channels_last_3d memory this is a view.
        flat = features.permute(0, 2, 3, 4, 1).flatten(1)
        return self.head(flat) * 1.2


def keras_init(model: nn.Module) -> None:
    """Keras' defaults: glorot-uniform kernels (fan = kernel volume x channels), zero biases."""
    for m in model.modules():
        if isinstance(m, (nn.Conv3d, nn.Linear)):
            nn.init.xavier_uniform_(m.weight)
            nn.init.zeros_(m.bias)


def parameter_count(model: nn.Module) -> int:
    return sum(p.numel() for p in model.parameters())
