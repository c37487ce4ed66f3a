from __future__ import annotations

from amlhpc.job_runs import attempt_name, attempt_of, decide


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
