"""Reading a List Blobs answer (amlhpc.staging.blob_rest.parse_listing), shaped as the Blob service
sends it (https://learn.microsoft.com/rest/api/storageservices/list-blobs): a byte-order mark,
an encoded name, a blob without metadata, the next page's marker."""

from __future__ import annotations

import email.message
import io
import urllib.error

from amlhpc.staging.blob_rest import ListedBlob, _error, parse_listing

PAGE = ("\ufeff<?xml version=\"1.0\" encoding=\"utf-8\"?>"
        "<EnumerationResults ServiceEndpoint=\"https://acct.blob.core.windows.net/\" ContainerName=\"cosmoflow\">"
        "<Prefix>train/</Prefix><MaxResults>2</MaxResults><Blobs>"
        "<Blob><Name>train/univ_000.tfrecord.gz</Name><Properties>"
        "<Creation-Time>Tue, 24 Nov 2026 10:00:00 GMT</Creation-Time><Content-Length>1234</Content-Length>"
        "<Content-Type>application/octet-stream</Content-Type><Content-Encoding>gzip</Content-Encoding>"
        "<Content-Language /><Content-MD5>1B2M2Y8AsgTpgAmY7PhCfg==</Content-MD5><BlobType>BlockBlob</BlobType>"
        "</Properties><Metadata><amlhpc_raw_bytes>4096</amlhpc_raw_bytes>"
        "<amlhpc_raw_sha256>ab</amlhpc_raw_sha256></Metadata></Blob>"
        "<Blob><Name Encoded=\"true\">train/odd%EF%BF%BEname</Name><Properties><Content-Length>7</Content-Length>"
        "<Content-Encoding /><Content-MD5 /></Properties><Metadata /></Blob>"
        "</Blobs><NextMarker>2!84!MDAwMDE5IXRyYWluL3VuaXZfMDAxLnRmcmVjb3JkLmd6</NextMarker></EnumerationResults>")


def test_a_page_of_the_service_s_answer():
    blobs, marker = parse_listing(PAGE.encode("utf-8"))
    assert blobs == [
        ListedBlob(name="train/univ_000.tfrecord.gz", size=1234, content_md5="1B2M2Y8AsgTpgAmY7PhCfg==",
                   content_encoding="gzip", metadata={"amlhpc_raw_bytes": "4096", "amlhpc_raw_sha256": "ab"}),
        ListedBlob(name="train/odd\ufffename", size=7, content_md5=None, content_encoding="", metadata={}),
    ]
    assert marker == "2!84!MDAwMDE5IXRyYWluL3VuaXZfMDAxLnRmcmVjb3JkLmd6"


def test_the_last_page_has_no_marker_and_an_empty_container_no_blobs():
    last = b"<?xml version=\"1.0\" encoding=\"utf-8\"?><EnumerationResults><Blobs /><NextMarker /></EnumerationResults>"
    assert parse_listing(last) == ([], "")


def _http_error(body: bytes, code: str = "") -> urllib.error.HTTPError:
    headers = email.message.Message()
    if code:
        headers["x-ms-error-code"] = code
    return urllib.error.HTTPError("https://acct.blob.core.windows.net/c", 403, "Forbidden", headers,
                                  io.BytesIO(body))


def test_the_service_s_error_gives_its_code_and_the_message_s_first_line_without_the_sas():
    body = ("\ufeff<?xml version=\"1.0\" encoding=\"utf-8\"?><Error><Code>AuthenticationFailed</Code>"
            "<Message>Server failed to authenticate the request. sig=SECRET\nRequestId:1\nTime:2026</Message>"
            "</Error>").encode("utf-8")
    error = _error(_http_error(body, "AuthenticationFailed"), ["sig=SECRET"])
    assert (error.status, error.code) == (403, "AuthenticationFailed")
    assert str(error).startswith("AuthenticationFailed: Server failed to authenticate the request.")
    assert "SECRET" not in str(error) and "RequestId" not in str(error)


def test_an_error_whose_message_is_blank_or_missing_names_the_code():
    blank = b"<Error><Code>AuthorizationFailure</Code><Message>  \n </Message></Error>"
    assert str(_error(_http_error(blank), [])) == "AuthorizationFailure"
    assert str(_error(_http_error(b"<Error><Code>ContainerNotFound</Code></Error>"), [])) == "ContainerNotFound"
    assert str(_error(_http_error(b"not xml"), [])) == "Forbidden"
