from __future__ import annotations

from client.data.servertiming import parse_server_timing, server_fields


def test_parses_service_header_into_columns() -> None:
    header = ('burn;dur=4.930, cpu;dur=4.812, throttle;dur=70.5, '
              'kernel-throttled;dur=69.1;desc="periods=1"')
    assert server_fields(header) == {
        "server_wall_ns": 4_930_000, "server_cpu_ns": 4_812_000,
        "server_throttle_ns": 70_500_000, "kernel_throttled_ns": 69_100_000,
        "kernel_nr_throttled": 1,
    }


def test_malformed_and_foreign_metrics_are_ignored() -> None:
    assert server_fields(None) == {}
    assert server_fields("") == {}
    assert server_fields("db;dur=abc, cache;desc=hit, ;;, cpu;dur=-1") == {}
    metrics = parse_server_timing('miss, db;dur=53, app;dur=47.2;desc="x y"')
    assert [m.name for m in metrics] == ["miss", "db", "app"]
    assert metrics[2].dur_ms == 47.2 and metrics[2].desc == "x y"
