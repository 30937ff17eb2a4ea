"""Loading a kubeconfig (:func:`make_api_client`) from two threads of one process at once, as the
local cluster's operator thread and the program beside it do when the cluster starts."""

from __future__ import annotations

import base64
import threading
from pathlib import Path
from typing import Any

import pytest
import yaml
from kubernetes.config import kube_config

from agentpool.certificates import make_ca
from agentpool.io.connection import Connection, make_api_client, transport


def _kubeconfig(directory: Path, ca_pem: bytes) -> Path:
    path = directory / "kubeconfig"
    cluster = {
        "server": "https://127.0.0.1:6443",
        "certificate-authority-data": base64.b64encode(ca_pem).decode(),
    }
    path.write_text(
        yaml.safe_dump(
            {
                "apiVersion": "v1",
                "kind": "Config",
                "clusters": [{"name": "c", "cluster": cluster}],
                "users": [{"name": "u", "user": {"token": "t"}}],
                "contexts": [{"name": "x", "context": {"cluster": "c", "user": "u"}}],
                "current-context": "x",
            }
        )
    )
    return path


def test_two_threads_loading_one_kubeconfig_both_trust_its_ca(
    tmp_path: Path, monkeypatch: pytest.MonkeyPatch
) -> None:
    """The ``kubernetes`` client names the file it writes a kubeconfig's CA to before it writes
    it. A second thread loading the same kubeconfig in that moment must still get the CA, not an
    empty file its TLS context refuses (which once stopped a local cluster's operator at start)."""
    ca = make_ca("two-threads-ca")  # a CA of its own, so no earlier load has written its file
    kubeconfig = _kubeconfig(tmp_path, ca.cert_pem)
    second_loaded = threading.Event()
    found: dict[str, Any] = {}

    def second_load() -> None:
        try:
            client = make_api_client(Connection(kubeconfig=str(kubeconfig)))
            found["ca"] = Path(client.configuration.ssl_ca_cert).read_bytes()
            found["transport"] = transport(client.configuration)
            client.close()
        except Exception as error:  # reported by the assertion below
            found["error"] = error
        finally:
            second_loaded.set()

    second = threading.Thread(target=second_load)
    real_open = open

    def open_between_naming_and_writing(file: Any, mode: str = "r", *args: Any, **kw: Any) -> Any:
        if mode == "wb" and not second.is_alive() and not second_loaded.is_set():
            # The CA file has its name in the client's cache and nothing in it yet: load the
            # kubeconfig again from another thread, and let it run to its end if it can.
            second.start()
            second_loaded.wait(1)
        return real_open(file, mode, *args, **kw)

    monkeypatch.setattr(kube_config, "open", open_between_naming_and_writing, raising=False)
    first = make_api_client(Connection(kubeconfig=str(kubeconfig)))
    first.close()
    assert second.ident is not None, "the CA file was never written"
    second.join(30)

    assert "error" not in found, found.get("error")
    assert found["ca"] == ca.cert_pem
    assert found["transport"].ssl is not None
    assert Path(first.configuration.ssl_ca_cert).read_bytes() == ca.cert_pem
