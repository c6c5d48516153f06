"""The fuzz suite's settings and its count of examples run per target.

A helper module (tests/conftest.py registers it; fuzz tests ``from fuzz_support import``).

``GROUNDWIRE_FUZZ_EXAMPLES`` sets the examples per target (CI default below: bounded);
``scripts/fuzz.py`` runs the suite longer and reports. Every target counts the examples
it ran; with ``GROUNDWIRE_FUZZ_REPORT=path`` the counts are written there as JSON when
the session ends.
"""

from __future__ import annotations

import json
import os
from collections import Counter

from hypothesis import HealthCheck, settings
from hypothesis import strategies as st

#: Examples per target in CI: enough to catch regressions, cheap on two cores.
CI_EXAMPLES = 60
EXAMPLES = int(os.environ.get("GROUNDWIRE_FUZZ_EXAMPLES", CI_EXAMPLES))
RUNS: Counter[str] = Counter()

settings.register_profile(
    "fuzz",
    max_examples=EXAMPLES,
    deadline=None,  # time is never asserted; the work is bounded by design
    suppress_health_check=[HealthCheck.too_slow, HealthCheck.data_too_large],
    print_blob=True,
)
FUZZ = settings.get_profile("fuzz")


def ran(target: str) -> None:
    """Count one example of ``target``."""
    RUNS[target] += 1


def write_report() -> None:
    """Write the counts to ``GROUNDWIRE_FUZZ_REPORT``, when it is set."""
    path = os.environ.get("GROUNDWIRE_FUZZ_REPORT")
    if path:
        with open(path, "w", encoding="utf-8") as handle:
            json.dump(dict(sorted(RUNS.items())), handle, indent=1)


# -- shared strategies ----------------------------------------------------------------------

SCALARS = (
    st.none()
    | st.booleans()
    | st.integers()
    | st.floats(allow_nan=True)
    | st.text(max_size=12)
    | st.dates()
)
_FIELDS = "id title summary body domain integrations aliases keywords related parent kind"
KEYS = st.sampled_from([*_FIELDS.split(), "status", "metadata", "version", "entries", "x"])
KEYS = KEYS | st.text(max_size=6)
#: JSON-like values, sometimes wrapped in thousands of lists (deep nesting).
VALUES = st.recursive(
    SCALARS,
    lambda inner: st.lists(inner, max_size=4) | st.dictionaries(KEYS, inner, max_size=5),
    max_leaves=25,
)


@st.composite
def deep(draw: st.DrawFn, inner: st.SearchStrategy[object] = VALUES) -> object:
    value = draw(inner)
    for _ in range(draw(st.sampled_from([0, 0, 0, 1, 50, 99, 100, 101, 150, 1_500]))):
        value = [value] if draw(st.booleans()) else {"k": value}
    return value


@st.composite
def mutated(draw: st.DrawFn, data: bytes) -> bytes:
    """``data`` with a few random edits: bit flips, cuts, insertions, truncation."""
    out = bytearray(data)
    for _ in range(draw(st.integers(0, 4))):
        kind = draw(st.sampled_from(["flip", "cut", "insert", "truncate"]))
        at = draw(st.integers(0, max(len(out) - 1, 0)))
        if kind == "flip" and out:
            out[at] ^= 1 << draw(st.integers(0, 7))
        elif kind == "cut":
            del out[at : at + draw(st.integers(1, 16))]
        elif kind == "insert":
            out[at:at] = draw(st.binary(min_size=1, max_size=16) | st.sampled_from(NASTY))
        else:
            del out[at:]
    return bytes(out)


#: Byte strings that tend to break parsers.
NASTY = [
    b"[" * 2_000,
    b"{" * 2_000,
    b"- " * 2_000,
    b"\x00",
    b"\xff\xfe",
    b"\xef\xbb\xbf",
    b"&a [*a, *a]",
    b"*undefined",
    b"!!python/object:os.system",
    b"2026-02-30",
    b"---\n",
    b"\r",
    b"\\u0000",
    b"\\ud800",
    b"%PDF-1.4\n",
    b"<html><body>" + b"<div>" * 500,
    b"\\section{" * 200,
]


def flow(value: object) -> str:
    """``value`` as JSON text (also YAML flow style), written iteratively: any depth."""
    out: list[str] = []
    stack: list[object] = [value]
    while stack:
        item = stack.pop()
        if isinstance(item, _Raw):
            out.append(item.text)
        elif isinstance(item, list):
            stack.append(_Raw("]"))
            for n, child in enumerate(reversed(item)):
                stack.append(child)
                if n < len(item) - 1:
                    stack.append(_Raw(","))
            out.append("[")
        elif isinstance(item, dict):
            stack.append(_Raw("}"))
            pairs = list(item.items())
            for n, (key, child) in enumerate(reversed(pairs)):
                stack.append(child)
                stack.append(_Raw(json.dumps(str(key)) + ":"))
                if n < len(pairs) - 1:
                    stack.append(_Raw(","))
            out.append("{")
        else:
            out.append(json.dumps(item, default=str))
    return "".join(out)


class _Raw:
    __slots__ = ("text",)

    def __init__(self, text: str) -> None:
        self.text = text
