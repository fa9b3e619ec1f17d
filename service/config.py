"""The service's settings: one table of options, read from the command line and the environment.

Every option ``--some-option`` of ``burn-service`` can also be given as the environment
variable ``BURN_SERVICE_SOME_OPTION`` (the way uvicorn reads ``UVICORN_*``). The command line
wins over the environment, the environment over the default. ``uvicorn service.app:app`` and
every worker process read the same variables, so the environment is how the settings travel.
"""

from __future__ import annotations

import dataclasses
import math
import os
import re
from collections.abc import Mapping
from dataclasses import dataclass, field
from typing import Any

__all__ = ["ENV_PREFIX", "Settings", "SettingsError", "env_name", "is_service_link",
           "option_fields"]

ENV_PREFIX = "BURN_SERVICE_"

# A burn iteration costs 1 microsecond of CPU once calibrated (--iteration-us), so the
# default 5000 iterations take about 5 ms, like the original flow; 5,000,000 is 5 s.
DEFAULT_MAX_ITERATIONS = 5_000_000
# A timed pi iteration (service.pi) costs about 0.3-0.5 microsecond, so 5,000,000 take
# about 2.5 s unthrottled here (measured: 5M in 2.4 s), and 25 s at 0.1 CPU.
DEFAULT_MAX_COUNTER = 5_000_000


class SettingsError(ValueError):
    """An option has a value outside its allowed range; the message names the option."""


def _opt(default: Any, help: str, *, minimum: float | None = None, maximum: float | None = None,
         choices: tuple[str, ...] | None = None, cli: bool = True, limit: str = "") -> Any:
    """An option; ``limit`` (its unit, ``CPU``) makes it a limit: its default, 0, is no limit,
    and a 0 given on the command line or in the environment is refused (``zero_limit``)."""
    return field(default=default, metadata={"help": help, "min": minimum, "max": maximum,
                                            "choices": choices, "cli": cli, "limit": limit})


@dataclass(frozen=True)
class Settings:
    """Everything the service can be told. Add an option here and it appears on the command
    line (``--name-with-dashes``), in the environment (``BURN_SERVICE_NAME``) and in ``/limits``
    where relevant."""

    host: str = _opt("127.0.0.1", "address to bind; keep it on loopback unless a limit is in front")
    port: int = _opt(7800, "port to listen on (the original flow's port)", minimum=0, maximum=65535)
    workers: int = _opt(1, "uvicorn worker processes", minimum=1, maximum=64)
    log_level: str = _opt("info", "log level",
                          choices=("critical", "error", "warning", "info", "debug", "trace"))
    max_iterations: int = _opt(DEFAULT_MAX_ITERATIONS,
                               "largest allowed ?iterations= of /cpuBurnFlow", minimum=0)
    max_counter: int = _opt(DEFAULT_MAX_COUNTER,
                            "largest allowed ?counter= of /pi and /api/pi", minimum=0)
    max_threads: int = _opt(0, "largest allowed ?threads= of /cpuBurnFlow (a request burning "
                            "on that many threads at once); 0 = 2 x CPUs", minimum=0,
                            maximum=1024)
    max_concurrent: int = _opt(0, "most requests doing CPU work (/cpuBurnFlow, /pi, /api/pi) at "
                               "once in each worker process; more wait in line (--max-queued) "
                               "(see service.guard); 0 = 2 x CPUs shared out across --workers",
                               minimum=0, maximum=100_000)
    max_queued: int = _opt(0, "most requests beyond --max-concurrent that wait (first come, "
                           "first served, no CPU used) for a slot in each worker process; more "
                           "get 503 with Retry-After at once; 0 = 8 x the resolved "
                           "--max-concurrent; -1 = no waiting line", minimum=-1,
                           maximum=1_000_000)
    iteration_us: float = _opt(1.0, "CPU one /cpuBurnFlow iteration costs, in microseconds: "
                               "the loop is measured at start (CPU time, ~10-20 ms) and each "
                               "iteration made of as much work as costs this (1 = the "
                               "original's: 5000 iterations ~ 5 ms of CPU on any machine)",
                               minimum=0.01, maximum=1000)
    calibrate: bool = _opt(True, "calibrate the burn to --iteration-us; --no-calibrate: one "
                           "pass of the raw loop per iteration, whatever it costs on this CPU")
    cpus: float = _opt(0.0, "run under a real kernel CPU quota of this many CPUs, like docker "
                       "--cpus (a cgroup made and removed by a supervisor, see cpu-quota; needs "
                       "root; in force from before the service listens, after its start-up)",
                       minimum=0, maximum=1024, limit="CPU")
    period_ms: float = _opt(100.0, "the kernel quota's period in ms (with --cpus)",
                            minimum=1, maximum=1000)
    burst_ms: float = _opt(0.0, "unused kernel quota that may be saved for later periods, in ms "
                           "(with --cpus; at most the quota per period)", minimum=0, maximum=1000)
    cpu_limit: float = _opt(0.0, "in-process CPU throttle: percent of one CPU this worker process "
                            "may use (no root needed)", minimum=0, maximum=100, limit="%")
    throttle_cycle: float = _opt(100.0, "the in-process throttle's cycle (its period) in ms",
                                 minimum=1, maximum=1000)
    throttle_mode: str = _opt("cfs", "cfs: pause work mid-request when the quota is spent, like "
                              "the kernel; boundary: check only between requests",
                              choices=("cfs", "boundary"))

    @classmethod
    def from_env(cls, environ: Mapping[str, str] | None = None, **overrides: Any) -> Settings:
        """Settings from ``BURN_SERVICE_*`` variables, then ``overrides`` (None means unset)."""
        environ = os.environ if environ is None else environ
        values: dict[str, Any] = {}
        for f in option_fields():
            name = env_name(f.name)
            raw = environ.get(name)
            if raw is not None and raw != "" and not is_service_link(raw):
                values[f.name] = _convert(f, raw, source=name)
                _refuse_zero_limit(f, values[f.name], f"{name}={raw}", f"unset {name}")
        fields = {f.name: f for f in option_fields()}
        for key, value in overrides.items():
            if value is None:
                continue
            if key in fields:
                flag = "--" + key.replace("_", "-")
                _refuse_zero_limit(fields[key], value, f"{flag} 0", f"omit {flag}")
            values[key] = value
        settings = cls(**values)
        settings.validate()
        return settings

    def validate(self) -> None:
        for f in option_fields():
            value = getattr(self, f.name)
            lo, hi, choices = f.metadata["min"], f.metadata["max"], f.metadata["choices"]
            flag = "--" + f.name.replace("_", "-")
            if choices is not None and value not in choices:
                raise SettingsError(f"{flag} must be one of {', '.join(choices)} (got {value!r})")
            if isinstance(value, float) and not math.isfinite(value):  # nan passes < and >
                raise SettingsError(f"{flag} must be a finite number (got {value})")
            if lo is not None and value < lo or hi is not None and value > hi:
                rng = f"[{lo if lo is not None else '-inf'}, {hi if hi is not None else 'inf'}]"
                if f.metadata["limit"]:  # 0 is the default, no limit: never given
                    rng = "(" + rng[1:]
                raise SettingsError(f"{flag} must be in {rng} (got {value})")
        if not self.calibrate and self.iteration_us != 1.0:
            raise SettingsError(f"--iteration-us {self.iteration_us:g} needs the calibration: "
                                "drop --no-calibrate (which keeps the raw loop's cost)")
        if self.cpus:
            from cpuquota.limit import kernel_limit  # the kernel's rules, in one place

            try:
                kernel_limit(self.cpus, self.period_ms, self.burst_ms)
            except ValueError as exc:
                raise SettingsError(str(exc)) from None

    def to_env(self) -> dict[str, str]:
        """The variables that make ``from_env`` rebuild these settings (for worker processes)."""
        out: dict[str, str] = {}
        for f in option_fields():
            value = getattr(self, f.name)
            if value is None or f.metadata["limit"] and value == 0:  # no limit: left unset
                continue
            out[env_name(f.name)] = str(value).lower() if isinstance(value, bool) else str(value)
        return out


_SERVICE_LINK = re.compile(r"(?:tcp|udp|sctp)://[^\s/]+:\d+")


def is_service_link(raw: str) -> bool:
    """``tcp://10.96.0.7:80``: what Kubernetes puts in ``BURN_SERVICE_PORT`` for a Service
    named ``burn-service`` (its docker-link variables), never a setting: ignored."""
    return _SERVICE_LINK.fullmatch(raw.strip()) is not None


def _refuse_zero_limit(f: dataclasses.Field[Any], value: Any, given: str, instead: str) -> None:
    """A limit of 0 given (``--cpus 0``, ``BURN_SERVICE_CPUS=0``): one line, what to give."""
    if f.metadata["limit"] and value == 0:
        from cpuquota.limit import zero_limit

        raise SettingsError(zero_limit(given, f"{instead} for no limit", f.metadata["limit"]))


def option_fields() -> tuple[dataclasses.Field[Any], ...]:
    return dataclasses.fields(Settings)


def env_name(name: str) -> str:
    return ENV_PREFIX + name.upper()


def field_type(f: dataclasses.Field[Any]) -> type:
    """The Python type of an option (annotations are strings under ``from __future__``)."""
    text = str(f.type).replace(" ", "")
    if text.startswith("int"):
        return int
    if text.startswith("float"):
        return float
    if text.startswith("bool"):
        return bool
    return str


def _convert(f: dataclasses.Field[Any], raw: str, *, source: str) -> Any:
    kind = field_type(f)
    try:
        if kind is bool:
            if raw.lower() in ("1", "true", "yes", "on"):
                return True
            if raw.lower() in ("0", "false", "no", "off"):
                return False
            raise ValueError(raw)
        return kind(raw)
    except ValueError:
        raise SettingsError(f"{source} must be {kind.__name__} (got {raw!r})") from None
