"""Helpers shared by the benchmark scripts: interleaved timing, percentiles, memory, peers.

Not a benchmark itself. The scripts import it as a sibling module (they run from the
repository root as ``.venv/bin/python benchmarks/<script>.py``).
"""

from __future__ import annotations

import gc
import importlib.metadata
import os
import platform
import re
import resource
import statistics
import subprocess
import sys
import time
from collections.abc import Callable, Iterable, Sequence
from dataclasses import dataclass, field
from pathlib import Path
from typing import Any

import numpy as np

#: Lucene's 33-word English list; bm25s' "en" and groundwire's default are the same words.
LUCENE_STOPWORDS: tuple[str, ...] = (
    *("a", "an", "and", "are", "as", "at", "be", "but", "by", "for", "if", "in", "into"),
    *("is", "it", "no", "not", "of", "on", "or", "such", "that", "the", "their", "then"),
    *("there", "these", "they", "this", "to", "was", "will", "with"),
)

Search = Callable[[str], list[str]]


@dataclass
class System:
    """One system under test: a name and a function from query text to the top ids."""

    name: str
    search: Search
    queries: Sequence[str]
    note: str = ""
    qps: list[float] = field(default_factory=list)
    latencies_ms: list[list[float]] = field(default_factory=list)  # one list per round


def run_rounds(systems: Sequence[System], rounds: int, *, verbose: bool = True) -> None:
    """Time every system's query loop ``rounds`` times, interleaved.

    Each round runs every system once over its queries (one query at a time), in an
    order rotated by one per round, so slow phases of a noisy machine hit all systems.
    Fills ``qps`` (one value per round) and ``latencies_ms`` (per query, per round).
    """
    clock = time.perf_counter_ns
    for r in range(rounds):
        shift = r % len(systems)
        for system in [*systems[shift:], *systems[:shift]]:
            search, queries = system.search, system.queries
            lat: list[float] = []
            gc.collect()
            start = clock()
            for query in queries:
                t0 = clock()
                search(query)
                lat.append((clock() - t0) / 1e6)
            total = (clock() - start) / 1e9
            system.qps.append(len(queries) / total)
            system.latencies_ms.append(lat)
            if verbose:
                print(
                    f"  round {r + 1}/{rounds} {system.name:<32} {len(queries) / total:>10.1f} q/s",
                    file=sys.stderr,
                )


def percentile(values: Sequence[float] | np.ndarray, q: float) -> float:
    """The ``q``-th percentile (0-100, linear interpolation) of ``values``."""
    return float(np.percentile(np.asarray(values, dtype=np.float64), q))


def round_percentile(system: System, q: float) -> float:
    """Median over rounds of the per-round ``q``-th latency percentile (ms)."""
    return statistics.median(percentile(lat, q) for lat in system.latencies_ms)


def timed(fn: Callable[[], Any]) -> tuple[Any, float]:
    """Run ``fn`` once; return its result and the wall seconds it took."""
    start = time.perf_counter()
    out = fn()
    return out, time.perf_counter() - start


# -- memory ---------------------------------------------------------------------------------
def _status_kib(key: str) -> int | None:
    try:
        with open("/proc/self/status", encoding="ascii") as fh:
            for line in fh:
                if line.startswith(key + ":"):
                    return int(line.split()[1])
    except OSError:
        return None
    return None


def rss_mib() -> float | None:
    """Current resident set size (MiB), from /proc (Linux), or None."""
    kib = _status_kib("VmRSS")
    return None if kib is None else kib / 1024


def peak_rss_mib() -> float:
    """Peak resident set size of this process (MiB): ``getrusage(...).ru_maxrss``.

    After :func:`reset_peak_rss` succeeded this is the peak since the reset.
    """
    maxrss = resource.getrusage(resource.RUSAGE_SELF).ru_maxrss
    return maxrss / 1024 / (1024 if sys.platform == "darwin" else 1)


def reset_peak_rss() -> bool:
    """Reset the kernel's peak-RSS mark (Linux ``clear_refs`` 5); False if unsupported."""
    try:
        with open("/proc/self/clear_refs", "w", encoding="ascii") as fh:
            fh.write("5")
    except OSError:
        return False
    return True


# -- environment ----------------------------------------------------------------------------
def versions(packages: Iterable[str]) -> str:
    """One line: Python, numpy and the given packages' versions, plus CPU count."""
    parts = [f"Python {platform.python_version()}", f"numpy {np.__version__}"]
    for name in packages:
        try:
            parts.append(f"{name} {importlib.metadata.version(name)}")
        except importlib.metadata.PackageNotFoundError:
            parts.append(f"{name} (not installed)")
    parts.append(f"nproc {os.cpu_count()}")
    return ", ".join(parts)


def source_state(repo: Path) -> str:
    """Which groundwire code ran: the git commit and whether ``src/`` differs from it.

    If groundwire was imported from elsewhere (e.g. an exported commit on PYTHONPATH),
    says so instead of describing the checkout.
    """
    import groundwire

    location = Path(groundwire.__file__).resolve().parent
    if not location.is_relative_to(repo / "src"):
        return f"groundwire imported from {location} (not this checkout)"

    def git(*args: str) -> str:
        try:
            done = subprocess.run(
                ["git", "-C", str(repo), *args], capture_output=True, text=True, check=True
            )
        except (OSError, subprocess.CalledProcessError):
            return ""
        return done.stdout.rstrip()

    commit = git("rev-parse", "--short=10", "HEAD") or "unknown commit"
    dirty = git("status", "--porcelain", "--", "src")
    return f"groundwire at {commit}" + (
        f", src/ modified: {' '.join(line[3:] for line in dirty.splitlines())}"
        if dirty
        else ", src/ clean"
    )


def describe_groundwire(kb: Any) -> str:
    """What a groundwire KnowledgeBase was built with: scoring, field weights, stop words."""
    settings = kb.settings
    weights = ", ".join(f"{k} {v:g}" for k, v in settings.field_weights.items())
    stop = getattr(kb.analyzer, "_stopwords", None)
    stop_text = "?" if stop is None else f"{len(stop)} stop words"
    return (
        f"groundwire settings: scoring {settings.scoring}, k1 {settings.k1:g}, b {settings.b:g}, "
        f"fields {{{weights}}}, stopwords={settings.analyzer.stopwords!r} ({stop_text}), "
        f"stem={settings.analyzer.stem}"
    )


def print_table(headers: Sequence[str], rows: Sequence[Sequence[object]]) -> None:
    """Print a Markdown table (pastes straight into docs/BENCHMARKS.md)."""
    cells = [[str(c) for c in row] for row in rows]
    widths = [max(len(h), *(len(r[i]) for r in cells)) for i, h in enumerate(headers)]
    print("| " + " | ".join(h.ljust(w) for h, w in zip(headers, widths, strict=True)) + " |")
    print("|" + "|".join("-" * (w + 2) for w in widths) + "|")
    for row in cells:
        print("| " + " | ".join(c.ljust(w) for c, w in zip(row, widths, strict=True)) + " |")


# -- peers ------------------------------------------------------------------------------------
_QUERY_SYNTAX = re.compile(r"[^\w\s]+")


def tantivy_query_text(query: str) -> str:
    """Query text the tantivy parser always accepts as plain terms.

    Punctuation (``+ - : " ( ) [ ] ^ ~ *`` ...) becomes spaces and the text is lowercased,
    so AND/OR/NOT/IN are ordinary words (the analyzers lowercase anyway).
    """
    return _QUERY_SYNTAX.sub(" ", query).lower().replace("_", " ")


@dataclass
class TantivyIndex:
    """A built tantivy index with a searcher, and a top-k search returning stored ids."""

    index: Any
    searcher: Any
    fields: list[str]
    path: Path | None

    def search(self, query: str, k: int = 10) -> list[str]:
        """Top-k ids for ``query`` (disjunction over title and body; BM25, k1=1.2, b=0.75)."""
        text = tantivy_query_text(query)
        if not text.strip():
            return []
        try:
            parsed = self.index.parse_query(text, self.fields)
        except ValueError:
            return []
        # count=False lets tantivy prune with block-max WAND instead of counting all matches.
        hits = self.searcher.search(parsed, k, count=False).hits
        doc = self.searcher.doc
        return [doc(address)["id"][0] for _, address in hits]


def build_tantivy(
    docs: Iterable[tuple[str, str, str]],
    *,
    stopwords: bool,
    path: Path | None = None,
    heap_bytes: int = 512 * 1024 * 1024,
    threads: int = 1,
) -> TantivyIndex:
    """Index (id, title, body) triples with tantivy's ``en_stem`` analysis.

    ``stopwords=True`` registers simple tokenizer → remove_long(40) → lowercase →
    Lucene's 33 stop words → English stemmer, i.e. ``en_stem`` plus the stop words
    groundwire and bm25s drop (``en_stem`` itself keeps stop words).
    """
    import tantivy

    tokenizer = "en_stem"
    analyzer = None
    if stopwords:
        tokenizer = "en_stem_lucene_stop"
        analyzer = (
            tantivy.TextAnalyzerBuilder(tantivy.Tokenizer.simple())
            .filter(tantivy.Filter.remove_long(40))
            .filter(tantivy.Filter.lowercase())
            .filter(tantivy.Filter.custom_stopword(list(LUCENE_STOPWORDS)))
            .filter(tantivy.Filter.stemmer("english"))
            .build()
        )
    builder = tantivy.SchemaBuilder()
    builder.add_text_field("id", stored=True, tokenizer_name="raw")
    builder.add_text_field("title", tokenizer_name=tokenizer)
    builder.add_text_field("body", tokenizer_name=tokenizer)
    schema = builder.build()
    index = tantivy.Index(schema, path=None if path is None else str(path))
    if analyzer is not None:
        index.register_tokenizer(tokenizer, analyzer)
    writer = index.writer(heap_bytes, threads)
    add, document = writer.add_document, tantivy.Document
    for doc_id, title, body in docs:
        add(document(id=doc_id, title=title, body=body))
    writer.commit()
    writer.wait_merging_threads()
    index.reload()
    return TantivyIndex(index, index.searcher(), ["title", "body"], path)


def directory_mib(path: Path) -> float:
    """Total size of the files under ``path`` (MiB)."""
    return sum(p.stat().st_size for p in path.rglob("*") if p.is_file()) / 2**20
