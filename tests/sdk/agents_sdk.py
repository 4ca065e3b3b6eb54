"""Runs an OpenAI Agents SDK agent with one function tool through ax (the Responses API).

Run by the Rust e2e test `sdk::openai_agents_sdk_runs_a_tool_agent`, which starts the binary in
front of a non-OpenAI fake upstream and sets AX_BASE_URL, AX_KEY and AX_ALIASES.
"""
import os

from agents import Agent, Runner, function_tool, set_default_openai_api, set_default_openai_client, set_tracing_disabled
from openai import AsyncOpenAI

set_tracing_disabled(True)  # offline: no traces to OpenAI
set_default_openai_client(AsyncOpenAI(base_url=os.environ["AX_BASE_URL"], api_key=os.environ["AX_KEY"], max_retries=0))
set_default_openai_api("responses")

calls = []


@function_tool
def get_weather(city: str) -> str:
    """Current weather for a city."""
    calls.append(city)
    return {"Paris": "21C", "London": "15C"}.get(city, "unknown")


for alias in os.environ.get("AX_ALIASES", "claude").split(","):
    calls.clear()
    agent = Agent(name="weather", instructions="Answer with the weather.", model=alias, tools=[get_weather])
    result = Runner.run_sync(agent, "Weather in Paris and London?")
    assert calls == ["Paris", "London"], calls
    assert "21C" in result.final_output and "15C" in result.final_output, result.final_output
    print(f"-- {alias}: {result.final_output}")

print("agents sdk: all checks passed")
