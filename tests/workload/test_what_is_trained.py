"""What a training run trains, watched from outside the training code (issue 44).

Each test runs ``train.main`` for real and watches it through torch's public global hooks
(``torch.optim.optimizer.register_optimizer_step_pre_hook``/``..._post_hook``,
``torch.nn.modules.module.register_module_forward_pre_hook``/``..._forward_hook``): nothing of
the training is replaced. What it sees is compared with the MLPerf HPC reference
(mlcommons/hpc ``cosmoflow/``), computed here independently:

* the optimizer: Keras SGD, ``v = 0.9 v - lr g; w += v`` from the weights it moved, the rate of
  each step against the reference's schedule, one set of momentum buffers for the whole run,
  no weight decay (the log says ``opt_weight_decay`` 0);
* the input: each sample the model is fed against ``log(x + 1)`` of the file's int16 counts
  (``data/cosmo.py`` ``_parse_data``), so the log is applied exactly once, on the CPU path and on
  the DALI path (DALI's CPU pipeline here: no GPU), in the CPU path's order;
* dropout after both hidden dense layers at the configured rate in training, none in evaluation;
* the MAE: Keras' ``mae`` metric, the mean of |prediction - target| over every value, of the
  saved model over the validation files;
* the early stop: at the first epoch whose validation MAE is at most ``--target-mae``
  (``StopAtTargetCallback`` on ``val_mean_absolute_error``).

None of them runs with ``--dropout 0``.
"""

from __future__ import annotations

import json
from pathlib import Path

import numpy as np
import pytest
import torch
from amlhpc.data.tfrecord import decode_example, iter_records, open_maybe_gzip
from conftest import tiny
from cosmoflow import dali_input as cdali
from cosmoflow import data as cdata
from cosmoflow import train
from cosmoflow.model import CosmoFlow, ModelConfig
from torch import nn
from torch.nn.modules.module import register_module_forward_hook, register_module_forward_pre_hook
from torch.optim.optimizer import register_optimizer_step_post_hook, register_optimizer_step_pre_hook

DROPOUT = 0.25


def counts_of(path: str, cube: int = 16) -> tuple[np.ndarray, np.ndarray]:
    """(int16 counts (D, D, D, 4), y) of a one-record file, parsed here with numpy."""
    with open_maybe_gzip(path) as stream:
        ((_offset, record),) = list(iter_records(stream, path))
    example = decode_example(record)
    x = np.frombuffer(bytes(example["x"]), dtype="<i2").reshape(cube, cube, cube, 4)
    return x, np.asarray(example["y"], dtype=np.float32)


def reference_inputs(data_dir: Path, split: str) -> tuple[list[str], torch.Tensor, torch.Tensor]:
    """(file names, the reference's input tensors, targets) of a split, in file-name order:
    ``tf.math.log(tf.cast(x, tf.float32) + 1.)`` of each file's counts."""
    names, xs, ys = [], [], []
    for path in cdata.list_files(str(data_dir), split):
        counts, y = counts_of(path)
        names.append(Path(path).name)
        xs.append(np.log(counts.astype(np.float32) + np.float32(1.0)))
        ys.append(y)
    return names, torch.from_numpy(np.stack(xs)), torch.from_numpy(np.stack(ys))


def match(fed: torch.Tensor, refs: torch.Tensor, names: list[str]) -> list[str]:
    """The file each fed sample is the reference transform of; fails on one that is none's."""
    out = []
    for sample in fed:
        err = (refs - sample.float()).abs().flatten(1).amax(1)
        best = int(err.argmin())
        assert err[best] <= 1e-5, (
            f"the model was fed a tensor that is no sample's log(x + 1) (closest: {names[best]}, max error "
            f"{float(err[best]):.3g}; fed values {float(sample.min()):.3g}..{float(sample.max()):.3g}, that "
            f"sample's log(x + 1) {float(refs[best].min()):.3g}..{float(refs[best].max()):.3g})")
        out.append(names[best])
    return out


class Watch:
    """Records, through torch's global hooks, every optimizer step (weights, gradients, groups,
    state before and after), every input of the CosmoFlow model and every dropout call."""

    def __init__(self) -> None:
        self.steps: list[dict] = []
        self.forwards: list[dict] = []

    def __enter__(self) -> Watch:
        self.handles = [register_optimizer_step_pre_hook(self._before), register_optimizer_step_post_hook(self._after),
                        register_module_forward_pre_hook(self._input), register_module_forward_hook(self._output)]
        return self

    def __exit__(self, *exc) -> None:
        for handle in self.handles:
            handle.remove()

    @staticmethod
    def _params(opt) -> list[torch.Tensor]:
        return [p for group in opt.param_groups for p in group["params"]]

    def _before(self, opt, _args, _kwargs) -> None:
        params = self._params(opt)
        self.steps.append({
            "optimizer": id(opt), "groups": [{k: v for k, v in g.items() if k != "params"} for g in opt.param_groups],
            "w": [p.detach().clone() for p in params], "g": [p.grad.detach().clone() for p in params]})

    def _after(self, opt, _args, _kwargs) -> None:
        params = self._params(opt)
        self.steps[-1]["w_after"] = [p.detach().clone() for p in params]
        self.steps[-1]["state"] = [{k: v.detach().clone() for k, v in opt.state[p].items() if torch.is_tensor(v)}
                                   for p in params]

    def _input(self, module, args) -> None:
        if isinstance(module, CosmoFlow):
            self.forwards.append({"training": module.training, "x": args[0].detach().clone(), "dropout": []})

    def _output(self, module, args, output) -> None:
        if isinstance(module, nn.Dropout) and self.forwards:
            self.forwards[-1]["dropout"].append({"p": module.p, "training": module.training,
                                                 "in": args[0].detach().clone(), "out": output.detach().clone()})


def run(data_dir: Path, out: Path, *args: str) -> Watch:
    with Watch() as watch:
        assert train.main(["--data-dir", str(data_dir), "--output-dir", str(out), *args]) == 0
    return watch


def epochs_of(out: Path) -> list[dict]:
    return [r for r in (json.loads(line) for line in (out / "metrics.jsonl").read_text().splitlines())
            if r["kind"] == "epoch"]


def mllog(out: Path) -> list[dict]:
    return [json.loads(line[len(":::MLLOG "):]) for line in (out / "mlperf.log").read_text().splitlines()]


def test_every_step_applies_the_references_rate_and_momentum_without_weight_decay(tiny_data, tmp_path, master_port):
    """4 epochs of 4 steps: warm-up over 2 epochs from 0.01 to the peak 0.02 (batch 4, base batch
    2), then the peak, then half of it after the boundary epoch 2 (``e < epoch``: from epoch 3)."""
    out = tmp_path / "o"
    watch = run(tiny_data, out, "--epochs", "4", "--n-train", "16", "--n-valid", "8", "--batch-size", "4",
                *tiny(dropout=str(DROPOUT), lr="0.01", base_batch_size="2", warmup_epochs="2"), "--decay", "2:0.5")
    expected = [0.01] * 4 + [0.015] * 4 + [0.02] * 4 + [0.01] * 4
    assert len(watch.steps) == len(expected)
    assert len({s["optimizer"] for s in watch.steps}) == 1, "a new optimizer (and momentum buffers) during the run"
    for k, (s, lr) in enumerate(zip(watch.steps, expected)):
        (group,) = s["groups"]
        assert group["lr"] == pytest.approx(lr, rel=1e-12), f"step {k}: the optimizer used lr {group['lr']}, not {lr}"
        assert group["momentum"] == 0.9, f"step {k}: momentum {group['momentum']} (the reference's: 0.9)"
        assert group.get("weight_decay", 0) == 0, f"step {k}: weight decay {group['weight_decay']}"
    # What the steps did to the weights: Keras' SGD with those rates, from the gradients seen.
    velocity = [torch.zeros_like(w) for w in watch.steps[0]["w"]]
    for k, (s, lr) in enumerate(zip(watch.steps, expected)):
        for i, (w, g, after, state) in enumerate(zip(s["w"], s["g"], s["w_after"], s["state"])):
            velocity[i] = 0.9 * velocity[i] - lr * g
            torch.testing.assert_close(after - w, velocity[i], rtol=1e-4, atol=1e-7,
                                       msg=lambda m, k=k, i=i: f"step {k}, parameter {i}: {m}")
            (buffer,) = state.values()  # the momentum buffer, what --resume carries on
            torch.testing.assert_close(buffer, after - w, rtol=1e-4, atol=1e-7)
    assert any(v.abs().sum() > 0 for v in velocity)
    values = {e["key"]: e["value"] for e in mllog(out) if e["event_type"] == "POINT_IN_TIME"}
    assert values["opt_weight_decay"] == 0.0 and values["opt_base_learning_rate"] == pytest.approx(0.02)
    assert values["opt_learning_rate_warmup_epochs"] == 2


def test_the_optimizer_defaults_are_the_references():
    """configs/cosmo.yaml: SGD, momentum 0.9, base lr 0.001 at batch 64, 4 warm-up epochs;
    models/cosmoflow.py: dropout 0.5; train: target_mae 0.124."""
    args = train.build_parser().parse_args([])
    assert (args.momentum, args.lr, args.base_batch_size, args.warmup_epochs) == (0.9, 0.001, 64, 4)
    assert args.dropout == 0.5 and args.target_mae == 0.124


@pytest.mark.parametrize("path", ["cpu", "dali"])
def test_a_step_feeds_the_model_log1p_of_the_counts_once_in_the_cpu_paths_order(
        path, tiny_data, tmp_path, master_port):
    """Every tensor the model is fed, in training and evaluation, is the reference's
    ``log(x + 1)`` of one sample's counts; each epoch feeds every training sample once, another
    order the next epoch, and the DALI path feeds the CPU path's order (the same seed rules)."""
    if path == "dali" and cdali.unavailable([], cuda=True) is not None:
        pytest.skip("nvidia-dali is not installed (requirements-workload.txt)")
    args = ["--epochs", "2", "--n-train", "32", "--n-valid", "16", "--batch-size", "4", "--seed", "5",
            *tiny(dropout=str(DROPOUT))]
    watch = run(tiny_data, tmp_path / path, *args, "--input", path)
    names, refs, _ys = reference_inputs(tiny_data, "train")
    vnames, vrefs, _vys = reference_inputs(tiny_data, "validation")
    fed = [match(f["x"], refs, names) for f in watch.forwards if f["training"]]
    evaluated = [match(f["x"], vrefs, vnames) for f in watch.forwards if not f["training"]]
    orders = [sum(fed[:8], []), sum(fed[8:], [])]
    assert len(fed) == 16 and all(len(o) == 32 for o in orders)
    assert sorted(orders[0]) == sorted(orders[1]) == names[:32], "not the first 32 files, each once an epoch"
    assert orders[0] != orders[1], "the same order in both epochs"
    assert sum(evaluated, []) == vnames[:16] * 2
    if path == "dali":
        cpu = run(tiny_data, tmp_path / "cpu", *args, "--input", "cpu")
        assert [match(f["x"], refs, names) for f in cpu.forwards if f["training"]] == fed


def test_dropout_is_on_in_training_at_the_configured_rate_and_off_in_evaluation(tiny_data, tmp_path, master_port):
    """Two epochs, so the training after the first evaluation is watched too."""
    watch = run(tiny_data, tmp_path / "o", "--epochs", "2", "--n-train", "32", "--n-valid", "16", "--batch-size",
                "4", *tiny(dropout=str(DROPOUT)))
    training = [f for f in watch.forwards if f["training"]]
    evaluation = [f for f in watch.forwards if not f["training"]]
    assert len(training) == 16 and len(evaluation) == 8
    zeroed = kept = 0
    for k, f in enumerate(training):
        assert [(d["p"], d["training"]) for d in f["dropout"]] == [(DROPOUT, True)] * 2, f"training forward {k}"
        for d in f["dropout"]:
            live = d["in"] != 0
            dropped = live & (d["out"] == 0)
            zeroed += int(dropped.sum())
            kept += int((live & ~dropped).sum())
            torch.testing.assert_close(d["out"][live & ~dropped], d["in"][live & ~dropped] / (1 - DROPOUT))
    # 16 steps x 4 samples x (16 + 8) units: a binomial share, 0.011 its standard deviation.
    assert zeroed / (zeroed + kept) == pytest.approx(DROPOUT, abs=0.05), (zeroed, kept)
    for k, f in enumerate(evaluation):
        assert [(d["p"], d["training"]) for d in f["dropout"]] == [(DROPOUT, False)] * 2, f"evaluation forward {k}"
        for d in f["dropout"]:
            assert torch.equal(d["out"], d["in"])


def test_the_reported_mae_is_the_mean_absolute_error_over_every_value(tiny_data, tmp_path, master_port):
    """The saved model (last.pt, written after the evaluation), the validation files read here:
    the MAE and MSE over all 16 x 4 values are what summary.json, metrics.jsonl and the MLPerf
    log's eval_error report."""
    out = tmp_path / "o"
    run(tiny_data, out, "--epochs", "2", "--n-train", "32", "--n-valid", "16", "--batch-size", "4",
        *tiny(dropout=str(DROPOUT)))
    state = torch.load(out / "checkpoints" / "last.pt", weights_only=False)
    model = CosmoFlow(ModelConfig(**state["config"]))
    model.load_state_dict(state["model"])
    model.eval()
    _names, xs, ys = reference_inputs(tiny_data, "validation")
    with torch.no_grad():
        err = (model(xs[:16]).double() - ys[:16].double())
    mae, mse = float(err.abs().mean()), float(err.pow(2).mean())
    assert err.numel() == 64
    summary = json.loads((out / "summary.json").read_text())
    assert summary["val_mae"] == pytest.approx(mae, rel=1e-5)
    assert summary["val_loss"] == pytest.approx(mse, rel=1e-5)
    assert epochs_of(out)[-1]["val_mae"] == summary["val_mae"]
    errors = [e["value"] for e in mllog(out) if e["key"] == "eval_error"]
    assert len(errors) == 2 and errors[-1] == pytest.approx(mae, rel=1e-5)


def test_training_stops_at_the_first_epoch_whose_validation_mae_reaches_the_target(
        tiny_data, tmp_path, master_port, monkeypatch):
    """A run with --target-mae 0 trains every epoch; the same run with a target stops at the
    first epoch whose validation MAE is at most the target (equal included), not at one whose
    validation loss or training loss is, and logs run_stop success."""
    from conftest import free_port

    args = ["--epochs", "6", "--batch-size", "4", "--n-valid", "16", *tiny(dropout=str(DROPOUT))]
    free = tmp_path / "free"
    run(tiny_data, free, *args, "--target-mae", "0")
    epochs = epochs_of(free)
    assert len(epochs) == 6
    assert [e["metadata"]["status"] for e in mllog(free) if e["key"] == "run_stop"] == ["aborted"]
    mae = [e["val_mae"] for e in epochs]
    # The epoch to stop at: its MAE is below every earlier one, and an earlier epoch's validation
    # loss, and an earlier epoch's training loss, are already below it: stopping on either would
    # stop too early.
    stop = next(k for k in range(1, 6) if mae[k] < min(mae[:k])
                and min(e["val_loss"] for e in epochs[:k]) <= mae[k]
                and min(e["train_loss"] for e in epochs[:k]) <= mae[k])
    monkeypatch.setenv("MASTER_PORT", str(free_port()))
    target = tmp_path / "target"
    run(tiny_data, target, *args, "--target-mae", repr(mae[stop]))
    stopped = epochs_of(target)
    assert [e["val_mae"] for e in stopped] == mae[:stop + 1], f"stopped after epoch {len(stopped) - 1}, not {stop}"
    summary = json.loads((target / "summary.json").read_text())
    assert summary["target_reached"] is True and summary["epoch"] == stop
    assert [e["metadata"]["status"] for e in mllog(target) if e["key"] == "run_stop"] == ["success"]
