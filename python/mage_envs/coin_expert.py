"""The expert of TextWorldExpress's coin collector: a policy over what an attempt has seen, not a
replay of the game's gold path.

It reads the map from the texts of the attempt so far (the room descriptions' exits, the doors it
opened, the moves that took it somewhere), plus the facts earlier attempts handed on (`memory`).
Then: take the coin when it is in view; walk the shortest known route to the coin when a fact or
this attempt says where it is; else go through the exits a fact named as not tried, in the order
named, where the known map reaches their rooms (so an attempt after a reflection visibly starts from
it); otherwise explore: walk to the nearest known room with an exit that leads somewhere not yet
searched (an unknown room, or a closed door) and go through it, opening the door first (a
breadth-first search over the known map, so back-tracking comes out of the search). Rooms searched
in earlier attempts without the coin are not searched again.

Facts it hands on are sentences a model can read and the expert can parse again, ordered by what
a next attempt needs first (a reflection under a token cap keeps the first ones):
- the coin found: "The coin was in the pantry.", then the links of the route from the attempt's first
  room to it ("The kitchen's north door leads to the pantry.");
- the coin not found: the exits not tried, nearest the first room first, two of them ("Not tried: the
  corridor's north door and the kitchen's east exit."; what the next attempt acts on, and short
  enough to survive a capped remark), then where the coin was not, in one sentence ("The coin was
  not in the kitchen or the pantry."), then the links of the routes to the exits not tried, then a
  third exit not tried if there is one;
- then every other link ("The kitchen's east exit leads to the corridor.").
With `facts(lead_from="last-room")` the leading exits not tried are those of the room the attempt
ended in, where it has any (the last observation shows them, so a small model can copy them rather
than work them out from the whole attempt), and the links of the route to that room come next.
With `facts(lead_from="plan")` that lead is followed by a plan, the commands that walk from the
attempt's first room along the known route and through the first exit named ("Plan: move west, open
door to south, move south."; a door first seen closed is opened before it is walked through, and
every door starts closed), so a next attempt can copy its first moves instead of working the route
out; the expert of a next attempt plays a remembered plan while its commands are legal.
`remember` also reads the one-room forms of earlier versions ("The coin was not in the kitchen.",
"The corridor's north door was not opened.").
"""

from __future__ import annotations

import re
from collections import deque
from dataclasses import dataclass, field

DIRECTIONS = ("north", "south", "east", "west")
OPPOSITE = {"north": "south", "south": "north", "east": "west", "west": "east"}

_ROOM = re.compile(r"You are in the (.+?)\. ")
_CLOSED = re.compile(r"To the (North|South|East|West) you see a closed (.+?) door\.")
_OPEN_DOOR = re.compile(r"Through an open (.+?) door, to the (North|South|East|West) you see the (.+?)\.")
_PLAIN = re.compile(r"To the (North|South|East|West) you see the (.+?)\.")
_COIN = re.compile(r"\ba coin\b")
_OPENED = re.compile(r"You open the (.+?) door, revealing the (.+?)\.")
_FACT_LINK = re.compile(r"The (.+?)'s (north|south|east|west) (door|exit) leads to the (.+?)\.")
_FACT_COIN = re.compile(r"The coin was in the (.+?)\.")
_FACT_EMPTY = re.compile(r"The coin was not in the (.+?)\.")
_FACT_UNOPENED = re.compile(r"The (.+?)'s (north|south|east|west) door was not opened\.")
_FACT_NOT_IN = re.compile(r"The coin was not in (the .+)\.")
_FACT_UNTRIED = re.compile(r"Not tried: (.+)\.")
_UNTRIED_ITEM = re.compile(r"the (.+?)'s (north|south|east|west) (door|exit)")
_COMMAND = r"(?:open door to|move) (?:north|south|east|west)"
_FACT_PLAN = re.compile(rf"Plan: ({_COMMAND}(?:, {_COMMAND})*)\.")
MAX_UNTRIED = 3  # exits the "Not tried" facts name
LEAD_UNTRIED = 2  # of them in the leading fact (short enough to survive a capped remark; the rest come later)
LEAD_FROM = ("nearest", "last-room", "plan")  # what the leading facts name (`CoinMap.facts`)


def join_words(items: list[str], last: str) -> str:
    """"a", "a or b", "a, b or c" (`last` the word before the last item)."""
    return items[0] if len(items) == 1 else ", ".join(items[:-1]) + f" {last} " + items[-1]


def split_rooms(text: str) -> list[str]:
    """"the kitchen, the pantry or the living room" -> ["kitchen", "pantry", "living room"]."""
    return [r.strip()[len("the "):] for r in re.split(r", | or ", text) if r.strip().startswith("the ")]


@dataclass
class Look:
    room: str
    coin: bool
    # direction -> (destination or None, has a door, door closed)
    exits: dict[str, tuple[str | None, bool, bool]]


def read_look(text: str) -> Look | None:
    """A room description (what `look around` and every successful move print), or None."""
    m = _ROOM.search(text + " ")
    if m is None:
        return None
    exits: dict[str, tuple[str | None, bool, bool]] = {}
    for d, _ in _CLOSED.findall(text):
        exits[d.lower()] = (None, True, True)
    for _, d, dest in _OPEN_DOOR.findall(text):
        exits[d.lower()] = (dest, True, False)
    for d, dest in _PLAIN.findall(text):
        exits.setdefault(d.lower(), (dest, False, False))
    return Look(room=m.group(1), coin=bool(_COIN.search(text)), exits=exits)


@dataclass
class CoinMap:
    """What is known of the house: exits with their destinations where known, doors, searched rooms."""

    exits: dict[str, dict[str, str | None]] = field(default_factory=dict)
    doors: set[tuple[str, str]] = field(default_factory=set)
    closed: dict[tuple[str, str], bool] = field(default_factory=dict)
    links: list[tuple[str, str, str]] = field(default_factory=list)  # (room, direction, destination), first seen first
    searched: list[str] = field(default_factory=list)  # rooms seen without the coin, in order
    named: list[tuple[str, str]] = field(default_factory=list)  # exits a "Not tried" fact named, in order
    coin: str | None = None
    here: str | None = None
    start: str | None = None  # the first room this attempt was in
    looked: set[str] = field(default_factory=set)  # rooms whose description this attempt has read
    first_closed: dict[tuple[str, str], bool] = field(default_factory=dict)  # each door as first seen: its state at a restart
    played: list[str] = field(default_factory=list)  # this attempt's actions, in order
    plan: list[str] = field(default_factory=list)  # the commands of the last "Plan:" fact remembered

    def link(self, room: str, d: str, dest: str) -> None:
        for a, way, b in ((room, d, dest), (dest, OPPOSITE[d], room)):
            if self.exits.setdefault(a, {}).get(way) != b:
                self.exits[a][way] = b
        if not any({(r, dd, t) for r, dd, t in self.links} & {(room, d, dest), (dest, OPPOSITE[d], room)}):
            self.links.append((room, d, dest))

    def enter(self, look: Look) -> None:
        self.here = look.room
        if self.start is None:
            self.start = look.room
        self.looked.add(look.room)
        ways = self.exits.setdefault(look.room, {})
        for d, (dest, door, closed) in look.exits.items():
            ways.setdefault(d, None)
            if door:
                self.doors.add((look.room, d))
                self.closed[(look.room, d)] = closed
                self.first_closed.setdefault((look.room, d), closed)
            if dest is not None:
                self.link(look.room, d, dest)
        if look.coin:
            self.coin = look.room
        elif look.room not in self.searched:
            self.searched.append(look.room)

    def apply(self, action: str, observation: str) -> None:
        """One step of the attempt: the action played and the text it got back."""
        if action:
            self.played.append(action)
        words = action.split()
        look = read_look(observation)
        if look is not None:
            if words[:1] == ["move"] and len(words) == 2 and self.here and self.here != look.room and words[1] in OPPOSITE:
                self.link(self.here, words[1], look.room)
            self.enter(look)
            return
        opened = _OPENED.match(observation)
        if opened and self.here and words[:3] == ["open", "door", "to"] and len(words) == 4:
            self.doors.add((self.here, words[3]))
            self.closed[(self.here, words[3])] = False
            self.link(self.here, words[3], opened.group(2))
        elif self.here and words[:3] == ["close", "door", "to"] and len(words) == 4 and observation.startswith("You close"):
            self.closed[(self.here, words[3])] = True

    def remember(self, facts: list[str]) -> None:
        """Facts from earlier attempts (the ones `facts()` writes; other sentences are ignored)."""
        for fact in facts:
            if m := _FACT_LINK.fullmatch(fact.strip()):
                room, d, kind, dest = m.groups()
                if kind == "door":
                    self.doors.add((room, d))
                self.link(room, d, dest)
            elif m := _FACT_COIN.fullmatch(fact.strip()):
                self.coin = m.group(1)
            elif m := _FACT_NOT_IN.fullmatch(fact.strip()):
                for room in split_rooms(m.group(1)):
                    if room not in self.searched:
                        self.searched.append(room)
            elif (m := _FACT_EMPTY.fullmatch(fact.strip())) and m.group(1) not in self.searched:
                self.searched.append(m.group(1))
            elif m := _FACT_UNOPENED.fullmatch(fact.strip()):
                self.doors.add((m.group(1), m.group(2)))
                self.exits.setdefault(m.group(1), {}).setdefault(m.group(2), None)
            elif m := _FACT_PLAN.fullmatch(fact.strip()):
                self.plan = m.group(1).split(", ")
            elif m := _FACT_UNTRIED.fullmatch(fact.strip()):
                for room, d, kind in _UNTRIED_ITEM.findall(m.group(1)):
                    if kind == "door":
                        self.doors.add((room, d))
                    self.exits.setdefault(room, {}).setdefault(d, None)
                    if (room, d) not in self.named:
                        self.named.append((room, d))

    def _link_fact(self, room: str, d: str, dest: str) -> str:
        return f"The {room}'s {d} {'door' if (room, d) in self.doors else 'exit'} leads to the {dest}."

    def _tree(self) -> dict[str, tuple[str, str, str] | None]:
        """Breadth-first over the known links from the attempt's first room: each room reached and
        the link (room, direction, destination) it was reached by."""
        root = self.start or self.here
        if root is None:
            return {}
        back: dict[str, tuple[str, str, str] | None] = {root: None}
        queue = deque([root])
        while queue:
            room = queue.popleft()
            for d in DIRECTIONS:
                dest = self.exits.get(room, {}).get(d)
                if dest is not None and dest not in back:
                    back[dest] = (room, d, dest)
                    queue.append(dest)
        return back

    def _route_links(self, back: dict[str, tuple[str, str, str] | None], room: str) -> list[tuple[str, str, str]]:
        """The links from the first room to `room` (its breadth-first route), first one first."""
        out: list[tuple[str, str, str]] = []
        step = back.get(room)
        while step is not None:
            out.append(step)
            step = back.get(step[0])
        return out[::-1]

    def untried(self) -> list[tuple[str, str]]:
        """Exits this attempt knows of that lead nowhere searched (a closed door, an exit to a room not
        entered), rooms nearest the first room first: (room, direction)."""
        back = self._tree()
        out: list[tuple[str, str]] = []
        for room in list(back) + sorted(set(self.exits) - set(back)):
            ways = self.exits.get(room, {})
            for d in DIRECTIONS:
                if d in ways and (ways[d] is None or (ways[d] not in self.searched and ways[d] != self.coin)):
                    out.append((room, d))
        return out

    def _untried_fact(self, exits: list[tuple[str, str]]) -> str:
        items = [f"the {r}'s {d} {'door' if (r, d) in self.doors else 'exit'}" for r, d in exits]
        return f"Not tried: {join_words(items, 'and')}."

    def _lead_untried(self, lead_from: str) -> tuple[list[tuple[str, str]], list[tuple[str, str]]]:
        """The exits not tried that the leading fact names, and up to MAX_UNTRIED in all after them.
        `nearest`: nearest the first room first. `last-room`: the exits of the room the attempt ended
        in (what its last observation shows, so a reflection can copy them), else as `nearest`."""
        untried = self.untried()
        if lead_from == "last-room":
            here = [x for x in untried if x[0] == self.here]
            if here:
                lead = here[:LEAD_UNTRIED]
                return lead, [x for x in untried if x not in lead][: MAX_UNTRIED - len(lead)]
        untried = untried[:MAX_UNTRIED]
        return untried[:LEAD_UNTRIED], untried[LEAD_UNTRIED:]

    def _commands(self, links: list[tuple[str, str, str]]) -> list[str]:
        """The commands that walk `links` (room, direction, destination) from a restart, when every door
        is as it was first seen: a door first seen closed is opened before the move through it."""
        out: list[str] = []
        for room, d, dest in links:
            # one door, two sides: the side first seen open may have been opened from the other
            closed = self.first_closed.get((room, d), True) or self.first_closed.get((dest, OPPOSITE[d]), False)
            if (room, d) in self.doors and closed:
                out.append(f"open door to {d}")
            out.append(f"move {d}")
        return out

    def _plan_fact(self, back: dict[str, tuple[str, str, str] | None], room: str, d: str | None) -> str:
        """"Plan: move west, open door to south, move south.": from the first room along the known
        route to `room`, then through its exit `d` (None: stop in `room`); "" when the route is not known."""
        if room not in back:
            return ""
        commands = self._commands(self._route_links(back, room))
        if d is not None:
            commands += self._commands([(room, d, self.exits.get(room, {}).get(d) or "")])
        return f"Plan: {', '.join(commands)}." if commands else ""

    def facts(self, lead_from: str = "nearest") -> list[str]:
        """The facts to hand on, first needed first (see the module's docstring). `lead_from`
        (`nearest`, `last-room` or `plan`) picks the exits the leading fact names; with `last-room`
        the links of the routes to them follow it at once (before where the coin was not), so that a
        remark cut at its cap still says how to get there; `plan` is `last-room` with a plan there
        (through the first exit named, or to the coin's room) right after the leading fact."""
        if lead_from not in LEAD_FROM:
            raise ValueError(f"lead_from must be one of {', '.join(LEAD_FROM)}, got {lead_from!r}")
        back = self._tree()
        first: list[tuple[str, str, str]] = []  # links the leading facts need
        out: list[str] = []
        not_in = f"The coin was not in {join_words([f'the {r}' for r in self.searched], 'or')}." if self.searched else None
        if self.coin:
            out.append(f"The coin was in the {self.coin}.")
            if lead_from == "plan" and (plan := self._plan_fact(back, self.coin, None)):
                out.append(plan)
            first = self._route_links(back, self.coin)
            out += [self._link_fact(*link) for link in first]
            out += [not_in] if not_in else []
        else:
            lead, rest = self._lead_untried("last-room" if lead_from == "plan" else lead_from)
            if lead_from == "plan":  # one exit in the lead, leaving the cap's room to the plan through it
                lead, rest = lead[:1], (lead[1:] + rest)[: MAX_UNTRIED - 1]
            if lead:
                out.append(self._untried_fact(lead))
            if lead_from == "plan" and lead and (plan := self._plan_fact(back, *lead[0])):
                out.append(plan)
            if lead_from in ("last-room", "plan"):
                for room, _ in lead:
                    first += [link for link in self._route_links(back, room) if link not in first]
                out += [self._link_fact(*link) for link in first]
            out += [not_in] if not_in else []
            later: list[tuple[str, str, str]] = []
            for room, _ in lead + rest:
                later += [link for link in self._route_links(back, room) if link not in first and link not in later]
            out += [self._link_fact(*link) for link in later]
            first += later
            if rest:
                out.append(self._untried_fact(rest))
        said = {(r, d) for r, d, _ in first}
        out += [self._link_fact(r, d, t) for r, d, t in self.links if (r, d) not in said and (t, OPPOSITE[d]) not in said]
        return out

    def _route(self, goal: str | None) -> list[str] | None:
        """Directions of the shortest known route from here: to room `goal`, or (None) to the
        nearest room with an exit to somewhere unsearched, that exit included."""
        assert self.here is not None
        back: dict[str, tuple[str, str] | None] = {self.here: None}
        queue = deque([self.here])
        while queue:
            room = queue.popleft()
            if goal is not None and room == goal:
                return self._path(back, room)
            ways = self.exits.get(room, {})
            if goal is None:
                for d in DIRECTIONS:
                    if d in ways and (ways[d] is None or (ways[d] not in self.searched and ways[d] != room)):
                        return self._path(back, room) + [d]
            for d in DIRECTIONS:
                dest = ways.get(d)
                if dest is not None and dest not in back:
                    back[dest] = (room, d)
                    queue.append(dest)
        return None

    def _still_untried(self, room: str, d: str) -> bool:
        """Whether exit `d` of `room` still leads nowhere searched (unknown, or a room not searched)."""
        ways = self.exits.get(room, {})
        return d in ways and (ways[d] is None or (ways[d] not in self.searched and ways[d] != room))

    def _route_to_named(self) -> list[str] | None:
        """Directions through the first exit a fact named as not tried that is still untried and whose
        room the known map reaches from here (that exit included), or None."""
        for room, d in self.named:
            if not self._still_untried(room, d):
                continue
            route = [] if room == self.here else self._route(room)
            if route is not None:
                return route + [d]
        return None

    @staticmethod
    def _path(back: dict[str, tuple[str, str] | None], room: str) -> list[str]:
        path: list[str] = []
        step = back[room]
        while step is not None:
            path.append(step[1])
            step = back[step[0]]
        return path[::-1]

    def avoid(self, legal: list[str], chosen: str | None) -> list[str]:
        """Legal actions that waste a step here, `chosen` excepted: opening a door known to be open,
        closing one, and moving into a room already searched (the walk back and forth a small
        model falls into; the expert only goes back through a searched room on a route)."""
        if self.here is None:
            return []
        ways = self.exits.get(self.here, {})
        out: list[str] = []
        for action in legal:
            words = action.split()
            if action == chosen or not words or words[-1] not in DIRECTIONS:
                continue
            d = words[-1]
            if words[:2] == ["close", "door"]:
                out.append(action)
            elif words[:2] == ["open", "door"] and self.closed.get((self.here, d)) is False:
                out.append(action)
            elif words[0] == "move" and ways.get(d) is not None and ways[d] in self.searched and ways[d] != self.coin:
                out.append(action)
        return out

    def _planned(self, legal: list[str]) -> str | None:
        """The plan's next command while this attempt has played the plan so far and it is legal."""
        k = len(self.played)
        if k < len(self.plan) and self.played == self.plan[:k] and self.plan[k] in legal:
            return self.plan[k]
        return None

    def next_action(self, legal: list[str]) -> str | None:
        if "take coin" in legal:
            return "take coin"
        if self.here is None:
            return "look around" if "look around" in legal else None
        if (planned := self._planned(legal)) is not None:
            return planned
        route = self._route(self.coin) if self.coin and self.coin != self.here else None
        if route is None and not self.coin:
            route = self._route_to_named()
        if route is None:
            route = self._route(None)
        if route is None:  # remembered rooms whose exits this attempt has not read: go and look
            for room in sorted(set(self.exits) - self.looked):
                route = self._route(room)
                if route:
                    break
        if not route:
            return None
        d = route[0]
        action = f"open door to {d}" if self.closed.get((self.here, d), False) else f"move {d}"
        return action if action in legal else None


def coin_map(trace: list[tuple[str, str]], memory: list[str]) -> CoinMap:
    """The map after an attempt's steps (`trace`: (action, observation), the first action "" for the
    initial observation), on top of the facts in `memory`."""
    m = CoinMap()
    m.remember(memory)
    for action, observation in trace:
        m.apply(action, observation)
    return m
