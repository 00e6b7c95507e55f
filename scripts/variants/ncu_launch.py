"""What ncu_stalls.sh profiles: one 4096^3 launch of each variant (and of cuBLAS with CUBLAS=1)."""
import os
import sys

sys.path.insert(0, os.getcwd())
sys.path.insert(0, os.path.dirname(os.path.abspath(__file__)))

import cupy  # noqa: E402

from bench_variants import variant  # noqa: E402
from gemmdsl.runtime import Kernel  # noqa: E402

SIZE = 4096
a = cupy.random.uniform(-1, 1, (SIZE, SIZE), dtype=cupy.float32)
b = cupy.random.uniform(-1, 1, (SIZE, SIZE), dtype=cupy.float32)
c = cupy.empty((SIZE, SIZE), dtype=cupy.float32)
if os.environ.get("CUBLAS"):
    cupy.matmul(a, b, out=c)
for argument in sys.argv[1:]:
    Kernel(variant(argument)[1])(a, b, c)
cupy.cuda.Device().synchronize()
