"""A pod's timeline from the node agent (agent/, the DaemonSet in k8s/recorder/), fetched from
a machine that has only a kubeconfig: the pod's node from the API, that node's agent pod (the
recorder's label, in the recorder's namespace), and the agent's ``/timeline`` window through
the API server's proxy (``pods/proxy``), with the official ``kubernetes`` client. The user
needs ``get pods`` in the pod's namespace and ``get pods/proxy`` in the recorder's
(k8s/recorder/user-rbac.yaml).

``k8s:NS/POD`` names the pod's group, ``k8s:NS/POD/CONTAINER`` one container's.
"""
from __future__ import annotations

import json
import re
from urllib.parse import urlencode
from collections.abc import Iterator, Sequence
from dataclasses import dataclass
from pathlib import Path
from typing import Any

from client.data.files import write_whole
from client.data.folders import make_folder
from client.run.kube_api import KubeApi, KubeError, connect

__all__ = ["RECORDER_NAMESPACE", "RECORDER_LABEL", "AGENT_PORT", "READER_ROLE", "AgentLink",
           "AgentTimelineError", "NoTimeline", "OlderAgent", "PodRef", "agent_api", "agent_kube",
           "agent_link",
           "agent_on_node", "parse_pod_ref", "fetch_timeline"]

RECORDER_NAMESPACE = "throttle-lab-recorder"     # k8s/recorder/namespace.yaml
RECORDER_LABEL = "app.kubernetes.io/name=throttle-lab-recorder"
AGENT_PORT = 9742                                # the DaemonSet's containerPort "metrics"
PREFIX = "k8s:"
READER_ROLE = ("the Role throttle-lab-timeline-reader in k8s/recorder/user-rbac.yaml grants it "
               "(kubectl -n throttle-lab-recorder create rolebinding ... "
               "--role=throttle-lab-timeline-reader --user=YOU)")
REQUEST_TIMEOUT_S = 10.0    # to connect; a stream may then take minutes between its lines
_NAME = re.compile(r"^[a-z0-9]([-a-z0-9.]{0,251}[a-z0-9])?$")


class AgentTimelineError(Exception):
    """The timeline cannot be had; the message says why and what to do."""


class OlderAgent(AgentTimelineError):
    """The agent has no ``/windows`` (404): it is older; ask it a pod at a time."""


class NoTimeline(AgentTimelineError):
    """The agent has no rows of the pod in that window (or no timeline of it at all)."""


@dataclass(frozen=True)
class PodRef:
    namespace: str
    pod: str
    container: str = ""

    def __str__(self) -> str:
        return f"{PREFIX}{self.namespace}/{self.pod}" + (f"/{self.container}" if self.container else "")


def parse_pod_ref(text: str) -> PodRef | None:
    """``k8s:NS/POD[/CONTAINER]`` -> PodRef; None when ``text`` is not a k8s: reference;
    ValueError for a k8s: reference that is malformed."""
    if not text.startswith(PREFIX):
        return None
    parts = text[len(PREFIX):].split("/")
    if len(parts) not in (2, 3) or not all(_NAME.match(p) for p in parts):
        raise ValueError(f"{text!r}: expected k8s:NAMESPACE/POD or k8s:NAMESPACE/POD/CONTAINER "
                         "(Kubernetes names: lower case letters, digits, '-' and '.')")
    return PodRef(*parts)


def agent_api() -> Any:
    """The cluster kubectl would talk to (``client.run.kube_api``: kubeconfig or in-cluster)."""
    try:
        return connect().core
    except KubeError as exc:
        raise AgentTimelineError(str(exc)) from None


def agent_kube() -> KubeApi:
    """:func:`agent_api`'s cluster without the core client (its models take seconds to
    import): what a node's agent and its windows are asked through (:func:`agent_on_node`)."""
    try:
        return connect()
    except KubeError as exc:
        raise AgentTimelineError(str(exc)) from None


def _reason(exc: Exception) -> str:
    body = getattr(exc, "body", None)
    if isinstance(body, (bytes, bytearray)):
        body = body.decode(errors="replace")
    return _message(str(body)) if body else (str(exc).strip().splitlines() or [""])[0][:300]


def _agent_on(api: Any, node: str, namespace: str) -> str:
    from kubernetes.client.exceptions import ApiException  # type: ignore[import-untyped]
    try:   # the raw answer, as JSON: no model built
        if isinstance(api, KubeApi):
            query = urlencode({"labelSelector": RECORDER_LABEL,
                               "fieldSelector": f"spec.nodeName={node}"})
            pods = api.get_json(f"/api/v1/namespaces/{namespace}/pods?{query}").get(
                "items") or []
        else:
            raw = api.list_namespaced_pod(namespace, label_selector=RECORDER_LABEL,
                                          field_selector=f"spec.nodeName={node}",
                                          _preload_content=False)
            pods = json.loads(raw.data).get("items") or []
    except ApiException as exc:
        if getattr(exc, "status", None) == 403:
            raise AgentTimelineError(f"not allowed to list the node agents in {namespace} "
                                     f"({_reason(exc)}): {READER_ROLE}") from None
        raise AgentTimelineError(f"cannot list the recorder's pods in {namespace}: "
                                 f"{_reason(exc)}") from None
    except (ValueError, AttributeError):
        raise AgentTimelineError(f"the list of the recorder's pods in {namespace} is not "
                                 "JSON") from None
    running = [p for p in pods if (p.get("status") or {}).get("phase") == "Running"
               and (p.get("status") or {}).get("podIP")]
    if not running:
        raise AgentTimelineError(f"no running node agent on node {node} (namespace {namespace}, "
                                 f"label {RECORDER_LABEL}): kubectl apply -k k8s/recorder")
    ready = [p for p in running if _ready(p)]
    if not ready:
        name = running[0]["metadata"]["name"]
        raise AgentTimelineError(f"the node agent {namespace}/{name} on node {node} is not "
                                 f"ready: kubectl -n {namespace} describe pod {name}")
    return str(ready[0]["metadata"]["name"])


def _ready(pod: Any) -> bool:
    """Whether the pod's (its JSON's) Ready condition is True (no conditions reported: taken
    as ready)."""
    conditions = (pod.get("status") or {}).get("conditions") or []
    states = [c.get("status") for c in conditions if c.get("type") == "Ready"]
    return not states or states[0] == "True"


def _request(api: Any, namespace: str, agent: str, query: dict[str, str]) -> tuple[int, str]:
    """GET the agent's /timeline through ``pods/proxy`` with the client's own request
    machinery (its auth, TLS and kubeconfig): (HTTP status, body)."""
    path = "/api/v1/namespaces/{namespace}/pods/{name}/proxy/timeline"
    params = {"namespace": namespace, "name": f"{agent}:{AGENT_PORT}"}
    client = api.api_client
    if hasattr(client, "param_serialize"):   # the client's generator since v34
        method, url, headers, body, post = client.param_serialize(
            "GET", path, path_params=params, query_params=list(query.items()),
            header_params={"Accept": "*/*"}, auth_settings=["BearerToken"])
        response = client.call_api(method, url, header_params=headers, body=body,
                                   post_params=post, _request_timeout=120)
        response.read()
        return int(response.status), bytes(response.data).decode(errors="replace")
    from kubernetes.client.exceptions import ApiException
    try:   # up to v33
        raw = client.call_api(path, "GET", path_params=params, query_params=list(query.items()),
                              header_params={"Accept": "*/*"}, auth_settings=["BearerToken"],
                              _preload_content=False, _request_timeout=120)
    except ApiException as exc:
        return int(exc.status), str(exc.body or "")
    raw = raw[0] if isinstance(raw, tuple) else raw
    return int(raw.status), bytes(raw.data).decode(errors="replace")


def _open(api: Any, namespace: str, agent: str, endpoint: str,
          query: Sequence[tuple[str, str]]) -> Any:
    """GET the agent's ``endpoint`` through ``pods/proxy``, its body not read yet: the
    response (``status``; ``readline()``, ``read()``, ``release_conn()``) of urllib3."""
    path = "/api/v1/namespaces/{namespace}/pods/{name}/proxy/" + endpoint
    params = {"namespace": namespace, "name": f"{agent}:{AGENT_PORT}"}
    client = api.api_client
    if hasattr(client, "param_serialize"):   # the client's generator since v34
        method, url, headers, body, post = client.param_serialize(
            "GET", path, path_params=params, query_params=list(query),
            header_params={"Accept": "*/*"}, auth_settings=["BearerToken"])
        return client.call_api(method, url, header_params=headers, body=body,
                               post_params=post, _request_timeout=(REQUEST_TIMEOUT_S, 300)
                               ).response
    from kubernetes.client.exceptions import ApiException
    try:   # up to v33
        raw = client.call_api(path, "GET", path_params=params, query_params=list(query),
                              header_params={"Accept": "*/*"}, auth_settings=["BearerToken"],
                              _preload_content=False, _request_timeout=(REQUEST_TIMEOUT_S, 300))
    except ApiException as exc:
        raise AgentTimelineError(f"the agent {namespace}/{agent} answered {exc.status}: "
                                 f"{_message(str(exc.body or ''))}") from None
    return raw[0] if isinstance(raw, tuple) else raw


def _lines(response: Any, size: int = 1 << 16) -> Iterator[bytes]:
    """The response's lines as they arrive (the last one maybe without its newline), read a
    buffer at a time: urllib3's ``readline`` reads a byte at a time (io's without ``peek``),
    and a node's windows are megabytes (200 windows took 13 s)."""
    read = getattr(response, "read1", None) or response.read
    pending = b""
    while True:
        chunk = read(size)
        if not chunk:
            break
        pending += chunk
        start = 0
        while (end := pending.find(b"\n", start)) >= 0:
            yield pending[start:end + 1]
            start = end + 1
        pending = pending[start:]
    if pending:
        yield pending


def _message(body: str) -> str:
    try:
        return str(json.loads(body)["message"])
    except (TypeError, ValueError, KeyError):
        return (body.strip().splitlines() or [""])[0][:300]


def _get(api: Any, namespace: str, agent: str, query: dict[str, str]) -> str:
    from urllib3.exceptions import HTTPError
    try:
        status, body = _request(api, namespace, agent, query)
    except HTTPError as exc:
        raise AgentTimelineError(f"the API server did not answer: {exc}") from None
    if status == 403:
        raise AgentTimelineError(
            f"not allowed to reach the agent {namespace}/{agent} through the API server "
            f"({_message(body)}): the user needs 'get' on pods/proxy in {namespace}: "
            f"{READER_ROLE}")
    if status == 404:
        raise NoTimeline(f"the agent {namespace}/{agent} has no timeline for "
                                 f"{query.get('namespace')}/{query.get('pod')} in that window "
                                 f"({_message(body)}): is the pod labelled "
                                 "throttle-lab/record=true?")
    if status in (502, 503):
        raise AgentTimelineError(f"the agent {namespace}/{agent} does not answer through the "
                                 f"API server's proxy ({status}: {_message(body)}): is it ready?")
    if status != 200:
        raise AgentTimelineError(f"the agent {namespace}/{agent} answered {status}: "
                                 f"{_message(body)}")
    return body


@dataclass(frozen=True)
class AgentLink:
    """The way to a pod's timeline: the API, the pod's node and that node's agent pod."""

    api: Any
    ref: PodRef
    node: str
    namespace: str      # the recorder's
    agent: str          # the agent's pod

    def window(self, dest_dir: Path, from_s: float | None = None,
               to_s: float | None = None) -> Path:
        """Write the window [from_s, to_s] (Unix seconds; None: open) of the pod's timeline,
        as the agent serves it, to ``dest_dir/<ns>_<pod>[_<container>].cgroup.csv`` and its
        ``.json``; return the CSV's path."""
        ref = self.ref
        query = {"namespace": ref.namespace, "pod": ref.pod}
        if ref.container:
            query["container"] = ref.container
        if from_s is not None:
            query["from"] = f"{from_s:.6f}"
        if to_s is not None:
            query["to"] = f"{to_s:.6f}"
        csv = _get(self.api, self.namespace, self.agent, {**query, "format": "csv"})
        meta = _get(self.api, self.namespace, self.agent, {**query, "format": "json"})
        stem = "_".join(p for p in (ref.namespace, ref.pod, ref.container) if p)
        make_folder(dest_dir)
        path = dest_dir / f"{stem}.cgroup.csv"
        write_whole(path, csv)
        write_whole(path.with_name(f"{stem}.json"), meta)
        return path

    def windows(self, dest_dir: Path, refs: Sequence[PodRef], from_s: float, to_s: float
                ) -> Iterator[tuple[PodRef, Path | AgentTimelineError]]:
        """The window [from_s, to_s] of each of ``refs`` (pods of this agent's node) in one
        streamed answer of the agent's ``/windows``, each written as :meth:`window` writes
        it and yielded as it arrives: its CSV's path, or why it has none. ``OlderAgent``
        (before any) when the agent has no ``/windows``."""
        keys = {"/".join(p for p in (r.namespace, r.pod, r.container) if p): r for r in refs}
        query = [("from", f"{from_s:.6f}"), ("to", f"{to_s:.6f}"),
                 *(("key", k) for k in keys)]
        from urllib3.exceptions import HTTPError
        where = f"the agent {self.namespace}/{self.agent}"
        try:
            response = _open(self.api, self.namespace, self.agent, "windows", query)
        except HTTPError as exc:
            raise AgentTimelineError(f"the API server did not answer: {exc}") from None
        left = dict(keys)
        try:
            status = int(response.status)
            if status != 200:
                body = bytes(response.read()).decode(errors="replace")   # the connection's
                if status == 404:
                    raise OlderAgent(f"{where} has no /windows (an older agent)")
                if status in (502, 503):
                    raise AgentTimelineError(f"{where} does not answer through the API "
                                             f"server's proxy ({status}: {_message(body)}): "
                                             "is it ready?")
                if status == 403:
                    raise AgentTimelineError(
                        f"not allowed to reach {where} through the API server "
                        f"({_message(body)}): the user needs 'get' on pods/proxy in "
                        f"{self.namespace}: {READER_ROLE}")
                raise AgentTimelineError(f"{where} answered {status}: {_message(body)}")
            make_folder(dest_dir)
            done = False
            for raw in _lines(response):
                try:
                    line = json.loads(raw)
                except ValueError:
                    raise AgentTimelineError(f"{where} sent a line of /windows that is not "
                                             "JSON") from None
                if line.get("done"):
                    done = True
                    break
                ref = left.pop(str(line.get("key")), None)
                if ref is None:
                    continue
                if line.get("error") or not isinstance(line.get("meta"), dict):
                    yield ref, NoTimeline(f"{where} has no timeline for {ref.namespace}/"
                                          f"{ref.pod} in that window ({line.get('error')}): "
                                          "is the pod labelled throttle-lab/record=true?")
                    continue
                stem = "_".join(p for p in (ref.namespace, ref.pod, ref.container) if p)
                path = dest_dir / f"{stem}.cgroup.csv"
                # the folder made once above: not looked up again for each of a node's
                # windows (the cgroup mount check reads mountinfo: 0.4 s in 1,000 windows)
                write_whole(path, str(line.get("csv") or ""), folder_made=True)
                write_whole(path.with_name(f"{stem}.json"),
                            json.dumps(line["meta"], indent=2) + "\n", folder_made=True)
                yield ref, path
        except HTTPError as exc:
            done = False
            cut = f"{exc}"
        else:
            cut = "the stream ended before its last line"
        finally:
            response.release_conn()
        if not done:
            for ref in left.values():
                yield ref, AgentTimelineError(f"{where} did not send the window of "
                                              f"{ref.namespace}/{ref.pod}: {cut}")

    def metadata(self, from_s: float | None = None, to_s: float | None = None) -> dict[str, Any]:
        """The metadata alone of the window [from_s, to_s] (the group, the quota its rows are
        counted under, the clock, ``samples``); ``NoTimeline`` when it has no row."""
        query = {"namespace": self.ref.namespace, "pod": self.ref.pod, "format": "json"}
        if self.ref.container:
            query["container"] = self.ref.container
        if from_s is not None:
            query["from"] = f"{from_s:.6f}"
        if to_s is not None:
            query["to"] = f"{to_s:.6f}"
        try:
            meta = json.loads(_get(self.api, self.namespace, self.agent, query))
        except ValueError:
            raise AgentTimelineError(f"the agent {self.namespace}/{self.agent} sent metadata "
                                     "that is not JSON") from None
        if not isinstance(meta, dict):
            raise AgentTimelineError(f"the agent {self.namespace}/{self.agent} sent metadata "
                                     "that is not a JSON object")
        return meta


def agent_link(ref: PodRef, *, recorder_namespace: str = RECORDER_NAMESPACE) -> AgentLink:
    """The pod's node and that node's ready agent, asked of the API (``AgentTimelineError``,
    one line, when there is none)."""
    from kubernetes.client.exceptions import ApiException
    api = agent_api()
    try:
        pod = api.read_namespaced_pod(ref.pod, ref.namespace)
    except ApiException as exc:
        raise AgentTimelineError(f"{ref}: {_reason(exc)}") from None
    node = pod.spec.node_name
    if not node:
        raise AgentTimelineError(f"{ref}: not scheduled on a node yet")
    return AgentLink(api, ref, str(node), recorder_namespace,
                     _agent_on(api, node, recorder_namespace))


def agent_on_node(api: Any, node: str, *, recorder_namespace: str = RECORDER_NAMESPACE
                  ) -> AgentLink:
    """The ready agent of ``node`` (as the pod list says it), its ``ref`` a placeholder to
    replace (``dataclasses.replace``): the API asked once a node, not once a pod."""
    return AgentLink(api, PodRef("", ""), node, recorder_namespace,
                     _agent_on(api, node, recorder_namespace))


def fetch_timeline(ref: PodRef, dest_dir: Path, from_s: float | None = None,
                   to_s: float | None = None, *,
                   recorder_namespace: str = RECORDER_NAMESPACE) -> Path:
    """:meth:`AgentLink.window` of the pod's agent, found once."""
    return agent_link(ref, recorder_namespace=recorder_namespace).window(dest_dir, from_s, to_s)
