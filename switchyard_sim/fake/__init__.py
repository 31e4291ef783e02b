"""FakeCluster, the harness policy tests (and policy authors) run: a policy in-process against fake
engines, through the router's own front (front_run.py, polled by in_process.py; the simulator's
requests take the same way)."""
from switchyard_sim.fake.fake_cluster import FakeCluster, FakeEngine, FakeRun
from switchyard_sim.fake.fake_engine import Fault, next_token
from switchyard_sim.fake.in_process import ClientError

__all__ = ["ClientError", "FakeCluster", "FakeEngine", "FakeRun", "Fault", "next_token"]
