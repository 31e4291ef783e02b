"""Access rules of the router, free of any HTTP framework (the Rust front hands the requests it
does not decide itself to Python): API and admin keys (keys.py), the engine address allow-list
(engine_allow.py), per-key rate and concurrency limits (rate_limit.py)."""
