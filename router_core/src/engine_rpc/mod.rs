//! The router's one client for one engine: a tonic channel (HTTP/2, one connection, lazily
//! opened) and every call the router makes on it — the request verbs (PrepRecv, RemoteSend,
//! StartGenerate, Abort), the upkeep calls (Stats, ModelInfo, KVEvents, Configure) and the
//! standard gRPC health check. The HTTP front streams generations through it, and Python
//! reaches the same client through `EngineRpcClient` (python/engine_client.rs): a router
//! process dials each engine once.
//!
//! Unary calls get a deadline (the client's, or the call's own; sent to the engine as
//! `grpc-timeout` and enforced here, so an expired call is DEADLINE_EXCEEDED as grpc.aio
//! reports it); a generation has none (it streams for as long as its max_tokens needs). Every
//! call carries the deployment's engine token (`authorization: Bearer <token>`,
//! switchyard_engine_api/auth.py) when there is one, and a call may add metadata of its own (the verb
//! span's trace context, `traceparent`).

mod stream_call;
#[cfg(test)]
#[cfg(feature = "mock-engine")]
mod tests;

pub use stream_call::{CallError, GenerateCall, KvEventsCall, StreamCall};

use crate::error::{Result, RouterCoreError};
use crate::rpc::pb;
use crate::rpc::pb::engine_client::EngineClient;
use crate::rpc::tonic_health::pb::health_check_response::ServingStatus;
use crate::rpc::tonic_health::pb::health_client::HealthClient;
use crate::rpc::tonic_health::pb::HealthCheckRequest;
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

/// Extra gRPC metadata for one call: (key, value) pairs.
pub type CallMetadata = [(String, String)];

#[derive(Clone)]
pub struct EngineRpc {
    client: EngineClient<Channel>,
    /// grpc.health.v1 on the same channel.
    health: HealthClient<Channel>,
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
        let channel = endpoint.connect_lazy();
        let client = EngineClient::new(channel.clone())
            .max_decoding_message_size(MAX_MESSAGE_BYTES)
            .max_encoding_message_size(MAX_MESSAGE_BYTES);
        Ok(EngineRpc {
            client,
            health: HealthClient::new(channel),
            timeout,
            authorization,
        })
    }

    /// The unary deadline when a call names none.
    pub fn timeout(&self) -> Duration {
        self.timeout
    }

    /// `message` with the engine token and `metadata` (entries that are not valid metadata are
    /// left out).
    fn request<M>(&self, message: M, metadata: &CallMetadata) -> Request<M> {
        let mut request = Request::new(message);
        if let Some(value) = &self.authorization {
            request
                .metadata_mut()
                .insert("authorization", value.clone());
        }
        for (key, value) in metadata {
            let key = MetadataKey::<Ascii>::from_bytes(key.as_bytes());
            if let (Ok(key), Ok(value)) = (key, MetadataValue::try_from(value.as_str())) {
                request.metadata_mut().insert(key, value);
            }
        }
        request
    }

    /// Runs a unary call under `timeout` (None: the client's).
    async fn unary<Req, Resp, Fut>(
        &self,
        message: Req,
        metadata: &CallMetadata,
        timeout: Option<Duration>,
        call: impl FnOnce(EngineClient<Channel>, Request<Req>) -> Fut,
    ) -> std::result::Result<Resp, Status>
    where
        Fut: Future<Output = std::result::Result<tonic::Response<Resp>, Status>>,
    {
        let timeout = timeout.unwrap_or(self.timeout);
        let mut request = self.request(message, metadata);
        request.set_timeout(timeout);
        within(timeout, call(self.client.clone(), request)).await
    }

    /// Reserves KV pages for tokens[matched:end] (PrepRecv).
    pub async fn prep_recv(
        &self,
        message: pb::PrepRecvRequest,
        metadata: &CallMetadata,
    ) -> std::result::Result<pb::PrepRecvResponse, Status> {
        self.unary(message, metadata, None, |mut c, r| async move {
            c.prep_recv(r).await
        })
        .await
    }

    /// Computes KV for tokens[begin:end] and pushes it into another engine's reservation
    /// (RemoteSend); `timeout` None: the client's.
    pub async fn remote_send(
        &self,
        message: pb::RemoteSendRequest,
        metadata: &CallMetadata,
        timeout: Option<Duration>,
    ) -> std::result::Result<pb::RemoteSendResponse, Status> {
        self.unary(message, metadata, timeout, |mut c, r| async move {
            c.remote_send(r).await
        })
        .await
    }

    /// The engine's load (Stats).
    pub async fn stats(
        &self,
        timeout: Option<Duration>,
    ) -> std::result::Result<pb::StatsResponse, Status> {
        self.unary(pb::StatsRequest {}, &[], timeout, |mut c, r| async move {
            c.stats(r).await
        })
        .await
    }

    /// What the engine serves and how its KV is laid out (ModelInfo).
    pub async fn model_info(
        &self,
        timeout: Option<Duration>,
    ) -> std::result::Result<pb::ModelInfoResponse, Status> {
        self.unary(
            pb::ModelInfoRequest {},
            &[],
            timeout,
            |mut c, r| async move { c.model_info(r).await },
        )
        .await
    }

    /// Changes run-time settings (Configure); the answer says what is in force.
    pub async fn configure(
        &self,
        message: pb::ConfigureRequest,
        timeout: Option<Duration>,
    ) -> std::result::Result<pb::ConfigureResponse, Status> {
        self.unary(message, &[], timeout, |mut c, r| async move {
            c.configure(r).await
        })
        .await
    }

    /// grpc.health.v1's answer for the whole server (""): true when SERVING. Any failure
    /// (unreachable, timed out, another status) is false.
    pub async fn healthy(&self, timeout: Duration) -> bool {
        let mut request = self.request(
            HealthCheckRequest {
                service: String::new(),
            },
            &[],
        );
        request.set_timeout(timeout);
        let mut health = self.health.clone();
        within(timeout, async move { health.check(request).await })
            .await
            .is_ok_and(|answer| answer.status == ServingStatus::Serving as i32)
    }

    /// Opens the engine's KV event stream (on `runtime`); with `snapshot` the first batch is
    /// the full set it holds.
    pub fn kv_events(&self, snapshot: bool, runtime: &tokio::runtime::Handle) -> Arc<KvEventsCall> {
        let mut client = self.client.clone();
        let request = self.request(pb::KvEventsRequest { snapshot }, &[]);
        let started = runtime.spawn(async move {
            client
                .kv_events(request)
                .await
                .map(tonic::Response::into_inner)
        });
        Arc::new(StreamCall::new(started))
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
        self.unary(
            message,
            &[],
            None,
            |mut c, r| async move { c.abort(r).await },
        )
        .await
        .map(|answer| answer.found)
    }

    /// Starts the generation now (on `runtime`) and returns its handle; the chunks are read
    /// with [`StreamCall::next`].
    pub fn start_generate(
        &self,
        message: pb::StartGenerateRequest,
        metadata: &CallMetadata,
        runtime: &tokio::runtime::Handle,
    ) -> Arc<GenerateCall> {
        let mut client = self.client.clone();
        let request = self.request(message, metadata);
        let started = runtime.spawn(async move {
            client
                .start_generate(request)
                .await
                .map(tonic::Response::into_inner)
        });
        Arc::new(StreamCall::new(started))
    }
}

/// `call`'s answer, or DEADLINE_EXCEEDED (as grpc.aio reports it) once `timeout` has passed —
/// whether this timer or the channel's own (it enforces the request's `grpc-timeout` too, and
/// reports it as CANCELLED "Timeout expired") sees it first.
async fn within<Resp>(
    timeout: Duration,
    call: impl Future<Output = std::result::Result<tonic::Response<Resp>, Status>>,
) -> std::result::Result<Resp, Status> {
    let expired = || Status::deadline_exceeded("Deadline Exceeded");
    match tokio::time::timeout(timeout, call).await {
        Ok(Ok(answer)) => Ok(answer.into_inner()),
        Ok(Err(status))
            if status.code() == tonic::Code::Cancelled
                && status.message() == tonic::TimeoutExpired(()).to_string() =>
        {
            Err(expired())
        }
        Ok(Err(status)) => Err(status),
        Err(_) => Err(expired()),
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
