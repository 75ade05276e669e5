"""One Java process per engine jar, shared by every session of an adapter (TextWorldExpress and
ScienceWorld ship their engines as jars driven over py4j).

The packages' own Python classes start one JVM per environment object (0.6-2.5 s and about
100 MB each) and hold one game in it; the adapters instead start one JVM, lazily, and give each
session its own `PythonInterface` object inside it. Every call into the JVM holds `lock`: the
engines keep static state (random generators, id counters), so calls from the server's threads
take turns, which also keeps every session's text independent of what the others do.
"""

from __future__ import annotations

import shutil
import threading
from typing import Any

from py4j.java_gateway import GatewayParameters, JavaGateway, launch_gateway

from .protocol import EnvError


def java_missing() -> str | None:
    """Why the engines cannot start here, or None when `java` is on the PATH."""
    if shutil.which("java") is None:
        return "no `java` on the PATH: TextWorldExpress and ScienceWorld need a Java 17 runtime (Debian: openjdk-17-jre-headless)"
    return None


class Jvm:
    """A lazily started JVM running one jar, with a lock that serialises calls into it."""

    def __init__(self, jar: str, cwd: str, options: tuple[str, ...] = ()):
        self.jar = jar
        self.cwd = cwd
        self.options = list(options)
        self.lock = threading.RLock()
        self._gateway: JavaGateway | None = None

    @property
    def jvm(self) -> Any:
        """The gateway's `jvm` view (starts the process on first use); call under `lock`."""
        if self._gateway is None:
            why = java_missing()
            if why:  # the same answer however often asked: 422, not a 500 that clients retry
                raise EnvError("server_setup", why)
            port, proc = launch_gateway(classpath=self.jar, die_on_exit=True, cwd=self.cwd, javaopts=self.options,
                                        return_proc=True)
            self._gateway = JavaGateway(gateway_parameters=GatewayParameters(port=port, auto_field=True), java_process=proc)
        return self._gateway.jvm

    def close(self) -> None:
        with self.lock:
            if self._gateway is not None:
                self._gateway.shutdown()
                self._gateway = None
