"""Title-less and short-document simulations of SciFact and CACM, against bm25s.

MED and NPL, the classic collections where groundwire trailed bm25s, cannot be obtained
on this machine (docs/BENCHMARKS.md, "Held-out collections"). Both lack document titles
and NPL's documents are very short, so this script derives, from each BEIR collection on
disk, a variant whose titles are moved into the text ("no title") and one holding only
the title and the first sentence, without a title field ("short"). It prints nDCG@10 of
bm25s (``groundwire eval --compare``'s configuration) and of groundwire's document
defaults and variants on each, with the ratio to bm25s.

Run from the repository root: ``.venv/bin/python benchmarks/bench_heldout.py`` (about
4 minutes on 2 cores; ``--datasets PATH ...`` to choose the collections).
"""

from __future__ import annotations

import argparse
import dataclasses
import re
from pathlib import Path

from groundwire import AnalyzerConfig, Document, IndexSettings
from groundwire.config import document_settings
from groundwire.eval import EvalDataset, load_dataset
from groundwire.eval.peers import evaluate_bm25s
from groundwire.eval.runner import groundwire_builder, report

REPO = Path(__file__).resolve().parents[1]
_SENTENCE = re.compile(r"(?<=[.!?])\s")


def _shared() -> Path:
    """The shared datasets, next to the repository or next to its folder of worktrees."""
    for folder in (REPO.parent, REPO.parent.parent):
        if (folder / "shared" / "datasets").exists():
            return folder / "shared" / "datasets"
    return REPO.parent / "shared" / "datasets"


def _no_title(doc: Document) -> Document:
    return Document(doc.id, "", f"{doc.title}. {doc.text}".strip(". "), doc.metadata)


def _short(doc: Document) -> Document:
    first = _SENTENCE.split(doc.text.strip(), maxsplit=1)[0] if doc.text.strip() else ""
    return Document(doc.id, "", f"{doc.title} {first}".strip(), doc.metadata)


def variants_of(data: EvalDataset) -> dict[str, EvalDataset]:
    """The collection, its title-less variant and its short-document variant."""
    return {
        data.name: data,
        f"{data.name}, no title": dataclasses.replace(
            data, documents=tuple(map(_no_title, data.documents))
        ),
        f"{data.name}, short": dataclasses.replace(
            data, documents=tuple(map(_short, data.documents))
        ),
    }


def settings_variants() -> dict[str, IndexSettings]:
    """The document defaults and the variants docs/BENCHMARKS.md reports."""
    final = document_settings()
    extended = final.analyzer

    def pairs(weight: float) -> IndexSettings:
        return dataclasses.replace(
            final, field_weights={"title": 3.0, "body": 1.0, "bigrams": weight}
        )

    return {
        "defaults": final,
        "no term pairs": dataclasses.replace(final, field_weights={"title": 3.0, "body": 1.0}),
        "term pairs 0.1": pairs(0.1),
        "term pairs 0.5": pairs(0.5),
        "Lucene stop words": dataclasses.replace(final, analyzer=AnalyzerConfig("english")),
        "b 0.5": dataclasses.replace(final, b=0.5),
        "k1 1.2": dataclasses.replace(final, k1=1.2),
        "k1 2.0": dataclasses.replace(final, k1=2.0),
        "numbers dropped": dataclasses.replace(
            final, analyzer=dataclasses.replace(extended, keep_numbers=False)
        ),
    }


def main() -> None:
    parser = argparse.ArgumentParser(description=__doc__.split("\n\n")[0])
    shared = _shared()
    parser.add_argument(
        "--datasets",
        nargs="+",
        type=Path,
        default=[shared / "scifact", shared / "cacm"],
        help="BEIR collections to derive the variants from",
    )
    args = parser.parse_args()
    settings = settings_variants()
    print("collection | bm25s | " + " | ".join(settings))
    for path in args.datasets:
        for name, data in variants_of(load_dataset(path)).items():
            peer = evaluate_bm25s(data).metrics["ndcg@10"]
            cells = []
            for chosen in settings.values():
                ours = report("groundwire", data, groundwire_builder(data, chosen))
                score = ours.metrics["ndcg@10"]
                cells.append(f"{score:.4f} ({score / peer:.3f}x)")
            print(f"{name} | {peer:.4f} | " + " | ".join(cells), flush=True)


if __name__ == "__main__":
    main()
