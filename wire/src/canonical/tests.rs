use std::borrow::Cow;

use bytes::Bytes;

use super::text::within;
use super::*;
use crate::Reported;

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
fn a_literal_is_kept_as_written_and_read_decoded() {
    let body = Bytes::from_static(br#"{"a":"plain text","b":"a \"quote\"\n\\ \u00e9 \ud83d\ude00 \/"}"#);
    let text = std::str::from_utf8(&body).unwrap();
    let plain = Text::from_literal(&body, &text[5..17], false).unwrap();
    assert!(matches!(plain.as_str(), Cow::Borrowed("plain text")));
    let literal = |t: &Text| t.out().literal().cloned().unwrap();
    assert!(within(&body, &literal(&plain)), "a slice of the body, not a copy");
    let escaped = Text::from_literal(&body, &text[22..text.len() - 1], true).unwrap();
    assert_eq!(&literal(&escaped)[..], br#""a \"quote\"\n\\ \u00e9 \ud83d\ude00 \/""#);
    let decoded = "a \"quote\"\n\\ é 😀 /";
    assert_eq!((escaped.as_str(), escaped.len()), (Cow::Borrowed(decoded), decoded.len()));
    assert_eq!(escaped, Text::from(decoded.to_owned()));
    // Not in the body: a copy of its own.
    let elsewhere = Text::from_literal(&body, r#""x""#, false).unwrap();
    assert!(!within(&body, &literal(&elsewhere)));
    // An escape-only length: `\n` and `\\` are one byte each.
    let t = Text::from_literal(&body, r#""\n\\x""#, true).unwrap();
    assert_eq!((t.len(), &*t.as_str()), (3, "\n\\x"));
    // A `\u` escape that is no character is refused.
    for bad in [r#""\uZZZZ""#, r#""\ud800""#, r#""\ud800x""#] {
        assert!(Text::from_literal(&body, bad, true).is_err(), "{bad}");
    }
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
