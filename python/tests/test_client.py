"""The test client's errors say why a worker went away."""

from __future__ import annotations

import sys

import pytest

from mage_learner.client import Client

# A stand-in worker: connects, says why it is leaving on stderr, and exits with status 3.
DYING_WORKER = """
import socket, sys
s = socket.socket(socket.AF_UNIX, socket.SOCK_STREAM)
s.connect(sys.argv[-1])
print("worker: out of memory in save", file=sys.stderr, flush=True)
sys.exit(3)
"""


def test_a_vanished_worker_is_reported_with_its_exit_status_and_last_output() -> None:
    c = Client([sys.executable, "-c", DYING_WORKER], timeout=30)
    try:
        with pytest.raises(EOFError) as err:
            c.call("hello", protocol=1)
        message = str(err.value)
        assert "exit status 3" in message
        assert "worker: out of memory in save" in message
    finally:
        c.close()
