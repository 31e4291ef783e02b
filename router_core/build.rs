//! Generates the gRPC types, clients and servers for `proto/switchyard_rpc/*.proto` when the
//! `grpc` feature is on. protox parses the proto in Rust, so no `protoc` binary is needed; the
//! proto file stays the single source (the Python stubs come from the same file).

fn main() {
    #[cfg(feature = "grpc")]
    if let Err(err) = generate_grpc() {
        // A build script reports failure by panicking; the message is what cargo prints.
        panic!("generating gRPC code from proto/: {err}");
    }
}

#[cfg(feature = "grpc")]
fn generate_grpc() -> Result<(), Box<dyn std::error::Error>> {
    const PROTO_ROOT: &str = "../proto";
    // The engines' contract, and the router replicas' RouterPeer service (router_core/src/peer/).
    const PROTOS: [&str; 2] = [
        "switchyard_rpc/engine.proto",
        "switchyard_rpc/router_peer.proto",
    ];
    for proto in PROTOS {
        println!("cargo:rerun-if-changed={PROTO_ROOT}/{proto}");
    }
    let descriptors = protox::compile(PROTOS, [PROTO_ROOT])?;
    tonic_prost_build::configure()
        .build_client(true)
        .build_server(true)
        .compile_fds(descriptors)?;
    Ok(())
}
