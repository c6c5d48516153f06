"""The MCP server driven by the SDK's own client, over stdio and streamable HTTP."""

from __future__ import annotations

import json
import sys
from collections.abc import Awaitable, Callable
from pathlib import Path
from typing import Any

import anyio
import httpx
import httpx2
from mcp import Client, StdioServerParameters
from mcp.client.streamable_http import streamable_http_client
from server_helpers import ACME_BOT, ACME_HR, ADMIN, HANDBOOK, SEARCH_ONLY, Live, bearer

#: The console script of this environment (what an MCP client would launch).
GROUNDWIRE = str(Path(sys.executable).with_name("groundwire"))


def run(session: Callable[[Client], Awaitable[Any]], server: Any) -> Any:
    """Open an SDK client on ``server`` and run ``session`` with it."""

    async def main() -> Any:
        async with Client(server, read_timeout_seconds=60) as client:
            return await session(client)

    return anyio.run(main)


def http_transport(live: Live, secret: str) -> Any:
    class Authenticated:
        """The SDK's streamable-HTTP transport with the key's header on every request."""

        def __init__(self) -> None:
            self._context: Any = None

        async def __aenter__(self) -> Any:
            self._http = httpx2.AsyncClient(headers=bearer(secret), timeout=60)
            self._context = streamable_http_client(f"{live.url}/mcp/", http_client=self._http)
            return await self._context.__aenter__()

        async def __aexit__(self, *exc: Any) -> None:
            await self._context.__aexit__(*exc)
            await self._http.aclose()

    return Authenticated()


def structured(result: Any) -> Any:
    assert not result.is_error, result.content
    if result.structured_content is not None:
        return result.structured_content
    return json.loads(result.content[0].text)


async def exercise(client: Client) -> dict[str, Any]:
    tools = sorted(tool.name for tool in (await client.list_tools()).tools)
    search = structured(
        await client.call_tool("search_knowledge_base", {"query": "api key", "limit": 2})
    )
    ground = structured(await client.call_tool("ground", {"query": "how do I rotate an API key"}))
    entry = structured(await client.call_tool("get_entry", {"entry_id": "security.api-keys"}))
    bad_limit = await client.call_tool("search_knowledge_base", {"query": "x", "limit": 0})
    empty = await client.call_tool("ground", {"query": "   "})
    missing = await client.call_tool("get_entry", {"entry_id": "no.such"})
    wrong_type = await client.call_tool("search_knowledge_base", {"query": "x", "limit": "many"})
    resource = await client.read_resource("kb://handbook/security.api-keys")
    templates = await client.list_resource_templates()
    return {
        "tools": tools, "search": search, "ground": ground, "entry": entry,
        "errors": [bad_limit, empty, missing, wrong_type], "resource": resource,
        "templates": [t.uri_template for t in templates.resource_templates],
    }  # fmt: skip


def check(found: dict[str, Any]) -> None:
    assert found["tools"] == ["get_entry", "ground", "search_knowledge_base"]
    assert [hit["id"] for hit in found["search"]["hits"]] == [
        "security.api-keys",
        "security.api-key-rotation",
    ]
    ground = found["ground"]
    assert "security.api-key-rotation" in ground["selected_ids"]
    assert ground["citations"]
    assert all(tag in ground["block"] for tag in ground["citations"])
    assert found["entry"]["citation"] == "[KB:security.api-keys@2026-11-15]"
    messages = []
    for result in found["errors"]:
        assert result.is_error
        text = result.content[0].text
        assert "Traceback" not in text
        messages.append(text)
    assert "limit must be 1 to 100" in messages[0]
    assert "query is empty" in messages[1]
    assert "no entry 'no.such'" in messages[2]
    assert "limit" in messages[3]
    body = json.loads(found["resource"].contents[0].text)
    assert body["id"] == "security.api-keys"
    assert found["templates"] == ["kb://{kb}/{entry_id}"]


def test_stdio(tmp_path: Path) -> None:
    params = StdioServerParameters(
        command=GROUNDWIRE,
        args=["mcp", str(HANDBOOK)],
        cwd=str(tmp_path),
    )
    check(run(exercise, params))


def test_stdio_acts_as_the_launching_hosts_principal(tmp_path: Path, access_kb: Path) -> None:
    async def search(client: Client) -> Any:
        return structured(
            await client.call_tool("search_knowledge_base", {"query": "rotate keys", "limit": 10})
        )

    def ids(*flags: str) -> set[str]:
        params = StdioServerParameters(
            command=GROUNDWIRE,
            args=["mcp", str(access_kb), *flags],
            cwd=str(tmp_path),
        )
        return {hit["id"] for hit in run(search, params)["hits"]}

    assert ids() == {"shared.keys"}
    assert ids("--tenant", "acme", "--subject", "alice", "--group", "hr") == {
        "acme.keys", "acme.payroll", "shared.keys",
    }  # fmt: skip


def test_streamable_http_with_a_key(live: Live) -> None:
    check(run(exercise, http_transport(live, ADMIN)))


def test_streamable_http_uses_each_keys_principal(live: Live) -> None:
    async def search(client: Client) -> Any:
        args = {"query": "rotate keys", "limit": 10, "kb": "access"}
        return structured(await client.call_tool("search_knowledge_base", args))

    hr = {hit["id"] for hit in run(search, http_transport(live, ACME_HR))["hits"]}
    bot = {hit["id"] for hit in run(search, http_transport(live, ACME_BOT))["hits"]}
    assert hr == {"acme.keys", "acme.payroll", "shared.keys"}
    assert bot == {"acme.keys", "shared.keys"}


def test_streamable_http_refuses_missing_keys_and_keys_without_mcp(live: Live) -> None:
    message = {"jsonrpc": "2.0", "id": 1, "method": "tools/list", "params": {}}
    headers = {"Accept": "application/json, text/event-stream"}
    with httpx.Client(base_url=live.url, timeout=30) as client:
        anonymous = client.post("/mcp/", json=message, headers=headers)
        search_only = client.post("/mcp/", json=message, headers={**headers, **bearer(SEARCH_ONLY)})
    assert anonymous.status_code == 401
    assert anonymous.json()["type"] == "urn:groundwire:problem:unauthenticated"
    assert search_only.status_code == 403
    assert search_only.json()["type"] == "urn:groundwire:problem:call-not-allowed"
