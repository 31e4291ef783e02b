"""The router's admin API as a sweep uses it: is it up, which policy runs, switch policy
(`PUT /admin/policy`), and wait until no engine holds any work so one run's tail never overlaps
the next run."""
from __future__ import annotations

import asyncio
import time
from typing import Any

import aiohttp


class RouterUnavailable(RuntimeError):
    """The router did not answer, or answered an admin call with an error."""


class RouterAdmin:
    def __init__(self, session: aiohttp.ClientSession, base_url: str,
                 headers: dict[str, str] | None = None) -> None:
        self._session = session
        self._base = base_url.rstrip("/")
        self._headers = headers or {}

    async def _call(self, method: str, path: str, body: Any = None) -> Any:
        try:
            async with self._session.request(
                    method, f"{self._base}{path}", json=body, headers=self._headers,
                    timeout=aiohttp.ClientTimeout(total=30)) as resp:
                text = await resp.text()
                if resp.status != 200:
                    raise RouterUnavailable(f"{method} {path} -> HTTP {resp.status}: "
                                            f"{text[:300]}")
                return await resp.json(content_type=None)
        except (aiohttp.ClientError, TimeoutError) as exc:
            raise RouterUnavailable(f"{method} {self._base}{path} failed: {exc!r} (is the "
                                    f"router running? `make serve` starts one)") from exc

    async def policy(self) -> dict[str, Any]:
        """{"policy": NAME, "params": {...}, "available": [...]}"""
        body: dict[str, Any] = await self._call("GET", "/admin/policy")
        return body

    async def set_policy(self, name: str, params: dict[str, Any] | None = None) -> None:
        await self._call("PUT", "/admin/policy", {"policy": name, "params": params or {}})

    async def busy_engines(self) -> list[str]:
        """Engines holding any request, queued prefill or in-flight verb."""
        body = await self._call("GET", "/admin/engines")
        busy = []
        for e in body.get("engines", []):
            load = e.get("load", {})
            if e.get("active_requests") or any(load.get(k) for k in (
                    "running", "inflight", "queued_prefill_tokens", "unfinished_tokens")):
                busy.append(str(e.get("id")))
        return busy

    async def wait_idle(self, timeout_s: float, poll_s: float = 0.2) -> None:
        deadline = time.monotonic() + timeout_s
        while True:
            busy = await self.busy_engines()
            if not busy:
                return
            if time.monotonic() > deadline:
                raise RouterUnavailable(f"engines {busy} still busy after {timeout_s:g} s")
            await asyncio.sleep(poll_s)
