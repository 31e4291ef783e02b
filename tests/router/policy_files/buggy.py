"""Policies with deliberate mistakes, for the router's failure-isolation tests."""
from __future__ import annotations

from pyrouter import policy


@policy("sometimes_crashes")
async def sometimes_crashes(req, cluster):
    """Fine, except that prompts containing token id 666 hit a bug."""
    if 666 in req.tokens:
        raise ZeroDivisionError("the policy author divided by zero")
    return cluster.best("any", req).start_generate(req, begin=0)


@policy("wrong_verb_order")
async def wrong_verb_order(req, cluster):
    """Sends an engine's KV into its own reservation: the router must refuse and fail only this
    request."""
    engine = cluster.engines()[0]
    kv = await engine.prep_recv(req, end=req.prompt_len - 1)
    await engine.remote_send(req, kv)
    return engine.start_generate(req, begin=kv.end)


@policy("hangs")
async def hangs(req, cluster):
    """Never returns: the router must time it out, not hold the client forever."""
    import asyncio

    await asyncio.Event().wait()


@policy("returns_nothing")
async def returns_nothing(req, cluster):
    """Forgets to return the placement."""
    await cluster.engines()[0].prep_recv(req, end=req.prompt_len - 1)
