"""Byte-level encodings of snapshot format version 1 (see ``snapshot.py`` for the layout).

Everything here is pure: it turns Python/numpy values into bytes and back, and never
touches the file system. No pickle anywhere: arrays are ``.npy`` with plain numeric
dtypes, strings are UTF-8 blobs with int64 byte offsets, records are JSON.

* :func:`encode_strings` / :class:`StringTable` — a list of strings as one UTF-8 blob
  plus ``offsets`` (``len + 1`` int64, ``offsets[0] == 0``); string ``i`` is
  ``blob[offsets[i]:offsets[i + 1]]``.
* :func:`hash_keys` / :class:`HashedStrings` — a lookup index over a string table:
  a 62-bit key per string (two polynomial hashes of its UTF-8 bytes, computed
  vectorized at save time and with Python big-int arithmetic at query time), the keys
  sorted, and the string numbers in that order. A lookup bisects the keys and compares
  bytes, so opening costs nothing and no per-process dict is built.
* :func:`encode_entry` / :func:`decode_entry` — one entry as one JSON object; metadata
  values JSON cannot hold (dates, tuples, bytes, sets, non-string keys) are tagged.
"""

from __future__ import annotations

import base64
import datetime as dt
import io
import json
import math
import re
from bisect import bisect_left
from collections.abc import Iterator, Mapping, Sequence
from typing import Any

import numpy as np
import numpy.typing as npt

from groundwire.config import MAX_SNAPSHOT_JSON_DEPTH
from groundwire.errors import IndexFormatError, KnowledgeIndexError
from groundwire.model import KnowledgeEntry

__all__ = [
    "HashedStrings",
    "StringTable",
    "check_json_depth",
    "decode_entry",
    "encode_entry",
    "encode_strings",
    "hash_key",
    "hash_keys",
    "npy_header",
    "sort_keys",
]

# Two Mersenne-free primes below 2**31: products with a byte stay far below 2**63.
_P1 = 2_147_483_629
_P2 = 2_147_483_587
#: Lookups remembered per HashedStrings (hits and misses): repeated query terms cost
#: one dict lookup instead of a hash, a bisection and a comparison (~3 µs).
_LOOKUP_CACHE = 65_536
#: Strings hashed per vectorized chunk: bounds the temporary memory of hash_keys.
_HASH_CHUNK_BYTES = 1 << 22
_TAG = "$gw"


# -- JSON nesting -------------------------------------------------------------------------------
_ESCAPE = re.compile(rb"\\.", re.DOTALL)  # a backslash and the byte it escapes
_STRING = re.compile(rb'"[^"]*"')  # a string literal once its escapes are gone
#: Every byte but brackets and quotes: what the nesting scan deletes before it looks.
_NOT_STRUCTURE = bytes(b for b in range(256) if b not in b'[]{}"')
_DEPTH_STEP = np.zeros(256, dtype=np.int64)
_DEPTH_STEP[list(b"[{")], _DEPTH_STEP[list(b"]}")] = 1, -1


def check_json_depth(data: bytes, limit: int, where: str) -> None:
    """Refuse JSON whose arrays/objects nest deeper than ``limit`` (before decoding it).

    The decoder recurses once per level and fails with a RecursionError past the
    interpreter's limit; this scan is linear and never recurses. Brackets inside string
    literals do not count. Malformed JSON is left for the decoder to report. (Escapes
    go first, then every byte but brackets and quotes, then the strings: each step a
    C pass, ~0.3 ms on a SciFact manifest where one regex over the text took 1.5 ms.)
    """
    if data.count(b"[") + data.count(b"{") <= limit:  # cannot nest deeper: no scan
        return
    if b"\\" in data:
        data = _ESCAPE.sub(b"", data)
    shape = _STRING.sub(b"", data.translate(None, _NOT_STRUCTURE))
    steps = _DEPTH_STEP[np.frombuffer(shape, dtype=np.uint8)]
    if steps.size and int(np.cumsum(steps).max()) > limit:
        raise IndexFormatError(
            f"{where}: JSON nested deeper than {limit} levels; groundwire never writes "
            "such a file, so it was damaged or crafted: rebuild the snapshot"
        )


def loads_bounded(data: bytes, where: str, limit: int = MAX_SNAPSHOT_JSON_DEPTH) -> Any:
    """``json.loads`` of snapshot bytes with the nesting bound; IndexFormatError otherwise."""
    check_json_depth(data, limit, where)
    try:
        return json.loads(data)
    except (UnicodeDecodeError, json.JSONDecodeError, RecursionError) as exc:
        raise IndexFormatError(f"{where}: not valid JSON ({exc})") from exc


# -- string tables ------------------------------------------------------------------------------
def encode_strings(strings: Sequence[str], what: str) -> tuple[bytes, npt.NDArray[np.int64]]:
    """UTF-8 blob and int64 byte offsets (``len + 1``) of ``strings``, in order."""
    try:
        joined = "".join(strings)
        blob = joined.encode("utf-8")
    except UnicodeEncodeError as exc:
        raise KnowledgeIndexError(
            f"{what}: a string holds a lone surrogate ({exc.reason}); snapshots store UTF-8"
        ) from exc
    offsets = np.zeros(len(strings) + 1, dtype=np.int64)
    if joined.isascii():  # one byte per character: lengths without encoding each string
        lengths = np.fromiter(map(len, strings), np.int64, len(strings))
    else:
        lengths = np.fromiter((len(s.encode("utf-8")) for s in strings), np.int64, len(strings))
    np.cumsum(lengths, out=offsets[1:])
    return blob, offsets


class StringTable(Sequence[str]):
    """Strings ``0 .. n-1`` over a (memory-mapped) blob and offsets; decoded on access."""

    __slots__ = ("_bytes", "_view", "blob", "offsets")

    def __init__(self, blob: npt.NDArray[np.uint8], offsets: npt.NDArray[np.int64]) -> None:
        self.blob = blob
        self.offsets = offsets
        self._bytes = np.ascontiguousarray(blob, dtype=np.uint8).data
        # Python ints from a memoryview cost a fraction of numpy scalar indexing.
        self._view = np.ascontiguousarray(offsets, dtype=np.int64).data.cast("B").cast("q")

    def __len__(self) -> int:
        return len(self._view) - 1

    def raw(self, index: int) -> bytes:
        """The UTF-8 bytes of string ``index``."""
        view = self._view
        return self._bytes[view[index] : view[index + 1]].tobytes()

    def __getitem__(self, index: Any) -> Any:
        if isinstance(index, slice):
            return [self[i] for i in range(*index.indices(len(self)))]
        if index < 0:
            index += len(self)
        if not 0 <= index < len(self):
            raise IndexError(index)
        try:
            return self.raw(index).decode("utf-8")
        except UnicodeDecodeError as exc:
            raise IndexFormatError(f"string #{index} is not valid UTF-8") from exc

    def __iter__(self) -> Iterator[str]:
        for index in range(len(self)):
            yield self[index]


def hash_key(data: bytes) -> int:
    """The 62-bit lookup key of one UTF-8 string (see :func:`hash_keys`)."""
    value = int.from_bytes(data, "little")
    return ((value % _P1) << 31) | (value % _P2)


def _powers(prime: int, count: int) -> npt.NDArray[np.uint64]:
    """``256**i mod prime`` for ``i < count``, by doubling (log2(count) vector steps)."""
    out = np.ones(max(count, 1), dtype=np.uint64)
    if count > 1:
        out[1] = 256 % prime
    filled = 2
    while filled < count:
        step = min(filled, count - filled)
        factor = np.uint64(int(out[filled - 1]) * 256 % prime)
        out[filled : filled + step] = out[:step] * factor % np.uint64(prime)
        filled += step
    return out


def hash_keys(
    blob: npt.NDArray[np.uint8], offsets: npt.NDArray[np.int64]
) -> npt.NDArray[np.uint64]:
    """:func:`hash_key` of every string of a table, vectorized (in chunks of strings).

    ``int.from_bytes(data, "little") mod p`` is ``sum(byte_i * 256**i) mod p``: a
    polynomial hash whose powers are shared by every string.
    """
    count = len(offsets) - 1
    keys = np.zeros(count, dtype=np.uint64)
    lengths = np.diff(offsets)
    longest = int(lengths.max()) if count else 0
    powers = [_powers(p, longest) for p in (_P1, _P2)]
    # Sums of unreduced terms (each < 2**39) stay exact below 2**63 for strings of
    # up to 2**24 bytes; longer strings reduce every term first.
    exact = longest <= 1 << 24
    start = 0
    while start < count:
        # Whole strings per chunk, at least one, about _HASH_CHUNK_BYTES bytes.
        limit = int(offsets[start]) + _HASH_CHUNK_BYTES
        stop = max(start + 1, int(np.searchsorted(offsets, limit, side="right")) - 1)
        stop = min(stop, count)
        lo, hi = int(offsets[start]), int(offsets[stop])
        data = blob[lo:hi].astype(np.uint64)
        chunk_lengths = lengths[start:stop]
        owner = np.repeat(np.arange(stop - start), chunk_lengths)
        position = np.arange(hi - lo, dtype=np.int64) - (offsets[start:stop] - lo)[owner]
        nonempty = chunk_lengths > 0
        starts = (offsets[start:stop] - lo)[nonempty]
        parts = []
        for prime, power in zip((_P1, _P2), powers, strict=True):
            terms = data * power[position]  # < 2**39
            if not exact:
                terms %= np.uint64(prime)
            total = np.zeros(stop - start, dtype=np.uint64)
            if starts.shape[0]:
                total[nonempty] = np.add.reduceat(terms, starts)
            parts.append(total % np.uint64(prime))
        keys[start:stop] = (parts[0] << np.uint64(31)) | parts[1]
        start = stop
    return keys


class HashedStrings(Mapping[str, int]):
    """A string table with a hash index: ``table[s]`` is the number of string ``s``.

    ``keys`` are :func:`hash_key` values sorted ascending and ``order[i]`` the string
    number of ``keys[i]``. Equal keys are resolved by comparing bytes.
    """

    __slots__ = ("_cache", "_keys", "_order", "key_array", "order_array", "strings")

    def __init__(
        self,
        strings: StringTable,
        keys: npt.NDArray[np.uint64],
        order: npt.NDArray[np.integer[Any]],
    ) -> None:
        self.strings = strings
        self.key_array, self.order_array = keys, order
        self._keys = np.ascontiguousarray(keys, dtype=np.uint64).data.cast("B").cast("Q")
        self._order = np.ascontiguousarray(order, dtype=np.int32).data.cast("B").cast("i")
        self._cache: dict[str, int | None] = {}

    def find(self, text: str) -> int | None:
        """The number of ``text``, or None."""
        try:
            return self._cache[text]
        except (KeyError, TypeError):
            return self._remember(text)

    def _remember(self, text: object) -> int | None:
        if not isinstance(text, str):
            return None
        found = self._search(text)
        number = found if found >= 0 else None
        cache = self._cache
        if len(cache) >= _LOOKUP_CACHE:
            cache.clear()
        cache[text] = number
        return number

    def _search(self, text: str) -> int:
        """The number of ``text``, or -1."""
        try:
            data = text.encode("utf-8")
        except UnicodeEncodeError:
            return -1
        key = hash_key(data)
        keys, order, raw = self._keys, self._order, self.strings.raw
        at = bisect_left(keys, key)
        while at < len(keys) and keys[at] == key:
            number = order[at]
            if raw(number) == data:
                return number
            at += 1
        return -1

    def get(self, key: str, default: Any = None) -> Any:
        # The hot path of every query term: one dict lookup when the term was seen.
        try:
            found = self._cache[key]
        except (KeyError, TypeError):
            found = self._remember(key)
        return default if found is None else found

    def __getitem__(self, key: str) -> int:
        found = self.find(key)
        if found is None:
            raise KeyError(key)
        return found

    def __contains__(self, key: object) -> bool:
        return isinstance(key, str) and self.find(key) is not None

    def __iter__(self) -> Iterator[str]:
        return iter(self.strings)

    def __len__(self) -> int:
        return len(self.strings)


def sort_keys(keys: npt.NDArray[np.uint64]) -> tuple[npt.NDArray[np.uint64], npt.NDArray[np.int32]]:
    """Keys ascending and the string numbers in that order (ties by number: deterministic)."""
    order = np.argsort(keys, kind="stable").astype(np.int32)
    return keys[order], order


# -- npy headers --------------------------------------------------------------------------------
def npy_header(array: npt.NDArray[Any]) -> bytes:
    """The ``.npy`` (version 1.0) header numpy writes for ``array`` (C order)."""
    buffer = io.BytesIO()
    header = np.lib.format.header_data_from_array_1_0(array)
    np.lib.format.write_array_header_1_0(buffer, header)
    return buffer.getvalue()


# -- entries -----------------------------------------------------------------------------------
# One encoder for every entry: json.dumps with options builds a new one per call.
_ENCODE = json.JSONEncoder(ensure_ascii=False, separators=(",", ":")).encode
_STRING_FIELDS = ("id", "title", "summary", "domain", "body", "kind", "status", "version")
_LIST_FIELDS = ("integrations", "aliases", "keywords", "related")


def _encode_value(value: Any, where: str) -> Any:
    if value is None or isinstance(value, bool | int | str):
        return value
    if isinstance(value, float):
        if not math.isfinite(value):
            return {_TAG: "float", "v": repr(value)}
        return value
    if isinstance(value, list):
        return [_encode_value(v, f"{where}[{n}]") for n, v in enumerate(value)]
    if isinstance(value, tuple):
        return {
            _TAG: "tuple",
            "v": [_encode_value(v, f"{where}[{n}]") for n, v in enumerate(value)],
        }
    if isinstance(value, dict):
        if all(isinstance(k, str) for k in value) and _TAG not in value:
            return {k: _encode_value(v, f"{where}.{k}") for k, v in value.items()}
        return {
            _TAG: "dict",
            "v": [
                [_encode_value(k, f"{where} key"), _encode_value(v, f"{where}.{k}")]
                for k, v in value.items()
            ],
        }
    if isinstance(value, dt.datetime):  # before date: a datetime is a date
        return {_TAG: "datetime", "v": value.isoformat()}
    if isinstance(value, dt.date):
        return {_TAG: "date", "v": value.isoformat()}
    if isinstance(value, bytes):
        return {_TAG: "bytes", "v": base64.b64encode(value).decode("ascii")}
    if isinstance(value, set | frozenset):
        items = sorted((_encode_value(v, f"{where} item") for v in value), key=_canonical)
        return {_TAG: "frozenset" if isinstance(value, frozenset) else "set", "v": items}
    raise KnowledgeIndexError(
        f"{where} is a {type(value).__name__}; snapshots store JSON values, dates, "
        "tuples, bytes and sets in metadata: convert it to one of those"
    )


def _canonical(value: Any) -> str:
    return json.dumps(value, sort_keys=True, ensure_ascii=False)


def _decode_value(value: Any) -> Any:
    if isinstance(value, list):
        return [_decode_value(v) for v in value]
    if not isinstance(value, dict):
        return value
    if _TAG not in value:
        return {k: _decode_value(v) for k, v in value.items()}
    tag, payload = value.get(_TAG), value.get("v")
    if tag == "float" and payload in ("nan", "inf", "-inf"):
        return float(payload)
    if tag == "tuple" and isinstance(payload, list):
        return tuple(_decode_value(v) for v in payload)
    if tag == "dict" and isinstance(payload, list):
        pairs = [p for p in payload if isinstance(p, list) and len(p) == 2]
        if len(pairs) == len(payload):
            return {_hashable(_decode_value(k)): _decode_value(v) for k, v in pairs}
    if tag in ("date", "datetime") and isinstance(payload, str):
        try:
            kind = dt.datetime if tag == "datetime" else dt.date
            return kind.fromisoformat(payload)
        except ValueError:
            pass
    if tag == "bytes" and isinstance(payload, str):
        try:
            return base64.b64decode(payload.encode("ascii"), validate=True)
        except ValueError:
            pass
    if tag in ("set", "frozenset") and isinstance(payload, list):
        items = [_hashable(_decode_value(v)) for v in payload]
        return set(items) if tag == "set" else frozenset(items)
    raise IndexFormatError(f"unknown or malformed tagged metadata value {value!r}")


def _hashable(value: Any) -> Any:
    try:
        hash(value)
    except TypeError as exc:
        raise IndexFormatError(f"metadata key or set item {value!r} is not hashable") from exc
    return value


def encode_entry(entry: KnowledgeEntry) -> bytes:
    """One entry as compact JSON (UTF-8, no newline)."""
    record: dict[str, Any] = {name: getattr(entry, name) for name in _STRING_FIELDS}
    for name in _LIST_FIELDS:
        record[name] = list(getattr(entry, name))
    record["parent"] = entry.parent
    record["source_id"] = entry.source_id
    too_deep = KnowledgeIndexError(
        f"entry {entry.id!r}: metadata nests deeper than {MAX_SNAPSHOT_JSON_DEPTH - 2} levels, "
        "more than a snapshot stores; flatten it"
    )
    try:
        record["metadata"] = _encode_value(dict(entry.metadata), f"entry {entry.id!r} metadata")
        data = _ENCODE(record).encode("utf-8")
    except UnicodeEncodeError as exc:
        raise KnowledgeIndexError(
            f"entry {entry.id!r} holds a lone surrogate ({exc.reason}); snapshots store UTF-8"
        ) from exc
    except RecursionError:
        raise too_deep from None
    try:  # what is written must be readable: the reader bounds nesting the same way
        check_json_depth(data, MAX_SNAPSHOT_JSON_DEPTH, "")
    except IndexFormatError:
        raise too_deep from None
    return data


def decode_entry(data: bytes, where: str) -> KnowledgeEntry:
    """An entry from :func:`encode_entry` bytes; every field's type is checked."""
    record = loads_bounded(data, where)
    if not isinstance(record, dict):
        raise IndexFormatError(f"{where}: not a JSON object")
    fields: dict[str, Any] = {}
    for name in (*_STRING_FIELDS, "source_id"):
        value = record.get(name)
        if not isinstance(value, str):
            raise IndexFormatError(f"{where}: field {name!r} must be a string")
        fields[name] = value
    for name in _LIST_FIELDS:
        value = record.get(name)
        if not isinstance(value, list) or not all(isinstance(v, str) for v in value):
            raise IndexFormatError(f"{where}: field {name!r} must be a list of strings")
        fields[name] = tuple(value)
    parent = record.get("parent")
    if parent is not None and not isinstance(parent, str):
        raise IndexFormatError(f"{where}: field 'parent' must be a string or null")
    metadata = _decode_value(record.get("metadata"))
    if not isinstance(metadata, dict):
        raise IndexFormatError(f"{where}: field 'metadata' must be an object")
    return KnowledgeEntry(parent=parent, metadata=metadata, **fields)
