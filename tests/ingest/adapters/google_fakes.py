"""A loopback server speaking the Gmail and Drive v3 REST wire formats, with mutable state.

Gmail (``/gmail/v1/users/me/...``): ``profile``, ``messages`` (list: ``labelIds``, ``q``
as a substring of the raw message, ``pageToken``, ``maxResults``), ``messages/{id}``
(``format=raw``: base64url ``raw``; ``format=minimal``), ``history`` (``startHistoryId``,
``pageToken``, ``maxResults``; 404 with Google's error body when the id is older than
the oldest kept), ``watch`` and ``stop``. History records carry ``messagesAdded``,
``messagesDeleted``, ``labelsAdded``, ``labelsRemoved`` as Gmail writes them.

Drive (``/drive/v3/...``): ``changes/startPageToken``, ``changes`` (``pageToken``,
``pageSize``; ``nextPageToken`` or ``newStartPageToken``; 400 ``invalid`` on
``pageToken`` for expired tokens), ``files`` (list with ``q``: ``trashed = false``,
``mimeType = '…'``, ``name contains '…'`` joined by ``and``), ``files/{id}`` (metadata,
or ``alt=media``), ``files/{id}/export``, ``changes/watch`` and ``channels/stop``.

Every request needs ``Authorization: Bearer <token>`` (401 otherwise). Requests are
recorded (method, path, query) so tests can assert what the client asked.
"""

from __future__ import annotations

import base64
import hashlib
import json
import re
import threading
from dataclasses import dataclass, field
from http.server import BaseHTTPRequestHandler, ThreadingHTTPServer
from typing import Any
from urllib.parse import parse_qs, urlsplit

TOKEN = "test-access-token"


def _error(code: int, message: str, reason: str, location: str | None = None) -> dict[str, Any]:
    detail: dict[str, Any] = {"domain": "global", "reason": reason, "message": message}
    if location:
        detail.update(locationType="parameter", location=location)
    status = {400: "INVALID_ARGUMENT", 401: "UNAUTHENTICATED", 404: "NOT_FOUND"}.get(
        code, "UNKNOWN"
    )
    return {"error": {"code": code, "message": message, "errors": [detail], "status": status}}


@dataclass
class GmailMessage:
    id: str
    thread_id: str
    labels: list[str]
    raw: bytes


@dataclass
class DriveFile:
    id: str
    name: str
    mime_type: str
    content: bytes
    version: int = 1
    trashed: bool = False
    modified: str = "2026-03-01T10:00:00.000Z"
    permissions: list[dict[str, str]] = field(default_factory=list)
    owners: list[str] = field(default_factory=lambda: ["owner@acme.example"])
    declared_size: int | None = None  # a lie, to test custody's size check

    def resource(self) -> dict[str, Any]:
        data: dict[str, Any] = {
            "kind": "drive#file",
            "id": self.id,
            "name": self.name,
            "mimeType": self.mime_type,
            "trashed": self.trashed,
            "modifiedTime": self.modified,
            "version": str(self.version),
            "owners": [{"kind": "drive#user", "emailAddress": o} for o in self.owners],
            "permissions": [{"kind": "drive#permission", **p} for p in self.permissions],
        }
        if not self.mime_type.startswith("application/vnd.google-apps."):
            data["size"] = str(
                self.declared_size if self.declared_size is not None else len(self.content)
            )
            data["md5Checksum"] = hashlib.md5(self.content).hexdigest()
            data["sha256Checksum"] = hashlib.sha256(self.content).hexdigest()
        return data


class GoogleFake:
    """Gmail and Drive on one threaded loopback server (port 0)."""

    def __init__(self) -> None:
        self.lock = threading.RLock()
        self.requests: list[tuple[str, str, dict[str, list[str]]]] = []
        # Gmail
        self.messages: dict[str, GmailMessage] = {}
        self.history: list[dict[str, Any]] = []
        self.history_id = 1000
        self.oldest_history = 1000
        self.watches: list[dict[str, Any]] = []
        self._ids = 0
        # Drive
        self.files: dict[str, DriveFile] = {}
        self.changes: list[dict[str, Any]] = []  # each: {"fileId", "removed"}
        self.oldest_change = 1
        self.channels: list[dict[str, Any]] = []
        self.stopped: list[dict[str, Any]] = []
        self.server = ThreadingHTTPServer(("127.0.0.1", 0), _handler(self))
        self.thread = threading.Thread(target=self.server.serve_forever, daemon=True)
        self.thread.start()

    @property
    def base_url(self) -> str:
        return f"http://127.0.0.1:{self.server.server_address[1]}"

    def close(self) -> None:
        self.server.shutdown()
        self.server.server_close()

    # -- Gmail state ---------------------------------------------------------------------------
    def _next_history(self, record: dict[str, Any]) -> None:
        self.history_id += 7  # ids increase with gaps, as Gmail's do
        record["id"] = str(self.history_id)
        self.history.append(record)

    def _ref(self, message: GmailMessage) -> dict[str, Any]:
        return {"id": message.id, "threadId": message.thread_id, "labelIds": list(message.labels)}

    def add_message(
        self, raw: bytes, thread: str | None = None, labels: tuple[str, ...] = ("INBOX",)
    ) -> str:
        with self.lock:
            self._ids += 1
            message_id = f"18f{self._ids:013x}"
            message = GmailMessage(message_id, thread or message_id, list(labels), raw)
            self.messages[message_id] = message
            self._next_history(
                {
                    "messages": [self._ref(message)],
                    "messagesAdded": [{"message": self._ref(message)}],
                }
            )
            return message_id

    def add_labels(self, message_id: str, *labels: str) -> None:
        with self.lock:
            message = self.messages[message_id]
            message.labels = sorted(set(message.labels) | set(labels))
            self._next_history(
                {
                    "messages": [self._ref(message)],
                    "labelsAdded": [{"message": self._ref(message), "labelIds": list(labels)}],
                }
            )

    def remove_labels(self, message_id: str, *labels: str) -> None:
        with self.lock:
            message = self.messages[message_id]
            message.labels = [label for label in message.labels if label not in labels]
            self._next_history(
                {
                    "messages": [self._ref(message)],
                    "labelsRemoved": [{"message": self._ref(message), "labelIds": list(labels)}],
                }
            )

    def delete_message(self, message_id: str) -> None:
        with self.lock:
            message = self.messages.pop(message_id)
            self._next_history(
                {
                    "messages": [self._ref(message)],
                    "messagesDeleted": [{"message": self._ref(message)}],
                }
            )

    def expire_history(self) -> None:
        """Forget history before now: an older startHistoryId gets 404."""
        with self.lock:
            self.oldest_history = self.history_id + 1

    # -- Drive state ---------------------------------------------------------------------------
    def put_file(
        self, file_id: str, name: str, content: bytes, mime_type: str = "text/plain", **extra: Any
    ) -> DriveFile:
        with self.lock:
            old = self.files.get(file_id)
            file = DriveFile(file_id, name, mime_type, content, **extra)
            if old is not None:
                file.version = old.version + 1
                file.modified = f"2026-03-0{min(9, file.version)}T10:00:00.000Z"
            self.files[file_id] = file
            self.changes.append({"fileId": file_id, "removed": False})
            return file

    def trash_file(self, file_id: str) -> None:
        with self.lock:
            self.files[file_id].trashed = True
            self.files[file_id].version += 1
            self.changes.append({"fileId": file_id, "removed": False})

    def remove_file(self, file_id: str) -> None:
        with self.lock:
            del self.files[file_id]
            self.changes.append({"fileId": file_id, "removed": True})

    def expire_page_tokens(self) -> None:
        with self.lock:
            self.oldest_change = len(self.changes) + 2

    # -- request handling ----------------------------------------------------------------------
    def handle(
        self, method: str, path: str, query: dict[str, list[str]], body: Any
    ) -> tuple[int, Any, str]:
        with self.lock:
            self.requests.append((method, path, query))
            one = {k: v[0] for k, v in query.items()}
            if path.startswith("/gmail/v1/users/me"):
                return self._gmail(method, path[len("/gmail/v1/users/me") :], one, query, body)
            if path.startswith("/drive/v3"):
                return self._drive(method, path[len("/drive/v3") :], one, body)
            return 404, _error(404, "Not Found", "notFound"), "json"

    def _gmail(
        self, method: str, path: str, one: dict[str, str], query: dict[str, list[str]], body: Any
    ) -> tuple[int, Any, str]:
        if path == "/profile":
            return (
                200,
                {
                    "emailAddress": "support@acme.example",
                    "messagesTotal": len(self.messages),
                    "threadsTotal": len({m.thread_id for m in self.messages.values()}),
                    "historyId": str(self.history_id),
                },
                "json",
            )
        if path == "/messages" and method == "GET":
            found = sorted(self.messages.values(), key=lambda m: m.id, reverse=True)
            found = [m for m in found if "TRASH" not in m.labels and "SPAM" not in m.labels]
            for label in query.get("labelIds", []):
                found = [m for m in found if label in m.labels]
            if "q" in one:
                found = [m for m in found if one["q"].encode() in m.raw]
            start = int(one.get("pageToken", "0"))
            size = int(one.get("maxResults", "100"))
            page = found[start : start + size]
            answer: dict[str, Any] = {
                "messages": [{"id": m.id, "threadId": m.thread_id} for m in page],
                "resultSizeEstimate": len(found),
            }
            if start + size < len(found):
                answer["nextPageToken"] = str(start + size)
            if not page:
                answer.pop("messages")
            return 200, answer, "json"
        match = re.fullmatch(r"/messages/([0-9a-f]+)", path)
        if match:
            message = self.messages.get(match.group(1))
            if message is None:
                return 404, _error(404, "Requested entity was not found.", "notFound"), "json"
            data = {
                **self._ref(message),
                "snippet": message.raw[:40].decode(errors="replace"),
                "historyId": str(self.history_id),
                "internalDate": "1772445600000",
                "sizeEstimate": len(message.raw),
            }
            if one.get("format") == "raw":
                data["raw"] = base64.urlsafe_b64encode(message.raw).decode().rstrip("=")
            return 200, data, "json"
        if path == "/history":
            start = int(one["startHistoryId"])
            if start < self.oldest_history:
                return 404, _error(404, "Requested entity was not found.", "notFound"), "json"
            records = [r for r in self.history if int(r["id"]) > start]
            offset = int(one.get("pageToken", "0"))
            size = int(one.get("maxResults", "100"))
            page = records[offset : offset + size]
            answer = {"historyId": str(self.history_id)}
            if page:
                answer["history"] = page
            if offset + size < len(records):
                answer["nextPageToken"] = str(offset + size)
            return 200, answer, "json"
        if path == "/watch" and method == "POST":
            self.watches.append(body)
            return 200, {"historyId": str(self.history_id), "expiration": "1893456000000"}, "json"
        if path == "/stop" and method == "POST":
            self.watches.clear()
            return 204, None, "json"
        return 404, _error(404, "Not Found", "notFound"), "json"

    def _drive(
        self, method: str, path: str, one: dict[str, str], body: Any
    ) -> tuple[int, Any, str]:
        if path == "/changes/startPageToken":
            return (
                200,
                {"kind": "drive#startPageToken", "startPageToken": str(len(self.changes) + 1)},
                "json",
            )
        if path == "/changes" and method == "GET":
            token = one.get("pageToken", "")
            if (
                not token.isdigit()
                or int(token) < self.oldest_change
                or int(token) > len(self.changes) + 1
            ):
                return 400, _error(400, "Invalid Value", "invalid", "pageToken"), "json"
            start = int(token)
            size = int(one.get("pageSize", "100"))
            page = self.changes[start - 1 : start - 1 + size]
            out = []
            for number, change in enumerate(page, start=start):
                file = self.files.get(change["fileId"])
                entry: dict[str, Any] = {
                    "kind": "drive#change",
                    "changeType": "file",
                    "fileId": change["fileId"],
                    "removed": change["removed"] or file is None,
                    "time": f"2026-03-01T10:{number % 60:02d}:00.000Z",
                }
                if file is not None and not entry["removed"]:
                    entry["file"] = file.resource()
                out.append(entry)
            answer: dict[str, Any] = {"kind": "drive#changeList", "changes": out}
            following = start + len(page)
            if following <= len(self.changes):
                answer["nextPageToken"] = str(following)
            else:
                answer["newStartPageToken"] = str(following)
            return 200, answer, "json"
        if path == "/files" and method == "GET":
            found = sorted(self.files.values(), key=lambda f: f.id)
            for clause in re.split(r"\s+and\s+", one.get("q", "").strip("() ")):
                clause = clause.strip("() ")
                if clause == "trashed = false":
                    found = [f for f in found if not f.trashed]
                elif m := re.fullmatch(r"mimeType = '([^']*)'", clause):
                    found = [f for f in found if f.mime_type == m.group(1)]
                elif m := re.fullmatch(r"name contains '([^']*)'", clause):
                    found = [f for f in found if m.group(1) in f.name]
            start = int(one.get("pageToken", "0"))
            size = int(one.get("pageSize", "100"))
            answer = {
                "kind": "drive#fileList",
                "incompleteSearch": False,
                "files": [f.resource() for f in found[start : start + size]],
            }
            if start + size < len(found):
                answer["nextPageToken"] = str(start + size)
            return 200, answer, "json"
        match = re.fullmatch(r"/files/([^/]+)(/export)?", path)
        if match:
            file = self.files.get(match.group(1))
            if file is None:
                return (
                    404,
                    _error(404, f"File not found: {match.group(1)}.", "notFound", "fileId"),
                    "json",
                )
            if match.group(2):
                if not file.mime_type.startswith("application/vnd.google-apps."):
                    return (
                        403,
                        _error(
                            403, "Export only supports Docs Editors files.", "fileNotExportable"
                        ),
                        "json",
                    )
                return 200, file.content, one.get("mimeType", "text/plain")
            if one.get("alt") == "media":
                if file.mime_type.startswith("application/vnd.google-apps."):
                    return (
                        403,
                        _error(
                            403,
                            "Only files with binary content can be downloaded. "
                            "Use Export with Docs Editors files.",
                            "fileNotDownloadable",
                        ),
                        "json",
                    )
                return 200, file.content, file.mime_type
            return 200, file.resource(), "json"
        if path == "/changes/watch" and method == "POST":
            channel = {
                "kind": "api#channel",
                "id": body["id"],
                "resourceId": f"res-{len(self.channels) + 1}",
                "resourceUri": f"{self.base_url}/drive/v3/changes?pageToken={one.get('pageToken')}",
                "token": body.get("token"),
                "expiration": "1893456000000",
                "address": body["address"],
            }
            self.channels.append(channel)
            return 200, {k: v for k, v in channel.items() if k != "address"}, "json"
        if path == "/channels/stop" and method == "POST":
            self.stopped.append(body)
            return 204, None, "json"
        return 404, _error(404, "Not Found", "notFound"), "json"


def _handler(fake: GoogleFake) -> type[BaseHTTPRequestHandler]:
    class Handler(BaseHTTPRequestHandler):
        def log_message(self, format: str, *args: Any) -> None:
            return

        def _serve(self, method: str) -> None:
            parts = urlsplit(self.path)
            query = parse_qs(parts.query)
            length = int(self.headers.get("content-length") or 0)
            raw = self.rfile.read(length) if length else b""
            if self.headers.get("authorization") != f"Bearer {TOKEN}":
                status, payload, kind = (
                    401,
                    _error(401, "Request had invalid authentication credentials.", "authError"),
                    "json",
                )
            else:
                body = json.loads(raw) if raw else None
                status, payload, kind = fake.handle(method, parts.path, query, body)
            if payload is None:
                self.send_response(status)
                self.send_header("content-length", "0")
                self.end_headers()
                return
            data = json.dumps(payload).encode() if kind == "json" else payload
            self.send_response(status)
            self.send_header(
                "content-type", "application/json; charset=UTF-8" if kind == "json" else kind
            )
            self.send_header("content-length", str(len(data)))
            self.end_headers()
            self.wfile.write(data)

        def do_GET(self) -> None:
            self._serve("GET")

        def do_POST(self) -> None:
            self._serve("POST")

    return Handler
