"""The answer-matching step the adapters share: an agent's raw response → the legal action it names,
or why it names none.

Every adapter does the same three things with an answer before its engine sees it: parse it as
mage does (`protocol.action_content`: the first complete `<action>` tag after the reasoning), find
the legal action it names, and otherwise refuse it with a reason the agent is told (the adapter
then answers `protocol.invalid_step`). What counts as naming an action differs by environment and
is a `Matcher`'s parameters:

- `answer_key`: the key of the tag's content, given the legal list (an alias may depend on it:
  TextArena's Kuhn `PASS` is `[fold]` when facing a bet, `[check]` otherwise);
- `legal_key`: the key of a legal action; the answer names the first legal action with its key;
- `refusal`: the reason when none matches, a template with `{content}` (the content, its first
  `quote` characters) and `{legal}` (the legal actions, comma-separated);
- `forbid`: a reason to refuse a key whatever the legal list says (ScienceWorld's `reset task`).

An environment whose engine judges the command itself (ScienceWorld has no list of legal commands)
matches against `legal=None`: the answer's key is passed on as the action, and the adapter refuses
what its engine does not understand with `Matcher.refused`.
"""

from __future__ import annotations

from collections.abc import Callable, Sequence
from dataclasses import dataclass

from .protocol import action_content, normalise


@dataclass(frozen=True)
class Answer:
    """What an answer names: `action` as the legal list spells it (None: refused, with `reason`);
    `content` is the `<action>` tag's content as written (None when there is no such tag)."""

    action: str | None
    content: str | None
    reason: str = ""


def spaced_lower(content: str, legal: Sequence[str] = ()) -> str:
    """Lower case, whitespace runs as one space, trimmed (ALFWorld's and TextWorldExpress's key)."""
    return " ".join(content.lower().split())


def spaced(content: str, legal: Sequence[str] = ()) -> str:
    """Whitespace runs as one space, trimmed, the case kept (ScienceWorld's command)."""
    return " ".join(content.split())


def unspaced_lower(content: str, legal: Sequence[str] = ()) -> str:
    """Lower case without any whitespace (`protocol.normalise`: OpenSpiel's key, both sides)."""
    return normalise(content)


def as_written(action: str) -> str:
    """A legal action's key when the legal list is already in the answer key's form (ALFWorld's
    admissible commands are lower case and singly spaced)."""
    return action


def nothing_forbidden(key: str) -> str | None:
    return None


@dataclass(frozen=True)
class Matcher:
    """How one environment's answers name its legal actions (see the module's docstring)."""

    refusal: str
    quote: int = 80
    answer_key: Callable[[str, Sequence[str]], str] = spaced_lower
    legal_key: Callable[[str], str] = str.lower
    forbid: Callable[[str], str | None] = nothing_forbidden

    def match(self, response: str, legal: Sequence[str] | None) -> Answer:
        """The legal action the raw `response` names, or the reason it names none."""
        content, reason = action_content(response)
        if content is None:
            return Answer(None, None, reason)
        key = self.answer_key(content, legal or ())
        forbidden = self.forbid(key)
        if forbidden is not None:
            return Answer(None, content, forbidden)
        if legal is None:
            return Answer(key, content)
        action = next((a for a in legal if self.legal_key(a) == key), None)
        if action is None:
            return Answer(None, content, self.refused(content, legal))
        return Answer(action, content)

    def refused(self, text: str, legal: Sequence[str] = ()) -> str:
        """The refusal for `text` (quoted to `quote` characters)."""
        return self.refusal.format(content=text[: self.quote], legal=", ".join(legal))
