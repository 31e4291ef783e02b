"""The wire protocol router and engines share, beside the generated stubs (switchyard_rpc/, from
proto/): the engine token and TLS of every gRPC call (`auth`) and the typed grpc.aio engine client
of tests, benches and the engine launcher (`client`). It imports nothing of the engine or the
router, so either side can depend on it."""
