"""client.data.request: the request type, header parsing and redaction."""

from __future__ import annotations

import hashlib

import pytest

from client.data.request import (HttpRequest, RequestError, is_burn_service_url, parse_header,
                                 redact_command)


def test_metadata_keeps_no_secret() -> None:
    request = HttpRequest("http://h/", "POST", (("Authorization", "Bearer s"), ("cookie", "c"),
                                                ("Proxy-Authorization", "p"), ("X-Key", "k"),
                                                ("Accept", "a")), b"secret body")
    meta = request.to_metadata(redact=["x-key"])
    assert meta["headers"] == [["Authorization", "<redacted>"], ["cookie", "<redacted>"],
                               ["Proxy-Authorization", "<redacted>"], ["X-Key", "<redacted>"],
                               ["Accept", "a"]]
    assert meta["body"] == {"bytes": 11, "sha256": hashlib.sha256(b"secret body").hexdigest()}
    assert HttpRequest("http://h/").to_metadata()["body"] is None


def test_the_command_line_keeps_no_secret() -> None:
    argv = ["--url", "http://h/", "-H", "Authorization: Bearer s", "--header=Cookie: c",
            "-HX-Key: k", "-H", "Accept: a", "-d", "text", "--data=t2", "-d", "@f.json",
            "--redact", "X-Key"]
    assert redact_command(argv, ["x-key"]) == [
        "--url", "http://h/", "-H", "Authorization: <redacted>", "--header=Cookie: <redacted>",
        "-HX-Key: <redacted>", "-H", "Accept: a", "-d", "<redacted>", "--data=<redacted>",
        "-d", "@f.json", "--redact", "X-Key"]


def test_headers_and_requests_are_checked() -> None:
    assert parse_header("X-A:  b c ") == ("X-A", "b c")
    assert parse_header("X-Empty:") == ("X-Empty", "")
    for bad in ("no colon", ": v", "Bad Name: v"):
        with pytest.raises(RequestError):
            parse_header(bad)
    for url, method in (("ftp://h/", "GET"), ("http://h/", "G T"), ("http:///x", "GET")):
        with pytest.raises(RequestError):
            HttpRequest(url, method)
    with pytest.raises(RequestError):
        HttpRequest("http://h/", headers=(("X", "a\r\nInjected: 1"),))


def test_only_burn_services_url_is_burn_service() -> None:
    assert is_burn_service_url("http://h:7800/cpuBurnFlow?iterations=1")
    assert not is_burn_service_url("http://h/api/cpuBurnFlowX")
