"""The server side of mage's environment protocol `mage-env/1` (docs/env-protocol.md), without
its transport (`mage_envs/server.py` serves it over HTTP).

An adapter supplies `Environment` objects (what `/info` lists and `/create` builds) whose sessions
implement `Session`; this module does everything the protocol requires around them: request
checking against the environment's own declaration (config fields, seeds, opponents, seats: 400
errors with the valid choices), session ids, sequence numbers that make retries safe (the last
reply is stored and answered again for a repeated `seq`), the session cap and idle expiry, the
time budget of engine calls (run on worker threads), and the error objects.
"""

from __future__ import annotations

import asyncio
import hashlib
import json
import re
import sys
from abc import ABC, abstractmethod
from collections import OrderedDict
from collections.abc import Callable
from dataclasses import dataclass
from typing import Any, TypeVar

from mage_envs.engine_pool import Call, CallAbandoned, CallTimeout, EnginePool
from mage_envs.session_table import SessionTable

PROTOCOL_VERSION = "mage-env/1"
# Ids of sessions lost with their engine (`Session.gone`) remembered to answer 410 with why.
GONE_KEPT = 10_000
U32_MAX = 0xFFFFFFFF

Json = dict[str, Any]
R = TypeVar("R")


class EnvError(Exception):
    """An error reply: `kind` and HTTP status as the protocol's table says."""

    STATUS = {
        "unknown_env": 400,
        "bad_config": 400,
        "bad_seed": 400,
        "bad_opponent": 400,
        "bad_seat": 400,
        "bad_request": 400,
        "no_expert": 400,
        # The server cannot build what was asked as it is set up (a planner that does not load, a
        # data folder whose games ALFWorld's filters all drop, an unwritable cache): asking again
        # gets the same answer, so not a 5xx that clients retry; the message says what to fix.
        "server_setup": 422,
        "unknown_session": 404,
        "not_found": 404,
        "out_of_order": 409,
        "game_over": 409,
        "unauthorized": 401,
        "too_many_sessions": 503,
        "engine_timeout": 503,
        "shutting_down": 503,
        "internal": 500,
    }

    def __init__(
        self,
        kind: str,
        message: str,
        choices: list[str] | None = None,
        field: str | None = None,
        retry_after: int | None = None,
        status: int | None = None,
    ):
        super().__init__(message)
        self.kind = kind
        self.message = message
        self.choices = choices
        self.field = field
        self.retry_after = retry_after
        self._status = status

    @property
    def status(self) -> int:
        return self._status or self.STATUS.get(self.kind, 500)

    def headers(self) -> dict[str, str]:
        return {} if self.retry_after is None else {"Retry-After": str(self.retry_after)}

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


def applied_step(
    observation: str, reward: float, done: bool, won: bool, score: float, action: str, info: Json,
    compact: str | None = None, legal: list[str] | None = None, outcome: tuple[str, str] | None = None,
) -> Json:
    """The /step reply to a single-player action that was played (the text adapters'): `compact`
    and `legal` only where the environment has them, `outcome` (prose, compact) once it is over."""
    reply: Json = {"observation": observation}
    if compact is not None:
        reply["compactObservation"] = compact
    reply.update(reward=reward, done=done, won=won, draw=False, score=score, valid=True, action=action, feedback="")
    if legal is not None:
        reply["legalActions"] = legal
    reply.update(toMove=None if done else "agent", forfeit=None, info=info)
    if done and outcome is not None:
        reply["outcome"], reply["compactOutcome"] = outcome
    return reply


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

    #: The number of distinct instances the create's config offers, when they are finitely many and
    #: seeds `min`..`min + instances - 1` of the environment's range play each once (ALFWorld: the
    #: games kept, seed mod their number): the create reply's `instances`. None: not declared.
    instances: int | None = None

    @property
    def gone(self) -> str | None:
        """Why the session can never answer again (its engine's worker process died), else None:
        the server then drops it and answers 410 `unknown_session` with this message."""
        return None

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

    def close(self) -> None:
        """Frees what the session holds. The server calls it once, when it drops the session (`/close`,
        idle expiry, a `/create` whose reply came too late) and no engine call on it still runs;
        the session is never used again. Default: nothing (the garbage collector frees the rest)."""

    def expert(self, memory: list[str]) -> Json:
        """The environment's expert at the current state (`POST /expert`), read-only:
        `{"action": str | None, "facts": list[str]}`. `action` is the next action as the agent would
        write it inside <action>…</action> (None when the attempt is over or the expert has nothing
        to suggest); `facts` are short sentences on what this attempt has observed so far that are
        worth remembering in a later attempt; `memory` holds facts of earlier attempts, which the
        expert may use. Optionally `"avoid": list[str]`: legal actions the expert judges a waste here
        (re-opening an open door, walking back into a room already searched), which a warm start may
        push down. An environment with an expert overrides this and declares `"expert": true`
        in its /info entry; the default answers `no_expert`."""
        raise EnvError("no_expert", "this environment has no expert (its /info entry does not declare \"expert\": true)")


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
    #: Sessions this environment lost so far without the server closing them (`Session.gone`): when
    #: it grows the server drops them from its table, so that they free their places at once.
    lost: int = 0

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
# the protocol's endpoints, without a transport (mage_envs/server.py serves them over HTTP)


@dataclass(frozen=True)
class ServiceLimits:
    """What one server allows: the same knobs, defaults and meanings as `mage env-serve`'s."""

    ttl_seconds: float = 600
    # A big run's evaluation holds 16,000 sessions at once (kuhn-mage: 8 cells x 2,000 trials).
    max_sessions: int = 20_000
    time_budget_ms: int = 5000
    # Blocking engines (a JVM, a PDDL reload) mostly wait outside the GIL, so more threads than
    # cores keep them busy; a stalled call holds one thread until it returns.
    engine_threads: int = 8


@dataclass
class _Live:
    session: Session
    env: str
    last_seq: int = 0
    last_reply: Json | None = None
    # The /step or /restart being applied: its seq and the engine call (kept past a timeout).
    pending: tuple[int, Call[Json]] | None = None
    touched: float = 0.0
    # Engine calls on the session in flight (/step, /restart, /expert): it is closed after the last.
    calls: int = 0
    dropped: bool = False
    closed: bool = False

    @property
    def busy(self) -> bool:
        return self.pending is not None


def _built(env: Environment, args: CreateArgs) -> tuple[Session, Json]:
    session = env.create(args)
    reply = {"prompt": session.prompt(), **session.state()}
    if session.instances is not None:
        reply["instances"] = session.instances
    return session, reply


def _restarted(session: Session) -> Json:
    session.restart()
    return session.state()


def _close_quietly(session: Session) -> None:
    """`Session.close`; an adapter's failure there is logged, not answered (the session is gone)."""
    try:
        session.close()
    except Exception as e:  # noqa: BLE001 - an adapter bug must not break the request that dropped it
        print(f"mage_envs: closing a session failed: {type(e).__name__}: {e}", file=sys.stderr, flush=True)


def check_memory(body: Json) -> list[str]:
    """The `memory` of an /expert request: a list of strings (default empty)."""
    memory = body.get("memory", [])
    if memory is None:
        return []
    if not isinstance(memory, list) or not all(isinstance(m, str) for m in memory):
        raise EnvError("bad_request", "memory must be a list of strings", field="memory")
    return memory


def expert_reply(reply: Json) -> Json:
    """An adapter's expert answer checked against the protocol (an adapter bug is an internal error)."""
    action = reply.get("action")
    facts = reply.get("facts", [])
    if action is not None and not isinstance(action, str):
        raise EnvError("internal", f"the expert's action must be a string or null, got {json.dumps(action)[:80]}")
    if not isinstance(facts, list) or not all(isinstance(f, str) for f in facts):
        raise EnvError("internal", "the expert's facts must be a list of strings")
    if "avoid" not in reply:
        return {"action": action, "facts": facts}
    avoid = reply["avoid"]
    if not isinstance(avoid, list) or not all(isinstance(a, str) for a in avoid):
        raise EnvError("internal", "the expert's avoid must be a list of strings")
    return {"action": action, "facts": facts, "avoid": avoid}


class EnvService:
    """The endpoints of `mage-env/1` over a set of environments: request checks, the session table
    (cap, idle expiry), sequence numbers, and the time budget of the engine calls, which run on
    `EnginePool` threads. Every method runs on the server's event loop; only engine calls leave it."""

    def __init__(self, envs: list[Environment], name: str, limits: ServiceLimits = ServiceLimits()):
        self.envs = {e.name: e for e in envs}
        self.limits = limits
        self.table: SessionTable[_Live] = SessionTable(limits.max_sessions, limits.ttl_seconds, on_drop=self._dropped)
        self.engine = EnginePool(limits.engine_threads, limits.time_budget_ms / 1000)
        self._counter = 0
        # Sessions dropped because they were gone (`Session.gone`): their ids answer 410 with why.
        self._gone: OrderedDict[str, str] = OrderedDict()
        self._lost_seen = 0
        self._info = {
            "protocol": PROTOCOL_VERSION,
            "server": name,
            "sessionTtlSeconds": limits.ttl_seconds,
            "environments": [e.describe() for e in envs],
        }

    def info(self) -> Json:
        return self._info

    async def create(self, body: Json) -> Json:
        name = body.get("env")
        if not isinstance(name, str):
            raise EnvError("bad_request", "env must be a string", field="env")
        if name not in self.envs:
            raise EnvError(
                "unknown_env", f"unknown environment {json.dumps(name)}", choices=sorted(self.envs), field="env"
            )
        env = self.envs[name]
        args = check_create(env, body)
        self._drop_gone()
        if not self.table.reserve():
            wait = self.table.retry_after_seconds()
            raise EnvError(
                "too_many_sessions",
                f"the server holds its maximum of {self.limits.max_sessions} live sessions; close finished ones "
                f"(idle ones expire after {self.limits.ttl_seconds:g} s), retry in {wait} s",
                retry_after=wait,
            )
        call = self.engine.submit(lambda: _built(env, args))
        try:
            session, reply = await self._engine(call, "/create")
        except BaseException:
            if call.done:
                self.table.release()
            else:  # still building: its place is freed, and the late session closed, when it returns

                def late(f: asyncio.Future[tuple[Session, Json]]) -> None:
                    self.table.release()
                    if not f.cancelled() and f.exception() is None:
                        _close_quietly(f.result()[0])

                call.result.add_done_callback(late)
            raise
        self._counter += 1
        sid = f"s-{self._counter}"
        self.table.add(sid, _Live(session, name))
        return {"session": sid, **reply}

    async def step(self, body: Json) -> Json:
        sid, live = self._live(body)
        action = body.get("action")
        if not isinstance(action, str):
            raise EnvError("bad_request", "action must be a string (the agent's raw response)", field="action")
        return await self._sequenced(sid, live, body, lambda: live.session.step(action), check_over=True)

    async def restart(self, body: Json) -> Json:
        sid, live = self._live(body)
        return await self._sequenced(sid, live, body, lambda: _restarted(live.session), check_over=False)

    async def expert(self, body: Json) -> Json:
        """`POST /expert`: the expert's action and the attempt's facts, read-only (no `seq` is used
        and the state is not changed). It runs on an engine thread once any /step or /restart still
        being applied to the session is done, within the same time budget."""
        sid, live = self._live(body)
        memory = check_memory(body)
        if not self.envs[live.env].describe().get("expert", False):
            raise EnvError("no_expert", f"environment {live.env} has no expert (its /info entry does not declare one)")
        if live.pending is not None:
            await self._settled(live.pending[1])
        reply = await self._engine(self._on_session(live, lambda: live.session.expert(memory)), "/expert")
        return expert_reply(reply)

    async def _settled(self, call: Call[Json]) -> None:
        """Waits (within the budget) for a call another request started; its own errors are that request's."""
        try:
            await self._engine(call, "/step")
        except EnvError as e:
            if e.kind in ("engine_timeout", "shutting_down"):
                raise
        except Exception:
            pass

    def close(self, body: Json) -> Json:
        sid, _ = self._live(body)
        self.table.delete(sid)
        return {"closed": True}

    def sweep(self) -> int:
        self._drop_gone()
        return self.table.sweep()

    def _drop_gone(self) -> None:
        """Once an environment has lost sessions (a worker process died), drops them from the table."""
        lost = sum(e.lost for e in self.envs.values())
        if lost == self._lost_seen:
            return
        self._lost_seen = lost
        for sid, why in [(sid, live.session.gone) for sid, live in self.table.items()]:
            if why is not None:
                self._forget(sid, why)

    def _forget(self, sid: str, why: str) -> None:
        self.table.delete(sid)
        self._gone[sid] = why
        while len(self._gone) > GONE_KEPT:
            self._gone.popitem(last=False)

    def _on_session(self, live: _Live, fn: Callable[[], R]) -> Call[R]:
        """An engine call on a live session, counted so that the session is closed only after it."""
        call = self.engine.submit(fn)
        live.calls += 1

        def ended(_: asyncio.Future[R]) -> None:
            live.calls -= 1
            if live.dropped and live.calls == 0:
                self._close(live)

        call.result.add_done_callback(ended)
        return call

    def _dropped(self, live: _Live) -> None:
        """The table dropped the session (closed or expired): it is closed now or after its last call."""
        live.dropped = True
        if live.calls == 0:
            self._close(live)

    @staticmethod
    def _close(live: _Live) -> None:
        if not live.closed:
            live.closed = True
            _close_quietly(live.session)

    def _live(self, body: Json) -> tuple[str, _Live]:
        sid = body.get("session")
        if not isinstance(sid, str):
            raise EnvError("bad_request", "session must be a string", field="session")
        live = self.table.use(sid)
        why = self._gone.get(sid) if live is None else live.session.gone
        if why is not None:
            if live is not None:
                self._forget(sid, why)
            raise EnvError("unknown_session", f'session "{sid}": {why}', status=410)
        if live is None:
            raise EnvError("unknown_session", f'no session "{sid}" (closed, expired or never created)')
        return sid, live

    async def _sequenced(
        self, sid: str, live: _Live, body: Json, apply: Callable[[], Json], check_over: bool
    ) -> Json:
        """Applies a /step or /restart once per seq: a repeated seq answers the stored reply, or
        waits again for the call still running for it."""
        seq = body.get("seq")
        if not isinstance(seq, int) or isinstance(seq, bool):
            raise EnvError("bad_request", "seq must be an integer", field="seq")
        if live.pending is not None and live.pending[0] == seq:
            return await self._engine(live.pending[1], "/step" if check_over else "/restart")
        if seq == live.last_seq and live.last_reply is not None:
            return live.last_reply
        if live.pending is not None:
            raise EnvError("out_of_order", f"seq {seq} on session {sid}: seq {live.pending[0]} is still being applied")
        if seq != live.last_seq + 1:
            raise EnvError("out_of_order", f"seq {seq} on session {sid}: the last applied was {live.last_seq}")
        if check_over and live.session.done:
            raise EnvError("game_over", f"session {sid}: the attempt is over; /restart it first")
        call = self._on_session(live, apply)
        live.pending = (seq, call)

        def applied(f: asyncio.Future[Json]) -> None:
            live.pending = None
            if not f.cancelled() and f.exception() is None:
                live.last_seq = seq
                live.last_reply = f.result()

        call.result.add_done_callback(applied)
        return await self._engine(call, "/step" if check_over else "/restart")

    async def _engine(self, call: Call[R], endpoint: str) -> R:
        """The engine call's result within the budget, its errors as error replies."""
        budget = self.limits.time_budget_ms
        try:
            return await self.engine.wait(call)
        except CallTimeout as e:
            if e.started and endpoint == "/create":
                what = (
                    f"the engine is still building the session after the {budget} ms budget; it is dropped "
                    "when done (its place in the session cap freed then): retry the /create"
                )
            elif e.started and endpoint == "/expert":
                what = f"the engine is still working after the {budget} ms budget; retry the /expert"
            elif e.started:
                what = (
                    f"the engine is still working on this {endpoint} after the {budget} ms budget; it finishes "
                    "in the background: retry the same request (the same seq) to get its reply"
                )
            else:
                what = f"no engine thread was free within the {budget} ms budget; nothing was applied"
            raise EnvError("engine_timeout", what, retry_after=1) from None
        except CallAbandoned:
            raise EnvError("shutting_down", "the server is stopping", retry_after=1) from None
