// Runs one generated kernel on the emulated device (cuda_host.h) for one problem and checks it:
// every element of C against a double-precision reference, and every float of C's buffer that
// is not an element of C (leading-dimension padding, gaps between batches) still NaN.
//
//   runner M N K lda ldb ldc batch stride_a stride_b stride_c alpha beta entry offset_a offset_b offset_c
//          sk_tiles sk_blocks [entry row col m n]...
//
// entry picks the kernel (0 = vector, 1 = scalar, 8, 10, ... = the narrow ones); offset_x shifts an operand's first element that
// many floats past a 16-byte-aligned allocation, to make misaligned pointers. sk_tiles > 0 runs a
// stream-K call as the launcher makes it: the prepare kernel (entry 3) on the last sk_tiles tiles,
// the stream-K kernel (entry 2; entry 5, its scalar twin, when entry is the scalar kernel; a narrow
// kernel's twin is the entry after it) on
// sk_blocks blocks, then the chosen kernel on the other tiles, each launch over the whole batch
// (grid z). Trailing groups of five run, instead, one launch
// each over a block of C as a GEMM of its own (the interior kernel is entry 4, its partial-k twin 6).
// Entry 7 is the K = 0 kernel (NAME_scale_c), on sk_blocks blocks of SCALE_C_THREADS threads; entry -1 runs
// nothing (an empty C): the launchers' empty problems.
// Operands are
// allocated to their last element exactly, so AddressSanitizer sees any read or write past them.
// Prints one line, "OK ..." or "FAIL ...", and exits 0 only for OK.
#pragma once

#include <cinttypes>
#include <cstdlib>
#include <functional>
#include <map>
#include <memory>
#include <string>
#include <thread>
#include <type_traits>
#include <vector>

constexpr int SCALE_C_THREADS = 256;  // gemmdsl/launch_plan.py's

// TA: A's and B's element type, TC: C's (float, or warp_host.h's __nv_bfloat16 and __half: FMA kernels of 16-bit
// operands widen them to f32 and round C once). The fused kernels' runner (emulate_fused) is float's alone.
template <class TA = float, class TC = float>
struct ProblemOf {
    const TA* A;
    const TA* B;
    TC* C;
    int M, N, K, lda, ldb, ldc;
    float alpha, beta;
    long long stride_a, stride_b, stride_c;
    int sk_tiles;
    // The fuse chain's operands (docs/fusion.md); fused kernels only (emulate_fused).
    const float* bias;
    const float* R;
    int ldr;
    const float* row_scale;
    const float* col_scale;
    const float* a_scale;  // per-tensor scales: one float each, the same for every sub-launch
    const float* b_scale;
};
using Problem = ProblemOf<>;

struct Layout {
    bool a_row, b_row, c_row;
    int threads;
    int tile_m, tile_n;
    bool alpha_beta;  // epilogue: alpha_beta (stream-K then skips preparing C when beta == 1)
    // A fused kernel's sub-launch: its fuse operands offset to the block of C at (row, col), as the launcher does.
    void (*shift_fuse)(Problem&, int row, int col) = nullptr;
};

inline float to_float(float v) { return v; }
inline float round_like(float, float f) { return f; }

template <class T = float>
struct Matrix {
    bool row_major;
    int rows, cols, ld, batch;
    long long stride;
    int offset;
    std::vector<T> storage;

    Matrix(bool row_major, int rows, int cols, int ld, int batch, long long stride, int offset)
        : row_major(row_major), rows(rows), cols(cols), ld(ld), batch(batch), stride(stride), offset(offset) {
        const long long outer = row_major ? rows : cols, inner = row_major ? cols : rows;
        // An empty matrix (K = 0's A and B, M = 0's C) gets no elements.
        storage.resize(rows == 0 || cols == 0 ? offset : offset + (batch - 1) * stride + (outer - 1) * ld + inner);
    }
    size_t index(int b, int r, int c) const {
        return offset + b * stride + (row_major ? (long long)r * ld + c : (long long)c * ld + r);
    }
    T* first() { return storage.data() + offset; }
    float at(int b, int r, int c) const { return to_float(storage[index(b, r, c)]); }
};

inline float uniform(uint64_t& state) {
    state = state * 6364136223846793005ULL + 1442695040888963407ULL;
    return static_cast<float>((state >> 40) & 0xFFFFFF) / 8388608.0f - 1.0f;
}

// The emulated device's threads for blocks of one size: made once per process and reused by every launch,
// since creating a thread costs far more than a block of a test-sized problem (more still under
// AddressSanitizer). Thread t runs threadIdx t of every block of a launch, the blocks one after another:
// `between_blocks` has every thread leave block b before shared memory is poisoned with NaN for block b + 1,
// and none enter it before then.
class EmulatedThreads {
public:
    explicit EmulatedThreads(int count)
        : start_(count + 1), done_(count + 1), between_blocks_(count), block_barrier_(count) {
        for (int t = 0; t < count; ++t) threads_.emplace_back([this, t] { serve(t); });
    }
    ~EmulatedThreads() {
        stopping_ = true;
        start_.arrive_and_wait();
        for (std::thread& thread : threads_) thread.join();
    }

    // blocks along x, `rows` along y (the decode kernel's grid), batch along z; `run` runs one block's thread.
    void launch(int blocks, int batch, int entry, const std::function<void(int)>& run, int rows = 1) {
        job_ = {blocks, rows, batch, entry, &run};
        emulated_barrier = &block_barrier_;
        start_.arrive_and_wait();
        done_.arrive_and_wait();
    }

private:
    struct Job {
        int blocks, rows, batch, entry;
        const std::function<void(int)>* run;
    };

    void serve(int t) {
        threadIdx = {static_cast<unsigned>(t), 0, 0};
        for (;;) {
            start_.arrive_and_wait();
            if (stopping_) return;
            for (int z = 0; z < job_.batch; ++z) {
                for (int y = 0; y < job_.rows; ++y) {
                    for (int x = 0; x < job_.blocks; ++x) {
                        between_blocks_.arrive_and_wait();
                        if (t == 0) std::fill(std::begin(smem), std::end(smem), std::nanf(""));  // stale shared data shows up as NaN
                        between_blocks_.arrive_and_wait();
                        reset_emulated_thread();
                        blockIdx = {static_cast<unsigned>(x), static_cast<unsigned>(y), static_cast<unsigned>(z)};
                        (*job_.run)(job_.entry);
                    }
                }
            }
            done_.arrive_and_wait();
        }
    }

    std::barrier<> start_, done_, between_blocks_, block_barrier_;
    Job job_{};
    bool stopping_ = false;
    std::vector<std::thread> threads_;
};

template <class P>
inline void run_blocks(const Layout& layout, const P& p, int blocks, int batch, int entry,
                       const std::function<void(int, const P&)>& launch) {
    if (blocks == 0 || batch == 0) return;
    static std::map<int, std::unique_ptr<EmulatedThreads>> by_size;
    std::unique_ptr<EmulatedThreads>& threads = by_size[layout.threads];
    if (!threads) threads = std::make_unique<EmulatedThreads>(layout.threads);
    gridDim = {static_cast<unsigned>(blocks), 1, static_cast<unsigned>(batch)};
    blockDim = {static_cast<unsigned>(layout.threads), 1, 1};
    threads->launch(blocks, batch, entry, [&](int chosen) { launch(chosen, p); });
}

// One launch over the block of C at (row, col), m x n, with A, B and C offset to it
// (schedule.SubLaunch); entry as on the command line.
struct SubLaunch {
    int entry, row, col, m, n;
};

inline int tiles_of(const Layout& layout, int m, int n) {
    return ((m + layout.tile_m - 1) / layout.tile_m) * ((n + layout.tile_n - 1) / layout.tile_n);
}

template <class P>
inline void run_grid(const Layout& layout, const P& p, int batch, int entry, int sk_blocks,
                     const std::vector<SubLaunch>& sub_launches, const std::function<void(int, const P&)>& launch) {
    if (entry == -1) return;
    if (entry == 7) {
        Layout scale_c = layout;
        scale_c.threads = SCALE_C_THREADS;
        run_blocks(scale_c, p, sk_blocks, batch, entry, launch);
        return;
    }
    const int tiles = tiles_of(layout, p.M, p.N);
    for (const SubLaunch& s : sub_launches) {
        P q = p;
        q.A = p.A + (layout.a_row ? (long long)s.row * p.lda : s.row);
        q.B = p.B + (layout.b_row ? s.col : (long long)s.col * p.ldb);
        q.C = p.C + (layout.c_row ? (long long)s.row * p.ldc + s.col : (long long)s.col * p.ldc + s.row);
        q.M = s.m;
        q.N = s.n;
        if constexpr (std::is_same_v<P, Problem>)
            if (layout.shift_fuse) layout.shift_fuse(q, s.row, s.col);
        run_blocks(layout, q, tiles_of(layout, s.m, s.n), batch, s.entry, launch);
    }
    if (!sub_launches.empty()) return;
    if (p.sk_tiles == 0) {
        run_blocks(layout, p, tiles, batch, entry, launch);
        return;
    }
    if (!(layout.alpha_beta && p.beta == 1.0f)) run_blocks(layout, p, p.sk_tiles, batch, 3, launch);
    run_blocks(layout, p, sk_blocks, batch, entry == 1 ? 5 : entry >= 8 ? entry + 1 : 2, launch);
    if (tiles > p.sk_tiles) run_blocks(layout, p, tiles - p.sk_tiles, batch, entry, launch);
}

// `tolerance`: C's relative error against the reference, over the float64 products of the operands as stored: f32
// accumulation (1e-5), or C's own rounding where C is 16-bit.
template <class TA = float, class TC = float>
inline int emulate(int argc, char** argv, const Layout& layout,
                   const std::function<void(int, const ProblemOf<TA, TC>&)>& launch, double tolerance = 1e-5) {
    if (argc < 19 || (argc - 19) % 5 != 0) {
        std::fprintf(stderr, "usage: M N K lda ldb ldc batch stride_a stride_b stride_c alpha beta entry "
                             "offset_a offset_b offset_c sk_tiles sk_blocks [entry row col m n]...\n");
        return 2;
    }
    auto arg = [&](int i) { return std::atoll(argv[i]); };
    const int M = arg(1), N = arg(2), K = arg(3), batch = arg(7), entry = arg(13);
    const float alpha = std::atof(argv[11]), beta = std::atof(argv[12]);
    Matrix<TA> a(layout.a_row, M, K, arg(4), batch, arg(8), arg(14));
    Matrix<TA> b(layout.b_row, K, N, arg(5), batch, arg(9), arg(15));
    Matrix<TC> c(layout.c_row, M, N, arg(6), batch, arg(10), arg(16));
    uint64_t state = 12345;
    for (TA& x : a.storage) x = round_like(TA{}, uniform(state));
    for (TA& x : b.storage) x = round_like(TA{}, uniform(state));
    std::fill(c.storage.begin(), c.storage.end(), round_like(TC{}, std::nanf("")));
    std::vector<char> inside(c.storage.size(), 0);
    for (int z = 0; z < batch; ++z)
        for (int m = 0; m < M; ++m)
            for (int n = 0; n < N; ++n) {
                inside[c.index(z, m, n)] = 1;
                if (beta != 0.0f) c.storage[c.index(z, m, n)] = round_like(TC{}, uniform(state));
            }
    const Matrix<TC> c_in = c;

    ProblemOf<TA, TC> p{a.first(), b.first(), c.first(), M, N, K, (int)a.ld, (int)b.ld, (int)c.ld, alpha, beta,
                        a.stride, b.stride, c.stride, (int)arg(17), nullptr, nullptr, 0, nullptr, nullptr};
    std::vector<SubLaunch> sub_launches;
    for (int i = 19; i < argc; i += 5)
        sub_launches.push_back({(int)arg(i), (int)arg(i + 1), (int)arg(i + 2), (int)arg(i + 3), (int)arg(i + 4)});
    run_grid(layout, p, batch, entry, (int)arg(18), sub_launches, launch);

    double error = 0.0, norm = 0.0;
    long long wrong_outside = 0, nonfinite = 0;
    for (size_t i = 0; i < c.storage.size(); ++i)
        if (!inside[i] && !std::isnan(to_float(c.storage[i]))) ++wrong_outside;
    for (int z = 0; z < batch; ++z)
        for (int m = 0; m < M; ++m)
            for (int n = 0; n < N; ++n) {
                double sum = 0.0;
                for (int k = 0; k < K; ++k) sum += (double)a.at(z, m, k) * b.at(z, k, n);
                const double expected = alpha * sum + (beta != 0.0f ? beta * (double)c_in.at(z, m, n) : 0.0);
                const float got = c.at(z, m, n);
                if (!std::isfinite(got)) ++nonfinite;
                error += (got - expected) * (got - expected);
                norm += expected * expected;
            }
    const double relative = std::sqrt(error / (norm > 0 ? norm : 1.0));
    const bool ok = wrong_outside == 0 && nonfinite == 0 && relative <= tolerance;
    std::printf("%s relative=%.3e nonfinite=%lld written_outside_c=%lld\n", ok ? "OK" : "FAIL", relative, nonfinite,
                wrong_outside);
    return ok ? 0 : 1;
}

// A fused kernel (a `fuse` section) on operands that tests/test_emulated.py wrote, for its float64 reference:
//
//   runner fused DIR M N K lda ldb ldc ldr alpha beta entry [entry row col m n]...
//
// reads DIR/{A,B,C,bias,R,row_scale,col_scale,a_scale,b_scale}.bin (raw floats, each as long as the operand's footprint;
// absent files: operands the chain does not read), runs the kernel as `emulate` does, and writes C's
// whole buffer to DIR/C.out.
inline std::vector<float> read_floats(const std::string& path) {
    std::vector<float> values;
    if (FILE* file = std::fopen(path.c_str(), "rb")) {
        std::fseek(file, 0, SEEK_END);
        values.resize(std::ftell(file) / sizeof(float));
        std::fseek(file, 0, SEEK_SET);
        if (std::fread(values.data(), sizeof(float), values.size(), file) != values.size()) std::abort();
        std::fclose(file);
    }
    return values;
}

inline int emulate_fused(int argc, char** argv, const Layout& layout,
                         const std::function<void(int, const Problem&)>& launch) {
    if (argc < 13 || (argc - 13) % 5 != 0) {
        std::fprintf(stderr, "usage: fused DIR M N K lda ldb ldc ldr alpha beta entry [entry row col m n]...\n");
        return 2;
    }
    const std::string dir = argv[2];
    auto arg = [&](int i) { return std::atoll(argv[i]); };
    // Each operand in an allocation of its own, exactly as long as its footprint (AddressSanitizer's bounds).
    std::vector<float> a = read_floats(dir + "/A.bin"), b = read_floats(dir + "/B.bin"), c = read_floats(dir + "/C.bin");
    std::vector<float> bias = read_floats(dir + "/bias.bin"), r = read_floats(dir + "/R.bin");
    std::vector<float> row_scale = read_floats(dir + "/row_scale.bin"), col_scale = read_floats(dir + "/col_scale.bin");
    std::vector<float> a_scale = read_floats(dir + "/a_scale.bin"), b_scale = read_floats(dir + "/b_scale.bin");
    auto data = [](std::vector<float>& v) { return v.empty() ? nullptr : v.data(); };
    Problem p{a.data(), b.data(), c.data(), (int)arg(3), (int)arg(4), (int)arg(5), (int)arg(6), (int)arg(7),
              (int)arg(8), (float)std::atof(argv[10]), (float)std::atof(argv[11]), 0, 0, 0, 0,
              data(bias), data(r), (int)arg(9), data(row_scale), data(col_scale),
              data(a_scale), data(b_scale)};
    std::vector<SubLaunch> sub_launches;
    for (int i = 13; i < argc; i += 5)
        sub_launches.push_back({(int)arg(i), (int)arg(i + 1), (int)arg(i + 2), (int)arg(i + 3), (int)arg(i + 4)});
    run_grid(layout, p, 1, (int)arg(12), 0, sub_launches, launch);
    FILE* out = std::fopen((dir + "/C.out").c_str(), "wb");
    if (!out || std::fwrite(c.data(), sizeof(float), c.size(), out) != c.size()) std::abort();
    std::fclose(out);
    std::printf("OK\n");
    return 0;
}
