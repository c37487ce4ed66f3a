"""Per-node launcher: train on this node only if the run's health gate kept it.

AzureML places a job on nodes it chooses and has no way to leave one out, so where the health
gate excluded nodes (``healthcheck_on_failure: exclude``) the job starts this launcher once on
every node (one process per node) and it decides there:

    python launch.py --verdict /etc/amlhpc/health-verdict.json --verdict-id ID --nproc-per-node 8 \\
        -- train.py --data-dir /data/cosmoflow ...

It reads its node's verdict file (written by the healthcheck role). A node marked ``good``
joins torchrun's elastic rendezvous (c10d) on the first good node, with the good nodes'
count as ``--nnodes MIN:MAX``; a node marked ``excluded``, a node with no file or with the file
of another run (its ``id`` is not the job's) ends at once with exit code 0, without training.
"""

from __future__ import annotations

import argparse
import json
import os
import sys
from typing import Any

HERE = os.path.dirname(os.path.abspath(__file__))


def decide(verdict: dict[str, Any] | None, verdict_id: str, where: str) -> str | None:
    """None when this node trains, else the one sentence saying why it does not."""
    if verdict is None:
        return (f"no health verdict at {where}: the run's health gate did not check this node, so it does "
                "not train (the job trains on the nodes the gate kept)")
    if str(verdict.get("id")) != verdict_id:
        return (f"the health verdict at {where} is from another run (id {verdict.get('id')}, the job's is "
                f"{verdict_id}): this node was not checked by this run's gate, so it does not train")
    if verdict.get("status") != "good":
        reasons = "; ".join(verdict.get("reasons") or []) or "no reason given"
        return (f"node {verdict.get('node')} was excluded by the health gate ({reasons}): it does not train; "
                "the other nodes train without it")
    return None


def torchrun_argv(verdict: dict[str, Any], nproc_per_node: int, script: list[str],
                  python: str = sys.executable) -> list[str]:
    """torchrun with the elastic rendezvous of the good nodes."""
    if not script:
        raise ValueError("give the training script and its arguments after --")
    path = script[0] if os.path.isabs(script[0]) else os.path.join(HERE, script[0])
    return [python, "-m", "torch.distributed.run",
            "--nnodes", f"{int(verdict['min_nodes'])}:{int(verdict['max_nodes'])}",
            "--nproc-per-node", str(int(nproc_per_node)),
            "--rdzv-backend", "c10d", "--rdzv-endpoint", str(verdict["rendezvous"]),
            "--rdzv-id", f"amlhpc-{verdict['id']}", "--max-restarts", "0",
            path, *script[1:]]


def read(path: str) -> dict[str, Any] | None:
    """The node's verdict, or None where it has none: no file, or a folder in its place (docker
    makes one where a bind-mounted file is missing on the node: a node the gate or the last look
    before submit could not reach got no file), or a file that is not a verdict."""
    try:
        with open(path, encoding="utf-8") as f:
            verdict = json.load(f)
    except (FileNotFoundError, IsADirectoryError, NotADirectoryError, PermissionError, ValueError):
        return None
    return verdict if isinstance(verdict, dict) else None


def main(argv: list[str] | None = None) -> int:
    p = argparse.ArgumentParser(description=__doc__.split("\n\n", 1)[0])
    p.add_argument("--verdict", required=True, help="this node's verdict file")
    p.add_argument("--verdict-id", required=True, help="the id of the verdict the job was submitted with")
    p.add_argument("--nproc-per-node", type=int, default=1)
    p.add_argument("script", nargs=argparse.REMAINDER, help="-- then the training script and its arguments")
    args = p.parse_args(argv)
    script = args.script[1:] if args.script[:1] == ["--"] else args.script
    verdict = read(args.verdict)
    why = decide(verdict, args.verdict_id, args.verdict)
    if why:
        print(f"[launch] {why}", flush=True)
        return 0
    assert verdict is not None
    argv_ = torchrun_argv(verdict, args.nproc_per_node, script)
    print(f"[launch] node {verdict['node']} trains: {verdict['min_nodes']} node(s) meet at {verdict['rendezvous']}",
          flush=True)
    os.execv(argv_[0], argv_)
    return 1  # not reached


if __name__ == "__main__":
    sys.exit(main())
