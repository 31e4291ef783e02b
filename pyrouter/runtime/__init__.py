"""The policy runtime: what the Rust front calls to decide a request (the bridge), how a policy
runs its decisions (one per segment), what a policy sees of a request, and what the router
records of the requests it served. router_core carries every decision out."""
