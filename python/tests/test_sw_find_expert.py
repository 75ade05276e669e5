"""The exploring expert of ScienceWorld's find tasks on a fake house that writes the engine's texts
(no Java): it reads doors from room descriptions and the objects in view, explores without knowing
where the thing is, carries it to the box, and hands on facts that a later attempt parses again and
uses to walk straight there (the engine's own house is played in test_scienceworld_server.py)."""

from __future__ import annotations

import pytest

from mage_envs.sw_find_expert import FindMap, FindTask, find_map, find_task, join_words, split_rooms

# ScienceWorld's house (the doors every find-animal variation has).
DOORS = [("hallway", r) for r in ("art studio", "bedroom", "greenhouse", "kitchen", "living room", "workshop")] + [
    ("kitchen", "bathroom"), ("kitchen", "outside"), ("greenhouse", "outside"), ("outside", "foundry")]
GOAL = "Your task is to find a(n) animal. First, focus on the thing. Then, move it to the red box in the {room}."


class FakeHouse:
    """The engine's texts for the commands the expert plays: room descriptions, `You move to the X.`,
    doors to open, the objects in view after every command (`door to X`, or `X door` for the kitchen's
    bathroom door, as the engine names them), and a step limit."""

    def __init__(self, start: str, box_room: str, thing_room: str = "outside", doors_open: bool = False,
                 max_steps: int = 100, objects_changed: bool = False):
        self.here, self.box_room, self.thing_room = start, box_room, thing_room
        self.open = {frozenset(d) for d in DOORS} if doors_open else set()
        self.carried = self.focused = self.won = False
        self.focus_step = 0
        self.steps, self.max_steps = 0, max_steps
        self.objects_changed = objects_changed
        self.shown: str | None = None

    def neighbours(self, room: str) -> list[str]:
        return sorted({b for a, b in DOORS if a == room} | {a for a, b in DOORS if b == room})

    def objects(self) -> str:
        things = ["agent", "air", self.here]
        for n in self.neighbours(self.here):
            things += [n, f"{n} door" if (self.here, n) == ("kitchen", "bathroom") else f"door to {n}"]
        if self.here == self.thing_room and not self.carried:
            things += ["blue jay", "fountain"]
        if self.here == self.box_room:
            things.append("red box")
        listed = f"Objects in view: {', '.join(sorted(set(things)))}."
        if self.objects_changed and listed == self.shown:
            return "Objects in view: as before."
        self.shown = listed
        return listed

    def look(self) -> str:
        doors = "\n".join(f"\tA door to the {n} (that is {'open' if frozenset((self.here, n)) in self.open else 'closed'})"
                          for n in self.neighbours(self.here))
        return f"This room is called the {self.here}. In it, you see: \n\tthe agent\nYou also see:\n{doors}\n{self.objects()}"

    @property
    def done(self) -> bool:
        return self.won or self.steps >= self.max_steps

    def step(self, command: str) -> str:
        self.steps += 1
        if command == "look around":
            return self.look()
        if command.startswith("open door to ") and (n := command[len("open door to "):]) in self.neighbours(self.here):
            pair = frozenset((self.here, n))
            text = "The door is already open." if pair in self.open else "The door is now open."
            self.open.add(pair)
        elif command.startswith("go to ") and (n := command[len("go to "):]) in self.neighbours(self.here):
            text = f"You move to the {n}." if frozenset((self.here, n)) in self.open else "The door is not open."
            if frozenset((self.here, n)) in self.open:
                self.here = n
        elif command == "focus on blue jay" and self.here == self.thing_room and not self.carried:
            self.focused, text = True, "You focus on the blue jay egg."
            self.focus_step = self.steps
        elif command == "pick up blue jay" and self.focused and self.here == self.thing_room:
            self.carried, text = True, "You move the blue jay to the inventory."
        elif command == "move blue jay in inventory to red box" and self.carried and self.here == self.box_room:
            self.won, text = True, "You move the blue jay to the red box."
        else:
            raise AssertionError(f"the engine would not accept {command!r} in the {self.here}")
        return f"{text}\n{self.objects()}"


def hops(a: str, b: str) -> int:
    """Doors between two rooms of the house on the shortest way."""
    seen, frontier, n = {a}, {a}, 0
    while b not in frontier:
        frontier = {r for x, y in DOORS for f in frontier for r in (x, y) if f in (x, y)} - seen
        seen |= frontier
        n += 1
    return n


def task(box_room: str, doors_open: bool = False) -> FindTask:
    gold = ["open door to kitchen", "go to kitchen", "focus on blue jay", "pick up blue jay",
            "move blue jay in inventory to red box"]
    return find_task(GOAL.format(room=box_room), gold, doors_open=doors_open)


def play(house: FakeHouse, t: FindTask, memory: list[str]) -> FindMap:
    trace = [("", house.look())]
    while not house.done:
        action = find_map(t, trace, memory).next_action()
        assert action is not None, trace
        trace.append((action, house.step(action)))
    return find_map(t, trace, [])


def test_the_task_is_read_from_the_goal_and_the_gold_path() -> None:
    t = task("living room")
    assert (t.noun, t.target, t.box, t.box_room) == ("animal", "blue jay", "red box", "living room")
    assert t.deliver == "move blue jay in inventory to red box"
    plant = find_task("Your task is to find a(n) plant. First, focus on the thing. Then, move it to the purple box "
                      "in the workshop.", ["focus on pea plant", "pick up pea plant"])
    assert (plant.noun, plant.box_room, plant.deliver) == ("plant", "workshop", "move pea plant to purple box")
    with pytest.raises(ValueError, match="not a find task"):
        find_task("Your task is to boil water.", ["focus on water"])


@pytest.mark.parametrize("doors_open", [False, True])
@pytest.mark.parametrize(("start", "box_room"), [("art studio", "bathroom"), ("kitchen", "living room"),
                                                 ("outside", "kitchen"), ("bathroom", "bedroom")])
def test_the_explorer_finds_the_thing_and_carries_it_to_the_box(start: str, box_room: str, doors_open: bool) -> None:
    house = FakeHouse(start, box_room, doors_open=doors_open)
    m = play(house, task(box_room, doors_open), [])
    assert house.won and m.found == "outside" and "outside" not in m.searched
    if start != "outside":
        assert house.steps > 5 and m.searched, "it explores: it does not know where the thing is"


def test_exploring_visits_the_nearest_rooms_first_and_never_looks() -> None:
    house = FakeHouse("hallway", "kitchen")
    t = task("kitchen")
    trace = [("", house.look())]
    for _ in range(6):
        action = find_map(t, trace, []).next_action()
        assert action is not None
        trace.append((action, house.step(action)))
    assert [a for a, _ in trace[1:]] == ["open door to art studio", "go to art studio", "go to hallway",
                                        "open door to bedroom", "go to bedroom", "go to hallway"]


def test_a_lost_attempts_facts_lead_with_where_the_thing_was_and_the_way() -> None:
    house = FakeHouse("art studio", "bathroom", max_steps=13)
    m = play(house, task("bathroom"), [])
    assert not house.won and m.found == "outside"
    facts = m.facts()
    assert facts[0] == "The animal was in the outside: the blue jay."
    assert facts[1] == "Path: art studio, hallway, greenhouse, outside."
    assert all(f.startswith("Path: ") for f in facts[1:])


def test_a_lost_attempts_facts_say_where_the_thing_was_not_and_what_was_not_tried() -> None:
    house = FakeHouse("hallway", "kitchen", max_steps=6)
    m = play(house, task("kitchen"), [])
    assert m.found is None
    facts = m.facts()
    assert facts[0] == "No animal in the hallway, art studio or bedroom."
    assert facts[1] == "Not tried: greenhouse, kitchen, living room."
    assert facts[2] == "Path: hallway, greenhouse."


@pytest.mark.parametrize("doors_open", [False, True])
@pytest.mark.parametrize("cut", ["last step", "half way"])
@pytest.mark.parametrize(("start", "box_room"), [("art studio", "bathroom"), ("kitchen", "living room"),
                                                 ("bathroom", "bedroom"), ("hallway", "kitchen")])
def test_a_later_attempt_with_the_facts_wins_in_fewer_steps(start: str, box_room: str, cut: str, doors_open: bool) -> None:
    t = task(box_room, doors_open)
    free = FakeHouse(start, box_room, doors_open=doors_open)
    play(free, t, [])
    limit = free.steps - 1 if cut == "last step" else free.steps // 2
    first = FakeHouse(start, box_room, doors_open=doors_open, max_steps=limit)
    facts = play(first, t, []).facts()
    assert not first.won
    second = FakeHouse(start, box_room, doors_open=doors_open)
    play(second, t, facts[:3])
    assert second.won and second.steps < free.steps, (second.steps, free.steps, facts[:3])
    if cut == "last step":  # the thing was seen: the second attempt walks the shortest way to it
        assert facts[0] == "The animal was in the outside: the blue jay."
        assert second.focus_step == hops(start, "outside") * (1 if doors_open else 2) + 1 < free.focus_step


def test_facts_parse_back_into_the_same_map() -> None:
    house = FakeHouse("bedroom", "bathroom", max_steps=14)
    m = play(house, task("bathroom"), [])
    again = find_map(task("bathroom"), [], m.facts())
    assert again.found == m.found
    assert {frozenset(d) for d in m.order} == {frozenset(d) for d in again.order}
    none = FakeHouse("hallway", "kitchen", max_steps=6)
    n = play(none, task("kitchen"), [])
    back = find_map(task("kitchen"), [], n.facts())
    assert back.searched == ["hallway", "art studio", "bedroom"] and back.rooms == ["greenhouse", "kitchen", "living room"]
    # Sentences the expert does not write are ignored.
    assert find_map(task("kitchen"), [], ["I should go outside.", "Path:"]).order == []


def test_rooms_searched_before_are_not_entered_again_for_the_thing() -> None:
    memory = ["No animal in the art studio, bedroom or greenhouse."]
    house = FakeHouse("hallway", "kitchen")
    m = play(house, task("kitchen"), memory)
    assert house.won and not {"art studio", "bedroom", "greenhouse"} & set(m.entered)


def test_objects_as_before_keep_the_last_list() -> None:
    house = FakeHouse("kitchen", "kitchen", objects_changed=True)
    m = play(house, task("kitchen"), [])
    assert house.won and m.found == "outside"


def test_words_and_rooms() -> None:
    assert join_words(["a"], "or") == "a" and join_words(["a", "b", "c"], "and") == "a, b and c"
    assert split_rooms("kitchen, art studio or living room") == ["kitchen", "art studio", "living room"]
    assert split_rooms("greenhouse, kitchen, outside") == ["greenhouse", "kitchen", "outside"]
    assert split_rooms("the kitchen, the art studio and the outside") == ["kitchen", "art studio", "outside"]
