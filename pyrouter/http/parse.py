"""OpenAI request bodies -> RouterRequest, with every field checked (bad input -> 400).

This file checks the body's shape (types, which fields exist); the sampling rules themselves
are the engine's (engine/core/sampling_params.py), the one set both sides apply. Work is bounded
before it is done: a prompt whose text is longer than `max_prompt_bytes` (the context length
times the most bytes one token stands for) cannot fit, so it is refused without tokenising, and a
list of token ids longer than the context is refused before its ids are checked.
"""
from __future__ import annotations

import math
from typing import Any, Literal

from engine.core.errors import InvalidRequest
from engine.core.sampling_params import SamplingParams
from engine.tokenizer import EngineTokenizer, TokenizerError
from pyrouter.errors import BadRequest, NotFound
from pyrouter.request import RouterRequest, SloSpec

_MAX_TOKENS_DEFAULT = {"completion": 16, "chat": 256}


def _number(body: dict[str, Any], key: str, default: float, lo: float = -math.inf,
            hi: float = math.inf) -> float:
    value = body.get(key)
    if value is None:
        return default
    if isinstance(value, bool) or not isinstance(value, int | float) or math.isnan(value):
        raise BadRequest(f"'{key}' must be a number", param=key)
    if not lo <= value <= hi:
        raise BadRequest(f"'{key}' must be in [{lo}, {hi}], got {value}", param=key)
    return float(value)


def _integer(body: dict[str, Any], key: str, default: int | None, lo: int = -(2**63),
             hi: int = 2**63 - 1) -> int | None:
    value = body.get(key)
    if value is None:
        return default
    if isinstance(value, bool) or not isinstance(value, int):
        raise BadRequest(f"'{key}' must be an integer", param=key)
    if not lo <= value <= hi:
        raise BadRequest(f"'{key}' must be in [{lo}, {hi}], got {value}", param=key)
    return value


def _flag(body: dict[str, Any], key: str) -> bool:
    value = body.get(key, False)
    if value is None:
        return False
    if not isinstance(value, bool):
        raise BadRequest(f"'{key}' must be a boolean", param=key)
    return value


def _stop(body: dict[str, Any]) -> list[str]:
    stop = body.get("stop")
    if stop is None:
        return []
    if isinstance(stop, str):
        stop = [stop]
    if not isinstance(stop, list) or len(stop) > 4 or not all(
            isinstance(s, str) and s for s in stop):
        raise BadRequest("'stop' must be a non-empty string or a list of up to 4 of them",
                         param="stop")
    return list(stop)


def _too_long(n_bytes: int, max_prompt_bytes: int, max_context: int, param: str) -> None:
    if max_prompt_bytes and n_bytes > max_prompt_bytes:
        raise BadRequest(f"the prompt's {n_bytes} bytes cannot fit the context length "
                         f"{max_context}", param=param, code="context_length_exceeded")


def _prompt_tokens(body: dict[str, Any], tok: EngineTokenizer, max_context: int,
                   max_prompt_bytes: int) -> list[int]:
    prompt = body.get("prompt")
    if isinstance(prompt, list) and len(prompt) == 1 and isinstance(prompt[0], str | list):
        prompt = prompt[0]  # a batch of one
    if isinstance(prompt, str):
        _too_long(len(prompt.encode("utf-8", "surrogatepass")), max_prompt_bytes, max_context,
                  "prompt")
        return _encode(tok, prompt, "prompt")
    if isinstance(prompt, list) and len(prompt) > max_context:
        raise BadRequest(f"the prompt's {len(prompt)} tokens exceed the context length "
                         f"{max_context}", param="prompt", code="context_length_exceeded")
    if isinstance(prompt, list) and prompt and all(
            isinstance(t, int) and not isinstance(t, bool) for t in prompt):
        if not all(0 <= t < tok.vocab_size for t in prompt):
            raise BadRequest(f"prompt token ids must be in [0, {tok.vocab_size})", param="prompt")
        return list(prompt)
    raise BadRequest("'prompt' must be a string or a list of token ids (batches of more than "
                     "one prompt are not supported)", param="prompt")


def _encode(tok: EngineTokenizer, text: str, param: str, add_special: bool = True) -> list[int]:
    try:
        return tok.encode(text, add_special_tokens=add_special)
    except (TokenizerError, UnicodeError, TypeError) as exc:  # e.g. a lone surrogate
        raise BadRequest(f"the {param} cannot be tokenised: {exc}", param=param,
                         code="invalid_prompt") from None


def _content(msg: dict[str, Any], i: int) -> str:
    content = msg.get("content")
    if isinstance(content, list):  # content parts: keep the text ones
        texts = []
        for j, part in enumerate(content):
            if not isinstance(part, dict):
                raise BadRequest(f"messages[{i}].content[{j}] must be an object",
                                 param=f"messages[{i}].content")
            if part.get("type") == "text":
                text = part.get("text")
                if not isinstance(text, str):
                    raise BadRequest(f"messages[{i}].content[{j}].text must be a string",
                                     param=f"messages[{i}].content")
                texts.append(text)
        content = "".join(texts)
    if not isinstance(content, str):
        raise BadRequest(f"messages[{i}].content must be a string",
                         param=f"messages[{i}].content")
    return content


def _chat_tokens(body: dict[str, Any], tok: EngineTokenizer, max_context: int,
                 max_prompt_bytes: int) -> list[int]:
    messages = body.get("messages")
    if not isinstance(messages, list) or not messages:
        raise BadRequest("'messages' must be a non-empty list", param="messages")
    clean: list[dict[str, str]] = []
    total_bytes = 0
    for i, msg in enumerate(messages):
        if not isinstance(msg, dict) or msg.get("role") not in (
                "system", "user", "assistant", "developer", "tool"):
            raise BadRequest(f"messages[{i}] needs a role of system|user|assistant",
                             param=f"messages[{i}]")
        content = _content(msg, i)
        total_bytes += len(content.encode("utf-8", "surrogatepass"))
        role = "system" if msg["role"] == "developer" else msg["role"]
        clean.append({"role": role, "content": content})
    _too_long(total_bytes, max_prompt_bytes, max_context, "messages")
    try:
        text = tok.apply_chat_template(clean, add_generation_prompt=True)
    except TokenizerError as exc:
        raise BadRequest(str(exc), param="messages", code="invalid_messages") from exc
    return _encode(tok, text, "messages", add_special=False)


def parse_request(body: Any, kind: Literal["completion", "chat"], tok: EngineTokenizer,
                  request_id: str, served_model: str, max_context: int,
                  default_temperature: float = 1.0, default_top_p: float = 1.0,
                  max_prompt_bytes: int = 0) -> RouterRequest:
    """`max_prompt_bytes`: prompt text beyond this many UTF-8 bytes cannot fit the context (0:
    no pre-check; the caller passes max_context * tokenizer.max_token_bytes())."""
    if not isinstance(body, dict):
        raise BadRequest("request body must be a JSON object", code="invalid_json")
    model = body.get("model", "default")
    if model not in ("default", served_model, None):
        shown = repr(model) if isinstance(model, str) and len(model) <= 200 else "given"
        raise NotFound(f"the model {shown} does not exist here; use {served_model!r} or "
                       "'default'", param="model", code="model_not_found")
    if _integer(body, "n", 1, 1, 1) != 1 or _flag(body, "echo"):
        raise BadRequest("'n' > 1 and 'echo' are not supported", param="n",
                         code="unsupported_parameter")
    for key in ("presence_penalty", "frequency_penalty", "repetition_penalty"):
        if body.get(key) not in (None, 0, 0.0) and not (key == "repetition_penalty"
                                                         and body.get(key) == 1):
            raise BadRequest(f"'{key}' is not supported yet", param=key,
                             code="unsupported_parameter")
    if body.get("logprobs") not in (None, False) or body.get("top_logprobs"):
        raise BadRequest("'logprobs' are not supported yet", param="logprobs",
                         code="unsupported_parameter")
    tokens = (_chat_tokens(body, tok, max_context, max_prompt_bytes) if kind == "chat"
              else _prompt_tokens(body, tok, max_context, max_prompt_bytes))
    if not tokens:
        raise BadRequest("the prompt is empty", param="prompt")
    max_tokens = _integer(body, "max_completion_tokens", None, 1, max_context)
    max_tokens = _integer(body, "max_tokens", max_tokens, 1, max_context)
    if max_tokens is None:
        max_tokens = _MAX_TOKENS_DEFAULT[kind]
    if len(tokens) + max_tokens > max_context:
        raise BadRequest(f"prompt ({len(tokens)} tokens) + max_tokens ({max_tokens}) exceeds the "
                         f"context length {max_context}", param="max_tokens",
                         code="context_length_exceeded")
    stream = _flag(body, "stream")
    options = body.get("stream_options")
    if options is not None and (not isinstance(options, dict) or not stream):
        raise BadRequest("'stream_options' needs stream=true and must be an object",
                         param="stream_options")
    include_usage = bool(options and _flag(options, "include_usage"))
    slo = body.get("slo") or {}
    if not isinstance(slo, dict):
        raise BadRequest("'slo' must be an object with ttft_ms / tpot_ms", param="slo")
    try:
        sampling = SamplingParams(
            max_tokens=max_tokens,
            temperature=_number(body, "temperature", default_temperature),
            top_p=_number(body, "top_p", default_top_p),
            top_k=_integer(body, "top_k", 0, -1, 2**31 - 1) or 0,
            min_tokens=_integer(body, "min_tokens", 0, 0, max_context) or 0,
            seed=_integer(body, "seed", None), stop=_stop(body),
            ignore_eos=_flag(body, "ignore_eos"))
    except InvalidRequest as exc:
        raise BadRequest(str(exc), param=exc.param) from exc
    return RouterRequest(
        request_id=request_id, tokens=tokens, sampling=sampling, kind=kind,
        model=served_model, stream=stream, include_usage=include_usage,
        return_token_ids=_flag(body, "return_token_ids"),
        slo=SloSpec(_number(slo, "ttft_ms", 0.0, 0.0, 1e9) or None,
                    _number(slo, "tpot_ms", 0.0, 0.0, 1e9) or None))
