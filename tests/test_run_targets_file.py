"""client.run.targets_file: vegeta's http targets format."""

from __future__ import annotations

from pathlib import Path

import pytest

from client.data.request import HttpRequest, RequestError
from client.run.targets_file import parse_targets, read_targets_file


def test_targets_with_headers_comments_and_a_body(tmp_path: Path,
                                                  monkeypatch: pytest.MonkeyPatch) -> None:
    monkeypatch.chdir(tmp_path)
    Path("b.json").write_bytes(b'{"x": 1}')
    text = ("# comment\n\nGET http://h/a?x=1\nX-A: 1\n\n\n"
            "DELETE https://h:8443/b\nX-B: 2\nX-Run: mine\n\nPOST http://h/c\n@b.json\n")
    targets = parse_targets(text.splitlines(), "f", headers=(("X-Run", "all"),))
    assert targets == (
        HttpRequest("http://h/a?x=1", "GET", (("X-Run", "all"), ("X-A", "1"))),
        HttpRequest("https://h:8443/b", "DELETE", (("X-B", "2"), ("X-Run", "mine"))),
        HttpRequest("http://h/c", "POST", (("X-Run", "all"),), b'{"x": 1}'))


@pytest.mark.parametrize(("text", "words"), [
    ("GET\n", "f:1: expected a target 'METHOD URL'"),
    ("GET http://h/\nX: 1\n\nhttp://h/ GET\n", "f:4: expected a target"),
    ("GET http://h/\nbad header\n", "f:2: expected a header 'Name: value'"),
    ("POST http://h/\n@b\nX: 1\n", "f:2: cannot read the body @b"),
    ("# nothing\n\n", "f: no target in it"),
])
def test_a_bad_targets_file_names_its_line(text: str, words: str, tmp_path: Path,
                                           monkeypatch: pytest.MonkeyPatch) -> None:
    monkeypatch.chdir(tmp_path)
    with pytest.raises(RequestError, match="^" + words.replace("?", r"\?")):
        parse_targets(text.splitlines(), "f")


def test_an_unreadable_targets_file_is_named(tmp_path: Path) -> None:
    with pytest.raises(RequestError, match="--targets .*nope.txt: cannot read it"):
        read_targets_file(tmp_path / "nope.txt")
