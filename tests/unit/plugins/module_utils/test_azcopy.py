"""azcopy helpers: SAS checks, redaction, command lines, JSON parsing, finalize and verify."""

from __future__ import annotations

import gzip
import hashlib
import json
from datetime import datetime, timezone

import pytest

from amlhpc.staging.azcopy import (
    ExpectedFile,
    JobResult,
    check_sas,
    copy_download_command,
    copy_upload_command,
    explain_failure,
    finalize,
    is_gzip_file,
    parse_line,
    redact,
    remove_partial,
    survey,
)
from amlhpc.data.tfrecord import encode_record

NOW = datetime(2026, 11, 22, 5, 0, tzinfo=timezone.utc)
SAS = "st=2026-11-22T04%3A45%3A13Z&se=2026-11-22T06%3A51%3A13Z&sp=rl&sv=2026-10-06&sr=c&sig=9nr0iCMxQhRRTeCw%3D"

# Lines as azcopy 10.32.2 prints them with --output-type json (captured from the real binary).
PROGRESS = ('{"TimeStamp":"2026-11-22T04:51:32.03Z","MessageType":"Progress","MessageContent":"{\\"ErrorMsg\\":\\"\\",'
            '\\"JobID\\":\\"c332\\",\\"JobStatus\\":\\"InProgress\\",\\"TotalTransfers\\":\\"3\\",'
            '\\"TransfersCompleted\\":\\"1\\",\\"TransfersFailed\\":\\"0\\",\\"TransfersSkipped\\":\\"0\\",'
            '\\"BytesOverWire\\":\\"1021264\\",\\"TotalBytesTransferred\\":\\"1021264\\",'
            '\\"PercentComplete\\":\\"33.3\\",\\"FailedTransfers\\":[],\\"SkippedTransfers\\":null}",'
            '"PromptDetails":{"PromptType":"","ResponseOptions":null,"PromptTarget":""}}')
ERROR = ('{"TimeStamp":"2026-11-22T04:54:31.82Z","MessageType":"Error","MessageContent":"Cannot perform copy due to '
         'error: cannot list files due to reason GET http://127.0.0.1:10999/devstoreaccount1/cosmo?sig=abcdef0123456\\n'
         'RESPONSE 403: 403 Server failed to authenticate the request.\\nERROR CODE: AuthorizationFailure",'
         '"PromptDetails":{"PromptType":"","ResponseOptions":null,"PromptTarget":""}}')


def test_sas_read_list_is_clean():
    check = check_sas(SAS, now=NOW)
    assert check.errors == [] and check.warnings == []
    assert check.permissions == "rl"
    assert check.expiry == datetime(2026, 11, 22, 6, 51, 13, tzinfo=timezone.utc)


def test_expired_sas_is_one_sentence():
    check = check_sas("?" + SAS, now=datetime(2026, 11, 22, 7, 0, tzinfo=timezone.utc))
    assert check.errors == ["The SAS token expired at 2026-11-22 06:51 UTC: generate a new one (read and list) "
                            "and run again."]


def test_sas_with_write_warns_and_without_list_fails():
    warn = check_sas(SAS.replace("sp=rl", "sp=racwdl"), now=NOW)
    assert warn.errors == []
    assert warn.warnings == ["The SAS token grants more than read and list (sp=racwdl: also add, create, write, "
                             "delete): a staging token should be sp=rl only."]
    bad = check_sas(SAS.replace("sp=rl", "sp=r"), now=NOW)
    assert "lacks list permission" in bad.errors[0]


def test_sas_without_signature_or_not_yet_valid():
    assert "no signature" in check_sas("sp=rl&se=2030-01-01", now=NOW).errors[0]
    early = check_sas(SAS.replace("st=2026-11-22T04%3A45", "st=2026-11-22T05%3A30"), now=NOW)
    assert any("not valid before" in e for e in early.errors)


def test_redact_removes_every_signature():
    text = f"GET http://x/c?{SAS} then https://y/z?sv=1&sig=AbC%2Fd+e== done"
    out = redact(text)
    assert "9nr0iCMx" not in out and "AbC" not in out
    assert out.count("sig=REDACTED") == 2
    assert redact("token abcdefghijkl here", ["abcdefghijkl"]) == "token REDACTED here"


def test_download_command_line():
    cmd = copy_download_command("/bin/azcopy", "http://127.0.0.1:1/acct/c/pre", SAS, "/stage",
                                include_pattern="*_000.tfrecord;*_000.tfrecord.gz", cap_mbps=800)
    assert cmd[:4] == ["/bin/azcopy", "copy", f"http://127.0.0.1:1/acct/c/pre?{SAS}", "/stage"]
    for flag in ("--recursive", "--as-subdir=false", "--overwrite=false", "--decompress"):
        assert flag in cmd
    assert cmd[cmd.index("--from-to") + 1] == "BlobLocal"
    assert cmd[cmd.index("--output-type") + 1] == "json"
    assert cmd[cmd.index("--include-pattern") + 1] == "*_000.tfrecord;*_000.tfrecord.gz"
    assert cmd[cmd.index("--cap-mbps") + 1] == "800"
    lst = copy_download_command("azcopy", "u", "", "/d", list_file="/tmp/l", decompress=False, cap_mbps=12.5)
    assert lst[2] == "u" and "--decompress" not in lst
    assert lst[lst.index("--list-of-files") + 1] == "/tmp/l" and lst[lst.index("--cap-mbps") + 1] == "12.5"
    with pytest.raises(ValueError):
        copy_download_command("azcopy", "u", "", "/d", include_pattern="x", list_file="y")


def test_upload_command_line():
    cmd = copy_upload_command("azcopy", "/ckpt", "https://a/c/ckpt", SAS, content_encoding="gzip", cap_mbps=100)
    assert cmd[cmd.index("--from-to") + 1] == "LocalBlob"
    assert cmd[cmd.index("--content-encoding") + 1] == "gzip"
    assert "--recursive" in cmd and cmd[cmd.index("--cap-mbps") + 1] == "100"


def test_parse_progress_and_error_lines():
    msg = parse_line(PROGRESS)
    assert msg is not None and msg.kind == "Progress"
    assert msg.data["TotalTransfers"] == 3 and msg.data["TransfersCompleted"] == 1
    assert msg.data["BytesOverWire"] == 1021264 and msg.data["PercentComplete"] == pytest.approx(33.3)
    err = parse_line(ERROR)
    assert err is not None and err.kind == "Error" and err.data == {}
    assert parse_line("INFO: plain text") is None
    assert parse_line("{not json") is None


def test_explain_failure_names_the_cause():
    msg = parse_line(ERROR)
    assert msg is not None
    forbidden = JobResult(returncode=1, status="", errors=[redact(msg.text)])
    assert explain_failure(forbidden).startswith("azcopy was refused access (HTTP 403)")
    assert "abcdef0123456" not in " ".join(forbidden.errors)
    partial = JobResult(returncode=1, status="CompletedWithErrors", total=5, failed=2,
                        failed_transfers=[{"src": "http://x/c/a_000.tfrecord.gz", "error": "500"}])
    assert explain_failure(partial).startswith("azcopy could not copy 2 of 5 file(s): a_000.tfrecord.gz (500)")
    # every failure, whatever its cause, says that a rerun resumes
    other = JobResult(returncode=2, status="Failed", errors=["some error"])
    for result in (forbidden, partial, other):
        assert explain_failure(result).endswith(
            " A rerun of the stage resumes where this one stopped: the files already whole are kept.")


def test_is_gzip_file_tells_gzip_from_tfrecord(tmp_path):
    gz = tmp_path / "a.gz"
    gz.write_bytes(gzip.compress(b"hello"))
    assert is_gzip_file(str(gz))
    plain = tmp_path / "a.tfrecord"
    plain.write_bytes(encode_record(b"x" * 100))
    assert not is_gzip_file(str(plain))
    # A record whose length starts with the gzip magic bytes (0x..088b1f) is still a TFRecord.
    tricky = tmp_path / "t.tfrecord"
    tricky.write_bytes(encode_record(b"\0" * 0x088B1F))
    assert tricky.read_bytes()[:3] == b"\x1f\x8b\x08"
    assert not is_gzip_file(str(tricky))


def test_finalize_renames_decompressed_and_skips_partial(tmp_path):
    staging, stage = tmp_path / "s", tmp_path / "d"
    (staging / "train").mkdir(parents=True)
    (staging / "train" / "a_000.tfrecord.gz").write_bytes(encode_record(b"decompressed"))
    (staging / "train" / "b_001.tfrecord.gz").write_bytes(gzip.compress(encode_record(b"still gzip")))
    (staging / "train" / "c_002.tfrecord").write_bytes(encode_record(b"plain"))
    (staging / "train" / ".azDownload-1234-d_003.tfrecord.gz").write_bytes(b"half")
    done = finalize(str(staging), str(stage), decompress=True)
    assert sorted(done) == ["train/a_000.tfrecord", "train/b_001.tfrecord.gz", "train/c_002.tfrecord"]
    assert not (stage / "train" / ".azDownload-1234-d_003.tfrecord.gz").exists()
    assert remove_partial(str(staging)) == 1
    assert list((staging / "train").iterdir()) == []


def test_survey_names_missing_wrong_size_and_wrong_content(tmp_path):
    (tmp_path / "train").mkdir()
    (tmp_path / "train" / "a.tfrecord").write_bytes(b"x" * 10)
    (tmp_path / "train" / "b.tfrecord").write_bytes(b"x" * 7)
    a_sum = hashlib.sha256(b"x" * 10).hexdigest()
    plan = [ExpectedFile("train/a.tfrecord.gz", 10, True, a_sum), ExpectedFile("train/b.tfrecord", 7)]
    assert survey(str(tmp_path), plan, decompress=True, verify="checksum") == {}
    (tmp_path / "train" / "a.tfrecord").write_bytes(b"y" * 10)  # same size, other bytes
    assert survey(str(tmp_path), plan, decompress=True) == {}  # size alone cannot tell
    plan += [ExpectedFile("train/b2.tfrecord", 8), ExpectedFile("train/c.tfrecord.gz", None, True)]
    (tmp_path / "train" / "b2.tfrecord").write_bytes(b"x" * 7)
    assert survey(str(tmp_path), plan, decompress=True, verify="checksum") == {
        "train/a.tfrecord.gz": "checksum", "train/b2.tfrecord": "size 7, plan 8", "train/c.tfrecord.gz": "missing"}
    with pytest.raises(ValueError, match="verify must be one of size, checksum"):
        survey(str(tmp_path), plan, decompress=True, verify="md5")


def test_progress_line_is_json_with_no_sas():
    msg = parse_line(PROGRESS)
    assert msg is not None
    assert json.loads(msg.text)["JobID"] == "c332"


def test_account_name_from_every_url_style():
    from amlhpc.sdk.blob_listing import account_name
    assert account_name("https://myacct.blob.core.windows.net") == "myacct"
    assert account_name("https://myacct.blob.core.windows.net/") == "myacct"
    assert account_name("http://127.0.0.1:10000/devstoreaccount1") == "devstoreaccount1"
    # An endpoint addressed by IP (Azurite on a bridge, a private endpoint): path style too.
    assert account_name("http://172.18.0.1:41234/devstoreaccount1") == "devstoreaccount1"
    with pytest.raises(ValueError, match="is not an account URL"):
        account_name("myacct")


def test_a_prune_of_most_of_the_staged_files_is_refused_naming_the_source():
    from amlhpc.staging.azcopy import ExpectedFile, prune_refusal
    gone = [f"train/f{i}.tfrecord" for i in range(6)]
    # 4 planned files on disk (one of them wrong, still staged) and 2 missing: 6 gone of 10 staged
    expected = [ExpectedFile(f"train/k{i}.tfrecord.gz", 1, True) for i in range(6)]
    bad = {expected[0].blob: "size 9, plan 1", expected[4].blob: "missing", expected[5].blob: "missing"}
    said = prune_refusal(gone, expected, bad, "https://acct.blob.core.windows.net/cosmoflow/v07", "node 3")
    assert said.startswith("node 3: stage_prune would remove 6 of the 10 files staged here, whose blobs "
                           "https://acct.blob.core.windows.net/cosmoflow/v07 no longer lists (train/f0.tfrecord, ")
    assert "and 1 more), so nothing was fetched or removed" in said and said.endswith("if those files are to go.")
    assert prune_refusal(gone[:4], expected, bad, "u", "n") is None  # half is not most
    assert prune_refusal([], [], {}, "u", "n") is None
