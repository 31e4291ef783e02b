"""Build a simulator profile of THIS machine's engine: the latency model a running engine
reports (its fitted step model at the machine's current load, as the router sees it), or the one
an engine's start-up profile left in the latency cache.

  python -m switchyard_sim.profiles.build_local --from-engine 127.0.0.1:50051
  python -m switchyard_sim.profiles.build_local --from-engine A:P --from-engine B:Q  # averaged
  python -m switchyard_sim.profiles.build_local --from-cache            # newest cached profile

Engines started by `switchyard serve` require its deployment token: pass `--token-file
DIR/engine-token` (DIR: the log directory serve prints), or set SWITCHYARD_ENGINE_TOKEN[_FILE].

From an engine, everything comes from its ModelInfo and Stats (model shape, page size, KV pages,
prefill chunk, the coefficients, which the engine refits online from its own steps); from several
engines of one model, the coefficients are averaged (the model is linear in them, so this is the
average of their predictions: one profile for engines that share the machine's cores); from the cache, the coefficients are refitted from the cached
profile rows with the engine's own LatencyModel (CPU-time fit x the profile's wall/CPU ratio)
and the shape is the default model's (SmolLM2-135M, bf16 KV of the fast mode, 512 MiB pool).
The link is the shm transport's measured rate (docs/benchmarks.md, "transfer"), `--link-gbps`.
"""
from __future__ import annotations

import argparse
import asyncio
import glob
import json
import os
from typing import Any

from switchyard_engine_api.auth import TOKEN_FILE_ENV, engine_token
from switchyard_sim.profile import PROFILE_DIR, profile_from_dict

NAME = "local-smollm2-cpu"
LINK_GBPS = 2.77  # shm receiver's page writes (measure_local.py); bench transfer: 0.8-1.8 GB/s
RPC_MS = 0.35  # one way: a gRPC round trip to an engine on this machine is ~0.7 ms
# This machine's link, contention and router constants: `python -m
# switchyard_sim.profiles.measure_local` on 2026-12-01 at load average 3.3-5.7 on 2 cores (other
# builds running); --measured FILE takes a fresh run's --json output instead. Contention stays
# off (cores 0) unless --cores says otherwise: coefficients fitted while both engines stepped
# (a calibration sweep) have it in them already.
MEASURED = {"link_latency_ms": 3.78, "link_chunk_ms": 0.0267, "send_chunk_ms": 0.0533,
            "gather_gbps": 2.84, "recv_step_share": 1.0, "contention": 2.26,
            "decode_contention": 1.0, "router_ms": 0.08}
MAX_RUNNING = 64  # EngineConfig's default (not in Stats)


async def _from_engines(addresses: list[str], token: str | None = None) -> dict[str, Any]:
    bodies = [await _from_engine(address, token) for address in addresses]
    body = bodies[0]
    terms = sorted({term for b in bodies for term in b["latency_model"]})
    body["latency_model"] = {t: sum(b["latency_model"].get(t, 0.0) for b in bodies) / len(bodies)
                             for t in terms}
    if len(bodies) > 1:
        body["measured"] = {"from": f"mean of engines {', '.join(addresses)} Stats latency "
                                    "models", "engines": [b["measured"] for b in bodies]}
    return body


async def _from_engine(address: str, token: str | None = None) -> dict[str, Any]:
    from switchyard_engine_api.client import EngineClient

    async with EngineClient(address, timeout_s=10.0, token=token) as client:
        info = await client.model_info()
        stats = await client.stats()
    coeffs = dict(stats.latency_model.coeffs_ms)
    if not coeffs:
        raise SystemExit(f"engine {address} has no latency model yet")
    kv_bytes = 2 if info.dtype in ("fast", "bfloat16", "float16") else 4
    return {
        "model": {"model_id": info.model_id, "num_layers": info.num_layers,
                  "num_kv_heads": info.num_kv_heads, "head_dim": info.head_dim,
                  "kv_dtype_bytes": kv_bytes, "max_context": info.max_context},
        "page_size": info.page_size, "kv_pages": stats.kv_pages_total,
        "chunk_size": stats.prefill_chunk_size or 512, "latency_model": coeffs,
        "measured": {"from": f"engine {address} Stats + ModelInfo",
                     "latency_model_source": stats.latency_model.source,
                     "latency_model_samples": stats.latency_model.samples,
                     "latency_model_fit_error": round(stats.latency_model.fit_error, 4),
                     "loadavg": os.getloadavg()},
    }


def _from_cache(path: str | None, kv_bytes: int) -> dict[str, Any]:
    from engine.config import DEFAULT_KV_MEMORY, EngineConfig
    from engine.core.latency_cache import profile_dir
    from engine.core.latency_model import LatencyModel
    from engine.model.gguf_loader import read_gguf_config
    from switchyard_tokenizer.default_model import default_model_path
    from switchyard_tokenizer.gguf_metadata import open_gguf

    if path is None:
        found = sorted(glob.glob(os.path.join(profile_dir(), "*.json")), key=os.path.getmtime)
        if not found:
            raise SystemExit(f"no cached latency profile in {profile_dir()}: start an engine "
                             "once (switchyard engine --latency-profile force)")
        path = found[-1]
    with open(path, encoding="utf-8") as f:
        entry = json.load(f)
    identity = entry["identity"]
    model = LatencyModel(terms=entry["terms"], clock="cpu", knee=identity.get("knee"))
    model.load_profile(entry["rows"], "cache")
    model_path = default_model_path()
    shape = read_gguf_config(open_gguf(model_path), model_path)
    page_size = int(identity.get("page_size", 16))
    per_page = 2 * shape.num_layers * shape.num_kv_heads * shape.head_dim * kv_bytes * page_size
    config = EngineConfig()
    return {
        "model": {"model_id": shape.model_id, "num_layers": shape.num_layers,
                  "num_kv_heads": shape.num_kv_heads, "head_dim": shape.head_dim,
                  "kv_dtype_bytes": kv_bytes, "max_context": shape.max_position_embeddings},
        "page_size": page_size, "kv_pages": DEFAULT_KV_MEMORY // per_page,
        "chunk_size": config.chunk_size, "latency_model": model.coefficients(),
        "measured": {"from": f"latency cache {os.path.basename(path)}",
                     "hardware": identity.get("hardware"),
                     "torch_threads": identity.get("torch_threads"),
                     "profile_rows": len(entry["rows"]),
                     "fit_error": round(model.fit_error(), 4)},
    }


def _measured(path: str | None) -> dict[str, Any]:
    """The simulator's link, contention and router constants (switchyard_sim/send_cost.py,
    transfer.py, cores.py): MEASURED, or those a measure_local.py run wrote."""
    if path is None:
        return dict(MEASURED)
    with open(path, encoding="utf-8") as f:
        run = json.load(f)
    return {key: run.get(key, default) for key, default in MEASURED.items()}


def main() -> int:
    p = argparse.ArgumentParser(description=__doc__,
                                formatter_class=argparse.RawDescriptionHelpFormatter)
    src = p.add_mutually_exclusive_group(required=True)
    src.add_argument("--from-engine", metavar="HOST:PORT", action="append",
                     help="a running engine (repeat for several: coefficients averaged)")
    src.add_argument("--from-cache", nargs="?", const="", metavar="FILE",
                     help="a latency cache file (default: the newest)")
    p.add_argument("--token-file", default=None, metavar="FILE",
                   help="--from-engine: the deployment's engine token (`switchyard serve` "
                   "writes it to engine-token in the log directory it prints; default: "
                   "SWITCHYARD_ENGINE_TOKEN[_FILE], as every engine client)")
    p.add_argument("--kv-dtype-bytes", type=int, default=2,
                   help="--from-cache: bytes per KV element (2: the fast mode's bf16)")
    p.add_argument("--link-gbps", type=float, default=LINK_GBPS)
    p.add_argument("--rpc-ms", type=float, default=RPC_MS)
    p.add_argument("--measured", default=None, metavar="FILE",
                   help="link, contention and receiver constants: measure_local.py's --json "
                        "output (default: this machine's, MEASURED)")
    p.add_argument("--cores", type=int, default=0,
                   help="cores the engines share: switches the contention model on (only for "
                        "coefficients of an engine that stepped alone; default 0: off)")
    p.add_argument("--name", default=NAME)
    p.add_argument("--out", default=None, help=f"default: {PROFILE_DIR}/NAME.json")
    a = p.parse_args()
    token = engine_token({TOKEN_FILE_ENV: a.token_file}) if a.token_file else None
    body = (asyncio.run(_from_engines(a.from_engine, token)) if a.from_engine
            else _from_cache(a.from_cache or None, a.kv_dtype_bytes))
    body = {"name": a.name,
            "description": "SmolLM2-135M on this machine's CPU engine (switchyard engine, "
                           "fast mode): the engine's own fitted step model.",
            **body, "max_running": MAX_RUNNING, "link_gbps": a.link_gbps, "rpc_ms": a.rpc_ms,
            **_measured(a.measured), "cores": a.cores,
            "sources": ["the engine's latency model (engine/core/latency_model.py), "
                        "as reported in Stats / cached at start",
                        "link, contention, receiver: switchyard_sim/profiles/measure_local.py"]}
    profile_from_dict(body, a.name)
    out = a.out or os.path.join(PROFILE_DIR, f"{a.name}.json")
    with open(out, "w", encoding="utf-8") as f:
        json.dump(body, f, indent=1)
        f.write("\n")
    print(f"wrote {out}: {body['latency_model']}")
    return 0


if __name__ == "__main__":
    raise SystemExit(main())
