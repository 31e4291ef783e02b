"""The engine API's Python side: what router and engines share besides the generated stubs
(switchyard_rpc/, from proto/): the engine token and TLS of every gRPC call (`auth`), the typed
grpc.aio engine client of tests, benches and the engine launcher (`client`), a request's
sampling parameters (`sampling_params`, checked by the rules in router_core, with their errors
in `errors`) and their proto form (`sampling_proto`). It imports nothing of the engine or of
pyrouter (router_core is the Rust library both already load), so either side can depend on it."""
