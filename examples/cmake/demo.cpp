// Calls a gemmdsl kernel through its header: random A, B and C on the GPU, one NAME_launch, and C
// checked against a double-precision reference on the host. Prints the largest relative error;
// exits 1 when it is too large or a CUDA call fails.
#include GEMMDSL_HEADER

#include <cmath>
#include <cstdio>
#include <cstdlib>
#include <random>
#include <vector>

// KERNEL(_launch) is NAME_launch for the kernel CMake names in GEMMDSL_KERNEL, and likewise for the
// header's constants: the program works for any f32 kernel.
#define PASTE_EXPANDED(name, suffix) name##suffix
#define PASTE(name, suffix) PASTE_EXPANDED(name, suffix)
#define KERNEL(suffix) PASTE(GEMMDSL_KERNEL, suffix)
#define STRING_EXPANDED(name) #name
#define STRING(name) STRING_EXPANDED(name)

#define CUDA_CHECK(call)                                                                        \
    do {                                                                                        \
        const cudaError_t status = (call);                                                      \
        if (status != cudaSuccess) {                                                            \
            std::fprintf(stderr, "%s failed: %s\n", #call, cudaGetErrorString(status));         \
            std::exit(1);                                                                       \
        }                                                                                       \
    } while (0)

// Each element's error is measured against the sum of the magnitudes of its terms, which bounds
// FP32 rounding: about K * 2^-24 at worst for a k-loop of FMAs.
constexpr double TOLERANCE = 1e-5;

// An M x N matrix as the kernel stores it, contiguously: row-major or column-major.
struct Matrix {
    int rows, cols;
    bool row_major;
    std::vector<float> values;

    Matrix(int rows, int cols, bool row_major, std::mt19937& random)
        : rows(rows), cols(cols), row_major(row_major), values((size_t)rows * cols) {
        std::uniform_real_distribution<float> uniform(-1.0f, 1.0f);
        for (float& value : values) value = uniform(random);
    }
    float at(int i, int j) const { return values[row_major ? (size_t)i * cols + j : (size_t)j * rows + i]; }
    size_t bytes() const { return values.size() * sizeof(float); }
};

static float* to_device(const Matrix& matrix) {
    float* device = nullptr;
    CUDA_CHECK(cudaMalloc(&device, matrix.bytes()));
    CUDA_CHECK(cudaMemcpy(device, matrix.values.data(), matrix.bytes(), cudaMemcpyHostToDevice));
    return device;
}

int main() {
    // A few tiles in each direction. Kernels with checked bounds also get partial edge tiles, 4
    // elements deep so that the leading dimensions stay multiples of a float4 and the vector
    // kernel, not the scalar one, runs.
    const int edge = 4;
    const int M = 2 * KERNEL(_BLOCK_M) + (KERNEL(_M_MULTIPLE) == 1 ? edge : 0);
    const int N = 3 * KERNEL(_BLOCK_N) + (KERNEL(_N_MULTIPLE) == 1 ? edge : 0);
    const int K = 8 * KERNEL(_BLOCK_K) + (KERNEL(_K_MULTIPLE) == 1 ? edge : 0);
    const float alpha = 1.5f, beta = 0.5f;
    const bool alpha_beta = KERNEL(_ALPHA_BETA);

    std::mt19937 random(2024);
    const Matrix a(M, K, KERNEL(_A_ROW_MAJOR), random);
    const Matrix b(K, N, KERNEL(_B_ROW_MAJOR), random);
    Matrix c(M, N, KERNEL(_C_ROW_MAJOR), random);
    float* device_a = to_device(a);
    float* device_b = to_device(b);
    float* device_c = to_device(c);

    CUDA_CHECK(KERNEL(_launch)(device_a, device_b, device_c, M, N, K, alpha, beta, 0));
    CUDA_CHECK(cudaDeviceSynchronize());
    Matrix result = c;
    CUDA_CHECK(cudaMemcpy(result.values.data(), device_c, result.bytes(), cudaMemcpyDeviceToHost));

    double max_error = 0.0;
    for (int i = 0; i < M; ++i) {
        for (int j = 0; j < N; ++j) {
            double sum = 0.0, magnitude = 0.0;
            for (int k = 0; k < K; ++k) {
                const double term = (double)a.at(i, k) * b.at(k, j);
                sum += term;
                magnitude += std::fabs(term);
            }
            double expected = sum;
            if (alpha_beta) {
                expected = alpha * sum + beta * (double)c.at(i, j);
                magnitude = std::fabs(alpha) * magnitude + std::fabs(beta * (double)c.at(i, j));
            }
            const double error = std::fabs(result.at(i, j) - expected) / (magnitude > 0.0 ? magnitude : 1.0);
            if (std::isnan(error) || error > max_error) max_error = error;  // a NaN stays: it never compares
        }
    }
    CUDA_CHECK(cudaFree(device_a));
    CUDA_CHECK(cudaFree(device_b));
    CUDA_CHECK(cudaFree(device_c));

    const bool passed = max_error <= TOLERANCE;
    std::printf("%s: %dx%dx%d, max relative error %.3g (tolerance %.0e): %s\n", STRING(GEMMDSL_KERNEL),
                M, N, K, max_error, TOLERANCE, passed ? "PASSED" : "FAILED");
    return passed ? 0 : 1;
}
