"""Syntax errors in words: what the parser expected, named the way a user writes it.

Lark reports terminal names (RPAR, __ANON_3, _NL); here they become ``')'``, ``a new line``,
``an expression``, and a few common slips get a specific hint.
"""

from __future__ import annotations

import re

from lark import Lark, Token, Tree
from lark.exceptions import (
    LarkError,
    UnexpectedCharacters,
    UnexpectedEOF,
    UnexpectedInput,
    UnexpectedToken,
)

from ccl.core.units import BANDWIDTH_UNITS, SIZE_UNITS, TIME_UNITS

NAMED = {
    "NAME": "a name",
    "SOLVER_NAME": "a solver name",
    "NUMBER": "a number",
    "UNIT": "a unit",
    "STRING": "a string",
    "_NL": "a new line",
    "$END": "the end of the file",
    "STAR": "'*'",
    "SUM": "'sum'",
}
EXPRESSION_START = {"NAME", "NUMBER", "STRING", "LPAR", "LSQB", "MINUS", "PLUS", "TILDE", "NOT", "TRUE", "FALSE"}
OPERATORS = {"==", "!=", "<", "<=", ">", ">=", "in", "not", "..", "|", "^", "&", "<<", ">>", "+", "-", "*",
             "/", "//", "%", "**", "(", "[", ".", "if", "or", "and"}
UNITS = sorted(set(SIZE_UNITS) | set(TIME_UNITS) | set(BANDWIDTH_UNITS), key=lambda u: (len(u), u))
_WORD = re.compile(r"[A-Za-z][A-Za-z/]*")


def _pattern(parser: Lark, name: str) -> str | None:
    try:
        term = parser.get_terminal(name)
    except KeyError:
        return None
    if term.pattern.type == "str":
        return term.pattern.value
    return None


def _expected_words(expected: set[str], parser: Lark) -> list[str]:
    names = set(expected)
    words: list[str] = []
    literal = {n: _pattern(parser, n) for n in names}
    keywords = {n for n, text in literal.items() if text and text.isidentifier()}
    if names & {"NAME", "NUMBER", "STRING"} and len(names & EXPRESSION_START) >= 4:
        words.append("an expression")
        names -= EXPRESSION_START
        names -= {n for n in keywords if literal[n] in ("not", "true", "false")}
    statement_words = {n for n in keywords if literal[n] in _STATEMENT_WORDS}
    if len(statement_words) >= 6:
        words = ["a statement"]
        names -= statement_words
        names -= EXPRESSION_START
    operators = {n for n in names if literal.get(n) in OPERATORS}
    if len(operators) >= 6:
        words.append("an operator")
        names -= operators
    if "_NL" in names:
        names -= {"_NL", "$END", "SEMICOLON", "RBRACE"}
        words.append("the end of the statement")
    for name in sorted(names, key=lambda n: (n not in NAMED, literal.get(n) or n)):
        if name in NAMED:
            words.append(NAMED[name])
        elif literal.get(name) is not None:
            words.append(f"'{literal[name]}'")
        else:
            words.append(name.lower())
    return words


_STATEMENT_WORDS = {
    "import", "from", "topology", "collective", "algorithm", "fabric", "link", "let", "for", "if",
    "require", "synthesize", "verify", "ranks", "name", "node_of", "switch", "nic", "node", "limit",
    "pre", "post", "copy", "reduce", "step", "rounds",
}


def _join(words: list[str]) -> str:
    if len(words) > 7:
        words = words[:6] + ["..."]
    if len(words) == 1:
        return words[0]
    return ", ".join(words[:-1]) + " or " + words[-1]


def _found(token) -> str:
    kind, value = token.type, str(token.value)
    if kind == "_NL":
        return "the end of the line"
    if kind == "$END":
        return "the end of the file"
    if kind in ("NAME", "SOLVER_NAME"):
        return f"name '{value}'"
    if kind == "NUMBER":
        return f"number {value}"
    if kind == "STRING":
        return f"string {value}"
    if kind == "UNIT":
        return f"unit '{value}'"
    return f"'{value}'"


def _end_position(text: str) -> tuple[int, int]:
    lines = text.split("\n")
    while len(lines) > 1 and not lines[-1].strip():
        lines.pop()
    return len(lines), len(lines[-1]) + 1


def _unclosed(text: str) -> tuple[str, int, int] | None:
    """The innermost bracket never closed (outside strings and comments): (char, line, column)."""
    stack: list[tuple[str, int, int]] = []
    line, col = 1, 0
    in_string = in_comment = False
    prev = ""
    for ch in text:
        col += 1
        if ch == "\n":
            line, col, in_comment, in_string = line + 1, 0, False, False
        elif in_comment:
            pass
        elif in_string:
            if ch == '"' and prev != "\\":
                in_string = False
        elif ch == "#":
            in_comment = True
        elif ch == '"':
            in_string = True
        elif ch in "{([":
            stack.append((ch, line, col))
        elif ch in "})]" and stack:
            stack.pop()
        prev = ch
    return stack[-1] if stack else None


def _expected(exc: UnexpectedInput) -> set[str]:
    """Terminals the parser accepts where it stopped (not the lexer's wider set, nor the merged
    look-ahead of an LALR state: each candidate is tried on a copy of the parser)."""
    interactive = getattr(exc, "interactive_parser", None)
    if interactive is not None:
        try:
            return set(interactive.accepts())
        except LarkError:  # lark could not replay a candidate on its parser copy: use the table below
            pass
    state = getattr(exc, "state", None)
    try:
        table = state.parse_conf.parse_table.states[state.position]
        return {name for name in table if name.isupper() or name.startswith("_") or name == "$END"}
    except AttributeError:
        return set(getattr(exc, "expected", ()) or ())


def _previous(exc: UnexpectedInput):
    history = getattr(exc, "token_history", None)
    if history and history[-1] is not None:
        return history[-1]
    state = getattr(exc, "state", None)
    stack = getattr(state, "value_stack", None)
    item = stack[-1] if stack else None
    while isinstance(item, Tree) and item.children:
        item = item.children[-1]
    return item if isinstance(item, Token) else None


ENDS_EXPRESSION = {"NUMBER", "UNIT", "NAME", "STRING", "RPAR", "RSQB"}
STARTS_EXPRESSION = {"NUMBER", "NAME", "STRING"}
_KEYWORD_LINK = re.compile(r"(?:^|[{;]|\bfor\b.*\{)\s*(" + "|".join(sorted(_STATEMENT_WORDS)) + r")\s*<?->")


def describe_syntax_error(exc: UnexpectedInput, text: str, parser: Lark, what: str = "file") -> tuple[str, int, int, int]:
    """(message, line, column, width) for a Lark parse error; ``what`` names the text
    ("file", or "expression" for one inside a string)."""
    lines = text.split("\n")
    prev = _previous(exc)
    if isinstance(exc, UnexpectedCharacters):
        line, col = exc.line, exc.column
        rest = lines[line - 1][col - 1:] if 0 < line <= len(lines) else ""
        before = lines[line - 1][:col - 1].rstrip() if 0 < line <= len(lines) else ""
        word = _WORD.match(rest)
        if word and before and before[-1].isdigit():
            return _unknown_unit(word.group(0), line, col)
        ch = rest[:1] or "?"
        if ch == "'":
            return ("strings are written in double quotes: \"...\"", line, col, 1)
        if ch == '"':
            return ("this string is not closed on its line", line, col, max(1, len(rest)))
        return (f"unexpected character '{ch}'", line, col, 1)
    expected = _expected(exc)
    if isinstance(exc, UnexpectedEOF) or (isinstance(exc, UnexpectedToken) and exc.token.type == "$END"):
        opened = _unclosed(text)
        if opened is not None:
            ch, line, col = opened
            close = {"{": "}", "(": ")", "[": "]"}[ch]
            return (f"this '{ch}' is never closed: the {what} ends before its '{close}'", line, col, 1)
        line, col = _end_position(text)
        words = _expected_words(expected, parser) if expected else []
        tail = f"; expected {_join(words)}" if words else ""
        return (f"the {what} ends in the middle of a statement{tail}" if what == "file"
                else f"the {what} ends too early{tail}", line, col, 1)
    if not isinstance(exc, UnexpectedToken):
        return (f"cannot parse: {exc}", getattr(exc, "line", 1) or 1, getattr(exc, "column", 1) or 1, 1)
    tok = exc.token
    line, col = tok.line, tok.column
    width = max(1, len(str(tok.value))) if tok.type != "_NL" else 1
    value = str(tok.value)
    src_line = lines[line - 1] if 0 < line <= len(lines) else ""
    prev_type = getattr(prev, "type", "")
    prev_value = str(getattr(prev, "value", ""))
    if prev_value == "else" and prev_type == "NAME":
        return ("'else' must follow the '}' of its 'if' on the same line", prev.line, prev.column, 4)
    if value == "else" and tok.type != "NAME":
        return ("'else' must follow the '}' of its 'if' on the same line", line, col, width)
    if value == "}" and "RBRACE" not in expected:
        return ("this '}' closes no block", line, col, width)
    if tok.type in ("NAME", "SOLVER_NAME") and prev_type == "NUMBER" and "UNIT" in expected:
        unit = _WORD.match(src_line[col - 1:])
        return _unknown_unit(unit.group(0) if unit else value, line, col)
    keyword_link = _KEYWORD_LINK.search(src_line)
    if keyword_link and tok.type not in ("_NL", "$END"):
        word = keyword_link.group(1)
        start = keyword_link.start(1) + 1
        return (f"'{word}' starts a statement, so a link cannot start with a variable of that name; "
                f"write ({word}) instead", line, start, len(word))
    words = _expected_words(expected, parser)
    message = f"expected {_join(words)}, found {_found(tok)}" if words else f"unexpected {_found(tok)}"
    if "COLON" in expected and tok.type in ("_NL", "$END", "RBRACE", "SEMICOLON") and "->" in src_line:
        message = "a link needs ':' and its properties after its ends, e.g. `0 -> 1 : 25 GB/s, 0.7 us`"
    elif tok.type == "NAME" and value in UNITS and prev_type != "NUMBER":
        message += f" (a unit goes right after a number: 25 {value})"
    elif tok.type in STARTS_EXPRESSION and prev_type in ENDS_EXPRESSION:
        message += " (is an operator or a ',' missing before it?)"
    return (message, line, col, width)


def _unknown_unit(unit: str, line: int, col: int) -> tuple[str, int, int, int]:
    return (f"unknown unit '{unit}' (known units: {', '.join(UNITS)})", line, col, len(unit))
