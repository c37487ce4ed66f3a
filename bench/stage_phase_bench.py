#!/usr/bin/env python3
"""Controller CPU of a stage rerun per added node: this tree beside another checkout.

``playbooks/stage.yml`` on N nodes that are local connections, each with its own node-local
stage folder (``stage_shared: false``, balanced mode), against Azurite with the real azcopy:
a first run stages, then the rerun (nothing to do) is measured, ``--repeat`` times,
alternating between this tree and ``--compare`` (e.g. a worktree of 2.1.0). CPU is user+sys
of the ``ansible-playbook`` process tree (``bench/cpumeter.py``); on local connections the
nodes' side (the shell reads, any module) runs on this machine too, so it is counted. The
slope over the sizes is the CPU per added node.

    .venv/bin/python bench/stage_phase_bench.py --sizes 2,4,8 --repeat 3 --compare ../amlhpc-2.1.0

The other checkout needs its venv links (.venv, .tools) and its collection link
(.ci/bootstrap collection there).
"""

from __future__ import annotations

import argparse
import json
import os
import statistics
import sys
import tempfile
from pathlib import Path

ROOT = Path(__file__).resolve().parents[1]
sys.path.insert(0, str(ROOT / "bench"))
sys.path.insert(0, str(ROOT / "tests" / "integration"))
sys.path.insert(0, str(ROOT / "plugins" / "module_utils"))

import cpumeter  # noqa: E402
from conftest import ACCOUNT, ACCOUNT_KEY, _spawn_azurite, free_port  # noqa: E402

from amlhpc.data.cosmoflow_data import generate  # noqa: E402
from amlhpc.data.dataset_prep import compress_all, upload_prepared  # noqa: E402


def sas_for(endpoint: str, container: str) -> str:
    from datetime import datetime, timedelta, timezone

    from azure.storage.blob import ContainerSasPermissions, generate_container_sas
    now = datetime.now(timezone.utc)
    return generate_container_sas(ACCOUNT, container, account_key=ACCOUNT_KEY,
                                  permission=ContainerSasPermissions.from_string("rl"),
                                  start=now - timedelta(minutes=5), expiry=now + timedelta(hours=3))


def inventory(tree: Path, where: Path, nodes: int) -> Path:
    python = os.path.realpath(str(tree / ".venv" / "bin" / "python"))
    hosts = {f"node-{i}": {"aml_node_rank": i, "stage_dir": str(where / f"s{i}")} for i in range(nodes)}
    path = where / "inv.json"
    path.write_text(json.dumps({"all": {"vars": {
        "ansible_connection": "local", "ansible_python_interpreter": python, "stage_become": False,
        "stage_azcopy_install": False, "stage_azcopy_path": str(tree / ".tools" / "bin" / "azcopy")},
        "children": {"aml_nodes": {"hosts": hosts}}}}))
    return path


def run(tree: Path, inv: Path, extra: dict, sas: str) -> cpumeter.Measured:
    env = dict(os.environ, ANSIBLE_CONFIG=str(tree / "ansible.cfg"), ANSIBLE_FORCE_COLOR="0", BENCH_SAS=sas)
    return cpumeter.run([str(tree / ".venv" / "bin" / "ansible-playbook"), str(tree / "playbooks" / "stage.yml"),
                         "-i", str(inv), "-e", json.dumps(extra)], cwd=tree, env=env, timeout=1800)


def slope(points: list[tuple[int, float]]) -> float:
    n = len(points)
    mx = sum(x for x, _ in points) / n
    my = sum(y for _, y in points) / n
    den = sum((x - mx) ** 2 for x, _ in points)
    return sum((x - mx) * (y - my) for x, y in points) / den if den else 0.0


def main() -> None:
    ap = argparse.ArgumentParser(description=__doc__.splitlines()[0])
    ap.add_argument("--sizes", default="2,4,8")
    ap.add_argument("--repeat", type=int, default=3)
    ap.add_argument("--compare", default="", help="another checkout, measured beside this one")
    a = ap.parse_args()
    sizes = [int(x) for x in a.sizes.split(",")]
    trees = {"this tree": ROOT}
    if a.compare:
        trees["compare"] = Path(a.compare).resolve()
    cpumeter.become_subreaper()
    with tempfile.TemporaryDirectory(prefix="stage-phase-") as tmp:
        work = Path(tmp)
        port = free_port()
        (work / "azurite").mkdir()
        azurite = _spawn_azurite(port, work / "azurite")
        try:
            endpoint = f"http://127.0.0.1:{port}/{ACCOUNT}"
            generate(str(work / "raw"), train_universes=1, val_universes=1, cube=8)
            prepared = compress_all(str(work / "raw"), str(work / "gz"), prefix="v07")
            upload_prepared(prepared, endpoint, "bench", {"account_name": ACCOUNT, "account_key": ACCOUNT_KEY},
                            create_container=True)
            sas = sas_for(endpoint, "bench")
            extra = {"stage_account_url": endpoint, "stage_container": "bench", "stage_prefix": "v07",
                     "stage_mode": "balanced", "stage_sas": "{{ lookup('ansible.builtin.env', 'BENCH_SAS') }}"}
            print(f"{cpumeter.cpu_name()}; 128 files; reruns of playbooks/stage.yml, controller CPU (s)")
            results: dict[str, dict[int, list[float]]] = {name: {} for name in trees}
            for n in sizes:
                invs = {}
                for name, tree in trees.items():
                    where = work / name.replace(" ", "-") / str(n)
                    where.mkdir(parents=True)
                    invs[name] = inventory(tree, where, n)
                    first = run(tree, invs[name], extra, sas)
                    if first.returncode != 0:
                        sys.exit(f"{name}, {n} nodes: the first run failed:\n{first.stdout[-3000:]}")
                for _round in range(a.repeat):
                    for name, tree in trees.items():
                        m = run(tree, invs[name], extra, sas)
                        if m.returncode != 0 or "changed=1" in m.stdout:
                            sys.exit(f"{name}, {n} nodes: the rerun failed or changed:\n{m.stdout[-3000:]}")
                        results[name].setdefault(n, []).append(m.cpu)
            print("| nodes | " + " | ".join(trees) + " |")
            print("| --- |" + " --- |" * len(trees))
            for n in sizes:
                cells = [f"{statistics.median(results[k][n]):.2f} ({min(results[k][n]):.2f}-{max(results[k][n]):.2f})"
                         for k in trees]
                print(f"| {n} | " + " | ".join(cells) + " |")
            cells = [f"{slope([(n, statistics.median(results[k][n])) for n in sizes]):.3f} s" for k in trees]
            print("| **per added node** | " + " | ".join(cells) + " |")
        finally:
            os.killpg(azurite.pid, 15)
            azurite.wait(10)
            cpumeter.close_orphans()


if __name__ == "__main__":
    main()
