"""The OpenAI-compatible HTTP surface (aiohttp): generation, admin, health, metrics."""
