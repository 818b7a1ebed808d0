"""A tiny, safe expression language for search spaces: names, numbers, booleans, strings, `+ - * // %`,
comparisons, `and`/`or`/`not` and parentheses. Anything else (calls, attributes, subscripts, lambdas,
`/`, `**`) is refused when the expression is parsed, so evaluating one can run no code.

Arithmetic takes numbers (booleans count as 0 and 1); `+` also joins two strings and `*` repeats one, up to
`MAX_TEXT` characters; a result must be a finite number. Every failure, parsing or evaluating, is an
`ExprError` naming the expression."""

from __future__ import annotations

import ast
import math
import operator
from collections.abc import Mapping
from typing import Any

BINARY = {
    ast.Add: operator.add,
    ast.Sub: operator.sub,
    ast.Mult: operator.mul,
    ast.FloorDiv: operator.floordiv,
    ast.Mod: operator.mod,
}
COMPARE = {
    ast.Eq: operator.eq,
    ast.NotEq: operator.ne,
    ast.Lt: operator.lt,
    ast.LtE: operator.le,
    ast.Gt: operator.gt,
    ast.GtE: operator.ge,
}
UNARY = {ast.USub: operator.neg, ast.UAdd: operator.pos, ast.Not: operator.not_}


MAX_SOURCE = 10_000
"""Characters an expression may have."""
MAX_DEPTH = 200
"""How deeply its operations may nest."""
MAX_TEXT = 100_000
"""Characters a string value may reach (`"ab" * n`)."""


class ExprError(ValueError):
    """An expression that does not parse, uses something outside the language, or cannot be evaluated."""


class Expr:
    """A parsed expression; `names` are the variables it reads."""

    def __init__(self, source: str):
        self.source = str(source)
        if len(self.source) > MAX_SOURCE:
            raise ExprError(f"{self.source[:40]!r}...: longer than {MAX_SOURCE:,} characters")
        try:
            self._tree = ast.parse(self.source, mode="eval").body
        except SyntaxError as e:
            raise ExprError(f"{self.source!r}: invalid syntax ({e.msg})") from None
        except (ValueError, RecursionError, MemoryError):  # null bytes; nesting the parser gives up on
            raise ExprError(f"{self.source[:60]!r}: not an expression the parser can read") from None
        self.names: frozenset[str] = frozenset(_check(self._tree, self.source, 0))

    def __call__(self, env: Mapping[str, Any]) -> Any:
        """The value of the expression with the names of `env`; `ExprError` when it has none."""
        try:
            value = _eval(self._tree, env)
        except ExprError as e:
            raise ExprError(f"{self.source!r}: {e}") from None
        except ZeroDivisionError:
            raise ExprError(f"{self.source!r} divides by zero") from None
        except (TypeError, OverflowError, ValueError) as e:
            raise ExprError(f"{self.source!r} cannot be evaluated: {e}") from None
        if isinstance(value, float) and not math.isfinite(value):
            raise ExprError(f"{self.source!r} is not a finite number ({value})")
        return value

    def __repr__(self) -> str:
        return f"Expr({self.source!r})"


def _check(node: ast.AST, source: str, depth: int) -> set[str]:
    """The names `node` reads; raises on any construct outside the language."""
    if depth > MAX_DEPTH:
        raise ExprError(f"{source[:60]!r}: nested more than {MAX_DEPTH} operations deep")
    depth += 1
    if isinstance(node, ast.Name):
        return {node.id}
    if isinstance(node, ast.Constant) and isinstance(node.value, (int, float, str, bool)):
        return set()
    if isinstance(node, ast.BinOp) and type(node.op) in BINARY:
        return _check(node.left, source, depth) | _check(node.right, source, depth)
    if isinstance(node, ast.UnaryOp) and type(node.op) in UNARY:
        return _check(node.operand, source, depth)
    if isinstance(node, ast.Compare) and all(type(op) in COMPARE for op in node.ops):
        return set().union(_check(node.left, source, depth), *(_check(c, source, depth) for c in node.comparators))
    if isinstance(node, ast.BoolOp):
        return set().union(*(_check(v, source, depth) for v in node.values))
    what = type(getattr(node, "op", node)).__name__
    raise ExprError(f"{source!r}: {what} is not allowed (only names, numbers, + - * // %, comparisons, and/or/not)")


def _eval(node: ast.AST, env: Mapping[str, Any]) -> Any:
    if isinstance(node, ast.Name):
        try:
            return env[node.id]
        except KeyError:
            raise ExprError(f"unknown name {node.id!r}") from None
    if isinstance(node, ast.Constant):
        return node.value
    if isinstance(node, ast.BinOp):
        return _binary(node.op, _eval(node.left, env), _eval(node.right, env))
    if isinstance(node, ast.UnaryOp):
        value = _eval(node.operand, env)
        if not isinstance(node.op, ast.Not) and not _number(value):
            raise ExprError(f"{type(node.op).__name__.lower()} of {_kind(value)}")
        return UNARY[type(node.op)](value)
    if isinstance(node, ast.Compare):
        left = _eval(node.left, env)
        for op, comparator in zip(node.ops, node.comparators):
            right = _eval(comparator, env)
            if type(op) not in (ast.Eq, ast.NotEq) and not (
                _number(left) and _number(right) or isinstance(left, str) and isinstance(right, str)
            ):
                raise ExprError(f"cannot order {_kind(left)} and {_kind(right)}")
            if not COMPARE[type(op)](left, right):
                return False
            left = right
        return True
    if isinstance(node, ast.BoolOp):
        values = (_eval(v, env) for v in node.values)
        return all(values) if isinstance(node.op, ast.And) else any(values)
    raise ExprError(f"cannot evaluate {type(node).__name__}")


def _number(v: Any) -> bool:
    return isinstance(v, (int, float))


def _kind(v: Any) -> str:
    return f"{type(v).__name__} {v!r:.40}"


def _binary(op: ast.operator, left: Any, right: Any) -> Any:
    """`left op right` for numbers, string joins and bounded repetition."""
    if _number(left) and _number(right):
        return BINARY[type(op)](left, right)
    if isinstance(op, ast.Add) and isinstance(left, str) and isinstance(right, str):
        if len(left) + len(right) > MAX_TEXT:
            raise ExprError(f"a string longer than {MAX_TEXT:,} characters")
        return left + right
    if isinstance(op, ast.Mult) and (
        isinstance(left, str) and isinstance(right, int) or isinstance(left, int) and isinstance(right, str)
    ):
        text, times = (left, right) if isinstance(left, str) else (right, left)
        if len(text) * max(times, 0) > MAX_TEXT:
            raise ExprError(f"a string longer than {MAX_TEXT:,} characters")
        return text * times
    raise ExprError(f"{type(op).__name__.lower()} of {_kind(left)} and {_kind(right)}")
