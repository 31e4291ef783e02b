"""/openapi.json describes exactly the routes the router serves, and fuzzing both generation routes
from it (schemathesis: bodies that fit the schemas and bodies that break them) plus raw hostile
bytes never gets a 500 — every error is an OpenAI error body with a code (issue 13, finding 7).

Runs against a real `switchyard router` process with mock engines. Deterministic in CI
(derandomized); SWITCHYARD_FUZZ_EXAMPLES=N runs N random examples per strategy instead.
"""
from __future__ import annotations

import json
import os

import pytest
import requests
import schemathesis
from hypothesis import HealthCheck, given, settings
from hypothesis import strategies as st
from schemathesis.generation import GenerationMode

from pyrouter.http.openapi import openapi_document
from pyrouter.http.ops import ADMIN, PUBLIC, served_routes

pytestmark = [pytest.mark.procs, pytest.mark.timeout(600)]
_EXAMPLES = int(os.environ.get("SWITCHYARD_FUZZ_EXAMPLES", "0"))
FUZZ = settings(max_examples=_EXAMPLES or 120, derandomize=not _EXAMPLES, deadline=None,
                suppress_health_check=list(HealthCheck), database=None)
SCHEMA = schemathesis.openapi.from_dict(openapi_document())


def _documented(doc: dict) -> set[tuple[str, str]]:  # type: ignore[type-arg]
    return {(method.upper(), path) for path, ops in doc["paths"].items() for method in ops}


@pytest.mark.parametrize(("plane", "admin_separate"),
                         [(PUBLIC, False), (PUBLIC, True), (ADMIN, True)])
def test_openapi_lists_exactly_the_routes(plane: str, admin_separate: bool) -> None:
    routes = served_routes(plane, admin_separate)
    assert _documented(openapi_document({path for _, path in routes})) == routes


def test_served_document_is_the_whole_api(mock_cluster) -> None:
    served = requests.get(f"{mock_cluster.base}/openapi.json").json()
    assert served == json.loads(json.dumps(openapi_document()))
    assert served["openapi"].startswith("3.")
    # Every documented route answers (an error about its input at worst), and another method on
    # it is refused with 405 and the methods it takes.
    for method, path in sorted(_documented(served)):
        if "{" in path or (method, path) == ("PUT", "/admin/policy"):
            continue  # no engine to remove; no policy change in the middle of the fuzzing
        resp = requests.request(method, f"{mock_cluster.base}{path}", data=b"{}", timeout=60)
        assert resp.status_code not in (404, 405), (method, path, resp.text[:300])
        other = requests.request("PATCH", f"{mock_cluster.base}{path}", timeout=60)
        assert other.status_code == 405 and method in other.headers["Allow"], (path, other.text)
        assert other.json()["error"]["code"] == "method_not_allowed"
    unknown = requests.get(f"{mock_cluster.base}/no/such/route", timeout=60)
    assert unknown.status_code == 404 and unknown.json()["error"]["code"] == "not_found"


def _check(resp: requests.Response, stream: bool = False) -> None:
    assert resp.status_code < 500, (resp.status_code, resp.text[:500])
    if resp.status_code >= 400:
        error = resp.json()["error"]
        assert error["code"] and error["message"] and error["type"], resp.text[:500]
    elif stream and resp.headers.get("Content-Type", "").startswith("text/event-stream"):
        assert resp.text.rstrip().endswith("data: [DONE]"), resp.text[-300:]


@pytest.mark.parametrize("path", ["/v1/completions", "/v1/chat/completions"])
@pytest.mark.parametrize("mode", [GenerationMode.POSITIVE, GenerationMode.NEGATIVE])
def test_fuzz_generation_routes_never_500(mock_cluster, path: str, mode: GenerationMode) -> None:
    operation = SCHEMA[path]["POST"]
    session = requests.Session()

    @FUZZ
    @given(case=operation.as_strategy(generation_mode=mode))
    def run(case) -> None:  # type: ignore[no-untyped-def]
        resp = case.call(base_url=mock_cluster.base, session=session, timeout=60)
        stream = isinstance(case.body, dict) and case.body.get("stream") is True
        _check(resp, stream)

    run()


_SCALARS = (st.none() | st.booleans() | st.integers(-(10**30), 10**30)
            | st.floats(allow_nan=True, allow_infinity=True)
            | st.text(alphabet=st.characters(codec=None), max_size=40))
_VALUES = st.recursive(_SCALARS, lambda inner: st.lists(inner, max_size=4)
                       | st.dictionaries(st.text(max_size=12), inner, max_size=4), max_leaves=12)
_FIELDS = ["prompt", "messages", "max_tokens", "temperature", "top_p", "top_k", "min_tokens",
           "seed", "stop", "stream", "stream_options", "ignore_eos", "model", "n", "slo",
           "max_completion_tokens", "return_token_ids", "logprobs", "echo"]


def _encode(value: object) -> bytes:
    # ensure_ascii writes lone surrogates as \ud800 escapes, as a hostile client would.
    return json.dumps(value, ensure_ascii=True, allow_nan=True).encode()


_BODIES = st.one_of(
    st.dictionaries(st.sampled_from(_FIELDS), _VALUES, max_size=6).map(_encode),
    _VALUES.map(_encode),
    st.binary(max_size=200),
    st.integers(1, 3000).map(lambda depth: b"[" * depth + b"]" * depth),
    st.integers(1, 6000).map(lambda n: b'{"prompt": "x", "max_tokens": ' + b"9" * n + b"}"),
)


@pytest.mark.parametrize("path", ["/v1/completions", "/v1/chat/completions"])
def test_fuzz_raw_bodies_never_500(mock_cluster, path: str) -> None:
    session = requests.Session()

    @FUZZ
    @given(raw=_BODIES)
    def run(raw: bytes) -> None:
        resp = session.post(f"{mock_cluster.base}{path}", data=raw, timeout=60,
                            headers={"Content-Type": "application/json"})
        _check(resp, stream=b'"stream": true' in raw)

    run()
