"""The base of the errors gemmdsl raises for what a caller can fix: a spec's diagnostics, a file that cannot
be written, a problem size the kernels cannot take, a missing GPU or GPU library, a build that failed.

    try:
        gemmdsl.compile_spec("my.gemm")
    except gemmdsl.GemmdslError as err:
        print(err)      # file:line:col diagnostics, or what to install, or what to change

Each error's message says what is wrong and where (a file and line) or what to install; a Python error that
is not a GemmdslError reaching a caller is a bug. Subclasses keep their older bases too (a problem size error
is also a ValueError), so existing `except` clauses still catch them.
"""


class GemmdslError(Exception):
    """An error of gemmdsl's own, whose message is the whole report."""
