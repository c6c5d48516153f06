"""Hatchling build hook: compile the optional C kernels when a C compiler is available.

``src/groundwire/index/_kernel.c`` (BM25 queries), ``_dense.c`` (exact dense search),
``_merge.c`` (the linear passes of index updates), ``_fusion.c`` (channel fusion) and
``_bulk.c`` (the sort-free passes of a bulk build) become plain shared libraries (no
Python headers, so one build serves every Python version) that
``groundwire.index._kernel``, ``._dense``, ``._merge``, ``._fusion`` and ``._bulk`` load
through ctypes. Without them groundwire uses its numpy paths (identical BM25 results and
fused scores; dense scores equal to float32 rounding).

* Regular wheel: the library is compiled into a temporary folder, force-included as
  ``groundwire/index/_gwkernel.<so|dylib|dll>`` and the wheel is tagged platform-specific.
* Editable install (``pip install -e .``): the library is compiled next to ``_kernel.c``
  in ``src/`` (git-ignored), where the editable package finds it.
* No compiler, a failed compilation or ``GROUNDWIRE_NO_KERNEL=1``: a warning, and a
  pure-Python build (an editable build also removes a library left by an earlier build).

The compiler is ``$CC``, else Python's own (``sysconfig`` ``CC``), else ``cc``; flags are
generic (no ``-march``) so a wheel runs on any machine of its architecture. Extra flags
can be passed in ``GROUNDWIRE_KERNEL_CFLAGS`` (e.g. ``-march=native`` for a local build).
"""

from __future__ import annotations

import os
import secrets
import shlex
import shutil
import subprocess
import sys
import sysconfig
import tempfile
from pathlib import Path
from typing import Any

from hatchling.builders.hooks.plugin.interface import BuildHookInterface

SOURCE = Path("src", "groundwire", "index", "_kernel.c")
# Must match the NativeLibrary stem in src/groundwire/index/_kernel.py. Not named
# ``_kernel.<ext>``: an extension-module suffix next to ``_kernel.py`` would shadow the
# Python module on import.
LIBRARY = "_gwkernel" + (
    ".dll" if sys.platform == "win32" else ".dylib" if sys.platform == "darwin" else ".so"
)
DENSE_SOURCE = Path("src", "groundwire", "index", "_dense.c")
DENSE_LIBRARY = LIBRARY.replace("_gwkernel", "_gwdense")  # NativeLibrary stem in index/_dense.py
MERGE_SOURCE = Path("src", "groundwire", "index", "_merge.c")
MERGE_LIBRARY = LIBRARY.replace("_gwkernel", "_gwmerge")  # NativeLibrary stem in index/_merge.py
FUSION_SOURCE = Path("src", "groundwire", "index", "_fusion.c")
FUSION_LIBRARY = LIBRARY.replace("_gwkernel", "_gwfusion")  # NativeLibrary stem in index/_fusion.py
BULK_SOURCE = Path("src", "groundwire", "index", "_bulk.c")
BULK_LIBRARY = LIBRARY.replace("_gwkernel", "_gwbulk")  # NativeLibrary stem in index/_bulk.py
KERNELS = (
    (SOURCE, LIBRARY),
    (DENSE_SOURCE, DENSE_LIBRARY),
    (MERGE_SOURCE, MERGE_LIBRARY),
    (FUSION_SOURCE, FUSION_LIBRARY),
    (BULK_SOURCE, BULK_LIBRARY),
)
FLAGS = ["-std=c99", "-O3", "-fPIC", "-shared", "-Wall"]
_HINT = " Install a C compiler (or set CC) and reinstall to get it."


def compiler() -> list[str] | None:
    """The C compiler command (program and its own flags), or None when none is installed."""
    for candidate in (os.environ.get("CC"), sysconfig.get_config_var("CC"), "cc"):
        command = shlex.split(candidate) if candidate else []
        if command and shutil.which(command[0]):
            return command
    return None


def compile_kernel(source: Path, target: Path) -> str | None:
    """Compile ``source`` into the shared library ``target`` (atomically); an error or None."""
    cc = compiler()
    if cc is None:
        return "no C compiler found (tried $CC, sysconfig CC and cc)"
    extra = shlex.split(os.environ.get("GROUNDWIRE_KERNEL_CFLAGS", ""))
    target.parent.mkdir(parents=True, exist_ok=True)
    # A private name in the target folder, renamed over the target once complete, so a
    # process loading the previous library never sees a half-written file. Not created
    # beforehand: the linker would keep a private file's mode (0600).
    partial = str(target.with_name(f".gwkernel-{os.getpid()}-{secrets.token_hex(4)}.tmp"))
    command = [*cc, *FLAGS, *extra, "-o", partial, str(source)]
    try:
        done = subprocess.run(command, capture_output=True, text=True, check=False)
        if done.returncode != 0 or not os.path.isfile(partial):
            output = (done.stderr or done.stdout).strip()
            return f"`{shlex.join(command)}` failed (exit {done.returncode}):\n{output}"
        os.chmod(partial, 0o755)
        os.replace(partial, target)
    except OSError as exc:
        return f"`{shlex.join(command)}` could not run: {exc}"
    finally:
        if os.path.exists(partial):
            os.remove(partial)
    return None


class CustomBuildHook(BuildHookInterface):  # type: ignore[type-arg]
    """Compiles the kernels for wheels (included) and editable installs (in ``src/``)."""

    PLUGIN_NAME = "custom"

    def initialize(self, version: str, build_data: dict[str, Any]) -> None:
        """Compile the kernels and tell hatchling where they go; never fails the build."""
        if self.target_name != "wheel":
            return
        for source, library in KERNELS:
            self._kernel(version, build_data, source, library)

    def _kernel(self, version: str, build_data: dict[str, Any], source: Path, library: str) -> None:
        root = Path(self.root)
        in_tree = root / source.parent / library
        editable = version == "editable"
        if os.environ.get("GROUNDWIRE_NO_KERNEL") == "1":
            self._pure_python("GROUNDWIRE_NO_KERNEL=1 is set", in_tree if editable else None, "")
            return
        if editable:
            error = compile_kernel(root / source, in_tree)
            if error is not None:
                self._pure_python(error, in_tree, _HINT)
                return
            self.app.display_info(f"groundwire: compiled {source.name} into {in_tree}")
            return
        if getattr(self, "_scratch", None) is None:
            self._scratch = tempfile.mkdtemp(prefix="groundwire-kernel-")
        built = Path(self._scratch) / library
        error = compile_kernel(root / source, built)
        if error is not None:
            self._pure_python(error, None, _HINT)
            return
        build_data["force_include"][str(built)] = f"groundwire/index/{library}"
        build_data["pure_python"] = False
        build_data["infer_tag"] = True
        self.app.display_info(f"groundwire: compiled {source.name} into the wheel")

    def finalize(self, version: str, build_data: dict[str, Any], artifact_path: str) -> None:
        """Remove the temporary folder of a regular wheel's library."""
        scratch = getattr(self, "_scratch", None)
        if scratch is not None:
            shutil.rmtree(scratch, ignore_errors=True)

    def _pure_python(self, reason: str, stale: Path | None, hint: str) -> None:
        self.app.display_warning(
            f"groundwire: building without a C kernel ({reason}); queries use the numpy "
            f"path (same results, slower).{hint}"
        )
        if stale is not None and stale.exists():
            stale.unlink()  # an earlier build's library would otherwise still be loaded
