"""Property-based tests for ``service.config``: whatever the environment holds, building the
settings either works (and the result is in range) or raises ``SettingsError`` naming the
option; never another exception, which would reach the user as a traceback."""

from __future__ import annotations

import math

import pytest
from hypothesis import example, given, settings
from hypothesis import strategies as st

from service.config import Settings, SettingsError, env_name, field_type, option_fields
from service.guard import resolve_max_concurrent

NAMES = [f.name for f in option_fields()]
# Text that looks like what people type, plus anything at all.
NUMBERISH = st.one_of(
    st.integers(min_value=-10**6, max_value=10**9).map(str),
    st.floats(allow_nan=True, allow_infinity=True).map(str),
    st.sampled_from(["nan", "-nan", "inf", "-inf", "Infinity", "1e309", "0x10", "1_000", " 7 ",
                     "٣", "true", "1.5", "9" * 5000, "", " ", "\t", "\x00", "--1"]),
)
RAW = st.one_of(NUMBERISH, st.text(max_size=40))
ENVIRON = st.dictionaries(st.sampled_from(NAMES).map(env_name), RAW, max_size=len(NAMES))


def _check_in_range(built: Settings) -> None:
    for f in option_fields():
        value = getattr(built, f.name)
        assert isinstance(value, field_type(f)), (f.name, value)
        if isinstance(value, float):
            assert math.isfinite(value), f.name
        lo, hi, choices = f.metadata["min"], f.metadata["max"], f.metadata["choices"]
        if lo is not None:
            assert value >= lo, f.name
        if hi is not None:
            assert value <= hi, f.name
        if choices is not None:
            assert value in choices, f.name


@settings(max_examples=400, deadline=None)
@given(ENVIRON)
@example({env_name("period_ms"): "nan"})
@example({env_name("cpus"): "nan"})
@example({env_name("cpu_limit"): "inf"})
@example({env_name("max_concurrent"): "-1"})
def test_from_env_builds_settings_in_range_or_raises_settings_error(
        environ: dict[str, str]) -> None:
    try:
        built = Settings.from_env(environ)
    except SettingsError as exc:
        message = str(exc)
        assert message and "\n" not in message
        assert message.startswith(("--", "BURN_SERVICE_")), message  # names the option
        return
    _check_in_range(built)
    assert resolve_max_concurrent(built) >= 1


@settings(max_examples=200, deadline=None)
@given(st.sampled_from([n for n in NAMES if field_type(
    next(f for f in option_fields() if f.name == n)) in (int, float)]), NUMBERISH)
def test_one_numeric_option_from_env(name: str, raw: str) -> None:
    try:
        built = Settings.from_env({env_name(name): raw})
    except SettingsError as exc:
        assert ("--" + name.replace("_", "-")) in str(exc) or env_name(name) in str(exc)
        return
    _check_in_range(built)


@settings(max_examples=200, deadline=None)
@given(ENVIRON)
def test_to_env_round_trips(environ: dict[str, str]) -> None:
    try:
        built = Settings.from_env(environ)
    except SettingsError:
        return
    assert Settings.from_env(built.to_env()) == built


def test_non_finite_numbers_are_refused_by_name() -> None:
    for raw in ("nan", "inf", "-inf"):
        for name in ("period_ms", "throttle_cycle", "cpu_limit", "cpus", "burst_ms"):
            try:
                Settings.from_env({env_name(name): raw})
            except SettingsError as exc:
                assert name.replace("_", "-") in str(exc) or env_name(name) in str(exc)
            else:
                raise AssertionError(f"{name}={raw} was accepted")


def test_a_kubernetes_service_link_is_not_a_setting() -> None:
    """A Service named burn-service makes Kubernetes set BURN_SERVICE_PORT=tcp://IP:PORT in
    every pod of its namespace: the service keeps its own port, a real port still counts."""
    links = {"BURN_SERVICE_PORT": "tcp://10.96.0.7:80",
             "BURN_SERVICE_PORT_80_TCP": "tcp://10.96.0.7:80",
             "BURN_SERVICE_SERVICE_HOST": "10.96.0.7", "BURN_SERVICE_SERVICE_PORT": "80"}
    assert Settings.from_env(links) == Settings.from_env({})
    assert Settings.from_env({**links, "BURN_SERVICE_PORT": "7801"}).port == 7801
    with pytest.raises(SettingsError, match="BURN_SERVICE_PORT must be int"):
        Settings.from_env({"BURN_SERVICE_PORT": "http://example:80/"})
