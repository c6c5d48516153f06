"""What must never be indexed: secrets in a file's content, and files git ignores.

Shared by the repository corpus and by documents (``load_documents``, ``groundwire
ingest``), so both apply one set of rules.

:func:`find_secret` looks for three kinds of secret marker:

- private keys: ``BEGIN ... PRIVATE KEY`` (PEM, OpenSSH, PGP ``PRIVATE KEY BLOCK``)
  and PuTTY key files;
- URLs carrying a password: ``scheme://user:password@host``, the user possibly empty
  (``redis://:pw@cache``), the password possibly holding ``/``, ``?`` or ``#``;
  obvious placeholders (``password``, ``${DB_PASSWORD}``, ``***``) are not secrets;
- tokens of common services by their documented prefixes: AWS access key ids, GitHub,
  GitLab, Slack, Stripe live keys, Google API keys, OpenAI and Anthropic keys, npm,
  PyPI and Hugging Face tokens.

Encodings do not hide them: the raw bytes are checked, and so is the decoded and
extracted text (UTF-16 with a byte-order mark, HTML extracted), the text with HTML/XML
character references undone (``&#45;----BEGIN``), with JSON/JavaScript escapes undone
(``redis:\\/\\/``, ``\\u002d``), and in Unicode compatibility form (NFKC) without
zero-width characters (full-width ``－－－－－BEGIN``). Every pattern has bounded
repetition, so the scan is linear in the text.
"""

from __future__ import annotations

import html
import re
import shutil
import subprocess
import unicodedata
from collections.abc import Iterator, Sequence
from pathlib import Path

from groundwire.errors import SourceError

__all__ = ["find_secret", "git_ignored", "git_work_tree"]

_PRIVATE_KEY = re.compile(
    r"BEGIN[ \t]{1,4}(?:[A-Z0-9]{1,20}[ \t]{1,4}){0,4}PRIVATE[ \t]{1,4}KEY|PuTTY-User-Key-File-\d"
)
# scheme://user:password@host — scheme not preceded by another scheme character (one
# attempt per "://"), every part of bounded length.
_CREDENTIAL_URL = re.compile(
    r"(?<![A-Za-z0-9+.\-])([A-Za-z][A-Za-z0-9+.\-]{0,30})://"
    r"([^\s/?#@:'\"<>\\]{0,128}):([^\s@'\"<>\\]{1,256})@([^\s/?#@'\"<>\\:]{1,255})"
)
_PLACEHOLDER = re.compile(
    r"(?i:password|passwd|pass|pwd|secret|changeme|example|redacted|your[-_]?password|"
    r"xxx+|\*+|\.\.\.+|\$\{[^}]*\}|\{\{[^}]*\}\}|\{[^}]*\}|\$[A-Za-z_][A-Za-z0-9_]*|%\([^)]*\)s)"
)
_TOKENS = (
    ("an AWS access key id", re.compile(r"\b(?:AKIA|ASIA|ABIA|ACCA)[0-9A-Z]{16}\b")),
    ("a GitHub token", re.compile(r"\b(?:gh[pousr]_[A-Za-z0-9]{36,255}|github_pat_\w{50,255})")),
    ("a GitLab token", re.compile(r"\bglpat-[A-Za-z0-9_\-]{20,255}")),
    ("a Slack token", re.compile(r"\bxox[abposr]-[A-Za-z0-9-]{10,255}")),
    ("a Stripe live key", re.compile(r"\b[rs]k_live_[0-9A-Za-z]{20,255}")),
    ("a Google API key", re.compile(r"\bAIza[0-9A-Za-z_\-]{35}")),
    ("an OpenAI or Anthropic key", re.compile(r"\bsk-(?:[a-z]{2,8}-){0,2}[A-Za-z0-9_\-]{32,255}")),
    ("an npm token", re.compile(r"\bnpm_[A-Za-z0-9]{36}\b")),
    ("a PyPI token", re.compile(r"\bpypi-AgEIcHlwaS5vcmc[A-Za-z0-9_\-]{50,1000}")),
    ("a Hugging Face token", re.compile(r"\bhf_[A-Za-z0-9]{34,255}\b")),
)
_JS_ESCAPE = re.compile(r"\\(?:u([0-9A-Fa-f]{4})|x([0-9A-Fa-f]{2})|(/))")
_ZERO_WIDTH = dict.fromkeys(
    (code for code in (0x00AD, 0x034F, 0x061C, 0x180E, *range(0x200B, 0x2010), 0x2060, 0xFEFF)),
    None,
)


def _js_unescape(text: str) -> str:
    def one(match: re.Match[str]) -> str:
        code = match.group(1) or match.group(2)
        return chr(int(code, 16)) if code else "/"

    return _JS_ESCAPE.sub(one, text)


def _views(data: bytes, text: str | None) -> Iterator[tuple[str, str]]:
    """The content as the patterns see it: raw bytes, then each decoded form."""
    yield "", data.decode("latin-1")
    if text is None:
        return
    yield " of the text", text
    unescaped = html.unescape(text) if "&" in text else text
    if unescaped is not text:
        yield " of the text (character references undone)", unescaped
    if "\\" in unescaped:
        yield " of the text (escapes undone)", _js_unescape(unescaped)
    if not unescaped.isascii():
        folded = unicodedata.normalize("NFKC", unescaped).translate(_ZERO_WIDTH)
        yield " of the text (Unicode compatibility form)", folded


def _credential(match: re.Match[str]) -> bool:
    """Whether a ``scheme://user:password@host`` match carries a real password."""
    password = match.group(3)
    head = password.split("/", 1)[0]
    if head.isdigit() and "/" in password:  # host:port/path@... — a port, not a password
        return False
    return _PLACEHOLDER.fullmatch(password) is None


def find_secret(data: bytes, text: str | None = None) -> str | None:
    """Why content must not be indexed (see the module docstring), or None.

    ``data`` is the raw content; ``text`` its decoded or extracted text when known.
    The reason names the kind of secret and the line, never the secret itself.
    """
    for where, view in _views(data, text):
        key = _PRIVATE_KEY.search(view)
        if key is not None:
            line = view.count("\n", 0, key.start()) + 1
            return (
                f"contains a private key marker (line {line}{where}); remove the key from the file"
            )
        for url in _CREDENTIAL_URL.finditer(view):
            if _credential(url):
                line = view.count("\n", 0, url.start()) + 1
                return (
                    f"contains a URL with a password (line {line}{where}: "
                    f"{url.group(1)}://…:…@{url.group(4)}); remove the credentials from the file"
                )
        for name, pattern in _TOKENS:
            token = pattern.search(view)
            if token is not None:
                line = view.count("\n", 0, token.start()) + 1
                return (
                    f"contains what looks like {name} (line {line}{where}); remove it from the file"
                )
    return None


def git_work_tree(path: Path, timeout: float) -> Path | None:
    """The top folder of the git work tree holding ``path``, or None when there is none.

    Raises :class:`SourceError` when a ``.git`` sits above ``path`` but git cannot run:
    then ignore rules cannot be checked, and the caller must not guess.
    """
    start = path if path.is_dir() else path.parent
    start = start.resolve()
    marked = any((folder / ".git").exists() for folder in (start, *start.parents))
    if not marked:
        return None
    git = shutil.which("git")
    if git is None:
        raise SourceError(
            f"{path} is inside a git work tree, but git is not available (not on PATH), so "
            ".gitignore rules cannot be checked; install git, or turn the check off "
            "(--no-gitignore, gitignore=False)"
        )
    try:
        done = subprocess.run(
            [git, "-C", str(start), "rev-parse", "--show-toplevel"],
            capture_output=True,
            timeout=timeout,
            check=False,
        )
    except (subprocess.TimeoutExpired, OSError) as exc:
        raise SourceError(f"git could not tell whether {path} is in a work tree ({exc})") from exc
    if done.returncode != 0:
        return None  # e.g. inside .git itself, or a bare repository
    top = done.stdout.decode("utf-8", "surrogateescape").strip()
    return Path(top) if top else None


def git_ignored(root: Path, paths: Sequence[str], timeout: float) -> dict[str, str]:
    """Paths (relative to ``root``) git ignores → the rule; raises when git cannot tell.

    ``--no-index`` makes ignore rules apply to tracked files too.
    """
    git = shutil.which("git")
    if git is None:
        raise SourceError(
            "git is not available (not on PATH), so .gitignore rules cannot be checked; "
            "nothing was included. Install git to build a repository corpus"
        )
    command = [git, "-C", str(root), "check-ignore", "--no-index", "--verbose", "-z", "--stdin"]
    try:
        done = subprocess.run(
            command,
            input=b"".join(path.encode("utf-8", "surrogateescape") + b"\0" for path in paths),
            capture_output=True,
            timeout=timeout,
            check=False,
        )
    except subprocess.TimeoutExpired as exc:
        raise SourceError(
            f"git check-ignore did not answer within {timeout:g} s in {root}; nothing was included"
        ) from exc
    except OSError as exc:
        raise SourceError(
            f"git could not run ({exc.strerror or exc}); nothing was included"
        ) from exc
    if done.returncode not in (0, 1):
        detail = done.stderr.decode("utf-8", "replace").strip().splitlines()
        raise SourceError(
            f"git check-ignore failed in {root} (exit {done.returncode}: "
            f"{detail[0] if detail else 'no message'}); nothing was included. The corpus root "
            "must be inside a git work tree"
        )
    fields = done.stdout.split(b"\0")
    ignored: dict[str, str] = {}
    for at in range(0, len(fields) - 3, 4):
        source, line, rule, path = (
            field.decode("utf-8", "surrogateescape") for field in fields[at : at + 4]
        )
        if not rule.startswith("!"):
            ignored[path] = f"ignored by git ({source}:{line}: {rule})"
    return ignored
