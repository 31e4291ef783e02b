"""Paged KV cache: per-layer KV storage, page pool, radix prefix cache and KV events."""
