"""Which pointer arguments a `@triton.jit` kernel reads and which it writes, from its Python source.

A user kernel's arguments carry no role in their names (Inductor's do: `in_ptr`, `out_ptr`, `in_out_ptr`), and many
write in place into a tensor they also read (Liger's RoPE rotates `q` and `k` where they are, its SwiGLU backward
stores the gradients over its inputs, its cross-entropy stores the logits' gradient over the logits). The kernel's
source says it: an argument is written when an address derived from it reaches `tl.store`, an atomic or a block
pointer's or tensor descriptor's `.store`, and read when one reaches `tl.load`, an atomic or `.load`. Addresses are
followed through assignments in program order (`X_ptr += pid * stride`, `ptrs = X_ptr + offsets`,
`tl.make_block_ptr(base=X_ptr, ...)`; a name assigned again holds only its new value's arguments), through both
branches of an `if` and around a loop until nothing changes, but not through loaded values (`y = tl.load(Y_ptr)`
makes `X_ptr + y` an address into `X_ptr` alone), and into the `@triton.jit` helpers the kernel calls, by their
parameters.

What the source does not show is left out: an argument reached by no load or store (an unused one, or one a helper
this module cannot find takes) has no access, and the simulator counts its bytes once, as before. So is an argument
an address may or may not derive from: one of several a name may hold after an `if` or a loop (`p = X` in one
branch, `p = Y` in the other), or a name unpacked from a call's result that several arguments reach
(`a, b = helper(A, B)`).
"""

from __future__ import annotations

import ast
import textwrap
from typing import Any

READ, WRITE = "read", "write"
ACCESS_NAMES = {frozenset({READ}): "read", frozenset({WRITE}): "write", frozenset({READ, WRITE}): "read-write"}
"""An argument's access, as the launch's description spells it (`args[i].access`)."""
DOTS = ("dot", "dot_scaled")
"""Triton's matrix products: a kernel calling one is GEMM-like."""
HELPER_DEPTH = 4
"""How deep calls into `@triton.jit` helpers are followed."""


def argument_access(fn: Any) -> dict[str, str]:
    """`{argument: "read" | "write" | "read-write"}` of a `JITFunction` (its `src` and `arg_names`), for the arguments
    whose memory its source reads or writes; {} when the source cannot be read."""
    return analyse(fn)[0]


def analyse(fn: Any) -> tuple[dict[str, str], bool]:
    """A `JITFunction`'s `argument_access`, and whether its source calls `tl.dot` or `tl.dot_scaled` (itself or in a
    `@triton.jit` helper): a GEMM-like kernel, whose work is more than the bytes it moves. Cached on `fn`."""
    cached = getattr(fn, "_maya_source", None)
    if cached is None:
        found, unknown, dot = _access(fn, HELPER_DEPTH)
        access = {
            name: ACCESS_NAMES[frozenset(kinds)] for name, kinds in found.items() if kinds and name not in unknown
        }
        cached = (access, dot)
        try:
            fn._maya_source = cached
        except Exception:  # an object that takes no attributes: analysed again next time
            pass
    return cached


def _function(fn: Any) -> ast.FunctionDef | None:
    """`fn`'s function definition, or None where its source cannot be read or parsed."""
    try:
        src = getattr(fn, "src", None)
        if not isinstance(src, str):
            return None
        tree = ast.parse(textwrap.dedent(src))
    except Exception:  # a source Python cannot parse, or a `src` that raises
        return None
    return next((node for node in tree.body if isinstance(node, ast.FunctionDef)), None)


Roots = tuple[frozenset, frozenset]
"""The parameters an expression's value derives from: surely (on every path to it), and maybe (one of several a
name may hold after a branch or a loop, or that reach a tuple unpacked from a call)."""
NONE: Roots = (frozenset(), frozenset())
LOOP_PASSES = 16
"""At most this many passes over a loop's body before its names are taken as they are (they settle in 2 or 3)."""


def _union(a: Roots, b: Roots) -> Roots:
    return a[0] | b[0], a[1] | b[1]


def _join(a: dict[str, Roots], b: dict[str, Roots]) -> dict[str, Roots]:
    """Names after either of two paths: an argument only one of them derives a name from becomes a maybe."""
    out = dict(a)
    for name, (sure, maybe) in b.items():
        if name in out:
            other_sure, other_maybe = out[name]
            out[name] = (sure & other_sure, maybe | other_maybe | (sure ^ other_sure))
        else:
            out[name] = (sure, maybe)
    return out


def _access(fn: Any, depth: int) -> tuple[dict[str, set[str]], set[str], bool]:
    """Each parameter of `fn` with the kinds of access the addresses derived from it get, the parameters an address
    that reaches a load or a store may or may not derive from (whose access is unknown), and whether it calls a dot."""
    cache = getattr(fn, "_maya_walks", None)
    if cache is not None and depth in cache:  # a helper many kernels (or call sites) use: walked once per depth
        return cache[depth]
    node = _function(fn)
    if node is None:
        return {}, set(), False
    arguments = (*node.args.posonlyargs, *node.args.args, *node.args.kwonlyargs)
    params = [a.arg for a in arguments if not _constexpr(a.annotation)]  # a constexpr is no pointer
    walk = _Walk(params, getattr(getattr(fn, "fn", None), "__globals__", {}), depth)
    walk.block(node.body, {p: (frozenset({p}), frozenset()) for p in params})
    result = walk.found, walk.unknown, walk.dot
    try:
        fn._maya_walks = {**(cache or {}), depth: result}
    except Exception:  # an object that takes no attributes: walked again next time
        pass
    return result


def _constexpr(annotation: ast.AST | None) -> bool:
    """Whether a parameter's annotation is `tl.constexpr` (or any `constexpr`)."""
    if annotation is None:
        return False
    return any(
        isinstance(n, (ast.Name, ast.Attribute)) and _called_name(n) == "constexpr" for n in ast.walk(annotation)
    )


class _Walk:
    """One pass over a kernel's statements in program order, with the arguments each name derives from."""

    def __init__(self, params: list[str], scope: dict, depth: int):
        self.found: dict[str, set[str]] = {p: set() for p in params}
        self.unknown: set[str] = set()
        self.dot = False
        self.scope = scope
        self.depth = depth

    def block(self, stmts: list[ast.stmt], env: dict[str, Roots]) -> dict[str, Roots]:
        for stmt in stmts:
            env = self.statement(stmt, env)
        return env

    def statement(self, stmt: ast.stmt, env: dict[str, Roots]) -> dict[str, Roots]:
        if isinstance(stmt, ast.Assign):
            self.calls(stmt.value, env)
            bound = [self.bind(target, stmt.value, env) for target in stmt.targets]
            env = dict(env)
            for names in bound:
                env.update(names)
            return env
        if isinstance(stmt, ast.AnnAssign):
            if stmt.value is None:
                return env
            self.calls(stmt.value, env)
            return {**env, **self.bind(stmt.target, stmt.value, env)}
        if isinstance(stmt, ast.AugAssign):
            self.calls(stmt.value, env)
            if isinstance(stmt.target, ast.Name):
                name = stmt.target.id
                return {**env, name: _union(env.get(name, NONE), self.roots(stmt.value, env))}
            return env
        if isinstance(stmt, ast.If):
            self.calls(stmt.test, env)
            return _join(self.block(stmt.body, env), self.block(stmt.orelse, env))
        if isinstance(stmt, (ast.For, ast.While)):
            head = stmt.iter if isinstance(stmt, ast.For) else stmt.test
            self.calls(head, env)
            state = env
            for _ in range(LOOP_PASSES):
                entry = {**state, **self.bind(stmt.target, head, env)} if isinstance(stmt, ast.For) else state
                joined = _join(state, self.block(stmt.body, entry))
                if joined == state:
                    break
                state = joined
            return self.block(stmt.orelse, state)
        if isinstance(stmt, ast.With):
            for item in stmt.items:
                self.calls(item.context_expr, env)
            return self.block(stmt.body, env)
        if isinstance(stmt, (ast.FunctionDef, ast.AsyncFunctionDef, ast.ClassDef)):
            return env
        self.calls(stmt, env)  # an expression, a return, an assert: their calls
        return env

    def bind(self, target: ast.AST, value: ast.AST, env: dict[str, Roots]) -> dict[str, Roots]:
        """The names `target` binds to `value`: a tuple of targets from a tuple of values of the same length element
        by element; from any other value (a call's result), each name derives from all of it, only maybe where that
        is more than one argument."""
        if isinstance(target, (ast.Tuple, ast.List)):
            if isinstance(value, (ast.Tuple, ast.List)) and len(value.elts) == len(target.elts):
                out: dict[str, Roots] = {}
                for t, v in zip(target.elts, value.elts):
                    out.update(self.bind(t, v, env))
                return out
            sure, maybe = self.roots(value, env)
            roots = (sure, maybe) if len(sure | maybe) <= 1 else (frozenset(), sure | maybe)
            return {n.id: roots for n in ast.walk(target) if isinstance(n, ast.Name)}
        if isinstance(target, ast.Starred):
            return self.bind(target.value, value, env)
        if isinstance(target, ast.Name):
            return {target.id: self.roots(value, env)}
        return {}

    def roots(self, expr: ast.AST | None, env: dict[str, Roots]) -> Roots:
        """The arguments an address computed by `expr` derives from: not those only inside a load (a loaded value is
        data), a product, a quotient or a comparison (a stride, a size: no pointer)."""
        if expr is None:
            return NONE
        sure: set = set()
        maybe: set = set()
        stack = [expr]
        while stack:
            node = stack.pop()
            if isinstance(node, ast.Call) and (_called(node) == "load" or str(_called(node)).startswith("atomic_")):
                continue
            if isinstance(node, (ast.Compare, ast.BoolOp)) or (
                isinstance(node, ast.BinOp) and not isinstance(node.op, (ast.Add, ast.Sub))
            ):
                continue  # an offset (`pid * stride`) or a mask: pointers are only added to or subtracted from
            if isinstance(node, ast.Name):
                s, m = env.get(node.id, NONE)
                sure |= s
                maybe |= m
            stack.extend(ast.iter_child_nodes(node))
        return frozenset(sure), frozenset(maybe)

    def _helper(self, func: ast.AST) -> Any:
        """The function a call names (`helper(...)`, or `module.helper(...)` through a module the scope binds)."""
        try:
            if isinstance(func, ast.Name):
                return self.scope.get(func.id)
            if isinstance(func, ast.Attribute) and isinstance(func.value, ast.Name):
                return getattr(self.scope.get(func.value.id), func.attr, None)
        except Exception:  # an attribute that raises
            return None
        return None

    def mark(self, expr: ast.AST | None, kind: str, env: dict[str, Roots]) -> None:
        sure, maybe = self.roots(expr, env)
        for p in sure:
            if p in self.found:
                self.found[p].add(kind)
        self.unknown |= maybe - sure

    def calls(self, tree: ast.AST, env: dict[str, Roots]) -> None:
        """The loads, stores, atomics and helper calls in `tree` (an expression, or a simple statement)."""
        for call in (n for n in ast.walk(tree) if isinstance(n, ast.Call)):
            self.call(call, env)

    def call(self, call: ast.Call, env: dict[str, Roots]) -> None:
        name = _called(call)
        pointer = _argument(call, 0, "pointer")
        method = isinstance(call.func, ast.Attribute) and not _is_language(call.func.value, self.scope)
        if name == "store":
            self.mark(call.func.value if method else pointer, WRITE, env)  # a block pointer's or descriptor's
        elif name == "load":
            self.mark(call.func.value if method else pointer, READ, env)
        elif name is not None and name.startswith("atomic_"):
            self.mark(pointer, READ, env)
            self.mark(pointer, WRITE, env)
        elif name in DOTS:
            self.dot = True
        elif self.depth > 0:
            helper = self._helper(call.func)
            if helper is not None and hasattr(helper, "src") and hasattr(helper, "arg_names"):
                inner, unknown, dot = _access(helper, self.depth - 1)
                self.dot |= dot
                helper_params = list(getattr(helper, "arg_names", ()))
                passed = [(helper_params[i], arg) for i, arg in enumerate(call.args) if i < len(helper_params)]
                passed += [(keyword.arg or "", keyword.value) for keyword in call.keywords]
                for param, arg in passed:
                    for kind in inner.get(param, ()):
                        self.mark(arg, kind, env)
                    if param in unknown:
                        self.unknown |= set().union(*self.roots(arg, env))


def _called(call: ast.Call) -> str | None:
    return _called_name(call.func)


def _called_name(func: ast.AST) -> str | None:
    return func.attr if isinstance(func, ast.Attribute) else func.id if isinstance(func, ast.Name) else None


LANGUAGE_NAMES = ("tl", "language", "triton")
"""Names Triton's language module (or its package) goes by in kernels, without looking them up."""


def _is_language(node: ast.AST, scope: dict) -> bool:
    """Whether `node` names Triton's language module (`tl`, `triton.language`, or any name the kernel's module binds
    to it: `import triton.language as T`), whose `load`/`store` take the pointer as their first argument, rather
    than a block pointer or descriptor whose method it is."""
    if isinstance(node, ast.Name):
        if node.id in LANGUAGE_NAMES:
            return True
        module = getattr(scope.get(node.id), "__name__", None)
        return isinstance(module, str) and (module == "triton" or module.startswith("triton.language"))
    return isinstance(node, ast.Attribute) and node.attr == "language"


def _argument(call: ast.Call, index: int, keyword: str) -> ast.AST | None:
    if len(call.args) > index:
        return call.args[index]
    return next((k.value for k in call.keywords if k.arg in (keyword, "base")), None)
