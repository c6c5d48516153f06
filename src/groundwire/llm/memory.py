"""Conversation memory: the user/assistant turns of each session, bounded.

A :class:`~groundwire.Client` reads a session's history before a turn (it becomes the
turn's earlier messages and, when grounding, its recent turns) and appends the user
input and the final assistant text after it. Only those two roles are ever stored:
never system prompts, never knowledge blocks, never tool calls or tool results — a
memory holds what the people in the conversation said, so grounding context cannot
leak into later turns or be mistaken for something the user wrote.

Both memories keep at most ``max_messages`` per session (oldest dropped) and
``max_sessions`` sessions (the least recently written dropped whole).
"""

from __future__ import annotations

import os
import sqlite3
import threading
from collections import OrderedDict, deque
from collections.abc import Iterator
from contextlib import contextmanager
from typing import Final, Protocol, runtime_checkable

from groundwire.config import (
    DEFAULT_MEMORY_MAX_MESSAGES,
    DEFAULT_MEMORY_MAX_SESSIONS,
    MAX_SESSION_ID_CHARS,
    MEMORY_BUSY_TIMEOUT_S,
)
from groundwire.errors import ConfigError, QueryError
from groundwire.llm.base import Message

__all__ = ["ConversationMemory", "InMemoryConversationMemory", "SQLiteConversationMemory"]

#: Roles a memory stores: the conversation itself, nothing the application adds to a turn.
STORED_ROLES: Final = frozenset({"user", "assistant"})
#: Version of the SQLite layout (``PRAGMA user_version``); bump on any change to the table.
SCHEMA_VERSION: Final = 1


@runtime_checkable
class ConversationMemory(Protocol):
    """Per-session conversation history of user and assistant messages, oldest first."""

    def append(self, session_id: str, message: Message) -> None:
        """Store one user or assistant message at the end of the session."""
        ...

    def history(self, session_id: str, limit: int | None = None) -> list[Message]:
        """The session's last ``limit`` messages (all kept when None), oldest first."""
        ...

    def clear(self, session_id: str) -> None:
        """Forget the session."""
        ...


def _check_limit(option: str, value: object) -> int:
    if isinstance(value, bool) or not isinstance(value, int) or value < 1:
        raise ConfigError(f"{option}={value!r} is invalid: expected an integer >= 1")
    return value


def _check_session(session_id: object) -> str:
    if not isinstance(session_id, str) or not session_id.strip():
        raise QueryError(f"session_id={session_id!r} is invalid: expected a non-empty string")
    if len(session_id) > MAX_SESSION_ID_CHARS:
        raise QueryError(
            f"session_id has {len(session_id)} characters, over the limit of "
            f"{MAX_SESSION_ID_CHARS}: use a short stable key such as a user or thread id"
        )
    return session_id


def _check_message(message: object) -> Message:
    if not isinstance(message, Message):
        raise TypeError(f"message must be a groundwire Message, got {type(message).__name__}")
    if message.role not in STORED_ROLES:
        raise QueryError(
            f"a {message.role!r} message cannot be stored in conversation memory: only user "
            "and assistant turns are kept (system prompts and knowledge are per turn)"
        )
    if message.tool_calls or message.tool_call_id is not None:
        raise QueryError(
            "a message with tool calls cannot be stored in conversation memory: store "
            "the assistant's text only (tool traffic belongs to one turn)"
        )
    return message


def _check_history_limit(limit: object) -> int | None:
    if limit is None:
        return None
    if isinstance(limit, bool) or not isinstance(limit, int) or limit < 0:
        raise QueryError(f"limit={limit!r} is invalid: expected None or an integer >= 0")
    return limit


class InMemoryConversationMemory:
    """Conversation memory held in this process; thread-safe, lost when it exits."""

    def __init__(
        self,
        *,
        max_messages: int = DEFAULT_MEMORY_MAX_MESSAGES,
        max_sessions: int = DEFAULT_MEMORY_MAX_SESSIONS,
    ) -> None:
        self._max_messages = _check_limit("max_messages", max_messages)
        self._max_sessions = _check_limit("max_sessions", max_sessions)
        # Insertion order is recency of writing: the first session is the one to evict.
        self._sessions: OrderedDict[str, deque[Message]] = OrderedDict()
        self._lock = threading.Lock()

    def append(self, session_id: str, message: Message) -> None:
        """Store one user or assistant message, dropping the oldest past the bounds."""
        session_id = _check_session(session_id)
        message = _check_message(message)
        with self._lock:
            messages = self._sessions.get(session_id)
            if messages is None:
                messages = self._sessions[session_id] = deque(maxlen=self._max_messages)
            else:
                self._sessions.move_to_end(session_id)
            messages.append(message)
            while len(self._sessions) > self._max_sessions:
                self._sessions.popitem(last=False)

    def history(self, session_id: str, limit: int | None = None) -> list[Message]:
        """The session's last ``limit`` messages (all kept when None), oldest first."""
        session_id = _check_session(session_id)
        limit = _check_history_limit(limit)
        with self._lock:
            messages = list(self._sessions.get(session_id, ()))
        if limit is None:
            return messages
        return messages[len(messages) - limit :] if limit else []

    def clear(self, session_id: str) -> None:
        """Forget the session."""
        session_id = _check_session(session_id)
        with self._lock:
            self._sessions.pop(session_id, None)


_SCHEMA: Final = (
    "CREATE TABLE IF NOT EXISTS messages ("
    " seq INTEGER PRIMARY KEY,"  # rowid: a new row always sorts after every kept one
    " session_id TEXT NOT NULL,"
    " role TEXT NOT NULL CHECK (role IN ('user', 'assistant')),"
    " content TEXT NOT NULL)",
    "CREATE INDEX IF NOT EXISTS messages_by_session ON messages (session_id, seq)",
    f"PRAGMA user_version = {SCHEMA_VERSION}",
)


@contextmanager
def _transaction(conn: sqlite3.Connection) -> Iterator[None]:
    """One write transaction, taken up front so concurrent writers queue, not deadlock."""
    conn.execute("BEGIN IMMEDIATE")
    try:
        yield
    except BaseException:
        if conn.in_transaction:
            conn.execute("ROLLBACK")
        raise
    conn.execute("COMMIT")


class SQLiteConversationMemory:
    """Conversation memory in one SQLite file (WAL), shared across clients and restarts.

    Thread-safe: one connection serialized by a lock; other processes and connections
    on the same file coordinate through SQLite's own locking. The file holds one table
    (``messages``); its layout version is ``PRAGMA user_version``. Call :meth:`close`
    (or use it as a context manager) when done.
    """

    def __init__(
        self,
        path: str | os.PathLike[str],
        *,
        max_messages: int = DEFAULT_MEMORY_MAX_MESSAGES,
        max_sessions: int = DEFAULT_MEMORY_MAX_SESSIONS,
    ) -> None:
        self._max_messages = _check_limit("max_messages", max_messages)
        self._max_sessions = _check_limit("max_sessions", max_sessions)
        self._path = os.fspath(path)
        self._lock = threading.Lock()
        try:
            # Autocommit mode: every write below runs in an explicit BEGIN IMMEDIATE.
            conn = sqlite3.connect(
                self._path,
                timeout=MEMORY_BUSY_TIMEOUT_S,
                check_same_thread=False,
                isolation_level=None,
            )
        except sqlite3.Error as exc:
            raise ConfigError(
                f"conversation memory {self._path!r} cannot be opened ({exc}): "
                "pass a path in a writable folder"
            ) from exc
        try:
            self._open(conn)
        except BaseException:
            conn.close()
            raise
        self._conn: sqlite3.Connection | None = conn

    def _open(self, conn: sqlite3.Connection) -> None:
        try:
            conn.execute("PRAGMA journal_mode=WAL")
            with _transaction(conn):
                version = conn.execute("PRAGMA user_version").fetchone()[0]
                if version == 0:  # a new file: create the layout in the same transaction
                    for statement in _SCHEMA:
                        conn.execute(statement)
                elif version != SCHEMA_VERSION:
                    raise ConfigError(
                        f"conversation memory {self._path!r} has layout version {version}; "
                        f"this groundwire reads version {SCHEMA_VERSION}: use a new file or "
                        "the groundwire version that wrote it"
                    )
        except sqlite3.Error as exc:
            raise ConfigError(
                f"conversation memory {self._path!r} is not a usable SQLite database "
                f"({exc}): pass the path of a new file or of a memory groundwire wrote"
            ) from exc

    def _connection(self) -> sqlite3.Connection:
        if self._conn is None:
            raise QueryError(
                f"conversation memory {self._path!r} is closed: create a new "
                "SQLiteConversationMemory to use it again"
            )
        return self._conn

    def append(self, session_id: str, message: Message) -> None:
        """Store one user or assistant message, dropping the oldest past the bounds."""
        session_id = _check_session(session_id)
        message = _check_message(message)
        with self._lock:
            conn = self._connection()
            with _transaction(conn):
                conn.execute(
                    "INSERT INTO messages (session_id, role, content) VALUES (?, ?, ?)",
                    (session_id, message.role, message.content),
                )
                conn.execute(
                    "DELETE FROM messages WHERE session_id = ? AND seq <= ("
                    " SELECT seq FROM messages WHERE session_id = ?"
                    " ORDER BY seq DESC LIMIT 1 OFFSET ?)",
                    (session_id, session_id, self._max_messages),
                )
                self._evict_sessions(conn)

    def _evict_sessions(self, conn: sqlite3.Connection) -> None:
        (sessions,) = conn.execute("SELECT COUNT(DISTINCT session_id) FROM messages").fetchone()
        excess = sessions - self._max_sessions
        if excess > 0:
            # The session written longest ago is the one whose newest message is oldest.
            conn.execute(
                "DELETE FROM messages WHERE session_id IN ("
                " SELECT session_id FROM messages GROUP BY session_id"
                " ORDER BY MAX(seq) ASC LIMIT ?)",
                (excess,),
            )

    def history(self, session_id: str, limit: int | None = None) -> list[Message]:
        """The session's last ``limit`` messages (all kept when None), oldest first."""
        session_id = _check_session(session_id)
        limit = _check_history_limit(limit)
        with self._lock:
            rows = (
                self._connection()
                .execute(
                    "SELECT role, content FROM messages WHERE session_id = ?"
                    " ORDER BY seq DESC LIMIT ?",
                    (session_id, -1 if limit is None else limit),
                )
                .fetchall()
            )
        return [Message(role, content) for role, content in reversed(rows)]

    def clear(self, session_id: str) -> None:
        """Forget the session."""
        session_id = _check_session(session_id)
        with self._lock:
            self._connection().execute("DELETE FROM messages WHERE session_id = ?", (session_id,))

    @property
    def path(self) -> str:
        """The database file."""
        return self._path

    def close(self) -> None:
        """Close the database; later calls raise. Closing twice is harmless."""
        with self._lock:
            if self._conn is not None:
                self._conn.close()
                self._conn = None

    def __enter__(self) -> SQLiteConversationMemory:
        return self

    def __exit__(self, *_: object) -> None:
        self.close()
