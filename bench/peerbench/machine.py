"""What the figures were measured on: the machine and the installed versions."""

from __future__ import annotations

import contextlib
import os
import platform
import subprocess

from .contestants import PEERS_PACKAGES


def cpu_model() -> str:
    """The CPU's model name: from ``/proc/cpuinfo`` on Linux, else ``lscpu``, else what ``platform`` says."""
    with contextlib.suppress(OSError), open("/proc/cpuinfo", encoding="utf-8") as cpuinfo:
        for line in cpuinfo:
            if line.startswith("model name"):
                return line.split(":", 1)[1].strip()
    with contextlib.suppress(OSError, subprocess.CalledProcessError):
        for line in subprocess.run(["lscpu"], capture_output=True, text=True, check=True).stdout.splitlines():
            if line.startswith("Model name:"):
                return line.split(":", 1)[1].strip()
    return platform.processor() or "unknown CPU"


def machine_line() -> str:
    return f"{os.cpu_count()} cores, {cpu_model()}, Python {platform.python_version()}"


def installed(packages: list[str]) -> list[str]:
    """``"name version"`` for each of ``packages`` that is installed."""
    from importlib.metadata import PackageNotFoundError, version

    found = []
    for package in packages:
        with contextlib.suppress(PackageNotFoundError):
            found.append(f"{package} {version(package)}")
    return found


def versions() -> str:
    return ", ".join(installed(["agent_fsm", *PEERS_PACKAGES]))
