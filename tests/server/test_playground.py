"""The web playground end to end in headless Chromium (Debian's package, driven by Playwright).

Skipped, with the reason, when Playwright or /usr/bin/chromium is missing (CI installs
both: ``.ci/run``). The screenshot is saved to ``.ci/artifacts/playground.png``.
"""

from __future__ import annotations

import shutil
from collections.abc import Callable, Iterator
from pathlib import Path
from typing import Any

import pytest
from server_helpers import ADMIN, Live

sync_api = pytest.importorskip("playwright.sync_api", reason="needs Playwright (the [test] extra)")

CHROMIUM = shutil.which("chromium") or "/usr/bin/chromium"
if not Path(CHROMIUM).exists():
    pytest.skip(
        "needs Chromium at /usr/bin/chromium: apt-get install -y chromium", allow_module_level=True
    )

ARTIFACTS = Path(__file__).resolve().parents[2] / ".ci" / "artifacts"
ARGS = [
    "--headless", "--no-sandbox", "--disable-gpu",
    "--disable-background-networking", "--disable-component-update",
]  # fmt: skip


@pytest.fixture(scope="module")
def browser() -> Iterator[Any]:
    with sync_api.sync_playwright() as playwright:
        launched = playwright.chromium.launch(executable_path=CHROMIUM, args=ARGS)
        yield launched
        launched.close()


@pytest.fixture
def page(browser: Any) -> Iterator[Any]:
    context = browser.new_context(viewport={"width": 1366, "height": 900})
    opened = context.new_page()
    errors: list[str] = []
    opened.on("pageerror", lambda error: errors.append(str(error)))
    yield opened
    context.close()
    assert not errors, errors


def ground_with_keyboard(
    page: Any, query: str, wait: str = "#results:not([hidden]):not([aria-busy])"
) -> None:
    """Focus the query box with '/', type, press Enter, wait for ``wait`` (the outcome)."""
    page.evaluate("document.activeElement && document.activeElement.blur()")
    page.keyboard.press("/")
    page.keyboard.press("Control+A")
    page.keyboard.type(query)
    page.keyboard.press("Enter")
    page.wait_for_selector(wait)


def settled(page: Any, before: str) -> str:
    """The context text once it differs from ``before`` (the page re-grounds on change)."""
    page.wait_for_function(
        "before => document.querySelector('#context').textContent !== before", arg=before
    )
    page.wait_for_selector("#results:not([aria-busy])")
    return str(page.text_content("#context"))


def test_query_breakdown_scope_and_context(make_server: Callable[..., Live], page: Any) -> None:
    live = make_server()
    page.goto(live.url + "/")
    page.wait_for_selector("#auth:not([hidden])")  # the server wants a key: the page asks
    page.fill("#key", ADMIN)
    page.keyboard.press("Enter")
    page.wait_for_selector("#kb option[value=handbook]", state="attached")

    ground_with_keyboard(page, "send alerts to a slack channel")  # names slack: it joins
    assert "named in the query" in page.text_content("#summary")
    named = str(page.text_content("#context"))
    ground_with_keyboard(page, "send alerts to a chat channel")  # slack not named: a hint
    settled(page, named)
    first = page.locator("#candidates tbody tr").first
    assert first.locator(".bar").count() > 0  # the per-field breakdown
    assert "out of scope" in page.text_content("#summary")
    assert "slack" in page.text_content("#summary")
    before = str(page.text_content("#context"))

    page.check("#integrations input[value=slack]")  # a scope change re-grounds
    with_slack = settled(page, before)
    assert "slack" in with_slack.lower()
    assert page.locator("#context mark.citation").count() > 0

    page.fill("#max-tokens", "400")
    page.press("#max-tokens", "Tab")  # change fires on blur
    smaller = settled(page, with_slack)
    assert len(smaller) < len(with_slack)
    assert "tokens" in page.text_content("#context-facts")

    page.locator("#context mark.citation").first.click()  # a citation opens its entry
    page.wait_for_selector("#entry:not([hidden])")
    assert page.text_content("#entry-meta").startswith("[KB:")
    ARTIFACTS.mkdir(parents=True, exist_ok=True)
    page.screenshot(path=str(ARTIFACTS / "playground.png"), full_page=True)
    page.keyboard.press("Escape")
    page.wait_for_selector("#entry", state="hidden")


def test_documents_and_validation_issues(make_server: Callable[..., Live], page: Any) -> None:
    live = make_server(auth=False)
    page.goto(live.url + "/")
    page.wait_for_selector("#kb option[value=access]", state="attached")
    page.select_option("#kb", "access")
    page.wait_for_selector("#issues li.issue")
    assert "tenant-mixed" in page.text_content("#issues")
    page.select_option("#kb", "docs")
    page.wait_for_function("document.querySelector('#run').textContent === 'Find evidence'")
    ground_with_keyboard(page, "how often are signing keys rotated")
    assert "ready" in page.text_content("#summary")
    assert "rotate.md" in page.text_content("#candidates")
    assert "[KB:rotate.md#" in page.text_content("#context")


def test_a_bad_value_shows_the_servers_problem(make_server: Callable[..., Live], page: Any) -> None:
    live = make_server(auth=False)
    page.goto(live.url + "/")
    page.wait_for_selector("#kb option", state="attached")
    page.select_option("#mode", "hybrid")  # no vectors on this server
    ground_with_keyboard(page, "rotate an API key", wait="#error:not([hidden])")
    assert "needs vectors" in page.text_content("#error")
