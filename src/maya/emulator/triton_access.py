"""Which pointer arguments a `@triton.jit` kernel reads and which it writes, from its Python source.

A user kernel's arguments carry no role in their names (Inductor's do: `in_ptr`, `out_ptr`, `in_out_ptr`), and many
write in place into a tensor they also read (Liger's RoPE rotates `q` and `k` where they are, its SwiGLU backward
stores the gradients over its inputs, its cross-entropy stores the logits' gradient over the logits). The kernel's
source says it: an argument is written when an address derived from it reaches `tl.store`, an atomic or a block
pointer's or tensor descriptor's `.store`, and read when one reaches `tl.load`, an atomic or `.load`. Addresses are
followed through assignments, flow-insensitively (`X_ptr += pid * stride`, `ptrs = X_ptr + offsets`,
`tl.make_block_ptr(base=X_ptr, ...)`), but not through loaded values (`y = tl.load(Y_ptr)` makes `X_ptr + y` an
address into `X_ptr` alone), and into the `@triton.jit` helpers the kernel calls, by their parameters.

What the source does not show is left out: an argument reached by no load or store (an unused one, or one a helper
this module cannot find takes) has no access, and the simulator counts its bytes once, as before.
"""

from __future__ import annotations

import ast
from typing import Any

READ, WRITE = "read", "write"
ACCESS_NAMES = {frozenset({READ}): "read", frozenset({WRITE}): "write", frozenset({READ, WRITE}): "read-write"}
"""An argument's access, as the launch's description spells it (`args[i].access`)."""
HELPER_DEPTH = 4
"""How deep calls into `@triton.jit` helpers are followed."""


def argument_access(fn: Any) -> dict[str, str]:
    """`{argument: "read" | "write" | "read-write"}` of a `JITFunction` (its `src` and `arg_names`), for the arguments
    whose memory its source reads or writes; {} when the source cannot be read."""
    cached = getattr(fn, "_maya_access", None)
    if cached is None:
        found = _access(fn, HELPER_DEPTH)
        cached = {name: ACCESS_NAMES[frozenset(kinds)] for name, kinds in found.items() if kinds}
        try:
            fn._maya_access = cached
        except Exception:  # an object that takes no attributes: analysed again next time
            pass
    return cached


def _function(fn: Any) -> ast.FunctionDef | None:
    src = getattr(fn, "src", None)
    if not isinstance(src, str):
        return None
    tree = ast.parse(src)
    return next((node for node in tree.body if isinstance(node, ast.FunctionDef)), None)


def _access(fn: Any, depth: int) -> dict[str, set[str]]:
    """Each parameter of `fn` with the kinds of access the addresses derived from it get."""
    node = _function(fn)
    if node is None:
        return {}
    params = [a.arg for a in (*node.args.posonlyargs, *node.args.args, *node.args.kwonlyargs)]
    roots = _roots(node, params)
    found: dict[str, set[str]] = {p: set() for p in params}

    def mark(expr: ast.AST | None, kind: str) -> None:
        for p in _address_roots(expr, roots):
            found[p].add(kind)

    scope = getattr(getattr(fn, "fn", None), "__globals__", {})
    for call in (n for n in ast.walk(node) if isinstance(n, ast.Call)):
        name = _called(call)
        pointer = _argument(call, 0, "pointer")
        if name == "store":
            if isinstance(call.func, ast.Attribute) and not _is_language(call.func.value):
                mark(call.func.value, WRITE)  # a block pointer's or tensor descriptor's method
            else:
                mark(pointer, WRITE)
        elif name == "load":
            if isinstance(call.func, ast.Attribute) and not _is_language(call.func.value):
                mark(call.func.value, READ)
            else:
                mark(pointer, READ)
        elif name is not None and name.startswith("atomic_"):
            mark(pointer, READ)
            mark(pointer, WRITE)
        elif depth > 0:
            helper = scope.get(name) if isinstance(call.func, ast.Name) else None
            if helper is not None and hasattr(helper, "src") and hasattr(helper, "arg_names"):
                inner = _access(helper, depth - 1)
                helper_params = list(getattr(helper, "arg_names", ()))
                for i, arg in enumerate(call.args):
                    for kind in inner.get(helper_params[i], ()) if i < len(helper_params) else ():
                        mark(arg, kind)
                for keyword in call.keywords:
                    for kind in inner.get(keyword.arg or "", ()):
                        mark(keyword.value, kind)
    return found


def _called(call: ast.Call) -> str | None:
    func = call.func
    return func.attr if isinstance(func, ast.Attribute) else func.id if isinstance(func, ast.Name) else None


def _is_language(node: ast.AST) -> bool:
    """Whether `node` names Triton's language module (`tl`, `triton.language`), whose `load`/`store` take the pointer
    as their first argument, rather than a block pointer or descriptor whose method it is."""
    if isinstance(node, ast.Name):
        return node.id in ("tl", "language", "triton")
    return isinstance(node, ast.Attribute) and node.attr == "language"


def _argument(call: ast.Call, index: int, keyword: str) -> ast.AST | None:
    if len(call.args) > index:
        return call.args[index]
    return next((k.value for k in call.keywords if k.arg in (keyword, "base")), None)


def _names(expr: ast.AST | None) -> set[str]:
    """Names an address computed by `expr` depends on: not those only inside a load (a loaded value is data)."""
    if expr is None:
        return set()
    out: set[str] = set()
    stack = [expr]
    while stack:
        node = stack.pop()
        if isinstance(node, ast.Call) and _called(node) in ("load", "atomic_add", "atomic_cas", "atomic_xchg"):
            continue
        if isinstance(node, ast.Name):
            out.add(node.id)
        stack.extend(ast.iter_child_nodes(node))
    return out


def _roots(node: ast.FunctionDef, params: list[str]) -> dict[str, set[str]]:
    """Each local name with the parameters its values are computed from (through assignments, to a fixpoint)."""
    edges: list[tuple[str, set[str]]] = []
    for stmt in ast.walk(node):
        if isinstance(stmt, ast.Assign):
            for target in stmt.targets:
                edges.extend(_bind(target, stmt.value))
        elif isinstance(stmt, (ast.AugAssign, ast.AnnAssign)) and stmt.value is not None:
            edges.extend(_bind(stmt.target, stmt.value))
            if isinstance(stmt, ast.AugAssign) and isinstance(stmt.target, ast.Name):
                edges.append((stmt.target.id, {stmt.target.id}))
        elif isinstance(stmt, (ast.For, ast.comprehension)):
            edges.extend(_bind(stmt.target, stmt.iter))
        elif isinstance(stmt, ast.NamedExpr):
            edges.extend(_bind(stmt.target, stmt.value))
    roots: dict[str, set[str]] = {p: {p} for p in params}
    changed = True
    while changed:
        changed = False
        for target, sources in edges:
            reached = set().union(*(roots.get(s, set()) for s in sources)) if sources else set()
            if not reached <= roots.setdefault(target, set()):
                roots[target] |= reached
                changed = True
    return roots


def _bind(target: ast.AST, value: ast.AST) -> list[tuple[str, set[str]]]:
    """(name, names its value depends on) for each name `target` binds; a tuple of targets from a tuple of values of
    the same length element by element."""
    if isinstance(target, (ast.Tuple, ast.List)):
        if isinstance(value, (ast.Tuple, ast.List)) and len(value.elts) == len(target.elts):
            return [edge for t, v in zip(target.elts, value.elts) for edge in _bind(t, v)]
        sources = _names(value)
        return [(name.id, sources) for name in ast.walk(target) if isinstance(name, ast.Name)]
    if isinstance(target, ast.Name):
        return [(target.id, _names(value))]
    return []


def _address_roots(expr: ast.AST | None, roots: dict[str, set[str]]) -> set[str]:
    params = set()
    for name in _names(expr):
        params |= roots.get(name, set())
    return params
