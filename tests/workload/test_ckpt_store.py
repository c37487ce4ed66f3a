"""Issue 43, item 2: what the checkpoint store keeps (``cosmoflow.ckpt_store.retained``), on every
combination of a few checkpoints, keep counts and ages; azcopy's outcome read from its JSON lines.
The copies themselves run against Azurite and the real azcopy: tests/integration/test_checkpoint_store.py."""

from __future__ import annotations

import itertools
import json

from cosmoflow.ckpt_store import Entry, Manifest, azcopy_outcome, retained

DAY = 86400.0


def entry(epoch: int, age_days: float, now: float) -> Entry:
    return Entry(f"epoch_{epoch:03d}.pt", epoch, epoch * 10, 100, "0" * 64, now - age_days * DAY)


def test_the_store_keeps_the_newest_within_the_count_and_the_age_and_always_the_newest():
    now = 1_000_000_000.0
    ages = (0.0, 0.5, 2.0, 10.0)
    for n in range(0, 6):
        for epochs in itertools.combinations(range(7), n):
            for age_of in itertools.product(ages, repeat=n) if n <= 3 else [tuple(ages[i % 4] for i in range(n))]:
                entries = [entry(e, a, now) for e, a in zip(epochs, age_of)]
                for keep in (1, 2, 3, 5):
                    for days in (0.0, 1.0, 7.0):
                        kept, removed = retained(list(reversed(entries)), keep, days, now)
                        names = [e.name for e in entries]
                        assert sorted(e.name for e in kept + removed) == sorted(names)  # each in exactly one
                        assert not {e.name for e in kept} & {e.name for e in removed}
                        if not entries:
                            assert kept == removed == []
                            continue
                        newest = max(entries, key=lambda e: e.epoch)
                        assert newest in kept and len(kept) <= keep
                        for e in kept:
                            assert e is newest or days == 0 or now - e.time <= days * DAY
                        # nothing removed that the rule keeps: a removed one is older than every kept
                        # one that is not the newest, or too old
                        newer = sorted(entries, key=lambda e: e.epoch)[-keep:]
                        for e in removed:
                            assert e not in newer or (days and now - e.time > days * DAY)


def test_the_manifest_reads_back_what_it_wrote():
    now = 1_000_000_000.0
    m = Manifest([entry(1, 0, now), entry(3, 0, now)], run="cosmoflow")
    again = Manifest.load(m.dump())
    assert again.entries == m.entries and again.latest.name == "epoch_003.pt" and again.run == "cosmoflow"
    assert json.loads(m.dump())["latest"]["epoch"] == 3


def test_azcopy_outcome_reads_the_job_status_and_the_error():
    ok = "\n".join(json.dumps(m) for m in (
        {"MessageType": "Init", "MessageContent": "{}"},
        {"MessageType": "EndOfJob", "MessageContent": json.dumps({"JobStatus": "Completed"})}))
    assert azcopy_outcome(ok, "", 0) == (False, "")
    failed = "\n".join(json.dumps(m) for m in (
        {"MessageType": "EndOfJob", "MessageContent": json.dumps({"JobStatus": "Failed"})},))
    assert azcopy_outcome(failed, "", 0) == (True, "job Failed")
    content = "Cannot perform copy due to error: The specified file was not found.\nmore"
    error = json.dumps({"MessageType": "Error", "MessageContent": content})
    assert azcopy_outcome(error, "", 1) == (True, "Cannot perform copy due to error: The specified file was not found.")
    assert azcopy_outcome("", "boom\n", 2) == (True, "boom")
