//! Chat messages as the router accepts them (pyrouter/http/parse.py `_chat_tokens`): a non-empty
//! list of `{"role", "content"}` objects; `content` is a string or a list of content parts whose
//! `text` parts are joined; role `developer` is rendered as `system`. Error messages and `param`
//! paths are the ones the Python router returns, so a client sees the same 400s.

use crate::error::{Result, RouterCoreError};
use serde_json::Value;

const ROLES: [&str; 5] = ["system", "user", "assistant", "developer", "tool"];

/// One message as the chat template sees it.
#[derive(Debug, Clone, PartialEq, Eq)]
pub struct ChatMessage {
    pub role: String,
    pub content: String,
}

impl ChatMessage {
    pub fn new(role: impl Into<String>, content: impl Into<String>) -> Self {
        ChatMessage {
            role: role.into(),
            content: content.into(),
        }
    }
}

fn bad(param: String, message: String) -> RouterCoreError {
    RouterCoreError::InvalidRequest { param, message }
}

/// Checks and normalises a request's `messages` value.
pub fn parse_chat_messages(messages: &Value) -> Result<Vec<ChatMessage>> {
    let list = match messages {
        Value::Array(list) if !list.is_empty() => list,
        _ => {
            return Err(bad(
                "messages".into(),
                "'messages' must be a non-empty list".into(),
            ))
        }
    };
    list.iter()
        .enumerate()
        .map(|(i, message)| parse_message(i, message))
        .collect()
}

fn parse_message(i: usize, message: &Value) -> Result<ChatMessage> {
    let role = message
        .as_object()
        .and_then(|m| m.get("role"))
        .and_then(Value::as_str)
        .filter(|role| ROLES.contains(role))
        .ok_or_else(|| {
            bad(
                format!("messages[{i}]"),
                format!("messages[{i}] needs a role of system|user|assistant"),
            )
        })?;
    let content_error = || {
        bad(
            format!("messages[{i}].content"),
            format!("messages[{i}].content must be a string"),
        )
    };
    let content = match message.get("content") {
        Some(Value::String(text)) => text.clone(),
        Some(Value::Array(parts)) => joined_text_parts(i, parts)?,
        _ => return Err(content_error()),
    };
    let role = if role == "developer" { "system" } else { role };
    Ok(ChatMessage::new(role, content))
}

/// The `text` of every `{"type": "text", "text": "..."}` part, joined. Any other part (an
/// image, audio, a bare value) is refused, naming it: the model reads text only, and dropping
/// a part would answer a question nobody asked.
fn joined_text_parts(i: usize, parts: &[Value]) -> Result<String> {
    let mut joined = String::new();
    for (j, part) in parts.iter().enumerate() {
        let here = format!("messages[{i}].content[{j}]");
        let kind = part.get("type").and_then(Value::as_str);
        match (kind, part.get("text")) {
            (Some("text"), Some(Value::String(text))) => joined.push_str(text),
            (Some("text"), _) => {
                return Err(bad(here.clone(), format!("{here}.text must be a string")))
            }
            (Some(other), _) => {
                return Err(bad(
                    here.clone(),
                    format!(
                        "{here}: content parts of type {other:?} are not supported (text only)"
                    ),
                ))
            }
            (None, _) => {
                return Err(bad(
                    here.clone(),
                    format!("{here} must be a {{\"type\": \"text\", \"text\": ...}} part"),
                ))
            }
        }
    }
    Ok(joined)
}

#[cfg(test)]
mod tests {
    use super::*;
    use serde_json::json;

    fn param_of(value: Value) -> String {
        match parse_chat_messages(&value) {
            Err(RouterCoreError::InvalidRequest { param, .. }) => param,
            other => panic!("expected InvalidRequest, got {other:?}"),
        }
    }

    #[test]
    fn strings_parts_and_developer_role() {
        let parsed = parse_chat_messages(&json!([
            {"role": "developer", "content": "be brief"},
            {"role": "user", "content": [
                {"type": "text", "text": "a"}, {"type": "text", "text": "b"}]},
            {"role": "assistant", "content": "", "name": "ignored"},
        ]))
        .unwrap();
        assert_eq!(
            parsed,
            vec![
                ChatMessage::new("system", "be brief"),
                ChatMessage::new("user", "ab"),
                ChatMessage::new("assistant", ""),
            ]
        );
    }

    #[test]
    fn parts_that_are_not_text_are_refused_by_name() {
        let image = json!([{"role": "user", "content": [
            {"type": "text", "text": "a"}, {"type": "image_url", "image_url": {}}]}]);
        assert_eq!(param_of(image), "messages[0].content[1]");
        assert_eq!(
            param_of(json!([{"role": "user", "content": [1, 2]}])),
            "messages[0].content[0]"
        );
        assert_eq!(
            param_of(json!([{"role": "user", "content": [{"type": "text"}]}])),
            "messages[0].content[0]"
        );
    }

    #[test]
    fn bad_shapes_name_the_parameter() {
        assert_eq!(param_of(json!([])), "messages");
        assert_eq!(param_of(json!("hi")), "messages");
        assert_eq!(param_of(json!(null)), "messages");
        assert_eq!(param_of(json!([{"content": "x"}])), "messages[0]");
        assert_eq!(
            param_of(json!([{"role": "user", "content": "x"}, {"role": "robot", "content": "x"}])),
            "messages[1]"
        );
        assert_eq!(
            param_of(json!([{"role": 3, "content": "x"}])),
            "messages[0]"
        );
        assert_eq!(param_of(json!(["user"])), "messages[0]");
        assert_eq!(param_of(json!([{"role": "user"}])), "messages[0].content");
        assert_eq!(
            param_of(json!([{"role": "user", "content": 5}])),
            "messages[0].content"
        );
        assert_eq!(
            param_of(json!([{"role": "user", "content": [{"type": "text", "text": 1}]}])),
            "messages[0].content[0]"
        );
    }
}
