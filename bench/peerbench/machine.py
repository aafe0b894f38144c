"""What the figures were measured on: the machine and the installed versions."""

from __future__ import annotations

import contextlib
import os
import platform
import subprocess

from .contestants import PEERS_PACKAGES


def machine_line() -> str:
    model = platform.processor() or "unknown CPU"
    try:
        for line in subprocess.run(["lscpu"], capture_output=True, text=True, check=True).stdout.splitlines():
            if line.startswith("Model name:"):
                model = line.split(":", 1)[1].strip()
    except (OSError, subprocess.CalledProcessError):
        pass
    return f"{os.cpu_count()} cores, {model}, Python {platform.python_version()}"


def versions() -> str:
    from importlib.metadata import PackageNotFoundError, version

    found = []
    for package in ["agent_fsm", *PEERS_PACKAGES]:
        with contextlib.suppress(PackageNotFoundError):
            found.append(f"{package} {version(package)}")
    return ", ".join(found)
