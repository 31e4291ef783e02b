"""Span attribute names: OpenTelemetry's GenAI conventions where one exists, else `switchyard.*`.

Defined once so the router, the engines and `switchyard trace` agree on them.
"""
from __future__ import annotations

# OpenTelemetry semantic conventions (gen_ai.*, rpc.*, server.*, error.type).
GENAI_OPERATION = "gen_ai.operation.name"          # "chat" | "text_completion"
GENAI_SYSTEM = "gen_ai.system"                     # "switchyard"
GENAI_REQUEST_MODEL = "gen_ai.request.model"
GENAI_REQUEST_MAX_TOKENS = "gen_ai.request.max_tokens"
GENAI_REQUEST_TEMPERATURE = "gen_ai.request.temperature"
GENAI_REQUEST_TOP_P = "gen_ai.request.top_p"
GENAI_RESPONSE_ID = "gen_ai.response.id"
GENAI_RESPONSE_FINISH_REASONS = "gen_ai.response.finish_reasons"
GENAI_INPUT_TOKENS = "gen_ai.usage.input_tokens"
GENAI_OUTPUT_TOKENS = "gen_ai.usage.output_tokens"
RPC_SYSTEM = "rpc.system"
RPC_METHOD = "rpc.method"
SERVER_ADDRESS = "server.address"
ERROR_TYPE = "error.type"

# Switchyard's own.
REQUEST_ID = "switchyard.request_id"               # the X-Request-Id a client saw
ENGINE_REQUEST_ID = "switchyard.engine_request_id"
POLICY = "switchyard.policy"
PATTERN = "switchyard.pattern"
ROUTE = "switchyard.route"                         # the X-Switchyard-Route header
EXPLANATION = "switchyard.explanation"             # the decision in one line (trace show)
STATUS = "switchyard.status"
TTFT_MS = "switchyard.ttft_ms"
ENGINE = "switchyard.engine"                       # engine id (router's, or the engine's own)
ENGINE_ROLE = "switchyard.engine.role"
ENGINES = "switchyard.engines"
VERB = "switchyard.verb"
SEGMENT_INDEX = "switchyard.segment.index"
SEGMENT_TOKENS = "switchyard.segment.tokens"
SEGMENT_END = "switchyard.segment.end_reason"
DECIDED_BY = "switchyard.decided_by"               # "policy" | "migration"
MATCHED_PREFIX = "switchyard.matched_tokens."      # + engine id: prefix tokens it holds
PREDICTED = "switchyard.predicted."                # + engine id + "." + quantity (ms)
QUEUE_MS = "switchyard.queue_ms"
CHUNK_START = "switchyard.chunk.start"             # first position the prefill chunk computes
CHUNK_TOKENS = "switchyard.chunk.tokens"
BATCH_SEQS = "switchyard.batch.seqs"               # sequences in the step
BATCH_PREFILL_TOKENS = "switchyard.batch.prefill_tokens"
BATCH_DECODE_SEQS = "switchyard.batch.decode_seqs"
DECODE_TOKENS = "switchyard.decode.tokens"
DECODE_STEPS = "switchyard.decode.steps"
PREEMPTIONS = "switchyard.preemptions"
CACHED_TOKENS = "switchyard.cached_tokens"
KV_BYTES = "switchyard.kv.bytes"
KV_TRANSPORT = "switchyard.kv.transport"
KV_LAYERS = "switchyard.kv.layers"
KV_HIDDEN_FRACTION = "switchyard.kv.hidden_fraction"  # share of the transfer behind compute
KV_TRANSFER_MS = "switchyard.kv.transfer_ms"
KV_TAIL_MS = "switchyard.kv.tail_ms"
KV_COMPUTE_MS = "switchyard.kv.compute_ms"
KV_MATCHED = "switchyard.kv.matched_tokens"
KV_END = "switchyard.kv.end"
