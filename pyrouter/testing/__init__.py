"""Test support users can import too: FakeCluster runs a policy in-process against fake engines."""
from pyrouter.testing.drive import ClientGone, FakeRun, drive
from pyrouter.testing.fake_cluster import FakeCluster, FakeEngine
from pyrouter.testing.fake_engine import Fault, next_token

__all__ = ["ClientGone", "FakeCluster", "FakeEngine", "FakeRun", "Fault", "drive", "next_token"]
