// Runs a generated file's padded-copy kernel (paths/wgmma/pad.py) on the CPU: the kernel's text is included
// between the definitions below, each thread of the grid runs in turn (the copy has no barriers), and
// AddressSanitizer stops any read or write outside an operand. PAD_ELEMENT is the kernel's element type.
// Arguments: element bytes (unused), then for A and B
// rows cols ld ld_copy, then the blocks to launch. Each matrix is filled with its elements' own indices and
// allocated to the end of its last row only, and each copy's padding is poisoned; prints "ok" when the copies
// hold every element and the padding is untouched.
#include <cstdint>
#include <cstdio>
#include <cstdlib>
#include <vector>

#define __global__
#define __launch_bounds__(...)
#define __restrict__
struct Index { unsigned x = 0, y = 0, z = 0; };
static Index blockIdx, threadIdx, gridDim, blockDim;

#include PAD_KERNEL  // the kernel's text, cut from the generated file by the test

template <class T>
static int run(int argc, char** argv)
{
    long long rows[2], cols[2], ld[2], ld_copy[2];
    for (int m = 0; m < 2; ++m) {
        rows[m] = atoll(argv[2 + 4 * m]);
        cols[m] = atoll(argv[3 + 4 * m]);
        ld[m] = atoll(argv[4 + 4 * m]);
        ld_copy[m] = atoll(argv[5 + 4 * m]);
    }
    const unsigned blocks = (unsigned)atoi(argv[10]);
    std::vector<T> from[2], to[2];  // each of its exact size, so AddressSanitizer sees past its end
    const T poison = (T)0xA5;
    for (int m = 0; m < 2; ++m) {
        const long long size = rows[m] ? (rows[m] - 1) * ld[m] + cols[m] : 0;
        from[m].resize(size > 0 ? size : 0);
        for (long long i = 0; i < size; ++i) from[m][i] = (T)(i * 7 + 3);
        const long long copy_size = rows[m] * ld_copy[m];
        to[m].resize(copy_size > 0 ? copy_size : 0);
        for (long long i = 0; i < copy_size; ++i) to[m][i] = poison;
    }
    gridDim.x = blocks;
    blockDim.x = PAD_THREADS;
    for (blockIdx.x = 0; blockIdx.x < blocks; ++blockIdx.x)
        for (threadIdx.x = 0; threadIdx.x < PAD_THREADS; ++threadIdx.x)
            PAD_ENTRY(from[0].data(), ld[0], to[0].data(), ld_copy[0], (int)rows[0], (int)cols[0],
                      from[1].data(), ld[1], to[1].data(), ld_copy[1], (int)rows[1], (int)cols[1]);
    for (int m = 0; m < 2; ++m)
        for (long long r = 0; r < rows[m]; ++r)
            for (long long c = 0; c < ld_copy[m]; ++c) {
                const T want = c < cols[m] ? (T)((r * ld[m] + c) * 7 + 3) : poison;
                if (to[m][r * ld_copy[m] + c] != want) {
                    printf("matrix %d row %lld col %lld: %lld, expected %lld\n", m, r, c,
                           (long long)to[m][r * ld_copy[m] + c], (long long)want);
                    return 1;
                }
            }
    printf("ok\n");
    return 0;
}

int main(int argc, char** argv)
{
    if (argc != 11) return 2;
    return run<PAD_ELEMENT>(argc, argv);
}
