"""How many examples the random tests draw per run: a few in the quick run, more in the full one
(`pytest --full`; conftest.py sets FULL before the test modules are imported)."""
FULL = False


def examples(quick: int, full: int) -> int:
    return full if FULL else quick
