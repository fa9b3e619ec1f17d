"""The running service that plain values name, at a limit set in place: its group or pods,
the limit it has now, the request each run sends (:func:`open_running`; the options that give
the values: ``client.commands.common.add_inplace_arguments``)."""

from __future__ import annotations

from collections.abc import Callable, Sequence
from dataclasses import dataclass
from pathlib import Path
from urllib.parse import urlsplit

from client.advise import AdviseError
from client.data.request import RequestError, redact_command
from client.run.cgroup_sampler import DEFAULT_INTERVAL
from client.run.http import TlsError, tls_verify
from client.run.inplace import InPlace, InPlaceError
from client.run.limiters import LimiterError, LimiterOptions
from client.run.plan import LoadPlan
from client.run.record import RunSpec
from client.run.request_flags import requests_from_flags

__all__ = ["Running", "k8s_targets", "open_running"]


@dataclass(frozen=True)
class Running:
    """A running service (``cgroup``: a ``--cgroup`` target; ``k8s``: a Deployment's
    ``NS/deployment/NAME``), what each run sends there, and the safety catches."""

    cgroup: str | None = None
    k8s: str | None = None
    container: str | None = None
    url: str | None = None
    method: str | None = None
    headers: Sequence[str] = ()
    data: str | None = None
    targets: Path | None = None
    redact: Sequence[str] = ()
    cacert: Path | None = None
    insecure: bool = False
    cgroup_interval: float = DEFAULT_INTERVAL
    allow_new_limit: bool = False
    allow_restart: bool = False


def open_running(running: Running, command: Sequence[str], *, iterations: int | None,
                 timeout: float, warmup: int, say: Callable[[str], None] = lambda line: None
                 ) -> InPlace:
    """The running service, the limit it has now, the request each run sends (``command``:
    the command line, its redacted headers' values left out); bad input is a one-line
    ``AdviseError``. A pod of several containers named without ``--container`` has the one
    to resize picked where one alone has a CPU limit (or serves the URL's port), said in a
    line to ``say`` (:func:`client.run.limiters.kubernetes.pick_container`)."""
    try:
        asked = requests_from_flags(running.url, default_url="", method=running.method,
                                    headers=list(running.headers), data=running.data,
                                    targets=running.targets, iterations=iterations)
        verify = tls_verify(running.cacert, running.insecure)
    except (RequestError, TlsError) as exc:
        raise AdviseError(str(exc)) from None
    template = RunSpec(
        url=asked.request.url, plan=LoadPlan.from_options(requests=1), name="-",
        data_dir=Path("."), iterations=asked.iterations,
        command=redact_command(list(command), list(running.redact)),
        timeout=timeout, warmup=warmup, ask_limits=asked.burn_service,
        request=asked.request if asked.custom and not asked.targets else None,
        targets=asked.targets, redact=frozenset(running.redact),
        cgroup_interval=running.cgroup_interval, verify=verify)
    options = LimiterOptions(allow_restart=running.allow_restart)
    try:
        pods = None if running.k8s is None else k8s_targets(running.k8s)
        container, first = running.container, str(running.cgroup) if pods is None else pods[0]
        if container is None:
            container = _picked(first, None if asked.targets else _port(template.url), say)
        if pods is not None and len(pods) > 1:
            assert running.k8s is not None
            namespace = pods[0].split(":", 1)[1].split("/")[0]
            name = running.k8s.split("/")[-1]
            return InPlace.open_pods(f"k8s:{namespace}/deployment/{name}",
                                     [_with_container(pod, container) for pod in pods],
                                     template, options=options)
        spec = _with_container(first, container)
        return InPlace.open(spec, template, allow_new_limit=running.allow_new_limit,
                            options=options)
    except InPlaceError as exc:
        raise AdviseError(str(exc)) from None


def k8s_targets(workload: str) -> list[str]:
    """``--k8s NS/deployment/NAME`` as ``--cgroup`` targets: ``k8s:NS/POD`` of each of its
    running pods."""
    from client.run.kube_api import KubeError, REQUEST_TIMEOUT, connect
    from client.run.limiters.kubernetes import find_deployment_pods, parse_workload

    try:
        namespace, name = parse_workload(workload)
        api = connect()
        pods = find_deployment_pods(api.core, api.to_json, namespace, name, api.server,
                                    REQUEST_TIMEOUT)
    except (KubeError, LimiterError) as exc:
        raise AdviseError(str(exc)) from None
    return [f"k8s:{namespace}/{pod}" for pod in pods]


def _port(url: str) -> int | None:
    """The TCP port ``url`` reaches (None: not an http(s) URL)."""
    parts = urlsplit(url)
    try:
        return parts.port or {"http": 80, "https": 443}.get(parts.scheme)
    except ValueError:
        return None


def _picked(spec: str, port: int | None, say: Callable[[str], None]) -> str | None:
    """The container to resize in ``k8s:NS/POD`` when the pod has several and one alone has
    a CPU limit (or serves ``port``), said to ``say``; None: no pick needed, or the pod could
    not be read here (the limiter then says why, as without a pick). ``AdviseError`` naming
    the containers where none can be picked."""
    if not spec.startswith(("k8s:", "kubernetes:")) or spec.count("/") != 1:
        return None
    from client.run.kube_api import REQUEST_TIMEOUT, connect
    from client.run.limiters.kubernetes import pick_container

    namespace, pod = spec.split(":", 1)[1].split("/")
    try:
        api = connect()
        document = api.to_json(api.core.read_namespaced_pod(
            pod, namespace, _request_timeout=REQUEST_TIMEOUT))
    except Exception:   # no kubeconfig, no such pod, no permission: said where it binds
        return None
    try:
        name, line = pick_container(document, port)
    except LimiterError as exc:
        raise AdviseError(str(exc)) from None
    if line is not None:
        say(line)
    return name


def _with_container(spec: str, container: str | None) -> str:
    """A pod's target with ``--container``: ``k8s:NS/POD/CONTAINER``."""
    if container is None:
        return spec
    if not spec.startswith(("k8s:", "kubernetes:")):
        raise AdviseError("--container goes with a pod (--cgroup k8s:NAMESPACE/POD)")
    if spec.count("/") != 1:
        raise AdviseError(f"--container {container} and a container in --cgroup {spec}: "
                          "give one of them")
    return f"{spec}/{container}"
