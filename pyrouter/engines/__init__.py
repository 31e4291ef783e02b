"""Engines as the router sees them: gRPC client, per-policy handles, membership and health."""
