"""TextWorld's text generation for PDDL games, at a fraction of its cost and with the same text.

Every game step TextWorld derives the feedback and every admissible command from the game's
context-sensitive grammar (`textworld.envs.pddl.textgen.ContextSensitiveGrammar.derive`), and
profiling a step (docs/environments.md, *Step cost*) found that nearly all of its time goes to
work whose result never changes:

- each template and each rule's condition is parsed anew by tatsu at every use (the same few
  hundred strings, every step);
- each symbol's context is deep-copied, entity descriptions and variables included, although
  nothing in the derivation changes them (the grammar's `{…}` expressions only read attributes such
  as `r.name`; a query adds new entries to its own copy of the dictionaries).

`FastGrammar` derives the same way (the same symbol classes, the same stack order, the same rule
choice: the first whose condition holds) with the parses memoized by their text and the contexts'
dictionaries copied one level deep. `speed_up(pddl_env)` switches one environment's grammar (each
`PddlEnv.load` builds its own); nothing global is patched, so ALFWorld's own `AlfredTWEnv`, which
the cross-check compares against, still runs TextWorld's code (`alfworld_crosscheck.py`,
`python/tests/test_alfworld_server.py`).
"""

from __future__ import annotations

import copy
from typing import Any

from textworld.envs.pddl import textgen
from textworld.envs.pddl.textgen import (ConditionalSymbol, ContextSensitiveGrammar, EvalSymbol, ListSymbol,
                                         NonterminalSymbol, TerminalSymbol)
from textworld.logic import Rule

_MODELS: dict[str, Any] = {}
_QUERIES: dict[str, Any] = {}


def symbols(text: str) -> list[Any]:
    """The symbols of a grammar text, as `textgen._parse_and_convert(text, rule_name="symbols")`
    gives them: fresh objects each call (the derivation sets their contexts), from a parse kept."""
    model = _MODELS.get(text)
    if model is None:
        model = _MODELS[text] = textgen._PARSER.parse(text, rule_name="symbols")
    out: list[Any] = textgen._Converter().walk(model)
    return out


def query(expression: str) -> Any:
    """`Rule.parse_conjunctive_query(expression)`, kept (the rule is only read)."""
    rule = _QUERIES.get(expression)
    if rule is None:
        rule = _QUERIES[expression] = Rule.parse_conjunctive_query(expression)
    return rule


def copy_context(context: dict[str, Any]) -> dict[str, Any]:
    """`textgen.copy_context` without the deep copies: new `variables` and `mapping` dictionaries
    holding the same (never changed) entity descriptions, placeholders and variables."""
    return {
        "state": context["state"],
        "facts": context["facts"],
        "variables": dict(context["variables"]),
        "mapping": dict(context["mapping"]),
        "entity_infos": context["entity_infos"],
    }


def _assignments(expression: str, context: dict[str, Any]) -> list[dict[str, Any]]:
    """`textgen.query`: a context for each way the state satisfies the expression."""
    out = []
    for mapping in context["state"].all_assignments(query(expression), context["mapping"]):
        derived = copy_context(context)
        derived["variables"].update({ph.name: derived["entity_infos"][var.name] for ph, var in mapping.items()})
        derived["mapping"].update(mapping)
        out.append(derived)
    return out


def _copied(symbol: Any, context: dict[str, Any]) -> Any:
    """`Symbol.copy`: a deep copy of the symbol (its own context left out: it is replaced) given
    a copy of `context`."""
    twin = copy.deepcopy(symbol, {id(symbol.context): symbol.context})
    twin.context = copy_context(context)
    return twin


class FastGrammar(ContextSensitiveGrammar):  # type: ignore[misc]
    """`ContextSensitiveGrammar` whose `derive` and `replace` give the same text faster (see the
    module's doc)."""

    def _conditional(self, symbol: Any) -> list[Any]:
        if len(symbol.context) == 0:
            raise ValueError("Empty context")
        context = copy_context(symbol.context)
        contexts = _assignments(symbol.given, context) if symbol.given else [context]
        return [_copied(symbol.expression, c) for c in contexts]

    def _expand(self, symbol: Any) -> list[Any]:
        """What one non-terminal symbol becomes (TextWorld's `derive` of each symbol class)."""
        if isinstance(symbol, NonterminalSymbol):
            return self.replace(symbol)
        if isinstance(symbol, ConditionalSymbol):
            return self._conditional(symbol)
        if isinstance(symbol, ListSymbol):
            context = symbol.context
            symbol.symbol.context = context
            inner = self._conditional(symbol.symbol) if isinstance(symbol.symbol, ConditionalSymbol) else symbol.symbol.derive()
            return list(textgen.display_list(inner, context))
        if isinstance(symbol, EvalSymbol):
            return list(symbol.derive())
        raise NotImplementedError(f"Unknown symbol: {type(symbol)}")

    def replace(self, start: Any) -> list[Any]:
        rules = self._rules.get(str(start))
        if not rules:
            raise textgen.CSGUnknownSymbolError(start)
        state, mapping = start.context["state"], start.context["mapping"]
        # The first rule whose condition holds (conditions only read the state).
        for rule in rules:
            if not rule.condition or next(iter(state.all_assignments(query(rule.condition), mapping)), None) is not None:
                break
        else:
            raise IndexError(f"no rule for #{start}# applies")
        out = copy.deepcopy(rule.rhs)
        for symbol in out:
            symbol.context = copy_context(start.context)
        return list(out)

    def derive(self, start: str, context: dict[str, Any] | None = None) -> str:
        stack = symbols(start)[::-1]
        for symbol in stack:
            symbol.context = copy_context(context if context is not None else {})
        derived: list[str] = []
        while stack:
            symbol = stack.pop()
            if isinstance(symbol, TerminalSymbol):
                derived.append(str(symbol))
            else:
                stack += self._expand(symbol)[::-1]
        return "".join(derived)


def speed_up(pddl_env: Any) -> None:
    """Switches a loaded TextWorld `PddlEnv`'s grammar to `FastGrammar` (the same rules, kept)."""
    grammar = pddl_env._logic.grammar
    if type(grammar) is ContextSensitiveGrammar:
        grammar.__class__ = FastGrammar
