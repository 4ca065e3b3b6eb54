"""Stored responses through two ax data-plane processes that share one Redis, with the official
`openai` Python SDK: `previous_response_id`, retrieve, `input_items`, delete, tenants.

Run by the Rust e2e test `sdk::openai_responses_store_across_data_planes`, which starts both
binaries (AX_URL_A, AX_URL_B) in front of a fake Anthropic that is overloaded once a tool's
output comes back, and a fake Gemini behind it (alias `conv`: Anthropic first). AX_KEY and
AX_OTHER_KEY belong to two tenants.
"""
import json
import os

import openai

key, other = os.environ["AX_KEY"], os.environ["AX_OTHER_KEY"]
a = openai.OpenAI(base_url=os.environ["AX_URL_A"] + "/v1", api_key=key, max_retries=0)
b = openai.OpenAI(base_url=os.environ["AX_URL_B"] + "/v1", api_key=key, max_retries=0)
stranger = openai.OpenAI(base_url=os.environ["AX_URL_A"] + "/v1", api_key=other, max_retries=0)
TOOLS = [{"type": "function", "name": "get_weather", "description": "Current weather for a city",
          "parameters": {"type": "object", "properties": {"city": {"type": "string"}}, "required": ["city"]}}]


def not_found(f):
    try:
        f()
    except openai.NotFoundError as e:
        assert e.body["code"] == "response_not_found", e.body
        return e.body
    raise AssertionError("expected NotFoundError")


for stream in (False, True):
    # Turn 1 on data plane A: Anthropic asks for two tool calls.
    first = a.responses.create(model="conv", input="Weather in Paris and London?", tools=TOOLS)
    calls = [o for o in first.output if o.type == "function_call"]
    assert [json.loads(c.arguments) for c in calls] == [{"city": "Paris"}, {"city": "London"}], first
    assert first.store is True, first

    # Turn 2 on data plane B, only the tools' outputs: Anthropic is overloaded now, Gemini gets the
    # whole stored conversation and answers.
    outputs = [{"type": "function_call_output", "call_id": calls[0].call_id, "output": "21C"},
               {"type": "function_call_output", "call_id": calls[1].call_id, "output": "15C"}]
    if stream:
        with b.responses.stream(model="conv", previous_response_id=first.id, input=outputs, tools=TOOLS) as s:
            second = s.get_final_response()
    else:
        second = b.responses.create(model="conv", previous_response_id=first.id, input=outputs, tools=TOOLS)
    assert "21C" in second.output_text and "15C" in second.output_text, second
    assert second.previous_response_id == first.id, second

    # Retrieved from the other data plane; its input items are the whole conversation.
    got = a.responses.retrieve(second.id)
    assert got.output_text == second.output_text and got.id == second.id, got
    items = list(a.responses.input_items.list(second.id, order="asc"))
    kinds = [i.type for i in items]
    assert kinds == ["message", "function_call", "function_call", "function_call_output", "function_call_output"], kinds
    assert items[0].content[0].text == "Weather in Paris and London?", items[0]

    # Another tenant sees none of it.
    not_found(lambda: stranger.responses.retrieve(second.id))
    not_found(lambda: stranger.responses.input_items.list(second.id))
    body = not_found(lambda: stranger.responses.create(model="conv", previous_response_id=second.id, input="hi"))
    assert body["param"] == "previous_response_id", body

    # Deleted: gone, and what continued it cannot be continued.
    deleted = b.responses.delete(first.id)
    not_found(lambda: a.responses.retrieve(first.id))
    not_found(lambda: a.responses.create(model="conv", previous_response_id=second.id, input="more?"))

# A message sent with a string content is listed with typed parts, as OpenAI lists it: the SDK's
# types expect a list (iterating a string would yield its characters).
r = a.responses.create(model="conv", input=[{"role": "user", "content": "Weather in Rome?"}], tools=TOOLS)
items = list(b.responses.input_items.list(r.id))
assert [(i.type, i.role, i.status) for i in items] == [("message", "user", "completed")], items
assert [(p.type, p.text) for p in items[0].content] == [("input_text", "Weather in Rome?")], items[0]

# store=False keeps nothing.
r = a.responses.create(model="conv", input="hi", store=False)
assert r.store is False, r
not_found(lambda: b.responses.retrieve(r.id))

print("responses store sdk: all checks passed")
