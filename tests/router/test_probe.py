"""`python -m pyrouter.probe`: the containers' health checks answer 0 healthy, 1 not."""
from __future__ import annotations

import subprocess
import sys

import pytest
from router_procs import ROOT, free_port

from pyrouter.probe import main as probe

pytestmark = pytest.mark.procs


@pytest.mark.timeout(90)
def test_probes_a_live_router_and_engine(mock_cluster):
    assert probe(["http", f"{mock_cluster.base}/health"]) == 0
    assert probe(["grpc", f"127.0.0.1:{mock_cluster.engine_ports[0]}"]) == 0


def test_nothing_listening_is_unhealthy():
    port = free_port()
    assert probe(["http", f"http://127.0.0.1:{port}/health", "--timeout-s", "1"]) == 1
    assert probe(["grpc", f"127.0.0.1:{port}", "--timeout-s", "1"]) == 1


def test_runs_as_a_module_with_docker_exit_codes():
    out = subprocess.run([sys.executable, "-m", "pyrouter.probe", "grpc",
                          f"127.0.0.1:{free_port()}", "--timeout-s", "0.5"],
                         cwd=ROOT, capture_output=True, text=True, timeout=60)
    assert out.returncode == 1 and "UNHEALTHY" in out.stdout
    bad = subprocess.run([sys.executable, "-m", "pyrouter.probe", "tcp", "x"], cwd=ROOT,
                         capture_output=True, text=True, timeout=60)
    assert bad.returncode == 2 and "invalid choice" in bad.stderr
