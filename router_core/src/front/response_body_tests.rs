use super::*;
use crate::detok::vocab::tests::byte_level_json;
use crate::front::api_error::ApiError;

// byte_level_json's vocab: 0 "H", 1 "ello", 2 " world", 3/4 the two bytes of "é", 5 "\n".
fn body(kind: RequestKind, stream: bool, stop: &[&str]) -> ResponseBody {
    let vocab = Arc::new(DetokenizerVocab::from_tokenizer_json(&byte_level_json()).unwrap());
    ResponseBody::new(
        vocab,
        stop.iter().map(|s| s.to_string()).collect(),
        kind,
        stream,
        true,
        true,
        "cmpl-1",
        "m",
        7,
    )
    .unwrap()
}

fn events(bytes: &[u8]) -> Vec<Value> {
    let text = std::str::from_utf8(bytes).unwrap();
    text.split("\n\n")
        .filter_map(|e| e.strip_prefix("data: "))
        .filter(|e| *e != "[DONE]")
        .map(|e| serde_json::from_str(e).unwrap())
        .collect()
}

#[test]
fn one_event_per_token_finish_on_the_last() {
    let mut b = body(RequestKind::Completion, true, &[]);
    assert!(b.opening().is_empty());
    let out = b.push(&[0, 1, 2], Some("length")).unwrap();
    let evs = events(&out.bytes);
    let texts: Vec<_> = evs
        .iter()
        .map(|e| e["choices"][0]["text"].clone())
        .collect();
    assert_eq!(texts, vec![json!("H"), json!("ello"), json!(" world")]);
    let finishes: Vec<_> = evs
        .iter()
        .map(|e| e["choices"][0]["finish_reason"].clone())
        .collect();
    assert_eq!(finishes, vec![Value::Null, Value::Null, json!("length")]);
    let end = b.finish(5, 2);
    let usage = events(&end);
    assert_eq!(usage[0]["usage"]["completion_tokens"], 3);
    assert_eq!(
        usage[0]["usage"]["prompt_tokens_details"]["cached_tokens"],
        2
    );
    assert!(end.ends_with(b"data: [DONE]\n\n"));
}

#[test]
fn a_split_character_waits_for_its_second_byte() {
    let mut b = body(RequestKind::Chat, true, &[]);
    assert_eq!(
        events(&b.opening())[0]["choices"][0]["delta"]["role"],
        "assistant"
    );
    assert!(b.push(&[3], None).unwrap().bytes.is_empty());
    let evs = events(&b.push(&[4], None).unwrap().bytes);
    assert_eq!(evs[0]["choices"][0]["delta"]["content"], "é");
}

#[test]
fn stop_strings_across_chunks_and_internal_finishes() {
    let mut b = body(RequestKind::Completion, true, &["lo wo"]);
    let first = b.push(&[0, 1], None).unwrap();
    assert!(!first.stopped);
    let second = b.push(&[2, 5], Some("length")).unwrap();
    assert!(second.stopped);
    let evs = events(&[first.bytes, second.bytes].concat());
    let text: String = evs
        .iter()
        .map(|e| e["choices"][0]["text"].as_str().unwrap())
        .collect();
    assert_eq!(text, "Hel");
    assert_eq!(evs.last().unwrap()["choices"][0]["finish_reason"], "stop");
    assert_eq!(client_finish("handoff"), "stop");
    assert_eq!(client_finish("abort"), "abort");
}

#[test]
fn non_streaming_json_body() {
    let mut b = body(RequestKind::Chat, false, &[]);
    assert!(b.push(&[0], None).unwrap().bytes.is_empty());
    b.push(&[1, 2], Some("length")).unwrap();
    let v: Value = serde_json::from_slice(&b.finish(4, 0)).unwrap();
    assert_eq!(v["object"], "chat.completion");
    assert_eq!(v["choices"][0]["message"]["content"], "Hello world");
    assert_eq!(v["choices"][0]["finish_reason"], "length");
    assert_eq!(v["choices"][0]["token_ids"], json!([0, 1, 2]));
    assert_eq!(v["usage"]["total_tokens"], 7);
    let mut stopped = body(RequestKind::Completion, false, &[" w"]);
    assert!(stopped.push(&[0, 1, 2], None).unwrap().stopped);
    let v: Value = serde_json::from_slice(&stopped.finish(4, 0)).unwrap();
    assert_eq!(
        (
            v["choices"][0]["text"].as_str(),
            v["choices"][0]["finish_reason"].as_str()
        ),
        (Some("Hello"), Some("stop"))
    );
}

#[test]
fn errors_end_the_stream() {
    let err = ApiError::engine_failed("engine error: unknown").with_code("engine_error");
    let bytes = ResponseBody::error_events(&err.body_bytes());
    assert!(bytes.starts_with(b"data: {\"error\""));
    assert!(bytes.ends_with(b"data: [DONE]\n\n"));
}

#[test]
fn streamed_token_ids_ride_with_their_text() {
    // return_token_ids: each event carries the ids of the tokens whose text it carries; the
    // first byte of "é" (3) has no text of its own, so its id waits for the event of 4.
    let mut b = body(RequestKind::Completion, true, &[]);
    let out = b.push(&[0, 3, 4, 2], Some("length")).unwrap();
    let evs = events(&out.bytes);
    let ids: Vec<_> = evs
        .iter()
        .map(|e| e["choices"][0]["token_ids"].clone())
        .collect();
    assert_eq!(ids, vec![json!([0]), json!([3, 4]), json!([2])]);
    // A stop string: the event that ends the stream carries the token that completed it.
    let mut b = body(RequestKind::Completion, true, &["lo w"]);
    let out = b.push(&[0, 1, 2, 5], Some("length")).unwrap();
    let evs = events(&out.bytes);
    let last = &evs[evs.len() - 1]["choices"][0];
    assert_eq!(last["finish_reason"], json!("stop"));
    let streamed: Vec<u64> = evs
        .iter()
        .flat_map(|e| {
            e["choices"][0]["token_ids"]
                .as_array()
                .cloned()
                .unwrap_or_default()
        })
        .map(|id| id.as_u64().unwrap())
        .collect();
    assert_eq!(streamed, vec![0, 1, 2]);
}
