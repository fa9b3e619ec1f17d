"""service.timing: the ``Server-Timing`` of a piece of work, and what the kernel's ``cpu.stat``
counted while it ran (read as bytes before, parsed only when they changed)."""

from __future__ import annotations

from pathlib import Path

from cpuquota.cgroupfs import CpuStatReader
from service.timing import kernel_reading, work_timing

V1 = "nr_periods {periods}\nnr_throttled {throttled}\nthrottled_time {ns}\n"
V2 = ("usage_usec 5\nuser_usec 4\nsystem_usec 1\nnr_periods {periods}\nnr_throttled {throttled}\n"
      "throttled_usec {us}\n")


def group(tmp_path: Path, text: str, version: int = 1) -> CpuStatReader:
    (tmp_path / "cpu.stat").write_text(text)
    return CpuStatReader(tmp_path, version)


def test_the_work_alone_without_a_probe() -> None:
    assert kernel_reading(None) is None
    assert work_timing(5_000_000, 4_930_000, None, None, None) == "burn;dur=5.000, cpu;dur=4.930"
    assert work_timing(80_000_000, 5_000_000, 75_000_000, None, None) == \
        "burn;dur=80.000, cpu;dur=5.000, throttle;dur=75.000"


def test_an_unchanged_cpu_stat_counted_nothing(tmp_path: Path) -> None:
    probe = group(tmp_path, V1.format(periods=31, throttled=30, ns=2_071_000_000))
    before = kernel_reading(probe)
    assert work_timing(5_000_000, 5_000_000, None, probe, before) == \
        'burn;dur=5.000, cpu;dur=5.000, kernel-throttled;dur=0.000;desc="periods=0"'


def test_a_throttled_period_is_the_difference_of_the_counters(tmp_path: Path) -> None:
    probe = group(tmp_path, V1.format(periods=31, throttled=30, ns=2_071_000_000))
    before = kernel_reading(probe)
    (tmp_path / "cpu.stat").write_text(V1.format(periods=33, throttled=31, ns=2_141_500_000))
    assert work_timing(75_000_000, 5_000_000, None, probe, before) == \
        'burn;dur=75.000, cpu;dur=5.000, kernel-throttled;dur=70.500;desc="periods=1"'


def test_a_periods_end_without_throttling_counts_zero(tmp_path: Path) -> None:
    probe = group(tmp_path, V2.format(periods=9, throttled=3, us=1500), version=2)
    before = kernel_reading(probe)
    (tmp_path / "cpu.stat").write_text(V2.format(periods=10, throttled=3, us=1500))
    assert work_timing(5_000_000, 5_000_000, None, probe, before).endswith(
        ', kernel-throttled;dur=0.000;desc="periods=0"')


def test_a_cpu_stat_that_cannot_be_read_leaves_the_kernel_out(tmp_path: Path) -> None:
    assert kernel_reading(CpuStatReader(tmp_path / "missing", 1)) is None
    probe = group(tmp_path, V1.format(periods=1, throttled=0, ns=0))
    before = kernel_reading(probe)
    (tmp_path / "cpu.stat").unlink()
    probe.close()  # the group is gone: the next reading opens the file again and fails
    assert work_timing(5_000_000, 5_000_000, None, probe, before) == \
        "burn;dur=5.000, cpu;dur=5.000"


def test_a_cpu_stat_without_bandwidth_counters_leaves_the_kernel_out(tmp_path: Path) -> None:
    probe = group(tmp_path, "usage_usec 5\nuser_usec 4\nsystem_usec 1\n", version=2)
    before = kernel_reading(probe)
    (tmp_path / "cpu.stat").write_text("usage_usec 9\nuser_usec 7\nsystem_usec 2\n")
    assert work_timing(5_000_000, 5_000_000, None, probe, before) == \
        "burn;dur=5.000, cpu;dur=5.000"
