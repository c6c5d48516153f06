"""JSON and YAML from untrusted text, with bounded nesting and bounded expansion.

``json.loads`` and ``yaml.safe_load`` recurse once per nesting level: a few thousand
``[`` raise :class:`RecursionError` (PyYAML also spends seconds scanning them), and YAML
aliases can expand a small file into billions of values, or into a cycle that the
hashing and saving code would then walk forever. Every JSON or YAML text groundwire
parses — source files, ``source.yaml``, front matter, JSON documents, fetched pages —
goes through :func:`parse_json` or :func:`parse_yaml`, which raise :class:`SourceError`
naming the file (and line) instead:

- nesting deeper than :data:`~groundwire.config.MAX_NESTING_DEPTH` levels (lists and
  mappings; YAML aliases count where they are used, so a cycle is too deep);
- YAML whose aliases expand to more values than the text has characters (no file
  without aliases comes near that; a "billion laughs" file stops at once).
"""

from __future__ import annotations

import json
from typing import Any

import yaml

from groundwire.config import MAX_NESTING_DEPTH
from groundwire.errors import SourceError

__all__ = ["check_nesting", "parse_json", "parse_yaml"]


def _too_deep(where: str, max_depth: int) -> SourceError:
    return SourceError(
        f"{where}: nested more than {max_depth} levels deep; flatten the data "
        "(lists and mappings inside each other)"
    )


def check_nesting(
    value: Any, where: str, *, max_depth: int = MAX_NESTING_DEPTH, max_values: int | None = None
) -> None:
    """Raise :class:`SourceError` when parsed data nests deeper than ``max_depth`` levels
    or holds more than ``max_values`` values (shared values counted at each use).

    Iterative, so it never recurses itself; shared and cyclic values are walked at every
    place they are used, which is what any consumer of the data would do.
    """
    stack: list[tuple[Any, int]] = [(value, 0)]
    seen = 0
    while stack:
        item, depth = stack.pop()
        seen += 1
        if max_values is not None and seen > max_values:
            raise SourceError(
                f"{where}: holds more than {max_values:,} values once YAML aliases are "
                "expanded; write the values out or use fewer aliases"
            )
        if isinstance(item, dict):
            children: Any = item.values()
        elif isinstance(item, list | tuple):
            children = item
        else:
            continue
        if depth >= max_depth:
            raise _too_deep(where, max_depth)
        stack.extend((child, depth + 1) for child in children)


def parse_json(
    text: str | bytes, where: str, *, line_offset: int = 0, fix: str = "fix the syntax"
) -> Any:
    """Parse JSON text, bounded as the module says; errors name ``where`` and the line.

    ``line_offset`` is added to the line (for one line of a JSON Lines file); ``fix`` is
    the hint that ends a syntax error's message.
    """
    try:
        value = json.loads(text)
    except RecursionError as exc:
        raise _too_deep(where, MAX_NESTING_DEPTH) from exc
    except UnicodeDecodeError as exc:
        raise SourceError(f"{where}: not valid UTF-8 (byte {exc.start}); save it as UTF-8") from exc
    except json.JSONDecodeError as exc:
        line = exc.lineno + line_offset
        raise SourceError(f"{where}:{line}: invalid JSON ({exc.msg}); {fix}") from exc
    check_nesting(value, where)
    return value


class _BoundedLoader(yaml.SafeLoader):
    """PyYAML's safe loader, refusing nesting past the limit while it scans and composes."""

    def __init__(self, stream: str) -> None:
        super().__init__(stream)
        self._depth = 0

    def fetch_flow_collection_start(self, TokenClass: Any) -> None:  # noqa: N803 (PyYAML's name)
        if self.flow_level >= MAX_NESTING_DEPTH:
            raise yaml.scanner.ScannerError(
                None, None, f"nested more than {MAX_NESTING_DEPTH} levels deep", self.get_mark()
            )
        super().fetch_flow_collection_start(TokenClass)

    def compose_node(self, parent: Any, index: Any) -> Any:
        self._depth += 1
        try:
            if self._depth > MAX_NESTING_DEPTH:
                event = self.peek_event()  # type: ignore[no-untyped-call]
                raise yaml.composer.ComposerError(
                    None,
                    None,
                    f"nested more than {MAX_NESTING_DEPTH} levels deep",
                    event.start_mark,
                )
            return super().compose_node(parent, index)
        finally:
            self._depth -= 1


def parse_yaml(
    text: str,
    where: str,
    *,
    line_offset: int = 0,
    what: str = "invalid YAML",
    fix: str = "fix the syntax",
) -> Any:
    """Parse YAML text (safe tags only), bounded as the module says.

    Errors read ``{where}:{line}: {what} ({problem}); {fix}``; ``line_offset`` is added
    to the line, for front matter that starts below the top of its file.
    """
    loader: _BoundedLoader | None = None
    try:
        loader = _BoundedLoader(text)  # the reader already refuses some characters
        value = loader.get_single_data()
    except yaml.YAMLError as exc:
        # The context mark points at the construct that failed (e.g. an unclosed
        # bracket); the problem mark at where the parser gave up.
        mark = getattr(exc, "context_mark", None) or getattr(exc, "problem_mark", None)
        line = f":{mark.line + 1 + line_offset}" if mark is not None else ""
        problem = getattr(exc, "problem", None) or str(exc).splitlines()[0]
        if problem.startswith("nested more than"):
            fix = "flatten the data"
        raise SourceError(f"{where}{line}: {what} ({problem}); {fix}") from exc
    except ValueError as exc:  # a date YAML recognizes but the calendar does not: 2026-02-30
        raise SourceError(f"{where}: invalid YAML value ({exc}); fix the value") from exc
    except RecursionError as exc:  # pragma: no cover - the depth bounds above come first
        raise _too_deep(where, MAX_NESTING_DEPTH) from exc
    finally:
        if loader is not None:
            loader.dispose()
    check_nesting(value, where, max_values=len(text) + 1)
    return value
