"""Run a sync and SIGKILL this very process once batch N is recorded but not committed.

Usage: crash_sync.py CONFIG N. Exits only by the kill (or 3 if the batch never came).
"""

from __future__ import annotations

import os
import signal
import sys

from groundwire import Syncer, load_sync_config


def main() -> None:
    config, kill_at = sys.argv[1], int(sys.argv[2])

    def progress(event: object) -> None:
        if getattr(event, "stage", "") == "recorded" and getattr(event, "batch", 0) == kill_at:
            os.kill(os.getpid(), signal.SIGKILL)

    with Syncer(load_sync_config(config)) as syncer:
        syncer.run_once(progress=progress)
    sys.exit(3)


if __name__ == "__main__":
    main()
