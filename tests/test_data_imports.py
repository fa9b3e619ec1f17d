"""client/data/formats, the results formats: each recognised from its content, its times read
with their semantics (k6's end, nginx's $msec - $request_time, relative offsets), --format
forcing, and bad files refused in one line naming the file and the line."""

from __future__ import annotations

import gzip
import sqlite3
from pathlib import Path

import pytest

from client.data.formats import EPOCH, IMPORTERS, RELATIVE, ImportFileError, read_results
from client.data.formats.nginx import LOG_FORMAT

K6_POINT = ('{"type":"Point","data":{"time":"2017-05-09T14:34:45.239531499+02:00",'
            '"value":459.865729,"tags":{"group":"::my group","method":"GET","status":"200",'
            '"url":"https://quickpizza.grafana.com"}},"metric":"http_req_duration"}\n')
K6_METRIC = ('{"type":"Metric","data":{"type":"trend","contains":"time","tainted":null,'
             '"thresholds":["avg<1000"],"submetrics":null},"metric":"http_req_duration"}\n')
K6_END = 1494333285_239531499   # 2017-05-09T12:34:45.239531499Z
CSV_HEADER_K6 = ("metric_name,timestamp,metric_value,check,error,error_code,expected_response,"
                 "group,method,name,proto,scenario,service,status,subproto,tls_version,url,"
                 "extra_tags,metadata\n")
TRAEFIK_JSON = ('{"ClientAddr":"10.42.0.1:52414","ClientHost":"10.42.0.1","DownstreamStatus":200,'
                '"Duration":27912345,"OriginDuration":27000000,"OriginStatus":200,'
                '"Overhead":912345,"RequestCount":7,"RequestMethod":"GET",'
                '"RequestPath":"/cpuBurnFlow?iterations=5000","RouterName":"limited@kubernetes",'
                '"ServiceAddr":"10.42.0.7:7800","ServiceURL":"http://10.42.0.7:7800",'
                '"StartLocal":"2024-11-24T03:46:40.123456789Z",'
                '"StartUTC":"2024-11-24T03:46:40.123456789Z","level":"info","msg":"",'
                '"time":"2024-11-24T03:46:40Z"}\n')

FILES: dict[str, tuple[str, str]] = {   # format: (file name, content)
    "vegeta-csv": ("r.csv", "1732420000123456789,200,5000000,0,78,,Ym9keQ==,,0,GET,"
                   "http://127.0.0.1:7800/x,\n"
                   '1732420000223456789,0,7000000,0,0,"dial tcp: refused",,,1,GET,'
                   "http://127.0.0.1:7800/x,\n"),
    "vegeta-json": ("r.json", '{"attack":"","seq":0,"code":200,"timestamp":'
                    '"2024-11-24T03:46:40.123456789Z","latency":5000000,"bytes_out":0,'
                    '"bytes_in":78,"error":"","body":null,"method":"GET","url":"http://x/y",'
                    '"headers":null}\n'),
    "k6-json": ("k6.json", K6_METRIC + K6_POINT),
    "k6-csv": ("k6.csv", CSV_HEADER_K6 + "http_req_duration,1494333285239531499,459.865729,,,,"
               "true,,GET,u,HTTP/1.1,default,,200,,,u,,\n"),
    "hey-csv": ("hey.csv", "response-time,DNS+dialup,DNS,Request-write,Response-delay,"
                "Response-read,status-code,offset\n0.0051,0.0002,0.0000,0.0000,0.0048,0.0000,"
                "200,0.0012\n0.0060,0.0000,0.0000,0.0000,0.0059,0.0000,200,0.0064\n"),
    "oha-csv": ("oha.csv", "request-start,DNS,DNS+dialup,Response-delay,request-duration,bytes,"
                "status\n0.0012,0.0001,0.0003,0.0049,0.0051,78,200\n"),
    "jmeter-csv": ("out.jtl", "timeStamp,elapsed,label,responseCode,responseMessage,threadName,"
                   "dataType,success,failureMessage,bytes,sentBytes,grpThreads,allThreads,URL,"
                   "Latency,IdleTime,Connect\n1732420000123,57,HTTP Request,200,OK,"
                   "Thread Group 1-1,text,true,,78,118,1,1,http://x/y,57,0,0\n"),
    "locust-csv": ("requests.csv", "timestamp,request_type,name,response_time_ms,"
                   "response_length,status_code,exception\n1732420000.123456,GET,/x,5.25,78,"
                   "200,\n"),
    "nginx": ("access.log", '127.0.0.1 - - [24/Nov/2024:03:46:40 +0000] "GET /x HTTP/1.1" 200 '
              '78 "-" "hey/0.0.1" 0.057 1732420000.180\n'),
    "envoy": ("envoy.log", '[2016-04-15T20:17:00.310Z] "POST /api/v1/locations HTTP/2" 204 - '
              '154 0 226 100 "10.0.35.28" "nsq2http" "cc21d9b0-cf5c-432b-8c7e-98aeb7988cd2" '
              '"locations" "tcp://10.0.2.1:80"\n'),
    "traefik": ("traefik.log", '10.0.0.1 - - [10/Nov/2009:23:00:00 +0000] "GET / HTTP/1.1" 200 '
                '0 "-" "foo \\" bar" 1 "test@file" "http://127.0.0.1:8080" 1ms\n'),
    "traefik-json": ("traefik.json", TRAEFIK_JSON),
    "envoy-json": ("envoy.json", '{"start_time":"2016-04-15T20:17:00.310Z","method":"POST",'
                   '"path":"/api","response_code":204,"duration":226}\n'),
}

FIRST: dict[str, tuple[int, int, int]] = {   # format: (start ns, latency ns, status)
    "vegeta-csv": (1732420000123456789, 5_000_000, 200),
    "vegeta-json": (1732420000123456789, 5_000_000, 200),
    "k6-json": (K6_END - 459_865_729, 459_865_729, 200),
    "k6-csv": (K6_END - 459_865_729, 459_865_729, 200),
    "hey-csv": (1_200_000, 5_100_000, 200),
    "oha-csv": (1_200_000, 5_100_000, 200),
    "jmeter-csv": (1732420000123_000_000, 57_000_000, 200),
    "locust-csv": (1732420000123456000, 5_250_000, 200),
    "nginx": (1732420000123_000_000, 57_000_000, 200),
    "envoy": (1460751420310_000_000, 226_000_000, 204),
    "envoy-json": (1460751420310_000_000, 226_000_000, 204),
    "traefik": (1257894000_000_000_000, 1_000_000, 200),
    "traefik-json": (1732420000123456789, 27_912_345, 200),
}


def write(tmp_path: Path, fmt: str) -> Path:
    name, content = FILES[fmt]
    path = tmp_path / name
    path.write_text(content)
    return path


@pytest.mark.parametrize("fmt", sorted(FILES))
def test_each_format_is_recognised_and_read(fmt: str, tmp_path: Path) -> None:
    imported = read_results(write(tmp_path, fmt))
    assert imported.format == fmt
    first = imported.requests[0]
    assert (first.start_ns, first.latency_ns, first.status) == FIRST[fmt]
    assert imported.clock == (RELATIVE if fmt in ("hey-csv", "oha-csv") else EPOCH)


def test_every_importer_has_a_test() -> None:
    """Each format has a sample here, but oha's SQLite (test_oha_sqlite) and http-timing's
    own runs (tests/test_commands_import_run.py, on a real run)."""
    assert set(IMPORTERS) == set(FILES) | {"oha-sqlite", "http-timing"}


def test_vegeta_errors_and_gzip(tmp_path: Path) -> None:
    path = tmp_path / "r.csv.gz"
    path.write_bytes(gzip.compress(FILES["vegeta-csv"][1].encode()))
    imported = read_results(path)
    assert [r.status for r in imported.requests] == [200, 0]
    assert imported.requests[1].error == "dial tcp: refused"


def test_oha_sqlite(tmp_path: Path) -> None:
    path = tmp_path / "oha.db"
    with sqlite3.connect(path) as db:   # the table oha's src/db.rs creates
        db.execute("CREATE TABLE oha (url TEXT NOT NULL, start REAL NOT NULL, "
                   "start_latency_correction REAL, end REAL NOT NULL, duration REAL NOT NULL, "
                   "status INTEGER NOT NULL, len_bytes INTEGER NOT NULL, run INTEGER NOT NULL)")
        db.execute("INSERT INTO oha VALUES ('http://x/y', 0.5, NULL, 0.55, 0.05, 200, 78, "
                   "1732420000)")
    db.close()
    imported = read_results(path)
    assert imported.format == "oha-sqlite" and imported.clock == RELATIVE
    assert imported.anchor_epoch_ns == 1732420000_000_000_000
    assert (imported.requests[0].start_ns, imported.requests[0].latency_ns) == (
        500_000_000, 50_000_000)


def test_format_forces(tmp_path: Path) -> None:
    path = write(tmp_path, "envoy-json")
    with pytest.raises(ImportFileError, match=r"line 1: expected a JSON object with timestamp"):
        read_results(path, "vegeta-json")


@pytest.mark.parametrize(("fmt", "content", "expected"), [
    ("k6-csv", CSV_HEADER_K6 + "http_req_duration,1494333285,459.865729,,,,true,,GET,u,HTTP/1.1,"
     "default,,200,,,u,,\n", r"line 2: timestamp 1494333285 is whole seconds .*unix_nano"),
    ("k6-csv", CSV_HEADER_K6 + "http_req_duration,2017-05-09T12:34:45Z,459.8,,,,true,,GET,u,"
     "HTTP/1.1,default,,200,,,u,,\n", r"line 2: .*whole seconds \(timeFormat=rfc3339\)"),
    ("hey-csv", FILES["hey-csv"][1] + "0.0051,0.0002,0.0000,0.0000,0.0048,0.0000,200\n",
     r"line 4: 7 fields, expected 8"),
    ("nginx", '127.0.0.1 - - [24/Nov/2024:03:46:40 +0000] "GET /x HTTP/1.1" 200 78 "-" "x"\n',
     r"line 1: expected the 'timing' log_format"),
    ("vegeta-json", FILES["vegeta-json"][1] + '{"attack":"","seq":1,"latency":"x"}\n',
     r"line 2: expected a JSON object"),
    ("jmeter-csv", FILES["jmeter-csv"][1] + "soon,57,HTTP Request,200,OK,T,text,true,,78,118,1,"
     "1,http://x/y,57,0,0\n", r"line 3: expected integer ms"),
])
def test_bad_files_name_the_line(fmt: str, content: str, expected: str, tmp_path: Path) -> None:
    path = tmp_path / "bad"
    path.write_text(content)
    with pytest.raises(ImportFileError, match=expected) as caught:
        read_results(path)
    assert str(caught.value).startswith(f"{path}: ") and "\n" not in str(caught.value)


def test_unknown_and_empty_files(tmp_path: Path) -> None:
    unknown = tmp_path / "u.txt"
    unknown.write_text("hello\n")
    with pytest.raises(ImportFileError, match=r"u.txt: line 1: not a format import knows"):
        read_results(unknown)
    empty = tmp_path / "e.txt"
    empty.write_text("")
    with pytest.raises(ImportFileError, match="empty file"):
        read_results(empty)
    with pytest.raises(ImportFileError, match="no such file"):
        read_results(tmp_path / "missing.csv")


def test_the_documented_nginx_line_is_the_one_read() -> None:
    assert "$request_time $msec" in LOG_FORMAT


def test_traefik_upstreams_own_lines_and_whole_seconds(tmp_path: Path) -> None:
    """Traefik's own log lines (stdout mixes them in) are passed over; each request keeps its
    upstream; the CLF's starts are whole seconds (start_step), JSON's are ns."""
    clf = tmp_path / "clf.log"
    clf.write_text('2024-11-24T03:46:39Z INF Starting provider *ingress.Provider\n'
                   + FILES["traefik"][1] +
                   '10.0.0.1 - - [10/Nov/2009:23:00:01 +0000] "GET /x HTTP/1.1" 502 0 "-" "-" 2 '
                   '"r@kubernetes" "http://[fd00::7]:7800" 15ms\n')
    imported = read_results(clf)
    assert imported.format == "traefik" and imported.start_step_ns == 1_000_000_000
    assert [(r.upstream, r.status, r.error) for r in imported.requests] == [
        ("127.0.0.1:8080", 200, ""), ("[fd00::7]:7800", 502, "HTTP 502")]
    assert imported.notes == ["1 lines of Traefik's own log passed over"]
    js = tmp_path / "t.json"
    js.write_text('{"level":"info","msg":"Configuration loaded","time":"2024-11-24T03:46:39Z"}\n'
                  + TRAEFIK_JSON + TRAEFIK_JSON.replace(   # StartUTC dropped, a local zone
                      '"StartUTC":"2024-11-24T03:46:40.123456789Z",', '').replace(
                      "03:46:40.123456789Z", "04:46:40.1234+01:00").replace("10.42.0.7",
                                                                            "10.42.0.8"))
    imported = read_results(js)
    assert imported.format == "traefik-json" and imported.start_step_ns == 0
    assert [r.upstream for r in imported.requests] == ["10.42.0.7:7800", "10.42.0.8:7800"]
    assert imported.requests[1].start_ns == 1732420000123400000   # RFC3339Nano drops 0s


@pytest.mark.parametrize(("content", "expected"), [
    ('{"StartUTC":"soon","Duration":5}\n', r"line 1: .*StartUTC is 'soon'"),
    ('{"StartUTC":"2024-11-24T03:46:40Z","Duration":"5ms"}\n', r"line 1: .*Duration \(ns\)"),
    ('{"StartUTC":"2024-11-24T03:46:40Z","Duration":5}\nnot json\n', r"line 2: expected a JSON"),
])
def test_traefik_json_errors(content: str, expected: str, tmp_path: Path) -> None:
    path = tmp_path / "bad.json"
    path.write_text(content)
    with pytest.raises(ImportFileError, match=expected):
        read_results(path, "traefik-json")
