"""The Kubernetes API for ``advise``/``sweep`` on pods: the official ``kubernetes`` client (the
``k8s`` extra), configured as kubectl is, and its failures in one line.

Configuration, as kubectl reads it: ``$KUBECONFIG`` (several files joined by ``:`` are merged)
or ``~/.kube/config``, its current context (``--context`` another); inside a pod without a
kubeconfig, the pod's service account (in-cluster config). Every call has a timeout
(:data:`REQUEST_TIMEOUT`) and no retries, so a lost API server is said within seconds, not
minutes.

:func:`api_problem` turns the client's exceptions into one line: a missing permission names the
verb and the resource (``no permission: patch pods/resize in namespace shop``), a missing object
its kind and name, a lost connection the server's address.
"""

from __future__ import annotations

import os
from dataclasses import dataclass
from functools import cached_property
from pathlib import Path
from typing import Any

__all__ = ["METADATA_ONLY", "KubeApi", "KubeError", "REQUEST_TIMEOUT", "api_message", "api_problem", "connect", "connect_as",
           "context_namespace", "current_namespace"]

REQUEST_TIMEOUT = 10.0   # seconds, each call (connect and read)
SERVICE_ACCOUNT_NAMESPACE = Path("/var/run/secrets/kubernetes.io/serviceaccount/namespace")


class KubeError(RuntimeError):
    """The API cannot be reached or refused a call; one line saying which."""


# a list's objects as their metadata alone (the API server's PartialObjectMetadataList, as
# client-go's metadata informers ask), else the whole objects
METADATA_ONLY = ("application/json;as=PartialObjectMetadataList;g=meta.k8s.io;v=v1,"
                 "application/json")


@dataclass
class KubeApi:
    """The clients advise needs, and the server they talk to. ``core`` and ``apps`` are made
    when first used: importing their modules takes seconds (over 2 s of a 1,000-workload
    listing), and :meth:`get_json` needs neither."""

    api_client: Any      # kubernetes.client.ApiClient
    server: str

    @cached_property
    def core(self) -> Any:   # kubernetes.client.CoreV1Api
        from kubernetes import client
        return client.CoreV1Api(self.api_client)

    @cached_property
    def apps(self) -> Any:   # kubernetes.client.AppsV1Api
        from kubernetes import client
        return client.AppsV1Api(self.api_client)

    def get_json(self, path: str, timeout: float = REQUEST_TIMEOUT,
                 accept: str = "application/json") -> Any:
        """GET ``path`` of the API (e.g. ``/api/v1/namespaces/NS/pods``) as its JSON, with
        the client's auth and TLS: no model built (``accept``: the media types asked for,
        e.g. :data:`METADATA_ONLY`). The client's ``ApiException`` for an answer that is not
        2xx, urllib3's errors for a lost server."""
        import json

        from kubernetes.client.exceptions import ApiException  # type: ignore[import-untyped]

        method, url, headers, body, post = self.api_client.param_serialize(
            "GET", path, header_params={"Accept": accept}, auth_settings=["BearerToken"])
        response = self.api_client.call_api(method, url, header_params=headers, body=body,
                                            post_params=post, _request_timeout=timeout)
        response.read()
        if not 200 <= int(response.status) <= 299:
            raise ApiException.from_response(http_resp=response, body=None, data=None)
        return json.loads(response.data)

    def patch_json(self, path: str, body: Any, timeout: float = REQUEST_TIMEOUT) -> Any:
        """PATCH ``path`` with ``body`` as a JSON merge patch; the answer's JSON. Failures as
        :meth:`get_json`'s."""
        import json

        from kubernetes.client.exceptions import ApiException  # type: ignore[import-untyped]

        method, url, headers, data, post = self.api_client.param_serialize(
            "PATCH", path, header_params={"Accept": "application/json",
                                          "Content-Type": "application/merge-patch+json"},
            body=body, auth_settings=["BearerToken"])
        response = self.api_client.call_api(method, url, header_params=headers, body=data,
                                            post_params=post, _request_timeout=timeout)
        response.read()
        if not 200 <= int(response.status) <= 299:
            raise ApiException.from_response(http_resp=response, body=None, data=None)
        return json.loads(response.data)

    def to_json(self, obj: Any) -> Any:
        """An API object as the API's JSON (camelCase keys, as ``kubectl get -o json``)."""
        return self.api_client.sanitize_for_serialization(obj)


def _kubeconfig_files() -> list[Path]:
    env = os.environ.get("KUBECONFIG")
    names = [p for p in env.split(os.pathsep) if p] if env else ["~/.kube/config"]
    return [Path(p).expanduser() for p in names if Path(p).expanduser().exists()]


def _kubeconfig_docs() -> list[Any]:
    """The kubeconfig files kubectl would read, parsed in ``$KUBECONFIG``'s order;
    ``KubeError`` (one line) for one that is not YAML or cannot be read."""
    import yaml  # type: ignore[import-untyped]

    docs = []
    for path in _kubeconfig_files():
        try:
            docs.append(yaml.safe_load(path.read_text()))
        except (OSError, yaml.YAMLError) as exc:
            reason = getattr(exc, "strerror", None) or str(exc).splitlines()[0]
            raise KubeError(f"{path}: the kubeconfig cannot be read: {reason}") from None
    return docs


def context_namespace(kubeconfigs: list[Any], context: str | None = None) -> str:
    """The namespace kubectl uses without ``-n``: the current context's (``context`` another),
    "default" when it has none; ``kubeconfigs`` are the parsed files in ``$KUBECONFIG``'s order,
    merged as kubectl merges them (the first file to set a key wins)."""
    docs = [d for d in kubeconfigs if isinstance(d, dict)]
    name = context or next((d["current-context"] for d in docs if d.get("current-context")), None)
    for doc in docs:
        for entry in doc.get("contexts") or []:
            if isinstance(entry, dict) and entry.get("name") == name:
                return str((entry.get("context") or {}).get("namespace") or "default")
    return "default"


def context_server(kubeconfigs: list[Any], context: str | None = None) -> str | None:
    """The API server kubectl talks to: the current context's (``context`` another) cluster's
    ``server``, merged as :func:`context_namespace`; None when the files do not say."""
    docs = [d for d in kubeconfigs if isinstance(d, dict)]
    name = context or next((d["current-context"] for d in docs if d.get("current-context")), None)
    cluster = next(((e.get("context") or {}).get("cluster") for d in docs
                    for e in d.get("contexts") or []
                    if isinstance(e, dict) and e.get("name") == name), None)
    return next((str(e["cluster"]["server"]) for d in docs for e in d.get("clusters") or []
                 if isinstance(e, dict) and e.get("name") == cluster
                 and isinstance(e.get("cluster"), dict) and e["cluster"].get("server")), None)


def current_server(context: str | None = None) -> str | None:
    """:func:`context_server` of the kubeconfig files kubectl would read; None where they do
    not say or cannot be read (for an error's words: never an error itself)."""
    try:
        return context_server(_kubeconfig_docs(), context)
    except KubeError:
        return None


def current_namespace(context: str | None = None) -> str:
    """:func:`context_namespace` of the kubeconfig files kubectl would read; inside a pod
    without one, the pod's own namespace (as kubectl does); ``KubeError`` for a file that is
    not YAML."""
    if not _kubeconfig_files():
        if os.environ.get("KUBERNETES_SERVICE_HOST") and SERVICE_ACCOUNT_NAMESPACE.exists():
            return SERVICE_ACCOUNT_NAMESPACE.read_text().strip() or "default"
        return "default"
    return context_namespace(_kubeconfig_docs(), context)


def connect(context: str | None = None) -> KubeApi:
    """Clients for the cluster kubectl would talk to; ``KubeError`` (one line) when there is
    none or the configuration is unusable."""
    try:
        from kubernetes import client, config
    except ImportError:
        raise KubeError("Kubernetes targets need the official client: pip install "
                        "'throttle-lab[k8s]'") from None
    configuration = client.Configuration()
    try:
        if _kubeconfig_files():
            # the files named now: the client's own default is $KUBECONFIG as it was when the
            # module was first imported
            config.load_kube_config(config_file=os.pathsep.join(map(str, _kubeconfig_files())),
                                    client_configuration=configuration, context=context)
        elif os.environ.get("KUBERNETES_SERVICE_HOST"):
            config.load_incluster_config(client_configuration=configuration)
        else:
            where = os.environ.get("KUBECONFIG") or "~/.kube/config"
            raise KubeError(f"no kubeconfig ({where} does not exist) and not inside a pod: "
                            "which cluster? (set KUBECONFIG as for kubectl)")
    except config.ConfigException as exc:
        raise KubeError(f"the kubeconfig cannot be used: {str(exc).splitlines()[0]}") from None
    configuration.retries = False            # a lost server is said at once, not retried
    api_client = client.ApiClient(configuration)
    return KubeApi(api_client, configuration.host)


def connect_as(error: type[Exception], context: str | None = None) -> KubeApi:
    """:func:`connect`, its one-line failure raised as ``error`` (the caller's own kind, e.g.
    ``client.run.k8s_workloads.WorkloadError``)."""
    try:
        return connect(context)
    except KubeError as exc:
        raise error(str(exc)) from None


def api_problem(exc: Exception, verb: str, resource: str, namespace: str, name: str = "",
                server: str = "") -> str:
    """One line for an exception of the client on ``verb resource namespace/name``."""
    status = getattr(exc, "status", None)
    if status == 403:
        return (f"no permission: {verb} {resource} in namespace {namespace} (the Role in "
                "k8s/advise-rbac.yaml grants what advise needs)")
    if status == 401:
        return f"the API server at {server or 'the kubeconfig'} does not accept the credentials"
    if status == 404:
        kind = resource.split("/")[0].rstrip("s")
        return f"no such {kind}: {namespace}/{name}" if name else f"no such namespace: {namespace}"
    if status:
        reason = getattr(exc, "reason", None) or ""
        body = api_message(getattr(exc, "body", None))
        return f"{verb} {resource} {namespace}/{name} refused ({status} {reason}): {body}".rstrip(
            ": ")
    # urllib3's errors, a timeout, or the client's ApiException of status 0 around them (a
    # TLS connection cut): the connection itself
    cause = " ".join(str(getattr(exc, "reason", None) or exc).split())
    cause = cause.split(">: ")[-1]
    return (f"lost the API server{' at ' + server if server else ''}: {verb} {resource} "
            f"{namespace}/{name}: {cause[:160]}")


def api_message(body: Any) -> str:
    """The ``message`` of an API error's JSON body (its text where not JSON), cut short."""
    import json

    if not body:
        return ""
    try:
        return str(json.loads(body).get("message") or "")[:200]
    except (ValueError, AttributeError, TypeError):
        return str(body)[:200]
