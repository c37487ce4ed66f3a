from __future__ import annotations

import importlib
import json
import os

import pytest
from hypothesis import given
from hypothesis import strategies as st

from amlhpc.azure.job_runs import (
    ACTIVE,
    COMPLETED,
    FAILED,
    HELD,
    RECORD,
    attempt_name,
    attempt_of,
    decide,
    failing_log,
    failure_message,
    read_record,
    refusal,
    service_error,
    settle,
    status_text,
    write_record,
)


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
    for status in ("Failed", "Canceled", "CancelRequested"):
        verdict = decide("cf", [("cf", status)])
        assert verdict["action"] == "submit" and verdict["run_name"] == "cf-r2", status
        assert verdict["previous"] == "cf" and f"ended {status}" in verdict["msg"]
    assert decide("cf", [("cf", "Failed"), ("cf-r2", "Canceled")])["run_name"] == "cf-r3"


def _job_status():
    """azure-ai-ml's JobStatus enum, from the REST models its jobs use: arm_ml_service from 1.35 on,
    the newest dated API version's models before (v2025_01_01_preview in 1.31, requirements.txt's oldest)."""
    import pkgutil

    import azure.ai.ml._restclient as restclient
    names = {m.name for m in pkgutil.iter_modules(restclient.__path__)}
    dated = sorted(n for n in names if n.startswith("v20"))
    package = "arm_ml_service" if "arm_ml_service" in names else dated[-1]
    return importlib.import_module(f"azure.ai.ml._restclient.{package}.models").JobStatus


def _sdk_statuses() -> dict[str, set[str]]:
    JobStatus = _job_status()
    from azure.ai.ml.operations._run_history_constants import RunHistoryConstants
    from azureml._restclient.constants import RunStatus
    return {"azure-ai-ml JobStatus": {s.value for s in JobStatus},
            "azure-ai-ml run history": set(RunHistoryConstants.ALL_STATUSES),
            "azureml-core RunStatus": set(RunStatus.list())}


def test_every_status_of_both_sdks_is_in_exactly_one_class():
    """Completed, failed (resubmitted), held (not resubmitted on its own) or going: each status
    either SDK can report has one meaning; none is made up (no TimedOut, a status of neither)."""
    classes = {"COMPLETED": COMPLETED, "FAILED": FAILED, "HELD": HELD, "ACTIVE": ACTIVE}
    every = set().union(*_sdk_statuses().values())
    for status in every:
        assert [n for n, c in classes.items() if status in c] != [] and \
            sum(status in c for c in classes.values()) == 1, status
    assert set().union(*classes.values()) == every


def test_the_sdks_terminal_statuses_are_the_ones_the_task_does_not_wait_on():
    """What azure-ai-ml's stream and download take for an ending is, here, completed, failed or held."""
    from azure.ai.ml.operations._run_history_constants import RunHistoryConstants
    assert set(RunHistoryConstants.TERMINAL_STATUSES) <= COMPLETED | FAILED | HELD


@pytest.mark.parametrize("status", sorted(HELD | {"SomethingNew"}))
def test_a_held_or_unknown_attempt_is_not_resubmitted_on_its_own(status):
    """A NotResponding run can come back, a Paused one be resumed: a second copy would run beside it."""
    verdict = decide("cf", [("cf", status)])
    assert verdict["action"] == "reuse" and verdict["run_name"] == "cf" and "force: true" in verdict["msg"]
    assert decide("cf", [("cf", status)], force=True)["run_name"] == "cf-r2"


def test_status_text_spells_the_enum_members_as_the_service_does():
    JobStatus = _job_status()
    assert status_text(JobStatus.NOT_RESPONDING) == "NotResponding" and status_text("Failed") == "Failed"


def test_settle_asks_until_post_processing_is_over_within_its_limit():
    answers, slept = iter(["Finalizing", "Finalizing", "Completed"]), []
    assert settle(lambda: next(answers), slept.append, limit_s=100, interval_s=10) == "Completed" and slept == [10, 10]
    slept.clear()
    assert settle(lambda: "CancelRequested", slept.append, limit_s=30, interval_s=10) == "CancelRequested"
    assert slept == [10, 10, 10]
    assert settle(lambda: "Failed", slept.append) == "Failed"


def test_service_error_reads_the_message_out_of_either_sdks_exception():
    v2 = 'Exception : \n {\n    "error": {\n        "code": "UserError",\n        "message": "Execution failed."\n    }\n} '
    v1 = 'Activity Failed:\n{\n    "error": {\n        "message": "Rank 2\\n  exited"\n    }\n}'
    assert service_error(v2) == "Execution failed." and service_error(v1) == "Rank 2 exited"
    assert service_error('Activity Failed:\n"Detailed error not set on the Run."') == "Activity Failed:"
    assert service_error("no json here\nsecond") == "no json here" and service_error("") == ""


LOG_NAMES = st.lists(st.from_regex(r"(user_logs/std_log_process_[0-9]{1,3}|azureml-logs/70_driver_log_[0-9]{1,3})"
                                   r"\.txt", fullmatch=True), min_size=1, max_size=12, unique=True)


@given(LOG_NAMES, st.data())
def test_failing_log_is_the_one_the_service_names(names, data):
    named = data.draw(st.sampled_from(names))
    # Distinct ranks may share a prefix (std_log_process_1 in std_log_process_12): the longest named wins.
    error = f"User process exited with status code 1. Please check log file '{named}' for error details."
    logs = {n: data.draw(st.text(max_size=40)) for n in names}
    assert failing_log(logs, error) == named


@given(st.lists(st.integers(0, 300), min_size=1, max_size=12, unique=True), st.data())
def test_without_a_name_the_first_rank_with_a_traceback_else_rank_0(ranks, data):
    logs = {f"user_logs/std_log_process_{r}.txt": "epoch 1\n" for r in ranks}
    assert failing_log(logs, "Execution failed.") == f"user_logs/std_log_process_{min(ranks)}.txt"
    broken = data.draw(st.lists(st.sampled_from(ranks), min_size=1, unique=True))
    for r in broken:
        logs[f"user_logs/std_log_process_{r}.txt"] = "Traceback (most recent call last):\nRuntimeError: x\n"
    assert failing_log(logs, "") == f"user_logs/std_log_process_{min(broken)}.txt"
    assert failing_log({}, "anything") is None


def test_the_failure_message_names_run_status_link_error_and_the_way_on():
    msg = failure_message("cf-r2", "Failed", "https://ml.azure.com/runs/cf-r2", "Rank 3 exited", "cf-r3",
                          "user_logs/std_log_process_3.txt", "RuntimeError: x\n")
    assert msg == ("run cf-r2 ended Failed (https://ml.azure.com/runs/cf-r2): Rank 3 exited; running the task again "
                   "submits a new attempt (cf-r3). Last lines of user_logs/std_log_process_3.txt:\nRuntimeError: x\n")
    assert failure_message("cf", "Paused", None, "", "cf-r2", None, "").startswith("run cf is Paused; resume it")


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


def test_the_refusal_is_the_first_refused_line_and_only_that():
    log = ("[launch] node rs-0 trains: 4 node(s) meet at 10.0.0.10:29400\n"
           "[cosmoflow] stopped: --resume auto: the store holds the checkpoints of another run (...)\n"
           "[cosmoflow] stopped: --resume auto: the store holds the checkpoints of another run (...)\n"
           "torch.distributed.elastic.multiprocessing.errors.ChildFailedError:\n")
    assert refusal(log) == "--resume auto: the store holds the checkpoints of another run (...)"
    assert refusal("Traceback (most recent call last):\n[cosmoflow] stopped:   \n") == ""
    plain = failure_message("r", "Failed", None, "boom", "r-2", "log", "tail")
    assert failure_message("r", "Failed", None, "boom", "r-2", "log", "tail", "") == plain
    assert plain.startswith("run r ended Failed: boom;")
