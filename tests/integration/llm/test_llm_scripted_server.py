"""The scripted OpenAI-compatible server on its own (HTTP, no litellm) and as a CLI command."""

from __future__ import annotations

import asyncio
import json
import sys

import httpx

from jidocode.cli.dev.scripted_llm import Reply, ScriptedLlm, call, echo_responder, one_tool_responder


async def test_non_streamed_answer_models_and_recording(scripted_llm: ScriptedLlm) -> None:
    scripted_llm.script(Reply.tools(call("read_file", path="a"), text="hm"))
    async with httpx.AsyncClient() as http:
        models = (await http.get(f"{scripted_llm.api_base}/models")).json()
        assert [m["id"] for m in models["data"]] == ["scripted"]
        body = {"model": "scripted", "messages": [{"role": "user", "content": "x"}]}
        response = (await http.post(f"{scripted_llm.api_base}/chat/completions", json=body)).json()
    message = response["choices"][0]["message"]
    assert message["content"] == "hm"
    assert json.loads(message["tool_calls"][0]["function"]["arguments"]) == {"path": "a"}
    assert response["choices"][0]["finish_reason"] == "tool_calls"
    assert response["usage"]["total_tokens"] > 0
    assert await scripted_llm.wait_requests(1) == [body]


async def test_stream_chunks_and_usage_only_when_asked(scripted_llm: ScriptedLlm) -> None:
    scripted_llm.script(Reply.answer("abcdef", chunk_chars=2), Reply.answer("x"))
    async with httpx.AsyncClient() as http:
        for include in (True, False):
            body = {
                "model": "m",
                "messages": [],
                "stream": True,
                "stream_options": {"include_usage": include},
            }
            text = (await http.post(f"{scripted_llm.api_base}/chat/completions", json=body)).text
            events = [line[6:] for line in text.splitlines() if line.startswith("data: ")]
            assert events[-1] == "[DONE]"
            chunks = [json.loads(e) for e in events[:-1]]
            has_usage = any("usage" in c for c in chunks)
            assert has_usage is include
    pieces = [c["choices"][0]["delta"].get("content") for c in chunks if c["choices"]]
    assert "".join(p or "" for p in pieces) == "x"


async def test_empty_script_is_an_error_and_responders_answer() -> None:
    async with ScriptedLlm() as server, httpx.AsyncClient() as http:
        r = await http.post(f"{server.api_base}/chat/completions", json={"messages": []})
        assert r.status_code == 500 and "exhausted" in r.json()["error"]["message"]
        server.responder = echo_responder
        r = await http.post(
            f"{server.api_base}/chat/completions", json={"messages": [{"role": "user", "content": "yo"}]}
        )
        assert r.json()["choices"][0]["message"]["content"] == "echo: yo"
        server.responder = one_tool_responder("list_dir", path=".")
        r = await http.post(
            f"{server.api_base}/chat/completions", json={"messages": [{"role": "user", "content": "?"}]}
        )
        assert r.json()["choices"][0]["message"]["tool_calls"][0]["function"]["name"] == "list_dir"
        tool_msg = {"messages": [{"role": "tool", "content": "a b"}]}
        r = await http.post(f"{server.api_base}/chat/completions", json=tool_msg)
        assert r.json()["choices"][0]["message"]["content"].startswith("done")
        r = await http.post(f"{server.api_base}/chat/completions", content=b"not json")
        assert r.status_code == 400


async def test_api_key_and_errors() -> None:
    async with ScriptedLlm(api_key="k") as server, httpx.AsyncClient() as http:
        r = await http.post(f"{server.api_base}/chat/completions", json={"messages": []})
        assert r.status_code == 401
        server.script(Reply.error(429, retry_after=3))
        r = await http.post(
            f"{server.api_base}/chat/completions",
            json={"messages": []},
            headers={"authorization": "Bearer k"},
        )
        assert r.status_code == 429 and r.headers["retry-after"] == "3.0"
        assert len(server.requests) == 2


async def test_dev_scripted_llm_command() -> None:
    proc = await asyncio.create_subprocess_exec(
        sys.executable, "-m", "jidocode.cli.main", "dev", "scripted-llm", "--mode", "echo",
        stdout=asyncio.subprocess.PIPE,
    )  # fmt: skip
    try:
        assert proc.stdout is not None
        line = (await asyncio.wait_for(proc.stdout.readline(), 60)).decode()
        url = line.strip().rsplit(" ", 1)[-1]
        assert url.startswith("http://127.0.0.1:")
        async with httpx.AsyncClient() as http:
            r = await http.post(
                f"{url}/chat/completions", json={"messages": [{"role": "user", "content": "hi"}]}
            )
        assert r.json()["choices"][0]["message"]["content"] == "echo: hi"
    finally:
        proc.terminate()
        await proc.wait()
