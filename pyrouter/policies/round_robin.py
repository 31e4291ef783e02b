"""round_robin: data parallel, each new request to the next healthy engine in turn (a request
with a session: its session's engine). A Rust built-in: router_core/src/front/fast_path.rs picks,
no Python runs for its requests."""
from __future__ import annotations

from pyrouter.runtime.policy_registry import builtin

SPEC = builtin("round_robin", __doc__ or "")
