"""Built-in routing policies, one per file, imported on first use by pyrouter.runtime.policy_registry."""
