//! The canonical decode of a Chat Completions body by walking its conversation (`skim`) rather
//! than running serde over it: the translated path's decode at the sizes agents send.
//!
//! At ~50 KB of messages, serde's pass (sonic-rs through `serde_ignored`) cost ~135,000
//! instructions, most of them per message and per string rather than per byte of text. Here the
//! `messages` array is walked by hand: each message's `role`, `content`, `name`, `tool_call_id`
//! and `refusal` are read from their spans, a string content kept as the caller's literal (as
//! `canonical::Text` keeps it), content parts and tool calls decoded by sonic-rs from their own
//! spans. The other members are copied into a small body with `"messages":[]` and decoded by
//! serde as before.
//!
//! The walk gives either exactly what the whole decode gives or `None`, and then the whole
//! decode runs (its errors name the field at fault): on anything it does not read exactly as
//! serde would (a key it does not know in a message, a duplicate, an escaped role, a value of an
//! unexpected type, a string serde would refuse), and on every error. The property test below
//! holds the two to the same result.

use ax_protocol::config::ParamsMode;

use crate::canonical::{ChatRequest, Content, Message, Role, ToolCall};
use crate::json::skim::{key_bytes, string_text, Skim, SkimError};

/// The request, when the walk reads it exactly; `None`: decode it whole.
pub fn decode_chat(bytes: &[u8], mode: ParamsMode) -> Option<ChatRequest> {
    let text = simdutf8::basic::from_utf8(bytes).ok()?;
    let mut s = Skim::new(bytes);
    if s.next_byte() != Some(b'{') {
        return None;
    }
    let mut messages = None;
    let mut rest = Vec::with_capacity(128);
    rest.extend_from_slice(b"{\"messages\":[]");
    s.object(|k, escaped, s| {
        if key_bytes(k, escaped).as_deref() == Some(b"messages") {
            if messages.is_some() {
                return Err(SkimError::declined());
            }
            messages = Some(conversation(s, text)?);
        } else {
            s.copy_member(k, &mut rest)?;
        }
        Ok(())
    })
    .ok()?;
    s.end().ok()?;
    let messages = messages?;
    rest.push(b'}');
    let (mut req, extra) = crate::json::decode::json_with_extra::<ChatRequest>(&rest, mode).ok()?;
    req.messages = messages;
    req.extra = extra;
    Some(req)
}

fn conversation(s: &mut Skim<'_>, text: &str) -> Result<Vec<Message>, SkimError> {
    let mut out = Vec::new();
    s.array(|s| {
        out.push(message(s, text)?);
        Ok(())
    })?;
    Ok(out)
}

fn message(s: &mut Skim<'_>, text: &str) -> Result<Message, SkimError> {
    if s.next_byte() != Some(b'{') {
        return Err(SkimError::declined());
    }
    let mut role = None;
    let mut m = Message::new(Role::User);
    let mut seen = 0u8;
    s.object(|k, escaped, s| {
        let key = key_bytes(k, escaped).ok_or_else(SkimError::declined)?;
        let bit = match &*key {
            b"role" => 1,
            b"content" => 2,
            b"name" => 4,
            b"tool_call_id" => 8,
            b"refusal" => 16,
            b"tool_calls" => 32,
            _ => return Err(SkimError::declined()),
        };
        if seen & bit != 0 {
            return Err(SkimError::declined());
        }
        seen |= bit;
        match bit {
            1 => role = Some(role_of(s, text)?),
            2 => m.content = content(s, text)?,
            4 => m.name = string(s, text)?,
            8 => m.tool_call_id = string(s, text)?,
            16 => m.refusal = string(s, text)?,
            _ => {
                m.tool_calls = if s.null() {
                    None
                } else {
                    let span = s.value()?;
                    Some(crate::json::decode::exact::<Vec<ToolCall>>(&text[span]).ok_or_else(SkimError::declined)?)
                }
            }
        }
        Ok(())
    })?;
    m.role = role.ok_or_else(SkimError::declined)?;
    Ok(m)
}

fn role_of(s: &mut Skim<'_>, text: &str) -> Result<Role, SkimError> {
    let (span, escaped) = s.string()?;
    if escaped {
        return Err(SkimError::declined());
    }
    Role::named(&text.as_bytes()[span.start + 1..span.end - 1]).ok_or_else(SkimError::declined)
}

/// A message's content: `null`, a string kept as the caller's literal, or parts.
fn content(s: &mut Skim<'_>, text: &str) -> Result<Option<Content>, SkimError> {
    if s.null() {
        return Ok(None);
    }
    let (span, escaped) = match s.next_byte() {
        Some(b'"') => s.checked_string()?,
        Some(b'[') => (s.value()?, true),
        _ => return Err(SkimError::declined()),
    };
    Content::from_json(&text[span], escaped).map(Some).map_err(|_| SkimError::declined())
}

/// An optional string (`name`, `tool_call_id`, `refusal`), decoded.
fn string(s: &mut Skim<'_>, text: &str) -> Result<Option<String>, SkimError> {
    if s.null() {
        return Ok(None);
    }
    let (span, escaped) = s.checked_string()?;
    string_text(&text[span], escaped).map(|t| Some(t.into_owned())).ok_or_else(SkimError::declined)
}

#[cfg(test)]
mod tests {
    use super::*;
    use proptest::prelude::*;

    /// The whole decode's result, for comparison: the request as JSON, and its unknown fields.
    fn whole(body: &[u8], mode: ParamsMode) -> Result<(serde_json::Value, String), String> {
        let bytes = bytes::Bytes::copy_from_slice(body);
        crate::canonical::decoding(&bytes, |b| super::super::caller::decode_whole(b, mode))
            .map(|r| (serde_json::to_value(&r).unwrap(), format!("{:?}", r.extra)))
            .map_err(|e| e.to_string())
    }

    fn walked(body: &[u8], mode: ParamsMode) -> Option<(serde_json::Value, String)> {
        let bytes = bytes::Bytes::copy_from_slice(body);
        crate::canonical::decoding(&bytes, |b| decode_chat(b, mode))
            .map(|r| (serde_json::to_value(&r).unwrap(), format!("{:?}", r.extra)))
    }

    #[test]
    fn a_plain_conversation_is_walked_and_reads_as_the_whole_decode() {
        let body = br#"{"model":"m","max_tokens":5,"messages":[{"role":"system","content":"be \"brief\"\n"},
            {"role":"user","content":[{"type":"text","text":"hi"}],"name":"a\u00e9"},
            {"role":"assistant","content":null,"tool_calls":[{"id":"c1","type":"function","function":{"name":"f","arguments":"{}"}}]},
            {"role":"tool","tool_call_id":"c1","content":"42"}],"stream":false,"x_extra":{"a":[1]}}"#;
        let walked = walked(body, ParamsMode::Lenient).expect("walked");
        assert_eq!(Ok(walked), whole(body, ParamsMode::Lenient));
    }

    #[test]
    fn what_the_walk_does_not_read_exactly_goes_to_the_whole_decode() {
        for body in [
            r#"{"model":"m","messages":[{"role":"user","content":"a","extra":1}]}"#,
            r#"{"model":"m","messages":[{"role":"user","role":"user","content":"a"}]}"#,
            r#"{"model":"m","messages":[{"role":"us\u0065r","content":"a"}]}"#,
            r#"{"model":"m","messages":[{"role":"user","content":"a\x"}]}"#,
            "{\"model\":\"m\",\"messages\":[{\"role\":\"user\",\"content\":\"a\u{1}\"}]}",
            r#"{"model":"m","messages":[{"content":"a"}]}"#,
            r#"{"model":"m","messages":[],"messages":[]}"#,
            r#"{"model":"m","messages":[{"role":"user","content":5}]}"#,
            r#"{"model":"m","messages":[{"role":"user","content":"a"}]} x"#,
            r#"{"model":"m","model":"n","messages":[]}"#,
        ] {
            assert_eq!(walked(body.as_bytes(), ParamsMode::Strict), None, "{body}");
        }
    }

    fn arb_string() -> impl Strategy<Value = String> {
        prop_oneof![
            6 => Just("\"plain text\"".to_owned()),
            6 => Just(r#""esc \"q\" \\ \/ \b\f\n\r\t \u00e9 \ud83d\ude00""#.to_owned()),
            6 => Just("\"é ünï\"".to_owned()),
            4 => Just("null".to_owned()),
            4 => Just(r#"[{"type":"text","text":"p"},{"type":"image_url","image_url":{"url":"u"}}]"#.to_owned()),
            1 => Just(r#""bad \x""#.to_owned()),
            1 => Just(r#""lone \ud800""#.to_owned()),
            1 => Just("\"ctl \u{7}\"".to_owned()),
            1 => Just("7".to_owned()),
            1 => Just(r#"[{"type":"text","text":"p","cache_control":{}}]"#.to_owned()),
            1 => Just(r#"[{"type":"nope"}]"#.to_owned()),
        ]
    }

    fn arb_member() -> impl Strategy<Value = String> {
        prop_oneof![
            8 => arb_string().prop_map(|v| format!(r#""content":{v}"#)),
            2 => arb_string().prop_map(|v| format!(r#""name":{v}"#)),
            2 => arb_string().prop_map(|v| format!(r#""tool_call_id":{v}"#)),
            2 => arb_string().prop_map(|v| format!(r#""refusal":{v}"#)),
            2 => Just(r#""tool_calls":[{"id":"c","type":"function","function":{"name":"f","arguments":"{}"}}]"#.to_owned()),
            2 => Just(r#""tool_calls":null"#.to_owned()),
            2 => Just(r#""c\u006fntent":"k""#.to_owned()),
            1 => Just(r#""tool_calls":[{"id":"c","function":{"name":"f","arguments":"{}"},"extra":1}]"#.to_owned()),
            1 => Just(r#""role":"user""#.to_owned()),
            1 => Just(r#""role":null"#.to_owned()),
            1 => Just(r#""unknown":1"#.to_owned()),
        ]
    }

    fn arb_body() -> impl Strategy<Value = String> {
        let role = prop_oneof![
            8 => prop_oneof![Just("user"), Just("assistant"), Just("tool"), Just("system"), Just("developer")]
                .prop_map(|r| vec![format!(r#""role":"{r}""#)]),
            1 => Just(vec![r#""role":"robot""#.to_owned()]),
            1 => Just(Vec::new()),
        ];
        let message = prop_oneof![
            12 => (role, proptest::collection::vec(arb_member(), 0..3)).prop_map(|(mut m, more)| {
                m.extend(more);
                format!("{{{}}}", m.join(","))
            }),
            1 => Just("\"not an object\"".to_owned()),
        ];
        let top = prop_oneof![
            4 => Just(r#""max_tokens":9"#.to_owned()),
            4 => Just(r#""stream":true"#.to_owned()),
            4 => Just(r#""x_passthrough":{"k":[1,2]}"#.to_owned()),
            1 => Just(r#""temperature":"hot""#.to_owned()),
            1 => Just(r#""model":"again""#.to_owned()),
            2 => Just(r#""tools":[{"type":"function","function":{"name":"f","parameters":{}},"defer_loading":true}]"#.to_owned()),
        ];
        (
            proptest::collection::vec(message, 0..4),
            proptest::collection::vec(top, 0..3),
            0..4usize,
            proptest::bool::weighted(0.1),
        )
            .prop_map(|(messages, mut top, at, twice)| {
                let member = format!(r#""messages" : [ {} ]"#, messages.join(" ,\n"));
                top.insert(0, r#""model":"m""#.to_owned());
                let at = at.min(top.len());
                top.insert(at, member.clone());
                if twice {
                    top.push(member);
                }
                format!("{{{}}}", top.join(","))
            })
    }

    /// The property below holds something only if the walk takes many of the bodies and hands
    /// over many others.
    #[test]
    fn the_generated_bodies_hold_both_kinds() {
        use proptest::strategy::ValueTree;
        let mut runner = proptest::test_runner::TestRunner::deterministic();
        let (mut taken, mut handed) = (0, 0);
        for _ in 0..1000 {
            let body = arb_body().new_tree(&mut runner).unwrap().current();
            match walked(body.as_bytes(), ParamsMode::Lenient) {
                Some(_) => taken += 1,
                None => handed += 1,
            }
        }
        eprintln!("taken {taken}, handed over {handed}");
        assert!(taken >= 100 && handed >= 100, "taken {taken}, handed over {handed}");
    }

    proptest! {
        /// Whatever the walk reads, the whole decode reads the same; the bodies mix what it takes
        /// with everything it must hand over.
        #[test]
        fn the_walk_reads_what_the_whole_decode_reads(body in arb_body(), strict in proptest::bool::ANY) {
            let mode = if strict { ParamsMode::Strict } else { ParamsMode::Lenient };
            if let Some(walked) = walked(body.as_bytes(), mode) {
                prop_assert_eq!(Ok(walked), whole(body.as_bytes(), mode), "{}", body);
            }
        }
    }
}
