"""Engine exceptions -> gRPC status codes, in one place so every verb maps them the same way."""
from __future__ import annotations

import grpc

from engine.transfer import BadKVAddr, LayoutMismatch, TransferError
from switchyard_engine_api.errors import InvalidRequest, LeaseExpired, NoCapacity, UnknownRequest


class RequestInUse(InvalidRequest):
    """A verb for a request id that already has work in flight on this engine."""


def status_code_name(exc: BaseException) -> str:
    """The grpc.StatusCode name for an exception (also what the KV listener reports to senders)."""
    if isinstance(exc, TransferError):
        return exc.code
    if isinstance(exc, RequestInUse):
        return "ALREADY_EXISTS"
    if isinstance(exc, InvalidRequest | BadKVAddr | LayoutMismatch):
        return "INVALID_ARGUMENT"
    if isinstance(exc, LeaseExpired):
        return "FAILED_PRECONDITION"
    if isinstance(exc, UnknownRequest):
        return "NOT_FOUND"
    if isinstance(exc, NoCapacity):
        return "RESOURCE_EXHAUSTED"
    return "INTERNAL"


def status_code(exc: BaseException) -> grpc.StatusCode:
    return getattr(grpc.StatusCode, status_code_name(exc), grpc.StatusCode.INTERNAL)

