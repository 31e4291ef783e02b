use super::*;

pub(crate) fn byte_level_json() -> String {
    serde_json::json!({
        "model": {"type": "BPE", "vocab": {"H": 0, "ello": 1, "Ġworld": 2, "Ã": 3, "©": 4, "Ċ": 5}, "merges": []},
        "decoder": {"type": "ByteLevel", "add_prefix_space": true, "trim_offsets": true, "use_regex": true},
        "added_tokens": [{"id": 6, "content": "<|im_end|>", "special": true}, {"id": 7, "content": "<tool>", "special": false}],
    })
    .to_string()
}

pub(crate) fn sentencepiece_json() -> String {
    serde_json::json!({
        "model": {"type": "BPE", "byte_fallback": true, "vocab": {"<s>": 0, "▁Hello": 1, "▁world": 2, "<0xE4>": 3, "<0xB8>": 4, "<0xAD>": 5, "!": 6, "▁": 7}, "merges": []},
        "decoder": {"type": "Sequence", "decoders": [
            {"type": "Replace", "pattern": {"String": "▁"}, "content": " "},
            {"type": "ByteFallback"}, {"type": "Fuse"},
            {"type": "Strip", "content": " ", "start": 1, "stop": 0}]},
        "added_tokens": [{"id": 0, "content": "<s>", "special": true}],
    })
    .to_string()
}

#[test]
fn byte_level_vocab() {
    let v = DetokenizerVocab::from_tokenizer_json(&byte_level_json()).unwrap();
    assert_eq!(v.len(), 8);
    assert_eq!(v.token_bytes(2), Some(&b" world"[..]));
    assert_eq!(v.token_bytes(3), Some(&[0xC3u8][..]));
    assert_eq!(v.token_bytes(6), Some(&b"<|im_end|>"[..]));
    assert!(v.is_special(6) && !v.is_special(7));
    assert_eq!(v.token_bytes(8), None);
    assert_eq!(v.strip_leading_spaces(), 0);
}

#[test]
fn sentencepiece_vocab() {
    let v = DetokenizerVocab::from_tokenizer_json(&sentencepiece_json()).unwrap();
    assert_eq!(v.token_bytes(1), Some(&b" Hello"[..]));
    assert_eq!(v.token_bytes(3), Some(&[0xE4u8][..]));
    assert_eq!(v.strip_leading_spaces(), 1);
}

#[test]
fn unigram_and_metaspace() {
    let doc = serde_json::json!({
        "model": {"type": "Unigram", "vocab": [["<unk>", 0.0], ["▁a", -1.0], ["<0x41>", -2.0]]},
        "decoder": {"type": "Metaspace", "replacement": "▁", "prepend_scheme": "always", "split": true},
    });
    let v = DetokenizerVocab::from_tokenizer_json(&doc.to_string()).unwrap();
    assert_eq!(v.token_bytes(1), Some(&b" a"[..]));
    assert_eq!(
        v.token_bytes(2),
        Some(&b"<0x41>"[..]),
        "Metaspace alone has no byte fallback"
    );
    assert_eq!(v.strip_leading_spaces(), 1);
}

#[test]
fn bad_documents_are_errors() {
    for doc in [
        "not json",
        "{}",
        r#"{"model": {"type": "WordPiece", "vocab": {}}}"#,
        r#"{"model": {"type": "BPE", "vocab": {"a": -1}}}"#,
        r#"{"model": {"type": "BPE", "vocab": {"a": 99999999999}}}"#,
        r#"{"model": {"type": "BPE", "vocab": {}}, "decoder": {"type": "CTC"}}"#,
    ] {
        assert!(
            matches!(
                DetokenizerVocab::from_tokenizer_json(doc),
                Err(RouterCoreError::InvalidTokenizer(_))
            ),
            "{doc}"
        );
    }
}
