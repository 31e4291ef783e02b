"""Typed router errors; each maps to one HTTP status and the OpenAI error body.

Every error carries a non-null `code` (the class's default unless the raiser names a more precise
one) and, for 429/503, a `retry_after_s` the HTTP front sends as `Retry-After`.
"""
from __future__ import annotations


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


class EngineFailed(RouterError):
    """An engine returned an error or went away mid-request (502).

    `retryable`: the engine failed before the request produced anything there (a transport
    error, a reset stream, a dying peer), so another engine may take it; `engine_id` says which
    engine failed, when known (the dispatcher takes only it out of rotation)."""

    status = 502
    error_type = "engine_error"
    default_code = "engine_error"
    retryable = False
    engine_id: str | None = None

    def on(self, engine_id: str | None, retryable: bool = True) -> EngineFailed:
        """This failure as one of `engine_id` before any output (chainable at the raise)."""
        self.engine_id, self.retryable = engine_id, retryable
        return self


class EngineUnavailable(EngineFailed):
    """The engine could not be reached or went away before streaming anything: retryable."""

    status = 503
    error_type = "service_unavailable"
    default_code = "engine_unavailable"
    retryable = True


class VerbOrderError(RuntimeError):
    """A policy called the verbs in an order the contract forbids (reported as PolicyFailed)."""


class TransferFailed(RuntimeError):
    """RemoteSend failed on the engines' side (not a policy mistake); a PD policy may fall back
    to prefilling locally on the decode engine."""
