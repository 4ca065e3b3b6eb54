use std::borrow::Cow;

use bytes::Bytes;

use super::text::{lone_surrogate, within};
use super::*;
use crate::Reported;
use proptest::prelude::*;

#[test]
fn decodes_openai_request_shapes() {
    let body = r#"{"model":"m","messages":[
            {"role":"system","content":"be brief"},
            {"role":"user","content":[{"type":"text","text":"hi"},{"type":"image_url","image_url":{"url":"data:image/png;base64,AAAA"}}]},
            {"role":"assistant","content":null,"tool_calls":[{"id":"c1","type":"function","function":{"name":"f","arguments":"{}"}}]},
            {"role":"tool","tool_call_id":"c1","content":"42"}],
            "stop":"END","tool_choice":{"type":"function","function":{"name":"f"}},
            "tools":[{"type":"function","function":{"name":"f","parameters":{"type":"object"}}}],
            "response_format":{"type":"json_object"}}"#;
    let r: ChatRequest = serde_json::from_str(body).unwrap();
    r.validate().unwrap();
    assert_eq!(r.stop, Some(Stop(vec!["END".into()])));
    assert_eq!(r.tool_choice, Some(ToolChoice::Function("f".into())));
    assert!(r.has_images());
    assert!(r.wants_json());
    let set: Vec<_> = r.set_params().collect();
    assert_eq!(set, vec!["stop", "tools", "tool_choice", "response_format"]);
}

#[test]
fn content_strings_are_kept_as_written() {
    let body = r#"{"model":"m","messages":[
            {"role":"user","content":"plain text"},
            {"role":"user","content":"a \"quote\"\n\\ \u00e9 \ud83d\ude00 \/"},
            {"role":"user","content":[{"type":"text","text":"in \"parts\""}]}]}"#;
    let sonic: ChatRequest = sonic_rs::from_str(body).unwrap();
    let serde: ChatRequest = serde_json::from_str(body).unwrap();
    let text = |r: &ChatRequest, i: usize| match &r.messages[i].content {
        Some(Content::Text(t)) => t.clone(),
        other => panic!("expected text, got {other:?}"),
    };
    let literal = |t: &Text| match t.out() {
        TextOut::Json(json) => Some(String::from_utf8(json.to_vec()).unwrap()),
        TextOut::Plain(_) => None,
    };
    // sonic-rs hands over the literal as the caller wrote it; serde_json decodes it.
    assert_eq!(literal(&text(&sonic, 0)).as_deref(), Some(r#""plain text""#));
    assert!(matches!(text(&sonic, 0).as_str(), Cow::Borrowed("plain text")));
    let escaped = text(&sonic, 1);
    assert_eq!(literal(&escaped).as_deref(), Some(r#""a \"quote\"\n\\ \u00e9 \ud83d\ude00 \/""#));
    let decoded = "a \"quote\"\n\\ é 😀 /";
    assert_eq!(escaped.as_str(), decoded);
    assert_eq!(escaped.len(), decoded.len());
    assert_eq!(escaped, text(&serde, 1));
    assert_eq!(literal(&text(&serde, 1)), None);
    assert_eq!(text(&serde, 1).out().decoded(), decoded);
    assert_eq!(escaped.out().decoded(), decoded);
    assert_eq!(sonic.messages[2].content, serde.messages[2].content);
    assert_eq!(sonic.text_len(), serde.text_len());
    // Written out by serde, either way, it is the decoded text.
    assert_eq!(serde_json::to_value(&sonic.messages).unwrap(), serde_json::to_value(&serde.messages).unwrap());
    // An escape-only length: `\n` and `\\` are one byte each.
    let t = Text::from_literal(r#""\n\\x""#, true).unwrap();
    assert_eq!((t.len(), &*t.as_str()), (3, "\n\\x"));
}

#[test]
fn texts_decoded_inside_decoding_are_slices_of_the_body() {
    let body = Bytes::from_static(
            br#"{"model":"m","messages":[{"role":"user","content":"as \"written\""},{"role":"user","content":[{"type":"text","text":"a part"}]}]}"#,
        );
    let literal = |c: &Option<Content>| match c {
        Some(Content::Text(t)) => t.out().literal().cloned(),
        Some(Content::Parts(p)) => match &p[0] {
            ContentPart::Text { text } => text.out().literal().cloned(),
            other => panic!("{other:?}"),
        },
        None => None,
    };
    let r: ChatRequest = decoding(&body, |b| sonic_rs::from_slice(b)).unwrap();
    for (m, text) in r.messages.iter().zip([&br#""as \"written\"""#[..], br#""a part""#]) {
        let kept = literal(&m.content).unwrap();
        assert_eq!(&kept[..], text);
        assert!(within(&body, &kept), "a copy, not a slice of the body");
    }
    // Outside `decoding` (and after it) each text is a copy of its own.
    let r: ChatRequest = sonic_rs::from_slice(&body).unwrap();
    assert!(!within(&body, &literal(&r.messages[0].content).unwrap()));
    assert_eq!(r.messages[0].content.as_ref().unwrap().text(), "as \"written\"");
}

#[test]
fn content_that_is_not_text_or_parts_is_refused() {
    for bad in [
        r#""\uZZZZ""#,  // not hex
        r#""\ud800""#,  // a lone surrogate
        r#""\ud800x""#, // a lone surrogate before text
        "5",
        "{}",
        "true",
        r#""a\qb""#,   // not an escape
        "\"a\u{1}b\"", // a control character
    ] {
        let body = format!(r#"{{"model":"m","messages":[{{"role":"user","content":{bad}}}]}}"#);
        assert!(sonic_rs::from_str::<ChatRequest>(&body).is_err(), "sonic-rs took {bad}");
        assert!(serde_json::from_str::<ChatRequest>(&body).is_err(), "serde_json took {bad}");
    }
    let empty: ChatRequest = sonic_rs::from_str(r#"{"model":"m","messages":[{"role":"user","content":""}]}"#).unwrap();
    assert!(!empty.messages[0].content.as_ref().unwrap().has_text());
}

#[test]
fn only_constraining_values_count_as_set() {
    let mut r: ChatRequest = serde_json::from_str(
        r#"{"model":"m","messages":[{"role":"user","content":"x"}],"parallel_tool_calls":true,"n":1,"logprobs":false,
                "tools":[{"type":"function","function":{"name":"f","strict":true}}]}"#,
    )
    .unwrap();
    assert_eq!(r.set_params().collect::<Vec<_>>(), vec!["tools", "tools.function.strict"]);
    r.parallel_tool_calls = Some(false);
    assert!(r.set_params().any(|p| p == "parallel_tool_calls"));
    r.clear_param("tools.function.strict");
    assert!(!r.set_params().any(|p| p == "tools.function.strict"));
    assert!(r.has_tools(), "clearing `strict` keeps the tools");
}

#[test]
fn validation_names_the_field() {
    let r: ChatRequest = serde_json::from_str(r#"{"model":"m","messages":[{"role":"tool","content":"x"}]}"#).unwrap();
    let e = r.validate().unwrap_err();
    assert_eq!(e.param(), Some("messages[0].tool_call_id"));
}

#[test]
fn data_urls_split() {
    let u = ImageUrl { url: "data:image/jpeg;base64,QUJD".into(), detail: None };
    assert_eq!(u.as_data(), Some(("image/jpeg", "QUJD")));
}

/// A Responses `input` with a lone surrogate, even in a field no walk reads, is refused where
/// it is decoded, as sonic-rs and serde_json refuse one in a string they decode; a pair, or
/// an escaped backslash before a `u`, is not one.
#[test]
fn a_json_text_holds_no_lone_surrogate() {
    for refused in [
        r#"[{"type":"reasoning","summary":"lone \ud800 in a field the walk skips"}]"#,
        r#"[{"type":"reasoning","summary":"\udc00"}]"#,
    ] {
        assert!(sonic_rs::from_str::<JsonText>(refused).is_err(), "{refused}");
    }
    let pairs = r#"[{"content":"\ud83d\ude00 \\ud800 \\\ud83d\ude00","id":"\\ud800"}]"#;
    assert!(sonic_rs::from_str::<JsonText>(pairs).is_ok());
}

proptest! {
    /// A lone surrogate is found where serde_json finds one, and nowhere else.
    #[test]
    fn lone_surrogates_are_what_serde_json_refuses(tokens in proptest::collection::vec(prop_oneof![
        Just("x"), Just(r"\\"), Just(r"\n"), Just(r"\u0041"), Just(r"\ud83d"), Just(r"\ude00"),
        Just(r"\ud83d\ude00"), Just("u"), Just("d800"),
    ], 0..8)) {
        let literal = format!("\"{}\"", tokens.concat());
        let lone = lone_surrogate(literal.as_bytes());
        prop_assert_eq!(lone, serde_json::from_str::<String>(&literal).is_err(), "{}", literal);
    }
}
