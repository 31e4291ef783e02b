"""pyrouter: Switchyard's Python router (policy hooks, admin, the deciding side of the Rust front).

Write a policy with `from pyrouter import policy` (and `Param` to give a parameter a range; see
pyrouter/runtime/policy_registry.py); return a placement — `Dp(engine)`, `Pd(prefill, decode)`,
`Split(lead, follow, at, lead_tokens)`, `Segment(engine, max_tokens)` — or compose the verbs.
"""
from __future__ import annotations

from pyrouter.runtime.policy_registry import Param, policy
from router_core import Dp, Pd, Segment, Split

__all__ = ["Dp", "Param", "Pd", "Segment", "Split", "policy"]
