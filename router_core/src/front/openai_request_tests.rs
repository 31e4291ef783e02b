use super::*;
use serde_json::json;

/// One id per byte of the text; chat = "role:content|" per message.
struct ByteTokenizer;

impl PromptTokenizer for ByteTokenizer {
    fn encode_prompt(&self, text: &str) -> crate::Result<Vec<u32>> {
        Ok(text.bytes().map(u32::from).collect())
    }

    fn encode_chat(&self, messages: &[ChatMessage]) -> crate::Result<Vec<u32>> {
        let text: String = messages
            .iter()
            .map(|m| format!("{}:{}|", m.role, m.content))
            .collect();
        self.encode_prompt(&text)
    }

    fn vocab_size(&self) -> usize {
        256
    }

    fn max_token_bytes(&self) -> usize {
        1
    }
}

fn limits() -> RequestLimits {
    RequestLimits {
        served_model: "m".into(),
        max_context: 64,
        default_temperature: 1.0,
        default_top_p: 1.0,
    }
}

fn parse(body: Value) -> Result<GenerationRequest, ApiError> {
    parse_generation(&body, RequestKind::Completion, &ByteTokenizer, &limits())
}

fn param(body: Value) -> String {
    match parse(body) {
        Err(err) => {
            assert_eq!(err.status, 400);
            err.param.unwrap_or_default()
        }
        Ok(req) => panic!("expected a 400, got {req:?}"),
    }
}

#[test]
fn a_plain_completion() {
    let req = parse(
        json!({"prompt": "hi", "max_tokens": 3, "stop": "x", "seed": 7,
                           "top_k": -1, "top_p": 0, "stream": true,
                           "stream_options": {"include_usage": true},
                           "slo": {"ttft_ms": 100}, "ignore_eos": true}),
    )
    .unwrap();
    assert_eq!(req.tokens, vec![104, 105]);
    assert_eq!(req.sampling.max_tokens, 3);
    assert_eq!(req.sampling.stop, vec!["x".to_string()]);
    assert_eq!((req.sampling.top_p, req.sampling.top_k), (1.0, 0));
    assert_eq!(req.sampling.seed, Some(7));
    assert!(req.stream && req.include_usage && req.sampling.ignore_eos);
    assert_eq!((req.slo_ttft_ms, req.slo_tpot_ms), (Some(100.0), None));
}

#[test]
fn defaults_and_batches_of_one() {
    let req = parse(json!({"prompt": [[1, 2, 3]]})).unwrap();
    assert_eq!(req.tokens, vec![1, 2, 3]);
    assert_eq!(req.sampling.max_tokens, 16);
    assert_eq!(req.sampling.temperature, 1.0);
    let chat = parse_generation(
        &json!({"messages": [{"role": "developer", "content": "a"}]}),
        RequestKind::Chat,
        &ByteTokenizer,
        &limits(),
    );
    assert_eq!(chat.unwrap_err().param.as_deref(), Some("max_tokens")); // 256 > 64
    let chat = parse_generation(
        &json!({"messages": [{"role": "developer", "content": "a"}], "max_tokens": 4}),
        RequestKind::Chat,
        &ByteTokenizer,
        &limits(),
    )
    .unwrap();
    assert_eq!(
        chat.tokens,
        "system:a|".bytes().map(u32::from).collect::<Vec<_>>()
    );
}

#[test]
fn the_python_fronts_400s() {
    let cases = [
        (json!({"prompt": "x", "max_tokens": 0}), "max_tokens"),
        (json!({"prompt": "x", "max_tokens": "ten"}), "max_tokens"),
        (json!({"prompt": "x", "max_tokens": 1.0}), "max_tokens"),
        (json!({"prompt": "x", "temperature": -1}), "temperature"),
        (json!({"prompt": "x", "top_p": 2}), "top_p"),
        (json!({"prompt": 17}), "prompt"),
        (json!({"prompt": [1, 2, -5]}), "prompt"),
        (json!({"prompt": [1, 300]}), "prompt"),
        (json!({"prompt": ""}), "prompt"),
        (
            json!({"prompt": "x", "stop": ["a", "b", "c", "d", "e"]}),
            "stop",
        ),
        (json!({"prompt": "x", "stop": [""]}), "stop"),
        (
            json!({"prompt": "x", "stream_options": {"include_usage": true}}),
            "stream_options",
        ),
        (
            json!({"prompt": "x", "max_tokens": 1_000_000_000}),
            "max_tokens",
        ),
        (
            json!({"prompt": "x", "presence_penalty": 0.5}),
            "presence_penalty",
        ),
        (
            json!({"prompt": "x", "repetition_penalty": 1.2}),
            "repetition_penalty",
        ),
        (json!({"prompt": "x", "logprobs": 2}), "logprobs"),
        (json!({"prompt": "x", "top_logprobs": 2}), "logprobs"),
        (json!({"prompt": "x", "n": 2}), "n"),
        (json!({"prompt": "x", "echo": true}), "n"),
        (json!({"prompt": "x", "stream": "yes"}), "stream"),
        (json!({"prompt": "x", "slo": 5}), "slo"),
        (json!({"prompt": "x", "slo": {"ttft_ms": -1}}), "ttft_ms"),
        (json!({"prompt": "x", "min_tokens": 20}), "min_tokens"),
        (json!({"prompt": "x", "max_tokens": 70}), "max_tokens"),
        (
            json!({"prompt": "x", "max_completion_tokens": 0, "max_tokens": 2}),
            "max_completion_tokens",
        ),
    ];
    for (body, expect) in cases {
        assert_eq!(param(body.clone()), expect, "{body}");
    }
    let model = parse(json!({"prompt": "x", "model": "gpt-9"})).unwrap_err();
    assert_eq!(model.code.as_deref(), Some("model_not_found"));
    assert_eq!((model.status, model.error_type), (404, "not_found_error"));
    assert!(model.message.contains("'gpt-9'"), "{}", model.message);
    let ctx = parse(json!({"prompt": "xxxx", "max_tokens": 61})).unwrap_err();
    assert_eq!(ctx.code.as_deref(), Some("context_length_exceeded"));
    let not_object = parse(json!([1])).unwrap_err();
    assert_eq!(not_object.message, "request body must be a JSON object");
}

#[test]
fn neutral_values_are_accepted() {
    parse(
        json!({"prompt": "x", "presence_penalty": 0, "frequency_penalty": false,
                 "repetition_penalty": 1, "logprobs": false, "top_logprobs": 0, "n": 1,
                 "echo": false, "slo": null, "stream_options": null, "model": "default"}),
    )
    .unwrap();
    parse(json!({"prompt": "x", "model": "m", "slo": {}, "max_completion_tokens": 5})).unwrap();
}

/// A tokenizer whose work counts: a prompt that cannot fit is refused before it is tokenised.
struct CountingTokenizer(std::cell::Cell<usize>);

impl PromptTokenizer for CountingTokenizer {
    fn encode_prompt(&self, text: &str) -> crate::Result<Vec<u32>> {
        self.0.set(self.0.get() + 1);
        ByteTokenizer.encode_prompt(text)
    }

    fn encode_chat(&self, messages: &[ChatMessage]) -> crate::Result<Vec<u32>> {
        self.0.set(self.0.get() + 1);
        ByteTokenizer.encode_chat(messages)
    }

    fn vocab_size(&self) -> usize {
        256
    }

    fn max_token_bytes(&self) -> usize {
        2
    }
}

#[test]
fn prompts_that_cannot_fit_are_refused_untokenised() {
    let tok = CountingTokenizer(std::cell::Cell::new(0));
    let too_long = "x".repeat(129); // > 64 tokens * 2 bytes
    let cases = [
        (
            RequestKind::Completion,
            json!({"prompt": too_long}),
            "prompt",
            "129 bytes",
        ),
        (
            RequestKind::Completion,
            json!({"prompt": vec![1; 65]}),
            "prompt",
            "65 token ids",
        ),
        (
            RequestKind::Chat,
            json!({"messages": [{"role": "user", "content": "x".repeat(100)},
                                {"role": "user", "content": "x".repeat(29)}]}),
            "messages",
            "129 bytes",
        ),
    ];
    for (kind, body, param, what) in cases {
        let err = parse_generation(&body, kind, &tok, &limits()).unwrap_err();
        assert_eq!(err.code.as_deref(), Some("context_length_exceeded"));
        assert_eq!(err.param.as_deref(), Some(param));
        assert!(err.message.contains(what), "{}", err.message);
    }
    assert_eq!(tok.0.get(), 0, "nothing was tokenised");
    // At the bound the prompt is tokenised (and then judged on its real length).
    let at_bound = json!({"prompt": "x".repeat(128)});
    assert!(parse_generation(&at_bound, RequestKind::Completion, &tok, &limits()).is_err());
    assert_eq!(tok.0.get(), 1);
}

#[test]
fn a_tool_call_the_client_requires_is_refused() {
    let tools = json!([{"type": "function", "function": {"name": "f", "parameters": {}}}]);
    for body in [
        json!({"prompt": "x", "tools": tools, "tool_choice": "required"}),
        json!({"prompt": "x", "tools": tools,
               "tool_choice": {"type": "function", "function": {"name": "f"}}}),
    ] {
        assert_eq!(param(body), "tool_choice");
    }
    for body in [
        json!({"prompt": "x", "tools": tools, "tool_choice": "auto"}),
        json!({"prompt": "x", "tool_choice": "required"}),
    ] {
        assert!(parse(body).is_ok());
    }
}

#[test]
fn response_formats_reach_the_sampling() {
    let format_of = |format: Value| parse(json!({"prompt": "x", "response_format": format}));
    let schema = json!({"type": "object", "properties": {"a": {"type": "integer"}}});
    let strict = format_of(json!({"type": "json_schema",
                                  "json_schema": {"name": "x", "strict": true, "schema": schema}}));
    assert_eq!(
        strict.unwrap().sampling.response_format,
        Some(ResponseFormat::JsonSchema(schema.to_string()))
    );
    let object = format_of(json!({"type": "json_object"})).unwrap();
    assert_eq!(
        object.sampling.response_format,
        Some(ResponseFormat::JsonObject)
    );
    let text = format_of(json!({"type": "text"})).unwrap();
    assert_eq!(text.sampling.response_format, None);
}

#[test]
fn priority_reaches_the_sampling_and_is_bounded() {
    let priority_of = |body: Value| parse(body).unwrap().sampling.priority;
    assert_eq!(priority_of(json!({"prompt": "x"})), 0);
    assert_eq!(priority_of(json!({"prompt": "x", "priority": null})), 0);
    assert_eq!(priority_of(json!({"prompt": "x", "priority": -100})), -100);
    assert_eq!(priority_of(json!({"prompt": "x", "priority": 100})), 100);
    for bad in [
        json!(101),
        json!(-101),
        json!(1.5),
        json!("0"),
        json!(true),
        json!(u64::MAX),
    ] {
        assert_eq!(param(json!({"prompt": "x", "priority": bad})), "priority");
    }
}

#[test]
fn malformed_response_formats_are_400s() {
    let huge: Map<String, Value> = (0..4000)
        .map(|i| (format!("field{i}"), json!({"type": "string"})))
        .collect();
    for format in [
        json!("json"),
        json!({"kind": "json_object"}),
        json!({"type": "yaml"}),
        json!({"type": "json_schema"}),
        json!({"type": "json_schema", "json_schema": {"name": "x"}}),
        json!({"type": "json_schema", "json_schema": {"schema": "not an object"}}),
        json!({"type": "json_schema", "json_schema": {"schema": {}, "strict": "yes"}}),
        json!({"type": "json_schema",
               "json_schema": {"schema": {"type": "object", "properties": huge}}}),
    ] {
        let body = json!({"prompt": "x", "response_format": format});
        assert_eq!(param(body), "response_format", "{format}");
    }
}

/// The front checks only JSON types and widths: for a value of the right type, the 400 a client
/// gets is the sampling rules' own message (the one an engine gives for the same value: it applies
/// the same rules through the binding, switchyard_engine_api/sampling_params.py).
#[test]
fn sampling_ranges_are_the_rules_own() {
    let rules = |temperature, top_p, top_k, max_tokens, min_tokens, seed, stop: &[Option<&str>]| {
        match crate::sampling::check_sampling(&crate::sampling::SamplingFields {
            temperature,
            top_p,
            top_k,
            max_tokens,
            min_tokens,
            seed,
            stop_token_ids: &[],
            stop,
            priority: 0,
        }) {
            Err(crate::RouterCoreError::InvalidRequest { param, message }) => (param, message),
            other => panic!("expected the rules to refuse, got {other:?}"),
        }
    };
    let five = [Some("a"); 5];
    let cases = [
        (
            json!({"prompt": "x", "max_tokens": 4, "temperature": -0.5}),
            rules(-0.5, 1.0, 0, 4, 0, None, &[]),
        ),
        (
            json!({"prompt": "x", "max_tokens": 4, "temperature": -1e-5}),
            rules(-1e-5, 1.0, 0, 4, 0, None, &[]),
        ),
        (
            json!({"prompt": "x", "max_tokens": 4, "top_p": 3}),
            rules(1.0, 3.0, 0, 4, 0, None, &[]),
        ),
        (
            json!({"prompt": "x", "max_tokens": 4, "top_k": -2}),
            rules(1.0, 1.0, -2, 4, 0, None, &[]),
        ),
        (
            json!({"prompt": "x", "max_tokens": 0}),
            rules(1.0, 1.0, 0, 0, 0, None, &[]),
        ),
        (
            json!({"prompt": "x", "max_tokens": -3}),
            rules(1.0, 1.0, 0, -3, 0, None, &[]),
        ),
        (
            json!({"prompt": "x", "max_tokens": 4, "min_tokens": 5}),
            rules(1.0, 1.0, 0, 4, 5, None, &[]),
        ),
        (
            json!({"prompt": "x", "max_tokens": 4, "seed": 1u64 << 63}),
            rules(1.0, 1.0, 0, 4, 0, Some(1 << 63), &[]),
        ),
        (
            json!({"prompt": "x", "max_tokens": 4, "stop": ""}),
            rules(1.0, 1.0, 0, 4, 0, None, &[Some("")]),
        ),
        (
            json!({"prompt": "x", "max_tokens": 4, "stop": ["a", 5]}),
            rules(1.0, 1.0, 0, 4, 0, None, &[Some("a"), None]),
        ),
        (
            json!({"prompt": "x", "max_tokens": 4, "stop": ["a", "a", "a", "a", "a"]}),
            rules(1.0, 1.0, 0, 4, 0, None, &five),
        ),
    ];
    for (body, (param, message)) in cases {
        let err = parse(body.clone()).unwrap_err();
        assert_eq!(err.status, 400, "{body}");
        assert_eq!(
            (err.param.as_deref(), err.message.as_str()),
            (Some(param.as_str()), message.as_str()),
            "{body}"
        );
    }
    // Types and widths stay the front's: they never reach an engine's rules.
    assert_eq!(param(json!({"prompt": "x", "top_k": 1u64 << 31})), "top_k");
    assert_eq!(param(json!({"prompt": "x", "stop": 5})), "stop");
}
