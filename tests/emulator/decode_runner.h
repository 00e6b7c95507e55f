// Runs the dequantizing decode kernel (gemmdsl/paths/dequant) on the emulated device, on operands that
// tests/test_emulated_dequant.py wrote, for its float64 reference:
//
//   runner DIR M N K grid_x grid_y grid_z
//
// reads DIR/{A,weights,scales,zeros,C,workspace}.bin (raw bytes; absent files: operands the format has not, and
// no workspace for one k-slice), launches the kernel once over the grid as its C launcher does (the split-K
// counters follow the workspace's M x N floats), and writes C and the workspace back to DIR/{C,workspace}.out.
// Each operand is an allocation of its own, exactly as long as its file, so AddressSanitizer sees any access
// past it. Prints "OK" once the kernel has run.
//
//   runner dequantize DIR N K grid_x
//
// runs the path's dequantize-into-memory kernel likewise on DIR/{weights,scales,zeros,W}.bin and writes W back to
// DIR/W.out.
#pragma once

#include "runner.h"

struct DecodeProblem {
    void *A, *weights, *scales, *zeros, *C, *workspace, *counters;
    int M, N, K;
};

inline std::vector<unsigned char> read_bytes(const std::string& path) {
    std::vector<unsigned char> bytes;
    if (FILE* file = std::fopen(path.c_str(), "rb")) {
        std::fseek(file, 0, SEEK_END);
        bytes.resize(std::ftell(file));
        std::fseek(file, 0, SEEK_SET);
        if (std::fread(bytes.data(), 1, bytes.size(), file) != bytes.size()) std::abort();
        std::fclose(file);
    }
    return bytes;
}

inline void write_bytes(const std::string& path, const std::vector<unsigned char>& bytes) {
    FILE* file = std::fopen(path.c_str(), "wb");
    if (!file || (!bytes.empty() && std::fwrite(bytes.data(), 1, bytes.size(), file) != bytes.size())) std::abort();
    std::fclose(file);
}

inline int emulate_decode(int argc, char** argv, int threads, size_t smem_bytes,
                          void (*kernel)(const DecodeProblem&)) {
    if (argc != 8) {
        std::fprintf(stderr, "usage: DIR M N K grid_x grid_y grid_z\n");
        return 2;
    }
    if (smem_bytes > sizeof(smem)) {
        std::fprintf(stderr, "the kernel's %zu bytes of shared memory exceed the emulator's\n", smem_bytes);
        return 2;
    }
    const std::string dir = argv[1];
    auto arg = [&](int i) { return static_cast<int>(std::atoll(argv[i])); };
    std::vector<unsigned char> a = read_bytes(dir + "/A.bin"), weights = read_bytes(dir + "/weights.bin");
    std::vector<unsigned char> scales = read_bytes(dir + "/scales.bin"), zeros = read_bytes(dir + "/zeros.bin");
    std::vector<unsigned char> c = read_bytes(dir + "/C.bin"), workspace = read_bytes(dir + "/workspace.bin");
    auto data = [](std::vector<unsigned char>& v) { return v.empty() ? nullptr : static_cast<void*>(v.data()); };
    const int M = arg(2), N = arg(3), K = arg(4);
    void* counters = workspace.empty() ? nullptr : workspace.data() + sizeof(float) * M * N;
    const DecodeProblem p{data(a), data(weights), data(scales), data(zeros), data(c), data(workspace), counters,
                          M, N, K};
    EmulatedThreads emulated(threads);
    gridDim = {static_cast<unsigned>(arg(5)), static_cast<unsigned>(arg(6)), static_cast<unsigned>(arg(7))};
    blockDim = {static_cast<unsigned>(threads), 1, 1};
    emulated.launch(gridDim.x, gridDim.z, 0, [&](int) { kernel(p); }, gridDim.y);
    write_bytes(dir + "/C.out", c);
    write_bytes(dir + "/workspace.out", workspace);
    std::printf("OK\n");
    return 0;
}

struct DequantizeProblem {
    void *weights, *scales, *zeros, *W;
    int N, K;
};

inline int emulate_dequantize(int argc, char** argv, int threads, size_t smem_bytes,
                              void (*kernel)(const DequantizeProblem&)) {
    if (argc != 6) {
        std::fprintf(stderr, "usage: dequantize DIR N K grid_x\n");
        return 2;
    }
    if (smem_bytes > sizeof(smem)) {
        std::fprintf(stderr, "the kernel's %zu bytes of shared memory exceed the emulator's\n", smem_bytes);
        return 2;
    }
    const std::string dir = argv[2];
    std::vector<unsigned char> weights = read_bytes(dir + "/weights.bin"), scales = read_bytes(dir + "/scales.bin");
    std::vector<unsigned char> zeros = read_bytes(dir + "/zeros.bin"), w = read_bytes(dir + "/W.bin");
    auto data = [](std::vector<unsigned char>& v) { return v.empty() ? nullptr : static_cast<void*>(v.data()); };
    const DequantizeProblem p{data(weights), data(scales), data(zeros), data(w), std::atoi(argv[3]), std::atoi(argv[4])};
    EmulatedThreads emulated(threads);
    gridDim = {static_cast<unsigned>(std::atoi(argv[5])), 1, 1};
    blockDim = {static_cast<unsigned>(threads), 1, 1};
    emulated.launch(gridDim.x, 1, 0, [&](int) { kernel(p); });
    write_bytes(dir + "/W.out", w);
    std::printf("OK\n");
    return 0;
}
