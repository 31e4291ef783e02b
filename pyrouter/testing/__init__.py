"""Test support users can import too: FakeCluster runs a policy in-process against fake engines."""
from pyrouter.testing.fake_cluster import ClientGone, FakeCluster, FakeEngine, FakeRun
from pyrouter.testing.fake_engine import Fault, next_token

__all__ = ["ClientGone", "FakeCluster", "FakeEngine", "FakeRun", "Fault", "next_token"]
