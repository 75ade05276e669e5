"""Atomic replacement of a finished folder."""

from __future__ import annotations

import os
import shutil
from pathlib import Path


def replace_dir(tmp: Path, target: Path) -> None:
    """Puts the finished `tmp` at `target`, replacing what was there.

    The old folder is moved aside before the new one takes its place, so a reader sees either the
    old folder or the new one, never a mix; the old one is deleted last.
    """
    if target.exists():
        old = target.with_name(f"{target.name}.old-{os.getpid()}")
        os.replace(target, old)
        os.replace(tmp, target)
        shutil.rmtree(old, ignore_errors=True)
    else:
        os.replace(tmp, target)
