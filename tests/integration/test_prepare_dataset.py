"""playbooks/prepare_dataset.yml against Azurite: generate, gzip in parallel, upload gzip-encoded, rerun."""

from __future__ import annotations

import gzip
import os

from staging_helpers import ROOT
from test_stage_playbook import recap, run_playbook

from amlhpc.sdk.blob_listing import list_blobs


def test_prepare_dataset_uploads_gzip_encoded_and_is_idempotent(azurite, tmp_path, project):
    src = tmp_path / "src"
    extra = {"prepare_dataset_src": str(src), "prepare_dataset_generate": True, "prepare_dataset_cube": 8,
             "prepare_dataset_train_universes": 1, "prepare_dataset_val_universes": 1,
             "prepare_dataset_account_url": azurite.endpoint, "prepare_dataset_container": "prepared",
             "prepare_dataset_prefix": "v07", "prepare_dataset_create_container": True,
             "prepare_dataset_account_key": "{{ lookup('ansible.builtin.env', 'TEST_ACCOUNT_KEY') }}"}
    key = azurite.connection_string.split("AccountKey=")[1].split(";")[0]
    env = {"TEST_ACCOUNT_KEY": key}
    first = run_playbook(project, "playbooks/prepare_dataset.yml", extra, env)
    assert first.returncode == 0, first.stdout[-3000:] + first.stderr[-2000:]
    assert "128 files" in first.stdout and "uploaded 128, already there 0" in first.stdout
    assert "compressed 128, unchanged since their copy was made 0" in first.stdout
    assert key not in first.stdout + first.stderr

    listing = list_blobs(azurite.endpoint, "prepared", "v07", credential=azurite.service().credential)
    assert len(listing) == 128
    assert all(b.name.endswith(".tfrecord.gz") and b.gzip_encoded for b in listing)
    # The metadata carries the size before compression, and the blob is the gzip of the original.
    blob = next(b for b in listing if b.name == "train/univ_ics_2019-03_a000000_007.tfrecord.gz")
    original = (src / "train" / "univ_ics_2019-03_a000000_007.tfrecord").read_bytes()
    assert blob.raw_size == len(original)
    stored = azurite.service().get_blob_client("prepared", "v07/" + blob.name).download_blob(decompress=False).readall()
    assert gzip.decompress(stored) == original

    # Check mode and the rerun only read: answered in the worker, no module run on the
    # controller (-vvv names the module file of every module run), and the key nowhere in the output.
    check = run_playbook(project, "playbooks/prepare_dataset.yml", extra, env, "--check", "-vvv")
    assert check.returncode == 0 and recap_localhost(check.stdout)["changed"] == 0, check.stdout[-2000:]
    assert MODULE_RUN not in check.stdout and key not in check.stdout + check.stderr
    assert '"files": 128' in check.stdout and '"missing": 0' in check.stdout
    second = run_playbook(project, "playbooks/prepare_dataset.yml", extra, env, "-vvv")
    assert second.returncode == 0, second.stdout[-3000:]
    assert MODULE_RUN not in second.stdout and key not in second.stdout + second.stderr
    assert "uploaded 0, already there 128" in second.stdout
    # the rerun neither read nor gzipped the data set again (dataset_prep's record in work_dir)
    assert "compressed 0, unchanged since their copy was made 128" in second.stdout
    # The data set already there: the generate task is skipped on the controller (no module run).
    block = second.stdout[second.stdout.index("Generate a small CosmoFlow-format data set"):].split("\nTASK [")[0]
    assert "skipping: [localhost]" in block, block
    assert recap_localhost(second.stdout)["changed"] == 0
    assert (ROOT / "playbooks" / "prepare_dataset.yml").exists()

    # One blob gone: check mode says so, and the run is the module's, which uploads it again.
    azurite.service().get_blob_client("prepared", "v07/" + blob.name).delete_blob()
    check = run_playbook(project, "playbooks/prepare_dataset.yml", extra, env, "--check", "-vvv")
    assert check.returncode == 0 and recap_localhost(check.stdout)["changed"] == 1, check.stdout[-2000:]
    assert '"missing": 1' in check.stdout and MODULE_RUN not in check.stdout
    third = run_playbook(project, "playbooks/prepare_dataset.yml", extra, env, "-vvv")
    assert third.returncode == 0, third.stdout[-3000:]
    assert MODULE_RUN in third.stdout and key not in third.stdout + third.stderr
    assert "uploaded 1, already there 127" in third.stdout
    # A source touched since its copy was made: compressed again by the module (same bytes, so
    # nothing to upload).
    os.utime(src / "train" / "univ_ics_2019-03_a000000_007.tfrecord")
    fourth = run_playbook(project, "playbooks/prepare_dataset.yml", extra, env, "-vvv")
    assert fourth.returncode == 0, fourth.stdout[-3000:]
    assert MODULE_RUN in fourth.stdout
    assert "compressed 1, unchanged since their copy was made 127" in fourth.stdout
    assert "uploaded 0, already there 128" in fourth.stdout


MODULE_RUN = "modules/dataset_upload.py"  # -vvv: "Using module file .../plugins/modules/dataset_upload.py"


def recap_localhost(out: str) -> dict[str, int]:
    return recap(out.replace("localhost ", "local-0 "))
