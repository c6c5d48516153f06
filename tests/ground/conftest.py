"""Fixtures for engine tests: engines that are always closed, small sources, the handbook."""

from __future__ import annotations

import threading
from collections.abc import Callable, Iterator
from pathlib import Path
from typing import Any

import pytest

from groundwire import GroundingConfig, GroundingEngine, KnowledgeSource, load_sources


@pytest.fixture
def make_engine() -> Iterator[Callable[..., GroundingEngine]]:
    """Create engines that are closed when the test ends.

    A cache with a ``release`` event (a blocking test cache) is released first.
    """
    engines: list[GroundingEngine] = []
    gates: list[threading.Event] = []

    def make(config: GroundingConfig, **kwargs: Any) -> GroundingEngine:
        gate = getattr(kwargs.get("cache"), "release", None)
        if isinstance(gate, threading.Event):
            gates.append(gate)
        engine = GroundingEngine(config, **kwargs)
        engines.append(engine)
        return engine

    yield make
    for gate in gates:  # a blocked build must not outlive its test
        gate.set()
    for engine in engines:
        engine.close()


@pytest.fixture
def animals(
    entry_factory: Callable[..., dict[str, Any]], source_factory: Callable[..., dict[str, Any]]
) -> dict[str, Any]:
    """A small source: zebra, giraffe and a Slack-only entry."""
    return source_factory(
        entry_factory(
            "animals.zebra",
            title="Zebra",
            summary="Zebras have stripes.",
            body="A zebra is a striped horse.",
            related=["animals.giraffe"],
        ),
        entry_factory("animals.giraffe", title="Giraffe", summary="Giraffes have long necks."),
        entry_factory(
            "slack.okapi",
            title="Okapi",
            summary="Okapi notes shared in Slack.",
            integrations=["slack"],
        ),
    )


@pytest.fixture
def handbook_sources(handbook_path: Path) -> list[KnowledgeSource]:
    """The example handbook, loaded as sources."""
    return load_sources(handbook_path)
