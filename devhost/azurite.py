"""``--with-azurite``: start the pinned Azurite from node_modules unless one already listens."""

from __future__ import annotations

import logging
import socket
import subprocess
import time
from pathlib import Path

log = logging.getLogger("devhost.azurite")

BLOB_PORT, QUEUE_PORT, TABLE_PORT = 10000, 10001, 10002


def _listening(port: int, host: str = "127.0.0.1") -> bool:
    try:
        with socket.create_connection((host, port), timeout=0.3):
            return True
    except OSError:
        return False


class AzuriteProcess:
    def __init__(self, root: Path) -> None:
        self.root = root
        self.proc: subprocess.Popen[bytes] | None = None

    def start(self, timeout: float = 30.0) -> None:
        if _listening(BLOB_PORT):
            log.info("Azurite already listens on %d; using it", BLOB_PORT)
            return
        binary = self.root / "node_modules" / ".bin" / "azurite"
        if not binary.exists():
            raise RuntimeError(f"{binary} not found: run `npm install` (make deps) first")
        data = self.root / ".weft" / "azurite"
        data.mkdir(parents=True, exist_ok=True)
        self.proc = subprocess.Popen(
            [
                str(binary),
                "--silent",
                "--skipApiVersionCheck",
                "--disableTelemetry",
                "--location",
                str(data),
                "--blobHost",
                "127.0.0.1",
                "--queueHost",
                "127.0.0.1",
                "--tableHost",
                "127.0.0.1",
            ],
            stdout=subprocess.DEVNULL,
            stderr=subprocess.DEVNULL,
        )
        deadline = time.monotonic() + timeout
        while not _listening(BLOB_PORT):
            if self.proc.poll() is not None:
                raise RuntimeError(f"Azurite exited with code {self.proc.returncode}")
            if time.monotonic() > deadline:
                self.stop()
                raise RuntimeError(f"Azurite did not start listening within {timeout}s")
            time.sleep(0.1)
        log.info("started Azurite (pid %d), data in %s", self.proc.pid, data)

    def stop(self) -> None:
        if self.proc is None:
            return
        self.proc.terminate()
        try:
            self.proc.wait(timeout=10)
        except subprocess.TimeoutExpired:
            self.proc.kill()
            self.proc.wait()
        self.proc = None
