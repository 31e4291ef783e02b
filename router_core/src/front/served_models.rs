//! The models one router serves, each with its own tokenizer and chat template (a prompt is
//! tokenised as its model reads it) and detokenizer vocabulary, and the engines serving it. A
//! request's `model` picks one: its name, or "default" / none for the first; any other value is
//! the client's 404 `model_not_found`. The engines' models come from their ModelInfo (the
//! deciding side reports them); a router serving one model keeps every engine in it, as before
//! models were grouped.

use super::api_error::ApiError;
use crate::detok::DetokenizerVocab;
use crate::tokenize::RouterTokenizer;
use serde_json::Value;
use std::collections::HashMap;
use std::sync::{Arc, PoisonError, RwLock};

/// One served model: the id /v1/models lists and what the front reads its text with.
pub struct ServedModel {
    pub name: String,
    pub tokenizer: Arc<RouterTokenizer>,
    pub vocab: Arc<DetokenizerVocab>,
}

/// Every served model (the first is "default") and which engines serve which.
pub struct ServedModels {
    models: RwLock<Vec<Arc<ServedModel>>>,
    /// Engine number -> the model it serves, as its ModelInfo said (several models only).
    engine_models: RwLock<HashMap<u32, String>>,
}

impl ServedModels {
    pub fn new(first: ServedModel) -> Self {
        ServedModels {
            models: RwLock::new(vec![Arc::new(first)]),
            engine_models: RwLock::new(HashMap::new()),
        }
    }

    /// Serves `model` too; Err when its name is taken (or is the alias "default").
    pub fn add(&self, model: ServedModel) -> Result<(), String> {
        let mut models = self.models.write().unwrap_or_else(PoisonError::into_inner);
        if model.name == "default" || models.iter().any(|m| m.name == model.name) {
            return Err(format!("model name {:?} is already taken", model.name));
        }
        models.push(Arc::new(model));
        Ok(())
    }

    /// Every served model, the default first.
    pub fn list(&self) -> Vec<Arc<ServedModel>> {
        self.models
            .read()
            .unwrap_or_else(PoisonError::into_inner)
            .clone()
    }

    /// More than one model: engines are grouped and the route header names the model.
    pub fn several(&self) -> bool {
        self.models
            .read()
            .unwrap_or_else(PoisonError::into_inner)
            .len()
            > 1
    }

    /// The model a request body's `model` field names.
    pub fn resolve(&self, requested: Option<&Value>) -> Result<Arc<ServedModel>, ApiError> {
        let models = self.models.read().unwrap_or_else(PoisonError::into_inner);
        let found = match requested {
            None | Some(Value::Null) => models.first(),
            Some(Value::String(name)) if name == "default" => models.first(),
            Some(Value::String(name)) => models.iter().find(|m| m.name == *name),
            Some(_) => None,
        };
        if let Some(model) = found {
            return Ok(model.clone());
        }
        let shown = match requested {
            Some(Value::String(s)) => format!("'{s}'"),
            Some(v) => v.to_string(),
            None => "none".to_owned(),
        };
        let names: Vec<String> = models.iter().map(|m| format!("'{}'", m.name)).collect();
        Err(ApiError::not_found(format!(
            "model {shown} is not served here; use {} or 'default'",
            names.join(", ")
        ))
        .with_param("model")
        .with_code("model_not_found"))
    }

    /// Engine `num` serves `model` (None: not known, or the engine is gone).
    pub fn set_engine_model(&self, num: u32, model: Option<String>) {
        let mut engines = self
            .engine_models
            .write()
            .unwrap_or_else(PoisonError::into_inner);
        match model {
            Some(model) => engines.insert(num, model),
            None => engines.remove(&num),
        };
    }

    /// Whether engine `num` may take a request for `model`: with one model, every engine does.
    pub fn serves(&self, num: u32, model: &str) -> bool {
        !self.several()
            || self
                .engine_models
                .read()
                .unwrap_or_else(PoisonError::into_inner)
                .get(&num)
                .is_some_and(|m| m == model)
    }
}

#[cfg(test)]
mod tests {
    use super::*;
    use serde_json::json;

    fn model(name: &str) -> ServedModel {
        // A word-level vocabulary of two words: enough to build both halves.
        let tokenizer_json = r#"{"version":"1.0","truncation":null,"padding":null,
            "added_tokens":[],"normalizer":null,"pre_tokenizer":{"type":"Whitespace"},
            "post_processor":null,"decoder":null,
            "model":{"type":"WordLevel","vocab":{"a":0,"b":1},"unk_token":"a"}}"#;
        ServedModel {
            name: name.to_owned(),
            tokenizer: Arc::new(RouterTokenizer::new(tokenizer_json, None, None, vec![]).unwrap()),
            vocab: Arc::new(DetokenizerVocab::from_tokenizer_json(tokenizer_json).unwrap()),
        }
    }

    #[test]
    fn a_request_picks_its_model_by_name_or_default() {
        let models = ServedModels::new(model("a"));
        models.add(model("b")).unwrap();
        assert!(models.add(model("b")).is_err());
        assert!(models.add(model("default")).is_err());
        let pick = |v: Option<Value>| models.resolve(v.as_ref()).map(|m| m.name.clone());
        assert_eq!(pick(None).unwrap(), "a");
        assert_eq!(pick(Some(Value::Null)).unwrap(), "a");
        assert_eq!(pick(Some(json!("default"))).unwrap(), "a");
        assert_eq!(pick(Some(json!("b"))).unwrap(), "b");
        for unknown in [json!("c"), json!(7)] {
            let err = models.resolve(Some(&unknown)).err().unwrap();
            assert_eq!(
                (err.status, err.code.as_deref(), err.param.as_deref()),
                (404, Some("model_not_found"), Some("model"))
            );
            assert!(
                err.message.contains("'a', 'b' or 'default'"),
                "{}",
                err.message
            );
        }
    }

    #[test]
    fn engines_serve_their_own_model_once_there_are_several() {
        let models = ServedModels::new(model("a"));
        // One model: every engine serves it, known or not.
        assert!(models.serves(3, "a"));
        models.add(model("b")).unwrap();
        assert!(!models.serves(3, "a"));
        models.set_engine_model(3, Some("b".into()));
        assert!(models.serves(3, "b") && !models.serves(3, "a"));
        models.set_engine_model(3, None);
        assert!(!models.serves(3, "b"));
    }
}
