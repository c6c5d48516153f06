"""Write the fuzz suite's example counts when the session ends (see fuzz_support.py)."""

from __future__ import annotations

import sys
from typing import Any


def pytest_sessionfinish(session: Any, exitstatus: int) -> None:
    support = sys.modules.get("fuzz_support")
    if support is not None:
        support.write_report()
