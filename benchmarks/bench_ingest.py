"""Ingest throughput: loaders + chunking on examples/docs and on a generated ~50 MB corpus.

Data:

* ``examples/docs`` (the Relaybird docs folder: Markdown, MDX, HTML, JSON, Python, PDF);
* a corpus generated on disk from a fixed seed (``--seed``) in a temporary folder:
  ``--size-mb`` (50) MB of files of about 50 KB each, by bytes 40% Markdown (headings,
  paragraphs, lists, fenced code), 20% HTML (the same structure as tags, plus scripts,
  styles and navigation to drop), 15% Python (classes and functions with docstrings),
  10% JSON (nested configuration objects), 15% plain text, plus ``--pdf-mb`` (2) MB of
  PDF pages written by ``examples/tools/make_docs_pdf.py``. Words come from a vocabulary of
  20,000 pseudo-words with Zipf-distributed ranks.

Measures, per kind and in total, the median over ``--rounds`` rounds (3; the examples
folder is small, so it runs ``--small-rounds`` (50) rounds): seconds to load (read, decode,
extract: ``load_bytes``), seconds to chunk (``chunk_document`` with the default
``ChunkingConfig``: 1,600 code points, overlap 200), input MB/s (MB = 10^6 bytes of
files on disk) and chunks/s for load + chunk together. ``--corpus`` also times
``build_corpus`` over the generated tree (``git init`` first; git check-ignore
included) and an incremental rebuild after changing 1% of the files.

There is no peer: no other chunker is installed in this environment. The figures are
absolute and depend on the machine; the header says which.

Run from the repository root: ``.venv/bin/python benchmarks/bench_ingest.py``
(about two minutes with the default 50 MB; ``--size-mb 5`` for a quick check).
"""

from __future__ import annotations

import argparse
import importlib.util
import json
import random
import shutil
import statistics
import subprocess
import sys
import tempfile
import time
from collections import defaultdict
from collections.abc import Callable
from pathlib import Path

sys.path.insert(0, str(Path(__file__).resolve().parent))

from _common import print_table, source_state, versions
from groundwire import ChunkingConfig, build_corpus, chunk_document, load_bytes
from groundwire.ingest.loaders import walk_folder

REPO = Path(__file__).resolve().parents[1]
EXAMPLE_DOCS = REPO / "examples" / "docs"
FILE_BYTES = 50_000
SHARES = {"md": 0.40, "html": 0.20, "py": 0.15, "json": 0.10, "txt": 0.15}


# --- generation ------------------------------------------------------------------------------
class Words:
    """Zipf-distributed pseudo-words from a fixed seed."""

    def __init__(self, rng: random.Random, size: int = 20_000) -> None:
        letters = "abcdefghijklmnopqrstuvwxyz"
        self.vocab = ["".join(rng.choices(letters, k=rng.randint(3, 10))) for _ in range(size)]
        weights = [1.0 / (rank + 1) ** 1.1 for rank in range(size)]
        self.rng = rng
        self.cum = list(_accumulate(weights))

    def take(self, n: int) -> list[str]:
        return self.rng.choices(self.vocab, cum_weights=self.cum, k=n)

    def sentence(self) -> str:
        words = self.take(self.rng.randint(6, 18))
        return " ".join(words).capitalize() + "."

    def paragraph(self) -> str:
        return " ".join(self.sentence() for _ in range(self.rng.randint(2, 6)))

    def ident(self) -> str:
        return "_".join(self.take(2))


def _accumulate(values: list[float]) -> list[float]:
    total, out = 0.0, []
    for value in values:
        total += value
        out.append(total)
    return out


def _markdown(w: Words, target: int) -> str:
    parts = [f"---\ntitle: {w.sentence()}\n---\n\n# {w.sentence()}\n"]
    size = 0
    while size < target:
        block = w.rng.random()
        if block < 0.15:
            part = f"\n## {' '.join(w.take(4))}\n"
        elif block < 0.25:
            part = f"\n### {' '.join(w.take(3))}\n"
        elif block < 0.35:
            part = "\n" + "\n".join(f"- {w.sentence()}" for _ in range(4)) + "\n"
        elif block < 0.42:
            part = f"\n```python\n{w.ident()} = {w.rng.randint(0, 999)}\n# {w.sentence()}\n```\n"
        else:
            part = f"\n{w.paragraph()}\n"
        parts.append(part)
        size += len(part)
    return "".join(parts)


def _html(w: Words, target: int) -> str:
    parts = [
        f"<!DOCTYPE html><html><head><title>{w.sentence()}</title>"
        "<style>body{font:14px sans-serif}</style><script>var x = 1;</script></head><body>"
        f"<nav><a href='/'>Home</a> | <a href='/docs'>Docs</a></nav><h1>{w.sentence()}</h1>"
    ]
    size = 0
    while size < target:
        block = w.rng.random()
        if block < 0.15:
            part = f"<h2>{' '.join(w.take(4))}</h2>\n"
        elif block < 0.25:
            items = "".join(f"<li>{w.sentence()}</li>" for _ in range(4))
            part = f"<ul>{items}</ul>\n"
        elif block < 0.32:
            cells = "".join(f"<td>{word}</td>" for word in w.take(4))
            part = f"<table><tr>{cells}</tr><tr>{cells}</tr></table>\n"
        else:
            part = f"<p>{w.paragraph()}</p>\n"
        parts.append(part)
        size += len(part)
    return "".join(parts) + "<footer>generated</footer></body></html>"


def _python(w: Words, target: int) -> str:
    parts = [f'"""{w.sentence()}"""\n\nfrom __future__ import annotations\n\nimport os\n']
    size = 0
    while size < target:
        name = w.ident()
        if w.rng.random() < 0.3:
            methods = "".join(
                f"\n    def {w.ident()}(self, value: int) -> int:\n"
                f'        """{w.sentence()}"""\n        return value * {w.rng.randint(2, 9)}\n'
                for _ in range(w.rng.randint(2, 5))
            )
            part = (
                f'\n\nclass {name.title().replace("_", "")}:\n    """{w.paragraph()}"""\n{methods}'
            )
        else:
            body = "\n".join(f"    # {w.sentence()}" for _ in range(w.rng.randint(1, 4)))
            part = (
                f'\n\ndef {name}(items: list[str]) -> int:\n    """{w.paragraph()}"""\n'
                f"{body}\n    return len(items) + {w.rng.randint(0, 99)}\n"
            )
        parts.append(part)
        size += len(part)
    return "".join(parts)


def _json(w: Words, target: int) -> str:
    value: dict[str, object] = {"title": w.sentence()}
    size = 0
    while size < target:
        section = {
            w.ident(): {"type": "string", "default": w.take(1)[0], "description": w.paragraph()}
            for _ in range(w.rng.randint(2, 6))
        }
        value[w.ident()] = section
        size += len(json.dumps(section))
    return json.dumps(value, indent=2)


def _text(w: Words, target: int) -> str:
    parts, size = [], 0
    while size < target:
        part = w.paragraph() + "\n\n"
        parts.append(part)
        size += len(part)
    return "".join(parts)


def generate(folder: Path, size_mb: float, pdf_mb: float, seed: int) -> dict[str, int]:
    """Write the corpus; returns bytes written per extension."""
    rng = random.Random(seed)
    words = Words(rng)
    makers: dict[str, Callable[[Words, int], str]] = {
        "md": _markdown,
        "html": _html,
        "py": _python,
        "json": _json,
        "txt": _text,
    }
    written: dict[str, int] = defaultdict(int)
    for ext, share in SHARES.items():
        budget = int(size_mb * 1e6 * share)
        n = 0
        while written[ext] < budget:
            data = makers[ext](words, FILE_BYTES).encode()
            sub = folder / ext / f"d{n // 100:03d}"
            sub.mkdir(parents=True, exist_ok=True)
            (sub / f"f{n:05d}.{ext}").write_bytes(data)
            written[ext] += len(data)
            n += 1
    if pdf_mb > 0:
        make_pdf = _pdf_writer()
        n = 0
        while written["pdf"] < pdf_mb * 1e6:
            pages = [[words.sentence()[:90] for _ in range(45)] for _ in range(20)]
            data = make_pdf(pages, words.sentence())
            (folder / "pdf").mkdir(exist_ok=True)
            (folder / "pdf" / f"guide{n:03d}.pdf").write_bytes(data)
            written["pdf"] += len(data)
            n += 1
    return dict(written)


def _pdf_writer() -> Callable[[list[list[str]], str], bytes]:
    spec = importlib.util.spec_from_file_location(
        "_make_pdf", EXAMPLE_DOCS.parent / "tools" / "make_docs_pdf.py"
    )
    assert spec is not None
    assert spec.loader is not None
    module = importlib.util.module_from_spec(spec)
    spec.loader.exec_module(module)
    writer: Callable[[list[list[str]], str], bytes] = module.pdf_bytes
    return writer


# --- measurement -----------------------------------------------------------------------------
def measure(folder: Path, rounds: int, config: ChunkingConfig) -> list[list[object]]:
    """Median load and chunk seconds per kind over ``rounds``; table rows with totals."""
    files, skipped = walk_folder(folder)
    if skipped:
        print(f"  ({len(skipped)} entries left out by the walk, e.g. {skipped[0]})")
    blobs = [(rel, path.read_bytes()) for path, rel in files]  # disk reads stay out of timing
    load: dict[str, list[float]] = defaultdict(list)
    chunk: dict[str, list[float]] = defaultdict(list)
    sizes: dict[str, int] = defaultdict(int)
    counts: dict[str, int] = defaultdict(int)
    clock = time.perf_counter
    for r in range(rounds):
        round_load: dict[str, float] = defaultdict(float)
        round_chunk: dict[str, float] = defaultdict(float)
        for rel, data in blobs:
            t0 = clock()
            doc = load_bytes(data, rel, path=rel)
            t1 = clock()
            chunks = chunk_document(doc, config)
            t2 = clock()
            round_load[doc.kind] += t1 - t0
            round_chunk[doc.kind] += t2 - t1
            if r == 0:
                sizes[doc.kind] += len(data)
                counts[doc.kind] += len(chunks)
        for kind in round_load:
            load[kind].append(round_load[kind])
            chunk[kind].append(round_chunk[kind])
    rows = [_row(k, sizes[k], counts[k], load[k], chunk[k]) for k in sorted(sizes)]
    total_load = [sum(load[k][r] for k in load) for r in range(rounds)]
    total_chunk = [sum(chunk[k][r] for k in chunk) for r in range(rounds)]
    rows.append(_row("**all**", sum(sizes.values()), sum(counts.values()), total_load, total_chunk))
    return rows


def _row(kind: str, size: int, chunks: int, load: list[float], chunk: list[float]) -> list[object]:
    both = statistics.median(a + b for a, b in zip(load, chunk, strict=True))
    return [
        kind,
        f"{size / 1e6:.2f}",
        f"{chunks:,}",
        f"{statistics.median(load):.3f}",
        f"{statistics.median(chunk):.3f}",
        f"{size / 1e6 / both:.1f}",
        f"{chunks / both:,.0f}",
    ]


HEADERS = ["kind", "MB", "chunks", "load s", "chunk s", "MB/s", "chunks/s"]


def corpus_timings(folder: Path, config: ChunkingConfig) -> None:
    """build_corpus over the whole tree, then an incremental rebuild after 1% changes."""
    if shutil.which("git") is None:
        print("git not found: --corpus skipped")
        return
    subprocess.run(["git", "init", "-q", str(folder)], check=True)
    start = time.perf_counter()
    first = build_corpus(folder, ["."], config=config, max_total_bytes=10**9)
    full = time.perf_counter() - start
    # Every 100th file that is not JSON (appending text would make JSON invalid).
    editable = [s for s in first.sources if s.kind != "json"]
    changed = [folder / s.path for s in editable[::100]]
    for path in changed:
        path.write_bytes(path.read_bytes() + b"\n\nAppended paragraph for the rebuild.\n")
    start = time.perf_counter()
    second = build_corpus(folder, ["."], config=config, max_total_bytes=10**9, previous=first)
    again = time.perf_counter() - start
    mb = first.bytes_read / 1e6
    print_table(
        ["build", "files", "chunks", "seconds", "MB/s", "reused", "re-chunked"],
        [
            ["full", len(first.sources), f"{len(first.chunks):,}", f"{full:.2f}",
             f"{mb / full:.1f}", len(first.reused), len(first.added)],
            ["incremental (1% changed)", len(second.sources), f"{len(second.chunks):,}",
             f"{again:.2f}", f"{mb / again:.1f}", len(second.reused), len(second.changed)],
        ],
    )  # fmt: skip


def main() -> None:
    parser = argparse.ArgumentParser(description=__doc__.split("\n\n")[0])
    parser.add_argument("--size-mb", type=float, default=50.0)
    parser.add_argument("--pdf-mb", type=float, default=2.0)
    parser.add_argument("--seed", type=int, default=7)
    parser.add_argument("--rounds", type=int, default=3)
    parser.add_argument("--small-rounds", type=int, default=50)
    parser.add_argument("--corpus", action="store_true", help="also time build_corpus")
    parser.add_argument("--keep", type=Path, help="generate into this folder and keep it")
    args = parser.parse_args()
    config = ChunkingConfig()
    print(versions(["pypdf", "selectolax", "httpx"]))
    print(source_state(REPO))
    print(f"chunking: size {config.size}, overlap {config.overlap} code points\n")

    print(f"## examples/docs ({args.small_rounds} rounds)\n")
    print_table(HEADERS, measure(EXAMPLE_DOCS, args.small_rounds, config))

    folder = args.keep or Path(tempfile.mkdtemp(prefix="gw-ingest-"))
    try:
        start = time.perf_counter()
        written = generate(folder, args.size_mb, args.pdf_mb, args.seed)
        total = sum(written.values()) / 1e6
        print(
            f"\n## generated corpus: {total:.1f} MB in {time.perf_counter() - start:.0f} s "
            f"(seed {args.seed}; {args.rounds} rounds)\n"
        )
        print_table(HEADERS, measure(folder, args.rounds, config))
        if args.corpus:
            print("\n## build_corpus (git check-ignore, hashing, secret scan, load, chunk)\n")
            corpus_timings(folder, config)
    finally:
        if args.keep is None:
            shutil.rmtree(folder, ignore_errors=True)


if __name__ == "__main__":
    main()
