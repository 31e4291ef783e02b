"""Router to engine over mutual TLS, on both HTTP fronts (docs/reliability.md, "mTLS").

A real engine serves gRPC over TLS and requires client certificates signed by the deployment's
CA (certificates made here with the openssl command line, as the docs show). A router given the
CA, its own certificate and the engines' name serves a completion through it; a router without
a client certificate never gets the engine healthy and answers 503.
"""
from __future__ import annotations

import subprocess
import time
from pathlib import Path

import pytest
import requests
from router_procs import LOG_DIR, free_port, start_router, wait_ready

from engine.server.launcher import EngineSpec, start_engines, stop_engines
from switchyard_engine_api.auth import TLS_CA_ENV, TLS_CERT_ENV, TLS_KEY_ENV, TLS_SERVER_NAME_ENV

pytestmark = [pytest.mark.procs, pytest.mark.slow, pytest.mark.timeout(600)]
ENGINE_NAME = "switchyard-engine"


def _openssl(*args: str, cwd: Path) -> None:
    subprocess.run(["openssl", *args], cwd=cwd, check=True, capture_output=True)


def _certificates(directory: Path) -> Path:
    """A CA, and a certificate signed by it for the engines and one for the router."""
    _openssl("req", "-x509", "-newkey", "rsa:2048", "-nodes", "-keyout", "ca.key", "-out",
             "ca.pem", "-days", "2", "-subj", "/CN=switchyard-test-ca", cwd=directory)
    for who in ("engine", "router"):
        (directory / f"{who}.ext").write_text(f"subjectAltName=DNS:switchyard-{who}\n")
        _openssl("req", "-newkey", "rsa:2048", "-nodes", "-keyout", f"{who}.key", "-out",
                 f"{who}.csr", "-subj", f"/CN=switchyard-{who}", cwd=directory)
        _openssl("x509", "-req", "-in", f"{who}.csr", "-CA", "ca.pem", "-CAkey", "ca.key",
                 "-CAcreateserial", "-days", "2", "-out", f"{who}.pem", "-extfile",
                 f"{who}.ext", cwd=directory)
    return directory


@pytest.fixture(scope="module")
def tls_engine(tmp_path_factory: pytest.TempPathFactory):  # type: ignore[no-untyped-def]
    certs = _certificates(tmp_path_factory.mktemp("certs"))
    router_tls = {TLS_CA_ENV: str(certs / "ca.pem"), TLS_CERT_ENV: str(certs / "router.pem"),
                  TLS_KEY_ENV: str(certs / "router.key"), TLS_SERVER_NAME_ENV: ENGINE_NAME}
    engine_tls = {**router_tls, TLS_CERT_ENV: str(certs / "engine.pem"),
                  TLS_KEY_ENV: str(certs / "engine.key")}
    # The launcher's readiness probe dials the engine as the router does.
    with pytest.MonkeyPatch.context() as env:
        for name, value in router_tls.items():
            env.setenv(name, value)
        engines = start_engines([EngineSpec(f"tls-engine-{free_port()}", threads=1,
                                            env={"SWITCHYARD_LOG_LEVEL": "WARNING",
                                                 **engine_tls})], LOG_DIR)
    try:
        yield engines[0].port, router_tls
    finally:
        stop_engines(engines)


def test_router_serves_through_an_mtls_engine(tls_engine) -> None:  # type: ignore[no-untyped-def]
    port, router_tls = tls_engine
    router_port = free_port()
    router = start_router(router_port, [port], env=router_tls)
    base = f"http://127.0.0.1:{router_port}"
    try:
        wait_ready(base, router, timeout_s=60)
        r = requests.post(f"{base}/v1/completions",
                          json={"prompt": "The harbour", "max_tokens": 4, "temperature": 0})
        assert r.status_code == 200, r.text
        assert r.json()["usage"]["completion_tokens"] == 4
    finally:
        router.stop()


def test_router_without_a_client_certificate_is_refused(tls_engine) -> None:  # type: ignore[no-untyped-def]
    port, router_tls = tls_engine
    no_identity = {**router_tls, TLS_CERT_ENV: "", TLS_KEY_ENV: ""}
    router_port = free_port()
    router = start_router(router_port, [port], env=no_identity)
    base = f"http://127.0.0.1:{router_port}"
    try:
        time.sleep(5)  # several health polls
        assert router.popen.poll() is None, router.output()
        assert requests.get(f"{base}/ready", timeout=5).status_code == 503
        r = requests.post(f"{base}/v1/completions", json={"prompt": "x", "max_tokens": 2})
        assert r.status_code == 503 and r.json()["error"]["code"] == "no_capacity", r.text
    finally:
        router.stop()
