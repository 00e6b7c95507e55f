"""Launch rules, written once: rendered to the C launcher, evaluated by the Python runtime.

A host launcher decides things from a call's sizes and operands (which kernel runs, how a stream-K
launch splits, how many blocks each launch gets). The Python runtime must decide the same, and the
analysis predicts the same. So each decision is a `Rule`: named inputs and steps: `Let` bindings (each
an expression of the inputs and earlier bindings), `Refuse` (the call is refused), `Apply` (another rule,
printed as a C function, called) and `Loop` over a table (with `Skip`), built from expr.py's integer
expressions and the nodes below (comparisons, `&&`, `||`, `!`, `?:`, min, max, ceil-div, casts, kernel names,
struct fields, array elements). `Rule.render_function` and `Rule.render_inline` print it as C (a `const`
local per binding, so the launcher reads like hand-written code); `Rule.evaluate` runs it in Python, as a
function compiled once from each node's `python` source.

Semantics are C's `long long` on the values the rules see: every value is an integer (a comparison is
0 or 1) and non-negative where it is divided, so C's truncating `/` and `%` equal Python's `//` and `%`;
`&&`, `||` and `?:` evaluate only what C evaluates. A `Symbol` (a kernel's name) is a value too: C prints
it, Python gets its name. A rule's inputs and bindings are plain names; C sees them as variables of the
same names (the function's parameters, or locals of the launcher for an inline rule).
"""
from __future__ import annotations

from dataclasses import dataclass
from functools import cached_property, lru_cache
from typing import Any, Callable, ContextManager, Mapping, Protocol, Sequence, Union

from .expr import Const, Expr, Func, Var, lift

Operand = Union[Expr, int]

# C precedence (higher binds tighter), below expr.py's arithmetic (12-13) and shifts (11).
_COMPARE_PRECEDENCE = {"<": 10, "<=": 10, ">": 10, ">=": 10, "==": 9, "!=": 9}
_LOGIC_PRECEDENCE = {"&&": 5, "||": 4}
_SELECT_PRECEDENCE = 3
_UNARY_PRECEDENCE = 14
_COMPARE = {"<": lambda a, b: a < b, "<=": lambda a, b: a <= b, ">": lambda a, b: a > b,
            ">=": lambda a, b: a >= b, "==": lambda a, b: a == b, "!=": lambda a, b: a != b}


class RuleExpr(Expr):
    """A node of the rules' own: Python evaluates it through its `python` source (compiled once per node), the
    one Python meaning it has, which the rules' compiled functions (`Rule.evaluate`) use too."""

    def evaluate(self, env: Mapping[str, Any]) -> Any:
        function, free = _compiled_expression(self)
        return function(*(env[name] for name in free))


@lru_cache(maxsize=1024)
def _compiled_expression(expr: Expr) -> tuple[Callable[..., Any], tuple[str, ...]]:
    names: dict = {}
    free = tuple(sorted(expr.variables()))
    source = f"lambda {', '.join(f'v_{name}' for name in free)}: {expr.python(names)}"
    return eval(compile(source, "<rule expression>", "eval"), names), free


def _wrap(child: Expr, precedence: int, strict: bool = False) -> str:
    """`child` as an operand of an operator of `precedence`, in parentheses where C would bind it otherwise
    (`strict`: also at equal precedence, for a right operand or a mix of relational operators)."""
    text = child.render()
    if child.precedence < precedence or (strict and child.precedence == precedence):
        return f"({text})"
    return text


@dataclass(frozen=True, eq=True)
class Compare(RuleExpr):
    """`lhs op rhs`: 1 or 0."""

    op: str
    lhs: Expr
    rhs: Expr

    @property
    def precedence(self) -> int:  # type: ignore[override]
        return _COMPARE_PRECEDENCE[self.op]

    def render(self) -> str:
        return f"{_wrap(self.lhs, self.precedence, strict=True)} {self.op} {_wrap(self.rhs, self.precedence, True)}"

    def python(self, names: dict) -> str:
        return f"int({self.lhs.python(names)} {self.op} {self.rhs.python(names)})"

    def variables(self) -> frozenset[str]:
        return self.lhs.variables() | self.rhs.variables()


@dataclass(frozen=True, eq=True)
class Logic(RuleExpr):
    """`a && b && ...` or `a || b || ...`, short-circuit as in C: 1 or 0."""

    op: str
    terms: tuple[Expr, ...]

    @property
    def precedence(self) -> int:  # type: ignore[override]
        return _LOGIC_PRECEDENCE[self.op]

    def render(self) -> str:
        # A mix of && and || gets parentheses: compilers warn about it, readers misread it.
        return f" {self.op} ".join(f"({t.render()})" if isinstance(t, Logic) or t.precedence < self.precedence
                                   else t.render() for t in self.terms)

    def python(self, names: dict) -> str:
        joined = f" {'and' if self.op == '&&' else 'or'} ".join(t.python(names) for t in self.terms)
        return f"(1 if {joined} else 0)"

    def variables(self) -> frozenset[str]:
        return frozenset().union(*(t.variables() for t in self.terms))


@dataclass(frozen=True, eq=True)
class Not(RuleExpr):
    operand: Expr
    precedence = _UNARY_PRECEDENCE

    def render(self) -> str:
        return "!" + _wrap(self.operand, self.precedence)

    def python(self, names: dict) -> str:
        return f"int(not {self.operand.python(names)})"

    def variables(self) -> frozenset[str]:
        return self.operand.variables()


@dataclass(frozen=True, eq=True)
class Select(RuleExpr):
    """`condition ? then : other`; only the branch taken is evaluated."""

    condition: Expr
    then: Expr
    other: Expr
    precedence = _SELECT_PRECEDENCE

    def render(self) -> str:
        # a ? b : c ? d : e chains to the right without parentheses, as readers expect
        other = self.other.render() if isinstance(self.other, Select) else _wrap(self.other, self.precedence, True)
        return (f"{_wrap(self.condition, self.precedence, True)} ? {_wrap(self.then, self.precedence, True)} : "
                f"{other}")

    def python(self, names: dict) -> str:
        return f"({self.then.python(names)} if {self.condition.python(names)} else {self.other.python(names)})"

    def variables(self) -> frozenset[str]:
        return self.condition.variables() | self.then.variables() | self.other.variables()


@dataclass(frozen=True, eq=True)
class Cast(RuleExpr):
    """`(ctype)operand`: C widens (or narrows) the value; Python's integers need neither."""

    ctype: str
    operand: Expr
    precedence = _UNARY_PRECEDENCE

    def render(self) -> str:
        return f"({self.ctype})" + _wrap(self.operand, self.precedence)

    def python(self, names: dict) -> str:
        return self.operand.python(names)

    def variables(self) -> frozenset[str]:
        return self.operand.variables()


@dataclass(frozen=True, eq=True)
class Symbol(RuleExpr):
    """A name C knows (a kernel): C prints it, Python evaluates to the name."""

    name: str

    def render(self) -> str:
        return self.name

    def python(self, names: dict) -> str:
        return repr(self.name)

    def variables(self) -> frozenset[str]:
        return frozenset()


@dataclass(frozen=True, eq=True)
class Address(RuleExpr):
    """A pointer as an integer: C's `reinterpret_cast<uintptr_t>(name)`, Python's env[name] (the address)."""

    name: str

    def render(self) -> str:
        return f"reinterpret_cast<uintptr_t>({self.name})"

    def python(self, names: dict) -> str:
        return f"v_{self.name}"

    def variables(self) -> frozenset[str]:
        return frozenset({self.name})


@dataclass(frozen=True, eq=True)
class Literal(RuleExpr):
    """A constant C spells its own way (`1.0f`): C prints `text`, Python evaluates to `value`."""

    text: str
    value: Any

    def render(self) -> str:
        return self.text

    def python(self, names: dict) -> str:
        return repr(self.value)

    def variables(self) -> frozenset[str]:
        return frozenset()


@dataclass(frozen=True, eq=True)
class Field(RuleExpr):
    """A field of a struct the rule reads (a family member's figures): C's `struct.name`, Python's
    struct[name] (a mapping)."""

    struct: Expr
    name: str
    precedence = 16

    def render(self) -> str:
        return f"{_wrap(self.struct, self.precedence)}.{self.name}"

    def python(self, names: dict) -> str:
        return f"{self.struct.python(names)}[{self.name!r}]"

    def variables(self) -> frozenset[str]:
        return self.struct.variables()


@dataclass(frozen=True, eq=True)
class Index(RuleExpr):
    """`array[index]`."""

    array: Expr
    index: Expr
    precedence = 16

    def __post_init__(self) -> None:
        object.__setattr__(self, "index", lift(self.index))

    def render(self) -> str:
        return f"{_wrap(self.array, self.precedence)}[{self.index.render()}]"

    def python(self, names: dict) -> str:
        return f"{self.array.python(names)}[{self.index.python(names)}]"

    def variables(self) -> frozenset[str]:
        return self.array.variables() | self.index.variables()


@dataclass(frozen=True, eq=True)
class Function(RuleExpr):
    """A rule printed as a C function (`Rule.render_function`) that `Apply` calls: C's name, Python's rule."""

    name: str
    rule: "Rule"

    def render(self) -> str:
        return self.name

    def python(self, names: dict) -> str:
        names[f"r_{self.name}"] = self.rule
        return f"r_{self.name}"

    def variables(self) -> frozenset[str]:
        return frozenset()


@dataclass(frozen=True, eq=True)
class Extremum(RuleExpr):
    """C's `min(a, b)` or `max(a, b)` function, as CUDA device code has them (host code reads `minimum`'s ?:)."""

    function: str
    lhs: Expr
    rhs: Expr

    def render(self) -> str:
        return f"{self.function}({self.lhs.render()}, {self.rhs.render()})"

    def python(self, names: dict) -> str:
        return f"{self.function}({self.lhs.python(names)}, {self.rhs.python(names)})"

    def variables(self) -> frozenset[str]:
        return self.lhs.variables() | self.rhs.variables()


def call_min(a: Operand, b: Operand) -> Expr:
    return Extremum("min", lift(a), lift(b))


def call_max(a: Operand, b: Operand) -> Expr:
    return Extremum("max", lift(a), lift(b))


def compare(op: str, lhs: Operand, rhs: Operand) -> Expr:
    a, b = lift(lhs), lift(rhs)
    if isinstance(a, Const) and isinstance(b, Const):
        return Const(int(_COMPARE[op](a.value, b.value)))
    return Compare(op, a, b)


def lt(a: Operand, b: Operand) -> Expr:
    return compare("<", a, b)


def le(a: Operand, b: Operand) -> Expr:
    return compare("<=", a, b)


def gt(a: Operand, b: Operand) -> Expr:
    return compare(">", a, b)


def ge(a: Operand, b: Operand) -> Expr:
    return compare(">=", a, b)


def eq(a: Operand, b: Operand) -> Expr:
    return compare("==", a, b)


def ne(a: Operand, b: Operand) -> Expr:
    return compare("!=", a, b)


def _logic(op: str, terms: Sequence[Operand]) -> Expr:
    """`op` over `terms`, flattened, with constant terms folded (a true term of && drops out)."""
    absorbing, identity = (0, 1) if op == "&&" else (1, 0)
    kept: list[Expr] = []
    for term in map(lift, terms):
        if isinstance(term, Const):
            if bool(term.value) == bool(absorbing):
                return Const(absorbing)
            continue
        kept.extend(term.terms if isinstance(term, Logic) and term.op == op else (term,))
    if not kept:
        return Const(identity)
    return kept[0] if len(kept) == 1 else Logic(op, tuple(kept))


def all_of(*terms: Operand) -> Expr:
    return _logic("&&", terms)


def any_of(*terms: Operand) -> Expr:
    return _logic("||", terms)


def not_(operand: Operand) -> Expr:
    a = lift(operand)
    return Const(int(not a.value)) if isinstance(a, Const) else Not(a)


def select(condition: Operand, then: Operand, other: Operand) -> Expr:
    c = lift(condition)
    if isinstance(c, Const):
        return lift(then) if c.value else lift(other)
    return Select(c, lift(then), lift(other))


def minimum(a: Operand, b: Operand) -> Expr:
    """min(a, b), as C's `a < b ? a : b` (its operands should be names or constants: C repeats them)."""
    return select(lt(a, b), a, b)


def maximum(a: Operand, b: Operand) -> Expr:
    return select(gt(a, b), a, b)


def ceil_div(a: Operand, b: Operand) -> Expr:
    """ceil(a / b) for a >= 0 and b >= 1: `(a + b - 1) / b` (b is printed twice: a name or a constant)."""
    divisor = lift(b)
    rounded = lift(a) + (divisor.value - 1) if isinstance(divisor, Const) else lift(a) + divisor - 1
    return rounded // divisor


def cast(ctype: str, operand: Operand) -> Expr:
    return Cast(ctype, lift(operand))


# --- rules -------------------------------------------------------------------------------------------


@dataclass(frozen=True)
class Let:
    """`const ctype name = value;`, with a comment saying what it is."""

    name: str
    value: Expr
    ctype: str = "long long"
    comment: str | None = None


@dataclass(frozen=True)
class Refuse:
    """The call is refused where `condition` holds: the C launcher returns `cudaErrorInvalidValue` and
    launches nothing; `Rule.evaluate` raises `Refused`."""

    condition: Expr
    comment: str | None = None


@dataclass(frozen=True)
class Apply:
    """A rule printed as a C function, called: its outputs bound under `names`, of `output_type`. `callee`
    renders as the function (a `Function`, or a struct's pointer to one) and evaluates to the rule; with
    `when`, only where it holds (the outputs are 0 otherwise). With `returns` (one of `names`), the function
    returns that output (`render_function`'s `returns`), `refused` where the rule refuses."""

    callee: Expr
    arguments: tuple[Expr, ...]
    names: tuple[str, ...]
    output_type: str = "int"
    when: Expr | None = None
    comment: str | None = None
    returns: str | None = None
    refused: int = -1

    def __post_init__(self) -> None:
        object.__setattr__(self, "arguments", tuple(lift(a) for a in self.arguments))


@dataclass(frozen=True)
class Skip:
    """Inside a `Loop`: the rest of this iteration is skipped where `condition` holds (C's `continue`)."""

    condition: Expr
    comment: str | None = None


@dataclass(frozen=True)
class Loop:
    """`for (int index = 0; index < count; ++index)` over `steps` (bindings of one iteration), then where `when`
    holds the `state` variables take their `updates` (evaluated before any is assigned: they must not read the
    state); the loop ends after an iteration where `stop` holds. `state` is (name, C type, initial value),
    declared before the loop and read after it."""

    index: str
    count: Expr
    state: tuple[tuple[str, str, Expr], ...]
    steps: tuple["Step", ...]
    when: Expr
    updates: tuple[tuple[str, Expr], ...]
    stop: Expr | None = None
    comment: str | None = None


Step = Union[Let, Refuse, Apply, Skip, Loop]


class Refused(Exception):
    """A rule refused its inputs (a `Refuse` step held)."""


class Lines(Protocol):
    def line(self, text: str = "") -> None: ...

    def comment(self, text: str) -> None: ...

    def block(self, header: str) -> ContextManager[None]: ...


@dataclass(frozen=True)
class Rule:
    """A launch decision: `inputs`, then `steps` in order, then `outputs` (name, expression) read off."""

    name: str
    inputs: tuple[str, ...]
    steps: tuple[Step, ...]
    outputs: tuple[tuple[str, Expr], ...] = ()
    comment: str | None = None

    def __post_init__(self) -> None:
        known = _check(self.name, self.steps, set(self.inputs))
        for _, value in self.outputs:
            assert value.variables() <= known, f"rule {self.name}: an output reads an unbound name"

    def evaluate(self, inputs: Mapping[str, Any]) -> dict[str, Any]:
        """Every input, binding and output for `inputs` (a name each); raises `Refused` where a `Refuse` holds."""
        return self._function(*(inputs[name] for name in self.inputs))

    @cached_property
    def _function(self) -> Callable[..., dict[str, Any]]:
        """The rule as a Python function of its inputs (`python_source`), compiled once."""
        names: dict = {"Refused": Refused}
        exec(compile(self.python_source(names), f"<rule {self.name}>", "exec"), names)
        return names["rule"]

    def python_source(self, names: dict) -> str:
        """`def rule(v_INPUT, ...)`: the steps as Python statements (each node's `python`), returning every
        binding the C function would hold at its end, by name."""
        lines = [f"def rule({', '.join(f'v_{name}' for name in self.inputs)}):"]
        bound = _python(self.name, self.steps, names, lines, 1) + [name for name, _ in self.outputs]
        lines += [f"    v_{name} = {value.python(names)}" for name, value in self.outputs]
        lines.append("    return {" + ", ".join(f"{name!r}: v_{name}" for name in [*self.inputs, *bound]) + "}")
        return "\n".join(lines) + "\n"

    def render_inline(self, o: Lines, refuse: str = "return cudaErrorInvalidValue;") -> None:
        """The steps as statements of the enclosing C function, whose variables hold the inputs."""
        if self.comment:
            o.comment(self.comment)
        _render(self.steps, o, refuse)

    def render_function(self, o: Lines, c_name: str, parameters: Sequence[str], output_type: str,
                        returns: str | None = None, refused: str = "") -> None:
        """`static void c_name(parameters..., output_type* out...)`: the steps, then each output through its
        pointer. `parameters` declares the inputs in order (`long long tiles`, ...). With `returns`, that output
        is the function's value (of `output_type`) and `refused` what a `Refuse` returns."""
        pointers = [f"{output_type}* {name}" for name, _ in self.outputs if name != returns]
        if self.comment:
            o.comment(self.comment)
        with o.block(f"static {output_type if returns else 'void'} {c_name}({', '.join([*parameters, *pointers])})"):
            _render(self.steps, o, f"return {refused};" if returns else "return;")
            for name, value in self.outputs:
                if name != returns:
                    o.line(f"*{name} = ({output_type})" + _wrap(value, _UNARY_PRECEDENCE) + ";")
            if returns:
                o.line(f"return {dict(self.outputs)[returns].render()};")


def _check(rule: str, steps: Sequence[Step], known: set[str]) -> set[str]:
    """The names bound after `steps`, asserting each step reads only names bound before it and binds new ones."""
    for step in steps:
        if isinstance(step, Loop):
            for name, _, initial in step.state:
                assert initial.variables() <= known and name not in known, f"rule {rule}: loop state {name}"
            known |= {name for name, _, _ in step.state}
            inner = _check(rule, step.steps, known | {step.index})
            for expr in (step.count, step.when, *(value for _, value in step.updates)):
                assert expr.variables() <= inner, f"rule {rule}: the loop over {step.index} reads an unbound name"
            assert not {v for _, value in step.updates for v in value.variables()} & {n for n, _, _ in step.state}
            continue
        missing = _reads(step) - known
        assert not missing, f"rule {rule}: {sorted(missing)} used before bound"
        for name in _binds(step):
            assert name not in known, f"rule {rule}: {name} bound twice"
            known.add(name)
    return known


def _python(rule: str, steps: Sequence[Step], names: dict, lines: list[str], depth: int) -> list[str]:
    """`steps` as Python statements at `depth`, appended to `lines`; the names they bind for the code after them."""
    pad = "    " * depth
    bound: list[str] = []
    for step in steps:
        if isinstance(step, (Refuse, Skip)):
            lines.append(f"{pad}if {step.condition.python(names)}:")
            lines.append(f"{pad}    raise Refused({(step.comment or rule)!r})" if isinstance(step, Refuse)
                         else f"{pad}    continue")
        elif isinstance(step, Apply):
            lines.append(f"{pad}{' = '.join(f'v_{name}' for name in step.names)} = 0")
            inner = pad
            if step.when is not None:
                lines.append(f"{pad}if {step.when.python(names)}:")
                inner += "    "
            arguments = "".join(f"{a.python(names)}, " for a in step.arguments)
            lines += [f"{inner}callee = {step.callee.python(names)}", f"{inner}try:",
                      f"{inner}    out = callee.evaluate(dict(zip(callee.inputs, ({arguments}))))",
                      f"{inner}except Refused:",
                      f"{inner}    " + ("raise" if step.returns is None else f"v_{step.returns} = {step.refused!r}"),
                      f"{inner}else:"]
            lines += [f"{inner}    v_{name} = out[callee.outputs[{k}][0]]" for k, name in enumerate(step.names)]
            bound += step.names
        elif isinstance(step, Loop):
            lines += [f"{pad}v_{name} = {initial.python(names)}" for name, _, initial in step.state]
            lines.append(f"{pad}for v_{step.index} in range({step.count.python(names)}):")
            _python(rule, step.steps, names, lines, depth + 1)
            lines.append(f"{pad}    if {step.when.python(names)}:")
            lines += [f"{pad}        update_{k} = {value.python(names)}" for k, (_, value) in enumerate(step.updates)]
            lines += [f"{pad}        v_{name} = update_{k}" for k, (name, _) in enumerate(step.updates)]
            if step.stop is not None:
                lines += [f"{pad}    if {step.stop.python(names)}:", f"{pad}        break"]
            bound += [name for name, _, _ in step.state]
        else:
            lines.append(f"{pad}v_{step.name} = {step.value.python(names)}")
            bound.append(step.name)
    return bound


def _render(steps: Sequence[Step], o: Lines, refuse: str) -> None:
    for step in steps:
        if step.comment:
            o.comment(step.comment)
        if isinstance(step, Refuse):
            o.line(f"if ({step.condition.render()}) {refuse}")
        elif isinstance(step, Skip):
            o.line(f"if ({step.condition.render()}) continue;")
        elif isinstance(step, Apply):
            pointers = [name for name in step.names if name != step.returns]
            if pointers:
                o.line(f"{step.output_type} " + ", ".join(f"{name} = 0" for name in pointers) + ";")
            arguments = [a.render() for a in step.arguments] + [f"&{name}" for name in pointers]
            call = f"{step.callee.render()}({', '.join(arguments)})"
            if step.returns is not None:
                assert step.when is None, "a returned output is bound unconditionally"
                o.line(f"const {step.output_type} {step.returns} = {call};")
            else:
                o.line(f"{call};" if step.when is None else f"if ({step.when.render()}) {call};")
        elif isinstance(step, Loop):
            for name, ctype, initial in step.state:
                o.line(f"{ctype} {name} = {initial.render()};")
            test = Compare("<", Var(step.index), step.count).render()
            with o.block(f"for (int {step.index} = 0; {test}; ++{step.index})"):
                _render(step.steps, o, refuse)
                with o.block(f"if ({step.when.render()})"):
                    for name, value in step.updates:
                        o.line(f"{name} = {value.render()};")
                if step.stop is not None:
                    o.line(f"if ({step.stop.render()}) break;")
        else:
            o.line(f"const {step.ctype} {step.name} = {step.value.render()};")


def _reads(step: Union[Let, Refuse, Apply, Skip]) -> frozenset[str]:
    if isinstance(step, Let):
        return step.value.variables()
    if isinstance(step, (Refuse, Skip)):
        return step.condition.variables()
    when = step.when.variables() if step.when is not None else frozenset()
    return frozenset().union(step.callee.variables(), when, *(a.variables() for a in step.arguments))


def _binds(step: Union[Let, Refuse, Apply, Skip]) -> tuple[str, ...]:
    return (step.name,) if isinstance(step, Let) else step.names if isinstance(step, Apply) else ()


def render_func(o: Lines, func: Func, parameters: Sequence[str], return_type: str) -> None:
    """`static return_type name(parameters...) { return body; }`: a helper the rules call (expr.Call)."""
    with o.block(f"static {return_type} {func.name}({', '.join(parameters)})"):
        o.line(f"return {func.body.render()};")
