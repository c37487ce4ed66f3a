from __future__ import annotations

import json
import os

from amlhpc.job_runs import RECORD, attempt_name, attempt_of, decide, read_record, write_record


def test_attempt_names():
    assert [attempt_name("cf", n) for n in (1, 2, 3)] == ["cf", "cf-r2", "cf-r3"]
    assert attempt_of("cf", "cf") == 1 and attempt_of("cf", "cf-r12") == 12
    assert attempt_of("cf", "cf-r1") == 0 and attempt_of("cf", "cf-4x8") == 0 and attempt_of("cf", "other") == 0


def test_nothing_yet_submits_the_name_itself():
    assert decide("cf", [])["action"] == "submit" and decide("cf", [])["run_name"] == "cf"
    assert decide("cf", [("cf-4x8", "Completed")])["run_name"] == "cf"


def test_a_completed_or_running_attempt_is_reused():
    done = decide("cf", [("cf", "Failed"), ("cf-r2", "Completed")])
    assert done["action"] == "reuse" and done["run_name"] == "cf-r2" and "completed" in done["msg"]
    running = decide("cf", [("cf", "Running")])
    assert running["action"] == "reuse" and running["run_name"] == "cf" and "is Running" in running["msg"]


def test_a_failed_or_cancelled_attempt_is_resubmitted_under_a_new_name():
    for status in ("Failed", "Canceled", "CancelRequested", "NotResponding", "TimedOut"):
        verdict = decide("cf", [("cf", status)])
        assert verdict["action"] == "submit" and verdict["run_name"] == "cf-r2", status
        assert verdict["previous"] == "cf" and f"ended {status}" in verdict["msg"]
    assert decide("cf", [("cf", "Failed"), ("cf-r2", "Canceled")])["run_name"] == "cf-r3"


def test_force_submits_a_new_attempt_even_after_success():
    verdict = decide("cf", [("cf", "Completed")], force=True)
    assert verdict["action"] == "submit" and verdict["run_name"] == "cf-r2"


# The record of a completed, downloaded run (job_runs.RECORD in the download folder).
IDENTITY = {"backend": "azure_ai_ml", "subscription_id": "sub", "resource_group": "rg", "workspace_name": "ws",
            "name": "cf"}


def _downloaded(tmp_path):
    out = tmp_path / "artifacts" / "outputs"
    out.mkdir(parents=True)
    (out / "summary.json").write_text("{}")
    return str(tmp_path)


def test_a_completed_downloaded_run_is_recorded_and_read_back(tmp_path):
    where = _downloaded(tmp_path)
    result = {"run_id": "cf-r2", "status": "Completed", "portal_url": "https://ml.azure.com/runs/cf-r2",
              "previous_run": "cf", "changed": True, "msg": "submitted"}
    assert write_record(where, IDENTITY, result) == os.path.join(where, RECORD)
    record = read_record(where, IDENTITY)
    assert record == {**IDENTITY, "run_id": "cf-r2", "status": "Completed",
                      "portal_url": "https://ml.azure.com/runs/cf-r2", "previous_run": "cf"}


def test_only_a_completed_run_is_recorded(tmp_path):
    where = _downloaded(tmp_path)
    for status in ("Failed", "Canceled", "Running", "NotStarted"):
        assert write_record(where, IDENTITY, {"run_id": "cf", "status": status}) is None, status
        assert read_record(where, IDENTITY) is None and not os.path.exists(os.path.join(where, RECORD))


def test_the_record_stands_only_for_its_own_job_and_workspace(tmp_path):
    where = _downloaded(tmp_path)
    write_record(where, IDENTITY, {"run_id": "cf", "status": "Completed", "portal_url": "u"})
    for key, other in (("backend", "azureml_core"), ("subscription_id", "sub2"), ("resource_group", "rg2"),
                       ("workspace_name", "ws2"), ("name", "cf-big")):
        assert read_record(where, {**IDENTITY, key: other}) is None, key
    assert read_record(where, IDENTITY)["run_id"] == "cf"


def test_no_record_without_the_outputs_or_from_a_damaged_file(tmp_path):
    where = _downloaded(tmp_path)
    write_record(where, IDENTITY, {"run_id": "cf", "status": "Completed", "portal_url": "u"})
    path = os.path.join(where, RECORD)
    with open(path, "w", encoding="utf-8") as f:
        f.write("{not json")
    assert read_record(where, IDENTITY) is None
    with open(path, "w", encoding="utf-8") as f:
        json.dump({**IDENTITY, "run_id": "cf", "status": "Failed"}, f)
    assert read_record(where, IDENTITY) is None
    write_record(where, IDENTITY, {"run_id": "cf", "status": "Completed", "portal_url": "u"})
    os.unlink(os.path.join(where, "artifacts", "outputs", "summary.json"))
    assert read_record(where, IDENTITY) is None, "the outputs are gone: the workspace is asked again"
    assert read_record(str(tmp_path / "nowhere"), IDENTITY) is None
