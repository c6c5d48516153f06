"""Sync throughput: a 10,000-message mbox and 1,000 S3 objects, full vs incremental.

Measures, each in a fresh state folder (checkpoints, ledger, custody on local disk):

- **mbox**: a generated mbox (``--messages``, 10,000; four messages per thread, ~1 KB
  each, fixed seed). Full first sync (messages/s: parse, custody with fsync, thread
  composition, extraction, chunking, ledger), a no-op run, an append of 1 % new replies
  (the delta path: only the tail is read), an edit of 1 % of the messages in place (a
  full listing that recomposes only the touched threads), and the snapshot publish.
- **s3**: ``--objects`` (1,000) text objects on moto's standalone server on 127.0.0.1
  (started here), full first sync (objects/s), then 1 % edited and the listing
  re-synced (only changed objects are read).

Peers (the floor each sync stands on, timed in the same process): for the mbox, the
standard library alone reading and parsing every message (``mailbox`` + ``email``);
for S3, boto3 alone listing and reading every object. Ratios are sync time / floor,
and incremental time / full time.

Run: ``.venv/bin/python benchmarks/bench_sync.py`` (needs the ``[sync]`` extra and
``moto[server]``; ``--no-s3`` skips S3). About a minute on 2 cores.
"""

from __future__ import annotations

import argparse
import email
import email.policy
import mailbox
import random
import shutil
import socket
import subprocess
import sys
import tempfile
import time
from collections.abc import Callable
from pathlib import Path
from typing import Any

sys.path.insert(0, str(Path(__file__).parent))
from _common import print_table, source_state, versions
from groundwire import Syncer, load_sync_config

ROOT = Path(__file__).resolve().parents[1]
WORDS = [
    "invoice",
    "badge",
    "printer",
    "laptop",
    "travel",
    "refund",
    "policy",
    "server",
    "deploy",
    "access",
    "password",
    "network",
    "office",
    "meeting",
    "holiday",
    "budget",
    "contract",
    "release",
    "incident",
    "backup",
    "monitor",
    "license",
    "vendor",
    "payroll",
    "roadmap",
]


def _sentence(rng: random.Random, n: int) -> str:
    return " ".join(rng.choice(WORDS) for _ in range(n)).capitalize() + "."


def _message(number: int, thread: int, rng: random.Random, edited: bool = False) -> bytes:
    msg = email.message.EmailMessage()
    msg["From"] = f"user{number % 97}@acme.example"
    msg["To"] = "support@acme.example"
    msg["Subject"] = ("Re: " if number % 4 else "") + f"Topic {thread}: {rng.choice(WORDS)}"
    msg["Message-ID"] = f"<m{number}@acme.example>"
    msg["Date"] = f"Mon, 02 Mar 2026 {number % 24:02d}:{number % 60:02d}:00 +0000"
    if number % 4:
        msg["References"] = f"<m{thread * 4}@acme.example>"
    body = "\n\n".join(_sentence(rng, 18) for _ in range(6))
    msg.set_content(body + ("\n\nEdited: " + _sentence(rng, 8) if edited else ""))
    return bytes(msg)


def _write_mbox(path: Path, messages: list[bytes]) -> None:
    if path.exists():
        path.unlink()
    box = mailbox.mbox(path)
    for data in messages:
        box.add(data)
    box.flush()
    box.close()


def _timed(fn: Callable[[], Any]) -> tuple[Any, float]:
    started = time.perf_counter()
    result = fn()
    return result, time.perf_counter() - started


def _config(folder: Path, source: dict[str, Any]) -> Path:
    import yaml

    path = folder / "sync.yaml"
    path.write_text(yaml.safe_dump({"state": "state", "snapshot": "kb", "sources": [source]}))
    return path


def _stdlib_parse(path: Path) -> int:
    """The standard library's fastest way to every message's text: compat32, walk, decode."""
    box = mailbox.mbox(path)
    count = 0
    for key in box.keys():  # noqa: SIM118 (a mailbox iterates messages, not keys)
        message = email.message_from_bytes(box.get_bytes(key), policy=email.policy.compat32)
        for part in message.walk():
            if part.get_content_type() == "text/plain":
                payload = part.get_payload(decode=True)
                count += isinstance(payload, bytes) and bool(payload.decode("utf-8", "replace"))
                break
    box.close()
    return count


def bench_mbox(messages: int, seed: int) -> list[list[object]]:
    rng = random.Random(seed)
    folder = Path(tempfile.mkdtemp(prefix="gw-bench-mbox-"))
    try:
        data = [_message(n, n // 4, rng) for n in range(messages)]
        box = folder / "mail.mbox"
        _write_mbox(box, data)
        size = box.stat().st_size
        config = _config(folder, {"id": "mail", "type": "mbox", "path": "mail.mbox"})
        _, floor = _timed(lambda: _stdlib_parse(box))
        rows: list[list[object]] = []
        with Syncer(load_sync_config(config)) as syncer:
            report, full = _timed(lambda: syncer.run_once(publish=False))
            threads = len(report.sources[0].new)
            _, publish = _timed(lambda: syncer.publish(force=True))
            _, noop = _timed(lambda: syncer.run_once(publish=False))
            count = max(1, messages // 100)
            extra = [_message(messages + n, (n * 37) % (messages // 4), rng) for n in range(count)]
            appended = mailbox.mbox(box)
            for item in extra:
                appended.add(item)
            appended.flush()
            appended.close()
            delta_report, delta = _timed(lambda: syncer.run_once(publish=False))
            edited = list(data) + extra
            for n in rng.sample(range(messages), count):
                edited[n] = _message(n, n // 4, rng, edited=True)
            _write_mbox(box, edited)
            edit_report, edit = _timed(lambda: syncer.run_once(publish=False))
            updated, republish = _timed(lambda: syncer.publish())
            (syncer.config.state / "published.json").unlink()  # no record: a rebuild
            rebuilt, rebuild = _timed(lambda: syncer.publish(force=True))
        rows.append(
            [
                "mbox full sync",
                f"{messages:,} msgs ({size / 2**20:.1f} MiB)",
                f"{full:.2f}",
                f"{messages / full:,.0f} msg/s",
                f"{full / floor:.1f}x stdlib parse",
            ]
        )
        rows.append(
            [
                "  stdlib mailbox+email parse (floor)",
                f"{messages:,} msgs",
                f"{floor:.2f}",
                f"{messages / floor:,.0f} msg/s",
                "1.0x",
            ]
        )
        rows.append(
            ["  publish snapshot (rebuild)", f"{threads:,} threads", f"{publish:.2f}", "", ""]
        )
        rows.append(
            ["mbox no-op run", "unchanged file", f"{noop:.3f}", "", f"{noop / full:.3f} of full"]
        )
        rows.append(
            [
                "mbox append 1% (delta)",
                f"{count} new msgs, {len(delta_report.sources[0].changed)} threads",
                f"{delta:.2f}",
                f"{count / delta:,.0f} msg/s",
                f"{delta / full:.3f} of full",
            ]
        )
        rows.append(
            [
                "mbox edit 1% (full listing)",
                f"{count} edited, {len(edit_report.sources[0].changed)} threads",
                f"{edit:.2f}",
                f"{len(edited) / edit:,.0f} msg/s listed",
                f"{edit / full:.3f} of full",
            ]
        )
        rows.append(
            [
                f"  publish after 1% append + 1% edit ({updated.mode})",
                f"{updated.chunks:,} chunks",
                f"{republish:.2f}",
                "",
                f"{republish / rebuild:.2f} of a rebuild",
            ]
        )
        rows.append(
            [
                f"  same publish, {rebuilt.mode} (no publish record)",
                f"{rebuilt.chunks:,} chunks",
                f"{rebuild:.2f}",
                "",
                f"{rebuild / publish:.2f} of first",
            ]
        )
        return rows
    finally:
        shutil.rmtree(folder, ignore_errors=True)


def _moto() -> tuple[subprocess.Popen[bytes], str]:
    binary = shutil.which("moto_server") or str(Path(sys.executable).with_name("moto_server"))
    with socket.socket() as sock:
        sock.bind(("127.0.0.1", 0))
        port = sock.getsockname()[1]
    process = subprocess.Popen(
        [binary, "-H", "127.0.0.1", "-p", str(port)],
        stdout=subprocess.DEVNULL,
        stderr=subprocess.DEVNULL,
    )
    deadline = time.monotonic() + 30
    while time.monotonic() < deadline:
        with socket.socket() as sock:
            if sock.connect_ex(("127.0.0.1", port)) == 0:
                return process, f"http://127.0.0.1:{port}"
        time.sleep(0.05)
    process.kill()
    raise SystemExit("moto_server did not start")


def bench_s3(objects: int, seed: int) -> list[list[object]]:
    import os

    import boto3

    os.environ.setdefault("AWS_ACCESS_KEY_ID", "bench")
    os.environ.setdefault("AWS_SECRET_ACCESS_KEY", "bench")
    rng = random.Random(seed)
    process, endpoint = _moto()
    folder = Path(tempfile.mkdtemp(prefix="gw-bench-s3-"))
    try:
        s3 = boto3.client("s3", endpoint_url=endpoint, region_name="us-east-1")
        s3.create_bucket(Bucket="bench")
        for n in range(objects):
            s3.put_object(
                Bucket="bench",
                Key=f"docs/{n:05d}.md",
                Body=f"# Doc {n}\n\n{_sentence(rng, 120)}\n".encode(),
            )

        def floor_read() -> int:
            total = 0
            for page in s3.get_paginator("list_objects_v2").paginate(Bucket="bench"):
                for item in page.get("Contents", ()):
                    total += len(s3.get_object(Bucket="bench", Key=item["Key"])["Body"].read())
            return total

        _, floor = _timed(floor_read)
        config = _config(
            folder,
            {
                "id": "s3",
                "type": "s3",
                "bucket": "bench",
                "endpoint_url": endpoint,
                "region": "us-east-1",
            },
        )
        with Syncer(load_sync_config(config)) as syncer:
            _, full = _timed(lambda: syncer.run_once(publish=False))
            count = max(1, objects // 100)
            for n in rng.sample(range(objects), count):
                s3.put_object(
                    Bucket="bench",
                    Key=f"docs/{n:05d}.md",
                    Body=f"# Doc {n}\n\nEdited: {_sentence(rng, 60)}\n".encode(),
                )
            report, incremental = _timed(lambda: syncer.run_once(publish=False))
        changed = len(report.sources[0].changed)
        return [
            [
                "s3 full sync",
                f"{objects:,} objects",
                f"{full:.2f}",
                f"{objects / full:,.0f} obj/s",
                f"{full / floor:.1f}x boto3 read",
            ],
            [
                "  boto3 list+get all (floor)",
                f"{objects:,} objects",
                f"{floor:.2f}",
                f"{objects / floor:,.0f} obj/s",
                "1.0x",
            ],
            [
                "s3 1% edited (listing)",
                f"{changed} changed",
                f"{incremental:.2f}",
                f"{objects / incremental:,.0f} obj/s listed",
                f"{incremental / full:.3f} of full",
            ],
        ]
    finally:
        process.terminate()
        process.wait(timeout=10)
        shutil.rmtree(folder, ignore_errors=True)


def main() -> None:
    parser = argparse.ArgumentParser(description=__doc__.splitlines()[0])
    parser.add_argument("--messages", type=int, default=10_000)
    parser.add_argument("--objects", type=int, default=1_000)
    parser.add_argument("--seed", type=int, default=17)
    parser.add_argument("--no-s3", action="store_true")
    args = parser.parse_args()
    print(versions(["groundwire", "boto3", "moto", "imapclient", "puremagic"]))
    print(source_state(ROOT))
    rows = bench_mbox(args.messages, args.seed)
    if not args.no_s3:
        rows += bench_s3(args.objects, args.seed)
    print_table(["run", "size", "seconds", "throughput", "ratio"], rows)


if __name__ == "__main__":
    main()
