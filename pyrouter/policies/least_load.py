"""least_load: data parallel to the engine with the fewest unfinished tokens (in-flight requests
break ties, so a burst between two Stats polls still spreads out; a request with a session: its
session's engine). A Rust built-in: router_core/src/front/fast_path.rs picks, no Python runs for
its requests."""
from __future__ import annotations

from pyrouter.runtime.policy_registry import builtin

SPEC = builtin("least_load", __doc__ or "")
