"""The router run in-process against engines that are not processes: the simulated cluster
(here: the router's own policy code against simulated engines in virtual time, which
`switchyard bench simulate` and the tournament sweep, switchyard_bench/simulate/; docs/
benchmarking.md, "simulator") and FakeCluster (fake/: fake engines, for policy tests). Nothing
here imports switchyard_bench: the bench drives the simulator, never the other way round.

The policies, dispatcher, cluster view and router_core are the production ones; only the
engines are simulated: the engine's own scheduler, KV page pool, prefix cache and reservations
(engine/core, engine/kvcache) run with a stand-in for the model whose step takes the time a
latency profile (switchyard_sim/profiles/) predicts and whose tokens are a deterministic function
of the context. Time is an asyncio event loop's virtual clock, so every timeout, sleep and
timer in the router runs unchanged while hours of load take seconds.
"""
