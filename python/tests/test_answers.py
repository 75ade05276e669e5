"""The answer-matching step the five adapters share (`mage_envs/answers.py`), with each adapter's
own rule: what counts as naming a legal action, and the reason an answer is refused."""

from __future__ import annotations

import pytest

from mage_envs import alfworld_server, openspiel_server, scienceworld_server, textarena_server, textworld_express_server
from mage_envs.answers import Answer, Matcher

TTT = ["x(0,0)", "x(1,1)", "x(2,2)"]
ADMISSIBLE = ["go to countertop 1", "open fridge 1", "take apple 1 from countertop 1", "help", "look"]


@pytest.mark.parametrize(
    ("response", "reason"),
    [
        ("x(0,0)", "no complete <action>…</action> after the reasoning"),
        ("<action></action>", "the <action> tag is empty"),
        ("<action>   </action>", "the <action> tag is empty"),
        ("<think>x(0,0) <action>x(0,0)</action>", "the response ends inside <think> (no </think>), so it has no answer"),
        ("<action>x(0,0)", "no complete <action>…</action> after the reasoning"),
    ],
)
def test_a_malformed_answer_is_refused_with_the_parsers_reason(response: str, reason: str) -> None:
    for matcher, legal in ((openspiel_server.ANSWERS, TTT), (alfworld_server.ANSWERS, ADMISSIBLE),
                           (scienceworld_server.ANSWERS, None)):
        assert matcher.match(response, legal) == Answer(None, None, reason)


def test_openspiel_ignores_case_and_every_space_and_lists_the_legal_names() -> None:
    m = openspiel_server.ANSWERS
    assert m.match("<action>x(1,1)</action>", TTT) == Answer("x(1,1)", "x(1,1)")
    assert m.match("<think>hm</think><action> X ( 2 , 2 ) </action>", TTT).action == "x(2,2)"
    refused = m.match("<action>o(0,0)</action>", TTT)
    assert refused == Answer(None, "o(0,0)", '"o(0,0)" is not a legal action; legal: x(0,0), x(1,1), x(2,2)')
    assert m.match(f"<action>{'y' * 100}</action>", TTT).reason.startswith(f'"{"y" * 60}" is not')


def test_alfworld_ignores_case_and_spacing_plays_help_and_quotes_80_characters() -> None:
    m = alfworld_server.ANSWERS
    assert m.match("<action>  Go   TO\tcountertop 1 </action>", ADMISSIBLE).action == "go to countertop 1"
    assert m.match("<action>HELP</action>", ADMISSIBLE).action == "help"  # admissible though not listed
    # the admissible commands are matched as written: inner spaces are not removed
    assert m.match("<action>gotocountertop 1</action>", ADMISSIBLE) == Answer(
        None, "gotocountertop 1", '"gotocountertop 1" is not an admissible action')
    assert m.match("<action>go to countertop 1</action>", ["Go To Countertop 1"]).action is None
    assert m.match(f"<action>{'z' * 100}</action>", ADMISSIBLE).reason == f'"{"z" * 80}" is not an admissible action'


def test_textworld_express_matches_its_valid_actions_in_any_case_and_returns_their_spelling() -> None:
    m = textworld_express_server.ANSWERS
    legal = ["look around", "Take Red Apple", "move north"]
    assert m.match("<action>take  red apple</action>", legal).action == "Take Red Apple"
    assert m.match("<action>move south</action>", legal) == Answer(None, "move south", '"move south" is not a valid action')


@pytest.mark.parametrize(
    ("game", "content", "legal", "move"),
    [
        ("TicTacToe-v0", "4", ["[0]", "[4]"], "[4]"),
        ("TicTacToe-v0", "[ 4 ]", ["[ 4 ]"], "[ 4 ]"),
        ("TicTacToe-v0", "(2, 2)", ["[0]", "[4]"], "[4]"),
        ("TicTacToe-v0", "(4, 1)", ["[0]", "[4]"], None),
        ("KuhnPoker-v0", "pass", ["[check]", "[bet]"], "[check]"),
        ("KuhnPoker-v0", "PASS", ["[fold]", "[call]"], "[fold]"),
        ("KuhnPoker-v0", "Bet", ["[fold]", "[call]"], "[call]"),
        ("KuhnPoker-v0", "[BET]", ["[fold]", "[call]"], None),
        ("ConnectFour-v0", "3", ["[col 3]"], "[col 3]"),
        ("ConnectFour-v0", "col   3", ["[col 3]"], "[col 3]"),
    ],
)
def test_textarena_aliases_and_brackets(game: str, content: str, legal: list[str], move: str | None) -> None:
    answer = textarena_server.matcher(game).match(f"<action>{content}</action>", legal)
    assert answer.action == move and answer.content == content
    if move is None:
        assert answer.reason == f'"{content}" is not an available move; available: {", ".join(legal)}'


def test_scienceworld_passes_the_spaced_command_on_and_refuses_reset_task() -> None:
    m = scienceworld_server.ANSWERS
    assert m.match("<action>Open   door to Kitchen</action>", None) == Answer("Open door to Kitchen", "Open   door to Kitchen")
    assert m.match("<action>RESET  task</action>", None) == Answer(None, "RESET  task", "`reset task` is not allowed")
    assert m.refused("fly to the moon") == '"fly to the moon" is not a command ScienceWorld understands'


def test_the_first_legal_action_with_the_key_wins_and_braces_in_an_answer_are_quoted_as_written() -> None:
    m = Matcher('"{content}" is not one of {legal}', quote=10)
    assert m.match("<action>ab</action>", ["x", "AB", "ab"]).action == "AB"
    assert m.match("<action>{legal} {0}</action>", ["x", "y"]).reason == '"{legal} {0" is not one of x, y'
    assert m.match("<action>ab</action>", []).reason == '"ab" is not one of '
