from __future__ import annotations

import pytest
import torch
from cosmoflow.model import REFERENCE, SEED_SHAPE, V07, CosmoFlow, ModelConfig, parameter_count


def expected_params(cfg: ModelConfig) -> int:
    """Conv3D(k^3 * in * out + out) per layer, then three dense layers: counted by hand."""
    total, in_ch = 0, cfg.channels
    for i in range(cfg.n_conv_layers):
        out = cfg.conv_size * 2 ** i
        total += cfg.kernel_size ** 3 * in_ch * out + out
        in_ch = out
    flat = in_ch * (cfg.cube // 2 ** cfg.n_conv_layers) ** 3
    for a, b in ((flat, cfg.fc1_size), (cfg.fc1_size, cfg.fc2_size), (cfg.fc2_size, cfg.target_size)):
        total += a * b + b
    return total


def test_reference_parameter_count():
    assert REFERENCE.kernel_size == 3
    assert parameter_count(CosmoFlow(REFERENCE)) == expected_params(REFERENCE) == 8_907_556
    assert parameter_count(CosmoFlow(V07)) == expected_params(V07) == 5_597_604


def test_keras_initialisation():
    torch.manual_seed(0)
    model = CosmoFlow(REFERENCE)
    for m in model.modules():
        if isinstance(m, (torch.nn.Conv3d, torch.nn.Linear)):
            assert torch.count_nonzero(m.bias) == 0
            fan_in = m.weight[0].numel()
            fan_out = m.weight.shape[0] * m.weight[0, 0].numel()
            bound = (6.0 / (fan_in + fan_out)) ** 0.5
            assert m.weight.abs().max() <= bound
            assert m.weight.abs().max() > 0.95 * bound  # uniform up to the glorot bound


def test_seed_shape_is_seven_convs_and_three_dense():
    model = CosmoFlow(SEED_SHAPE)
    convs = [m for m in model.modules() if isinstance(m, torch.nn.Conv3d)]
    dense = [m for m in model.modules() if isinstance(m, torch.nn.Linear)]
    assert len(convs) == 7 and len(dense) == 3
    assert dense[0].in_features == 32 * 2 ** 6  # 128 halved seven times is 1
    assert parameter_count(model) == expected_params(SEED_SHAPE)


def test_reference_shapes_on_a_full_size_cube():
    torch.manual_seed(0)
    model = CosmoFlow(REFERENCE).eval()
    x = torch.rand(1, 128, 128, 128, 4)  # channel-last, as the TFRecords store it
    with torch.no_grad():
        features = model.features(x.permute(0, 4, 1, 2, 3))
        out = model(x)
    assert features.shape == (1, 512, 4, 4, 4)
    assert out.shape == (1, 4)
    assert out.abs().max() <= 1.2


def test_keras_same_padding_keeps_the_cube_size():
    for kernel in (2, 3):
        cfg = ModelConfig(cube=8, conv_size=2, n_conv_layers=1, kernel_size=kernel)
        conv = CosmoFlow(cfg).features[0]
        assert conv(torch.zeros(1, 4, 8, 8, 8)).shape == (1, 2, 8, 8, 8)


def test_cube_must_survive_the_poolings():
    with pytest.raises(ValueError, match="not divisible"):
        ModelConfig(cube=48, n_conv_layers=5)
