"""Issue 26's structured-output target, as a check against a running router: N chat requests
with a strict JSON schema (every `--object-every`-th with json_object), spread over data parallel, pd and tandem
(switched live with PUT /admin/policy), four at a time; every reply must parse, and validate
against its schema. Prints one line per pattern and a JSON summary.

    switchyard serve --engines 2 --port 8125 &
    python loadtest/experiments/structured_output_check.py --base http://127.0.0.1:8125 -n 51
"""
from __future__ import annotations

import argparse
import json
import sys
from concurrent.futures import ThreadPoolExecutor
from typing import Any

import jsonschema
import requests

from switchyard_bench.json_schemas import PERSON

PATTERNS = [("round_robin", {}), ("pd", {}), ("tandem", {"lead_tokens": 3})]
_SUBJECTS = ["a baker", "a pilot", "a violinist", "a chess player", "a nurse", "a farmer",
             "a poet", "an engineer", "a sailor", "a judge", "a painter", "a miner"]


def _one(base: str, i: int, object_every: int) -> tuple[bool, str]:
    as_object = object_every > 0 and i % object_every == object_every - 1
    fmt: dict[str, Any] = {"type": "json_object"} if as_object else {
        "type": "json_schema", "json_schema": {"name": "person", "strict": True,
                                               "schema": PERSON}}
    body = {"messages": [{"role": "user", "content":
                          f"Invent {_SUBJECTS[i % len(_SUBJECTS)]} number {i}: name, age, city."}],
            "max_tokens": 80, "temperature": 0, "response_format": fmt}
    r = requests.post(f"{base}/v1/chat/completions", json=body, timeout=600)
    if r.status_code != 200:
        return False, f"HTTP {r.status_code}: {r.text[:200]}"
    choice = r.json()["choices"][0]
    text, finish = choice["message"]["content"], choice["finish_reason"]
    try:
        value = json.loads(text)
        if as_object:
            if not isinstance(value, dict):
                return False, f"not an object: {text[:200]}"
        else:
            jsonschema.validate(value, PERSON)
    except (ValueError, jsonschema.ValidationError) as exc:
        return False, f"{type(exc).__name__} (finish_reason {finish}): {text[:120]}"
    return True, r.headers.get("X-Switchyard-Route", "")


def main() -> int:
    parser = argparse.ArgumentParser(description=__doc__.split("\n\n")[0])
    parser.add_argument("--base", default="http://127.0.0.1:8000")
    parser.add_argument("-n", type=int, default=51, help="requests in all, split over patterns")
    parser.add_argument("--concurrency", type=int, default=4)
    parser.add_argument("--object-every", type=int, default=4,
                        help="every k-th request asks for json_object instead (0: none)")
    args = parser.parse_args()
    results: dict[str, dict[str, Any]] = {}
    per = -(-args.n // len(PATTERNS))
    for k, (policy, params) in enumerate(PATTERNS):
        r = requests.put(f"{args.base}/admin/policy", json={"policy": policy, "params": params},
                         timeout=30)
        r.raise_for_status()
        with ThreadPoolExecutor(args.concurrency) as pool:
            outs = list(pool.map(lambda i: _one(args.base, i, args.object_every), range(k * per, (k + 1) * per)))
        failures = [why for ok, why in outs if not ok]
        results[policy] = {"requests": len(outs), "valid": len(outs) - len(failures),
                           "failures": failures[:5]}
        print(f"{policy}: {len(outs) - len(failures)}/{len(outs)} valid", flush=True)
    print(json.dumps(results))
    return 0 if all(not r["failures"] for r in results.values()) else 1


if __name__ == "__main__":
    sys.exit(main())
