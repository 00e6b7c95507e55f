import numpy as np
from hypothesis import given
from hypothesis import strategies as st

from gemmdsl.expr import Const, Func, Var


def test_constant_folding_and_identities():
    x = Var("x")
    assert (x * 1 + 0).render() == "x"
    assert (x * 0).render() == "0"
    assert ((x + 2) + 3).render() == "x + 5"
    assert ((x * 4) * 8).render() == "x * 32"
    assert (Const(6) // 4).render() == "1"


def test_rendering_respects_c_precedence():
    x, y = Var("x"), Var("y")
    assert ((x + y) * 4).render() == "(x + y) * 4"
    assert (x // (y * 2)).render() == "x / (y * 2)"
    assert (x ^ ((x >> 5) & 16)).render() == "x ^ ((x >> 5) & 16)"


@given(st.integers(0, 10_000), st.integers(0, 10_000))
def test_evaluation_matches_python_for_swizzle_like_expressions(a, b):
    x, y = Var("x"), Var("y")
    e = ((x * 132 + y) ^ (((x * 132 + y) >> 5) & 48)) % 4096
    assert e.evaluate({"x": a, "y": b}) == ((a * 132 + b) ^ (((a * 132 + b) >> 5) & 48)) % 4096


def test_calls_evaluate_their_body_and_vectorise():
    f = Func("f", ("m", "k"), Var("k") * 8 + Var("m"))
    call = f(Var("tid") // 2, 3)
    assert call.render() == "f(tid / 2, 3)"
    assert list(call.evaluate({"tid": np.arange(4)})) == [24, 24, 25, 25]
