"""engine: one Switchyard engine process (model, paged KV, scheduler, verbs)."""
