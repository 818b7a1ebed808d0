"""Regressions found by fuzzing (tests/reliability): odd space files and expressions get one `SpaceError` /
`ExprError` naming the problem — no other exception, no hang, no exhausted memory, no point that renders
with a world size that is not a positive integer."""

import pytest

from maya.search import Expr, ExprError, SpaceError, load_space

CMD = ["t.py", "{tp}"]


@pytest.mark.parametrize(
    "source, env, message",
    [
        ('"ab" * 99999999999', {}, "longer than 100,000 characters"),  # was a MemoryError (or the machine's memory)
        ("x * 100000", {"x": "abcdefgh"}, "longer than"),
        ('"%999999999d" % 1', {}, "mod of str"),  # string formatting
        ("tp + 1", {"tp": "a"}, "add of str 'a' and int 1"),  # was TypeError
        ("tp < 2", {"tp": "a"}, "cannot order str"),
        ("-tp", {"tp": [1]}, "usub of list"),
        ("tp * 2", {"tp": [1]}, "mult of list"),  # list repetition
        ("tp % 0", {"tp": 3}, "divides by zero"),
        ("1e308 * 10", {}, "not a finite number"),
        ("+".join(["tp"] * 3000), {"tp": 1}, "parser can read|nested more than"),  # was RecursionError
        ("-" * 5000 + "1", {}, "parser can read|nested more than"),
        ("tp\x00", {"tp": 1}, "null bytes"),  # a ValueError on some Pythons
        ("x" * 20000, {}, "longer than 10,000 characters"),
    ],
)
def test_expressions_fail_with_expr_errors(source, env, message):
    with pytest.raises(ExprError, match=message):
        Expr(source)(env)


def test_string_joins_and_bounded_repetition_still_work():
    assert Expr('"a" * n + "b"')({"n": 3}) == "aaab"
    assert Expr("tp == 'x'")({"tp": "x"}) is True


@pytest.mark.parametrize(
    "spec, command, message",
    [
        ({"parameters": {0: [1, 2]}}, CMD, "parameter name 0 is not an identifier"),  # was AttributeError
        ({"parameters": {"and": [1, 2]}}, ["t.py", "{and}"], "not an identifier"),
        (
            {"parameters": {"tp": [1, 2]}, 1: "x", "a": 2},
            CMD,
            r"unknown section\(s\) \['1', 'a'\]",
        ),  # sorting mixed keys
        ({"parameters": {"tp": {"values": [1], 2: 0, "x": 1}}}, CMD, "unknown key"),
        ({"parameters": {"tp": [1, 2]}, "derived": ["dp"]}, CMD, "`derived:` must map"),  # was AttributeError
        ({"parameters": {"tp": [1, 2]}, "constraints": "tp > 1"}, CMD, "must be a list"),  # iterated characters
        ({"parameters": {"tp": [1, 2]}, "constraints": 3}, CMD, "must be a list"),  # was TypeError
        ({"parameters": {"tp": [1, 2]}, "derived": {"dp": "tp + 'a'"}}, ["t.py", "{tp}", "{dp}"], "add of int"),
        ({"parameters": {"tp": {"values": [1, 2], "env": ["A"]}}}, ["t.py"], "not an environment variable"),
        ({"parameters": {"tp": {"values": [1, 2], "flag": 3}}}, CMD, "not a command-line argument"),
        ({"parameters": {"tp": {"values": [1, 2], "args": [1]}}}, CMD, "must map each value"),
        ({"parameters": {"tp": {"values": [1, 2], "args": {1: []}}}}, CMD, "no words for the value 2"),
        ({"parameters": {"tp": {"values": [1, 2], "args": {1: [], "2": []}}}}, CMD, "no words for the value 2"),
        ({"parameters": {"tp": {"values": [1, 2], "args": {1: [], 2: "--tp 2"}}}}, CMD, "not a list of words"),
        ({"parameters": {"tp": {"values": [1, 2], "args": {1: [], 2: [True]}}}}, CMD, "not a list of words"),
        ({"parameters": {"tp": {"values": [1, 2], "args": {1: [], 2: []}, "env": "TP"}}}, CMD, "one of `args:`"),
        ({"parameters": {"tp": {"values": [1, 2], "args": {1: [], 2: []}}}}, ["t.py", "--tp={tp}"], "of its own"),
        ({"parameters": {"tp": [1, 2]}}, ["t.py", "{tp:>999999999}"], "plain {name}"),  # huge format widths
        ({"parameters": {"tp": ["a", "b"]}}, ["t.py", "{tp:d}"], "plain {name}"),  # was ValueError at render
        ({"parameters": {"tp": [1, 2]}}, ["t.py", "{tp!r}"], "plain {name}"),
        ({"parameters": {"gpus": [0, 8], "tp": [1]}}, CMD, "number of GPUs .* is 0"),
        ({"parameters": {"gpus": ["eight"], "tp": [1]}}, CMD, "not a positive integer"),  # was ValueError
        ({"parameters": {"tp": [1, 2]}, "tokens_per_iteration": "'many'"}, CMD, "not a non-negative number"),
        (
            {"parameters": {f"p{i}": list(range(10)) for i in range(8)}},
            ["t.py", *(f"{{p{i}}}" for i in range(8))],
            "100,000,000 points",
        ),  # enumerated forever
    ],
)
def test_bad_spaces_fail_with_one_space_error(spec, command, message):
    with pytest.raises(SpaceError, match=message):
        load_space(spec, command, gpus=8)


def test_gpus_true_is_not_a_gpu_count():
    with pytest.raises(SpaceError, match="number of GPUs"):
        load_space({"parameters": {"tp": [1]}, "gpus": True}, CMD)


@pytest.mark.parametrize(
    "text, message",
    [
        (b"parameters:\n  tp: [1, \xc2]\n", "not UTF-8"),  # was UnicodeDecodeError
        (b"parameters: " + b"[" * 5000 + b"]" * 5000, "nested too deeply|at least one parameter"),  # RecursionError
        (b"parameters: &a {tp: [*a]}\n", "contains itself"),
        (
            b"a: &a [1,1,1,1,1,1,1,1,1]\nb: &b [*a,*a,*a,*a,*a,*a,*a,*a,*a]\nc: &c [*b,*b,*b,*b,*b,*b,*b,*b,*b]\n"
            b"d: &d [*c,*c,*c,*c,*c,*c,*c,*c,*c]\ne: &e [*d,*d,*d,*d,*d,*d,*d,*d,*d]\nf: &f [*e,*e,*e,*e,*e,*e,*e,*e,*e]\n"
            b"parameters:\n  tp: [1, 2]\n  x: *f\n",
            "expands to more than 100,000 values",
        ),  # a billion laughs
    ],
)
def test_bad_yaml_space_files(tmp_path, text, message):
    path = tmp_path / "space.yaml"
    path.write_bytes(text)
    with pytest.raises(SpaceError, match=message):
        load_space(path, ["t.py", "{tp}", "{x}"], gpus=8)
