"""Search spaces and their expressions as `maya search` reads them: generated space mappings (parameters with
any names, values, roles, env and flags; derived values, constraints and tokens from a grammar of allowed
and refused expressions; odd sections), commands with placeholders, and YAML text — valid, mutated byte
by byte, nested deeply or expanding through aliases. A space is refused with a `SpaceError` or every point
of it renders, sizes and prices; an expression parses and evaluates or raises an `ExprError`."""

from __future__ import annotations

import tempfile
from dataclasses import dataclass
from pathlib import Path
from typing import Any

import yaml
from hypothesis import strategies as st
from reliability.harness import Corrupt, Surface

from maya.search.expr import Expr, ExprError
from maya.search.space import ROLES, SpaceError, load_space

NAMES = ["tp", "pp", "mbs", "gpus", "dp", "recompute", "x"]
odd_names = st.one_of(
    st.sampled_from(NAMES),
    st.sampled_from(["", "1x", "a b", "and", "True", "__class__", "é"]),
    st.integers(-2, 2),
    st.none(),
    st.text(max_size=6),
)
scalar = st.one_of(
    st.integers(-4, 64),
    st.integers(-(1 << 70), 1 << 70),
    st.floats(allow_nan=True),
    st.text(max_size=8),
    st.booleans(),
    st.none(),
)
value = st.recursive(
    scalar,
    lambda inner: st.one_of(st.lists(inner, max_size=3), st.dictionaries(st.text(max_size=4), inner, max_size=2)),
    max_leaves=6,
)


def _expression(depth: int = 3) -> st.SearchStrategy[str]:
    atom = st.one_of(
        st.sampled_from(NAMES),
        st.integers(-5, 1 << 40).map(str),
        st.floats(0, 1e308).map(repr),
        st.sampled_from(['"ab"', "'x'", "True", "None", "[]", "{}", "1e999", "999999999999999999999"]),
    )
    if depth == 0:
        return atom
    inner = _expression(depth - 1)
    return st.one_of(
        atom,
        st.builds(
            lambda a, op, b: f"{a} {op} {b}",
            inner,
            st.sampled_from(
                [
                    "+",
                    "-",
                    "*",
                    "//",
                    "%",
                    "==",
                    "!=",
                    "<",
                    ">=",
                    "and",
                    "or",
                    "/",
                    "**",
                    "<<",
                    "&",
                    "@",
                    "if 1 else",
                    "in",
                ]
            ),
            inner,
        ),
        st.builds(lambda op, a: f"{op}{a}", st.sampled_from(["-", "+", "not ", "~"]), inner),
        st.builds(lambda a: f"({a})", inner),
        st.builds(lambda f, a: f"{f}({a})", st.sampled_from(["len", "__import__", "open", "print"]), inner),
        st.builds(lambda a: f"{a}.__class__", inner),
        st.builds(lambda a: f"{a}[0]", inner),
        st.builds(lambda a: f"lambda: {a}", inner),
        st.builds(lambda n, a: "(" * n + a + ")" * n, st.integers(0, 400), inner),
        st.builds(lambda n, a: "-" * n + a, st.integers(0, 3000), inner),
        st.builds(lambda n: "+".join(["tp"] * n), st.integers(1, 6000)),
        st.builds(
            lambda a, n: f"{a} * {n}",
            st.sampled_from(['"ab"', "'x' * 1000", "tp"]),
            st.sampled_from(["10", "99999999999", "tp", "-1"]),
        ),
        st.text(max_size=12),
    )


expressions = _expression()
numbers = st.one_of(st.integers(-4, 64), st.integers(-(1 << 70), 1 << 70), st.floats(allow_nan=True), st.booleans())
envs = st.one_of(
    st.fixed_dictionaries({n: numbers for n in NAMES}), st.dictionaries(st.sampled_from(NAMES), value, max_size=5)
)


@dataclass(frozen=True)
class ExprInput:
    source: Any
    env: dict


def check_expr(x: ExprInput) -> None:
    expr = Expr(x.source)
    result = expr(x.env)
    if isinstance(result, str) and len(result) > 1_000_000:
        raise Corrupt(f"a string of {len(result):,} characters")


parameter_body = st.one_of(
    st.lists(value, max_size=4),
    st.fixed_dictionaries(
        {},
        optional={
            "values": st.one_of(st.lists(value, max_size=4), value),
            "role": st.one_of(st.sampled_from(ROLES), value),
            "env": st.one_of(st.sampled_from(["MAYA_X", "A B", "", "1X"]), value),
            "flag": st.one_of(st.sampled_from(["--on", ""]), value),
            "other": value,
        },
    ),
    value,
)
spaces = st.fixed_dictionaries(
    {
        "parameters": st.one_of(
            st.dictionaries(odd_names, parameter_body, min_size=1, max_size=4),
            st.dictionaries(
                st.sampled_from(NAMES[:3]),
                st.lists(st.integers(1, 8), min_size=1, max_size=3, unique=True),
                min_size=1,
                max_size=3,
            ),
        )
    },
    optional={
        "derived": st.one_of(st.dictionaries(odd_names, expressions, max_size=3), value),
        "constraints": st.one_of(st.lists(expressions, max_size=3), expressions, value),
        "gpus": st.one_of(st.integers(-2, 4096), value),
        "tokens_per_iteration": st.one_of(expressions, value),
        "extra": value,
    },
)
commands = st.lists(
    st.one_of(
        st.sampled_from(
            [
                "train.py",
                "--tp",
                "{tp}",
                "--pp={pp}",
                "{mbs}",
                "{x}",
                "{gpus}",
                "{tp:>5}",
                "{tp!r}",
                "{tp.real}",
                "{tp[0]}",
                "{",
                "}",
                "{{}}",
                "{}",
                "{0}",
                "{recompute}",
            ]
        ),
        st.text(max_size=6),
    ),
    min_size=1,
    max_size=6,
)


@dataclass(frozen=True)
class SpaceInput:
    spec: Any
    command: list
    gpus: Any
    yaml_text: str | None = None
    """Load from this YAML text (written to a file) instead of `spec`."""
    raw: tuple[tuple[int, int], ...] = ()
    """(position, byte) edits of the YAML file's bytes."""


def _valid(parameters: dict, derived: dict, constraints: list, tokens: str | None) -> dict:
    spec = {"parameters": parameters, "derived": derived, "constraints": constraints}
    return {**spec, "tokens_per_iteration": tokens} if tokens is not None else spec


near_valid_expr = st.one_of(
    st.builds(
        lambda a, op, b: f"{a} {op} {b}",
        st.sampled_from(["tp", "pp", "mbs", "gpus", "8", "tp * pp"]),
        st.sampled_from(["*", "//", "%", "+", "-", "<=", ">", "==", "!="]),
        st.sampled_from(["tp", "pp", "mbs", "gpus", "0", "2", "1024"]),
    ),
    expressions,
)
near_valid = st.builds(
    _valid,
    st.fixed_dictionaries(
        {"tp": st.lists(st.integers(0, 8), min_size=1, max_size=3, unique=True)},
        optional={
            "pp": st.lists(st.integers(1, 4), min_size=1, max_size=3, unique=True),
            "mbs": st.fixed_dictionaries(
                {"values": st.lists(st.integers(1, 8), min_size=1, max_size=3, unique=True)},
                optional={"env": st.just("MBS"), "role": st.sampled_from(ROLES)},
            ),
            "gpus": st.lists(st.integers(-2, 64), min_size=1, max_size=3, unique=True),
            "recompute": st.fixed_dictionaries({"values": st.just([True, False]), "flag": st.just("--recompute")}),
        },
    ),
    st.dictionaries(st.sampled_from(["dp", "x"]), near_valid_expr, max_size=2),
    st.lists(near_valid_expr, max_size=2),
    st.one_of(st.none(), near_valid_expr),
)


@st.composite
def edited(draw, base: st.SearchStrategy) -> dict:
    """A space, with up to two of its entries replaced by anything."""
    spec = dict(draw(base))
    for _ in range(draw(st.sampled_from([0, 0, 1, 2]))):
        section = draw(st.sampled_from(sorted(spec)))
        if isinstance(spec[section], dict) and spec[section] and draw(st.booleans()):
            key = draw(st.sampled_from(sorted(spec[section], key=str)))
            spec[section] = {**spec[section], key: draw(st.one_of(value, parameter_body))}
        else:
            spec[section] = draw(value)
    return spec


def command_for(spec: Any) -> list[str]:
    """A command with a placeholder for every parameter and derived value the space names."""
    names = [
        n
        for section in ("parameters", "derived")
        if isinstance(spec, dict) and isinstance(spec.get(section), dict)
        for n in spec[section]
        if isinstance(n, str)
    ]
    return ["train.py", *(f"--{n}={{{n}}}" for n in names)]


@st.composite
def near_valid_inputs(draw) -> SpaceInput:
    spec = draw(near_valid)
    command = command_for(spec)  # before any edit: an edit may leave a placeholder without its parameter
    return SpaceInput(draw(edited(st.just(spec))), command, draw(st.one_of(st.just(8), st.none(), st.integers(-1, 64))))


YAML_ODDITIES = [
    "parameters: &a [*a]",
    "a: &a [1,1,1,1,1,1,1,1,1]\nb: &b [*a,*a,*a,*a,*a,*a,*a,*a,*a]\nc: &c [*b,*b,*b,*b,*b,*b,*b,*b,*b]\n"
    "d: &d [*c,*c,*c,*c,*c,*c,*c,*c,*c]\ne: &e [*d,*d,*d,*d,*d,*d,*d,*d,*d]\nf: &f [*e,*e,*e,*e,*e,*e,*e,*e,*e]\n"
    "parameters:\n  tp: [1, 2]\n  x: *f\n",
    "parameters: " + "[" * 5000 + "]" * 5000,
    "parameters:\n  tp: !!python/object/apply:os.system ['true']\n",
    "parameters:\n  tp: [1, 2]\ngpus: 8\nconstraints: tp > 1\n",
    "\ufeffparameters:\n  tp: [1, 2]\ngpus: 8\n",
    "parameters:\n" + "".join(f"  p{i}: [1, 2, 3, 4, 5, 6, 7, 8, 9, 10]\n" for i in range(8)) + "gpus: 8\n",
]
space_inputs = st.one_of(
    st.builds(SpaceInput, spaces, commands, st.one_of(st.none(), st.integers(-1, 64))),
    near_valid_inputs(),
    near_valid_inputs(),
    st.builds(
        SpaceInput,
        st.none(),
        st.just(["train.py", "--tp", "{tp}"] + [f"{{p{i}}}" for i in range(8)]),
        st.just(None),
        st.sampled_from(YAML_ODDITIES),
    ),
    st.builds(
        lambda spec, raw: SpaceInput(None, command_for(spec), 8, yaml.safe_dump(spec, allow_unicode=True), raw),
        near_valid,
        st.lists(st.tuples(st.integers(0, 400), st.integers(0, 255)), max_size=4).map(tuple),
    ),
)


def check_space(x: SpaceInput) -> None:
    spec: Any = x.spec
    with tempfile.TemporaryDirectory(prefix="maya-fuzz-space-") as tmp:
        if x.yaml_text is not None:
            data = bytearray(x.yaml_text.encode())
            for pos, byte in x.raw:
                if data:
                    data[pos % len(data)] = byte
            spec = Path(tmp) / "space.yaml"
            spec.write_bytes(bytes(data))
        space = load_space(spec, x.command, x.gpus)
        for point in space.valid_points()[:200]:
            argv, env = space.render(point)
            world = space.world_size(point)
            tokens = space.tokens(point)
            if not isinstance(world, int) or world < 1:
                raise Corrupt(f"world size {world!r}")
            if tokens is not None and not tokens >= 0:
                raise Corrupt(f"tokens per iteration {tokens!r}")
            if not all(isinstance(a, str) for a in argv) or not all(isinstance(v, str) for v in env.values()):
                raise Corrupt(f"rendered {argv!r} {env!r}")
            space.digest()


def surfaces() -> list[Surface]:
    return [
        Surface("search space", space_inputs, check_space, errors=(SpaceError,), timeout_s=20),
        Surface(
            "space expression",
            st.builds(ExprInput, st.one_of(expressions, value), envs),
            check_expr,
            errors=(ExprError,),
            not_errors=(),
        ),
    ]
