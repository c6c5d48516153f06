"""Tenant and ACL labels: their syntax, and how they are read back from a record's metadata.

Entries (front matter / JSON ``tenant`` and ``acl``), document chunks (an ``access.yaml``
policy or the host's labeler, at ingest) and memories carry the same two labels, stored
in their ``metadata`` under :data:`TENANT_KEY` and :data:`ACL_KEY`, so they travel with
the record through snapshots and every store:

- ``tenant``: one id (see :data:`groundwire.model.LABEL_ID`), or absent: a record without
  a tenant is shared by every tenant.
- ``acl``: a list of ``user:<subject>`` and ``group:<group>`` labels, or absent/empty:
  every principal of the record's tenant may see it.

Authoring mistakes are errors that name the field (:func:`parse_tenant`,
:func:`parse_acl`). At query time :func:`read_labels` is strict the other way: a label
that does not parse makes the record visible to nobody (fail closed).
"""

from __future__ import annotations

from collections.abc import Mapping
from dataclasses import dataclass
from typing import Any, Final

from groundwire.config import MAX_ACL_LABELS
from groundwire.model import ACL_PREFIXES, is_label_id

__all__ = ["ACL_KEY", "TENANT_KEY", "Labels", "parse_acl", "parse_tenant", "read_labels"]

#: Metadata key holding a record's tenant label.
TENANT_KEY: Final = "tenant"
#: Metadata key holding a record's ACL labels (a sorted tuple).
ACL_KEY: Final = "acl"
_ID_RULE = "1-256 characters without whitespace, quotes, backslashes, commas or '*'"


@dataclass(frozen=True, slots=True)
class Labels:
    """The access labels of one record: its tenant (None: shared) and its ACL (empty: open)."""

    tenant: str | None = None
    acl: tuple[str, ...] = ()

    def as_metadata(self) -> dict[str, Any]:
        """The labels as metadata entries (only those set)."""
        out: dict[str, Any] = {}
        if self.tenant is not None:
            out[TENANT_KEY] = self.tenant
        if self.acl:
            out[ACL_KEY] = self.acl
        return out


def parse_tenant(value: object) -> str | None:
    """An authored tenant label (None or "" for none); ValueError saying how to fix it."""
    if value is None or value == "":
        return None
    if not is_label_id(value):
        raise ValueError(
            f"tenant {value!r} is not a valid tenant id ({_ID_RULE}); write e.g. tenant: acme"
        )
    assert isinstance(value, str)
    return value


def parse_acl(value: object) -> tuple[str, ...]:
    """Authored ACL labels as a sorted tuple without duplicates; ValueError naming the bad one."""
    if value is None:
        return ()
    if isinstance(value, str) or not isinstance(value, list | tuple):
        raise ValueError(
            f"acl must be a list of labels, got {value!r}; write e.g. acl: [group:eng, user:alice]"
        )
    if len(value) > MAX_ACL_LABELS:
        raise ValueError(
            f"acl has {len(value)} labels, over the limit of {MAX_ACL_LABELS}; "
            "grant a group instead of many users"
        )
    for label in value:
        prefix, sep, name = label.partition(":") if isinstance(label, str) else ("", "", "")
        if not sep or prefix not in ACL_PREFIXES:
            raise ValueError(
                f"acl label {label!r} is not user:<subject> or group:<group>; "
                "write e.g. group:eng or user:alice"
            )
        if not is_label_id(name):
            raise ValueError(f"acl label {label!r}: the {prefix} id must be {_ID_RULE}")
    return tuple(sorted(set(value)))


def read_labels(metadata: Mapping[str, Any]) -> Labels | None:
    """The labels stored in a record's metadata, or None when they are malformed.

    None means the record is visible to nobody: labels written by hand into a snapshot
    or passed unchecked through ``from_documents`` must not widen who sees a record.
    """
    tenant = metadata.get(TENANT_KEY)
    acl = metadata.get(ACL_KEY)
    if tenant is None and acl is None:  # the common case: an unlabeled record
        return _OPEN
    try:
        return Labels(parse_tenant(tenant), parse_acl(acl))
    except ValueError:
        return None


_OPEN: Final = Labels()
