"""Typed router errors; each maps to one HTTP status and the OpenAI error body."""
from __future__ import annotations


class RouterError(Exception):
    status = 500
    error_type = "internal_error"

    def __init__(self, message: str, param: str | None = None, code: str | None = None) -> None:
        super().__init__(message)
        self.message = message
        self.param = param
        self.code = code

    def body(self) -> dict[str, object]:
        return {"error": {"message": self.message, "type": self.error_type,
                          "param": self.param, "code": self.code}}


class BadRequest(RouterError):
    status = 400
    error_type = "invalid_request_error"


class Unauthorized(RouterError):
    status = 401
    error_type = "authentication_error"


class NotFound(RouterError):
    status = 404
    error_type = "not_found_error"


class Busy(RouterError):
    """Too many requests in flight right now; retry later (429)."""

    status = 429
    error_type = "rate_limit_error"


class NoCapacity(RouterError):
    """No healthy engine can serve the request (503)."""

    status = 503
    error_type = "service_unavailable"


class PolicyFailed(RouterError):
    """A routing policy raised or used the verbs wrongly; only its request fails (500)."""

    error_type = "policy_error"

    def __init__(self, policy_name: str, detail: str) -> None:
        super().__init__(f"policy {policy_name!r} failed: {detail}", code="policy_error")
        self.policy_name = policy_name


class EngineFailed(RouterError):
    """An engine returned an error or went away mid-request (502)."""

    status = 502
    error_type = "engine_error"


class EngineUnavailable(EngineFailed):
    """The engine could not be reached or went away before streaming anything: retryable."""

    status = 503
    error_type = "service_unavailable"


class VerbOrderError(RuntimeError):
    """A policy called the verbs in an order the contract forbids (reported as PolicyFailed)."""


class TransferFailed(RuntimeError):
    """RemoteSend failed on the engines' side (not a policy mistake); a PD policy may fall back
    to prefilling locally on the decode engine."""
