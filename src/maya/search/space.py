"""Search spaces: parameters with their values, how each reaches the script (a `{name}` placeholder in
the command, the words `args:` gives each value, or an environment variable), derived values, constraints
and the roles the pruning rules read. Everything is checked against the command when the space is loaded."""

from __future__ import annotations

import hashlib
import itertools
import json
import keyword
import re
import string
from collections.abc import Iterator, Mapping, Sequence
from dataclasses import dataclass, field
from pathlib import Path
from typing import Any

from .expr import Expr, ExprError

ROLES = ("recompute", "sequence_parallel", "distributed_optimizer", "microbatches", "pp", "tp")
OWN_PLACEHOLDER_ROLES = frozenset(ROLES) - {"microbatches"}
"""Roles whose parameter the script must be told itself (micro-batches may reach it as a derived batch size)."""
MAX_POINTS = 1_000_000
"""Points a space may have (every point is checked against the constraints when it is loaded)."""
MAX_VALUES = 100_000
"""Values (scalars, lists, mappings) a space file may expand to: YAML aliases can make a short file huge."""
OFF = {"off", "none", "false", "no", "0", ""}
ENV_NAME = re.compile(r"[A-Za-z_][A-Za-z0-9_]*")
Point = tuple[int, ...]
"""A point of the space: one value index per parameter, in declaration order."""


class SpaceError(ValueError):
    """A search space that cannot be searched, with the reason."""


@dataclass(frozen=True)
class Parameter:
    name: str
    values: tuple[Any, ...]
    role: str | None = None
    env: str | None = None
    """Environment variable carrying the value (else the command's `{name}` placeholder)."""
    flag: str | None = None
    """For a boolean: the placeholder becomes this argument when on and disappears when off."""
    args: tuple[tuple[str, ...], ...] | None = None
    """The words each value's placeholder (a whole argument) becomes, in the order of `values`; () for none."""


def is_on(value: Any) -> bool:
    """Truth of a flag value (`off`, `none`, `false`, `no`, `0` and empty strings are off)."""
    return str(value).strip().lower() not in OFF if isinstance(value, str) else bool(value)


@dataclass
class Space:
    parameters: list[Parameter]
    command: list[str]
    gpus: int | None
    """The world size, unless a `gpus` parameter varies it."""
    derived: dict[str, Expr] = field(default_factory=dict)
    constraints: list[Expr] = field(default_factory=list)
    tokens_per_iteration: Expr | None = None
    source: str = ""
    """The space file's canonical JSON (for the search id)."""

    @property
    def shape(self) -> tuple[int, ...]:
        return tuple(len(p.values) for p in self.parameters)

    @property
    def size(self) -> int:
        n = 1
        for s in self.shape:
            n *= s
        return n

    def params(self, point: Point) -> dict[str, Any]:
        return {p.name: p.values[i] for p, i in zip(self.parameters, point)}

    def point(self, params: Mapping[str, Any]) -> Point:
        return tuple(p.values.index(params[p.name]) for p in self.parameters)

    def assign(self, point: Point) -> dict[str, Any]:
        """Parameter values, `gpus` and the derived values of a point."""
        env = {"gpus": self.gpus, **self.params(point)}
        for name, expr in self.derived.items():
            env[name] = _evaluate(expr, env, f"derived {name!r}")
        return env

    def world_size(self, point: Point) -> int:
        gpus = self.assign(point)["gpus"]
        if isinstance(gpus, bool) or not isinstance(gpus, (int, float)) or gpus != int(gpus) or gpus < 1:
            raise SpaceError(f"the number of GPUs at {self.params(point)} is {gpus!r}, not a positive integer")
        return int(gpus)

    def violated(self, point: Point) -> str | None:
        """The first constraint the point breaks, else None."""
        env = self.assign(point)
        return next((c.source for c in self.constraints if not _evaluate(c, env, "constraint")), None)

    def points(self) -> Iterator[Point]:
        return itertools.product(*(range(n) for n in self.shape))

    def valid_points(self) -> list[Point]:
        return [p for p in self.points() if self.violated(p) is None]

    def render(self, point: Point) -> tuple[list[str], dict[str, str]]:
        """The command line and the extra environment of a point."""
        env = self.assign(point)
        shown = {p.name: (p.flag if is_on(env[p.name]) else "") if p.flag else env[p.name] for p in self.parameters}
        words = {**env, **shown}
        expanded = {f"{{{p.name}}}": p.args[i] for p, i in zip(self.parameters, point) if p.args is not None}
        argv: list[str] = []
        for arg in self.command:
            argv += expanded[arg] if arg in expanded else [arg.format_map(words)]
        argv = [arg for arg in argv if arg]
        extra = {p.env: str(env[p.name]) for p in self.parameters if p.env}
        return argv, extra

    def tokens(self, point: Point) -> float | None:
        if self.tokens_per_iteration is None:
            return None
        tokens = _evaluate(self.tokens_per_iteration, self.assign(point), "tokens_per_iteration")
        if isinstance(tokens, bool) or not isinstance(tokens, (int, float)) or tokens < 0:
            raise SpaceError(
                f"tokens_per_iteration {self.tokens_per_iteration.source!r} is {tokens!r} at "
                f"{self.params(point)}, not a non-negative number"
            )
        return float(tokens)

    def role(self, role: str) -> Parameter | None:
        return next((p for p in self.parameters if p.role == role), None)

    def digest(self) -> str:
        blob = json.dumps({"space": self.source, "command": self.command, "gpus": self.gpus})
        return hashlib.sha256(blob.encode()).hexdigest()


def _evaluate(expr: Expr, env: Mapping[str, Any], what: str) -> Any:
    try:
        return expr(env)
    except ExprError as e:
        raise SpaceError(f"{what}: {e} at {dict(env)}") from None


def load_space(spec: str | Path | Mapping[str, Any], command: Sequence[str], gpus: int | None = None) -> Space:
    """Read a space (a YAML file or its mapping) for `command` (with `{name}` placeholders) and check it."""
    if not isinstance(spec, Mapping):
        spec = _read(Path(spec))
    if not isinstance(spec, Mapping) or not isinstance(spec.get("parameters"), Mapping) or not spec["parameters"]:
        raise SpaceError("the space needs a `parameters:` mapping with at least one parameter")
    _check_size(spec)
    unknown = set(spec) - {"parameters", "derived", "constraints", "gpus", "tokens_per_iteration"}
    if unknown:
        raise SpaceError(f"unknown section(s) {sorted(map(str, unknown))}")
    parameters = [_parameter(name, body) for name, body in spec["parameters"].items()]
    world = gpus if gpus is not None else spec.get("gpus")
    if any(p.name == "gpus" for p in parameters):
        world = None
    elif isinstance(world, bool) or not isinstance(world, int) or world < 1:
        raise SpaceError("give the number of GPUs (--gpus N, `gpus:` in the space or a `gpus` parameter)")
    names = {"gpus"} | {p.name for p in parameters}
    derived: dict[str, Expr] = {}
    sections = {key: spec.get(key) for key in ("derived", "constraints")}
    if not isinstance(sections["derived"] or {}, Mapping):
        raise SpaceError("`derived:` must map names to expressions")
    if not isinstance(sections["constraints"] or [], list):
        raise SpaceError("`constraints:` must be a list of expressions")
    for name, source in (sections["derived"] or {}).items():
        if not _is_name(name):
            raise SpaceError(f"derived name {name!r} is not an identifier")
        if name in names:
            raise SpaceError(f"derived {name!r} is already a parameter")
        derived[name] = _expr(source, names, f"derived {name!r}")
        names.add(name)
    constraints = [_expr(c, names, "constraint") for c in sections["constraints"] or []]
    tokens = spec.get("tokens_per_iteration")
    roles = [p.role for p in parameters if p.role]
    if len(roles) != len(set(roles)):
        raise SpaceError("each role may be given to one parameter only")
    space = Space(
        parameters,
        list(command),
        world,
        derived,
        constraints,
        _expr(tokens, names, "tokens_per_iteration") if tokens is not None else None,
        json.dumps(spec, sort_keys=True, default=str),
    )
    _check_command(space, names)
    if space.size > MAX_POINTS:
        raise SpaceError(f"the space has {space.size:,} points; at most {MAX_POINTS:,} can be searched")
    valid = space.valid_points()
    if not valid:
        raise SpaceError("no point of the space satisfies the constraints")
    for point in valid:  # every value a point reaches the script with can be had
        space.world_size(point)
        space.tokens(point)
    return space


def _read(path: Path) -> Any:
    import yaml

    try:
        return yaml.safe_load(path.read_bytes().decode())
    except UnicodeDecodeError as e:
        raise SpaceError(f"{path}: not UTF-8 text ({e.reason} at byte {e.start})") from None
    except (OSError, yaml.YAMLError) as e:
        raise SpaceError(f"{path}: {e}") from None
    except RecursionError:
        raise SpaceError(f"{path}: nested too deeply") from None


def _check_size(spec: Any) -> None:
    """Refuse a space that refers to itself or expands (YAML aliases) to more than `MAX_VALUES` values."""
    count, stack = 0, [(spec, frozenset())]
    while stack:
        value, above = stack.pop()
        count += 1
        if count > MAX_VALUES:
            raise SpaceError(f"the space expands to more than {MAX_VALUES:,} values (YAML aliases?)")
        if isinstance(value, (Mapping, list, tuple)):
            if id(value) in above:
                raise SpaceError("the space contains itself (a YAML alias of an enclosing value)")
            inner = above | {id(value)}
            items = [*value.keys(), *value.values()] if isinstance(value, Mapping) else value
            stack.extend((item, inner) for item in items)


def _is_name(name: Any) -> bool:
    return isinstance(name, str) and name.isidentifier() and not keyword.iskeyword(name)


def _parameter(name: str, body: Any) -> Parameter:
    if not _is_name(name):
        raise SpaceError(f"parameter name {name!r} is not an identifier")
    body = {"values": body} if isinstance(body, list) else body
    if not isinstance(body, Mapping):
        raise SpaceError(f"parameter {name!r}: give a list of values or a mapping with `values:`")
    extra = set(body) - {"values", "role", "env", "flag", "args"}
    if extra:
        raise SpaceError(f"parameter {name!r}: unknown key(s) {sorted(map(str, extra))}")
    values = body.get("values")
    if not isinstance(values, list) or not values:
        raise SpaceError(f"parameter {name!r} has no values")
    if len(set(map(repr, values))) != len(values):
        raise SpaceError(f"parameter {name!r} lists a value twice")
    role = body.get("role")
    if role is not None and role not in ROLES:
        raise SpaceError(f"parameter {name!r}: unknown role {role!r} (roles: {', '.join(ROLES)})")
    env, flag = body.get("env"), body.get("flag")
    if env is not None and not (isinstance(env, str) and ENV_NAME.fullmatch(env)):
        raise SpaceError(f"parameter {name!r}: env {env!r} is not an environment variable name")
    if flag is not None and not isinstance(flag, str):
        raise SpaceError(f"parameter {name!r}: flag {flag!r} is not a command-line argument")
    words = _args(name, values, body["args"]) if "args" in body else None
    if words is not None and (env is not None or flag is not None):
        raise SpaceError(f"parameter {name!r}: give one of `args:`, `flag:` and `env:`")
    return Parameter(name, tuple(values), role, env, flag, words)


def _args(name: str, values: list[Any], spec: Any) -> tuple[tuple[str, ...], ...]:
    """The words of each value (in the order of `values`) from an `args:` mapping of every value to a list of
    words (strings or numbers; an empty list: nothing). Keys of values the parameter does not list are ignored (a
    space cut to fewer values keeps its mapping); a value without a key is an error, so a misspelt key is one."""
    if not isinstance(spec, Mapping):
        raise SpaceError(f"parameter {name!r}: `args:` must map each value to a list of words")
    words = []
    for value in values:
        given = next((w for key, w in spec.items() if _same(key, value)), None)
        if given is None:
            raise SpaceError(f"parameter {name!r}: `args:` gives no words for the value {value!r} (give [] for none)")
        if not isinstance(given, list) or not all(
            isinstance(w, (str, int, float)) and not isinstance(w, bool) for w in given
        ):
            raise SpaceError(f"parameter {name!r}: `args:` for {value!r} is not a list of words: {given!r}")
        words.append(tuple(str(w) for w in given))
    return tuple(words)


def _same(key: Any, value: Any) -> bool:
    """An `args:` key names this value: equal and of the same type (YAML's `1` is not `'1'` nor `true`)."""
    return type(key) is type(value) and key == value


def _expr(source: Any, names: set[str], what: str) -> Expr:
    try:
        expr = Expr(source)
    except ExprError as e:
        raise SpaceError(f"{what}: {e}") from None
    unknown = expr.names - names
    if unknown:
        raise SpaceError(f"{what} {expr.source!r} uses unknown name(s) {sorted(unknown)}")
    return expr


def _check_command(space: Space, names: set[str]) -> None:
    used = set()
    worded = {p.name for p in space.parameters if p.args is not None}
    for arg in space.command:
        try:
            fields = [
                (f, spec, conversion) for _, f, spec, conversion in string.Formatter().parse(arg) if f is not None
            ]
        except ValueError as e:
            raise SpaceError(f"command argument {arg!r}: {e}") from None
        for f, spec, conversion in fields:
            if spec or conversion:
                raise SpaceError(
                    f"command argument {arg!r}: placeholders are plain {{name}}, without a format or conversion"
                )
            if f not in names:
                raise SpaceError(f"the command's placeholder {{{f}}} names no parameter or derived value")
            if f in worded and arg != f"{{{f}}}":
                raise SpaceError(
                    f"command argument {arg!r}: {{{f}}} becomes the words its `args:` give, so it must be an "
                    "argument of its own"
                )
            used.add(f)
    own = set(used)
    for name in reversed(space.derived):  # a derived value reaches the script with what it is computed from
        if name in used:
            used |= space.derived[name].names
    for p in space.parameters:
        if p.args is not None and p.name not in own:
            raise SpaceError(
                f"parameter {p.name!r}: its `args:` words reach the script only by its own {{{p.name}}} argument "
                "in the command, which has none"
            )
        if p.role in OWN_PLACEHOLDER_ROLES and p.env is None and p.name not in own:
            raise SpaceError(
                f"parameter {p.name!r} (role {p.role}) must reach the script by its own {{{p.name}}} placeholder "
                "or `env:`: a derived value computed from it does not tell the script its value"
            )
        if p.env is None and p.name not in used and p.name != "gpus":
            raise SpaceError(
                f"parameter {p.name!r} reaches the script neither by a {{{p.name}}} placeholder (its own or a "
                "derived value's computed from it) nor by `env:`"
            )
