"""The exploring expert of ScienceWorld's find tasks (find-animal, find-living-thing, find-plant,
find-non-living-thing): a policy over what an attempt has seen, not a replay of the gold path.

The gold path walks straight to the thing (for find-animal always the outside), so a first attempt
that follows it needs no memory and a later one gains nothing from it. This expert knows *what* to
find (the gold path's `focus on` object) and where the box is (the task says), but not where the
thing is: it reads the house from the attempt's texts (the room descriptions' doors, the objects in
view after every command: `door to X` and `X door` name a neighbouring room, the moves that took it
somewhere, the doors it opened), plus the facts earlier attempts handed on (`memory`). Then: carry
the thing to the box once it is held; pick it up once focused; focus on it when it is in view; walk
the shortest known way to the room where a fact says it is; otherwise explore: walk to the nearest
known room not yet entered (neighbours in alphabetical order) and go in, opening the door first
(rooms searched by earlier attempts are not entered again). Entering a room shows its objects, so
no `look around` is needed.

Facts it hands on are sentences a model can read and the expert parses again, ordered by what a
next attempt needs first (a reflection under a token cap keeps the first ones):
- the thing seen: where, "The animal was in the outside: the dove.", then the way from the
  attempt's first room, "Path: art studio, hallway, greenhouse, outside.", then the way from its
  room to the box's room where the attempt found one ("Path: outside, kitchen, bathroom.");
- the thing not seen: where it was not, in one sentence ("No animal in the hallway, art studio or
  bedroom."), then the rooms known and not entered, nearest the first room first, at most three
  ("Not tried: greenhouse, kitchen, living room."), then the way to the nearest;
- then every other door, those nearest the thing's room (else the first room) first ("Path:
  outside, foundry.").
"""

from __future__ import annotations

import re
from collections import deque
from dataclasses import dataclass, field

FIND_TASKS = ("find-animal", "find-living-thing", "find-plant", "find-non-living-thing")
MAX_UNTRIED = 3  # rooms a "Not tried" fact names

_GOAL = re.compile(r"find an? ?(?:\(n\) )?(.+?)\. .*?move it to the (.+?) in the (.+?)\.")
_LOOK_ROOM = re.compile(r"This (?:\w+ )?(?:location|room) is called the (.+?)\.")
_LOOK_DOOR = re.compile(r"A door to the (.+?) \(that is (open|closed)\)")
_MOVED = re.compile(r"You move to the (.+?)\.")
_OBJECTS = "Objects in view: "
_AS_BEFORE = "Objects in view: as before."
_FACT_FOUND = re.compile(r"The (.+?) was in the (.+?): the (.+?)\.")
_FACT_PATH = re.compile(r"Path: (.+)\.")
_FACT_NONE = re.compile(r"No (.+?) in the (.+)\.")
_FACT_UNTRIED = re.compile(r"Not tried: (.+)\.")


def join_words(items: list[str], last: str) -> str:
    """"a", "a or b", "a, b or c" (`last` the word before the last item)."""
    return items[0] if len(items) == 1 else ", ".join(items[:-1]) + f" {last} " + items[-1]


def split_rooms(text: str) -> list[str]:
    """"kitchen, hallway or living room" -> ["kitchen", "hallway", "living room"] (a leading "the " of
    an item is dropped)."""
    parts = [p.strip() for p in re.split(r", | or | and ", text)]
    return [p[len("the "):] if p.startswith("the ") else p for p in parts if p]


@dataclass(frozen=True)
class FindTask:
    """What the expert is told: the kind of thing (the goal's noun), the object to find (the gold
    path's `focus on` object), the box and its room (the goal's), the command that puts the thing in
    the box (the gold path's last), and whether every door starts open (`openDoors`)."""

    noun: str
    target: str
    box: str
    box_room: str
    deliver: str
    doors_open: bool = False


def find_task(goal: str, gold: list[str], doors_open: bool = False) -> FindTask:
    """The expert's task from ScienceWorld's goal text and gold path; ValueError if they are not a find task's."""
    m = _GOAL.search(goal)
    focus = [a[len("focus on "):] for a in gold if a.startswith("focus on ")]
    if m is None or not focus:
        raise ValueError(f"not a find task: {goal!r}")
    moves = [a for a in gold if a.startswith("move ") and a.endswith(f" to {m.group(2)}")]
    deliver = moves[-1] if moves else f"move {focus[0]} to {m.group(2)}"
    return FindTask(noun=m.group(1), target=focus[0], box=m.group(2), box_room=m.group(3), deliver=deliver,
                    doors_open=doors_open)


@dataclass
class FindMap:
    """What is known of the house and the thing: doors between rooms, open doors, rooms entered."""

    task: FindTask
    links: dict[str, set[str]] = field(default_factory=dict)
    order: list[tuple[str, str]] = field(default_factory=list)  # doors, first seen first
    opened: set[frozenset[str]] = field(default_factory=set)
    entered: list[str] = field(default_factory=list)  # rooms this attempt was in, in order
    searched: list[str] = field(default_factory=list)  # rooms seen without the thing (this attempt, then memory)
    rooms: list[str] = field(default_factory=list)  # rooms named by memory's "Not tried" facts
    found: str | None = None
    here: str | None = None
    start: str | None = None
    objects: list[str] = field(default_factory=list)
    focused: bool = False
    carried: bool = False

    def link(self, a: str, b: str) -> None:
        if a == b:
            return
        if b not in self.links.setdefault(a, set()):
            self.links[a].add(b)
            self.links.setdefault(b, set()).add(a)
            self.order.append((a, b))

    def door_open(self, a: str, b: str) -> bool:
        return self.task.doors_open or frozenset((a, b)) in self.opened

    def enter(self, room: str) -> None:
        if self.here is not None and self.here != room:
            self.link(self.here, room)
        self.here = room
        if self.start is None:
            self.start = room
        if room not in self.entered:
            self.entered.append(room)

    def see(self, objects: list[str]) -> None:
        """The objects in view in the current room: its doors, and whether the thing is there."""
        self.objects = objects
        if self.here is None:
            return
        named = set(objects)
        for o in objects:
            if o.startswith("door to "):
                self.link(self.here, o[len("door to "):])
            elif o.endswith(" door") and o[: -len(" door")] in named:
                self.link(self.here, o[: -len(" door")])
        if self.carried or self.focused:  # the thing goes where the agent takes it
            return
        if self.task.target in named:
            self.found = self.here
        elif self.found != self.here and self.here not in self.searched:
            self.searched.append(self.here)

    def apply(self, action: str, observation: str) -> None:
        """One step of the attempt: the command played ("" for the first look) and the text it got back."""
        text, _, listed = observation.rpartition(_OBJECTS)
        if not text:  # no objects line: all of it is the engine's text
            text, listed = observation, ""
        if m := _LOOK_ROOM.search(text):
            self.enter(m.group(1))
            for room, state in _LOOK_DOOR.findall(text):
                self.link(m.group(1), room)
                pair = frozenset((m.group(1), room))
                if state == "open":
                    self.opened.add(pair)
                else:
                    self.opened.discard(pair)
        elif m := _MOVED.match(text.strip()):
            self.enter(m.group(1))
        elif self.here is not None and (door := _door_of(action)) is not None:
            if text.startswith(("The door is now open.", "The door is already open.")):
                self.link(self.here, door)
                self.opened.add(frozenset((self.here, door)))
        elif self.here is not None and action.startswith("go to ") and text.startswith("The door is not open."):
            self.opened.discard(frozenset((self.here, action[len("go to "):])))
        if action.startswith("focus on ") and text.startswith("You focus on"):
            self.focused = True
        if action.startswith("pick up ") and text.startswith("You move the") and "inventory" in text:
            self.carried = True
        if listed and (_OBJECTS + listed).strip() != _AS_BEFORE:
            self.see([o.strip() for o in listed.strip().rstrip(".").split(", ") if o.strip()])
        elif listed:
            self.see(self.objects)

    def remember(self, facts: list[str]) -> None:
        """Facts from earlier attempts (the ones `facts()` writes; other sentences are ignored)."""
        for fact in facts:
            f = fact.strip()
            if m := _FACT_FOUND.fullmatch(f):
                self.found = m.group(2)
            elif m := _FACT_PATH.fullmatch(f):
                rooms = [r.strip() for r in m.group(1).split(", ") if r.strip()]
                for a, b in zip(rooms, rooms[1:], strict=False):
                    self.link(a, b)
            elif m := _FACT_NONE.fullmatch(f):
                for room in split_rooms(m.group(2)):
                    if room not in self.searched:
                        self.searched.append(room)
            elif m := _FACT_UNTRIED.fullmatch(f):
                for room in split_rooms(m.group(1)):
                    if room not in self.rooms:
                        self.rooms.append(room)

    def _ways(self, root: str) -> dict[str, str | None]:
        """Breadth-first over the known doors from `root` (neighbours in alphabetical order): each
        room reached and the room it was reached from."""
        back: dict[str, str | None] = {root: None}
        queue = deque([root])
        while queue:
            room = queue.popleft()
            for nxt in sorted(self.links.get(room, ())):
                if nxt not in back:
                    back[nxt] = room
                    queue.append(nxt)
        return back

    def path(self, a: str, b: str) -> list[str] | None:
        """The rooms of the shortest known way from `a` to `b`, both included; None if none is known."""
        back = self._ways(a)
        if b not in back:
            return None
        out = [b]
        while (prev := back[out[-1]]) is not None:
            out.append(prev)
        return out[::-1]

    def _step(self, goal: str) -> str | None:
        """The next command on the way to `goal`: open the door to the next room, or go in."""
        assert self.here is not None
        way = self.path(self.here, goal)
        if way is None or len(way) < 2:
            return None
        nxt = way[1]
        return f"go to {nxt}" if self.door_open(self.here, nxt) else f"open door to {nxt}"

    def untried(self) -> list[str]:
        """Rooms known and not searched, nearest the attempt's first room first (unreachable ones last)."""
        known = list(self._ways(self.start)) if self.start else []
        known += sorted(set(self.links) - set(known)) + [r for r in self.rooms if r not in self.links]
        return [r for r in known if r not in self.entered and r not in self.searched and r != self.found]

    def next_action(self) -> str | None:
        if self.here is None:
            return "look around"
        t = self.task
        if self.carried:
            if self.here == t.box_room:
                return t.deliver
            return self._step(t.box_room) or self._explore(for_thing=False)
        if self.focused:
            return f"pick up {t.target}"
        if t.target in self.objects and self.found == self.here:
            return f"focus on {t.target}"
        if self.found is not None and self.found != self.here:
            step = self._step(self.found)
            if step is not None:
                return step
        return self._explore()

    def _explore(self, for_thing: bool = True) -> str | None:
        """A step to the nearest known room not entered, one an earlier attempt searched last (its doors
        may lead on), and for the thing (`for_thing`) none of those."""
        assert self.here is not None
        ways = [r for r in self._ways(self.here) if r not in self.entered]
        fresh = [r for r in ways if r not in self.searched]
        for room in fresh + ([] if for_thing and fresh else [r for r in ways if r in self.searched]):
            return self._step(room)
        return None

    def facts(self) -> list[str]:
        t = self.task
        out: list[str] = []
        said: set[frozenset[str]] = set()

        def path_fact(rooms: list[str] | None) -> None:
            if rooms and len(rooms) > 1:
                out.append(f"Path: {', '.join(rooms)}.")
                said.update(frozenset(p) for p in zip(rooms, rooms[1:], strict=False))

        if self.found is not None:
            out.append(f"The {t.noun} was in the {self.found}: the {t.target}.")
            if self.start is not None:
                path_fact(self.path(self.start, self.found))
            if self.found != t.box_room:
                path_fact(self.path(self.found, t.box_room))
        else:
            if self.searched:
                out.append(f"No {t.noun} in the {join_words(self.searched, 'or')}.")
            untried = self.untried()[:MAX_UNTRIED]
            if untried:
                out.append(f"Not tried: {', '.join(untried)}.")
                if self.start is not None:
                    path_fact(self.path(self.start, untried[0]))
        # Every other door, those nearest the thing's room (else the first room) first.
        root = self.found or self.start
        near = self._ways(root) if root is not None else {}
        rank = {room: i for i, room in enumerate(near)}
        rest = [(a, b) for a, b in self.order if frozenset((a, b)) not in said]
        for a, b in sorted(rest, key=lambda d: min(rank.get(d[0], len(rank)), rank.get(d[1], len(rank)))):
            path_fact([a, b] if rank.get(a, len(rank)) <= rank.get(b, len(rank)) else [b, a])
        return out


def _door_of(action: str) -> str | None:
    """The room an `open door to X` / `open X door` command opens the door to, or None."""
    if action.startswith("open door to "):
        return action[len("open door to "):]
    if action.startswith("open ") and action.endswith(" door"):
        return action[len("open "): -len(" door")]
    return None


def find_map(task: FindTask, trace: list[tuple[str, str]], memory: list[str]) -> FindMap:
    """The map after an attempt's steps (`trace`: (command, observation), the first command "" for the
    initial observation), on top of the facts in `memory`."""
    m = FindMap(task)
    m.remember(memory)
    for action, observation in trace:
        m.apply(action, observation)
    return m
