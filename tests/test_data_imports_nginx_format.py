"""client/data/imports/nginx_format: an nginx log_format in nginx's own syntax (the directive,
its strings, or the bare format) read back from the lines it writes; ingress-nginx's
upstreaminfo + $msec among them; a format without $msec/$request_time and a line that does
not match refused in one line."""

from __future__ import annotations

from pathlib import Path

import pytest

from client.data.formats.base import ImportFileError
from client.data.formats.nginx import NginxLogFormat
from client.data.formats.nginx_format import LogFormatError, parse_log_format

UPSTREAMINFO = ("log_format upstreaminfo\n"
                "    '$remote_addr - $remote_user [$time_local] \"$request\" '\n"
                "    '$status $body_bytes_sent \"$http_referer\" \"$http_user_agent\" '\n"
                "    '$request_length $request_time [$proxy_upstream_name] "
                "[$proxy_alternative_upstream_name] $upstream_addr '\n"
                "    '$upstream_response_length $upstream_response_time $upstream_status "
                "$req_id $msec';")
LINE = ('10.244.0.1 - - [25/Feb/2026:10:30:15 +0000] "GET /cpuBurnFlow?iterations=5 HTTP/1.1" '
        '200 1234 "-" "Mozilla/5.0 (X11; Linux)" 456 0.032 [throttle-lab-limited-7800] [] '
        '10.42.0.6:7800, 10.42.0.7:7800 0, 1234 0.000, 0.031 502, 200 abc123def456 '
        '1772015415.180')


def test_upstreaminfo_directive_with_msec(tmp_path: Path) -> None:
    fmt = parse_log_format(UPSTREAMINFO)
    assert fmt.text.startswith("$remote_addr - $remote_user [$time_local]")
    values = fmt.match(LINE)
    assert values is not None
    assert values["upstream_addr"] == "10.42.0.6:7800, 10.42.0.7:7800"
    assert values["http_user_agent"] == "Mozilla/5.0 (X11; Linux)"
    assert values["proxy_alternative_upstream_name"] == ""
    log = tmp_path / "access.log"
    log.write_text(LINE + "\n")
    imported = NginxLogFormat(UPSTREAMINFO).read(log)
    request = imported.requests[0]
    assert (request.start_ns, request.latency_ns, request.status) == (
        1772015415_148_000_000, 32_000_000, 200)
    assert request.upstream == "10.42.0.7:7800"   # the last: the one that answered
    assert imported.upstreams and imported.url == "/cpuBurnFlow?iterations=5"


@pytest.mark.parametrize("given", [
    "$msec ${request_time} \"$request\" $status",
    "'$msec ${request_time} \"$request\" ' '$status'",
    "log_format t escape=json '$msec ${request_time} \"$request\" $status';",
])
def test_the_ways_of_writing_it(given: str) -> None:
    fmt = parse_log_format(given)
    assert fmt.names == ("msec", "request_time", "request", "status")
    assert fmt.match('1.5 0.25 "GET / HTTP/1.1" 200') == {
        "msec": "1.5", "request_time": "0.25", "request": "GET / HTTP/1.1", "status": "200"}


def test_json_escape_and_repeats() -> None:
    fmt = parse_log_format("log_format j escape=json '{\"t\":$msec,\"d\":$request_time,"
                           "\"a\":\"$http_user_agent\",\"again\":$msec}';")
    values = fmt.match('{"t":10.000,"d":0.001,"a":"say \\"hi\\"","again":10.000}')
    assert values is not None and values["http_user_agent"] == 'say \\"hi\\"'


@pytest.mark.parametrize(("given", "expected"), [
    ("$remote_addr [$time_local] $status", r"needs \$msec .*\$msec and \$request_time are not"),
    ("$msec $status", r"\$request_time is not in"),
    ("log_format upstreaminfo", r"without a format"),
    ("'$msec $request_time", r"not closed"),
])
def test_formats_refused(given: str, expected: str) -> None:
    with pytest.raises(LogFormatError, match=expected) as caught:
        parse_log_format(given)
    assert "\n" not in str(caught.value)


def test_a_line_that_does_not_match_names_it(tmp_path: Path) -> None:
    log = tmp_path / "access.log"
    log.write_text(LINE + "\n\n" + LINE.replace("0.032", "soon") + "\n")
    with pytest.raises(ImportFileError, match=r"access.log: line 3: does not match the "
                       r"--log-format '\$remote_addr"):
        NginxLogFormat(UPSTREAMINFO).read(log)
