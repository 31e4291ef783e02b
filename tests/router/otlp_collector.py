"""An in-process OTLP/gRPC trace receiver for tests: what the processes' OTLP exporters sent."""
from __future__ import annotations

import threading
from concurrent import futures
from typing import Any

import grpc
from opentelemetry.proto.collector.trace.v1 import trace_service_pb2 as pb
from opentelemetry.proto.collector.trace.v1 import trace_service_pb2_grpc as pb_grpc


def _value(v: Any) -> Any:
    """An OTLP AnyValue as a Python value (the scalar kinds spans carry)."""
    kind = v.WhichOneof("value")
    if kind == "array_value":
        return [_value(x) for x in v.array_value.values]
    return getattr(v, kind) if kind else None


class _Receiver(pb_grpc.TraceServiceServicer):  # type: ignore[misc]
    def __init__(self) -> None:
        self.lock = threading.Lock()
        self.spans: list[dict[str, Any]] = []

    def Export(self, request: pb.ExportTraceServiceRequest, context: Any
               ) -> pb.ExportTraceServiceResponse:
        with self.lock:
            for resource_spans in request.resource_spans:
                service = next((a.value.string_value for a in resource_spans.resource.attributes
                                if a.key == "service.name"), "")
                for scope in resource_spans.scope_spans:
                    for span in scope.spans:
                        self.spans.append({"trace_id": span.trace_id.hex(),
                                           "span_id": span.span_id.hex(),
                                           "parent_id": span.parent_span_id.hex() or None,
                                           "name": span.name, "service": service,
                                           "start_ns": span.start_time_unix_nano,
                                           "end_ns": span.end_time_unix_nano,
                                           "attrs": {a.key: _value(a.value)
                                                     for a in span.attributes}})
        return pb.ExportTraceServiceResponse()


class OtlpCollector:
    def __init__(self) -> None:
        self._receiver = _Receiver()
        self._server = grpc.server(futures.ThreadPoolExecutor(max_workers=4))
        pb_grpc.add_TraceServiceServicer_to_server(self._receiver, self._server)
        self.port = self._server.add_insecure_port("127.0.0.1:0")
        self._server.start()

    @property
    def endpoint(self) -> str:
        return f"http://127.0.0.1:{self.port}"

    def spans(self) -> list[dict[str, Any]]:
        with self._receiver.lock:
            return list(self._receiver.spans)

    def stop(self) -> None:
        self._server.stop(grace=None)
