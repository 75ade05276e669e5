"""Runs a server command and ends its whole process group when the parent goes away.

mage starts the vLLM rollout server (``model.torch.rollout: vllm``) as::

    python server_guard.py -- python -m vllm.entrypoints.openai.api_server ...

in a new process group whose leader is this guard (Node's ``detached``). vLLM starts more
processes (its engine core and CPU worker) in the same group. mage stops the server by signalling
the group; this guard covers the case where mage cannot: when mage dies outright (kill -9, an
out-of-memory kill), its end of this guard's stdin closes, and the guard then sends SIGTERM to
the group, waits up to ``--grace`` seconds for the server, and SIGKILLs the group. When the server
exits by itself, the guard exits with the server's status (128 + N for a signal), after ending
whatever the server left in the group.

Standard library only, so that any interpreter runs it (the vLLM environment's, or the project's
in tests); run as a script file, not as a module of the mage_learner package.
"""

from __future__ import annotations

import os
import signal
import subprocess
import sys
import threading
import time


def _end_group(child: subprocess.Popen[bytes], grace: float) -> None:
    """SIGTERM to the group, up to ``grace`` s for the server, then SIGKILL.

    Runs in the watcher thread: the guard's own SIGTERM handler (main thread) only passes the
    signal on to the server, so the guard lives until the SIGKILL.
    """
    try:
        os.killpg(0, signal.SIGTERM)
    except OSError:
        pass
    deadline = time.monotonic() + grace
    while child.poll() is None and time.monotonic() < deadline:
        time.sleep(0.05)
    # Kills this guard too: nothing of the group survives.
    os.killpg(0, signal.SIGKILL)


def _watch_parent(child: subprocess.Popen[bytes], grace: float) -> None:
    # os.read, not sys.stdin: a daemon thread blocked in a buffered read aborts the interpreter's exit.
    try:
        while os.read(0, 65536):
            pass
    except OSError:
        pass
    try:
        print("server_guard: mage went away; stopping the server", file=sys.stderr, flush=True)
    except (OSError, ValueError):
        pass  # mage's end of the pipe is gone with it
    _end_group(child, grace)


def main(argv: list[str]) -> int:
    grace = 10.0
    if "--" not in argv:
        print("usage: server_guard.py [--grace S] -- COMMAND [ARGS...]", file=sys.stderr)
        return 2
    split = argv.index("--")
    opts, cmd = argv[:split], argv[split + 1 :]
    if len(opts) == 2 and opts[0] == "--grace":
        grace = float(opts[1])
    if not cmd:
        print("server_guard: no command", file=sys.stderr)
        return 2
    child = subprocess.Popen(cmd, stdin=subprocess.DEVNULL)

    def forward(signum: int, _frame: object) -> None:
        # mage signals the whole group; a signal to the guard alone is passed on to the server.
        try:
            child.send_signal(signum)
        except OSError:
            pass

    signal.signal(signal.SIGTERM, forward)
    signal.signal(signal.SIGINT, forward)
    threading.Thread(target=_watch_parent, args=(child, grace), daemon=True).start()
    code = child.wait()
    # The server is gone; end what it left behind in the group (its engine processes).
    _kill_rest_of_group()
    return 128 - code if code < 0 else code


def _kill_rest_of_group() -> None:
    """SIGKILL every other process of this guard's group (Linux: read from /proc)."""
    me, group = os.getpid(), os.getpgid(0)
    try:
        pids = [int(p) for p in os.listdir("/proc") if p.isdigit()]
    except OSError:
        return
    for pid in pids:
        if pid == me:
            continue
        try:
            if os.getpgid(pid) == group:
                os.kill(pid, signal.SIGKILL)
        except OSError:
            pass


if __name__ == "__main__":
    status = main(sys.argv[1:])
    sys.stdout.flush()
    sys.stderr.flush()
    # No interpreter shutdown: the watcher thread may still be blocked reading stdin.
    os._exit(status)
