"""This machine's profile from several running engines: their fitted step models are averaged
term by term (a term one engine lacks counts as 0 there), the rest comes from the first."""
from __future__ import annotations

import asyncio
from typing import Any

import pytest

from switchyard_sim.profiles import build_local


def test_coefficients_of_several_engines_are_averaged(monkeypatch: pytest.MonkeyPatch) -> None:
    fitted = {"a:1": {"const": 2.0, "prefill_tokens": 1.0},
              "b:2": {"const": 6.0, "decode_seqs": 4.0}}

    async def fake(address: str, token: str | None = None) -> dict[str, Any]:
        return {"page_size": 16, "latency_model": dict(fitted[address]),
                "measured": {"from": address}}

    monkeypatch.setattr(build_local, "_from_engine", fake)
    body = asyncio.run(build_local._from_engines(["a:1", "b:2"]))
    assert body["latency_model"] == {"const": 4.0, "decode_seqs": 2.0, "prefill_tokens": 0.5}
    assert body["measured"]["engines"] == [{"from": "a:1"}, {"from": "b:2"}]
    one = asyncio.run(build_local._from_engines(["a:1"]))
    assert one["latency_model"] == fitted["a:1"] and one["measured"] == {"from": "a:1"}
