"""Issue 43, item 2: what the checkpoint store keeps (``cosmoflow.ckpt_store.retained``), on every
combination of a few checkpoints, keep counts and ages; azcopy's outcome read from its JSON lines.
The copies themselves run against Azurite and the real azcopy: tests/integration/test_checkpoint_store.py."""

from __future__ import annotations

import itertools
import time
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


# --- issue 48 item 3: checkpoints belong to their run ------------------------------------------------
#
# The identity's rules (Hypothesis): tests/unit/plugins/module_utils/test_checkpoint_identity.py.
# The store here is a blob service in this process (``Blobs``: PUT, GET and DELETE on names, as the
# checkpoint store's http copier uses them; what it holds can be damaged as the world damages it).
# The copies themselves against Azurite and azcopy: tests/integration/test_checkpoint_store.py.

import http.server  # noqa: E402
import threading  # noqa: E402

import pytest  # noqa: E402
import torch  # noqa: E402

from cosmoflow import ckpt_store  # noqa: E402
from amlhpc.recovery.checkpoint_identity import identity  # noqa: E402
from cosmoflow.ckpt_store import CheckpointStore, StoreError  # noqa: E402


class Blobs:
    """A blob container folder served over HTTP: ``blobs[name]`` is what it holds."""

    def __init__(self) -> None:
        self.blobs: dict[str, bytes] = {}
        self.gets: list[str] = []
        self.hold = threading.Event()
        self.hold.set()
        outer = self

        class Handler(http.server.BaseHTTPRequestHandler):
            def log_message(self, *args):  # quiet
                pass

            def _name(self) -> str:
                return self.path.split("?", 1)[0].rsplit("/", 1)[-1]

            def do_PUT(self):
                data = self.rfile.read(int(self.headers.get("Content-Length") or 0))
                outer.hold.wait(30)
                outer.blobs[self._name()] = data
                self.send_response(201)
                self.send_header("Content-Length", "0")
                self.end_headers()

            def do_GET(self):
                name = self._name()
                outer.gets.append(name)
                data = outer.blobs.get(name)
                self.send_response(200 if data is not None else 404)
                self.send_header("Content-Length", str(len(data or b"")))
                self.end_headers()
                self.wfile.write(data or b"")

            def do_DELETE(self):
                outer.blobs.pop(self._name(), None)
                self.send_response(202)
                self.send_header("Content-Length", "0")
                self.end_headers()

        self.server = http.server.ThreadingHTTPServer(("127.0.0.1", 0), Handler)
        threading.Thread(target=self.server.serve_forever, daemon=True).start()
        self.url = f"http://127.0.0.1:{self.server.server_address[1]}/ckpt/cosmoflow"

    def close(self) -> None:
        self.hold.set()
        self.server.shutdown()


@pytest.fixture
def blobs():
    b = Blobs()
    yield b
    b.close()


MODEL = {"cube": 16, "channels": 4, "conv_size": 4}
OURS = identity("cosmoflow", MODEL, "96 files 0123456789abcdef", world_size=2, global_batch=8)


def store(blobs: Blobs, tmp_path, ident=OURS, lines=None) -> CheckpointStore:
    return CheckpointStore(blobs.url, "sv=2024&sig=secret", run="run-1", identity=ident,
                           log=(lines.append if lines is not None else print), work_dir=str(tmp_path / "work"),
                           nice=0, copier="http")


def checkpoint(folder, epoch: int) -> str:
    folder.mkdir(parents=True, exist_ok=True)
    path = folder / f"ck{epoch}.pt"
    torch.save({"epoch": epoch, "step": epoch * 10, "model": {"w": torch.full((64,), float(epoch))}}, path)
    return str(path)


def test_resume_refuses_a_store_of_another_run_in_one_sentence_naming_both(blobs, tmp_path):
    store(blobs, tmp_path).copy(checkpoint(tmp_path / "a", 0), 0, 10)
    other = identity("cosmoflow", {**MODEL, "conv_size": 8}, "64 files fedcba9876543210", world_size=2,
                     global_batch=8)
    theirs = store(blobs, tmp_path, other)
    blobs.gets.clear()
    with pytest.raises(SystemExit) as refused:
        ckpt_store.resume_path("auto", str(tmp_path / "b"), theirs, print)
    message = str(refused.value)
    assert "conv_size 4" in message and "conv_size 8" in message  # both named
    assert "96 files" in message and "64 files" in message
    assert "submit_name" in message and message.count(". ") == 0  # one sentence that names the fix
    assert blobs.gets == ["latest.json"]  # refused before any checkpoint was fetched
    # and a run of another identity never writes into that store (nor removes what it keeps)
    with pytest.raises(StoreError, match="another run"):
        theirs.copy(checkpoint(tmp_path / "b", 5), 5, 50)
    assert sorted(blobs.blobs) == ["epoch_000.pt", "latest.json"]
    # the same run (another attempt, another world size) resumes
    again = identity("cosmoflow", MODEL, "96 files 0123456789abcdef", world_size=1, global_batch=4)
    path, source = ckpt_store.resume_path("auto", str(tmp_path / "c"), store(blobs, tmp_path, again), print)
    assert source == "store" and torch.load(path)["epoch"] == 0


def damage(blob: bytes, how: str) -> bytes | None:
    if how == "truncated":
        return blob[: len(blob) // 2]
    if how == "same size, other bytes":
        return blob[:100] + bytes(255 - b for b in blob[100:200]) + blob[200:]
    if how == "killed mid-write under the final name":
        return blob[: len(blob) - 7]
    return None  # missing


HOW = ["truncated", "same size, other bytes", "killed mid-write under the final name", "missing"]


@pytest.mark.parametrize("how", HOW)
def test_a_damaged_newest_checkpoint_in_the_store_falls_back_to_the_newest_intact_one(blobs, tmp_path, how):
    lines: list[str] = []
    s = store(blobs, tmp_path, lines=lines)
    for epoch in range(3):
        s.copy(checkpoint(tmp_path / "a", epoch), epoch, epoch * 10)
    damaged = damage(blobs.blobs["epoch_002.pt"], how)
    if damaged is None:
        del blobs.blobs["epoch_002.pt"]
    else:
        blobs.blobs["epoch_002.pt"] = damaged
    path, source = ckpt_store.resume_path("store", str(tmp_path / "b"), store(blobs, tmp_path, lines=lines),
                                          lines.append)
    assert source == "store" and torch.load(path)["epoch"] == 1
    said = "\n".join(lines)
    assert "epoch_002.pt" in said and "falls back to epoch_001.pt" in said, said
    # every one damaged: refused, none loaded
    for name in ("epoch_000.pt", "epoch_001.pt"):
        blobs.blobs[name] = blobs.blobs[name][:10]
    with pytest.raises(SystemExit, match="no intact checkpoint"):
        ckpt_store.resume_path("store", str(tmp_path / "c"), store(blobs, tmp_path), print)


def save(folder, epoch: int) -> None:
    from cosmoflow.model import CosmoFlow, ModelConfig  # noqa: PLC0415
    from cosmoflow.train import save_checkpoint  # noqa: PLC0415

    config = ModelConfig(cube=16, channels=4, conv_size=4, kernel_size=2, n_conv_layers=2, fc1_size=8, fc2_size=4,
                         dropout=0.0)
    model = CosmoFlow(config)
    optimizer = torch.optim.SGD(model.parameters(), lr=0.1)
    save_checkpoint(str(folder), epoch, epoch * 10, model, optimizer, config, keep=3, identity=OURS)


@pytest.mark.parametrize("how", HOW)
def test_a_damaged_local_checkpoint_is_skipped_never_loaded(tmp_path, how):
    folder = tmp_path / "checkpoints"
    for epoch in range(2):
        save(folder, epoch)
    last = folder / "last.pt"
    damaged = damage(last.read_bytes(), how)
    if damaged is None:
        last.unlink()
    else:
        last.write_bytes(damaged)  # the same name, other bytes: as a copy killed mid-write leaves it
    lines: list[str] = []
    path, source = ckpt_store.resume_path("auto", str(folder), None, lines.append)
    assert source == "local" and path == str(folder / "epoch_001.pt")
    assert torch.load(path, weights_only=False)["epoch"] == 1
    if how != "missing":
        assert any("last.pt" in line and "not loaded" in line for line in lines), lines
    (folder / "epoch_001.pt").write_bytes(b"\0" * 10)
    path, _source = ckpt_store.resume_path("auto", str(folder), None, lines.append)
    assert path == str(folder / "epoch_000.pt")


def test_a_checkpoint_waiting_for_upload_is_never_dropped_without_a_line(blobs, tmp_path):
    lines: list[str] = []
    s = store(blobs, tmp_path, lines=lines)
    blobs.hold.clear()  # the store is slow: the first copy takes a while
    for epoch in range(3):
        s.put(checkpoint(tmp_path / "a", epoch), epoch, epoch * 10)
        time.sleep(0.3)
    blobs.hold.set()
    assert s.close(30)
    said = "\n".join(lines)
    assert "epoch 1" in said and "not copied" in said and "epoch 2" in said, said
    assert s.uploaded == [0, 2]
