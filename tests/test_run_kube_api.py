"""``client.run.kube_api``: the client's failures as one line (a permission names the verb and
the resource; a lost server says so, whichever way the client reports it), and a kubeconfig
that does not exist or cannot be used."""

from __future__ import annotations

import socket
from pathlib import Path

import pytest
import yaml
import urllib3
from kubernetes.client.exceptions import ApiException

from client.run.kube_api import KubeError, api_problem, connect


def test_a_missing_permission_names_verb_and_resource() -> None:
    assert api_problem(ApiException(status=403, reason="Forbidden"), "patch", "pods/resize",
                       "shop", "api-1") == ("no permission: patch pods/resize in namespace "
                                            "shop (the Role in k8s/advise-rbac.yaml grants "
                                            "what advise needs)")
    assert api_problem(ApiException(status=404), "get", "pods", "shop", "api-1") == \
        "no such pod: shop/api-1"


def test_a_lost_server_is_one_line() -> None:
    cut = ApiException(status=0, reason="SSLError\n[SSL: UNEXPECTED_EOF_WHILE_READING] EOF "
                       "occurred in violation of protocol (_ssl.c:1006)")
    line = api_problem(cut, "get", "pods", "shop", "api-1", "https://127.0.0.1:6443")
    assert line == ("lost the API server at https://127.0.0.1:6443: get pods shop/api-1: "
                    "SSLError [SSL: UNEXPECTED_EOF_WHILE_READING] EOF occurred in violation of "
                    "protocol (_ssl.c:1006)")
    listener = socket.create_server(("127.0.0.1", 0))
    port = listener.getsockname()[1]
    listener.close()                       # nothing listens there now
    with pytest.raises(urllib3.exceptions.HTTPError) as refused:
        urllib3.PoolManager(retries=False).request("GET", f"https://127.0.0.1:{port}/")
    line = api_problem(refused.value, "patch", "pods/resize", "shop", "api-1")
    assert line.startswith("lost the API server: patch pods/resize shop/api-1: ")
    assert "Connection refused" in line and "\n" not in line


def test_no_kubeconfig_is_one_line(tmp_path: Path, monkeypatch: pytest.MonkeyPatch) -> None:
    monkeypatch.setenv("KUBECONFIG", str(tmp_path / "none"))
    monkeypatch.delenv("KUBERNETES_SERVICE_HOST", raising=False)
    with pytest.raises(KubeError, match="no kubeconfig .* and not inside a pod"):
        connect()
    (tmp_path / "bad").write_text("apiVersion: v1\nkind: Config\nclusters: []\n")
    monkeypatch.setenv("KUBECONFIG", str(tmp_path / "bad"))
    with pytest.raises(KubeError, match="the kubeconfig cannot be used"):
        connect()


def test_the_kubeconfig_is_the_one_named_now(tmp_path: Path,
                                              monkeypatch: pytest.MonkeyPatch) -> None:
    """``$KUBECONFIG`` as it is at the call, not as it was when the client was first imported
    (the client's own default is read once, at import: seen in CI, where another test had
    imported it first)."""
    import kubernetes.config  # noqa: F401 - imported before KUBECONFIG is set, on purpose

    def kubeconfig(path: Path, server: str) -> Path:
        doc = {"apiVersion": "v1", "kind": "Config",
               "clusters": [{"name": "c", "cluster": {"server": server}}],
               "users": [{"name": "u", "user": {"token": "t"}}],
               "contexts": [{"name": "x", "context": {"cluster": "c", "user": "u"}}],
               "current-context": "x"}
        path.write_text(yaml.safe_dump(doc))
        return path

    monkeypatch.delenv("KUBERNETES_SERVICE_HOST", raising=False)
    first = kubeconfig(tmp_path / "first", "https://10.250.0.2:6443")
    monkeypatch.setenv("KUBECONFIG", str(first))
    assert connect().server == "https://10.250.0.2:6443"
    second = kubeconfig(tmp_path / "second", "https://127.0.0.1:6444")
    monkeypatch.setenv("KUBECONFIG", str(second))
    assert connect().server == "https://127.0.0.1:6444"
