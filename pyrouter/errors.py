"""Typed router errors; each maps to one HTTP status and the OpenAI error body.

Every error carries a non-null `code` (the class's default unless the raiser names a more precise
one) and, for 429/503, a `retry_after_s` the HTTP front sends as `Retry-After`.
"""
from __future__ import annotations

from router_core import EngineCallError, TransferFailed, VerbOrderError


class RouterError(Exception):
    status = 500
    error_type = "internal_error"
    default_code = "internal_error"

    def __init__(self, message: str, param: str | None = None, code: str | None = None,
                 retry_after_s: float | None = None) -> None:
        super().__init__(message)
        self.message = message
        self.param = param
        self.code = code or self.default_code
        self.retry_after_s = retry_after_s

    def body(self) -> dict[str, object]:
        return {"error": {"message": self.message, "type": self.error_type,
                          "param": self.param, "code": self.code}}


# Deliberately one small class per kind, each spelling out its status, type and code: the classes
# are what raisers raise and handlers catch, and each mirrors an ApiError constructor of the Rust
# front (router_core/src/front/api_error.rs).
class BadRequest(RouterError):
    status = 400
    error_type = "invalid_request_error"
    default_code = "invalid_request"


class Unauthorized(RouterError):
    status = 401
    error_type = "authentication_error"
    default_code = "invalid_api_key"


class Forbidden(RouterError):
    """Authenticated (or not needed) but not allowed: an admin action without an admin key, a
    policy file outside --policy-dir, an engine address off the allow-list (403)."""

    status = 403
    error_type = "permission_error"
    default_code = "forbidden"


class NotFound(RouterError):
    status = 404
    error_type = "not_found_error"
    default_code = "not_found"


class MethodNotAllowed(RouterError):
    """The route exists, not with this method (405; `allow` names the methods it takes)."""

    status = 405
    error_type = "invalid_request_error"
    default_code = "method_not_allowed"

    def __init__(self, message: str, allow: list[str]) -> None:
        super().__init__(message)
        self.allow = allow


class Busy(RouterError):
    """Too many requests in flight right now, or a key over its rate; retry later (429)."""

    status = 429
    error_type = "rate_limit_error"
    default_code = "rate_limited"


class NoCapacity(RouterError):
    """No healthy engine can serve the request (503)."""

    status = 503
    error_type = "service_unavailable"
    default_code = "no_capacity"


class ShuttingDown(NoCapacity):
    """The router is draining (SIGTERM): no new work; in-flight work that outlives the grace
    period ends with this error (503, Retry-After)."""

    default_code = "shutting_down"


class PolicyFailed(RouterError):
    """A routing policy raised or used the verbs wrongly; only its request fails (500)."""

    error_type = "policy_error"
    default_code = "policy_error"

    def __init__(self, policy_name: str, detail: str) -> None:
        super().__init__(f"policy {policy_name!r} failed: {detail}")
        self.policy_name = policy_name


# The verbs' own errors are made in router_core (its executor raises them): a policy catches
# TransferFailed to fall back to local prefill; VerbOrderError is the policy's bug.
__all__ = ["BadRequest", "Busy", "EngineCallError", "Forbidden", "MethodNotAllowed", "NoCapacity",
           "NotFound", "PolicyFailed", "RouterError", "ShuttingDown", "TransferFailed",
           "Unauthorized", "VerbOrderError"]
