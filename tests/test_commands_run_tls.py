"""``http-timing run`` against an ``https://`` service with a certificate of its own (a
self-signed one made by ``openssl``, served by a real uvicorn): refused with a hint by default,
timed with ``--cacert`` (that certificate trusted) or ``--insecure``; a bad ``--cacert`` is one
line, exit 2."""

from __future__ import annotations

import shutil
import subprocess
import threading
import time
from collections.abc import Iterator
from contextlib import contextmanager
from pathlib import Path

import pytest
import uvicorn

from client.data.files import read_run
from service.app import create_app
from service.config import Settings
from tests.support import free_port, http_timing, require, usage_error


@pytest.fixture(scope="module")
def certificate(tmp_path_factory: pytest.TempPathFactory) -> tuple[Path, Path]:
    """A self-signed certificate for 127.0.0.1 and its key (PEM)."""
    require(shutil.which("openssl") is not None, "needs the openssl command")
    folder = tmp_path_factory.mktemp("tls")
    cert, key = folder / "cert.pem", folder / "key.pem"
    subprocess.run(["openssl", "req", "-x509", "-newkey", "rsa:2048", "-nodes", "-days", "2",
                    "-keyout", str(key), "-out", str(cert), "-subj", "/CN=127.0.0.1",
                    "-addext", "subjectAltName=IP:127.0.0.1"],
                   check=True, capture_output=True, timeout=60)
    return cert, key


@contextmanager
def https_service(cert: Path, key: Path) -> Iterator[str]:
    """The burn service on a real uvicorn with TLS, in a thread; stopped at the end."""
    port = free_port()
    config = uvicorn.Config(create_app(Settings(port=port, log_level="warning")),
                            host="127.0.0.1", port=port, log_level="warning", lifespan="on",
                            ssl_certfile=str(cert), ssl_keyfile=str(key))
    server = uvicorn.Server(config)
    thread = threading.Thread(target=server.run, daemon=True)
    thread.start()
    try:
        deadline = time.monotonic() + 30
        while not server.started:
            assert thread.is_alive() and time.monotonic() < deadline, "no TLS server"
            time.sleep(0.05)
        yield f"https://127.0.0.1:{port}"
    finally:
        server.should_exit = True
        thread.join(timeout=10)


def test_an_untrusted_certificate_is_one_line_with_the_way_out(
        certificate: tuple[Path, Path], tmp_path: Path) -> None:
    with https_service(*certificate) as base:
        result = http_timing("--url", f"{base}/cpuBurnFlow", "--requests", "3", "--no-plot",
                             "--name", "untrusted", cwd=tmp_path)
    assert result.returncode == 2, result.stderr
    first = result.stderr.splitlines()[0]   # said first, before anything else
    assert first.startswith(f"http-timing: cannot reach {base}/cpuBurnFlow")
    assert "CERTIFICATE_VERIFY_FAILED" in first and "--cacert" in first and "--insecure" in first
    assert "Traceback" not in result.stderr and result.stdout == ""
    assert not (tmp_path / "raw-data").exists()


@pytest.mark.parametrize("trust", ["cacert", "insecure"])
def test_cacert_or_insecure_times_the_https_service(certificate: tuple[Path, Path],
                                                     tmp_path: Path, trust: str) -> None:
    cert, _ = certificate
    flags = ["--cacert", str(cert)] if trust == "cacert" else ["--insecure"]
    with https_service(*certificate) as base:
        result = http_timing("--url", f"{base}/cpuBurnFlow", "--requests", "5",
                             "--iterations", "200", "--warmup", "2", "--no-plot",
                             "--name", trust, *flags, cwd=tmp_path)
    assert result.returncode == 0, result.stderr
    assert result.stdout.count("Status code 200") == 5
    run = read_run(tmp_path / "raw-data" / f"{trust}.csv")
    assert [r.status for r in run.records] == [200] * 5
    assert all(r.server_cpu_ns for r in run.records)    # Server-Timing came through TLS
    assert run.metadata.limits is not None              # /limits was read over TLS too


@pytest.mark.parametrize(("args", "message"), [
    (["--cacert", "no-such.pem"], "cannot use --cacert no-such.pem: No such file or directory"),
    (["--cacert", "junk.pem"], "cannot use --cacert junk.pem: no PEM certificate in it"),
    (["--cacert", "junk.pem", "--insecure"], "not allowed with argument"),
])
def test_a_bad_cacert_is_one_line_and_exit_2(tmp_path: Path, args: list[str], message: str,
                                             monkeypatch: pytest.MonkeyPatch,
                                             capsys: pytest.CaptureFixture[str]) -> None:
    (tmp_path / "junk.pem").write_text("not a certificate\n")
    line = usage_error(["--url", "https://127.0.0.1:9/", "--requests", "1", *args], tmp_path,
                       monkeypatch, capsys)
    assert message in line, line
    assert not (tmp_path / "raw-data").exists()      # nothing was run
