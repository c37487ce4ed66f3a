"""The recovery tests' set-up on the AmlCompute twin, in one place (test_twin_node_loss.py,
test_twin_resume.py, test_twin_head_cut.py).

Five nodes (four train, one spare: the health gate's ``exclude`` with ``healthcheck_spare_nodes:
1``), azcopy in the nodes' image as on the Azure HPC images, the data set generated and uploaded to
Azurite, the job's checkpoints copied to Azurite's ``checkpoints`` container by the job (with a
SAS, one HTTP request from the training process), the job submitted with the azure_ai_ml backend to
the twin's AzureML stand-in. ``listing_lag`` is the environment's: AmlCompute keeps a lost node
listed in its old state that long.
"""

from __future__ import annotations

import contextlib
import os
import subprocess
import sys
from collections.abc import Iterator
from dataclasses import dataclass
from pathlib import Path

from conftest import ACCOUNT_KEY, _spawn_azurite, free_port
from project_copy import make_project_copy
from test_multinode import ROOT, TRAIN_ARGS, azureml_state, job_group_vars, user_inventory

sys.path.insert(0, str(ROOT / "tests"))

from twin.cluster import Twin, free_base_port  # noqa: E402

NODES = 5
EPOCHS = 4


@dataclass
class RecoverySite:
    twin: Twin
    where: Path
    inventory: Path
    state: Path          # the AzureML stand-in's state (TWIN_AZUREML_STATE)
    project: Path        # the test's project folder (tests/project_copy.py): run ansible-playbook there
    account: str         # Azurite's account URL, as the nodes reach it
    group_vars: dict

    def publish_listing(self) -> None:
        """AmlCompute's listing and the stand-in's view of the cluster, as they are now."""
        self.twin.write_nodes_file(self.where / "inventory" / "nodes.json")
        self.twin.save_state(self.where / "twin.json")


@contextlib.contextmanager
def recovery_site(where: Path, prefix: str, cluster: str, ports: tuple[int, int], *, bound: int,
                  listing_lag: float | None = None, **group_vars) -> Iterator[RecoverySite]:
    """A running five-node twin, Azurite and the user's inventory (cluster ``cluster``), the heartbeat's
    bound ``bound`` (submit_node_loss_timeout); ``group_vars`` added to the inventory's. Stopped at the end."""
    twin = Twin(NODES, where / "twin", prefix=prefix, base_port=free_base_port(NODES, start=ports[0], stop=ports[1]),
                listing_lag=listing_lag)
    azurite = None
    try:
        twin.start()
        for node in twin.nodes:  # azcopy in the image, as on the Azure HPC images: the stage installs nothing
            subprocess.run(["docker", "cp", "-L", str(ROOT / ".tools" / "bin" / "azcopy"),
                            f"{node.container}:/usr/local/bin/azcopy"], check=True, timeout=120)
        port = free_port()
        (where / "azurite").mkdir()
        azurite = _spawn_azurite(port, where / "azurite", host=twin.gateway)
        account = f"http://{twin.gateway}:{port}/devstoreaccount1"
        from azure.storage.blob import BlobServiceClient
        BlobServiceClient.from_connection_string(
            f"DefaultEndpointsProtocol=http;AccountName=devstoreaccount1;AccountKey={ACCOUNT_KEY};"
            f"BlobEndpoint={account};").create_container("checkpoints")  # the store's container, made by the user
        merged = {
            **job_group_vars(twin),
            "submit_train_args": {**{k: v for k, v in TRAIN_ARGS.items() if k not in ("n_train", "n_valid")},
                                  "epochs": EPOCHS, "uneven_shards": "even", "conv_size": 16},
            "amlhpc_project_dir": str(make_project_copy(where / "project")),
            "submit_download_dir": str(where / "out"),
            "stage_account_url": account,
            "stage_container": "cosmoflow",
            "stage_azcopy_src": str(ROOT / ".tools" / "bin" / "azcopy"),
            "prepare_dataset_src": str(where / "cosmoflow-src"),
            "prepare_dataset_generate": True,
            "prepare_dataset_train_universes": 1,
            "prepare_dataset_account_key": ACCOUNT_KEY,
            "prepare_dataset_create_container": True,
            "healthcheck_fs_files": 2,
            "healthcheck_fs_file_size_mb": 4,
            "healthcheck_on_failure": "exclude",
            "healthcheck_spare_nodes": 1,
            "submit_node_loss_timeout": bound,
            "submit_checkpoint_store": f"{account}/checkpoints/runs",
            "submit_checkpoint_auth": "sas",
            "node_loss_probe_timeout": 15,
            **group_vars,
        }
        inv = user_inventory(twin, where / "inventory", cluster, merged)
        with open(where / "inventory" / "group_vars" / "all" / "main.yml", "a") as f:
            f.write("stage_sas: \"{{ lookup('amlhpc.azureml.blob_sas', stage_account_url, container=stage_container, "
                    "account_key=prepare_dataset_account_key) }}\"\n"
                    "submit_checkpoint_sas: \"{{ lookup('amlhpc.azureml.blob_sas', stage_account_url, "
                    "container='checkpoints', permission='racwdl', "
                    "account_key=prepare_dataset_account_key) }}\"\n")
        state = azureml_state(twin, where, audit_reads=True)
        yield RecoverySite(twin, where, inv, state, where / "project", account, merged)
    finally:
        if azurite is not None:
            os.killpg(azurite.pid, 15)
            try:  # a connection left open by a node cut off mid-upload can hold Azurite's shutdown
                azurite.wait(10)
            except subprocess.TimeoutExpired:
                os.killpg(azurite.pid, 9)
                azurite.wait(10)
        twin.stop()


def store_manifest(account: str, run: str) -> dict | None:
    """The checkpoint store's manifest of ``run`` (``latest.json``) as Azurite holds it now (None:
    none yet)."""
    import json

    from azure.core.exceptions import ResourceNotFoundError
    from azure.storage.blob import BlobServiceClient
    client = BlobServiceClient.from_connection_string(
        f"DefaultEndpointsProtocol=http;AccountName=devstoreaccount1;AccountKey={ACCOUNT_KEY};BlobEndpoint={account};")
    try:
        return json.loads(client.get_blob_client("checkpoints", f"runs/{run}/latest.json").download_blob().readall())
    except ResourceNotFoundError:
        return None
