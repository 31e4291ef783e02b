//! The router's client for one engine: a tonic channel (HTTP/2, one connection, lazily opened)
//! and the calls the HTTP front makes on the request path — StartGenerate and Abort (the other
//! verbs are the Python policies', on pyrouter's grpc.aio channel, as are Health, Stats,
//! ModelInfo and KV events: pyrouter/engines/membership.py).
//!
//! Abort gets the client's deadline (sent to the engine as `grpc-timeout` and enforced here, so
//! an expired call is DEADLINE_EXCEEDED as grpc.aio reports it); a generation has none (it
//! streams for as long as its max_tokens needs). Every call carries the deployment's engine
//! token (`authorization: Bearer <token>`, engine/server/auth.py) when there is one.

mod generate_call;

pub use generate_call::{CallError, GenerateCall};

use crate::error::{Result, RouterCoreError};
use crate::rpc::pb;
use crate::rpc::pb::engine_client::EngineClient;
use crate::rpc::MAX_MESSAGE_BYTES;
use std::future::Future;
use std::sync::Arc;
use std::time::Duration;
use tonic::metadata::{Ascii, MetadataKey, MetadataValue};
use tonic::transport::{Certificate, Channel, ClientTlsConfig, Endpoint, Identity};
use tonic::{Request, Status};

/// HTTP/2 keepalive: a dead engine on an idle channel is noticed (as grpc.aio's keepalive did).
const KEEPALIVE: Duration = Duration::from_secs(20);

/// TLS to the engines (PEM bytes): the CA their certificates are signed by, this side's own
/// certificate and key (mTLS), and the name their certificate carries (None: the address's
/// host).
#[derive(Debug, Clone, Default)]
pub struct EngineTls {
    pub ca_pem: Vec<u8>,
    pub identity: Option<(Vec<u8>, Vec<u8>)>,
    pub server_name: Option<String>,
}

#[derive(Clone)]
pub struct EngineRpc {
    client: EngineClient<Channel>,
    timeout: Duration,
    /// `Bearer <engine token>`, or None when the engines are open.
    authorization: Option<MetadataValue<Ascii>>,
}

impl EngineRpc {
    /// A client for `address` (HOST:PORT) whose unary verbs time out after `timeout`, sending
    /// `engine_token` ("" = none), over TLS when `tls` is given. The connection opens on the
    /// first call; call from inside a tokio runtime (the channel's worker task is spawned on it).
    pub fn connect_lazy(
        address: &str,
        timeout: Duration,
        engine_token: &str,
        tls: Option<&EngineTls>,
    ) -> Result<Self> {
        let authorization = if engine_token.is_empty() {
            None
        } else {
            // The token itself never goes into the message.
            let value = format!("Bearer {engine_token}").parse().map_err(|_| {
                RouterCoreError::InvalidArgument("the engine token is not valid header text".into())
            })?;
            Some(value)
        };
        let scheme = if tls.is_some() { "https" } else { "http" };
        let bad_address = |err: &dyn std::fmt::Display| {
            RouterCoreError::InvalidArgument(format!("bad engine address {address:?}: {err}"))
        };
        let mut endpoint = Endpoint::from_shared(format!("{scheme}://{address}"))
            .map_err(|err| bad_address(&err))?
            .tcp_nodelay(true)
            .http2_keep_alive_interval(KEEPALIVE)
            .keep_alive_while_idle(true);
        if let Some(tls) = tls {
            let mut config =
                ClientTlsConfig::new().ca_certificate(Certificate::from_pem(&tls.ca_pem));
            if let Some((cert, key)) = &tls.identity {
                config = config.identity(Identity::from_pem(cert, key));
            }
            if let Some(name) = &tls.server_name {
                config = config.domain_name(name.clone());
            }
            endpoint = endpoint.tls_config(config).map_err(|err| {
                RouterCoreError::InvalidArgument(format!("engine TLS settings: {err}"))
            })?;
        }
        let client = EngineClient::new(endpoint.connect_lazy())
            .max_decoding_message_size(MAX_MESSAGE_BYTES)
            .max_encoding_message_size(MAX_MESSAGE_BYTES);
        Ok(EngineRpc {
            client,
            timeout,
            authorization,
        })
    }

    fn request<M>(&self, message: M) -> Request<M> {
        let mut request = Request::new(message);
        if let Some(value) = &self.authorization {
            request
                .metadata_mut()
                .insert("authorization", value.clone());
        }
        request
    }

    /// Runs a unary call under the client's deadline.
    async fn unary<Req, Resp, Fut>(
        &self,
        message: Req,
        call: impl FnOnce(EngineClient<Channel>, Request<Req>) -> Fut,
    ) -> std::result::Result<Resp, Status>
    where
        Fut: Future<Output = std::result::Result<tonic::Response<Resp>, Status>>,
    {
        let mut request = self.request(message);
        request.set_timeout(self.timeout);
        match tokio::time::timeout(self.timeout, call(self.client.clone(), request)).await {
            Ok(answer) => answer.map(tonic::Response::into_inner),
            Err(_) => Err(Status::deadline_exceeded("Deadline Exceeded")),
        }
    }

    /// True when the engine knew the request. `handoff`: a running generation ends with
    /// finish_reason "handoff" instead (a live migration's first step).
    pub async fn abort(
        &self,
        request_id: &str,
        handoff: bool,
    ) -> std::result::Result<bool, Status> {
        let message = pb::AbortRequest {
            request_id: request_id.to_owned(),
            handoff,
        };
        self.unary(message, |mut c, r| async move { c.abort(r).await })
            .await
            .map(|answer| answer.found)
    }

    /// Starts the generation now (on `runtime`) and returns its handle; the chunks are read
    /// with [`GenerateCall::next`]. `metadata`: extra gRPC
    /// metadata (the verb span's trace context, `traceparent`); entries that are not valid
    /// metadata are left out.
    pub fn start_generate(
        &self,
        message: pb::StartGenerateRequest,
        metadata: &[(String, String)],
        runtime: &tokio::runtime::Handle,
    ) -> Arc<GenerateCall> {
        let mut client = self.client.clone();
        let mut request = self.request(message);
        for (key, value) in metadata {
            let key = MetadataKey::<Ascii>::from_bytes(key.as_bytes());
            if let (Ok(key), Ok(value)) = (key, MetadataValue::try_from(value.as_str())) {
                request.metadata_mut().insert(key, value);
            }
        }
        let started = runtime.spawn(async move {
            client
                .start_generate(request)
                .await
                .map(tonic::Response::into_inner)
        });
        Arc::new(GenerateCall::new(started))
    }
}

/// grpc's name for a status code (`grpc.StatusCode.<NAME>` in Python).
pub fn code_name(code: tonic::Code) -> &'static str {
    use tonic::Code::*;
    match code {
        Ok => "OK",
        Cancelled => "CANCELLED",
        Unknown => "UNKNOWN",
        InvalidArgument => "INVALID_ARGUMENT",
        DeadlineExceeded => "DEADLINE_EXCEEDED",
        NotFound => "NOT_FOUND",
        AlreadyExists => "ALREADY_EXISTS",
        PermissionDenied => "PERMISSION_DENIED",
        ResourceExhausted => "RESOURCE_EXHAUSTED",
        FailedPrecondition => "FAILED_PRECONDITION",
        Aborted => "ABORTED",
        OutOfRange => "OUT_OF_RANGE",
        Unimplemented => "UNIMPLEMENTED",
        Internal => "INTERNAL",
        Unavailable => "UNAVAILABLE",
        DataLoss => "DATA_LOSS",
        Unauthenticated => "UNAUTHENTICATED",
    }
}

/// Status codes meaning "you asked for something invalid" rather than "the engine is unwell"
/// (pyrouter/engines/handle.py's CALLER_MISTAKES).
pub fn is_caller_mistake(code: tonic::Code) -> bool {
    matches!(
        code,
        tonic::Code::InvalidArgument
            | tonic::Code::FailedPrecondition
            | tonic::Code::OutOfRange
            | tonic::Code::NotFound
    )
}
