//! `response_format`: structured output, honoured by the engine that samples (it compiles the
//! grammar and masks every token against it). Only the shape is checked here; whether the grammar library accepts a schema is the engine's
//! answer (INVALID_ARGUMENT, which the front returns as a 400).

use super::api_error::ApiError;
use crate::rpc::pb;
use serde_json::{Map, Value};

/// The largest schema (as compact JSON text) a request may carry: compiling a grammar costs
/// time and memory with its size, and the engine holds this same limit for any gRPC caller
/// (switchyard_engine_api/sampling_params.py reads it as `router_core.MAX_SCHEMA_BYTES`).
pub const MAX_SCHEMA_BYTES: usize = 32 * 1024;

/// What the output must be: any JSON object, or JSON valid against a schema.
#[derive(Debug, Clone, PartialEq)]
pub enum ResponseFormat {
    JsonObject,
    /// The schema as compact JSON text.
    JsonSchema(String),
}

impl ResponseFormat {
    /// The proto's (and OpenAI's) type name.
    pub fn type_name(&self) -> &'static str {
        match self {
            ResponseFormat::JsonObject => "json_object",
            ResponseFormat::JsonSchema(_) => "json_schema",
        }
    }

    /// The schema's text ("" for json_object).
    pub fn schema(&self) -> &str {
        match self {
            ResponseFormat::JsonObject => "",
            ResponseFormat::JsonSchema(schema) => schema,
        }
    }

    pub fn to_proto(&self) -> pb::ResponseFormat {
        pb::ResponseFormat {
            r#type: self.type_name().to_owned(),
            json_schema: self.schema().to_owned(),
        }
    }
}

fn bad(message: impl Into<String>) -> ApiError {
    ApiError::bad_request(message).with_param("response_format")
}

/// `response_format` as OpenAI spells it: `{"type": "text"}` (or absent) is free text,
/// `{"type": "json_object"}`, or `{"type": "json_schema", "json_schema": {"name", "strict",
/// "schema"}}`. A schema is always enforced strictly (`strict: false` gets the same guarantee).
pub fn parse_response_format(
    body: &Map<String, Value>,
) -> Result<Option<ResponseFormat>, ApiError> {
    let format = match body.get("response_format") {
        None | Some(Value::Null) => return Ok(None),
        Some(Value::Object(format)) => format,
        Some(_) => return Err(bad("'response_format' must be an object with a 'type'")),
    };
    match format.get("type").and_then(Value::as_str) {
        Some("text") => Ok(None),
        Some("json_object") => Ok(Some(ResponseFormat::JsonObject)),
        Some("json_schema") => json_schema(format.get("json_schema")).map(Some),
        Some(other) => Err(bad(format!(
            "'response_format' of type {other:?} is not supported (text, json_object, json_schema)"
        ))
        .with_code("unsupported_parameter")),
        None => Err(bad("'response_format' must be an object with a 'type'")),
    }
}

fn json_schema(spec: Option<&Value>) -> Result<ResponseFormat, ApiError> {
    let Some(Value::Object(spec)) = spec else {
        return Err(bad(
            "'response_format' of type json_schema needs a 'json_schema' object with a 'schema'",
        ));
    };
    if spec
        .get("strict")
        .is_some_and(|s| !s.is_boolean() && !s.is_null())
    {
        return Err(bad(
            "'response_format.json_schema.strict' must be a boolean",
        ));
    }
    let schema = match spec.get("schema") {
        Some(schema @ Value::Object(_)) => schema,
        _ => {
            return Err(bad(
                "'response_format.json_schema.schema' must be a JSON schema object",
            ))
        }
    };
    let text = schema.to_string();
    if text.len() > MAX_SCHEMA_BYTES {
        return Err(bad(format!(
            "'response_format.json_schema.schema' is {} bytes; at most {MAX_SCHEMA_BYTES} are \
             accepted",
            text.len()
        ))
        .with_code("schema_too_large"));
    }
    Ok(ResponseFormat::JsonSchema(text))
}
