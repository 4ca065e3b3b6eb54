"""Drives a running ax data plane with the official `openai` Python SDK over the Responses API.

Run by the Rust e2e test `sdk::openai_responses_api_against_every_upstream_kind`, which starts the
binary in front of a fake Anthropic, a fake OpenAI-compatible server and a fake Gemini (aliases
claude, gpt, gem) and sets AX_BASE_URL and AX_KEY. Every check runs against each alias.
"""
import json
import os

import openai

client = openai.OpenAI(base_url=os.environ["AX_BASE_URL"], api_key=os.environ["AX_KEY"], max_retries=0)
TOOLS = [{"type": "function", "name": "get_weather", "description": "Current weather for a city",
          "parameters": {"type": "object", "properties": {"city": {"type": "string"}}, "required": ["city"]}}]

for alias in os.environ.get("AX_ALIASES", "claude,gpt,gem").split(","):
    print(f"-- {alias}")
    # 1. Text, with instructions.
    r = client.responses.create(model=alias, instructions="Be brief.", input="hi")
    assert r.status == "completed", r
    assert r.output_text.startswith("Hello from"), r
    assert r.usage.input_tokens == 10 and r.usage.output_tokens == 5 and r.usage.total_tokens == 15, r.usage
    assert r.id.startswith("resp_"), r

    # 2. Stream: the final response's text is the joined deltas.
    deltas = []
    with client.responses.stream(model=alias, input="hi") as s:
        for ev in s:
            if ev.type == "response.output_text.delta":
                deltas.append(ev.delta)
        final = s.get_final_response()
    assert "".join(deltas) == final.output_text and final.output_text, (deltas, final)
    assert final.status == "completed" and final.usage.output_tokens == 5, final

    # 3. Function tools: two calls, their outputs sent back as items, the answer quotes them.
    for stream in (False, True):
        items = [{"role": "user", "content": "Weather in Paris and London?"}]
        if stream:
            with client.responses.stream(model=alias, input=items, tools=TOOLS) as s:
                first = s.get_final_response()
        else:
            first = client.responses.create(model=alias, input=items, tools=TOOLS)
        calls = [o for o in first.output if o.type == "function_call"]
        assert [json.loads(c.arguments) for c in calls] == [{"city": "Paris"}, {"city": "London"}], first
        assert all(c.name == "get_weather" and c.call_id for c in calls), calls
        items += [c.model_dump(exclude_none=True) for c in calls]
        items += [{"type": "function_call_output", "call_id": calls[0].call_id, "output": "21C"},
                  {"type": "function_call_output", "call_id": calls[1].call_id, "output": "15C"}]
        done = client.responses.create(model=alias, input=items, tools=TOOLS)
        assert "21C" in done.output_text and "15C" in done.output_text, done

    # 4. Structured output: the schema reaches the upstream as its own JSON-output control.
    schema = {"type": "object", "properties": {"city": {"type": "string"}}, "required": ["city"],
              "additionalProperties": False}
    r = client.responses.create(model=alias, input="A city?",
                                text={"format": {"type": "json_schema", "name": "city", "schema": schema, "strict": True}})
    assert r.status == "completed" and r.output_text, r

# 5. Errors as the SDK's exceptions; an unknown stored response is a 404 naming the field.
try:
    client.responses.create(model="no-such-alias", input="x")
    raise AssertionError("expected NotFoundError")
except openai.NotFoundError as e:
    assert e.body["code"] == "model_not_found", e.body
try:
    client.responses.create(model="gpt", input="x", previous_response_id="resp_123")
    raise AssertionError("expected NotFoundError")
except openai.NotFoundError as e:
    assert e.body["param"] == "previous_response_id" and e.body["code"] == "response_not_found", e.body

# 6. A stream the upstream cuts short (the fake OpenAI server closes after one chunk when asked to
# "cut short"): the SDK reads an `error` event with ax's code, then `response.failed`.
if "gpt" in os.environ.get("AX_ALIASES", "claude,gpt,gem").split(","):
    with client.responses.stream(model="gpt", input="cut short") as s:
        seen = list(s)
    kinds = [e.type for e in seen]
    assert kinds[0] == "response.created" and kinds[-2:] == ["error", "response.failed"], kinds
    assert seen[-2].code == "upstream_stream_truncated" and seen[-2].message, seen[-2]
    assert seen[-1].response.status == "failed", seen[-1]
    assert seen[-1].response.error.code == "upstream_stream_truncated", seen[-1].response.error

print("responses sdk: all checks passed")
