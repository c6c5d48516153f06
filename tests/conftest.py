"""Shared fixtures: the shipped example knowledge base and small source builders."""

from __future__ import annotations

import importlib.util
import sys
from collections.abc import Callable
from pathlib import Path
from types import ModuleType
from typing import Any

import pytest

ROOT = Path(__file__).resolve().parents[1]
HANDBOOK = ROOT / "examples" / "handbook"
DATASETS = ROOT.parent / "shared" / "datasets"


@pytest.fixture
def handbook_path() -> Path:
    """The example knowledge base shipped in examples/handbook."""
    return HANDBOOK


def make_entry(entry_id: str, **fields: Any) -> dict[str, Any]:
    """A valid authored entry (as a mapping) with overridable fields."""
    entry: dict[str, Any] = {
        "id": entry_id,
        "title": fields.pop("title", entry_id.replace(".", " ").replace("-", " ").title()),
        "summary": fields.pop("summary", f"Summary of {entry_id}."),
        "domain": fields.pop("domain", entry_id.split(".")[0]),
        "integrations": fields.pop("integrations", []),
    }
    entry.update(fields)
    return entry


def make_source(
    *entries: dict[str, Any], source_id: str = "kb", version: str = "v1"
) -> dict[str, Any]:
    """A source mapping holding the given entries."""
    return {"id": source_id, "version": version, "entries": list(entries)}


@pytest.fixture
def entry_factory() -> Callable[..., dict[str, Any]]:
    """Build a valid entry mapping: ``entry_factory("billing.refunds", body=...)``."""
    return make_entry


@pytest.fixture
def source_factory() -> Callable[..., dict[str, Any]]:
    """Build a source mapping: ``source_factory(entry, ..., source_id="kb", version="v1")``."""
    return make_source


def load_by_path(name: str, path: Path) -> ModuleType:
    """Import a helper module that is not on sys.path, registered under ``name``.

    Registered because dataclasses look their module up while they are built, and so
    that test modules may ``from <name> import ...`` once this conftest has run.
    """
    if name in sys.modules:
        return sys.modules[name]
    spec = importlib.util.spec_from_file_location(name, path)
    assert spec is not None
    assert spec.loader is not None
    module = importlib.util.module_from_spec(spec)
    sys.modules[name] = module
    spec.loader.exec_module(module)
    return module


#: Helpers of the CLI tests (tests/cli/cli_helpers.py): ``from cli_helpers import run``.
CLI_HELPERS = load_by_path("cli_helpers", ROOT / "tests" / "cli" / "cli_helpers.py")
#: The docs sample tool (examples/tools/doc_samples.py): ``import doc_samples``.
DOC_SAMPLES = load_by_path("doc_samples", ROOT / "examples" / "tools" / "doc_samples.py")
#: Agent-memory test helpers: scopes, a settable clock, a small embedder.
MEMORY_HELPERS = load_by_path("memory_helpers", ROOT / "tests" / "memory" / "memory_helpers.py")
#: Scriptable OpenAI/Anthropic servers on 127.0.0.1 (tests/llm/fake_servers.py).
FAKE_SERVERS = load_by_path("fake_servers", ROOT / "tests" / "llm" / "fake_servers.py")


#: A raw-socket HTTP server on 127.0.0.1 that misbehaves on purpose (tests/ingest/).
HOSTILE = load_by_path("hostile_server", ROOT / "tests" / "ingest" / "hostile_server.py")
#: The fuzz suite's settings profile and example counter (tests/fuzz/fuzz_support.py).
FUZZ_SUPPORT = load_by_path("fuzz_support", ROOT / "tests" / "fuzz" / "fuzz_support.py")


@pytest.fixture
def fake_servers_module() -> ModuleType:
    """The fake_servers module: Reply, ToolCallSpec, FakeLLMServer, WAIT_LIMIT_S."""
    return FAKE_SERVERS


@pytest.fixture(scope="session")
def pdf_writer() -> ModuleType:
    """``examples/tools/make_docs_pdf.py``, the deterministic hand-written PDF writer:
    ``pdf_writer.pdf_bytes(pages, title)`` makes a small real PDF."""
    return load_by_path("make_docs_pdf", ROOT / "examples" / "tools" / "make_docs_pdf.py")


#: Loopback S3 (moto) and IMAP (dovecot) servers for the sync tests (tests/servers.py).
SERVERS = load_by_path("sync_servers", ROOT / "tests" / "servers.py")


def _serve(server: Any, what: str) -> Any:
    try:
        server.start()
    except SERVERS.UnavailableError as exc:
        server.stop()
        pytest.skip(f"{what} cannot start: {exc}")
    return server


@pytest.fixture(scope="session")
def moto_s3() -> Any:
    """moto's standalone S3 server on 127.0.0.1, started once per session."""
    server = _serve(SERVERS.MotoS3(), "moto's S3 server")
    yield server
    server.stop()


@pytest.fixture(scope="session")
def dovecot() -> Any:
    """Debian's dovecot IMAP server on 127.0.0.1, started once per session."""
    server = _serve(SERVERS.Dovecot(), "dovecot")
    yield server
    server.stop()


#: Message, mailbox and configuration builders for the sync tests (tests/synctools.py).
SYNCTOOLS = load_by_path("synctools", ROOT / "tests" / "synctools.py")
