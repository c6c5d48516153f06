"""Run the fuzz suite (tests/fuzz) longer than CI does, and report examples and crashes.

Usage: python scripts/fuzz.py [--examples N]

``--examples`` sets the examples per target (CI runs 60). Prints, per target, the
examples run, and per test whether hypothesis found a crash (pytest prints the failing
example above the table). Exit status: 0 when no crash was found.
"""

from __future__ import annotations

import argparse
import json
import os
import subprocess
import sys
import tempfile
import xml.etree.ElementTree as ET
from pathlib import Path

ROOT = Path(__file__).resolve().parents[1]


def main() -> int:
    parser = argparse.ArgumentParser(description=__doc__.splitlines()[0])
    parser.add_argument("--examples", type=int, default=2_000, help="examples per target")
    parser.add_argument("pytest_args", nargs="*", help="extra pytest arguments")
    args = parser.parse_args()
    with tempfile.TemporaryDirectory() as folder:
        counts, junit = Path(folder) / "counts.json", Path(folder) / "junit.xml"
        env = {
            **os.environ,
            "GROUNDWIRE_FUZZ_EXAMPLES": str(args.examples),
            "GROUNDWIRE_FUZZ_REPORT": str(counts),
        }
        command = [sys.executable, "-m", "pytest", "-q", str(ROOT / "tests" / "fuzz")]
        command += ["-n", "0", "--timeout", "0", f"--junitxml={junit}", *args.pytest_args]
        done = subprocess.run(command, cwd=ROOT, env=env, check=False)
        runs = json.loads(counts.read_text()) if counts.exists() else {}
        cases = ET.parse(junit).getroot().iter("testcase") if junit.exists() else iter(())
        results = {
            f"{case.get('classname', '').rsplit('.', 1)[-1]}::{case.get('name')}": (
                "CRASH"
                if case.find("failure") is not None or case.find("error") is not None
                else "ok"
            )
            for case in cases
        }
    print(f"\nfuzz: {args.examples:,} examples per target requested")
    width = max((len(name) for name in runs), default=10)
    for name, count in runs.items():
        print(f"  {name:<{width}}  {count:>8,} examples run")
    print(f"  {'total':<{width}}  {sum(runs.values()):>8,}")
    crashes = [name for name, verdict in results.items() if verdict == "CRASH"]
    for name, verdict in results.items():
        print(f"  {verdict:<5} {name}")
    print(f"crashes found: {len(crashes)}")
    return 0 if done.returncode == 0 and not crashes else 1


if __name__ == "__main__":
    raise SystemExit(main())
