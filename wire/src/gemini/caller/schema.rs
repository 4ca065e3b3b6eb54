//! Gemini's schema dialect (an OpenAPI 3.0 subset: `"type": "OBJECT"`, `nullable`, counts written
//! as strings, `propertyOrdering`) rewritten as the JSON Schema other upstreams take.

use serde_json::{Map, Value};

/// `schema` as JSON Schema: types in lower case (`nullable: true` adds `"null"`), counts as
/// numbers, Gemini's own keys dropped; every nested schema likewise.
pub fn json_schema(schema: Value) -> Value {
    match schema {
        Value::Object(m) => Value::Object(object(m)),
        other => other,
    }
}

const COUNTS: &[&str] = &["minItems", "maxItems", "minLength", "maxLength", "minProperties", "maxProperties"];

fn object(m: Map<String, Value>) -> Map<String, Value> {
    let nullable = m.get("nullable").and_then(Value::as_bool) == Some(true);
    let mut out = Map::with_capacity(m.len());
    for (k, v) in m {
        let v = match k.as_str() {
            "nullable" | "propertyOrdering" => continue,
            "type" => match v {
                Value::String(t) => {
                    let t = Value::String(t.to_ascii_lowercase());
                    if nullable {
                        Value::Array(vec![t, Value::String("null".into())])
                    } else {
                        t
                    }
                }
                other => other,
            },
            "properties" | "$defs" | "definitions" | "patternProperties" => match v {
                Value::Object(props) => Value::Object(props.into_iter().map(|(n, s)| (n, json_schema(s))).collect()),
                other => other,
            },
            "items" | "additionalProperties" | "not" => json_schema(v),
            "anyOf" | "oneOf" | "allOf" | "prefixItems" => match v {
                Value::Array(list) => Value::Array(list.into_iter().map(json_schema).collect()),
                other => other,
            },
            c if COUNTS.contains(&c) => match &v {
                Value::String(n) => n.parse::<u64>().map_or(v, Value::from),
                _ => v,
            },
            _ => v,
        };
        out.insert(k, v);
    }
    out
}

#[cfg(test)]
mod tests {
    use super::*;
    use serde_json::json;

    #[test]
    fn gemini_schemas_read_as_json_schema() {
        let s = json!({
            "type": "OBJECT",
            "properties": {
                "path": { "type": "STRING", "description": "a file" },
                "limit": { "type": "INTEGER", "nullable": true },
                "tags": { "type": "ARRAY", "items": { "type": "STRING", "enum": ["a", "b"] }, "minItems": "1" },
                "any": { "anyOf": [{ "type": "NUMBER" }, { "type": "BOOLEAN" }] }
            },
            "required": ["path"],
            "propertyOrdering": ["path", "limit"]
        });
        assert_eq!(
            json_schema(s),
            json!({
                "type": "object",
                "properties": {
                    "path": { "type": "string", "description": "a file" },
                    "limit": { "type": ["integer", "null"] },
                    "tags": { "type": "array", "items": { "type": "string", "enum": ["a", "b"] }, "minItems": 1 },
                    "any": { "anyOf": [{ "type": "number" }, { "type": "boolean" }] }
                },
                "required": ["path"]
            })
        );
    }

    #[test]
    fn a_property_named_like_a_keyword_is_a_property() {
        let s = json!({ "type": "OBJECT", "properties": { "type": { "type": "STRING" }, "nullable": { "type": "BOOLEAN" } } });
        assert_eq!(
            json_schema(s),
            json!({ "type": "object", "properties": { "type": { "type": "string" }, "nullable": { "type": "boolean" } } })
        );
    }
}
