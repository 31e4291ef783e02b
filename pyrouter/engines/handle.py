"""An engine as a policy sees it: identity, role, and the three verbs.

`prep_recv` and `remote_send` are awaitables that run in router_core's executor for the request
(its RequestVerbs): each is one call into Rust and one answer back, and the executor records what
the verb takes, does the engine table's accounting and keeps the verb's span. `start_generate`
starts nothing itself: it returns the placement (a Segment) that the policy returns, and
router_core starts it, reads its first chunk, retries and closes it.
"""
from __future__ import annotations

from dataclasses import dataclass
from typing import TYPE_CHECKING, Any

from pyrouter.engines.roster import ROSTER_FIELDS, roster_changed
from pyrouter.errors import VerbOrderError
from pyrouter.runtime.pollable import settled
from router_core import KvReservation, RouterCore, Segment, SendResult

if TYPE_CHECKING:
    from pyrouter.request import RouterRequest


@dataclass(eq=False)
class EngineHandle:
    id: str              # "e0", "e1", ...: stable for the engine's life in this router
    num: int             # the int id router_core uses
    address: str
    role: str
    client: Any          # its client for one-off calls (Configure; rust_client.py) or a double
    core: RouterCore     # the cluster view reads its table
    healthy: bool = False
    draining: bool = False
    model_id: str = ""
    # The served model whose requests it takes (pyrouter/model_groups.py); None: not known yet.
    model: str | None = None

    def __setattr__(self, name: str, value: Any) -> None:
        object.__setattr__(self, name, value)
        if name in ROSTER_FIELDS:
            roster_changed()  # the directories' listings of usable engines are stale

    @property
    def cached_blocks(self) -> int:
        """Blocks the engine's prefix cache holds, as its last Stats said (the table's row)."""
        try:
            return int(self.core.table.get(self.num).cached_blocks)
        except (KeyError, ValueError, LookupError):
            return 0

    @property
    def longest_queued_prefill(self) -> int:
        """The most prefill tokens one queued request has left: the engine's last Stats, or a
        larger prefill the router has sent it since (slo_mux tells one long prompt from a long
        queue)."""
        try:
            return int(self.core.table.get(self.num).longest_queued_prefill)
        except (KeyError, ValueError, LookupError):
            return 0

    async def prep_recv(self, req: RouterRequest, end: int | None = None) -> KvReservation:
        """Reserve KV pages here for tokens[matched:end] of the request's current tokens.

        Default `end`: all but the last token (start_generate computes that one to sample)."""
        return await settled(_verbs(req).prep_recv(self.num, end))  # type: ignore[no-any-return]

    async def remote_send(self, req: RouterRequest, kv: KvReservation, begin: int | None = None,
                          end: int | None = None) -> SendResult:
        """Compute KV for tokens[begin:end] here and push it into `kv`'s reservation; raises
        TransferFailed when the transfer failed on the engines' side."""
        return await settled(  # type: ignore[no-any-return]
            _verbs(req).remote_send(self.num, kv, begin, end))

    def start_generate(self, req: RouterRequest, begin: int = 0,
                       max_new_tokens_here: int | None = None,
                       control_after_s: float | None = None) -> Segment:
        """Prefill tokens[begin:] on top of KV already here, then decode: the segment the policy
        returns (or yields: a policy written as an async generator gets control back when the
        segment has produced `max_new_tokens_here` tokens, or after `control_after_s`)."""
        if not 0 <= begin < len(req.tokens):
            raise VerbOrderError(f"start_generate begin={begin} outside the request's "
                                 f"{len(req.tokens)} tokens")
        if max_new_tokens_here is not None and max_new_tokens_here < 1:
            raise VerbOrderError(f"max_new_tokens_here must be >= 1, got {max_new_tokens_here}")
        if control_after_s is not None and not control_after_s > 0:
            raise VerbOrderError(f"control_after_s must be > 0, got {control_after_s}")
        if req.generated >= req.sampling.max_tokens:
            raise VerbOrderError("start_generate after the request has all its tokens")
        return Segment(self, max_new_tokens_here, begin=begin, control_after_s=control_after_s)


def _verbs(req: RouterRequest) -> Any:
    if req.verbs is None:
        raise VerbOrderError("a verb outside a request's decision (no executor to run it)")
    return req.verbs
