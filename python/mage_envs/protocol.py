"""The server side of mage's environment protocol `mage-env/1` (docs/env-protocol.md).

Plain standard library (`http.server.ThreadingHTTPServer`, `json`): the protocol is five JSON
endpoints, so a web framework would add a dependency and nothing else. An adapter supplies
`Environment` objects (what `/info` lists and `/create` builds) whose sessions implement
`Session`; this module does everything the protocol requires around them: request checking
against the environment's own declaration (config fields, seeds, opponents, seats: 400 errors
with the valid choices), session ids, sequence numbers that make retries safe (the last reply is
stored and answered again for a repeated `seq`), idle expiry, and the error objects.
"""

from __future__ import annotations

import hashlib
import json
import re
import threading
import time
from abc import ABC, abstractmethod
from dataclasses import dataclass, field
from http.server import BaseHTTPRequestHandler, ThreadingHTTPServer
from typing import Any

PROTOCOL_VERSION = "mage-env/1"
U32_MAX = 0xFFFFFFFF

Json = dict[str, Any]


class EnvError(Exception):
    """An error reply: `kind` and HTTP status as the protocol's table says."""

    STATUS = {
        "unknown_env": 400,
        "bad_config": 400,
        "bad_seed": 400,
        "bad_opponent": 400,
        "bad_seat": 400,
        "bad_request": 400,
        "unknown_session": 404,
        "not_found": 404,
        "out_of_order": 409,
        "game_over": 409,
        "internal": 500,
    }

    def __init__(self, kind: str, message: str, choices: list[str] | None = None, field: str | None = None):
        super().__init__(message)
        self.kind = kind
        self.message = message
        self.choices = choices
        self.field = field

    @property
    def status(self) -> int:
        return self.STATUS.get(self.kind, 500)

    def body(self) -> Json:
        err: Json = {"kind": self.kind, "message": self.message}
        if self.choices is not None:
            err["choices"] = self.choices
        if self.field is not None:
            err["field"] = self.field
        return {"error": err}


# ------------------------------------------------------------------------------------------------
# parsing answers as mage does (src/core/tags.ts)


def answer_text(response: str) -> str | None:
    """The text after the last `</think>`; None when a `<think>` is left open after it."""
    lower = response.lower()
    close = lower.rfind("</think>")
    after = response if close < 0 else response[close + len("</think>") :]
    if "<think>" in after.lower():
        return None
    return after


def first_tag_content(text: str, name: str) -> str | None:
    """Trimmed content of the first complete `<name>…</name>` (the nearest opener before the first closer)."""
    lower = text.lower()
    opener, closer = f"<{name}>", f"</{name}>"
    opens = [m.start() for m in re.finditer(re.escape(opener), lower)]
    if not opens:
        return None
    for c in (m.start() for m in re.finditer(re.escape(closer), lower)):
        before = [o for o in opens if o + len(opener) <= c]
        if before:
            return text[before[-1] + len(opener) : c].strip()
    return None


def action_content(response: str) -> tuple[str | None, str]:
    """(content of the answer's first <action> tag, reason when there is none)."""
    answer = answer_text(response)
    if answer is None:
        return None, "the response ends inside <think> (no </think>), so it has no answer"
    content = first_tag_content(answer, "action")
    if content is None:
        return None, "no complete <action>…</action> after the reasoning"
    if content == "":
        return None, "the <action> tag is empty"
    return content, ""


def invalid_step(observation: str, compact: str, reason: str, content: str | None, legal: list[str], forfeit: Json | None) -> Json:
    """The /step reply to an answer that is not a legal action: nothing is played, the agent moves again."""
    return {
        "observation": observation,
        "compactObservation": compact,
        "reward": 0.0,
        "done": False,
        "won": False,
        "valid": False,
        "invalidReason": reason,
        "action": content or "",
        "feedback": f"Invalid: {reason}",
        "legalActions": legal,
        "toMove": "agent",
        "forfeit": forfeit,
    }


def normalise(name: str) -> str:
    """Case- and whitespace-insensitive key for matching an answer against action names."""
    return re.sub(r"\s+", "", name).lower()


def fingerprint(*parts: str) -> str:
    h = hashlib.sha256()
    for p in parts:
        h.update(p.encode())
        h.update(b"\0")
    return h.hexdigest()[:24]


# ------------------------------------------------------------------------------------------------
# what adapters implement


class Session(ABC):
    """One task instance (one deal, one opponent, one seat), played over any number of attempts."""

    @abstractmethod
    def prompt(self) -> Json:
        """The prompt pieces: rules, playInstruction, compactRules, compactAsk, actionWord."""

    @abstractmethod
    def state(self) -> Json:
        """The state reply: fingerprint, observation, legalActions, toMove, done, forfeit, …"""

    @abstractmethod
    def step(self, response: str) -> Json:
        """Applies the agent's raw response (and the opponent's replies); the step reply."""

    @abstractmethod
    def restart(self) -> None:
        """Back to the identical initial state."""

    @property
    @abstractmethod
    def done(self) -> bool: ...


@dataclass
class CreateArgs:
    config: Json
    seed: int
    opponent_seed: int
    opponent: str | None
    seat: str | None


class Environment(ABC):
    """One served environment: its /info description and a session factory."""

    name: str

    @abstractmethod
    def describe(self) -> Json:
        """This environment's entry in /info (name, description, twoPlayer, seats, opponents, …)."""

    @abstractmethod
    def create(self, args: CreateArgs) -> Session:
        """A new session; raise EnvError for what the generic checks cannot judge."""

    def opponent_ok(self, spec: str) -> bool:
        """Whether a concrete spec is served (default: matches an exact spec or a `name:<n>` pattern
        with a positive integer argument)."""
        for o in self.describe()["opponents"]:
            pattern: str = o["spec"]
            if pattern == spec:
                return True
            m = re.fullmatch(r"([^:]+):<[^>]+>", pattern)
            if m and re.fullmatch(rf"{re.escape(m.group(1))}:[1-9][0-9]*", spec):
                return True
        return False


def check_create(env: Environment, body: Json) -> CreateArgs:
    """Checks a /create body against the environment's declaration; EnvError with choices otherwise."""
    desc = env.describe()
    config = body.get("config", {})
    if config is None:
        config = {}
    if not isinstance(config, dict):
        raise EnvError("bad_request", "config must be an object", field="config")
    fields: dict[str, Json] = desc.get("config", {})
    resolved: Json = {}
    for key in config:
        if key not in fields:
            raise EnvError(
                "bad_config",
                f'unknown config field "{key}" for {env.name}; valid fields: {", ".join(fields) or "(none)"}',
                choices=list(fields),
                field=f"config.{key}",
            )
    for key, spec in fields.items():
        value = config.get(key, spec.get("default"))
        kind = spec["type"]
        ok = (
            (kind == "integer" and isinstance(value, int) and not isinstance(value, bool))
            or (kind == "number" and isinstance(value, (int, float)) and not isinstance(value, bool))
            or (kind == "boolean" and isinstance(value, bool))
            or (kind == "string" and isinstance(value, str))
        )
        if not ok:
            raise EnvError("bad_config", f"{key} must be of type {kind}, got {json.dumps(value)}", field=f"config.{key}")
        if "choices" in spec and value not in spec["choices"]:
            raise EnvError(
                "bad_config",
                f"{key} must be one of {', '.join(map(str, spec['choices']))}, got {json.dumps(value)}",
                choices=[str(c) for c in spec["choices"]],
                field=f"config.{key}",
            )
        lo, hi = spec.get("min"), spec.get("max")
        if (lo is not None and value < lo) or (hi is not None and value > hi):
            raise EnvError("bad_config", f"{key} must be in [{lo}, {hi}], got {value}", field=f"config.{key}")
        resolved[key] = value
    seeds = desc["seeds"]
    seed = body.get("seed")
    if not isinstance(seed, int) or isinstance(seed, bool) or not seeds["min"] <= seed <= seeds["max"]:
        raise EnvError(
            "bad_seed", f"seed must be an integer in [{seeds['min']}, {seeds['max']}], got {json.dumps(seed)}", field="seed"
        )
    opponent_seed = body.get("opponentSeed", None)
    if opponent_seed is None:
        opponent_seed = int(fingerprint("opponent", str(seed)), 16) % (U32_MAX + 1)
    if not isinstance(opponent_seed, int) or isinstance(opponent_seed, bool) or not 0 <= opponent_seed <= U32_MAX:
        raise EnvError("bad_seed", f"opponentSeed must be an integer in [0, {U32_MAX}]", field="opponentSeed")
    opponent: str | None = None
    seat: str | None = None
    if desc["twoPlayer"]:
        opponent = body.get("opponent", desc["defaultOpponent"])
        specs = [o["spec"] for o in desc["opponents"]]
        if not isinstance(opponent, str) or not env.opponent_ok(opponent):
            raise EnvError(
                "bad_opponent",
                f"opponent {json.dumps(opponent)} is not served for {env.name}; valid choices: {', '.join(specs)}",
                choices=specs,
                field="opponent",
            )
        seat = body.get("seat", "first")
        if seat not in desc["seats"]:
            raise EnvError(
                "bad_seat", f'seat must be one of {", ".join(desc["seats"])}, got {json.dumps(seat)}',
                choices=list(desc["seats"]), field="seat",
            )
    else:
        for key, kind in (("opponent", "bad_opponent"), ("seat", "bad_seat")):
            if body.get(key) is not None:
                raise EnvError(kind, f"{env.name} is single-player and takes no {key}", field=key)
    return CreateArgs(config=resolved, seed=seed, opponent_seed=opponent_seed, opponent=opponent, seat=seat)


# ------------------------------------------------------------------------------------------------
# the server


@dataclass
class _Live:
    session: Session
    lock: threading.Lock = field(default_factory=threading.Lock)
    last_seq: int = 0
    last_reply: Json | None = None
    touched: float = field(default_factory=time.monotonic)


class EnvServer(ThreadingHTTPServer):
    daemon_threads = True

    def __init__(self, address: tuple[str, int], envs: list[Environment], name: str, ttl_seconds: float = 600):
        self.envs = {e.name: e for e in envs}
        self.mage_server_name = name
        self.ttl = ttl_seconds
        self.sessions: dict[str, _Live] = {}
        self.sessions_lock = threading.Lock()
        self.counter = 0
        super().__init__(address, _Handler)

    # --- endpoints (called from handler threads) ---

    def info(self) -> Json:
        return {
            "protocol": PROTOCOL_VERSION,
            "server": self.mage_server_name,
            "sessionTtlSeconds": self.ttl,
            "environments": [e.describe() for e in self.envs.values()],
        }

    def create(self, body: Json) -> Json:
        name = body.get("env")
        if not isinstance(name, str) or name not in self.envs:
            raise EnvError(
                "unknown_env", f"unknown environment {json.dumps(name)}", choices=sorted(self.envs), field="env"
            )
        env = self.envs[name]
        session = env.create(check_create(env, body))
        self._expire()
        with self.sessions_lock:
            self.counter += 1
            sid = f"s-{self.counter}"
            self.sessions[sid] = _Live(session)
        return {"session": sid, "prompt": session.prompt(), **session.state()}

    def _live(self, body: Json) -> tuple[str, _Live]:
        sid = body.get("session")
        if not isinstance(sid, str):
            raise EnvError("bad_request", "session must be a string", field="session")
        self._expire()
        with self.sessions_lock:
            live = self.sessions.get(sid)
        if live is None:
            raise EnvError("unknown_session", f'no session "{sid}" (closed, expired or never created)')
        live.touched = time.monotonic()
        return sid, live

    def sequenced(self, body: Json, apply: str) -> Json:
        sid, live = self._live(body)
        seq = body.get("seq")
        if not isinstance(seq, int) or isinstance(seq, bool):
            raise EnvError("bad_request", "seq must be an integer", field="seq")
        with live.lock:
            if seq == live.last_seq and live.last_reply is not None:
                return live.last_reply
            if seq != live.last_seq + 1:
                raise EnvError("out_of_order", f"seq {seq} on session {sid}: the last applied was {live.last_seq}")
            if apply == "step":
                action = body.get("action")
                if not isinstance(action, str):
                    raise EnvError("bad_request", "action must be a string (the agent's raw response)", field="action")
                if live.session.done:
                    raise EnvError("game_over", f"session {sid}: the attempt is over; /restart it first")
                reply = live.session.step(action)
            else:
                live.session.restart()
                reply = live.session.state()
            live.last_seq = seq
            live.last_reply = reply
            return reply

    def close_session(self, body: Json) -> Json:
        sid, _ = self._live(body)
        with self.sessions_lock:
            self.sessions.pop(sid, None)
        return {"closed": True}

    def _expire(self) -> None:
        now = time.monotonic()
        with self.sessions_lock:
            for sid in [s for s, live in self.sessions.items() if now - live.touched > self.ttl]:
                del self.sessions[sid]


class _Handler(BaseHTTPRequestHandler):
    server: EnvServer
    protocol_version = "HTTP/1.1"

    def log_message(self, format: str, *args: Any) -> None:  # quiet
        return

    def _send(self, status: int, body: Json) -> None:
        data = json.dumps(body).encode()
        self.send_response(status)
        self.send_header("Content-Type", "application/json")
        self.send_header("Content-Length", str(len(data)))
        self.end_headers()
        self.wfile.write(data)

    def _dispatch(self, method: str) -> None:
        try:
            body: Json = {}
            if method == "POST":
                length = int(self.headers.get("Content-Length") or 0)
                raw = self.rfile.read(length) if length else b""
                try:
                    parsed = json.loads(raw or b"{}")
                except ValueError as e:
                    raise EnvError("bad_request", f"the body is not JSON: {e}") from e
                if not isinstance(parsed, dict):
                    raise EnvError("bad_request", "the body must be a JSON object")
                body = parsed
            route = (method, self.path.split("?")[0])
            if route == ("GET", "/info"):
                reply = self.server.info()
            elif route == ("POST", "/create"):
                reply = self.server.create(body)
            elif route == ("POST", "/step"):
                reply = self.server.sequenced(body, "step")
            elif route == ("POST", "/restart"):
                reply = self.server.sequenced(body, "restart")
            elif route == ("POST", "/close"):
                reply = self.server.close_session(body)
            else:
                raise EnvError("not_found", f"no endpoint {method} {self.path}")
            self._send(200, reply)
        except EnvError as e:
            self._send(e.status, e.body())
        except Exception as e:  # an adapter bug: a 500 the client may retry
            self._send(500, EnvError("internal", f"{type(e).__name__}: {e}").body())

    def do_GET(self) -> None:
        self._dispatch("GET")

    def do_POST(self) -> None:
        self._dispatch("POST")


def serve(envs: list[Environment], name: str, host: str, port: int, ttl_seconds: float = 600) -> None:
    """Serves until interrupted; prints the address it listens on (port 0 picks a free one)."""
    server = EnvServer((host, port), envs, name, ttl_seconds)
    print(f"{name} listening on http://{host}:{server.server_address[1]}", flush=True)
    try:
        server.serve_forever()
    except KeyboardInterrupt:
        pass
    finally:
        server.server_close()
