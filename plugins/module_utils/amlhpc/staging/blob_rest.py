# Copyright: (c) 2026, amlhpc contributors
# MIT License (see LICENSE or https://opensource.org/licenses/MIT)
"""The Blob service's List Blobs call with a SAS, in the standard library.

A rerun lists the container twice on the controller: the data set's upload check and the
shard plan. With a SAS, neither needs the Azure SDK for that: one ``GET
<container>?restype=container&comp=list`` per 5,000 blobs, the SAS as its query, the answer
in XML (https://learn.microsoft.com/rest/api/storageservices/list-blobs). Importing
``azure.storage.blob`` cost about 0.4 s of CPU each time (AMD EPYC), more than the listing of a
small data set. The SDK is still what uploads, and what lists with an identity
(``blob_listing.identity_credential``).
"""

from __future__ import annotations

import urllib.error
import urllib.parse
import urllib.request
import xml.etree.ElementTree as ET  # nosec B405: the storage service's own answer
from dataclasses import dataclass, field

from .azcopy_sas import redact

API_VERSION = "2021-08-06"


@dataclass(frozen=True)
class ListedBlob:
    """One blob of a listing, as the service describes it."""

    name: str
    size: int
    content_md5: str | None = None  # base64, as the service gives it
    content_encoding: str = ""
    metadata: dict[str, str] = field(default_factory=dict)


class BlobRestError(RuntimeError):
    """The service refused the call (``status`` is its HTTP status) or could not be reached
    (``status`` None); the message has no SAS in it."""

    def __init__(self, message: str, status: int | None = None, code: str = "") -> None:
        super().__init__(message)
        self.status = status
        self.code = code


def parse_listing(body: bytes) -> tuple[list[ListedBlob], str]:
    """The blobs of one List Blobs answer and its ``NextMarker`` ("" on the last page)."""
    root = ET.fromstring(body.lstrip(b"\xef\xbb\xbf"))  # nosec B314: the storage service's own answer
    blobs = []
    for node in root.iterfind("./Blobs/Blob"):
        name_node = node.find("Name")
        name = (name_node.text or "") if name_node is not None else ""
        if name_node is not None and name_node.get("Encoded") == "true":
            name = urllib.parse.unquote(name)
        props = node.find("Properties")

        def prop(key: str, props=props) -> str:
            found = props.find(key) if props is not None else None
            return (found.text or "") if found is not None else ""

        found_metadata = node.find("Metadata")
        metadata = {m.tag: m.text or "" for m in (list(found_metadata) if found_metadata is not None else [])}
        blobs.append(ListedBlob(name=name, size=int(prop("Content-Length") or 0), content_md5=prop("Content-MD5") or None,
                                content_encoding=prop("Content-Encoding"), metadata=metadata))
    return blobs, (root.findtext("NextMarker") or "")


def _error(exc: urllib.error.HTTPError, secrets: list[str]) -> BlobRestError:
    code = exc.headers.get("x-ms-error-code", "") if exc.headers else ""
    message = ""
    try:
        body = exc.read()
        root = ET.fromstring(body.lstrip(b"\xef\xbb\xbf"))  # nosec B314: the storage service's own answer
        code = code or (root.findtext("Code") or "")
        lines = (root.findtext("Message") or "").strip().splitlines()
        message = lines[0] if lines else ""
    except (ET.ParseError, OSError, ValueError):
        pass
    text = redact(f"{code}: {message}" if message else (code or str(exc.reason)), secrets)
    return BlobRestError(text, status=exc.code, code=code)


def list_container(account_url: str, container: str, sas: str = "", prefix: str = "", *,
                   page_size: int | None = None, timeout: float = 60.0) -> list[ListedBlob] | None:
    """Every blob of ``container`` under ``prefix`` with its metadata, or None where the
    container does not exist. ``sas``: a SAS token with list permission ("" for a public
    container). Raises BlobRestError."""
    token = sas.strip().lstrip("?")
    secrets = [token] if token else []
    base = f"{account_url.rstrip('/')}/{urllib.parse.quote(container)}"
    blobs: list[ListedBlob] = []
    marker = ""
    while True:
        query = {"restype": "container", "comp": "list", "include": "metadata"}
        if prefix:
            query["prefix"] = prefix
        if marker:
            query["marker"] = marker
        if page_size:
            query["maxresults"] = str(page_size)
        url = f"{base}?{urllib.parse.urlencode(query)}" + (f"&{token}" if token else "")
        request = urllib.request.Request(url, headers={"x-ms-version": API_VERSION})
        try:
            with urllib.request.urlopen(request, timeout=timeout) as answer:  # nosec B310: an https/http account URL
                page, marker = parse_listing(answer.read())
        except urllib.error.HTTPError as exc:
            error = _error(exc, secrets)
            if error.status == 404 and error.code in ("ContainerNotFound", ""):
                return None
            raise error from None
        except (urllib.error.URLError, OSError) as exc:
            reason = getattr(exc, "reason", exc)
            raise BlobRestError(redact(str(reason), secrets)) from None
        blobs.extend(page)
        if not marker:
            return blobs
