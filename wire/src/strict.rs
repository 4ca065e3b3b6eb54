//! Strict tool calls for upstreams without a strict mode of their own (Gemini): the call's
//! arguments are checked against the tool's JSON Schema (`jsonschema`), and a call that does not
//! validate is an upstream error (`Error::UpstreamToolArguments`): the next attempt, else a
//! clear error. So a caller that marks a tool `strict: true` (the OpenAI Agents SDK marks every
//! one) gets what `strict` promises whichever upstream serves it. OpenAI's and Anthropic's own
//! strict modes constrain the model as it writes; this check can only refuse what it wrote.

use std::collections::HashMap;

use ax_protocol::config::ProviderKind;

use crate::canonical::{ChatRequest, ChatResponse, Chunk};
use crate::Error;

/// The strict tools of one request, their schemas compiled.
pub struct StrictTools {
    /// By tool name: its validator.
    tools: HashMap<String, jsonschema::Validator>,
    /// A streamed call's name and arguments so far, by (choice, tool-call index), until checked.
    open: HashMap<(u32, u32), Open>,
}

#[derive(Default)]
struct Open {
    name: String,
    arguments: String,
    checked: bool,
}

impl StrictTools {
    /// The check `req` needs from an upstream of `kind`: `None` when no tool is strict, or when
    /// the upstream keeps strict mode itself. A schema that does not compile is the caller's
    /// error, named by its path.
    pub fn for_request(kind: ProviderKind, req: &ChatRequest) -> Result<Option<Self>, Error> {
        if crate::upstream::keeps_strict_tools(kind) {
            return Ok(None);
        }
        let mut tools = HashMap::new();
        for (i, t) in req.tools.iter().flatten().enumerate() {
            if t.function.strict != Some(true) {
                continue;
            }
            let empty = serde_json::json!({ "type": "object" });
            let schema = t.function.parameters.as_ref().unwrap_or(&empty);
            let v = jsonschema::validator_for(schema).map_err(|e| {
                let path = format!("tools[{i}].function.parameters");
                Error::invalid_param(path.clone(), format!("{path} is not a JSON Schema strict mode can check: {e}"))
            })?;
            tools.insert(t.function.name.clone(), v);
        }
        Ok((!tools.is_empty()).then(|| Self { tools, open: HashMap::new() }))
    }

    /// Every tool call of a whole answer.
    pub fn check_answer(&self, r: &ChatResponse) -> Result<(), Error> {
        for call in r.choices.iter().flat_map(|c| &c.tool_calls) {
            self.check(&call.function.name, &call.function.arguments)?;
        }
        Ok(())
    }

    /// A stream's chunk, before it goes to the caller: each call is checked as soon as its
    /// arguments are whole (one JSON value: Gemini sends a call whole), and every call still open
    /// when its choice finishes.
    pub fn check_chunk(&mut self, c: &Chunk) -> Result<(), Error> {
        for ch in &c.choices {
            for d in &ch.tool_calls {
                let open = self.open.entry((ch.index, d.index)).or_default();
                if let Some(n) = &d.name {
                    open.name.clone_from(n);
                }
                open.arguments.push_str(&d.arguments);
                if !open.checked && serde_json::from_str::<serde::de::IgnoredAny>(&open.arguments).is_ok() {
                    open.checked = true;
                    let (name, arguments) = (open.name.clone(), open.arguments.clone());
                    self.check(&name, &arguments)?;
                }
            }
            if ch.finish_reason.is_some() {
                let open: Vec<(String, String)> = self
                    .open
                    .iter()
                    .filter(|((choice, _), o)| *choice == ch.index && !o.checked)
                    .map(|(_, o)| (o.name.clone(), o.arguments.clone()))
                    .collect();
                for (name, arguments) in open {
                    self.check(&name, &arguments)?;
                }
                self.open.retain(|(choice, _), _| *choice != ch.index);
            }
        }
        Ok(())
    }

    /// One call: a strict tool's arguments must be a JSON value its schema accepts.
    fn check(&self, name: &str, arguments: &str) -> Result<(), Error> {
        let Some(v) = self.tools.get(name) else { return Ok(()) };
        let args: serde_json::Value = if arguments.trim().is_empty() {
            serde_json::Value::Object(serde_json::Map::new())
        } else {
            serde_json::from_str(arguments).map_err(|_| refused(name, "its arguments are not JSON"))?
        };
        match v.validate(&args) {
            Ok(()) => Ok(()),
            Err(e) => Err(refused(name, &format!("at '{}': {e}", e.instance_path()))),
        }
    }
}

fn refused(tool: &str, why: &str) -> Error {
    tracing::warn!(tool, why, "a strict tool's call does not match its schema");
    Error::UpstreamToolArguments { tool: tool.to_owned() }
}

#[cfg(test)]
mod tests {
    use super::*;
    use crate::canonical::{ChunkChoice, FinishReason, ToolCallDelta};
    use crate::Reported;

    fn request(strict: bool) -> ChatRequest {
        serde_json::from_value(serde_json::json!({ "model": "m", "messages": [{ "role": "user", "content": "x" }],
            "tools": [{ "type": "function", "function": { "name": "get_weather", "strict": strict,
                "parameters": { "type": "object", "properties": { "city": { "type": "string" } },
                    "required": ["city"], "additionalProperties": false } } }] }))
        .unwrap()
    }

    fn delta(index: u32, name: Option<&str>, args: &str, finish: bool) -> Chunk {
        Chunk {
            choices: vec![ChunkChoice {
                tool_calls: vec![ToolCallDelta {
                    index,
                    id: name.map(|_| format!("call_{index}")),
                    name: name.map(str::to_owned),
                    arguments: args.to_owned(),
                }],
                finish_reason: finish.then_some(FinishReason::ToolCalls),
                ..ChunkChoice::default()
            }],
            ..Chunk::default()
        }
    }

    #[test]
    fn only_strict_tools_to_upstreams_without_strict_mode_are_checked() {
        assert!(StrictTools::for_request(ProviderKind::Gemini, &request(true)).unwrap().is_some());
        assert!(StrictTools::for_request(ProviderKind::Gemini, &request(false)).unwrap().is_none());
        for kind in [ProviderKind::Openai, ProviderKind::AzureOpenai, ProviderKind::Anthropic] {
            assert!(StrictTools::for_request(kind, &request(true)).unwrap().is_none(), "{kind:?}");
        }
    }

    #[test]
    fn a_call_is_checked_once_its_arguments_are_whole() {
        let mut s = StrictTools::for_request(ProviderKind::Gemini, &request(true)).unwrap().unwrap();
        // Whole in one delta (Gemini's way): checked at once.
        assert!(s.check_chunk(&delta(0, Some("get_weather"), r#"{"city":"Paris"}"#, false)).is_ok());
        let bad = s.check_chunk(&delta(1, Some("get_weather"), r#"{"town":"Paris"}"#, false));
        assert!(matches!(bad, Err(Error::UpstreamToolArguments { ref tool }) if tool == "get_weather"), "{bad:?}");
        // In pieces: checked when whole, and a call never whole is refused when its choice ends.
        let mut s = StrictTools::for_request(ProviderKind::Gemini, &request(true)).unwrap().unwrap();
        assert!(s.check_chunk(&delta(0, Some("get_weather"), r#"{"ci"#, false)).is_ok());
        assert!(s.check_chunk(&delta(0, None, r#"ty":3}"#, false)).is_err());
        let mut s = StrictTools::for_request(ProviderKind::Gemini, &request(true)).unwrap().unwrap();
        assert!(s.check_chunk(&delta(0, Some("get_weather"), r#"{"city":"#, false)).is_ok());
        assert!(s.check_chunk(&delta(0, None, "", true)).is_err());
    }

    #[test]
    fn a_whole_answer_and_a_schema_that_does_not_compile() {
        let s = StrictTools::for_request(ProviderKind::Gemini, &request(true)).unwrap().unwrap();
        let answer = |args: &str| ChatResponse {
            choices: vec![crate::canonical::Choice {
                tool_calls: vec![crate::canonical::ToolCall {
                    id: "c".into(),
                    kind: crate::canonical::ToolKind::Function,
                    function: crate::canonical::FunctionCall { name: "get_weather".into(), arguments: args.into() },
                }],
                ..Default::default()
            }],
            ..Default::default()
        };
        assert!(s.check_answer(&answer(r#"{"city":"Oslo"}"#)).is_ok());
        assert!(s.check_answer(&answer(r#"{"city":"Oslo","extra":1}"#)).is_err());
        assert!(s.check_answer(&answer("not json")).is_err());
        let mut r = request(true);
        r.tools.as_mut().unwrap()[0].function.parameters = Some(serde_json::json!({ "type": 12 }));
        let e = StrictTools::for_request(ProviderKind::Gemini, &r).err().unwrap();
        assert_eq!(e.param(), Some("tools[0].function.parameters"));
    }
}
