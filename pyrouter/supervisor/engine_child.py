"""An engine as serve's supervisor keeps it: started through the one engine launcher
(engine/server/launcher.py) in a session of its own, on the same gRPC and metrics ports every
time, so the routers' --engine addresses and Prometheus' targets stay valid across restarts."""
from __future__ import annotations

import dataclasses
from dataclasses import dataclass, field
from pathlib import Path

from engine.server.launcher import EngineSpec, launch
from pyrouter.supervisor.child import Child
from pyrouter.supervisor.process import ChildProcess, Spawned
from pyrouter.supervisor.state import ENGINE, ChildRecord
from switchyard_engine_api.client import EngineClient


@dataclass(eq=False)
class EngineChild(Child):
    spec: EngineSpec = field(kw_only=True)
    log_dir: Path = field(kw_only=True)
    metrics_port: int | None = None

    kind = ENGINE
    backoff_max_s = 60.0
    stable_s = 120.0

    @classmethod
    def of(cls, spec: EngineSpec, log_dir: Path) -> EngineChild:
        return cls(spec.name, spec.port, log_dir / f"{spec.name}.log", spec=spec,
                   log_dir=log_dir, metrics_port=spec.metrics_port)

    @property
    def label(self) -> str:
        return f"engine {self.name}"

    @property
    def role(self) -> str:
        return self.spec.role

    @property
    def address(self) -> str:
        return f"127.0.0.1:{self.port}"

    def client(self) -> EngineClient:
        return EngineClient(self.address, timeout_s=120.0)

    def spawn(self) -> ChildProcess:
        spec = dataclasses.replace(self.spec, port=self.port, metrics_port=self.metrics_port)
        engine = launch(spec, self.log_dir, new_session=True)
        self.port, self.metrics_port = engine.port, engine.metrics_port
        return Spawned(engine.proc)

    def ports_text(self) -> str:
        metrics = f", metrics on port {self.metrics_port}" if self.metrics_port else ""
        return super().ports_text() + metrics

    def record(self) -> ChildRecord | None:
        record = super().record()
        return dataclasses.replace(record, metrics_port=self.metrics_port) if record else None
