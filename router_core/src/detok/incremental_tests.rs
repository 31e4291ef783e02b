use super::*;
use crate::detok::vocab::tests::{byte_level_json, sentencepiece_json};
use proptest::prelude::*;

fn vocab(json: &str) -> Arc<DetokenizerVocab> {
    Arc::new(DetokenizerVocab::from_tokenizer_json(json).unwrap())
}

fn detok(json: &str, stop: &[&str]) -> IncrementalDetokenizer {
    IncrementalDetokenizer::new(
        vocab(json),
        stop.iter().map(|s| (*s).to_owned()).collect(),
        true,
    )
    .unwrap()
}

#[test]
fn utf8_split_across_tokens_is_held() {
    let mut d = detok(&byte_level_json(), &[]);
    assert_eq!(d.push(&[0, 1, 3]).unwrap(), ("Hello".to_owned(), false));
    assert_eq!(d.push(&[4]).unwrap(), ("é".to_owned(), false));
    assert_eq!(d.push(&[3]).unwrap(), (String::new(), false));
    assert_eq!(d.flush(), "\u{FFFD}");
    assert_eq!(d.text(), "Helloé\u{FFFD}");
}

#[test]
fn invalid_bytes_become_replacement_characters() {
    let mut d = detok(&byte_level_json(), &[]);
    // 0xC3 followed by 'H' is invalid: the lead byte becomes U+FFFD, 'H' survives.
    assert_eq!(d.push(&[3, 0]).unwrap().0, "\u{FFFD}H");
}

#[test]
fn special_tokens_skipped_or_kept() {
    let mut d = detok(&byte_level_json(), &[]);
    assert_eq!(d.push(&[0, 6, 7]).unwrap().0, "H<tool>");
    let mut keep = IncrementalDetokenizer::new(vocab(&byte_level_json()), vec![], false).unwrap();
    assert_eq!(keep.push(&[0, 6]).unwrap().0, "H<|im_end|>");
}

#[test]
fn sentencepiece_strips_one_leading_space_and_joins_fallback_bytes() {
    let mut d = detok(&sentencepiece_json(), &[]);
    assert_eq!(d.push(&[0, 1]).unwrap().0, "Hello");
    assert_eq!(d.push(&[2, 3, 4]).unwrap().0, " world");
    assert_eq!(d.push(&[5, 6]).unwrap().0, "中!");
    let mut spaces = detok(&sentencepiece_json(), &[]);
    assert_eq!(spaces.push(&[7, 7, 1]).unwrap().0, "  Hello");
}

#[test]
fn stop_string_across_chunks() {
    let mut d = detok(&byte_level_json(), &["llo wor"]);
    assert_eq!(d.push(&[0]).unwrap(), ("H".to_owned(), false));
    // "ello" ends with "llo", a prefix of the stop string: held back.
    assert_eq!(d.push(&[1]).unwrap(), ("e".to_owned(), false));
    assert_eq!(d.push(&[2]).unwrap(), (String::new(), true));
    assert_eq!(d.text(), "He");
    assert_eq!(d.stop_string(), Some("llo wor"));
    assert_eq!(d.push(&[0]).unwrap(), (String::new(), true));
    assert_eq!(d.flush(), "");
}

#[test]
fn held_prefix_is_released_when_disambiguated_or_flushed() {
    let mut d = detok(&byte_level_json(), &["Hello!"]);
    assert_eq!(d.push(&[0, 1]).unwrap(), (String::new(), false));
    assert_eq!(d.push(&[2]).unwrap(), ("Hello world".to_owned(), false));
    let mut e = detok(&byte_level_json(), &["Hello!"]);
    e.push(&[0, 1]).unwrap();
    assert_eq!(e.flush(), "Hello");
}

#[test]
fn bad_input_is_an_error() {
    let mut d = detok(&byte_level_json(), &[]);
    assert!(d.push(&[0, 99]).is_err());
    assert_eq!(d.text(), "", "nothing consumed from a rejected call");
    // An empty stop string is ignored rather than stopping at once.
    let mut empty =
        IncrementalDetokenizer::new(vocab(&byte_level_json()), vec![String::new()], true).unwrap();
    assert_eq!(empty.push(&[0]).unwrap(), ("H".to_owned(), false));
}

/// What a whole-sequence decode gives: every token's bytes, one leading space stripped
/// (SentencePiece), lossy UTF-8, cut before the stop string that completes first.
fn reference(v: &DetokenizerVocab, ids: &[u32], stop: &[String]) -> String {
    let mut bytes = Vec::new();
    for &id in ids {
        if !v.is_special(id) {
            bytes.extend_from_slice(v.token_bytes(id).unwrap());
        }
    }
    let mut text = String::from_utf8_lossy(&bytes).into_owned();
    if v.strip_leading_spaces() > 0 && text.starts_with(' ') {
        text.remove(0);
    }
    // The stop string that completes first (smallest end, then earliest start).
    match stop
        .iter()
        .filter_map(|s| text.find(s.as_str()).map(|at| (at + s.len(), at)))
        .min()
    {
        Some((_, at)) => text[..at].to_owned(),
        None => text,
    }
}

proptest! {
    #![proptest_config(ProptestConfig::with_cases(400))]
    #[test]
    fn chunked_output_equals_whole_decode(
        ids in prop::collection::vec(0u32..8, 0..30),
        cuts in prop::collection::vec(0usize..30, 0..6),
        stop in prop::collection::vec("[Hel owrd\u{FFFD}é!]{1,4}", 0..3),
        sentencepiece in any::<bool>(),
    ) {
        let json = if sentencepiece { sentencepiece_json() } else { byte_level_json() };
        let v = vocab(&json);
        let mut d = IncrementalDetokenizer::new(v.clone(), stop.clone(), true).unwrap();
        let mut cuts: Vec<usize> = cuts.into_iter().map(|c| c.min(ids.len())).collect();
        cuts.push(ids.len());
        cuts.sort_unstable();
        let (mut out, mut start) = (String::new(), 0);
        for cut in cuts {
            let (text, _) = d.push(&ids[start..cut]).unwrap();
            out.push_str(&text);
            start = cut;
        }
        out.push_str(&d.flush());
        prop_assert_eq!(&out, d.text());
        prop_assert_eq!(out, reference(&v, &ids, &stop));
    }
}
