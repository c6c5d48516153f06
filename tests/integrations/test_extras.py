"""Each adapter sits behind its extra: without the framework, importing it says what to install.

Run in subprocesses where the framework is made unimportable (``sys.modules[name] = None``
makes Python raise ImportError for it), as on a machine without the extra.
"""

from __future__ import annotations

import subprocess
import sys

import pytest

PROBE = """
import sys
for name in {blocked!r}:
    sys.modules[name] = None
import groundwire.integrations  # the seam needs no framework
try:
    import groundwire.integrations.{module}
except ImportError as exc:
    import groundwire
    assert isinstance(exc, groundwire.MissingExtraError), type(exc)
    print(exc)
else:
    raise SystemExit("imported without the framework")
"""


@pytest.mark.parametrize(
    ("module", "blocked", "extra", "package"),
    [
        ("langchain", ["langchain_core"], "langchain", "langchain-core"),
        ("llamaindex", ["llama_index", "llama_index.core"], "llamaindex", "llama-index-core"),
        ("haystack", ["haystack"], "haystack", "haystack-ai"),
    ],
)
def test_a_missing_framework_names_the_extra(
    module: str, blocked: list[str], extra: str, package: str
) -> None:
    code = PROBE.format(blocked=blocked, module=module)
    done = subprocess.run(
        [sys.executable, "-c", code], capture_output=True, text=True, timeout=120, check=False
    )
    assert done.returncode == 0, done.stderr
    message = done.stdout.strip()
    assert f"needs the '{package}' package" in message
    assert f"pip install 'groundwire[{extra}]'" in message
