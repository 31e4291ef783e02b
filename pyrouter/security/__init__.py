"""Access rules of the router, free of any HTTP framework so whichever front serves HTTP (aiohttp
now, router_core's axum later) applies the same ones: API and admin keys (keys.py), the engine
address allow-list (engine_allow.py), per-key rate and concurrency limits (rate_limit.py)."""
