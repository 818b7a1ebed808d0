"""A tiny, safe expression language for search spaces: names, numbers, booleans, strings, `+ - * // %`,
comparisons, `and`/`or`/`not` and parentheses. Anything else (calls, attributes, subscripts, lambdas,
`/`, `**`) is refused when the expression is parsed, so evaluating one can run no code."""
from __future__ import annotations

import ast
import operator
from typing import Any, Mapping

BINARY = {ast.Add: operator.add, ast.Sub: operator.sub, ast.Mult: operator.mul, ast.FloorDiv: operator.floordiv,
          ast.Mod: operator.mod}
COMPARE = {ast.Eq: operator.eq, ast.NotEq: operator.ne, ast.Lt: operator.lt, ast.LtE: operator.le,
           ast.Gt: operator.gt, ast.GtE: operator.ge}
UNARY = {ast.USub: operator.neg, ast.UAdd: operator.pos, ast.Not: operator.not_}


class ExprError(ValueError):
    """An expression that does not parse or uses something outside the language."""


class Expr:
    """A parsed expression; `names` are the variables it reads."""

    def __init__(self, source: str):
        self.source = str(source)
        try:
            self._tree = ast.parse(self.source, mode="eval").body
        except SyntaxError as e:
            raise ExprError(f"{self.source!r}: invalid syntax ({e.msg})") from None
        self.names: frozenset[str] = frozenset(_check(self._tree, self.source))

    def __call__(self, env: Mapping[str, Any]) -> Any:
        return _eval(self._tree, env)

    def __repr__(self) -> str:
        return f"Expr({self.source!r})"


def _check(node: ast.AST, source: str) -> set[str]:
    """The names `node` reads; raises on any construct outside the language."""
    if isinstance(node, ast.Name):
        return {node.id}
    if isinstance(node, ast.Constant) and isinstance(node.value, (int, float, str, bool)):
        return set()
    if isinstance(node, ast.BinOp) and type(node.op) in BINARY:
        return _check(node.left, source) | _check(node.right, source)
    if isinstance(node, ast.UnaryOp) and type(node.op) in UNARY:
        return _check(node.operand, source)
    if isinstance(node, ast.Compare) and all(type(op) in COMPARE for op in node.ops):
        return set().union(_check(node.left, source), *(_check(c, source) for c in node.comparators))
    if isinstance(node, ast.BoolOp):
        return set().union(*(_check(v, source) for v in node.values))
    what = type(getattr(node, "op", node)).__name__
    raise ExprError(f"{source!r}: {what} is not allowed (only names, numbers, + - * // %, comparisons, "
                    "and/or/not)")


def _eval(node: ast.AST, env: Mapping[str, Any]) -> Any:
    if isinstance(node, ast.Name):
        try:
            return env[node.id]
        except KeyError:
            raise ExprError(f"unknown name {node.id!r}") from None
    if isinstance(node, ast.Constant):
        return node.value
    if isinstance(node, ast.BinOp):
        return BINARY[type(node.op)](_eval(node.left, env), _eval(node.right, env))
    if isinstance(node, ast.UnaryOp):
        return UNARY[type(node.op)](_eval(node.operand, env))
    if isinstance(node, ast.Compare):
        left = _eval(node.left, env)
        for op, comparator in zip(node.ops, node.comparators):
            right = _eval(comparator, env)
            if not COMPARE[type(op)](left, right):
                return False
            left = right
        return True
    if isinstance(node, ast.BoolOp):
        values = (_eval(v, env) for v in node.values)
        return all(values) if isinstance(node.op, ast.And) else any(values)
    raise ExprError(f"cannot evaluate {type(node).__name__}")
