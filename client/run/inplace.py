"""Runs against a *running* service at limits set in place (``advise``/``sweep --cgroup``).

:class:`InPlace` holds the service's group (``--cgroup TARGET``), its :class:`Limiter`, the
limit it had when we came (``original``) and the request every run sends (a
:class:`client.run.record.RunSpec` template: ``--url``, ``-X``, ``-H``, ``-d``, ``--targets``,
TLS). :meth:`InPlace.measure` sets a limit, waits until the quota file reads it back,
re-resolves the group (so its quota levels are the new ones) and times one run with the group
sampled as ``--cgroup`` does (each request marked with the throttling it met, the timeline in
``<name>.cgroup.csv``).

**A pod on another node** (its group is not on this machine, or ``HTTP_TIMING_THROUGH_API=1``:
``client.run.pod_reach``) is changed the same way from a kubeconfig alone: resized with
pods/resize, in force once its status and its node's agent say so
(``client.run.limiters.kubernetes.through_agent``), and each run marked afterwards from the
agent's timeline of the run's window, as a run's ``--cgroup k8s:`` is
(``client.run.agent_marks``). Where a run's throttling is read is the :class:`Watched` seam:
:class:`GroupHere` or :class:`PodThroughAgent`. A Deployment's pods (:meth:`InPlace.open_pods`)
with one of them not here are each resized through their own node's agent and each run marked
from the sum of their timelines (:class:`PodsThroughAgents`).

**Nothing is left at a limit nobody asked for**: :meth:`InPlace.restoring` is the ``with``
block around every change: when it is left, by the end, an error, Ctrl-C or SIGTERM (the
callers run inside ``stop_on_terminate``), the group gets back ``original`` (or the answer
:meth:`keep` chose), with Ctrl-C and SIGTERM ignored meanwhile, and the file read back. The
command to put it back by hand is printed before anything changes (for ``kill -9``).
"""

from __future__ import annotations

from collections.abc import Callable, Iterator, Mapping, Sequence
from contextlib import AbstractContextManager, contextmanager
from dataclasses import dataclass, field, replace
from pathlib import Path
from typing import Any, Protocol, cast

from client.data.files import Run
from client.data.metadata import SweepInfo
from client.data.record import RequestRecord
from client.data.timeline import CgroupSample
from client.run.signals import ignoring_signals
from client.run.agent_marks import mark_through_agent, mark_through_agents
from client.run.agent_timeline import AgentLink, AgentTimelineError, agent_link
from client.run.at_limit import AtLimit, Capabilities, InPlaceError
from client.run.cgroup_lookup import CommandRunner, run_command
from client.run.service_group import ServiceGroup, ServiceGroupError, combine_pods, resolve_cgroup
from client.run.limiters import Limiter, LimiterError, LimiterOptions, limiter_for
from client.run.limiters.base import machine_cpus
from client.run.measure import Measurement, Progress, measure
from client.run.plan import LoadPlan
from client.run.record import settle_s
from client.run.pod_reach import locate, pod_ref
from client.run.record import RunSpec
from client.run.usage import UsageSample
from cpuquota.limit import NO_QUOTA, Limit

__all__ = ["GroupHere", "InPlace", "InPlaceError", "LimitChanged", "PodThroughAgent",
           "PodsThroughAgents", "Watched", "describe_limit", "limit_dict", "timeline_usage"]


class LimitChanged(InPlaceError):
    """A limit this tool set that something else changed before the run at it ended (a
    VPA's updater, another controller): one line, from what to what and who does that."""


def limit_dict(limit: Limit | None) -> dict[str, Any] | None:
    """A limit in the running service's state: its CPUs and the kernel's three numbers."""
    return None if limit is None else {"cpus": limit.cpus, "quota_us": limit.quota_us,
                                       "period_us": limit.period_us, "burst_us": limit.burst_us}


def describe_limit(limit: Limit | None) -> str:
    if limit is None:
        return "no limit"
    extra = "" if not limit.burst_us else f", burst {limit.burst_ms:g} ms"
    return f"{limit.cpus:g} CPU ({limit.quota_us}/{limit.period_us} µs{extra})"


class Watched(Protocol):
    """Where each run's throttling is read: the group's files here, sampled during the run
    (:class:`GroupHere`), or a pod's node's agent, asked once the run is over
    (:class:`PodThroughAgent`)."""

    @property
    def spec(self) -> str:
        """The target as the user gave it (``--cgroup``'s)."""

    @property
    def usage_counter(self) -> str:
        """Where a run's per-second usage comes from, in a few words."""

    def sampled(self) -> ServiceGroup | None:
        """The group to sample during the next run (None: none here)."""

    def marked(self, run: Run) -> Run:
        """The run with its requests marked by the throttling they met, as recorded."""


@dataclass(frozen=True)
class GroupHere:
    """The group's files on this machine (several pods: the sum over their groups)."""

    target: ServiceGroup          # as resolved when we came
    pod_uid: str | None = None
    run: CommandRunner = run_command
    # several pods resized alike (``open_pods``): each pod's ``--cgroup`` spec; the target
    # is the sum over their groups (``combine_pods``)
    pod_specs: tuple[str, ...] = ()

    @property
    def spec(self) -> str:
        return self.target.spec

    @property
    def usage_counter(self) -> str:
        return f"the group's {self.target.usage_source.kind}"

    def sampled(self) -> ServiceGroup:
        """The group as it is now (the quota levels after a change; several pods: the sum)."""
        try:
            if self.pod_specs:
                return combine_pods(self.target.spec, [resolve_cgroup(spec, run=self.run)
                                                       for spec in self.pod_specs])
            return resolve_cgroup(self.target.spec, pod_uid=self.pod_uid, run=self.run)
        except ServiceGroupError as exc:
            raise InPlaceError(str(exc)) from None

    def marked(self, run: Run) -> Run:
        return run   # sampled as it ran


@dataclass(frozen=True)
class PodThroughAgent:
    """A pod whose group is not on this machine: its node's agent's timeline of each run's
    window, through the API server's proxy."""

    link: AgentLink

    @property
    def spec(self) -> str:
        return str(self.link.ref)

    @property
    def usage_counter(self) -> str:
        link = self.link
        return (f"the pod's usage from the node agent {link.namespace}/{link.agent} on node "
                f"{link.node}")

    def sampled(self) -> None:
        return None

    def marked(self, run: Run) -> Run:
        if not run.records:
            return run
        try:
            return mark_through_agent(self.link, run)
        except AgentTimelineError as exc:
            raise InPlaceError(f"{self.spec}: the run's throttling could not be read: "
                               f"{exc}") from None


@dataclass(frozen=True)
class PodsThroughAgents:
    """Several pods resized alike (a Deployment's), one of them or more not on this machine:
    each pod's node's agent's timeline of each run's window, summed into one
    (``client.run.agent_marks.mark_through_agents``)."""

    workload: str                  # ``k8s:NS/deployment/NAME``
    links: tuple[AgentLink, ...]

    @property
    def spec(self) -> str:
        return self.workload

    @property
    def usage_counter(self) -> str:
        agents = ", ".join(f"{link.namespace}/{link.agent} on node {link.node}"
                           for link in self.links)
        return f"the {len(self.links)} pods' usage summed, from the node agents {agents}"

    def sampled(self) -> None:
        return None

    def marked(self, run: Run) -> Run:
        if not run.records:
            return run
        try:
            return mark_through_agents(self.workload, self.links, run)
        except AgentTimelineError as exc:
            raise InPlaceError(f"{self.spec}: the run's throttling could not be read: "
                               f"{exc}") from None


@dataclass
class InPlace(AtLimit):
    """A running service whose CPU limit is changed in place, and how each run is timed: a
    :class:`client.run.at_limit.AtLimit`."""

    target: Watched               # where each run's throttling is read
    limiter: Limiter
    original: Limit | None        # the limit in force when we came
    template: RunSpec             # what every run sends (name, plan and cgroup set per run)
    pods: int = 1                 # the pods resized alike
    restore_to: Limit | None = field(init=False)
    # after the restore: what the limiter says did not change (a pod's restarts, container id)
    unchanged: str | None = field(init=False, default=None)

    def __post_init__(self) -> None:
        self.restore_to = self.original

    @classmethod
    def open(cls, spec: str, template: RunSpec, *, allow_new_limit: bool = False,
             pod_uid: str | None = None, run: CommandRunner = run_command,
             options: LimiterOptions = LimiterOptions()) -> InPlace:
        """Resolve ``--cgroup spec``, find its limiter, read the limit in force; one-line
        ``InPlaceError`` for a target that cannot be changed as asked."""
        try:
            found = locate(spec, lambda s: resolve_cgroup(s, pod_uid=pod_uid, run=run))
            if isinstance(found, ServiceGroup):
                target: Watched = GroupHere(found, pod_uid, run)
                limiter = limiter_for(found, run, options)
            else:
                from client.run.limiters.kubernetes import through_agent

                link = agent_link(found)
                target = PodThroughAgent(link)
                limiter = through_agent(link, allow_restart=options.allow_restart)
            original = limiter.read()
        except (ServiceGroupError, LimiterError) as exc:
            raise InPlaceError(str(exc)) from None
        except AgentTimelineError as exc:
            raise InPlaceError(f"--cgroup {spec}: {exc}") from None
        if original is None and not limiter.can_remove:
            why = (" (exclusive CPUs under the static CPU manager get none, whatever limits.cpu "
                   "says)" if spec.startswith("k8s:") else "")
            raise InPlaceError(f"--cgroup {spec} has no CPU limit now: {NO_QUOTA}{why}; "
                               f"{limiter.kind} cannot take one away again afterwards: give "
                               "it a limit first")
        if original is None and not allow_new_limit:
            raise InPlaceError(f"--cgroup {spec} has no CPU limit now: {NO_QUOTA} "
                               f"({limiter.description}); --allow-new-limit lets the runs set "
                               "one (it is taken away again at the end)")
        try:
            limiter.check(original)
        except LimiterError as exc:
            raise InPlaceError(f"--cgroup {spec}: its limit now, {describe_limit(original)}, "
                               f"could not be put back: {exc}") from None
        return cls(target, limiter, original, template)

    @classmethod
    def open_pods(cls, spec: str, pod_specs: Sequence[str], template: RunSpec, *,
                  options: LimiterOptions = LimiterOptions(),
                  run: CommandRunner = run_command) -> InPlace:
        """A Deployment's running pods (``spec``: ``k8s:NS/deployment/NAME``; ``pod_specs``:
        ``k8s:NS/POD[/CONTAINER]`` each), resized alike, their groups sampled as one sum;
        one-line ``InPlaceError`` as :meth:`open`."""
        from client.run.limiters.kubernetes import KubernetesLimiter, through_agent
        from client.run.limiters.pods import PodsLimiter

        deployment = spec.split(":", 1)[-1].replace("/deployment/", "/")
        watched: Watched
        try:
            found = [locate(pod, lambda s: resolve_cgroup(s, run=run)) for pod in pod_specs]
            targets = [t for t in found if isinstance(t, ServiceGroup)]
            if len(targets) == len(found):
                limiters = [cast(KubernetesLimiter, limiter_for(target, run, options))
                            for target in targets]
                watched = GroupHere(combine_pods(spec, targets), None, run, tuple(pod_specs))
            else:   # a pod not here: every pod through its node's agent, summed
                links = tuple(agent_link(pod_ref(pod)) for pod in pod_specs)
                limiters = [through_agent(link, allow_restart=options.allow_restart)
                            for link in links]
                watched = PodsThroughAgents(spec, links)
            limiter = PodsLimiter(deployment, limiters)
            original = limiter.read()
        except (ServiceGroupError, LimiterError) as exc:
            raise InPlaceError(str(exc)) from None
        except AgentTimelineError as exc:
            raise InPlaceError(f"{spec}: {exc}") from None
        if original is None:
            raise InPlaceError(f"{spec}: the pods have no CPU limit now: {NO_QUOTA} "
                               "(exclusive CPUs under the static CPU manager get none, "
                               "whatever limits.cpu says); a pod's limit cannot be taken away "
                               "again afterwards: give them one first")
        try:
            limiter.check(original)
        except LimiterError as exc:
            raise InPlaceError(f"{spec}: its limit now, {describe_limit(original)}, could not "
                               f"be put back: {exc}") from None
        return cls(watched, limiter, original, template, len(pod_specs))

    # -- what it is (``AtLimit``) --------------------------------------------------------

    @property
    def name(self) -> str:
        return "inplace"

    @property
    def description(self) -> str:
        return (f"{self.target.spec} in place ({self.limiter.kind}; was "
                f"{describe_limit(self.original)})")

    @property
    def sends(self) -> str:
        if self.template.targets:
            return f"{len(self.template.targets)} targets round-robin"
        request = self.template.request
        return f"{request.method if request else 'GET'} {self.template.url}"

    @property
    def capabilities(self) -> Capabilities:
        return Capabilities(removes=self.limiter.can_remove, restores=True, keeps=True,
                            evidence=True, patches=bool(self.limiter.names.get("owner")))

    @property
    def instances(self) -> int:
        return self.pods

    @property
    def inplace(self) -> InPlace:
        return self

    @property
    def kind(self) -> str:
        return self.limiter.kind

    @property
    def spec(self) -> str:
        return self.target.spec

    @property
    def names(self) -> Mapping[str, Any]:
        return self.limiter.names

    def state(self) -> dict[str, Any]:
        """What it had, what it was left at (after :meth:`restore`), what did not change."""
        return {"target": self.target.spec, "kind": self.limiter.kind,
                "set_by": self.limiter.description, "original": limit_dict(self.original),
                "left_at": limit_dict(self.restore_to), "unchanged": self.unchanged}

    def ceiling(self, shape: Callable[[int], Limit]) -> tuple[int, str]:
        """The CPUs the service's machine lets it use (a pod on another node: that node's,
        as its agent says), or the quota of a group above it, whichever is less;
        ``ValueError`` when the limiter cannot set it."""
        cpus, words = self.limiter.node_cpus() or machine_cpus()
        millicores = cpus * 1000
        above = self.limiter.ceiling()
        if above is not None and above.millicores < millicores:
            millicores, words = above.millicores, f"the {above.cpus:g} CPU quota above the group"
        self.check([shape(millicores)])
        return millicores, words

    def holding(self) -> AbstractContextManager[InPlace]:
        return self.restoring()

    # -- changing the limit ------------------------------------------------------------

    def check(self, limits: Sequence[Limit | None]) -> None:
        """``ValueError`` (one line) for the first limit this target cannot be given."""
        for limit in limits:
            try:
                self.limiter.check(limit)
            except LimiterError as exc:
                raise ValueError(str(exc)) from None

    def apply(self, limit: Limit | None) -> None:
        """Set ``limit`` and wait until the quota file reads it back."""
        self.limiter.apply(limit)

    def held(self, limit: Limit | None, name: str) -> None:
        """After run ``name``: ``LimitChanged`` (one line) where the target no longer holds
        ``limit``, the one this tool set before it (something else resized it meanwhile: that
        run's figures are not for ``limit``)."""
        try:
            drift = self.limiter.drift(limit)
        except LimiterError as exc:
            raise InPlaceError(f"{self.target.spec}: after run {name}, its limit could not be "
                               f"read: {exc}") from None
        if drift is not None:
            raise LimitChanged(f"{self.target.spec}: its limit changed during run {name}, "
                               f"after this tool set {describe_limit(limit)}: {drift}; that "
                               "run's figures are not for the limit it was to measure")

    def keep(self, limit: Limit | None) -> None:
        """``--keep``: leave ``limit`` in force at the end instead of the original."""
        self.restore_to = limit

    def patch_for_good(self, limit: Limit) -> str:
        """``--apply``: ``limit`` into the pod's Deployment (once the pod got its limit
        back); ``LimiterError`` when it cannot be."""
        return self.limiter.patch_deployment(limit)

    def restore(self) -> str:
        """Put ``restore_to`` back (Ctrl-C and SIGTERM ignored meanwhile); what was done."""
        with ignoring_signals():
            try:   # the quota and (a pod) its spec: a resize by another may be in both
                settled = self.limiter.drift(self.restore_to) is None
            except LimiterError:
                settled = False   # not readable now (the agent?): set it again all the same
            if settled:
                if self.restore_to is self.original:
                    self.unchanged = self._unchanged()
                    return (f"the limit is as it was: {describe_limit(self.restore_to)}"
                            + (f"; {self.unchanged}" if self.unchanged else ""))
            else:
                self.limiter.apply(self.restore_to)
            now = self.limiter.read()
            self.unchanged = self._unchanged()
        what = "kept the answer" if self.restore_to is not self.original else "restored"
        return (f"{what}: {describe_limit(now)} ({self.limiter.description})"
                + (f"; {self.unchanged}" if self.unchanged else ""))

    def _unchanged(self) -> str | None:
        """What the limiter says stayed as it was (a pod: restart count, container id)."""
        return self.limiter.unchanged()

    @contextmanager
    def restoring(self, say: Callable[[str], None] = print) -> Iterator[InPlace]:
        """The block inside which the limit may change; it is put back when the block is
        left, whatever ends it. A failure to put it back is said, with the command that
        would, and raised as ``InPlaceError`` (unless another error is on its way)."""
        say(f"in place: {self.target.spec} now has {describe_limit(self.original)} "
            f"({self.limiter.description}); if this process is killed, put it back with: "
            f"{self.limiter.restore_hint(self.original)}")
        failed: BaseException | None = None
        try:
            yield self
        except BaseException as exc:
            failed = exc
            raise
        finally:
            try:
                say(f"in place: {self.restore()}")
            except LimiterError as exc:
                line = (f"in place: could NOT put the limit back ({exc}): "
                        f"{self.limiter.restore_hint(self.restore_to)}")
                say(line)
                if failed is None:
                    raise InPlaceError(line) from None

    # -- one run -----------------------------------------------------------------------

    def measure(self, limit: Limit | None, *, name: str, plan: LoadPlan, data_dir: Path,
                sweep: SweepInfo | None = None, index: int = 1,
                progress: Progress | None = None,
                observers: Sequence[Callable[[RequestRecord], None]] = (),
                sample_usage: bool = False, on_target: Callable[[str], None] | None = None,
                on_recorded: Callable[[Measurement], None] | None = None) -> Measurement:
        """Set ``limit``, then time one run of the template's requests with its throttling
        read where :attr:`target` says (sampled here, or the agent's timeline once it is
        over); ``sample_usage``: the group's usage per second, from that timeline."""
        if on_target is not None:
            on_target(self.target.spec)
        self.apply(limit)
        spec = replace(self.template, name=name, plan=plan, data_dir=data_dir, sweep=sweep,
                       cgroup=self.target.sampled(), note_load_average=True,
                       settle_s=settle_s(limit))
        measured = measure(spec, progress=progress, observers=observers)
        if measured.interrupted:
            return measured   # kept as recorded: Ctrl-C does not wait for the agent
        self.held(limit, name)
        measured.recorded.run = self.target.marked(measured.run)
        if sample_usage and (usage := timeline_usage(measured.run.timeline)):
            measured.usage = usage
            measured.usage_counter = self.target.usage_counter
        if on_recorded is not None:
            on_recorded(measured)
        return measured


def timeline_usage(timeline: Sequence[CgroupSample] | None) -> list[UsageSample]:
    """The group's CPU usage as a usage-based recommender would scrape it: the first sample,
    one each whole second after it, and the last (a shorter last interval is left out of the
    per-second usage, ``client.analysis.advise_model.per_second_usage``)."""
    if not timeline:
        return []
    first = timeline[0].t_ns
    out = [timeline[0]]
    for sample in timeline[1:]:
        if sample.t_ns - first >= len(out) * 1_000_000_000:
            out.append(sample)
    if out[-1] is not timeline[-1]:
        out.append(timeline[-1])
    return [UsageSample(s.t_ns / 1e9, s.usage_ns / 1e9) for s in out]

