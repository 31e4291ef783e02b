"""Several models behind one router, on real SmolLM2 engines: `switchyard serve --model a=default
--model b=default` serves the same file under two names, one engine each. The router learns each
engine's model from its ModelInfo (serve hands it addresses only); a request's `model` picks the
engines, an unknown one is a 404 `model_not_found`, each model runs its own policy (switched with
PUT /admin/policy's `model`), and greedy output is one engine's whichever name serves it.
`switchyard router` in front of engines started on their own groups them the same way."""
from __future__ import annotations

from typing import Any

import pytest
import requests
from router_procs import LOG_DIR, free_port, start_router, start_serve, wait_ready

from engine.server.launcher import EngineSpec, start_engines, stop_engines

pytestmark = [pytest.mark.procs, pytest.mark.timeout(600)]
PROMPT = {"prompt": "The capital of Japan is", "max_tokens": 12, "temperature": 0}


def _complete(base: str, model: str, path: str = "/v1/completions",
              **body: Any) -> requests.Response:
    return requests.post(f"{base}{path}", json={**PROMPT, **body, "model": model}, timeout=120)


def test_two_models_route_by_name_with_their_own_policies() -> None:
    proc, base = start_serve("--engines", "2", "--model", "a=default", "--model", "b=default")
    try:
        wait_ready(base, proc, want_engines=2, timeout_s=300)
        listed = requests.get(f"{base}/v1/models", timeout=10).json()["data"]
        assert [m["id"] for m in listed] == ["a", "b"]
        engines = requests.get(f"{base}/admin/engines", timeout=10).json()["engines"]
        engine_of = {e["served_model"]: e["id"] for e in engines}
        assert sorted(engine_of) == ["a", "b"] and len(set(engine_of.values())) == 2

        texts: dict[str, set[str]] = {"a": set(), "b": set()}
        for model in ("a", "b", "a", "b", "default"):
            r = _complete(base, model)
            assert r.status_code == 200, r.text
            served = "a" if model == "default" else model
            route = r.headers["x-switchyard-route"]
            assert f"engine={engine_of[served]}" in route and route.endswith(f" model={served}")
            assert r.json()["model"] == served
            texts[served].add(r.json()["choices"][0]["text"])
        # Greedy: each name's engine gives the same tokens, the same as the other name's.
        assert len(texts["a"]) == 1 and texts["a"] == texts["b"], texts

        r = _complete(base, "c")
        assert r.status_code == 404
        err = r.json()["error"]
        assert (err["code"], err["param"], err["type"]) == ("model_not_found", "model",
                                                            "not_found_error")
        assert "'a', 'b'" in err["message"]

        # b alone switches policy; a keeps round robin.
        r = requests.put(f"{base}/admin/policy", json={"model": "b", "policy": "least_load"},
                         timeout=10)
        assert r.status_code == 200, r.text
        assert {m: p["policy"] for m, p in r.json()["models"].items()} == {
            "a": "round_robin", "b": "least_load"}
        r = requests.put(f"{base}/admin/policy", json={"model": "c", "policy": "pd"}, timeout=10)
        assert r.status_code == 404 and r.json()["error"]["code"] == "model_not_found"
        assert requests.get(f"{base}/admin/policy", params={"model": "b"},
                            timeout=10).json()["policy"] == "least_load"
        chat = {"messages": [{"role": "user", "content": "What is the capital of Japan?"}]}
        routes = {m: _complete(base, m, "/v1/chat/completions", **chat) for m in ("a", "b")}
        assert "via=round_robin" in routes["a"].headers["x-switchyard-route"]
        assert "via=least_load" in routes["b"].headers["x-switchyard-route"]
        answers = {m: r.json()["choices"][0]["message"]["content"] for m, r in routes.items()}
        assert answers["a"] == answers["b"] and "Tokyo" in answers["a"], answers

        # KV moves only between engines of one model.
        r = requests.post(f"{base}/admin/migrate", json={
            "prefix": "The capital of Japan is", "from": engine_of["a"], "to": engine_of["b"]},
            timeout=60)
        assert r.status_code == 400 and r.json()["error"]["param"] == "to", r.text

        metrics = requests.get(f"{base}/metrics", timeout=10).text
        for model in ("a", "b"):
            assert f'switchyard:model_requests_total{{model="{model}",status="ok"}}' in metrics
    finally:
        proc.stop()


def test_a_router_learns_each_engines_model_from_the_engine() -> None:
    # One engine serves a, one names a model this router does not serve; b has none.
    engines = start_engines([EngineSpec(f"engine-{name}-{free_port()}", served_model=name,
                                        threads=1, env={"SWITCHYARD_LOG_LEVEL": "WARNING"})
                             for name in ("a", "elsewhere")], LOG_DIR)
    port = free_port()
    router = start_router(port, [e.port for e in engines], "--model", "a=default",
                          "--model", "b=default")
    base = f"http://127.0.0.1:{port}"
    try:
        wait_ready(base, router, want_engines=2, timeout_s=120)
        served = {e["id"]: e["served_model"] for e in
                  requests.get(f"{base}/admin/engines", timeout=10).json()["engines"]}
        assert sorted(map(str, served.values())) == ["None", "a"], served
        a_engine = next(i for i, m in served.items() if m == "a")
        for _ in range(2):
            r = _complete(base, "a")
            assert r.status_code == 200, r.text
            assert f"engine={a_engine}" in r.headers["x-switchyard-route"]
        r = _complete(base, "b")  # served, but no engine of its own: no capacity, not another's
        assert r.status_code == 503 and r.json()["error"]["code"] == "no_capacity", r.text
        assert "serves model 'elsewhere', which this router does not" in router.output()
    finally:
        router.stop()
        stop_engines(engines)


def test_each_model_takes_turns_over_its_own_engines_only() -> None:
    # Mock engines (they report --served-model-name too): two engines per model.
    proc, base = start_serve("--mock-engines", "--engines", "4", "--model", "a=default",
                             "--model", "b=default")
    try:
        wait_ready(base, proc, want_engines=4, timeout_s=60)
        engines = requests.get(f"{base}/admin/engines", timeout=10).json()["engines"]
        owned: dict[str, set[str]] = {"a": set(), "b": set()}
        for e in engines:
            owned[e["served_model"]].add(e["id"])
        assert [len(ids) for ids in owned.values()] == [2, 2], engines
        for model in ("a", "b", "b", "a", "a", "b"):
            r = _complete(base, model, max_tokens=2)
            assert r.status_code == 200, r.text
            route = r.headers["x-switchyard-route"]
            used = {i for i in owned[model] if f"engine={i} " in route}
            assert len(used) == 1 and route.endswith(f" model={model}"), route
            owned.setdefault(f"{model}-used", set()).update(used)
        # Round robin per model: both of a model's engines took a turn, no other's did.
        assert owned["a-used"] == owned["a"] and owned["b-used"] == owned["b"]
    finally:
        proc.stop()
