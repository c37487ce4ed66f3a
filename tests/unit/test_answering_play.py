"""The look at every listed node (playbooks/answering.yml, issue 48) is a read: it runs in check
mode too, so `site.yml --check` on a cluster whose nodes answer goes on (a skipped wait is no
answer, and read as one it stopped the check of every cluster: "did not answer within 30 s")."""

from __future__ import annotations

import subprocess
import sys

from ansible_cli import ansible_cli

ANSIBLE_PLAYBOOK = ansible_cli("ansible-playbook")


def test_the_look_answers_in_check_mode_as_in_a_run(tmp_path, project):
    inv = tmp_path / "inv.yml"
    inv.write_text(
        "all:\n  children:\n    aml_nodes:\n      hosts:\n"
        + "".join(f"        n{i}:\n          ansible_connection: local\n"
                  f"          ansible_python_interpreter: {sys.executable}\n"
                  f"          aml_cluster: gpu\n          aml_node_rank: {i}\n          aml_node_state: idle\n"
                  f"          aml_private_ip: 10.0.0.{4 + i}\n" for i in range(2))
        + "    head:\n      hosts:\n        n0:\n    cluster_gpu:\n      hosts:\n        n0:\n        n1:\n")
    from project_copy import project_env
    for mode in ((), ("--check",)):
        res = subprocess.run([ANSIBLE_PLAYBOOK, "-i", str(inv), str(project / "playbooks" / "answering.yml"), *mode,
                              "-e", f"amlhpc_project_dir={project}"],
                             cwd=project, env=project_env(project), capture_output=True, text=True, timeout=180,
                             check=False)
        assert res.returncode == 0, (mode, res.stdout[-3000:] + res.stderr[-2000:])
        assert "but did not answer within" not in res.stdout, (mode, res.stdout[-3000:])
