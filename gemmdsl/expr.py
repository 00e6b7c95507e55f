"""Integer index expressions that both render to C and evaluate in Python.

Every shared-memory address the emitted kernel computes is built once as an
`Expr`. The emitter prints it; the analysis passes evaluate it for every thread
of a block (with numpy arrays as variable values). So the bank-conflict report
describes the code that was emitted, not a second model of it.

All values are non-negative, so C's truncating division equals Python's `//`.
"""
from __future__ import annotations

from dataclasses import dataclass
from typing import Mapping, Union

import numpy as np

Value = Union[int, np.ndarray]

# C precedence (higher binds tighter); Python orders these operators the same way.
_PRECEDENCE = {"*": 13, "/": 13, "%": 13, "+": 12, "-": 12, ">>": 11, "<<": 11, "&": 8, "^": 7, "|": 6}
_ASSOCIATIVE = {"*", "+", "&", "^", "|"}
_BITWISE = {">>", "<<", "&", "^", "|"}


class Expr:
    precedence = 100

    def render(self) -> str:
        raise NotImplementedError

    def evaluate(self, env: Mapping[str, Value]) -> Value:
        raise NotImplementedError

    def variables(self) -> frozenset[str]:
        raise NotImplementedError

    def python(self, names: dict) -> str:
        """The expression as Python source over variables `v_NAME`; what it calls or refers to is put in `names`
        (the namespace the source runs in). rule.py compiles rules from it."""
        raise NotImplementedError

    def __str__(self) -> str:
        return self.render()

    def __add__(self, other: "Expr | int") -> "Expr":
        return binop("+", self, other)

    def __radd__(self, other: int) -> "Expr":
        return binop("+", other, self)

    def __sub__(self, other: "Expr | int") -> "Expr":
        return binop("-", self, other)

    def __rsub__(self, other: int) -> "Expr":
        return binop("-", other, self)

    def __mul__(self, other: "Expr | int") -> "Expr":
        return binop("*", self, other)

    def __rmul__(self, other: int) -> "Expr":
        return binop("*", other, self)

    def __floordiv__(self, other: "Expr | int") -> "Expr":
        return binop("/", self, other)

    def __mod__(self, other: "Expr | int") -> "Expr":
        return binop("%", self, other)

    def __xor__(self, other: "Expr | int") -> "Expr":
        return binop("^", self, other)

    def __rshift__(self, other: "Expr | int") -> "Expr":
        return binop(">>", self, other)

    def __and__(self, other: "Expr | int") -> "Expr":
        return binop("&", self, other)


@dataclass(frozen=True, eq=True)
class Const(Expr):
    value: int

    def render(self) -> str:
        return str(self.value)

    def evaluate(self, env: Mapping[str, Value]) -> Value:
        return self.value

    def python(self, names: dict) -> str:
        return repr(self.value)

    def variables(self) -> frozenset[str]:
        return frozenset()


@dataclass(frozen=True, eq=True)
class Var(Expr):
    name: str

    def render(self) -> str:
        return self.name

    def evaluate(self, env: Mapping[str, Value]) -> Value:
        return env[self.name]

    def python(self, names: dict) -> str:
        return f"v_{self.name}"

    def variables(self) -> frozenset[str]:
        return frozenset({self.name})


@dataclass(frozen=True, eq=True)
class BinOp(Expr):
    op: str
    lhs: Expr
    rhs: Expr

    @property
    def precedence(self) -> int:  # type: ignore[override]
        return _PRECEDENCE[self.op]

    def render(self) -> str:
        left = self.lhs.render()
        right = self.rhs.render()
        if self.lhs.precedence < self.precedence or self._mixes_bitwise(self.lhs):
            left = f"({left})"
        if self.rhs.precedence < self.precedence or self._mixes_bitwise(self.rhs) or (
            # x * (y / 2) and x + (y - 1) keep theirs: only the same associative operator regroups freely
            self.rhs.precedence == self.precedence
            and not (self.op in _ASSOCIATIVE and getattr(self.rhs, "op", None) == self.op)
        ):
            right = f"({right})"
        return f"{left} {self.op} {right}"

    def _mixes_bitwise(self, child: Expr) -> bool:
        """Bitwise operators mixed with others get parentheses: C's precedence there surprises readers."""
        return (isinstance(child, BinOp) and child.op != self.op
                and (self.op in _BITWISE or child.op in _BITWISE))

    def evaluate(self, env: Mapping[str, Value]) -> Value:
        a = self.lhs.evaluate(env)
        b = self.rhs.evaluate(env)
        return _APPLY[self.op](a, b)

    def python(self, names: dict) -> str:
        return f"({self.lhs.python(names)} {'//' if self.op == '/' else self.op} {self.rhs.python(names)})"

    def variables(self) -> frozenset[str]:
        return self.lhs.variables() | self.rhs.variables()


_APPLY = {
    "+": lambda a, b: a + b,
    "-": lambda a, b: a - b,
    "*": lambda a, b: a * b,
    "/": lambda a, b: a // b,
    "%": lambda a, b: a % b,
    "^": lambda a, b: a ^ b,
    ">>": lambda a, b: a >> b,
    "<<": lambda a, b: a << b,
    "&": lambda a, b: a & b,
    "|": lambda a, b: a | b,
}


def lift(value: "Expr | int") -> Expr:
    return value if isinstance(value, Expr) else Const(int(value))


def binop(op: str, lhs: "Expr | int", rhs: "Expr | int") -> Expr:
    """Build `lhs op rhs`, folding constants and the identities that keep emitted code short."""
    a, b = lift(lhs), lift(rhs)
    if isinstance(a, Const) and isinstance(b, Const):
        return Const(int(_APPLY[op](a.value, b.value)))
    if op == "+":
        if a == Const(0):
            return b
        if b == Const(0):
            return a
        # keep constants on the right and merged: (x + 2) + 3 -> x + 5
        if isinstance(a, Const):
            a, b = b, a
        if isinstance(b, Const) and isinstance(a, BinOp) and a.op == "+" and isinstance(a.rhs, Const):
            return binop("+", a.lhs, a.rhs.value + b.value)
    if op == "*":
        if Const(0) in (a, b):
            return Const(0)
        if a == Const(1):
            return b
        if b == Const(1):
            return a
        if isinstance(a, Const):
            a, b = b, a
        if isinstance(b, Const) and isinstance(a, BinOp) and a.op == "*" and isinstance(a.rhs, Const):
            return binop("*", a.lhs, a.rhs.value * b.value)
    if op == "/" and b == Const(1):
        return a
    if op == "%" and b == Const(1):
        return Const(0)
    if op in ("-", "^", ">>", "<<", "|") and b == Const(0):
        return a
    if op == "&" and b == Const(0):
        return Const(0)
    return BinOp(op, a, b)


def evaluate(value: "Expr | int", env: Mapping[str, Value]) -> Value:
    return lift(value).evaluate(env)


@dataclass(frozen=True, eq=True)
class Func:
    """A small pure function of int parameters, emitted once as a `__device__` helper."""

    name: str
    params: tuple[str, ...]
    body: Expr

    def __call__(self, *args: "Expr | int") -> "Call":
        return Call(self, tuple(lift(a) for a in args))


@dataclass(frozen=True, eq=True)
class Call(Expr):
    func: Func
    args: tuple[Expr, ...]

    def render(self) -> str:
        return f"{self.func.name}(" + ", ".join(a.render() for a in self.args) + ")"

    def evaluate(self, env: Mapping[str, Value]) -> Value:
        inner = {p: a.evaluate(env) for p, a in zip(self.func.params, self.args)}
        return self.func.body.evaluate(inner)

    def python(self, names: dict) -> str:
        name = f"f_{self.func.name}"
        if name not in names:
            source = f"def {name}({', '.join(f'v_{p}' for p in self.func.params)}):\n" \
                     f"    return {self.func.body.python(names)}\n"
            exec(compile(source, f"<{self.func.name}>", "exec"), names)
        return f"{name}({', '.join(a.python(names) for a in self.args)})"

    def variables(self) -> frozenset[str]:
        return frozenset().union(*(a.variables() for a in self.args))
