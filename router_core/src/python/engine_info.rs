//! The engine's answers to the membership's one-off calls, as typed values: ModelInfo (what it
//! serves and how its KV is laid out) and Configure (the setting now in force). Read-only
//! copies of the proto's messages, field for field.

use crate::rpc::pb;
use pyo3::prelude::*;

/// ModelInfoResponse (proto/switchyard_rpc/engine.proto).
#[pyclass(
    name = "ModelInfo",
    module = "router_core._router_core",
    frozen,
    get_all
)]
pub struct PyModelInfo {
    model_id: String,
    num_layers: i32,
    num_kv_heads: i32,
    head_dim: i32,
    page_size: i32,
    dtype: String,
    block_hash_seed: u64,
    vocab_size: i32,
    max_context: i32,
    host_id: String,
    transfer_addr: String,
    role: String,
    engine_id: String,
    served_model: String,
}

impl From<pb::ModelInfoResponse> for PyModelInfo {
    fn from(info: pb::ModelInfoResponse) -> Self {
        PyModelInfo {
            model_id: info.model_id,
            num_layers: info.num_layers,
            num_kv_heads: info.num_kv_heads,
            head_dim: info.head_dim,
            page_size: info.page_size,
            dtype: info.dtype,
            block_hash_seed: info.block_hash_seed,
            vocab_size: info.vocab_size,
            max_context: info.max_context,
            host_id: info.host_id,
            transfer_addr: info.transfer_addr,
            role: info.role,
            engine_id: info.engine_id,
            served_model: info.served_model,
        }
    }
}

/// ConfigureResponse: the value now in force and the one before.
#[pyclass(
    name = "Configured",
    module = "router_core._router_core",
    frozen,
    get_all
)]
pub struct PyConfigured {
    prefill_chunk_size: i32,
    previous_prefill_chunk_size: i32,
}

impl From<pb::ConfigureResponse> for PyConfigured {
    fn from(answer: pb::ConfigureResponse) -> Self {
        PyConfigured {
            prefill_chunk_size: answer.prefill_chunk_size,
            previous_prefill_chunk_size: answer.previous_prefill_chunk_size,
        }
    }
}
