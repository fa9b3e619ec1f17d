"""The options of ``advise``/``sweep`` on a running service (``--cgroup TARGET --url URL``):
which group, what each run sends (curl's ``-X -H -d``, ``--targets``, TLS), and the safety
catches (``--allow-new-limit``, ``--keep``); and the service at a limit the options name
(:func:`at_limit_from`: a :class:`client.run.inplace.InPlace`, or burn-service started by a
backend)."""

from __future__ import annotations

import argparse
from pathlib import Path
from collections.abc import Callable

from client.commands.common import backend_from
from client.commands.options import CliError, number_above
from client.data.request import RequestError, redact_command
from client.run.cgroup_sampler import DEFAULT_INTERVAL
from client.run.at_limit import AtLimit, StartedService
from client.run.http import TlsError, tls_verify
from client.run.inplace import InPlace, InPlaceError
from client.run.limiters import LimiterError, LimiterOptions
from client.run.measure import Load, Started
from client.run.plan import LoadPlan
from client.run.record import RunSpec
from client.run.request_flags import requests_from_flags

__all__ = ["add_inplace_arguments", "at_limit_from", "check_inplace_options", "inplace_from",
           "k8s_targets", "started_from", "with_container"]


def add_inplace_arguments(parser: argparse.ArgumentParser, *, keep: bool) -> None:
    group = parser.add_argument_group(
        "a running service (its limit changed in place, put back at the end)")
    group.add_argument("--cgroup", metavar="TARGET",
                       help="the running service's group: a cgroup directory, pid:PID, "
                       "docker:NAME_OR_ID or k8s:NAMESPACE/POD; each run sets the limit there "
                       "(the quota file; docker update --cpus; the pod's resize subresource) "
                       "and reads the group's throttling (needs root; a pod on another node: "
                       "through its node's agent, with a kubeconfig alone)")
    group.add_argument("--k8s", metavar="NS/deployment/NAME",
                       help="instead of --cgroup: the running pods of a Kubernetes Deployment "
                       "(each resized alike in place with pods/resize, their groups sampled "
                       "as one sum; --url a Service's or an Ingress's address the host "
                       "reaches, spreading the requests over the pods)")
    group.add_argument("--container", metavar="NAME",
                       help="with a pod: the container whose cpu limit is changed (needed "
                       "where a pod has several)")
    group.add_argument("--allow-restart", action="store_true",
                       help="with a pod: resize a container whose resizePolicy for cpu is "
                       "RestartContainer (it restarts at each limit)")
    group.add_argument("--url", default=None,
                       help="with --cgroup: the URL each run times, sent as given")
    group.add_argument("-X", "--method", help="the request's method (default GET; POST with -d)")
    group.add_argument("-H", "--header", action="append", default=[], metavar="'NAME: VALUE'",
                       help="a header to send (repeatable)")
    group.add_argument("-d", "--data", metavar="TEXT|@FILE",
                       help="the request's body: TEXT, @FILE's bytes, or @- for stdin")
    group.add_argument("--targets", type=Path, metavar="FILE",
                       help="send the requests of FILE round-robin (vegeta's http format)")
    group.add_argument("--redact", action="append", default=[], metavar="NAME",
                       help="also keep this header's value out of every file written")
    tls = group.add_mutually_exclusive_group()
    tls.add_argument("--cacert", type=Path, metavar="FILE",
                     help="check an https:// server's certificate against this PEM file")
    tls.add_argument("-k", "--insecure", action="store_true",
                     help="do not check an https:// server's certificate (as curl -k)")
    group.add_argument("--cgroup-interval", type=number_above(0), default=DEFAULT_INTERVAL,
                       metavar="S", help=f"seconds between two samples of the group (default "
                       f"{DEFAULT_INTERVAL:g})")
    group.add_argument("--allow-new-limit", action="store_true",
                       help="the group has no limit now: let the runs set one (none again at "
                       "the end)")
    if keep:
        group.add_argument("--keep", action="store_true",
                           help="leave the answer in force at the end (default: the limit the "
                           "service had; also on an error or Ctrl-C)")
        group.add_argument("--apply", action="store_true",
                           help="with a pod of a Deployment: patch the Deployment with the "
                           "answer at the end (this rolls out new pods)")


def check_inplace_options(opts: argparse.Namespace) -> bool:
    """Whether the options name a running service (``--cgroup``, ``--k8s``); ``--url`` and
    the request flags only go with one, and it needs ``--url`` (or ``--targets``)."""
    given = [flag for flag, value in (("--url", opts.url), ("-X", opts.method),
                                      ("-d", opts.data), ("--targets", opts.targets),
                                      ("-H", opts.header or None), ("--cacert", opts.cacert),
                                      ("--allow-new-limit", opts.allow_new_limit or None),
                                      ("--container", opts.container),
                                      ("--allow-restart", opts.allow_restart or None),
                                      ("--keep", getattr(opts, "keep", False) or None),
                                      ("--apply", getattr(opts, "apply", False) or None))
             if value is not None]
    if opts.k8s is not None and opts.cgroup is not None:
        raise CliError("--k8s NS/deployment/NAME and --cgroup TARGET: give one of them")
    if opts.cgroup is None and opts.k8s is None:
        if given:
            raise CliError(f"{given[0]} goes with --cgroup TARGET (a running service); without "
                           "it the command starts burn-service itself")
        return False
    flag = "--cgroup TARGET" if opts.k8s is None else "--k8s NS/deployment/NAME"
    if opts.url is None and opts.targets is None:
        raise CliError(f"{flag} needs --url URL (or --targets FILE): what to time")
    return True


def at_limit_from(opts: argparse.Namespace, argv: list[str], command: str, plan: LoadPlan, *,
                  on_started: Callable[[Started, float], None] | None = None,
                  on_stopped: Callable[[str], None] | None = None
                  ) -> tuple[AtLimit, str | None]:
    """The service at a limit the options name: the running one changed in place, or
    burn-service started by ``--backend`` (``started_from``); and, for ``auto``, why not the
    kernel's quota. Bad input is a one-line ``CliError``."""
    if check_inplace_options(opts):
        return inplace_from(opts, argv, command), None
    return started_from(opts, argv, command, plan, on_started=on_started,
                        on_stopped=on_stopped)


def started_from(opts: argparse.Namespace, argv: list[str], command: str, plan: LoadPlan, *,
                 on_started: Callable[[Started, float], None] | None = None,
                 on_stopped: Callable[[str], None] | None = None
                 ) -> tuple[StartedService, str | None]:
    """burn-service started by ``--backend`` for each run of ``plan`` (the hooks show each
    service started and stopped), and why not the kernel's quota for ``auto``."""
    backend, why_not_kernel = backend_from(opts)
    load = Load(plan, opts.iterations, opts.timeout, opts.warmup)
    return StartedService(backend, load, ("http-timing", command, *argv),
                          on_started=on_started, on_stopped=on_stopped), why_not_kernel


def inplace_from(opts: argparse.Namespace, argv: list[str], command: str) -> InPlace:
    """The running service the options name, the limit it has now, the request each run
    sends; bad input is a one-line ``CliError``."""
    try:
        asked = requests_from_flags(opts.url, default_url="", method=opts.method,
                                    headers=opts.header, data=opts.data, targets=opts.targets,
                                    iterations=opts.iterations)
        verify = tls_verify(opts.cacert, opts.insecure)
    except (RequestError, TlsError) as exc:
        raise CliError(str(exc)) from None
    template = RunSpec(
        url=asked.request.url, plan=LoadPlan.from_options(requests=1), name="-",
        data_dir=Path("."), iterations=asked.iterations,
        command=["http-timing", command, *redact_command(argv, opts.redact)],
        timeout=opts.timeout, warmup=opts.warmup, ask_limits=asked.burn_service,
        request=asked.request if asked.custom and not asked.targets else None,
        targets=asked.targets, redact=frozenset(opts.redact),
        cgroup_interval=opts.cgroup_interval, verify=verify)
    options = LimiterOptions(allow_restart=opts.allow_restart)
    try:
        pods = None if opts.k8s is None else k8s_targets(opts.k8s)
        if pods is not None and len(pods) > 1:
            namespace = pods[0].split(":", 1)[1].split("/")[0]
            name = opts.k8s.split("/")[-1]
            return InPlace.open_pods(f"k8s:{namespace}/deployment/{name}",
                                     [with_container(pod, opts) for pod in pods], template,
                                     options=options)
        spec = with_container(str(opts.cgroup) if pods is None else pods[0], opts)
        return InPlace.open(spec, template, allow_new_limit=opts.allow_new_limit,
                            options=options)
    except InPlaceError as exc:
        raise CliError(str(exc)) from None


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
        raise CliError(str(exc)) from None
    return [f"k8s:{namespace}/{pod}" for pod in pods]


def with_container(spec: str, opts: argparse.Namespace) -> str:
    """A pod's target with ``--container``: ``k8s:NS/POD/CONTAINER``."""
    if opts.container is None:
        return spec
    if not spec.startswith(("k8s:", "kubernetes:")):
        raise CliError("--container goes with a pod (--cgroup k8s:NAMESPACE/POD)")
    if spec.count("/") != 1:
        raise CliError(f"--container {opts.container} and a container in --cgroup {spec}: "
                       "give one of them")
    return f"{spec}/{opts.container}"
