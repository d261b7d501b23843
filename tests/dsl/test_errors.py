"""Golden error messages: every case under cases/errors is a description with one mistake; its
rendered error (file:line:col: message, the source line, a caret) must match the golden file."""

from __future__ import annotations

import pytest

import dsl
from ccl.core.errors import DslError

from .conftest import CASES, GOLDEN, check_golden, lower_everything

ERROR_CASES = sorted(p.stem for p in (CASES / "errors").glob("*.ccl"))


def test_there_are_many_distinct_error_cases():
    assert len(ERROR_CASES) >= 25


@pytest.mark.parametrize("name", ERROR_CASES)
def test_error_message(name, monkeypatch):
    monkeypatch.chdir(CASES / "errors")
    with pytest.raises(DslError) as info:
        lower_everything(dsl.load(f"{name}.ccl", max_steps=100_000))
    err = info.value
    rendered = err.render()
    head, source, caret = rendered.split("\n")
    assert head.startswith(f"{err.span.file}:{err.span.line}:{err.span.column}: ")
    assert caret.strip() and set(caret.strip()) == {"^"}
    assert caret.index("^") == 4 + err.span.column - 1  # the caret sits under the column
    for word in ("RPAR", "LPAR", "__ANON", "_NL", "LSQB", "Token(", "lark"):
        assert word not in err.message
    check_golden(GOLDEN / "errors" / f"{name}.txt", rendered + "\n")


def test_error_messages_are_distinct():
    messages = set()
    for path in sorted((GOLDEN / "errors").glob("*.txt")):
        messages.add(path.read_text().split("\n")[0].split(": ", 1)[1])
    assert len(messages) >= 25


def test_json_form_of_a_dsl_error(monkeypatch):
    monkeypatch.chdir(CASES / "errors")
    with pytest.raises(DslError) as info:
        lower_everything(dsl.load("rank_out_of_range.ccl"))
    data = info.value.to_json()
    assert data["error"] == "DslError" and data["exit_code"] == 2
    assert (data["file"], data["line"], data["column"]) == ("rank_out_of_range.ccl", 3, 25)


def test_runaway_loops_stop_with_an_error():
    text = "let xs = [i for i in 0..1000000000]\n"
    with pytest.raises(DslError, match="more than 10000 steps of work") as info:
        dsl.load_string(text, "runaway.ccl", max_steps=10_000)
    assert info.value.span.line == 1


def test_errors_in_imported_files_point_at_the_user_line():
    text = "from basic import ring\nsynthesize allgather on ring(1)\n"
    with pytest.raises(DslError) as info:
        dsl.load_string(text, "user.ccl").requests()
    err = info.value
    assert err.span.file == "user.ccl" and err.span.line == 2
    assert "raised in topology ring at topologies/basic.ccl" in err.message
