"""Real servers on 127.0.0.1 for the sync tests, started once per session.

- :class:`MotoS3`: moto's standalone S3 server (``moto_server``, from ``moto[server]``)
  in a subprocess; :meth:`MotoS3.client` is a boto3 client for it, :meth:`MotoS3.bucket`
  a fresh bucket per test.
- :class:`Dovecot`: Debian's dovecot IMAP server run from a config in a temporary folder
  (no system service, its own base dir, plaintext auth on a loopback port), in the
  foreground as a subprocess; :meth:`Dovecot.user` adds a fresh account per test.

Each ``start`` raises :class:`UnavailableError` with the reason when the server truly cannot
start (binary missing, no port), and the fixtures skip with that reason.
"""

from __future__ import annotations

import itertools
import os
import shutil
import socket
import subprocess
import sys
import tempfile
import time
from pathlib import Path
from typing import Any

__all__ = ["Dovecot", "MotoS3", "UnavailableError", "free_port"]

_START_LIMIT_S = 30.0


class UnavailableError(RuntimeError):
    """A server cannot run on this machine (the reason says why)."""


def free_port() -> int:
    with socket.socket() as sock:
        sock.bind(("127.0.0.1", 0))
        return int(sock.getsockname()[1])


def _wait_for_port(port: int, process: subprocess.Popen[bytes], log: Path) -> None:
    deadline = time.monotonic() + _START_LIMIT_S
    while time.monotonic() < deadline:
        if process.poll() is not None:
            raise UnavailableError(
                f"exited with {process.returncode}: {log.read_text(errors='replace')[-500:]}"
            )
        with socket.socket() as sock:
            if sock.connect_ex(("127.0.0.1", port)) == 0:
                return
        time.sleep(0.05)
    process.kill()
    raise UnavailableError(f"did not listen on 127.0.0.1:{port} within {_START_LIMIT_S:g} s")


def _stop(process: subprocess.Popen[bytes] | None) -> None:
    if process is not None and process.poll() is None:
        process.terminate()
        try:
            process.wait(timeout=10)
        except subprocess.TimeoutExpired:
            process.kill()
            process.wait(timeout=10)


class MotoS3:
    """moto's S3 server in a subprocess on a free loopback port."""

    def __init__(self) -> None:
        self.process: subprocess.Popen[bytes] | None = None
        self.port = 0
        self.folder = Path(tempfile.mkdtemp(prefix="gw-moto-"))
        self._buckets = itertools.count(1)

    @property
    def endpoint(self) -> str:
        return f"http://127.0.0.1:{self.port}"

    def start(self) -> MotoS3:
        binary = shutil.which("moto_server") or str(Path(sys.executable).with_name("moto_server"))
        if not Path(binary).exists():
            raise UnavailableError("moto_server is not installed (pip install 'moto[server]')")
        self.port = free_port()
        log = self.folder / "moto.log"
        with log.open("wb") as out:
            self.process = subprocess.Popen(
                [binary, "-H", "127.0.0.1", "-p", str(self.port)],
                stdout=out,
                stderr=subprocess.STDOUT,
            )
        _wait_for_port(self.port, self.process, log)
        return self

    def stop(self) -> None:
        _stop(self.process)
        shutil.rmtree(self.folder, ignore_errors=True)

    def options(self) -> dict[str, Any]:
        return {
            "endpoint_url": self.endpoint,
            "region_name": "us-east-1",
            "aws_access_key_id": "testing",
            "aws_secret_access_key": "testing",
        }

    def client(self) -> Any:
        import boto3

        return boto3.client("s3", **self.options())

    def bucket(self) -> str:
        name = f"gw-test-{os.getpid()}-{next(self._buckets)}"
        self.client().create_bucket(Bucket=name)
        return name


class Dovecot:
    """dovecot's IMAP server from a private config, on a free loopback port."""

    def __init__(self) -> None:
        self.process: subprocess.Popen[bytes] | None = None
        self.port = 0
        self.folder = Path(tempfile.mkdtemp(prefix="gw-dovecot-"))
        self._users = itertools.count(1)
        self.password = "imap-test-password"

    def start(self) -> Dovecot:
        binary = shutil.which("dovecot") or (
            "/usr/sbin/dovecot" if Path("/usr/sbin/dovecot").exists() else None
        )
        if binary is None:
            raise UnavailableError("dovecot is not installed (apt-get install dovecot-imapd)")
        root = os.geteuid() == 0
        if root:
            import grp
            import pwd

            try:
                mail_user, _login_user = pwd.getpwnam("dovecot"), pwd.getpwnam("dovenull")
            except KeyError as exc:
                raise UnavailableError(f"dovecot's system users are missing ({exc})") from exc
            internal, login = "dovecot", "dovenull"
            uid, gid = mail_user.pw_uid, mail_user.pw_gid
            group = grp.getgrgid(gid).gr_name
        else:
            import grp
            import pwd

            me = pwd.getpwuid(os.getuid())
            internal = login = me.pw_name
            uid, gid = os.getuid(), os.getgid()
            group = grp.getgrgid(gid).gr_name
        self.port = free_port()
        base = self.folder
        (base / "run").mkdir()
        (base / "state").mkdir()
        (base / "mail").mkdir()
        (base / "passwd").write_text("")
        os.chmod(base, 0o755)
        if root:
            os.chown(base / "mail", uid, gid)
        config = f"""
base_dir = {base}/run
state_dir = {base}/state
instance_name = gw-test-{self.port}
protocols = imap
listen = 127.0.0.1
ssl = no
disable_plaintext_auth = no
auth_mechanisms = plain login
log_path = {base}/dovecot.log
default_internal_user = {internal}
default_internal_group = {group}
default_login_user = {login}
first_valid_uid = 1
mail_location = maildir:{base}/mail/%u
service imap-login {{
  inet_listener imap {{
    address = 127.0.0.1
    port = {self.port}
  }}
  inet_listener imaps {{
    port = 0
  }}
  chroot =
}}
service anvil {{
  chroot =
}}
passdb {{
  driver = passwd-file
  args = scheme=PLAIN username_format=%u {base}/passwd
}}
userdb {{
  driver = static
  args = uid={uid} gid={gid} home={base}/mail/%u
}}
"""
        (base / "dovecot.conf").write_text(config)
        log = base / "dovecot.log"
        self.process = subprocess.Popen(
            [binary, "-F", "-c", str(base / "dovecot.conf")],
            stdout=subprocess.DEVNULL,
            stderr=subprocess.STDOUT,
        )
        try:
            _wait_for_port(self.port, self.process, log if log.exists() else base / "dovecot.conf")
        except UnavailableError:
            _stop(self.process)
            raise
        return self

    def stop(self) -> None:
        _stop(self.process)
        shutil.rmtree(self.folder, ignore_errors=True)

    def user(self) -> str:
        """A fresh account (its own empty mailbox) with :attr:`password`."""
        name = f"user{next(self._users)}"
        with (self.folder / "passwd").open("a") as handle:
            handle.write(f"{name}:{{PLAIN}}{self.password}\n")
        return name

    def client(self, user: str) -> Any:
        from imapclient import IMAPClient

        client = IMAPClient("127.0.0.1", port=self.port, ssl=False, timeout=30)
        client.login(user, self.password)
        return client
