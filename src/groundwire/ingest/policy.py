"""Access labels for document chunks at ingest: an ``access.yaml`` policy and a host labeler.

A policy maps paths to labels with glob rules; the first rule whose pattern matches a
chunk's source id (its path relative to the folder loaded, with ``/``) decides::

    # access.yaml
    rules:
      - paths: ["hr/**", "people/*.md"]   # * and ? within a segment, ** across segments
        tenant: acme
        acl: [group:hr]
      - paths: ["**"]
        tenant: acme
    default:                              # optional: labels of paths no rule matches
      tenant: acme

Without a ``default``, a file no rule matches is **not indexed** (it is skipped, with
the reason): a policy that forgets a folder must not publish it to every tenant. A rule
without ``tenant`` and ``acl`` shares its files with everyone, on purpose.

The host's ``labeler(chunk, labels)`` runs after the policy with the labels it chose
(or None) and returns the chunk's final :class:`~groundwire.access.labels.Labels`, or
None to leave the chunk out. A labeler that raises or returns anything else leaves the
whole source out (skipped, with the reason): no chunk is ever indexed with labels its
owner did not decide.
"""

from __future__ import annotations

import difflib
import hashlib
import json
import os
import re
from collections.abc import Callable, Iterable, Mapping, Sequence
from dataclasses import dataclass, replace
from pathlib import Path
from typing import Any

import yaml

from groundwire.access.labels import ACL_KEY, TENANT_KEY, Labels, parse_acl, parse_tenant
from groundwire.config import MAX_SOURCE_FILE_BYTES
from groundwire.errors import SourceError
from groundwire.ingest.corpus import _glob_regex
from groundwire.model import Chunk, SkippedSource

__all__ = ["POLICY_FILE", "AccessPolicy", "AccessRule", "Labeler", "label_chunks"]

#: The conventional name of a folder's access policy.
POLICY_FILE = "access.yaml"
#: ``labeler(chunk, labels_from_policy) -> Labels | None`` (None leaves the chunk out).
Labeler = Callable[[Chunk, Labels | None], Labels | None]
_RULE_KEYS = ("paths", TENANT_KEY, ACL_KEY)
_TOP_KEYS = ("rules", "default")


@dataclass(frozen=True, slots=True)
class AccessRule:
    """Glob patterns and the labels of the paths they match."""

    patterns: tuple[str, ...]
    labels: Labels
    regexes: tuple[re.Pattern[str], ...] = ()

    def matches(self, path: str) -> bool:
        """Whether ``path`` (relative, ``/``-separated) matches one of the patterns."""
        return any(regex.fullmatch(path) for regex in self.regexes)


def _unknown(keys: Iterable[object], known: Sequence[str], where: str) -> None:
    for key in keys:
        if key not in known:
            close = difflib.get_close_matches(str(key), known, n=1)
            hint = f"did you mean '{close[0]}'?" if close else f"known keys: {', '.join(known)}"
            raise SourceError(f"{where}: unknown key {key!r}; {hint}")


def _labels(raw: Mapping[str, Any], where: str) -> Labels:
    try:
        tenant = parse_tenant(raw.get(TENANT_KEY))
    except ValueError as exc:
        raise SourceError(f"{where}.{TENANT_KEY}: {exc}") from exc
    try:
        acl = parse_acl(raw.get(ACL_KEY))
    except ValueError as exc:
        raise SourceError(f"{where}.{ACL_KEY}: {exc}") from exc
    return Labels(tenant, acl)


def _rule(raw: object, where: str) -> AccessRule:
    if not isinstance(raw, Mapping):
        raise SourceError(f"{where}: a rule is a mapping with 'paths' and labels")
    _unknown(raw, _RULE_KEYS, where)
    paths = raw.get("paths")
    if isinstance(paths, str):
        paths = [paths]
    if not isinstance(paths, list) or not paths or not all(isinstance(p, str) for p in paths):
        raise SourceError(f'{where}.paths: expected a list of glob patterns, e.g. ["docs/**"]')
    patterns = []
    for pattern in paths:
        text = pattern.strip().replace("\\", "/").strip("/")
        if not text or ".." in text.split("/"):
            raise SourceError(
                f"{where}.paths: {pattern!r} is not a relative glob pattern (no '..', not empty)"
            )
        patterns.append(text)
    return AccessRule(tuple(patterns), _labels(raw, where), tuple(_glob_regex(p) for p in patterns))


@dataclass(frozen=True, slots=True)
class AccessPolicy:
    """Path → labels rules (first match wins) and the labels of unmatched paths."""

    rules: tuple[AccessRule, ...]
    default: Labels | None = None
    origin: str = "<policy>"

    @classmethod
    def from_mapping(cls, data: object, origin: str = "<policy>") -> AccessPolicy:
        """A policy from its parsed form; SourceError naming the field when it is malformed."""
        if not isinstance(data, Mapping):
            raise SourceError(f"{origin}: an access policy is a mapping with 'rules'")
        _unknown(data, _TOP_KEYS, origin)
        rules = data.get("rules") or []
        if not isinstance(rules, list):
            raise SourceError(f"{origin}: rules: expected a list of rules")
        default = data.get("default")
        if default is not None and not isinstance(default, Mapping):
            raise SourceError(f"{origin}: default: expected a mapping of labels")
        if default is not None:
            _unknown(default, (TENANT_KEY, ACL_KEY), f"{origin}: default")
        return cls(
            rules=tuple(_rule(raw, f"{origin}: rules[{n}]") for n, raw in enumerate(rules)),
            default=None if default is None else _labels(default, f"{origin}: default"),
            origin=origin,
        )

    @classmethod
    def load(cls, path: str | os.PathLike[str]) -> AccessPolicy:
        """Read an ``access.yaml`` file; SourceError naming the file (and field or line)."""
        file = Path(path)
        try:
            if not file.is_file():
                raise SourceError(f"{file}: no such access policy file (a YAML file with 'rules')")
            if file.stat().st_size > MAX_SOURCE_FILE_BYTES:
                raise SourceError(f"{file}: over {MAX_SOURCE_FILE_BYTES:,} bytes; not a policy")
            text = file.read_text(encoding="utf-8")
        except OSError as exc:
            raise SourceError(f"{file}: cannot read ({exc.strerror or exc})") from exc
        except UnicodeDecodeError as exc:
            raise SourceError(f"{file}: not valid UTF-8; save it as UTF-8") from exc
        try:
            data = yaml.safe_load(text)
        except yaml.YAMLError as exc:
            mark = getattr(exc, "problem_mark", None)
            line = f":{mark.line + 1}" if mark is not None else ""
            raise SourceError(f"{file}{line}: invalid YAML; fix the syntax") from exc
        return cls.from_mapping(data, str(file))

    def fingerprint(self) -> str:
        """SHA-256 (hex) of what the policy decides: its rules and default, not its file
        name. A snapshot records it, so ``ingest --update`` knows which policy labeled it."""

        def labels(value: Labels | None) -> object:
            return None if value is None else {"tenant": value.tenant, "acl": list(value.acl)}

        record = {
            "rules": [{"paths": list(r.patterns), "labels": labels(r.labels)} for r in self.rules],
            "default": labels(self.default),
        }
        return hashlib.sha256(json.dumps(record, sort_keys=True).encode()).hexdigest()

    def labels_for(self, path: str) -> Labels | None:
        """The labels of ``path`` (relative, ``/``-separated), or None when nothing matches."""
        for rule in self.rules:
            if rule.matches(path):
                return rule.labels
        return self.default


def _with_labels(chunk: Chunk, labels: Labels) -> Chunk:
    metadata = {k: v for k, v in chunk.metadata.items() if k not in (TENANT_KEY, ACL_KEY)}
    return replace(chunk, metadata={**metadata, **labels.as_metadata()})


def label_chunks(
    chunks: Iterable[Chunk],
    policy: AccessPolicy | None = None,
    labeler: Labeler | None = None,
) -> tuple[list[Chunk], list[SkippedSource]]:
    """Chunks with the labels the policy and the labeler decide, and the sources left out.

    See the module docstring for the rules. A source is left out (with a reason) when no
    policy rule matches it and the policy has no default, or when the labeler fails on
    one of its chunks; a chunk the labeler returns None for is left out alone.
    """
    if labeler is not None and not callable(labeler):
        raise SourceError(f"labeler={labeler!r} is invalid: expected a function")
    labeled: list[Chunk] = []
    refused: dict[str, str] = {}
    for chunk in chunks:
        source = chunk.source_id
        if source in refused:
            continue
        labels = policy.labels_for(source) if policy is not None else Labels()
        if labels is None and labeler is None:
            assert policy is not None
            refused[source] = (
                f"no rule of the access policy {policy.origin} matches this path, and it "
                "has no default; add a rule or a default to index it"
            )
            continue
        if labeler is not None:
            try:
                decided = labeler(chunk, labels)
            except Exception as exc:
                refused[source] = f"the labeler raised {type(exc).__name__}; not indexed"
                continue
            if decided is not None and not isinstance(decided, Labels):
                refused[source] = (
                    f"the labeler returned {type(decided).__name__}, not Labels or None; "
                    "not indexed"
                )
                continue
            if decided is None:
                continue
            try:
                labels = Labels(parse_tenant(decided.tenant), parse_acl(decided.acl))
            except ValueError as exc:
                refused[source] = f"the labeler returned invalid labels ({exc}); not indexed"
                continue
        assert labels is not None
        labeled.append(_with_labels(chunk, labels))
    kept = [chunk for chunk in labeled if chunk.source_id not in refused]
    skipped = [SkippedSource(source, reason) for source, reason in refused.items()]
    return kept, skipped
