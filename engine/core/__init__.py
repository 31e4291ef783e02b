"""The engine core: requests, sampling, scheduler and the synchronous EngineCore."""
