"""Test support users can import too: FakeCluster runs a policy in-process against fake engines,
through the router's own front (pyrouter/testing/in_process.py)."""
from pyrouter.testing.fake_cluster import FakeCluster, FakeEngine, FakeRun
from pyrouter.testing.fake_engine import Fault, next_token
from pyrouter.testing.in_process import ClientError

__all__ = ["ClientError", "FakeCluster", "FakeEngine", "FakeRun", "Fault", "next_token"]
