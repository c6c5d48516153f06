"""``groundwire serve`` / ``keygen``: usage errors, keys files, a real process and its shutdown."""

from __future__ import annotations

import json
import os
import signal
import socket
import subprocess
import sys
import time
from pathlib import Path

import httpx
import pytest
import yaml
from cli_helpers import one_error_line, run
from server_helpers import HANDBOOK

from groundwire.server import KeyRing, hash_key

GROUNDWIRE = str(Path(sys.executable).with_name("groundwire"))
KB = str(HANDBOOK)


@pytest.mark.parametrize(
    ("args", "message"),
    [
        ([KB], "pass --keys FILE (API keys) or --no-auth"),
        ([KB, "--no-auth", "--keys", "k.yaml"], "exactly one"),
        ([KB, "--no-auth", "--host", "0.0.0.0"], "loopback only"),
        ([KB, "--keys", "k.yaml", "--tenant", "a", "--subject", "b"], "for --no-auth only"),
        ([KB, "--no-auth", "--tenant", "a"], "--tenant and --subject go together"),
        ([f"bad name={KB}", "--no-auth"], "not a usable knowledge base name"),
        ([f"a={KB}", f"a={KB}", "--no-auth"], "given twice"),
        ([KB, "--no-auth", "--provider", "nosuch"], "not a provider"),
    ],
)
def test_serve_usage_errors_are_one_line(args: list[str], message: str) -> None:
    result = run("serve", *args)
    assert result.exit_code == 2, result.output
    assert message in one_error_line(result)


HEX = "ab" * 32
_KEY = "id: a, tenant: t, subject: s"
BAD_KEYS = [
    (None, "cannot read the keys file"),
    ("keys: {}", "expected a mapping with a 'keys' list"),
    ("keys: [{id: a, sha256: gw_plainsecret, tenant: t, subject: s}]", "never the secret itself"),
    (f"keys: [{{{_KEY}, sha256: {HEX}, allow: [fly]}}]", "unknown call 'fly'"),
    (f"keys: [{{id: a, sha256: {HEX}, tenant: 't x', subject: s}}]", "keys[0].tenant/subject"),
    (f"keys: [{{{_KEY}, sha256: {HEX}, colour: red}}]", "unknown field"),
    ("keys: [", "not valid YAML/JSON"),
]


@pytest.mark.parametrize(("content", "message"), BAD_KEYS)
def test_bad_keys_files_name_the_key_and_field(
    tmp_path: Path, content: str | None, message: str
) -> None:
    path = tmp_path / "keys.yaml"
    if content is not None:
        path.write_text(content, encoding="utf-8")
    result = run("serve", KB, "--keys", str(path))
    assert result.exit_code == 2, result.output
    line = one_error_line(result)
    assert message in line
    assert str(path) in line


def test_keygen_prints_the_secret_once_and_an_entry_holding_its_hash(tmp_path: Path) -> None:
    who = ("--id", "bot", "--tenant", "acme", "--subject", "bot", "--group", "support")
    result = run("keygen", *who, "--allow", "ground", "--allow", "mcp")
    assert result.exit_code == 0, result.output
    secret = result.stderr.strip().rsplit(" ", 1)[-1]
    assert secret.startswith("gw_")
    assert secret not in result.stdout
    items = yaml.safe_load(result.stdout)
    assert items[0]["sha256"] == hash_key(secret)
    grant = KeyRing.from_items(items).authenticate({"authorization": f"Bearer {secret}"})
    assert grant.key_id == "bot"
    assert grant.calls == {"ground", "mcp"}
    assert grant.principal is not None
    assert grant.principal.groups == ("support",)
    bad = run("keygen", "--id", "bot", "--tenant", "acme", "--subject", "bot", "--allow", "fly")
    assert bad.exit_code == 2
    assert "unknown call 'fly'" in one_error_line(bad)


def _free_port() -> int:
    with socket.socket() as probe:
        probe.bind(("127.0.0.1", 0))
        return int(probe.getsockname()[1])


@pytest.mark.integration
def test_the_served_process_answers_and_stops_gracefully(tmp_path: Path) -> None:
    secret = "gw_cli-test-secret"
    keys = tmp_path / "keys.json"
    key = {
        "id": "ci",
        "sha256": hash_key(secret),
        "tenant": "acme",
        "subject": "ci",
        "allow": ["*"],
    }
    keys.write_text(json.dumps({"keys": [key]}), encoding="utf-8")
    port = _free_port()
    process = subprocess.Popen(
        [GROUNDWIRE, "serve", KB, "--keys", str(keys), "--port", str(port), "--log-queries"],
        stdout=subprocess.PIPE,
        stderr=subprocess.PIPE,
        text=True,
        env={**os.environ, "NO_PROXY": "127.0.0.1"},
    )
    try:
        url = f"http://127.0.0.1:{port}"
        for _ in range(600):  # start-up imports take seconds on a busy machine
            try:
                if httpx.get(f"{url}/healthz", timeout=1).status_code == 200:
                    break
            except httpx.TransportError:
                if process.poll() is not None:
                    pytest.fail(
                        f"the server exited: {process.stderr.read() if process.stderr else ''}"
                    )
                time.sleep(0.1)
        answer = httpx.post(f"{url}/v1/ground", json={"query": "rotate an API key"},
                            headers={"Authorization": f"Bearer {secret}"}, timeout=30)  # fmt: skip
        assert answer.status_code == 200
        assert httpx.post(f"{url}/v1/ground", json={"query": "x"}, timeout=30).status_code == 401
    finally:
        process.send_signal(signal.SIGTERM)
        out, err = process.communicate(timeout=60)
    assert process.returncode == 0, err
    assert "Traceback" not in out + err
    lines = [json.loads(line) for line in err.splitlines() if line.startswith("{")]
    grounded = next(
        line for line in lines if line["route"] == "/v1/ground" and line["status"] == 200
    )
    assert grounded["key"] == "ci"
    assert grounded["query"] == "rotate an API key"  # --log-queries
    assert secret not in err
    assert err.splitlines()[0].startswith("info: serving handbook on http://127.0.0.1:")
