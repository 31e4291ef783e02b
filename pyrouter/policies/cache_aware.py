"""cache_aware: data parallel to the engine whose cached prefix saves most, balanced against load.

router_core's scorer weighs uncached prefill tokens, queued prefill, decode load and KV pressure;
the weights are this policy's parameters. A request with a session is scored on its session's
engine alone. A Rust built-in: router_core/src/front/fast_path.rs picks, no Python runs for its
requests.
"""
from __future__ import annotations

from pyrouter.cluster import SCORE_WEIGHTS
from pyrouter.runtime.policy_registry import Param, builtin

SPEC = builtin("cache_aware", __doc__ or "", {k: Param(1.0, ge=0) for k in SCORE_WEIGHTS})
