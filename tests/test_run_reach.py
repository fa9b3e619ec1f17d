"""client.run.reach: why a URL's server cannot be reached, in one line, from a real refused
connection, a real TLS server whose certificate is not trusted, and a name that does not
resolve (the resolver is stood in for: tests send nothing beyond loopback)."""

from __future__ import annotations

import socket
import ssl
from pathlib import Path

import pytest

from client.commands.run import DEFAULT_URL
from client.run.reach import is_burn_service_default, unreachable
from tests.support import exit_code_and_errors, free_port
from tests.test_commands_run_tls import certificate, https_service

__all__ = ["certificate"]   # the fixture, used by name below


def test_refused() -> None:
    port = free_port()
    assert unreachable(f"http://127.0.0.1:{port}/x") == \
        f"connection refused: nothing listens on 127.0.0.1:{port}"


def test_a_name_that_does_not_resolve(monkeypatch: pytest.MonkeyPatch) -> None:
    def no_such_name(*_args: object, **_kwargs: object) -> socket.socket:
        raise socket.gaierror(socket.EAI_NONAME, "Name or service not known")

    monkeypatch.setattr(socket, "create_connection", no_such_name)
    assert unreachable("http://service.example:8080/") == \
        "name not resolved: service.example (Name or service not known)"


def test_an_untrusted_certificate_and_the_ways_to_trust_it(
        certificate: tuple[Path, Path]) -> None:
    cert, _key = certificate
    with https_service(*certificate) as base:
        problem = unreachable(base + "/cpuBurnFlow")
        assert unreachable(base + "/", verify=ssl.create_default_context(cafile=str(cert))) \
            is None
        assert unreachable(base + "/", verify=False) is None
    assert problem is not None and problem.startswith("TLS failure with 127.0.0.1:")
    assert "CERTIFICATE_VERIFY_FAILED" in problem and "--cacert" in problem


def test_only_burn_services_own_address_gets_the_burn_service_hint(
        tmp_path: Path, monkeypatch: pytest.MonkeyPatch,
        capsys: pytest.CaptureFixture[str]) -> None:
    assert is_burn_service_default(DEFAULT_URL)
    assert is_burn_service_default("http://127.0.0.1:7800/anything")
    assert not is_burn_service_default("http://127.0.0.1:7801/cpuBurnFlow")
    assert not is_burn_service_default("https://localhost:7800/")

    def refused(*_args: object, **_kwargs: object) -> socket.socket:
        raise ConnectionRefusedError(111, "Connection refused")

    monkeypatch.setattr(socket, "create_connection", refused)   # 7800 may be in use here
    code, err = exit_code_and_errors(["--requests", "3"], tmp_path, monkeypatch, capsys)
    assert code == 2 and err.splitlines() == [
        f"http-timing: cannot reach {DEFAULT_URL}?iterations=5000: connection refused: "
        "nothing listens on localhost:7800 (is burn-service running? start it with: "
        "burn-service)"]
    assert not (tmp_path / "raw-data").exists()
