"""pyrouter: Switchyard's Python router (HTTP API, policy hooks, admin)."""
