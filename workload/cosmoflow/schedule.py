"""The reference's learning-rate schedule and optimizer update (mlcommons/hpc ``cosmoflow``).

``utils/optimizers.py`` ``_lr_schedule`` sets the rate once per epoch (a Keras
``LearningRateScheduler``; ``epoch`` counts from 0)::

    epoch < n_warmup_epochs:  base_lr + epoch * (peak_lr - base_lr) / n_warmup_epochs
    otherwise:                peak_lr * factor of the latest decay boundary e with e < epoch

with ``peak_lr = base_lr * global_batch / base_batch_size`` (linear scaling). Note the strict
``e < epoch``: the decay at boundary 32 applies from epoch 33 on.

The optimizer is Keras SGD with momentum, whose velocity carries the learning rate::

    v = momentum * v - lr * g;   w = w + v

(PyTorch's SGD keeps ``v = momentum * v + g; w = w - lr * v``, which differs whenever the rate
changes: at every warm-up epoch and decay boundary.) :class:`KerasSGD` is the Keras update.
"""

from __future__ import annotations

from collections.abc import Sequence

import torch


def parse_decay(text: str) -> list[tuple[float, float]]:
    """``"32:0.25,64:0.125"`` -> ``[(32.0, 0.25), (64.0, 0.125)]``."""
    out = []
    for part in filter(None, (x.strip() for x in text.split(","))):
        epoch, _unused, factor = part.partition(":")
        out.append((float(epoch), float(factor)))
    return sorted(out)


def learning_rate(epoch: int, peak: float, base: float, warmup: float,
                  decay: Sequence[tuple[float, float]]) -> float:
    """The reference's rate for (0-based) ``epoch``: linear warm-up by epoch, then step decay."""
    if epoch < warmup:
        return epoch * (peak - base) / warmup + base
    factor, at = 1.0, 0.0
    for e, d in decay:
        if at <= e < epoch:
            at, factor = e, d
    return peak * factor


class KerasSGD(torch.optim.Optimizer):
    """SGD with momentum as Keras does it: ``v = m v - lr g; w += v`` (no weight decay)."""

    def __init__(self, params, lr: float = 0.01, momentum: float = 0.0) -> None:
        if lr < 0 or not 0 <= momentum < 1:
            raise ValueError(f"lr must be >= 0 and momentum in [0, 1), got {lr}, {momentum}")
        super().__init__(params, {"lr": lr, "momentum": momentum})

    @torch.no_grad()
    def step(self, closure=None):  # type: ignore[override]
        loss = None
        if closure is not None:
            with torch.enable_grad():
                loss = closure()
        for group in self.param_groups:
            params = [p for p in group["params"] if p.grad is not None]
            if not params:
                continue
            grads = [p.grad for p in params]
            bufs = []
            for p in params:
                state = self.state[p]
                if "velocity" not in state:
                    state["velocity"] = torch.zeros_like(p, memory_format=torch.preserve_format)
                bufs.append(state["velocity"])
            torch._foreach_mul_(bufs, group["momentum"])
            torch._foreach_add_(bufs, grads, alpha=-group["lr"])
            torch._foreach_add_(params, bufs)
        return loss
