"""Conversation memory: per-session history, bounds, roles kept, SQLite persistence, threads."""

from __future__ import annotations

import sqlite3
import threading
from collections.abc import Callable, Iterator
from pathlib import Path

import pytest

from groundwire import (
    ConfigError,
    ConversationMemory,
    InMemoryConversationMemory,
    QueryError,
    SQLiteConversationMemory,
)
from groundwire.config import (
    DEFAULT_MEMORY_MAX_MESSAGES,
    DEFAULT_MEMORY_MAX_SESSIONS,
    MAX_SESSION_ID_CHARS,
)
from groundwire.llm.base import Message, ToolCall
from groundwire.llm.memory import SCHEMA_VERSION

MakeMemory = Callable[..., ConversationMemory]


def user(text: str) -> Message:
    return Message("user", text)


def assistant(text: str) -> Message:
    return Message("assistant", text)


@pytest.fixture(params=["in-memory", "sqlite"])
def make_memory(request: pytest.FixtureRequest, tmp_path: Path) -> Iterator[MakeMemory]:
    """Build either memory with the given bounds; SQLite ones are closed afterwards."""
    opened: list[SQLiteConversationMemory] = []

    def make(**bounds: int) -> ConversationMemory:
        if request.param == "in-memory":
            return InMemoryConversationMemory(**bounds)
        memory = SQLiteConversationMemory(tmp_path / f"memory-{len(opened)}.db", **bounds)
        opened.append(memory)
        return memory

    yield make
    for memory in opened:
        memory.close()


# -- the protocol, for both memories -------------------------------------------------------------
def test_both_memories_satisfy_the_protocol(make_memory: MakeMemory) -> None:
    assert isinstance(make_memory(), ConversationMemory)


def test_history_is_per_session_and_oldest_first(make_memory: MakeMemory) -> None:
    memory = make_memory()
    memory.append("a", user("a1"))
    memory.append("b", user("b1"))
    memory.append("a", assistant("a2"))
    assert memory.history("a") == [user("a1"), assistant("a2")]
    assert memory.history("b") == [user("b1")]
    assert memory.history("unknown") == []


def test_history_limit_keeps_the_latest(make_memory: MakeMemory) -> None:
    memory = make_memory()
    for index in range(5):
        memory.append("s", user(str(index)))
    assert [m.content for m in memory.history("s", 2)] == ["3", "4"]
    assert memory.history("s", 0) == []
    assert len(memory.history("s", 100)) == 5


@pytest.mark.parametrize("limit", [-1, 1.5, True, "2"])
def test_a_bad_history_limit_is_refused(make_memory: MakeMemory, limit: object) -> None:
    with pytest.raises(QueryError, match="limit"):
        make_memory().history("s", limit)  # type: ignore[arg-type]


def test_clear_forgets_one_session(make_memory: MakeMemory) -> None:
    memory = make_memory()
    memory.append("a", user("a1"))
    memory.append("b", user("b1"))
    memory.clear("a")
    memory.clear("never-seen")
    assert memory.history("a") == []
    assert memory.history("b") == [user("b1")]


@pytest.mark.parametrize(
    "message",
    [
        Message("system", "You are a bot."),
        Message("tool", "42", tool_call_id="t1"),
        Message("assistant", "", tool_calls=(ToolCall("t1", "lookup", {}),)),
    ],
    ids=["system", "tool", "tool-calls"],
)
def test_only_user_and_assistant_text_is_stored(make_memory: MakeMemory, message: Message) -> None:
    memory = make_memory()
    with pytest.raises(QueryError, match="cannot be stored in conversation memory"):
        memory.append("s", message)
    assert memory.history("s") == []


def test_a_non_message_is_a_type_error(make_memory: MakeMemory) -> None:
    with pytest.raises(TypeError, match="Message"):
        make_memory().append("s", {"role": "user", "content": "hi"})  # type: ignore[arg-type]


@pytest.mark.parametrize("session_id", ["", "   ", None, 7, "x" * (MAX_SESSION_ID_CHARS + 1)])
def test_a_bad_session_id_is_refused(make_memory: MakeMemory, session_id: object) -> None:
    memory = make_memory()
    with pytest.raises(QueryError, match="session_id"):
        memory.append(session_id, user("hi"))  # type: ignore[arg-type]
    with pytest.raises(QueryError, match="session_id"):
        memory.history(session_id)  # type: ignore[arg-type]


def test_a_session_keeps_its_latest_messages(make_memory: MakeMemory) -> None:
    memory = make_memory(max_messages=3)
    for index in range(7):
        memory.append("s", user(str(index)))
    memory.append("other", user("x"))
    assert [m.content for m in memory.history("s")] == ["4", "5", "6"]
    assert [m.content for m in memory.history("other")] == ["x"]


def test_the_least_recently_written_session_is_dropped(make_memory: MakeMemory) -> None:
    memory = make_memory(max_sessions=2)
    memory.append("a", user("a1"))
    memory.append("b", user("b1"))
    memory.append("a", user("a2"))  # "a" is now the most recently written
    memory.append("c", user("c1"))  # over the bound: "b" goes
    assert memory.history("b") == []
    assert [m.content for m in memory.history("a")] == ["a1", "a2"]
    assert memory.history("c") == [user("c1")]


@pytest.mark.parametrize("bound", ["max_messages", "max_sessions"])
@pytest.mark.parametrize("value", [0, -3, 2.5, True])
def test_bounds_must_be_positive_integers(
    make_memory: MakeMemory, bound: str, value: object
) -> None:
    with pytest.raises(ConfigError, match=bound):
        make_memory(**{bound: value})


def test_defaults_come_from_config() -> None:
    assert DEFAULT_MEMORY_MAX_MESSAGES >= 8  # enough for the recent turns grounding reads
    assert DEFAULT_MEMORY_MAX_SESSIONS >= 1


def test_concurrent_appends_are_all_kept(make_memory: MakeMemory) -> None:
    threads, per_thread = 8, 40
    memory = make_memory(max_messages=threads * per_thread)
    barrier = threading.Barrier(threads)
    failures: list[BaseException] = []

    def work(worker: int) -> None:
        try:
            barrier.wait()
            for index in range(per_thread):
                memory.append("shared", user(f"{worker}:{index}"))
                memory.append(f"own-{worker}", assistant(str(index)))
                memory.history("shared", 4)
        except BaseException as exc:  # reported below: a thread's error must fail the test
            failures.append(exc)

    workers = [threading.Thread(target=work, args=(w,)) for w in range(threads)]
    for thread in workers:
        thread.start()
    for thread in workers:
        thread.join()
    assert failures == []
    shared = [m.content for m in memory.history("shared")]
    assert sorted(shared) == sorted(f"{w}:{i}" for w in range(threads) for i in range(per_thread))
    for worker in range(threads):
        mine = [m.content for m in memory.history("shared") if m.content.startswith(f"{worker}:")]
        assert mine == [f"{worker}:{i}" for i in range(per_thread)]  # each thread's order kept
        assert [m.content for m in memory.history(f"own-{worker}")] == [
            str(i) for i in range(per_thread)
        ]


def test_concurrent_appends_respect_the_bounds(make_memory: MakeMemory) -> None:
    memory = make_memory(max_messages=5, max_sessions=3)

    def work(worker: int) -> None:
        for index in range(50):
            memory.append(f"s{(worker + index) % 6}", user(str(index)))

    workers = [threading.Thread(target=work, args=(w,)) for w in range(6)]
    for thread in workers:
        thread.start()
    for thread in workers:
        thread.join()
    sizes = [len(memory.history(f"s{n}")) for n in range(6)]
    assert sum(1 for size in sizes if size) == 3  # a session evicted and started again
    assert all(size <= 5 for size in sizes)  # may hold fewer than five
    assert sum(sizes) >= 3


# -- SQLite only ----------------------------------------------------------------------------------
def test_sqlite_memory_persists_across_instances(tmp_path: Path) -> None:
    path = tmp_path / "memory.db"
    with SQLiteConversationMemory(path) as first:
        first.append("s", user("hello"))
        first.append("s", assistant("hi there"))
    with SQLiteConversationMemory(str(path)) as second:
        assert second.history("s") == [user("hello"), assistant("hi there")]
        assert second.path == str(path)
    assert path.is_file()


def test_sqlite_memory_is_bounded_across_instances(tmp_path: Path) -> None:
    path = tmp_path / "memory.db"
    with SQLiteConversationMemory(path, max_messages=2, max_sessions=2) as memory:
        for index in range(4):
            memory.append("s", user(str(index)))
        memory.append("t", user("t"))
    with SQLiteConversationMemory(path, max_messages=2, max_sessions=2) as memory:
        memory.append("u", user("u"))  # a third session: "s" (written longest ago) goes
        assert memory.history("s") == []
        assert memory.history("t") == [user("t")]
    with sqlite3.connect(path) as conn:
        assert conn.execute("SELECT COUNT(*) FROM messages").fetchone() == (2,)


def test_sqlite_file_is_wal_with_one_versioned_table(tmp_path: Path) -> None:
    path = tmp_path / "memory.db"
    SQLiteConversationMemory(path).close()
    with sqlite3.connect(path) as conn:
        assert conn.execute("PRAGMA journal_mode").fetchone() == ("wal",)
        assert conn.execute("PRAGMA user_version").fetchone() == (SCHEMA_VERSION,)
        tables = conn.execute("SELECT name FROM sqlite_master WHERE type = 'table'").fetchall()
    assert tables == [("messages",)]


def test_sqlite_refuses_a_newer_layout(tmp_path: Path) -> None:
    path = tmp_path / "memory.db"
    SQLiteConversationMemory(path).close()
    with sqlite3.connect(path) as conn:
        conn.execute(f"PRAGMA user_version = {SCHEMA_VERSION + 1}")
    with pytest.raises(ConfigError, match=f"layout version {SCHEMA_VERSION + 1}"):
        SQLiteConversationMemory(path)


def test_sqlite_refuses_a_file_that_is_not_a_database(tmp_path: Path) -> None:
    path = tmp_path / "notes.db"
    path.write_bytes(b"these are not the pages you are looking for" * 100)
    with pytest.raises(ConfigError, match="not a usable SQLite database") as caught:
        SQLiteConversationMemory(path)
    assert isinstance(caught.value.__cause__, sqlite3.Error)


def test_sqlite_refuses_an_unopenable_path(tmp_path: Path) -> None:
    with pytest.raises(ConfigError, match=r"cannot be opened|not a usable"):
        SQLiteConversationMemory(tmp_path / "missing-folder" / "memory.db")


def test_sqlite_keeps_content_verbatim(tmp_path: Path) -> None:
    text = "Robert'); DROP TABLE messages;-- \u00e9\U0001f600\n\x00tail"
    with SQLiteConversationMemory(tmp_path / "m.db") as memory:
        memory.append("s'; --", user(text))
        assert memory.history("s'; --") == [user(text)]


def test_a_closed_sqlite_memory_says_so(tmp_path: Path) -> None:
    memory = SQLiteConversationMemory(tmp_path / "m.db")
    memory.close()
    memory.close()  # twice is harmless
    with pytest.raises(QueryError, match="closed"):
        memory.append("s", user("hi"))
    with pytest.raises(QueryError, match="closed"):
        memory.history("s")


def test_two_connections_on_one_file_share_the_history(tmp_path: Path) -> None:
    path = tmp_path / "m.db"
    with SQLiteConversationMemory(path) as one, SQLiteConversationMemory(path) as two:
        workers = [
            threading.Thread(
                target=lambda m=m, tag=tag: [m.append("s", user(f"{tag}{i}")) for i in range(30)]
            )
            for m, tag in ((one, "a"), (two, "b"))
        ]
        for thread in workers:
            thread.start()
        for thread in workers:
            thread.join()
        assert len(one.history("s")) == len(two.history("s")) == 60
