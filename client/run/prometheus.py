"""Prometheus's HTTP API as ``cluster --prometheus`` reads it: instant queries
(``/api/v1/query``) and the series API (``/api/v1/series``); the bounded queries themselves
are ``client.run.prometheus_query``'s.

Prometheus is reached at a URL (``http://HOST:9090``) or, as robusta-dev/krr reaches it,
through the API server's service proxy: ``k8s:NAMESPACE/SERVICE[:PORT]`` is
``/api/v1/namespaces/NAMESPACE/services/SERVICE:PORT/proxy`` with the kubeconfig's
credentials (``get services/proxy`` in that namespace). Every failure is one line
(:class:`PrometheusError`): unreachable (the address and the reason), a query refused or
not answered in time (:class:`PrometheusRefused`: Prometheus's own error text).
"""

from __future__ import annotations

import json
import weakref
from collections.abc import Callable, Mapping
from typing import Any

__all__ = ["AGENT_METRICS", "Prometheus", "PrometheusError", "PrometheusRefused",
           "open_prometheus", "parse_target"]

TIMEOUT = 30.0   # seconds, each query
QUERY_TIMEOUT = 25.0   # Prometheus's own limit on each (its `timeout`), within TIMEOUT
# the node agent's per-group counters cluster reads (agent/internal/agent/collect.go)
AGENT_METRICS = {
    "periods": "throttle_lab_cpu_cfs_periods_total",
    "throttled_periods": "throttle_lab_cpu_cfs_throttled_periods_total",
    "throttled_seconds": "throttle_lab_cpu_cfs_throttled_seconds_total",
    "usage_seconds": "throttle_lab_cpu_usage_seconds_total",
    "wait_bucket": "throttle_lab_cpu_cfs_throttled_period_wait_seconds_bucket",
    "coarse_periods": "throttle_lab_cpu_cfs_throttled_periods_coarse_total",
    "no_quota": "throttle_lab_cpu_no_quota",   # a group with no quota: no counters above
    # since when the group's counters count without a reset (the agent's watch began)
    "start_time": "throttle_lab_cpu_counters_start_time_seconds",
}

Get = Callable[[str, Mapping[str, str]], tuple[int, bytes]]   # (path, params) -> status, body


class PrometheusError(Exception):
    """Prometheus cannot be reached or refused a query; one line saying which."""


class PrometheusRefused(PrometheusError):
    """Prometheus refused a query (its ``errorType``: ``execution`` for too many samples,
    ``timeout``, ``bad_data``...) or did not answer it in time."""

    def __init__(self, message: str, error_type: str, error: str) -> None:
        super().__init__(message)
        self.error_type = error_type
        self.error = error

    @property
    def too_large(self) -> bool:
        """Refused for its size (too many samples, points or time): a smaller one may pass."""
        return self.error_type == "timeout" or any(
            words in self.error for words in ("too many samples", "maximum resolution",
                                              "timed out", "too many series"))


def parse_target(text: str) -> tuple[str, str, str] | str:
    """``k8s:NS/SERVICE[:PORT]`` -> (NS, SERVICE, PORT) (PORT "" when not given), a URL as
    is; ``PrometheusError`` for anything else."""
    if text.startswith("k8s:"):
        where, _, port = text[4:].partition(":")
        ns, _, service = where.partition("/")
        if ns and service and "/" not in service and (not port or port.isalnum()):
            return ns, service, port
    elif text.startswith(("http://", "https://")) and len(text.split("://", 1)[1]) > 0:
        return text.rstrip("/")
    raise PrometheusError(f"--prometheus {text}: expected a URL (http://HOST:9090) or "
                          "k8s:NAMESPACE/SERVICE[:PORT] (through the API server's proxy)")


class Prometheus:
    """Queries to one Prometheus; ``where`` names it in every error."""

    def __init__(self, where: str, get: Get) -> None:
        self.where = where
        self._get = get

    def _answer(self, path: str, params: Mapping[str, str]) -> Any:
        status, body = self._get(path, params)
        try:
            answer = json.loads(body)
        except ValueError:
            answer = None
        if not isinstance(answer, dict) or "status" not in answer:
            text = " ".join(body[:200].decode("utf-8", "replace").split())
            raise PrometheusError(f"Prometheus at {self.where}: not Prometheus's API (HTTP "
                                  f"{status}: {text or 'empty'})")
        if answer["status"] != "success":
            what = params.get("query") or params.get("match[]")
            error = str(answer.get("error") or status)
            raise PrometheusRefused(f"Prometheus at {self.where} refused the query {what}: "
                                    f"{error}", str(answer.get("errorType") or ""), error)
        data = answer.get("data")
        return {} if data is None else data   # an empty list stays one: no series matched

    def check(self) -> None:
        """One query (``1``): ``PrometheusError`` when it does not answer."""
        self._answer("/api/v1/query", {"query": "1"})

    def query(self, expr: str, at: float) -> list[tuple[dict[str, str], float]]:
        """An instant query's vector at ``at``: (labels, value) for each series."""
        data = self._answer("/api/v1/query", {"query": expr, "time": f"{at:.3f}",
                                              "timeout": f"{QUERY_TIMEOUT:g}s"})
        if data.get("resultType") != "vector":
            raise PrometheusError(f"Prometheus at {self.where}: expected a vector for "
                                  f"{expr}, got {data.get('resultType')}")
        return [(dict(r.get("metric") or {}), float(r["value"][1]))
                for r in data.get("result") or []]

    def series(self, match: str, start: float, end: float) -> list[dict[str, str]]:
        """The label sets of the series ``match`` selects between ``start`` and ``end``
        (the index only: no sample is read)."""
        data = self._answer("/api/v1/series", {"match[]": match, "start": f"{start:.3f}",
                                               "end": f"{end:.3f}"})
        if not isinstance(data, list):
            raise PrometheusError(f"Prometheus at {self.where}: expected a list of series for "
                                  f"{match}")
        return [dict(d) for d in data]


def _httpx_get(base: str, timeout: float) -> tuple[Get, Callable[[], None]]:
    """The GET of Prometheus at ``base``, and what closes its connections."""
    import httpx

    # one client for every query: its connections kept (a client a query costs its TLS
    # set-up each time, most of the command's CPU over a week's queries)
    client = httpx.Client(timeout=timeout)

    def get(path: str, params: Mapping[str, str]) -> tuple[int, bytes]:
        try:
            response = client.get(base + path, params=dict(params))
        except httpx.TimeoutException:
            raise PrometheusRefused(f"Prometheus at {base} did not answer a query within "
                                    f"{timeout:g} s", "timeout", "timed out") from None
        except httpx.HTTPError as exc:
            reason = " ".join(str(exc).split()) or type(exc).__name__
            raise PrometheusError(f"Prometheus at {base} unreachable: {reason}") from None
        return response.status_code, response.content
    return get, client.close


def _proxy_get(ns: str, service: str, port: str, timeout: float) -> tuple[str, Get]:
    from client.run.kube_api import KubeError, connect

    try:
        api = connect()
    except KubeError as exc:
        raise PrometheusError(str(exc)) from None
    name = f"{service}:{port}" if port else service
    base = f"/api/v1/namespaces/{ns}/services/{name}/proxy"
    where = f"{api.server}{base}"
    client = api.api_client

    def get(path: str, params: Mapping[str, str]) -> tuple[int, bytes]:
        try:
            method, url, headers, body, post = client.param_serialize(
                "GET", base + path, query_params=list(params.items()),
                header_params={"Accept": "application/json"}, auth_settings=["BearerToken"])
            response = client.call_api(method, url, header_params=headers, body=body,
                                       post_params=post, _request_timeout=timeout)
            response.read()
        except Exception as exc:   # urllib3's errors, or the client's ApiException around them
            reason = " ".join(str(getattr(exc, "reason", None) or exc).split())
            raise PrometheusError(f"Prometheus at {where} unreachable: "
                                  f"{reason.split('>: ')[-1][:160]}") from None
        status, data = int(response.status), bytes(response.data or b"")
        if status < 300 or status in (400, 422):   # 400, 422: Prometheus's refusal, proxied
            return status, data
        said = _said(data)
        if status == 403:
            raise PrometheusError(f"no permission: get services/proxy in namespace {ns} "
                                  f"(Prometheus through the API server's proxy): {said}")
        if status == 401:
            raise PrometheusError(f"the API server at {api.server} does not accept the "
                                  "credentials")
        raise PrometheusError(f"Prometheus at {where} unreachable: HTTP {status}: {said}")
    return where, get


def _said(body: bytes) -> str:
    """The ``message`` of the API server's Status, else the body's start, one line."""
    try:
        message = json.loads(body).get("message")
    except (ValueError, AttributeError):
        message = None
    return " ".join(str(message or body[:200].decode("utf-8", "replace")).split())


def open_prometheus(target: str, timeout: float = TIMEOUT) -> Prometheus:
    """The Prometheus ``--prometheus`` names (a URL or ``k8s:NS/SERVICE[:PORT]``); nothing
    is asked of it yet."""
    parsed = parse_target(target)
    if isinstance(parsed, str):
        get, close = _httpx_get(parsed, timeout)
        prometheus = Prometheus(parsed, get)
        weakref.finalize(prometheus, close)   # its connections closed with it
        return prometheus
    where, get = _proxy_get(*parsed, timeout)
    return Prometheus(where, get)
