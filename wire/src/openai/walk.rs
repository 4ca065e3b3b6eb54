//! The decoder of a Chat Completions body into the canonical request: its conversation walked
//! (`skim`), every other member decoded by serde.
//!
//! At ~50 KB of messages, serde's pass over the conversation (sonic-rs through `serde_ignored`)
//! cost ~135,000 instructions, most of them per message and per string rather than per byte of
//! text. Here the `messages` array is walked by hand: each message's `role`, `content`, `name`,
//! `tool_call_id` and `refusal` are read from their spans, a string content (and a text part's
//! text) kept as the caller's literal, a slice of the body (`canonical::Text`), an image part's
//! `image_url` and the tool calls decoded by serde from their own spans. The other members are
//! copied into a small body with `"messages":[]` and decoded by serde, whose errors name the
//! field. The walk is the one decoder of the conversation: it names the field at fault itself
//! (`json::walk`), and collects the fields it does not know for the parameter mode.

use ax_protocol::config::ParamsMode;
use bytes::Bytes;

use crate::canonical::{ChatRequest, Content, ContentPart, ImageUrl, Message, Role, Text, ToolCall};
use crate::json::skim::{key_bytes, key_text, string_text, Skim};
use crate::json::walk::{
    self, bad_key, bad_literal, bad_string, duplicate, missing, unknown_variant, wrong_type, At, Fault,
};
use crate::Error;

/// The canonical request of a Chat Completions body; its texts are slices of `body`.
pub fn decode_chat(body: &Bytes, mode: ParamsMode) -> Result<ChatRequest, Error> {
    decode(body, mode).map_err(|f| f.into_error(body))
}

fn decode(body: &Bytes, mode: ParamsMode) -> Result<ChatRequest, Fault> {
    let Ok(text) = simdutf8::basic::from_utf8(body) else {
        return Err(Fault::Field(Error::InvalidJson("the body is not UTF-8".into())));
    };
    let mut w = Walk { body, text, unknown: Vec::new() };
    let mut s = Skim::new(body);
    if s.next_byte() != Some(b'{') {
        s.value()?;
        return Err(Fault::Field(Error::InvalidJson("the body must be a JSON object".into())));
    }
    let mut messages = None;
    let mut rest = Vec::with_capacity(128);
    rest.extend_from_slice(b"{\"messages\":[]");
    s.object(|k, escaped, s| {
        let key = key_text(k, escaped)
            .ok_or_else(|| Fault::Field(Error::InvalidJson("a key is not valid JSON text".into())))?;
        if key == "messages" {
            if messages.is_some() {
                return Err(Fault::Field(Error::InvalidJson("duplicate field `messages`".into())));
            }
            messages = Some(w.conversation(s)?);
        } else {
            s.copy_member(k, &mut rest)?;
        }
        Ok(())
    })?;
    s.end()?;
    let messages = messages.ok_or_else(|| Fault::Field(Error::InvalidJson("missing field `messages`".into())))?;
    rest.push(b'}');
    let (mut req, extra) = crate::json::decode::json_with_extra::<ChatRequest>(&rest, mode)?;
    crate::json::decode::judge(&w.unknown, mode)?;
    req.messages = messages;
    req.extra = extra;
    Ok(req)
}

/// The walk of one body: the fields of its messages it does not know, by path.
struct Walk<'b> {
    body: &'b Bytes,
    text: &'b str,
    unknown: Vec<String>,
}

const ROLES: [&str; 5] = ["system", "developer", "user", "assistant", "tool"];

impl Walk<'_> {
    fn conversation(&mut self, s: &mut Skim<'_>) -> Result<Vec<Message>, Fault> {
        if s.next_byte() != Some(b'[') {
            return Err(wrong_type("messages", "an array of messages"));
        }
        let mut out = Vec::new();
        let messages = At::Root("messages");
        s.array(|s| {
            // Read in place: a message is a few hundred bytes, moved twice more if returned.
            let at = messages.index(out.len());
            out.push(Message::new(Role::User));
            if let Some(m) = out.last_mut() {
                self.message(s, &at, m)?;
            }
            Ok::<(), Fault>(())
        })?;
        Ok(out)
    }

    /// One message, read into `m` (a new one).
    fn message(&mut self, s: &mut Skim<'_>, at: &At<'_>, m: &mut Message) -> Result<(), Fault> {
        if s.next_byte() != Some(b'{') {
            return Err(wrong_type(&at.path(), "a message object"));
        }
        let mut role = None;
        let mut seen = 0u8;
        s.object(|k, escaped, s| {
            let key = key_bytes(k, escaped).ok_or_else(|| bad_key(&at.path()))?;
            let (bit, name) = match &*key {
                b"role" => (1, "role"),
                b"content" => (2, "content"),
                b"name" => (4, "name"),
                b"tool_call_id" => (8, "tool_call_id"),
                b"refusal" => (16, "refusal"),
                b"tool_calls" => (32, "tool_calls"),
                _ => {
                    let key = key_text(k, escaped).ok_or_else(|| bad_key(&at.path()))?;
                    self.unknown.push(at.key(&key).dotted());
                    s.value()?;
                    return Ok(());
                }
            };
            if seen & bit != 0 {
                return Err(duplicate(&at.path(), name));
            }
            seen |= bit;
            let here = at.key(name);
            match bit {
                1 => role = Some(self.role(s, &here)?),
                2 => m.content = self.content(s, &here)?,
                4 => m.name = self.string(s, &here)?,
                8 => m.tool_call_id = self.string(s, &here)?,
                16 => m.refusal = self.string(s, &here)?,
                _ => {
                    m.tool_calls = if s.null() {
                        None
                    } else {
                        let span = s.value()?;
                        Some(walk::value::<Vec<ToolCall>>(&self.text[span], &here, &mut self.unknown)?)
                    }
                }
            }
            Ok(())
        })?;
        m.role = role.ok_or_else(|| missing(&at.path(), "role"))?;
        Ok(())
    }

    fn role(&self, s: &mut Skim<'_>, at: &At<'_>) -> Result<Role, Fault> {
        if s.next_byte() != Some(b'"') {
            s.value()?;
            return Err(wrong_type(&at.path(), "a role"));
        }
        // A role's name as written (no escapes, so no control characters either): the common
        // case, without the checked skim (a fifth of a role's cost).
        let (span, escaped) = s.string()?;
        if let (false, Some(role)) = (escaped, Role::named(&self.body[span.start + 1..span.end - 1])) {
            return Ok(role);
        }
        let mut checked = Skim::at(&self.body[..span.end], span.start);
        let (span, escaped) = checked.checked_string().map_err(|e| bad_literal(&at.path(), &e, self.body))?;
        let name = string_text(&self.text[span], escaped).ok_or_else(|| bad_string(&at.path()))?;
        Role::named(name.as_bytes()).ok_or_else(|| unknown_variant(&at.path(), &name, &ROLES))
    }

    /// A message's content: `null`, a string kept as the caller's literal, or parts.
    fn content(&mut self, s: &mut Skim<'_>, at: &At<'_>) -> Result<Option<Content>, Fault> {
        if s.null() {
            return Ok(None);
        }
        match s.next_byte() {
            Some(b'"') => Ok(Some(Content::Text(self.text_of(s, at)?))),
            Some(b'[') => {
                let mut parts = Vec::new();
                s.array(|s| {
                    let p = self.part(s, &at.index(parts.len()))?;
                    parts.push(p);
                    Ok::<(), Fault>(())
                })?;
                Ok(Some(Content::Parts(parts)))
            }
            _ => {
                s.value()?;
                Err(wrong_type(&at.path(), "a string or an array of content parts"))
            }
        }
    }

    /// One content part: `{"type":"text","text":…}` or `{"type":"image_url","image_url":{url, detail}}`.
    /// A field of the other kind, or one neither names (a `cache_control` some clients add for
    /// Anthropic), is passed over, as OpenAI does.
    fn part(&mut self, s: &mut Skim<'_>, at: &At<'_>) -> Result<ContentPart, Fault> {
        if s.next_byte() != Some(b'{') {
            s.value()?;
            return Err(wrong_type(&at.path(), "a content part object"));
        }
        let (mut kind, mut text, mut image) = (None::<String>, None::<Text>, None::<ImageUrl>);
        let mut seen = 0u8;
        s.object(|k, escaped, s| {
            let key = key_bytes(k, escaped).ok_or_else(|| bad_key(&at.path()))?;
            let (bit, name) = match &*key {
                b"type" => (1, "type"),
                b"text" => (2, "text"),
                b"image_url" => (4, "image_url"),
                _ => {
                    // A key no part names: the parameter mode judges it.
                    s.value()?;
                    self.unknown.push(at.raw_key(k, escaped).dotted());
                    return Ok(());
                }
            };
            if seen & bit != 0 {
                return Err(duplicate(&at.path(), name));
            }
            seen |= bit;
            let here = at.key(name);
            match bit {
                1 => kind = self.string(s, &here)?,
                2 => text = Some(self.text_of(s, &here)?),
                _ => {
                    let span = s.value()?;
                    image = Some(walk::value::<ImageUrl>(&self.text[span], &here, &mut self.unknown)?);
                }
            }
            Ok(())
        })?;
        match kind.as_deref() {
            Some("text") => Ok(ContentPart::Text { text: text.ok_or_else(|| missing(&at.path(), "text"))? }),
            Some("image_url") => {
                Ok(ContentPart::ImageUrl { image_url: image.ok_or_else(|| missing(&at.path(), "image_url"))? })
            }
            Some(other) => Err(unknown_variant(&at.key("type").path(), other, &["text", "image_url"])),
            None => Err(missing(&at.path(), "type")),
        }
    }

    /// A string kept as the caller's literal, a slice of the body.
    fn text_of(&self, s: &mut Skim<'_>, at: &At<'_>) -> Result<Text, Fault> {
        if s.next_byte() != Some(b'"') {
            s.value()?;
            return Err(wrong_type(&at.path(), "a string"));
        }
        let (span, escaped) = s.checked_string().map_err(|e| bad_literal(&at.path(), &e, self.body))?;
        Text::from_literal(self.body, &self.text[span], escaped).map_err(|_| bad_string(&at.path()))
    }

    /// An optional string (`name`, `tool_call_id`, `refusal`, a part's `type`), decoded.
    fn string(&self, s: &mut Skim<'_>, at: &At<'_>) -> Result<Option<String>, Fault> {
        if s.null() {
            return Ok(None);
        }
        if s.next_byte() != Some(b'"') {
            s.value()?;
            return Err(wrong_type(&at.path(), "a string"));
        }
        let (span, escaped) = s.checked_string().map_err(|e| bad_literal(&at.path(), &e, self.body))?;
        string_text(&self.text[span], escaped).map(|t| Some(t.into_owned())).ok_or_else(|| bad_string(&at.path()))
    }
}

#[cfg(test)]
mod tests {
    use super::*;
    use proptest::prelude::*;

    use crate::Reported;

    /// The oracle: serde's derive over the whole body (the canonical types' own `Deserialize`),
    /// its result as JSON and the unknown fields it keeps; `Err` when it refuses the body.
    fn whole(body: &[u8], mode: ParamsMode) -> Result<(serde_json::Value, String), String> {
        crate::json::decode::json_with_extra::<ChatRequest>(body, mode)
            .map(|(r, extra)| (serde_json::to_value(&r).unwrap(), format!("{extra:?}")))
            .map_err(|e| e.to_string())
    }

    fn walked(body: &[u8], mode: ParamsMode) -> Result<(serde_json::Value, String), String> {
        decode_chat(&Bytes::copy_from_slice(body), mode)
            .map(|r| (serde_json::to_value(&r).unwrap(), format!("{:?}", r.extra)))
            .map_err(|e| e.to_string())
    }

    /// Both take the body and read the same, or both refuse it.
    fn agree(body: &str, mode: ParamsMode) -> Result<(), String> {
        match (walked(body.as_bytes(), mode), whole(body.as_bytes(), mode)) {
            (Ok(w), Ok(o)) if w == o => Ok(()),
            (Err(_), Err(_)) => Ok(()),
            (w, o) => Err(format!("{body}\nwalk: {w:?}\noracle: {o:?}")),
        }
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

    /// Each fault is the walk's own error, naming the field at fault (or, not JSON, the place).
    #[test]
    fn a_fault_names_its_field() {
        let cases = [
            (
                r#"{"model":"m","messages":[{"role":"user","content":"a","extra":1}]}"#,
                "unsupported_parameter",
                Some("messages.0.extra"),
            ),
            (
                r#"{"model":"m","messages":[{"role":"user","role":"user","content":"a"}]}"#,
                "messages[0]: duplicate field `role`",
                None,
            ),
            (
                r#"{"model":"m","messages":[{"role":"bot","content":"a"}]}"#,
                "messages[0].role: unknown variant `bot`",
                None,
            ),
            (r#"{"model":"m","messages":[{"content":"a"}]}"#, "messages[0]: missing field `role`", None),
            (r#"{"model":"m","messages":[{"role":"user","content":5}]}"#, "messages[0].content: invalid type", None),
            (
                r#"{"model":"m","messages":[{"role":"user","content":[{"type":"nope"}]}]}"#,
                "messages[0].content[0].type: unknown variant `nope`",
                None,
            ),
            (
                r#"{"model":"m","messages":[{"role":"user","content":[{"type":"image_url","image_url":{"url":5}}]}]}"#,
                "messages[0].content[0].image_url.url: invalid type",
                None,
            ),
            (
                r#"{"model":"m","messages":[{"role":"assistant","tool_calls":[{"id":"c","function":{"name":7}}]}]}"#,
                "messages[0].tool_calls[0].function.name: invalid type",
                None,
            ),
            (
                r#"{"model":"m","messages":[{"role":"assistant","tool_calls":[{"id":"c","function":{"name":"f"},"x":1}]}]}"#,
                "unsupported_parameter",
                Some("messages.0.tool_calls.0.x"),
            ),
            (
                r#"{"model":"m","messages":[{"role":"user","content":"\ud800"}]}"#,
                "messages[0].content: invalid string",
                None,
            ),
            ("{\"model\":\"m\",\n\"messages\":[{\"role\":\"user\",\"content\":\"a\"} x]}", "at line 2 column", None),
            (r#"{"model":"m","messages":[],"messages":[]}"#, "duplicate field `messages`", None),
            (r#"{"model":"m"}"#, "missing field `messages`", None),
            (r#"{"messages":[]}"#, "missing field `model`", None),
        ];
        for (body, said, param) in cases {
            let e = decode_chat(&Bytes::from(body), ParamsMode::Strict).unwrap_err();
            let text = format!("{} {e}", e.code());
            assert!(text.contains(said), "{body}: {text}");
            assert_eq!(e.param(), param, "{body}");
        }
        // Lenient: an unknown field is dropped, the rest read.
        let r = decode_chat(&Bytes::from(cases[0].0), ParamsMode::Lenient).unwrap();
        assert_eq!(r.messages[0].content.as_ref().unwrap().text(), "a");
    }

    #[test]
    fn what_the_walk_reads_the_oracle_reads_the_same() {
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
            for mode in [ParamsMode::Strict, ParamsMode::Lenient] {
                agree(body, mode).unwrap();
            }
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

    /// The property below holds something only if many of the bodies are taken and many refused.
    #[test]
    fn the_generated_bodies_hold_both_kinds() {
        use proptest::strategy::ValueTree;
        let mut runner = proptest::test_runner::TestRunner::deterministic();
        let (mut taken, mut refused) = (0, 0);
        for _ in 0..1000 {
            let body = arb_body().new_tree(&mut runner).unwrap().current();
            match walked(body.as_bytes(), ParamsMode::Lenient) {
                Ok(_) => taken += 1,
                Err(_) => refused += 1,
            }
        }
        eprintln!("taken {taken}, refused {refused}");
        assert!(taken >= 100 && refused >= 100, "taken {taken}, refused {refused}");
    }

    proptest! {
        /// The walk takes exactly the bodies serde's derive takes, and reads them the same.
        #[test]
        fn the_walk_reads_what_the_oracle_reads(body in arb_body(), strict in proptest::bool::ANY) {
            let mode = if strict { ParamsMode::Strict } else { ParamsMode::Lenient };
            if let Err(e) = agree(&body, mode) {
                prop_assert!(false, "{}", e);
            }
        }
    }
}
