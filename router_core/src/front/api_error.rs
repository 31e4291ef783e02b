//! `ApiError`: what a client gets when a request fails — an HTTP status and the OpenAI error body
//! `{"error": {"message", "type", "param", "code"}}`. The kinds and texts are pyrouter/errors.py's
//! (Python errors reach the front as status + body and pass through unchanged).

use crate::error::RouterCoreError;
use serde_json::{json, Value};

#[derive(Debug, Clone, PartialEq)]
pub struct ApiError {
    pub status: u16,
    pub error_type: &'static str,
    pub message: String,
    pub param: Option<String>,
    pub code: Option<String>,
    /// Seconds for the `Retry-After` header of a 429 or 503 (None: one second).
    pub retry_after_s: Option<f64>,
}

impl ApiError {
    fn new(status: u16, error_type: &'static str, message: impl Into<String>) -> Self {
        ApiError {
            status,
            error_type,
            message: message.into(),
            param: None,
            code: None,
            retry_after_s: None,
        }
    }

    pub fn with_type(mut self, error_type: &'static str) -> Self {
        self.error_type = error_type;
        self
    }

    pub fn with_retry_after(mut self, seconds: f64) -> Self {
        self.retry_after_s = Some(seconds);
        self
    }

    pub fn with_param(mut self, param: impl Into<String>) -> Self {
        self.param = Some(param.into());
        self
    }

    pub fn with_code(mut self, code: impl Into<String>) -> Self {
        self.code = Some(code.into());
        self
    }

    /// 400: bad input.
    pub fn bad_request(message: impl Into<String>) -> Self {
        Self::new(400, "invalid_request_error", message)
    }

    /// 404: the request names something not served here (an unknown model).
    pub fn not_found(message: impl Into<String>) -> Self {
        Self::new(404, "not_found_error", message)
    }

    /// 401: a missing or wrong API key.
    pub fn unauthorized(message: impl Into<String>) -> Self {
        Self::new(401, "authentication_error", message)
    }

    /// A status the HTTP layer produces itself (405, 413), shaped as every other error; the
    /// codes are the ones pyrouter/http/ops.py gives its own 404/405.
    pub fn http(status: u16, reason: &str) -> Self {
        let code = match status {
            404 => "not_found".to_owned(),
            405 => "method_not_allowed".to_owned(),
            413 => "request_too_large".to_owned(),
            414 => "uri_too_long".to_owned(),
            431 => "request_header_fields_too_large".to_owned(),
            _ => status.to_string(),
        };
        Self::new(status, "invalid_request_error", reason).with_code(code)
    }

    /// 408: the client did not send its whole body in time.
    pub fn request_timeout(message: impl Into<String>) -> Self {
        Self::new(408, "invalid_request_error", message).with_code("request_timeout")
    }

    /// 429: too many requests in flight.
    pub fn busy(message: impl Into<String>) -> Self {
        Self::new(429, "rate_limit_error", message)
    }

    /// 503: no healthy engine can serve the request.
    pub fn no_capacity(message: impl Into<String>) -> Self {
        Self::new(503, "service_unavailable", message).with_code("no_capacity")
    }

    /// 503: the router drains and this request outlived the grace period.
    pub fn shutting_down() -> Self {
        Self::no_capacity("the router is shutting down; retry on another replica")
            .with_code("shutting_down")
    }

    /// 502: an engine failed the request.
    pub fn engine_failed(message: impl Into<String>) -> Self {
        Self::new(502, "engine_error", message)
    }

    /// 503: an engine could not be reached before any output (retryable).
    pub fn engine_unavailable(message: impl Into<String>) -> Self {
        Self::new(503, "service_unavailable", message).with_code("engine_unavailable")
    }

    /// 500: the router itself failed.
    pub fn internal(message: impl Into<String>) -> Self {
        Self::new(500, "internal_error", message)
    }

    pub fn body(&self) -> Value {
        // Every error carries a code (docs/reliability.md); without a specific one, its status's.
        let code = self.code.clone().unwrap_or_else(|| {
            match self.status {
                400 => "invalid_request",
                401 => "invalid_api_key",
                429 => "too_many_requests",
                502 => "engine_error",
                503 => "service_unavailable",
                _ => "internal_error",
            }
            .to_owned()
        });
        json!({"error": {"message": self.message, "type": self.error_type,
                         "param": self.param, "code": code}})
    }

    pub fn body_bytes(&self) -> Vec<u8> {
        self.body().to_string().into_bytes()
    }
}

impl From<RouterCoreError> for ApiError {
    fn from(err: RouterCoreError) -> Self {
        match err {
            RouterCoreError::InvalidRequest { param, message } => {
                ApiError::bad_request(message).with_param(param)
            }
            RouterCoreError::ChatTemplate(message) => {
                ApiError::bad_request(message).with_param("messages")
            }
            RouterCoreError::InvalidArgument(message) => ApiError::bad_request(message),
            other => ApiError::internal(other.to_string()),
        }
    }
}

/// An error that arrived from Python already shaped (status + the JSON body it built).
#[derive(Debug, Clone, PartialEq)]
pub struct ShapedError {
    pub status: u16,
    pub body: Vec<u8>,
    /// Whole seconds for `Retry-After` (0: one second).
    pub retry_after_s: u64,
}

impl ShapedError {
    pub fn new(status: u16, body: Vec<u8>) -> Self {
        ShapedError {
            status,
            body,
            retry_after_s: 0,
        }
    }
}

impl From<&ApiError> for ShapedError {
    fn from(err: &ApiError) -> Self {
        ShapedError {
            status: err.status,
            body: err.body_bytes(),
            retry_after_s: err.retry_after_s.map_or(0, |s| s.max(0.0).ceil() as u64),
        }
    }
}

#[cfg(test)]
mod tests {
    use super::*;

    #[test]
    fn openai_shape() {
        let err = ApiError::bad_request("bad").with_param("max_tokens");
        assert_eq!(
            err.body(),
            json!({"error": {"message": "bad", "type": "invalid_request_error",
                             "param": "max_tokens", "code": "invalid_request"}})
        );
        let nf = ApiError::http(404, "Not Found");
        assert_eq!(nf.body()["error"]["code"], "not_found");
        assert_eq!(
            ApiError::http(405, "x").body()["error"]["code"],
            "method_not_allowed"
        );
        assert_eq!(ApiError::no_capacity("x").status, 503);
    }

    #[test]
    fn core_errors_map_to_400s() {
        let err: ApiError = RouterCoreError::InvalidRequest {
            param: "messages[0]".into(),
            message: "m".into(),
        }
        .into();
        assert_eq!(
            (err.status, err.param.as_deref()),
            (400, Some("messages[0]"))
        );
    }
}
