"""The GEMV path: a few rows of one operand against many rows of the other, CUDA-core dot products along K."""
