"""Real `switchyard engine` processes (real SmolLM2 model) behind routers, for identity tests."""
from __future__ import annotations

from collections.abc import Iterator, Sequence
from contextlib import contextmanager

import requests
from router_procs import LOG_DIR, free_port, start_router, wait_ready

from engine.server.launcher import EngineSpec, start_engines, stop_engines


@contextmanager
def real_engines(roles: Sequence[str], mode: str = "exact",
                 env: dict[str, str] | None = None) -> Iterator[list[int]]:
    """mode "exact": fp32 engines (different batch shapes cannot flip a greedy token); "fast":
    the default fast CPU mode. One torch thread each (several engines stay fair on a 2-core
    machine); `env`: more environment for every engine. Yields their ports."""
    exact = mode == "exact"
    specs = [EngineSpec(f"engine-{i}-{free_port()}", role=role, threads=1,
                        dtype="float32" if exact else None, mode=None if exact else mode,
                        env=dict(env or {}))
             for i, role in enumerate(roles)]
    engines = start_engines(specs, LOG_DIR)
    try:
        yield [e.port for e in engines]
    finally:
        stop_engines(engines)


@contextmanager
def router_over(ports: Sequence[int], *extra: str) -> Iterator[str]:
    port = free_port()
    proc = start_router(port, ports, *extra)
    base = f"http://127.0.0.1:{port}"
    try:
        wait_ready(base, proc, want_engines=len(ports))
        yield base
    finally:
        proc.stop()


@contextmanager
def router_and_reference(mode: str = "exact") -> Iterator[tuple[str, str]]:
    """Three real engines: the router under test over the first two, and a reference router
    over the third alone (what one engine generates). Yields (router base, reference base)."""
    with real_engines(["any", "any", "any"], mode=mode) as ports, \
            router_over(ports[2:]) as reference, router_over(ports[:2]) as under_test:
        yield under_test, reference


def greedy_token_ids(base: str, prompt: str, max_tokens: int = 16) -> tuple[list[int], str]:
    """A greedy completion's token ids (past EOS too) and its X-Switchyard-Route."""
    body = {"prompt": prompt, "max_tokens": max_tokens, "temperature": 0, "ignore_eos": True,
            "return_token_ids": True}
    r = requests.post(f"{base}/v1/completions", json=body, timeout=600)
    assert r.status_code == 200, r.text
    return r.json()["choices"][0]["token_ids"], r.headers["X-Switchyard-Route"]
