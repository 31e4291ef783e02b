"""pyrouter: Switchyard's Python router (HTTP API, policy hooks, admin).

Write a policy with `from pyrouter import policy` (and `Param` to give a parameter a range; see
pyrouter/policy_registry.py).
"""
from __future__ import annotations

from pyrouter.policy_registry import Param, policy

__all__ = ["Param", "policy"]
