"""Layering: no module of groundwire imports a higher layer (docs: shared/ARCHITECTURE.md).

The order, lowest first::

    model < errors < i18n < config < text < embed < access < ingest < index < retrieve
          < backends < context < ground < memory < llm < memory.pipeline < eval < interfaces (cli,
          server, mcp, integrations) and groundwire/__init__.py

``memory.pipeline`` (the memory write pipeline) is a layer of its own above ``llm``: it
calls models through the providers, while ``llm`` uses the memory store below it.

A module may import its own layer and any lower one. ``eval`` is an interface but
imports only what lies below the interfaces (never the CLI, the server or the public
``groundwire`` package). Every import counts, including those inside functions and
``if TYPE_CHECKING:`` blocks: a type-only dependency is still a dependency.

The check reads the source with :mod:`ast`; nothing is imported.
"""

from __future__ import annotations

import ast
from dataclasses import dataclass
from pathlib import Path

import pytest

PACKAGE = "groundwire"
SRC = Path(__file__).resolve().parents[1] / "src" / PACKAGE

#: Layer of each top-level module or subpackage of groundwire, lowest first.
ORDER: tuple[tuple[str, ...], ...] = (
    ("model",),
    ("errors",),  # below config: every layer, config included, raises these
    ("i18n",),  # message catalogs: config validates locales, every layer may speak
    ("config",),
    ("text",),
    ("embed",),  # embedders and their cache: below the index that stores vectors
    ("access",),  # principals, labels, authorization: ingest labels, index and retrieve enforce
    ("ingest",),
    ("index",),
    ("sync",),  # source sync: adapters, custody and the ledger (ingest) into snapshots (index)
    ("retrieve",),
    ("backends",),  # search backends (embedded adapter, Milvus): same contract as the index
    ("context",),
    ("ground",),
    ("memory",),  # agent memory: a SQLite store with its own recall, below the clients
    ("llm",),  # providers and grounded generation: call the engine, never index internals
    ("memory.pipeline",),  # the memory write pipeline: the store's jobs, calling models
    ("eval",),
    # "": the package itself (groundwire/__init__.py); integrations: framework adapters;
    # payloads: the JSON shapes the interfaces share
    ("cli", "server", "mcp", "integrations", "payloads", ""),
)
RANK = {name: rank for rank, names in enumerate(ORDER) for name in names}
#: Subpackages that form a layer of their own, apart from their parent package's.
SUBLAYERS = frozenset(name for name in RANK if "." in name)

#: Known violations outside this test's remit, as (importing module, imported module).
#: Each must still occur (a fixed one is removed here); no new one may appear.
KNOWN_VIOLATIONS: frozenset[tuple[str, str]] = frozenset()


@dataclass(frozen=True, slots=True)
class Violation:
    module: str
    imported: str
    where: str  # path:line

    def __str__(self) -> str:
        return (
            f"{self.module} [{layer_of(self.module)}] imports {self.imported} "
            f"[{layer_of(self.imported)}] at {self.where}"
        )


def module_name(path: Path) -> str:
    """``src/groundwire/a/b.py`` → ``groundwire.a.b``; a package's ``__init__`` → the package."""
    parts = list(path.relative_to(SRC.parent).with_suffix("").parts)
    if parts[-1] == "__init__":
        parts.pop()
    return ".".join(parts)


def layer_of(module: str) -> str:
    """The layer of a groundwire module: its top-level module or subpackage ("" = the package)."""
    parts = module.split(".")
    if len(parts) > 2 and f"{parts[1]}.{parts[2]}" in SUBLAYERS:
        return f"{parts[1]}.{parts[2]}"
    return parts[1] if len(parts) > 1 else ""


def rank_of(module: str) -> int:
    layer = layer_of(module)
    if layer not in RANK:
        raise AssertionError(
            f"{module}: layer {layer!r} is not in tests/test_layers.py ORDER; place it there "
            "(see ARCHITECTURE.md) before adding modules to it"
        )
    return RANK[layer]


def is_module(name: str) -> bool:
    """Whether ``name`` (a dotted groundwire name) is a module or package in the source tree."""
    base = SRC.parent.joinpath(*name.split("."))
    return base.with_suffix(".py").is_file() or (base / "__init__.py").is_file()


def imports_in(source: str, module: str, *, package: bool) -> list[tuple[str, int]]:
    """Every groundwire module that ``source`` (of ``module``) imports, resolved, by line.

    ``package`` says ``module`` is a package's ``__init__``, which anchors relative imports.
    """
    anchor = module.split(".") if package else module.split(".")[:-1]
    found: list[tuple[str, int]] = []
    for node in ast.walk(ast.parse(source)):
        if isinstance(node, ast.Import):
            found += [(alias.name, node.lineno) for alias in node.names]
        elif isinstance(node, ast.ImportFrom):
            base = node.module or ""
            if node.level:
                parent = anchor[: len(anchor) - (node.level - 1)]
                base = ".".join([*parent, *([base] if base else [])])
            for alias in node.names:
                # "from groundwire import config" imports the module groundwire.config.
                sub = f"{base}.{alias.name}"
                found.append((sub if is_module(sub) else base, node.lineno))
    ours = [(n, line) for n, line in found if n == PACKAGE or n.startswith(PACKAGE + ".")]
    return sorted(ours, key=lambda item: item[1])


def violations_in(source: str, path: Path) -> list[Violation]:
    """Imports of a higher layer in ``source``, the text of ``path`` under src/groundwire."""
    module = module_name(path)
    rank = rank_of(module)
    where = path.relative_to(SRC.parent)
    return [
        Violation(module, imported, f"{where}:{line}")
        for imported, line in imports_in(source, module, package=path.name == "__init__.py")
        if rank_of(imported) > rank
    ]


def violations_of(path: Path) -> list[Violation]:
    return violations_in(path.read_text(encoding="utf-8"), path)


SOURCES = sorted(SRC.rglob("*.py"))
ALL_VIOLATIONS = [v for path in SOURCES for v in violations_of(path)]


def test_the_source_tree_is_found() -> None:
    assert (SRC / "__init__.py").is_file()
    assert len(SOURCES) > 20


@pytest.mark.parametrize("path", SOURCES, ids=module_name)
def test_no_module_imports_a_higher_layer(path: Path) -> None:
    found = [v for v in violations_of(path) if (v.module, v.imported) not in KNOWN_VIOLATIONS]
    assert not found, "imports of a higher layer:\n" + "\n".join(f"  {v}" for v in found)


def test_known_violations_still_exist() -> None:
    """A fixed violation must leave the allow-list, so it cannot come back unnoticed."""
    present = {(v.module, v.imported) for v in ALL_VIOLATIONS}
    fixed = sorted(KNOWN_VIOLATIONS - present)
    assert not fixed, f"fixed, remove from KNOWN_VIOLATIONS: {fixed}"


# --- the checker itself ---------------------------------------------------------------------------
@pytest.mark.parametrize(
    ("module", "imported", "upward"),
    [
        ("groundwire.retrieve.evidence", "groundwire.context.evidence", True),
        ("groundwire.retrieve.evidence", "groundwire.ground", True),
        ("groundwire.context.evidence", "groundwire.retrieve.evidence", False),
        ("groundwire.ground.evidence", "groundwire.context.evidence", False),
        ("groundwire.model", "groundwire.config", True),
        ("groundwire.index.cache", "groundwire", True),  # the public package is the top
        ("groundwire.eval.runner", "groundwire.index.knowledge_base", False),
        ("groundwire.eval.runner", "groundwire.cli", True),
        ("groundwire.eval.runner", "groundwire", True),
        ("groundwire.cli", "groundwire.eval", False),
        ("groundwire.cli", "groundwire", False),
        ("groundwire", "groundwire.cli", False),
        ("groundwire.retrieve.pipeline", "groundwire.retrieve.confidence", False),
        ("groundwire.memory.pipeline.worker", "groundwire.llm.base", False),
        ("groundwire.memory.store", "groundwire.memory.pipeline", True),
        ("groundwire.llm.client", "groundwire.memory.pipeline.jobs", True),
        ("groundwire.memory.pipeline", "groundwire.memory.store", False),
    ],
)
def test_ranks(module: str, imported: str, upward: bool) -> None:
    assert (rank_of(imported) > rank_of(module)) is upward


def test_an_unplaced_layer_is_an_error() -> None:
    with pytest.raises(AssertionError, match=r"not in tests/test_layers\.py ORDER"):
        rank_of("groundwire.unplaced_layer.module")


def test_imports_are_resolved_and_reported() -> None:
    """Absolute, relative, submodule and nested imports are all seen, with their lines."""
    source = (
        "import json\n"
        "from groundwire.model import Excerpt\n"
        "from groundwire import context\n"
        "from ..ground import engine\n"
        "from . import pipeline\n"
        "def f():\n"
        "    import groundwire.ground.engine\n"
    )
    module = "groundwire.retrieve.probe"
    assert imports_in(source, module, package=False) == [
        ("groundwire.model", 2),
        ("groundwire.context", 3),
        ("groundwire.ground.engine", 4),
        ("groundwire.retrieve.pipeline", 5),
        ("groundwire.ground.engine", 7),
    ]
    assert imports_in("from .evidence import x\n", "groundwire.retrieve", package=True) == [
        ("groundwire.retrieve.evidence", 1)
    ]
    found = [str(v) for v in violations_in(source, SRC / "retrieve" / "probe.py")]
    assert found == [
        "groundwire.retrieve.probe [retrieve] imports groundwire.context [context] "
        "at groundwire/retrieve/probe.py:3",
        "groundwire.retrieve.probe [retrieve] imports groundwire.ground.engine [ground] "
        "at groundwire/retrieve/probe.py:4",
        "groundwire.retrieve.probe [retrieve] imports groundwire.ground.engine [ground] "
        "at groundwire/retrieve/probe.py:7",
    ]
