"""Equivalence with the MLPerf HPC reference Keras model: outputs TensorFlow computed once
(fixtures/reference: how they were made is in its README)."""

from __future__ import annotations

import json
import sys
from pathlib import Path

import numpy as np
import pytest
import torch
from cosmoflow.model import CosmoFlow, ModelConfig
from cosmoflow.schedule import KerasSGD

FIXTURE = Path(__file__).parent / "fixtures" / "reference"
sys.path.insert(0, str(FIXTURE))
from common import CASES, inputs, keras_weights

REFERENCE = json.loads((FIXTURE / "reference.json").read_text())["cases"]


def keras_shape(p: torch.Tensor) -> tuple[int, ...]:
    if p.dim() == 5:  # torch (out, in, k, k, k) <- Keras (k, k, k, in, out)
        return (*p.shape[2:], p.shape[1], p.shape[0])
    if p.dim() == 2:  # torch (out, in) <- Keras (in, out)
        return (p.shape[1], p.shape[0])
    return tuple(p.shape)


def from_keras(value: np.ndarray, p: torch.Tensor) -> torch.Tensor:
    t = torch.from_numpy(value)
    if p.dim() == 5:
        return t.permute(4, 3, 0, 1, 2)
    return t.T if p.dim() == 2 else t


def model_with_reference_weights(case: dict) -> CosmoFlow:
    cfg = ModelConfig(cube=case["cube"], conv_size=case["conv_size"], kernel_size=case["kernel_size"],
                      n_conv_layers=case["n_conv_layers"], fc1_size=case["fc1_size"],
                      fc2_size=case["fc2_size"], dropout=0.0)
    model = CosmoFlow(cfg)
    params = [p for m in model.modules() if isinstance(m, (torch.nn.Conv3d, torch.nn.Linear))
              for p in (m.weight, m.bias)]
    assert [tuple(p.shape) for p in params] == [tuple(p.shape) for p in model.parameters()]
    with torch.no_grad():
        for p, value in zip(params, keras_weights(case, [keras_shape(p) for p in params])):
            p.copy_(from_keras(value, p))
    return model


@pytest.mark.parametrize("name", sorted(CASES))
def test_forward_and_keras_sgd_match_tensorflow(name):
    torch.manual_seed(0)
    case, ref = CASES[name], REFERENCE[name]
    model = model_with_reference_weights(case)
    counts, y = inputs(case)
    x, y = torch.log1p(torch.from_numpy(counts).float()), torch.from_numpy(y)
    assert sum(p.numel() for p in model.parameters()) == ref["params"]
    model.eval()
    with torch.no_grad():
        np.testing.assert_allclose(model(x).numpy(), ref["forward"], rtol=1e-4, atol=2e-6)
    model.train()
    opt = KerasSGD(model.parameters(), lr=0.01, momentum=0.9)
    losses = []
    for lr in case["lrs"]:
        for group in opt.param_groups:
            group["lr"] = lr
        loss = torch.nn.functional.mse_loss(model(x), y)
        opt.zero_grad()
        loss.backward()
        opt.step()
        losses.append(loss.item())
    # Three steps move the outputs by ~1; float32 round-off across frameworks stays below these
    # tolerances, PyTorch's own SGD momentum (lr outside the velocity) lands 0.07 / 0.5 away.
    np.testing.assert_allclose(losses, ref["losses"], rtol=2e-3)
    model.eval()
    with torch.no_grad():
        np.testing.assert_allclose(model(x).numpy(), ref["after_training"], rtol=0, atol=2e-2)


def test_channels_last_3d_gives_the_same_outputs():
    case = CASES["kernel3"]
    model = model_with_reference_weights(case).eval()
    x = torch.log1p(torch.from_numpy(inputs(case)[0]).float())
    with torch.no_grad():
        plain = model(x)
        cl = model.to(memory_format=torch.channels_last_3d)(x)
    torch.testing.assert_close(cl, plain, rtol=1e-5, atol=1e-6)
