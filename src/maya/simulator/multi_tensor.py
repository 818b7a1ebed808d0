"""Multi-tensor kernels (optimizer steps, gradient norms and scales) sized by their launch grid.

torch's foreach and fused optimizers (`_foreach_*`, `_fused_adam(w)_`, `_fused_sgd_`, `_fused_adagrad_`, AMP's
`_amp_foreach_non_finite_check_and_unscale_`), apex's and Transformer Engine's (`multi_tensor_adam`,
`multi_tensor_l2norm`, `multi_tensor_scale`) run `multi_tensor_apply_kernel`: a launch covers chunks of its tensor
lists, one thread block per chunk of `CHUNK_ELEMENTS` elements (ATen's `kChunkSize`; apex's and TE's
`MultiTensorApply(2048 * 32)`, which Megatron-LM and TE's optimizers use). The ops' tensor lists carry no sizes in a
trace, so the grid is the size: blocks x `CHUNK_ELEMENTS` elements of each list. That is an upper bound: a block covers
at most one chunk, and a tensor's last chunk is partial, so a tensor smaller than a chunk (a 0-dim step count, a bias,
an FP8 amax) counts as a whole one; nothing in the launch says by how much less. Unsized, such a kernel was priced as a
launch, so a step's optimizer (Megatron's fp16 Adam over 2.8 B parameters a GPU: ~150 GB of traffic) cost
microseconds.

The kernel's name (mangled, as CUPTI records it, or demangled, as Kineto's traces hold it) gives its lists and their
element types (`lists`): each list read moves one pass of its type, each list written another. Each launch is priced
as torch's vectorized add moving the same bytes (as Inductor's pointwise kernels are: one load per element of each
list read, one store per element of each list written, nothing else to wait on): two inputs and an output of the
widest list type, `bytes / (3 itemsize)` elements.
"""

from __future__ import annotations

import re

import numpy as np
import pandas as pd

from maya.estimators.calls import MULTI_TENSOR_OP
from maya_trace_spec.vocabulary import DTYPE_BYTES, dtype_name

MULTI_TENSOR_KERNEL = re.compile(r"multi_tensor_apply_kernel")
CHUNK_ELEMENTS = 2048 * 32
"""Elements of one list a block of `multi_tensor_apply_kernel` covers: ATen's `kChunkSize` (MultiTensorApply.cuh),
apex's and Transformer Engine's `MultiTensorApply(2048 * 32)`."""
ADD_OPERANDS = 2
"""The operands of the add a multi-tensor launch is priced as (`frame_as_add`)."""

NORMS = ("L2NormFunctor", "LpNormFunctor", "LpMaxFunctor", "MaxNormFunctor")
"""Functors reducing their lists to a partial result per block (TE's and apex's, ATen's): read-only."""
_BUILTINS = {
    "b": "bool",
    "a": "signed char",
    "h": "unsigned char",
    "s": "short",
    "i": "int",
    "j": "unsigned int",
    "l": "long",
    "m": "unsigned long",
    "f": "float",
    "d": "double",
}
"""Itanium ABI codes of the builtin types a functor's template arguments hold."""
_TYPE_SPELLINGS = {"__nv_bfloat16": "bf16"}
"""Element types `dtype_name` does not know, as CUDA and C++ spell them."""
Arg = str | int | None
"""A template argument: a type's spelling, an integer, or None (a substitution or expression not resolved)."""


class _Mangled:
    """Just enough of an Itanium ABI demangler for a `multi_tensor_apply_kernel`'s first two template arguments: each
    a (name, template arguments) pair. A substitution (`S7_`) stands for the last compound type among the same
    arguments (how a functor repeats its lists' types); any other is None."""

    def __init__(self, text: str) -> None:
        self.s, self.i = text, 0

    def peek(self) -> str:
        if self.i >= len(self.s):
            raise ValueError(f"{self.s!r} ends inside its template arguments")
        return self.s[self.i]

    def source_name(self) -> str:
        digits = re.match(r"\d+", self.s[self.i :])
        if digits is None:
            raise ValueError(f"no source name at {self.i} of {self.s!r}")
        self.i += len(digits.group())
        name = self.s[self.i : self.i + int(digits.group())]
        self.i += int(digits.group())
        return name

    def substitution(self) -> None:
        self.i += 1  # S
        if self.peek() in "tabsiod":  # St (std::) and the standard abbreviations
            self.i += 1
            return None
        while self.peek() != "_":
            self.i += 1
        self.i += 1
        return None

    def type(self) -> tuple[str | None, list[Arg]]:
        """(qualified name or builtin spelling, template arguments) of the type at the cursor."""
        c = self.peek()
        if c in _BUILTINS:
            self.i += 1
            return _BUILTINS[c], []
        if c in "KPR":  # const, pointer, reference: not a list's element type
            self.i += 1
            self.type()
            return None, []
        if c == "N":
            self.i += 1
            parts: list[str] = []
            args: list[Arg] = []
            while self.peek() != "E":
                if self.peek() == "S":
                    self.substitution()
                elif self.peek() == "I":
                    args = self.template_args()
                else:
                    parts.append(self.source_name())
            self.i += 1
            return "::".join(parts), args
        if c == "S":
            std = self.s.startswith("St", self.i)
            self.substitution()
            name = self.source_name() if std else None
            args = self.template_args() if self.peek() == "I" else []
            return name, args
        name = self.source_name()
        return name, self.template_args() if self.peek() == "I" else []

    def template_args(self) -> list[Arg]:
        """The arguments of `I ... E` at the cursor: types by spelling, integer literals by value."""
        self.i += 1  # I
        args: list[Arg] = []
        last_compound: Arg = None
        while self.peek() != "E":
            if self.peek() == "L":  # a literal: L <type> <value> E
                self.i += 1
                self.type()
                value = re.match(r"n?\d+", self.s[self.i :])
                self.i += len(value.group()) if value else 0
                while self.peek() != "E":
                    self.i += 1
                self.i += 1
                args.append(int(value.group().replace("n", "-")) if value else None)
            elif self.peek() == "S" and not self.s.startswith("St", self.i):
                self.substitution()
                args.append(last_compound)
            elif self.peek() in "JX":  # a pack or an expression: not a functor's list types
                return args
            else:
                name, inner = self.type()
                spelled = f"{name}<{','.join(map(str, inner))}>" if inner else name
                if name is not None and name not in _BUILTINS.values():
                    last_compound = spelled
                args.append(spelled)
        self.i += 1
        return args


def _mangled_args(kernel: str) -> tuple[tuple[str, list[Arg]], tuple[str, list[Arg]]] | None:
    found = re.search(r"25multi_tensor_apply_kernelI", kernel)
    if found is None:
        return None
    parser = _Mangled(kernel)
    parser.i = found.end()
    try:
        metadata, functor = parser.type(), parser.type()
    except (ValueError, IndexError):
        return None
    return (metadata[0] or "", metadata[1]), ((functor[0] or "").rsplit("::", 1)[-1], functor[1])


def _split(text: str) -> list[str]:
    """`text`'s comma-separated parts outside brackets."""
    parts, depth, start = [], 0, 0
    for i, c in enumerate(text):
        if c in "<([{":
            depth += 1
        elif c in ">)]}":
            depth -= 1
            if depth < 0:
                parts.append(text[start:i])
                return [p.strip() for p in parts]
        elif c == "," and depth == 0:
            parts.append(text[start:i])
            start = i + 1
    return [p.strip() for p in parts + [text[start:]]]


def _demangled_type(text: str) -> tuple[str, list[Arg]]:
    name, _, rest = text.partition("<")
    args: list[Arg] = []
    for part in _split(rest) if rest else []:
        args.append(int(part) if re.fullmatch(r"-?\d+", part) else None if part.startswith("(") else part)
    return name.rsplit("::", 1)[-1].strip(), args


def _demangled_args(kernel: str) -> tuple[tuple[str, list[Arg]], tuple[str, list[Arg]]] | None:
    found = re.search(r"multi_tensor_apply_kernel<", kernel)
    if found is None:
        return None
    parts = _split(kernel[found.end() :])
    if len(parts) < 2:
        return None
    return _demangled_type(parts[0]), _demangled_type(parts[1])


def _dtype(arg: Arg) -> str | None:
    """Maya's name of an element type with a size in `DTYPE_BYTES`; None for any other argument."""
    if not isinstance(arg, str):
        return None
    bare = arg.rsplit("::", 1)[-1] if "<" not in arg else arg
    name = _TYPE_SPELLINGS.get(bare) or dtype_name(arg) or dtype_name(bare)
    return name if name in DTYPE_BYTES else None


def lists(kernel: str) -> list[tuple[str, bool, bool]] | None:
    """The tensor lists of a multi-tensor kernel named `kernel`: (element type, read, written) each; None when it is
    not one, its name does not say how many lists it has, or its element type has no size in `DTYPE_BYTES`.

    - TE's `AdamFunctor<param, grad, full, moment, index>` (lists gradient, parameter, two moments) and
      `AdamFunctorMaster<...>` (and an fp32 master copy it reads instead of the parameter), ATen's
      `FusedAdamMathFunctorMP<scalar, param, grad, exp_avg, exp_avg_sq, max_exp_avg_sq, depth, ...>`: each its type;
      every list read but a master's model copy, every one but the gradient written;
    - other Adam functors, ATen's `FusedSgdMathFunctor` (with momentum: 3 lists) and `FusedAdagradMathFunctor`: every
      list of the functor's first type read, every one but the gradient (the second) written;
    - norms (`NORMS`) read their lists, writing a partial per block;
    - scales (TE's and apex's `ScaleFunctor<in, out>`): one list of each type, read and written;
    - ATen's `ZeroFunctor` writes its list; `CopyFunctor<out, in, ...>` reads `in` and writes `out`;
    - ATen's other foreach functors (`<T, depth, r_args_depth, res_arg_index>`): the `r_args_depth` lists read, the
      list `res_arg_index` written;
    - any other: every list read, the first written back.
    """
    if not MULTI_TENSOR_KERNEL.search(kernel):
        return None
    parsed = _mangled_args(kernel) if kernel.startswith("_Z") else _demangled_args(kernel)
    if parsed is None:
        return None
    (_, metadata), (functor, args) = parsed
    depth = next((a for a in metadata if isinstance(a, int)), None)
    if depth is None or depth < 1:
        return None
    if args and not isinstance(args[0], int) and _dtype(args[0]) is None:  # complex, int16, not resolved: unsized
        return None
    types = [_dtype(a) for a in args]
    first = next((t for t in types if t), "fp32")

    def typed(positions: list[int]) -> list[str]:
        return [types[p] if p < len(types) and types[p] else first for p in positions]

    ints = [a for a in args if isinstance(a, int)]
    if functor in ("AdamFunctor", "AdamFunctorMaster") and len(args) >= 4:
        moment = 3 if len(args) >= 5 else 2  # TE before 2.0: `<param, grad, full, index>`, moments of `full`
        master = functor == "AdamFunctorMaster"
        listed = typed([1, 0, moment, moment] + ([2] if master else []))
        return [(t, not (master and k == 1), k != 0) for k, t in enumerate(listed[:depth])]
    if functor == "FusedAdamMathFunctorMP":
        return [(t, True, k != 1) for k, t in enumerate(typed(list(range(1, 1 + depth))))]
    if "adam" in functor.lower() or functor in ("FusedSgdMathFunctor", "FusedAdagradMathFunctor"):
        grad = 0 if functor == "AdamFunctor" else 1
        return [(first, True, k != grad) for k in range(depth)]
    if functor in NORMS:
        return [(first, True, False)] * depth
    if functor == "ScaleFunctor" and depth == 2:
        return [(first, True, False), (typed([1])[0], False, True)]
    if functor == "ZeroFunctor":
        return [(first, False, True)] * depth
    if functor == "CopyFunctor" and len(ints) >= 3:
        return [(typed([1])[0], True, False), (first, False, True)]
    if len(ints) >= 3 and ints[0] == depth:  # ATen's `<T, depth, r_args_depth, res_arg_index>`
        reads, written = ints[1], ints[2]
        return [(first, k < reads, k == written) for k in range(depth)]
    return [(first, True, k == 0) for k in range(depth)]


def traffic(kernel: str) -> tuple[float, str] | None:
    """(bytes moved per element of a list, the widest list type) of a multi-tensor kernel named `kernel`; None when
    `lists` does not know its lists."""
    listed = lists(kernel)
    if listed is None:
        return None
    per_element = sum(DTYPE_BYTES[t] * (read + written) for t, read, written in listed)
    return float(per_element), max((t for t, _, _ in listed), key=lambda t: DTYPE_BYTES[t])


def frame_as_add(work_bytes: np.ndarray, dtype: np.ndarray, num: dict[str, np.ndarray], rows: np.ndarray) -> None:
    """Frame `rows` as torch's vectorized add of `dtype` moving `work_bytes`: `ADD_OPERANDS` inputs and an output of
    `work_bytes / (3 itemsize)` elements each (in place)."""
    itemsize = np.array([DTYPE_BYTES.get(d, 4) for d in dtype[rows]], dtype="float64")
    num["numel"][rows] = work_bytes / ((ADD_OPERANDS + 1) * itemsize)
    num["operands"][rows] = ADD_OPERANDS
    num["work_bytes"][rows] = work_bytes


def fill(
    calls: pd.DataFrame,
    kernel_names: np.ndarray,
    launched: np.ndarray,
    family: np.ndarray,
    op: np.ndarray,
    dtype: np.ndarray,
    num: dict[str, np.ndarray],
) -> np.ndarray:
    """Size every launched multi-tensor kernel with a grid by its blocks and frame it as the elementwise add moving
    its traffic (in place); returns which rows."""
    codes, names = pd.factorize(pd.Series(kernel_names, dtype=object))
    table = [traffic(str(name)) for name in names]
    if "grid_x" not in calls:
        return np.zeros(len(calls), dtype=bool)
    blocks = calls["grid_x"].to_numpy(dtype="float64", na_value=np.nan)
    for dim in ("grid_y", "grid_z"):  # one-dimensional launches; absent is 1
        if dim in calls:
            blocks = blocks * calls[dim].to_numpy(dtype="float64", na_value=1.0)
    sized = np.array([t is not None for t in table] + [False])[codes]  # code -1 (no name): the last entry
    rows = launched & sized & np.isfinite(blocks) & (blocks > 0)
    at = np.flatnonzero(rows)
    if not len(at):
        return rows
    per_element = np.array([table[codes[i]][0] for i in at])
    dtype[at] = [table[codes[i]][1] for i in at]
    family[at], op[at] = "elementwise", MULTI_TENSOR_OP
    num["row"][at] = CHUNK_ELEMENTS
    frame_as_add(per_element * blocks[at] * CHUNK_ELEMENTS, dtype, num, at)
    return rows
