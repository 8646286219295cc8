/*
 * strided_copy.h — arrayport's host copy kernel: any strided array (byte strides, any
 * sign) into a new C-contiguous block. Plain C that compiles anywhere, with vector paths
 * chosen at run time: on x86-64 SSE2 (the baseline), SSSE3 (byte shuffles for 3- and
 * 4-channel images), AVX2 and AVX-512 block transposes; on ARM64 NEON. Each path's blocks
 * live in a header of their own (transpose_*.h, channels_ssse3.h); this one sizes, walks
 * and splits the copy. No Python, no allocation, safe to run without the GIL. Sizes come
 * from the caches the machine reports (ap_copy_configure).
 *
 * Why our own: the copies that matter (a transposed matrix, a permuted 3-d block) read
 * the source across its rows. An element-by-element loop in destination order touches a
 * new cache line — and for power-of-two row lengths the same cache set — on every read,
 * and runs at a tenth of memory bandwidth. This kernel
 *   1. drops size-1 dimensions and merges dimensions contiguous with each other
 *      (merged_dims.h: the rule every copy plans from), so the copy is described by as
 *      few, as long, dimensions as possible;
 *   2. copies a destination-contiguous innermost dimension as one memcpy per row;
 *   3. otherwise pairs the destination's innermost dimension with the dimension the
 *      source moves through fastest, and copies that plane in blocks of one cache line by
 *      one cache line (64 x 64 bytes, 32 x 32 two-byte, 16 x 16 four-byte, 8 x 8
 *      eight-byte or 4 x 4 sixteen-byte elements, transposed by unpack networks): each
 *      source line is read whole, transposed in registers (through a small staging
 *      block where the registers cannot hold it), and each destination line is written
 *      whole — with non-temporal stores when the result is larger than the caches, as
 *      memcpy itself does, so writing costs no reads;
 *   4. walks the blocks in the order the memory system likes: long destination rows in
 *      bands of blocks whose open source lines fit in half the L1 data cache (8 blocks of
 *      4-byte elements with a 32 KiB L1) and in a quarter of the L2 ways their stride
 *      can reach (ap_band_lines), with the source lines of the block 4 blocks
 *      ahead (along the band, else down it) prefetched into L2; short destination rows
 *      down each column of blocks, prefetching 4 blocks down;
 *   5. planes with fewer than a block of rows or columns — images' 3 or 4 channels,
 *      HWC <-> CHW, NHWC <-> NCHW — are (de)interleaved pixel by pixel, 16 pixels at a
 *      time with SSSE3 byte shuffles where the CPU has them.
 * Memory for results comes from ap_host_alloc (huge pages for large blocks).
 * Measured in benchmarks/bench_copy.py (figures in the issue notes and docs).
 */
#ifndef ARRAYPORT_STRIDED_COPY_H
#define ARRAYPORT_STRIDED_COPY_H

#include <stdint.h>
#include <string.h>
#include "merged_dims.h"

#include <stdio.h>
#include <stdlib.h>
#if defined(__linux__) || defined(__APPLE__)
#include <unistd.h>
#endif
/* Large copies are split across threads (ap_copy_strided_to_contiguous), started through
 * CPython's own thread API when the kernel is built into the extension: calling
 * pthread_create directly would bind the core to glibc 2.34's symbol version and cost the
 * wheel its manylinux2014 tag. Built without Python.h, copies run on one thread. */
#define AP_COPY_MAX_THREADS 16
#ifdef Py_PYTHON_H
#include "pythread.h"
#define AP_COPY_THREADS 1
#endif
#ifdef __linux__
#include <sched.h>
#endif

/* Vector paths. x86-64: SSE2 is the baseline; SSSE3, AVX2 and AVX-512 (F, BW, VL) code is
 * compiled for that instruction set alone (target attributes, GCC and Clang) and run only
 * when the CPU — and the OS, for the wide registers — has it. ARM64: NEON is the baseline.
 * Anything else runs the portable C. AP_COPY_BLOCKS: some path has block transposes. */
#if defined(__SSE2__) || defined(_M_X64)
#include <emmintrin.h>
#include <xmmintrin.h>
#define AP_COPY_SSE2 1
#define AP_COPY_BLOCKS 1
#if defined(__GNUC__) && (defined(__x86_64__) || defined(__i386__))
#include <immintrin.h>
#define AP_COPY_SSSE3 1
#define AP_COPY_AVX2 1
#define AP_COPY_AVX512 1
#define AP_TARGET_SSSE3 __attribute__((target("ssse3")))
#define AP_TARGET_AVX2 __attribute__((target("avx2")))
#define AP_TARGET_AVX512 __attribute__((target("avx512f,avx512bw,avx512vl")))
#endif
#elif defined(__aarch64__) && defined(__ARM_NEON)
#include <arm_neon.h>
#define AP_COPY_NEON 1
#define AP_COPY_BLOCKS 1
#endif

/* The most dimensions a copy (and a View) may have: NumPy's limit. */
#define AP_COPY_MAX_NDIM 64

/* A copy is split across threads only when each gets at least this many bytes. Measured
 * on 2 CPUs, one and two threads alternating (docs/devices.md): copies up to 6 MiB, which
 * stay in the caches, ran 15-60% slower on two threads; from 8 MiB on, 1.1-1.5x faster.
 * ARRAYPORT_COPY_THREAD_BYTES overrides it. */
#define AP_COPY_THREAD_BYTES ((int64_t)4 << 20)

/* The kernel's paths, each a superset of the one before; ``path`` is the best the CPU
 * runs unless a test forces a lower one (ap_copy_force_path). AP_COPY_PATH_BLOCKS is the
 * first with block transposes. */
#if defined(AP_COPY_SSE2)
enum { AP_COPY_PORTABLE = 0, AP_COPY_PATH_SSE2 = 1, AP_COPY_PATH_SSSE3 = 2,
       AP_COPY_PATH_AVX2 = 3, AP_COPY_PATH_AVX512 = 4, AP_COPY_PATH_BLOCKS = 1 };
static const char *const ap_copy_path_names[] = {"portable", "sse2", "ssse3", "avx2", "avx512"};
#elif defined(AP_COPY_NEON)
enum { AP_COPY_PORTABLE = 0, AP_COPY_PATH_NEON = 1, AP_COPY_PATH_BLOCKS = 1 };
static const char *const ap_copy_path_names[] = {"portable", "neon"};
#else
enum { AP_COPY_PORTABLE = 0, AP_COPY_PATH_BLOCKS = 1 };
static const char *const ap_copy_path_names[] = {"portable"};
#endif

/* What the kernel was sized from and what it chose; filled once (ap_copy_configure). */
typedef struct {
    int ready;
    int best;                 /* the best path this CPU runs */
    int path;                 /* the path in use */
    int64_t line;             /* cache line bytes */
    int64_t l1d, l2, llc;     /* data cache sizes, bytes (0: not reported) */
    int64_t l2_ways;          /* L2 associativity (0: not reported) */
    int64_t band_lines;       /* source lines a band of blocks keeps open, at most */
    int64_t streaming_bytes;  /* results at least this large use non-temporal stores */
    int64_t threads;          /* at most this many threads per copy (1: no threads) */
    int64_t thread_bytes;     /* and at least this many bytes for each */
} ap_copy_config_t;

static ap_copy_config_t ap_copy_config;

/* A cache's size (or, with ``ways``, its associativity) from Linux's sysfs — per core
 * complex, unlike sysconf's L3 on some kernels, which sums every complex: level 1 data,
 * 2, or the last level (3 or 4). */
static int64_t ap_sysfs_cache(int want_level, int ways) {
#ifdef __linux__
    int64_t found = 0;
    for (int index = 0; index < 8; index++) {
        char path[96], kind[32] = "", unit = 0;
        int level = 0;
        long long size = 0;
        FILE *f;
        snprintf(path, sizeof path, "/sys/devices/system/cpu/cpu0/cache/index%d/level", index);
        if (!(f = fopen(path, "r"))) break;
        if (fscanf(f, "%d", &level) != 1) level = 0;
        fclose(f);
        snprintf(path, sizeof path, "/sys/devices/system/cpu/cpu0/cache/index%d/type", index);
        if ((f = fopen(path, "r"))) { if (fscanf(f, "%31s", kind) != 1) kind[0] = 0; fclose(f); }
        if (strcmp(kind, "Instruction") == 0) continue;
        snprintf(path, sizeof path, "/sys/devices/system/cpu/cpu0/cache/index%d/%s", index,
                 ways ? "ways_of_associativity" : "size");
        if ((f = fopen(path, "r"))) {
            if (fscanf(f, "%lld%c", &size, &unit) < 1) size = 0;
            fclose(f);
        }
        if (unit == 'K') size <<= 10;
        else if (unit == 'M') size <<= 20;
        if (want_level == 0 ? level >= 3 : level == want_level) found = size;
    }
    return found;
#else
    (void)want_level;
    return 0;
#endif
}

static int64_t ap_sysconf_size(int name) {
#if defined(__linux__) || defined(__APPLE__)
    long value = sysconf(name);
    return value > 0 ? (int64_t)value : 0;
#else
    (void)name;
    return 0;
#endif
}

/* A count from environment variable ``name`` (a number of bytes, or of threads): a whole
 * number from 1 to 2**62 in decimal digits alone; 0 where the variable is unset or is
 * anything else ("4M", "1e6", "-1", "0x400000"), and the default then applies. Every
 * setting of the kernel's and of the host allocator's is read through here, once. */
static int64_t ap_env_count(const char *name) {
    const char *text = getenv(name);
    int64_t value = 0;
    if (text == NULL || *text == 0) return 0;
    for (; *text; text++) {
        if (*text < '0' || *text > '9' || value > ((int64_t)1 << 62) / 10) return 0;
        value = value * 10 + (*text - '0');
    }
    return value <= ((int64_t)1 << 62) ? value : 0;
}

/* Read the machine once: its vector instructions and its caches. Racing threads compute
 * the same values, so no lock is needed; ``ready`` is set last. */
static void ap_copy_configure(void) {
    if (ap_copy_config.ready) return;
    ap_copy_config_t c;
    memset(&c, 0, sizeof c);
    c.best = AP_COPY_PORTABLE;
#ifdef AP_COPY_SSE2
    c.best = AP_COPY_PATH_SSE2;
#ifdef AP_COPY_SSSE3
    __builtin_cpu_init();  /* libgcc's check includes the OS saving the wide registers */
    if (__builtin_cpu_supports("ssse3")) c.best = AP_COPY_PATH_SSSE3;
    if (c.best == AP_COPY_PATH_SSSE3 && __builtin_cpu_supports("avx2"))
        c.best = AP_COPY_PATH_AVX2;
    if (c.best == AP_COPY_PATH_AVX2 && __builtin_cpu_supports("avx512f")
            && __builtin_cpu_supports("avx512bw") && __builtin_cpu_supports("avx512vl"))
        c.best = AP_COPY_PATH_AVX512;
#endif
#elif defined(AP_COPY_NEON)
    c.best = AP_COPY_PATH_NEON;
#endif
    const char *forced = getenv("ARRAYPORT_COPY_PATH");
    c.path = c.best;
    for (int p = 0; forced && p <= c.best; p++)
        if (strcmp(forced, ap_copy_path_names[p]) == 0) c.path = p;
    c.l1d = ap_sysfs_cache(1, 0);
    c.l2 = ap_sysfs_cache(2, 0);
    c.l2_ways = ap_sysfs_cache(2, 1);
    c.llc = ap_sysfs_cache(0, 0);
#if defined(_SC_LEVEL1_DCACHE_SIZE)
    if (!c.l1d) c.l1d = ap_sysconf_size(_SC_LEVEL1_DCACHE_SIZE);
    if (!c.l2) c.l2 = ap_sysconf_size(_SC_LEVEL2_CACHE_SIZE);
    if (!c.l2_ways) c.l2_ways = ap_sysconf_size(_SC_LEVEL2_CACHE_ASSOC);
    if (!c.llc) c.llc = ap_sysconf_size(_SC_LEVEL3_CACHE_SIZE);
    c.line = ap_sysconf_size(_SC_LEVEL1_DCACHE_LINESIZE);
#endif
    if (c.line <= 0) c.line = 64;
    /* A band's open source lines (one per block column element, plus the line being
     * prefetched for each) should fit in half the L1 data cache: 128 lines with 32 KiB.
     * ap_band_lines lowers this for strides that crowd into few L2 sets. */
    int64_t l1d = c.l1d > 0 ? c.l1d : 32 << 10;
    c.band_lines = l1d / 2 / 2 / c.line;
    if (c.band_lines < 16) c.band_lines = 16;
    /* Results larger than one core's L2 (1 MiB at least) are streamed, and never more than
     * half the last-level cache. Not the last level alone: a VM or a container is shown its
     * host's whole cache (480 MiB on one cloud VM of 2 vCPUs), of which it owns a share
     * nobody reports, and a transposed result's lines written through the caches cost a
     * read each. Measured (docs/devices.md, "Streaming stores"): on a 2-CPU Xeon VM with a
     * 1 MiB L2 and a 36 MiB L3, streamed results were as fast at 1 MiB and 1.4-2.2x faster
     * from 2 to 16 MiB, the copy followed by a sum of the result too (0.61-0.74x).
     * ARRAYPORT_COPY_STREAMING_BYTES overrides it. */
    c.streaming_bytes = c.l2 > ((int64_t)1 << 20) ? c.l2 : (int64_t)1 << 20;
    if (c.llc > 0 && c.streaming_bytes > c.llc / 2) c.streaming_bytes = c.llc / 2;
    if (c.streaming_bytes < ((int64_t)1 << 20)) c.streaming_bytes = (int64_t)1 << 20;
    int64_t streaming = ap_env_count("ARRAYPORT_COPY_STREAMING_BYTES");
    if (streaming > 0) c.streaming_bytes = streaming;
    /* Threads: the CPUs this process may run on; ARRAYPORT_NUM_THREADS asks for fewer
     * (1: never). */
    c.threads = 1;
#ifdef AP_COPY_THREADS
    int64_t cpus = 0;
#if defined(__linux__) && defined(CPU_COUNT)
    cpu_set_t allowed;
    if (sched_getaffinity(0, sizeof allowed, &allowed) == 0) cpus = CPU_COUNT(&allowed);
#endif
#if defined(_SC_NPROCESSORS_ONLN)
    if (cpus < 1) cpus = ap_sysconf_size(_SC_NPROCESSORS_ONLN);
#endif
    if (cpus < 1) cpus = 1;
    if (cpus > AP_COPY_MAX_THREADS) cpus = AP_COPY_MAX_THREADS;
    c.threads = cpus;
    int64_t asked = ap_env_count("ARRAYPORT_NUM_THREADS");
    if (asked >= 1 && asked < cpus) c.threads = asked;
#endif
    c.thread_bytes = AP_COPY_THREAD_BYTES;
    int64_t per_thread = ap_env_count("ARRAYPORT_COPY_THREAD_BYTES");
    if (per_thread > 0) c.thread_bytes = per_thread;
    c.ready = 1;
    ap_copy_config = c;
}

/* Set the threads a copy may use and the bytes each needs (tests split every copy). */
static void ap_copy_set_threads(int64_t threads, int64_t thread_bytes) {
    ap_copy_configure();
#ifndef AP_COPY_THREADS
    threads = 1;
#endif
    if (threads >= 1) ap_copy_config.threads = threads < AP_COPY_MAX_THREADS ? threads : AP_COPY_MAX_THREADS;
    if (thread_bytes >= 1) ap_copy_config.thread_bytes = thread_bytes;
}

/* Set the size from which results are written with streaming stores (benchmarks compare
 * thresholds in one run; tests stream every copy); the previous size. */
static int64_t ap_copy_set_streaming(int64_t bytes) {
    ap_copy_configure();
    int64_t previous = ap_copy_config.streaming_bytes;
    if (bytes >= 1) ap_copy_config.streaming_bytes = bytes;
    return previous;
}

/* Force a path (tests run every path a CPU has); -1 when the CPU lacks it. */
static int ap_copy_force_path(int path) {
    ap_copy_configure();
    if (path < 0 || path > ap_copy_config.best) return -1;
    ap_copy_config.path = path;
    return 0;
}

/* dst[r][k] = src[r * src_row + k * src_col] for a rows x cols block whose destination
 * rows are dst_row bytes apart with contiguous elements: the general element loop. */
static void ap_copy_elements(char *dst, int64_t dst_row, const char *src, int64_t src_row,
                             int64_t src_col, int64_t rows, int64_t cols, int64_t itemsize) {
    for (int64_t r = 0; r < rows; r++) {
        char *d = dst + r * dst_row;
        const char *s = src + r * src_row;
        switch (itemsize) {  /* fixed sizes let the compiler inline each memcpy as one move */
#define AP_COPY_ROW(N) \
        case N: for (int64_t k = 0; k < cols; k++) memcpy(d + k * N, s + k * src_col, N); break;
        AP_COPY_ROW(1)
        AP_COPY_ROW(2)
        AP_COPY_ROW(4)
        AP_COPY_ROW(8)
        AP_COPY_ROW(16)
#undef AP_COPY_ROW
        default:
            for (int64_t k = 0; k < cols; k++)
                memcpy(d + k * itemsize, s + k * src_col, (size_t)itemsize);
        }
    }
}

#include "transpose_sse2.h"
#include "transpose_avx2.h"
#include "transpose_avx512.h"
#include "transpose_neon.h"

#ifdef AP_COPY_BLOCKS
/* One block at ``src`` (1-, 2-, 4-, 8- or 16-byte elements) on the best path in use,
 * prefetching first, unless ``ahead`` is NULL, the source lines of the block at ``ahead``
 * (a few blocks further on) into L2 — not L1: rows a multiple of 4 KiB apart share one L1
 * set, and would evict the lines being read. The hardware prefetchers cannot guess these
 * patterns. */
static inline void ap_copy_block(char *dst, int64_t dst_row, const char *src, int64_t src_col,
                                 int64_t itemsize, int streaming, const char *ahead) {
    int64_t edge = 64 / itemsize;
    if (ahead != NULL)
        for (int64_t k = 0; k < edge; k++) __builtin_prefetch(ahead + k * src_col, 0, 2);
    const int path = ap_copy_config.path;
#ifdef AP_COPY_AVX512
    if (path >= AP_COPY_PATH_AVX512) {
        switch (itemsize) {
        case 1: ap_copy_block1_avx512(dst, dst_row, src, src_col, streaming); return;
        case 2: ap_copy_block2_avx512(dst, dst_row, src, src_col, streaming); return;
        case 4: ap_copy_block4_avx512(dst, dst_row, src, src_col, streaming); return;
        case 8: ap_copy_block8_avx512(dst, dst_row, src, src_col, streaming); return;
        default: ap_copy_block16_avx512(dst, dst_row, src, src_col, streaming); return;
        }
    }
#endif
#ifdef AP_COPY_AVX2
    if (path >= AP_COPY_PATH_AVX2 && itemsize <= 2) {
        if (itemsize == 1) ap_copy_block1_avx2(dst, dst_row, src, src_col, streaming);
        else ap_copy_block2_avx2(dst, dst_row, src, src_col, streaming);
        return;
    }
#endif
    (void)path;
#if defined(AP_COPY_SSE2)
    switch (itemsize) {
    case 1: ap_copy_block1(dst, dst_row, src, src_col, streaming); break;
    case 2: ap_copy_block2(dst, dst_row, src, src_col, streaming); break;
    case 4: ap_copy_block4(dst, dst_row, src, src_col, streaming); break;
    case 8: ap_copy_block8(dst, dst_row, src, src_col, streaming); break;
    default: ap_copy_block16(dst, dst_row, src, src_col, streaming);
    }
#elif defined(AP_COPY_NEON)
    (void)streaming;
    switch (itemsize) {
    case 1: ap_copy_block1_neon(dst, dst_row, src, src_col); break;
    case 2: ap_copy_block2_neon(dst, dst_row, src, src_col); break;
    case 4: ap_copy_block4_neon(dst, dst_row, src, src_col); break;
    case 8: ap_copy_block8_neon(dst, dst_row, src, src_col); break;
    default: ap_copy_block16_neon(dst, dst_row, src, src_col);
    }
#endif
}
#endif  /* AP_COPY_BLOCKS */

/* ---- planes narrower than a block: channels ------------------------------------------- */

#include "channels_ssse3.h"

/* A plane of few rows whose source is contiguous down them (src_row == itemsize): the
 * channels of interleaved pixels (HWC -> CHW). Pixel by pixel, every channel of a pixel
 * from the one source run, each into its own destination row. */
static void ap_copy_deinterleave(char *dst, int64_t dst_row, const char *src, int64_t src_col,
                                 int64_t rows, int64_t cols, int64_t itemsize) {
#ifdef AP_COPY_SSSE3
    if (itemsize == 1 && (rows == 3 || rows == 4) && src_col == rows
            && ap_copy_config.path >= AP_COPY_PATH_SSSE3) {
        ap_deinterleave_u8_ssse3(dst, dst_row, src, rows, cols);
        return;
    }
#endif
    for (int64_t k = 0; k < cols; k++) {
        const char *s = src + k * src_col;
        char *d = dst + k * itemsize;
        switch (itemsize) {  /* fixed sizes: each memcpy one move */
#define AP_DEINTERLEAVE(N) \
        case N: for (int64_t r = 0; r < rows; r++) memcpy(d + r * dst_row, s + r * N, N); break;
        AP_DEINTERLEAVE(1)
        AP_DEINTERLEAVE(2)
        AP_DEINTERLEAVE(4)
        AP_DEINTERLEAVE(8)
#undef AP_DEINTERLEAVE
        default:
            for (int64_t r = 0; r < rows; r++)
                memcpy(d + r * dst_row, s + r * itemsize, (size_t)itemsize);
        }
    }
}

/* A plane of few columns whose source is contiguous down its rows (src_row == itemsize)
 * and whose destination rows are packed (dst_row == cols * itemsize): channel planes into
 * interleaved pixels (CHW -> HWC). */
static void ap_copy_interleave(char *dst, const char *src, int64_t src_col, int64_t rows,
                               int64_t cols, int64_t itemsize) {
#ifdef AP_COPY_SSSE3
    if (itemsize == 1 && (cols == 3 || cols == 4) && ap_copy_config.path >= AP_COPY_PATH_SSSE3) {
        ap_interleave_u8_ssse3(dst, src, src_col, cols, rows);
        return;
    }
#endif
    for (int64_t r = 0; r < rows; r++) {
        const char *s = src + r * itemsize;
        char *d = dst + r * cols * itemsize;
        switch (itemsize) {
#define AP_INTERLEAVE(N) \
        case N: for (int64_t c = 0; c < cols; c++) memcpy(d + c * N, s + c * src_col, N); break;
        AP_INTERLEAVE(1)
        AP_INTERLEAVE(2)
        AP_INTERLEAVE(4)
        AP_INTERLEAVE(8)
#undef AP_INTERLEAVE
        default:
            for (int64_t c = 0; c < cols; c++)
                memcpy(d + c * itemsize, s + c * src_col, (size_t)itemsize);
        }
    }
}

static int64_t ap_gcd(int64_t a, int64_t b) {
    while (b) { int64_t t = a % b; a = b; b = t; }
    return a;
}

/* How many source lines a band of blocks may keep open when the source's rows are
 * ``src_col`` bytes apart. Rows a multiple of the line apart map to only
 * sets / gcd(sets, stride in lines) of the L2's sets (8 of 2048 for 16 KiB rows and a
 * 1 MiB, 8-way L2): what the band keeps open, prefetched lines and the destination's
 * lines must share those sets' ways, so a band takes a quarter of them. */
static int64_t ap_band_lines(int64_t src_col) {
    int64_t lines = ap_copy_config.band_lines;
    int64_t line = ap_copy_config.line, ways = ap_copy_config.l2_ways;
    int64_t step = src_col < 0 ? -src_col : src_col;
    if (ap_copy_config.l2 > 0 && ways > 0 && step > 0 && step % line == 0) {
        int64_t sets = ap_copy_config.l2 / line / ways;
        if (sets > 0) {
            int64_t reachable = sets / ap_gcd(sets, step / line) * ways;
            if (reachable / 4 < lines) lines = reachable / 4;
        }
    }
    return lines;
}

/* A rows x cols plane: destination rows dst_row bytes apart (elements contiguous), source
 * src_row bytes per row and src_col per column. Blocks of one line by one line, walked
 * row of blocks by row of blocks so the destination is written as a few long streams. */
static void ap_copy_plane(char *dst, int64_t dst_row, const char *src, int64_t src_row,
                          int64_t src_col, int64_t rows, int64_t cols, int64_t itemsize,
                          int streaming) {
    int64_t edge = itemsize >= 16 ? 4 : 64 / itemsize;
    int64_t r0 = 0;
    if (src_row == itemsize && itemsize <= 16) {
        if (rows < edge && rows <= 8 && cols >= 2 * edge) {
            ap_copy_deinterleave(dst, dst_row, src, src_col, rows, cols, itemsize);
            return;
        }
        if (cols < edge && cols <= 8 && rows >= 2 * edge && dst_row == cols * itemsize) {
            ap_copy_interleave(dst, src, src_col, rows, cols, itemsize);
            return;
        }
    }
#ifdef AP_COPY_BLOCKS
    if ((itemsize == 1 || itemsize == 2 || itemsize == 4 || itemsize == 8 || itemsize == 16)
            && src_row == itemsize && ap_copy_config.path >= AP_COPY_PATH_BLOCKS) {
        streaming = streaming && ((uintptr_t)dst % 16 == 0) && dst_row % 16 == 0;
        int64_t full_rows = rows - rows % edge, full_cols = cols - cols % edge;
        int64_t band_width = ap_band_lines(src_col) / edge;  /* in blocks */
        band_width = (band_width < 1 ? 1 : band_width) * edge;  /* in columns */
        if (cols * itemsize <= 4096) {
            /* Short destination rows (the source's rows are the long, sequential runs):
             * down each column of blocks, which the hardware prefetcher follows. */
            for (int64_t c0 = 0; c0 < full_cols; c0 += edge)
                for (r0 = 0; r0 < full_rows; r0 += edge) {
                    const char *s = src + r0 * src_row + c0 * src_col;
                    ap_copy_block(dst + r0 * dst_row + c0 * itemsize, dst_row, s, src_col,
                                  itemsize, streaming,
                                  r0 + 5 * edge <= full_rows ? s + 4 * 64 : NULL);
                }
        } else {
            for (int64_t band = 0; band < full_cols; band += band_width) {
                int64_t band_end = band + band_width < full_cols ? band + band_width : full_cols;
                for (r0 = 0; r0 < full_rows; r0 += edge)
                    for (int64_t c0 = band; c0 < band_end; c0 += edge) {
                        const char *s = src + r0 * src_row + c0 * src_col;
                        /* 4 blocks ahead along the band's row; where the row has no 4
                         * more (bands of 1 block: 2-byte and 1-byte elements at strides
                         * that reach few L2 sets open 32 and 64 source lines, more streams
                         * than the hardware follows), 4 blocks down: float16 4096 x 8192
                         * from 2.8-4.4 to 5.1-6.0 GB/s on one thread. */
                        const char *ahead = c0 + 5 * edge <= band_end ? s + 4 * edge * src_col
                                            : r0 + 5 * edge <= full_rows ? s + 4 * 64 : NULL;
                        ap_copy_block(dst + r0 * dst_row + c0 * itemsize, dst_row, s, src_col,
                                      itemsize, streaming, ahead);
                    }
            }
        }
        for (r0 = 0; r0 < full_rows; r0 += edge)
            ap_copy_elements(dst + r0 * dst_row + full_cols * itemsize, dst_row,
                             src + r0 * src_row + full_cols * src_col, src_row, src_col, edge,
                             cols - full_cols, itemsize);
        r0 = full_rows;
    }
#else
    (void)streaming;
#endif
    /* Everything else (and the rows the blocks left), in blocks of scalar moves. */
    for (; r0 < rows; r0 += edge) {
        int64_t height = rows - r0 < edge ? rows - r0 : edge;
        for (int64_t c0 = 0; c0 < cols; c0 += edge)
            ap_copy_elements(dst + r0 * dst_row + c0 * itemsize, dst_row,
                             src + r0 * src_row + c0 * src_col, src_row, src_col, height,
                             cols - c0 < edge ? cols - c0 : edge, itemsize);
    }
}

/* ---- the whole copy ------------------------------------------------------------------- */

/* Copy merged dimensions ``dims``/``strides`` at ``src`` to ``dst``, laid out with
 * ``dst_strides``: in planes (inner, fast) when the source moves faster along some outer
 * dimension than along the innermost one, otherwise row by row; every other dimension
 * walked odometer style. */
static void ap_copy_merged(char *dst, const int64_t *dst_strides, const char *src, int n,
                           const int64_t *dims, const int64_t *strides, int64_t itemsize,
                           int streaming) {
    const int inner = n - 1;
    int fast = -1;
    int64_t fast_step = strides[inner] < 0 ? -strides[inner] : strides[inner];
    for (int d = 0; d < inner; d++) {
        int64_t step = strides[d] < 0 ? -strides[d] : strides[d];
        if (step < fast_step) { fast = d; fast_step = step; }
    }
    int64_t index[AP_COPY_MAX_NDIM] = {0};
    const char *s = src;
    char *t = dst;
    for (;;) {
        if (fast >= 0)
            ap_copy_plane(t, dst_strides[fast], s, strides[fast], strides[inner], dims[fast],
                          dims[inner], itemsize, streaming);
        else if (strides[inner] == itemsize && dst_strides[inner] == itemsize)
            memcpy(t, s, (size_t)(dims[inner] * itemsize));
        else
            ap_copy_elements(t, 0, s, 0, strides[inner], 1, dims[inner], itemsize);
        int d = inner - 1;
        for (; d >= 0; d--) {
            if (d == fast) continue;
            s += strides[d];
            t += dst_strides[d];
            if (++index[d] < dims[d]) break;
            s -= strides[d] * dims[d];
            t -= dst_strides[d] * dims[d];
            index[d] = 0;
        }
        if (d < 0) break;
    }
#ifdef AP_COPY_SSE2
    if (streaming) _mm_sfence();  /* this thread's streamed stores, visible before it ends */
#endif
}

/* One thread's share of a copy: the same dimensions with one of them cut to a range. The
 * thread releases ``done`` when its share is written; the caller waits on it. */
typedef struct {
    char *dst;
    const int64_t *dst_strides;
    const char *src;
    int n;
    int64_t dims[AP_COPY_MAX_NDIM];
    const int64_t *strides;
    int64_t itemsize;
    int streaming;
#ifdef AP_COPY_THREADS
    PyThread_type_lock done;
#endif
} ap_copy_share_t;

static void ap_copy_share_run(void *argument) {
    ap_copy_share_t *share = (ap_copy_share_t *)argument;
    ap_copy_merged(share->dst, share->dst_strides, share->src, share->n, share->dims,
                   share->strides, share->itemsize, share->streaming);
#ifdef AP_COPY_THREADS
    if (share->done) PyThread_release_lock(share->done);
#endif
}

/* Copy ``shape``/``byte_strides`` at ``src`` into C-contiguous ``dst``. Copies of at least
 * ap_copy_config.thread_bytes per thread are split across up to ap_copy_config.threads
 * threads (ARRAYPORT_NUM_THREADS; 1: never): the largest dimension is cut into ranges of
 * whole blocks, each thread copies one range, the caller the first; the caller waits for
 * every range before this returns. Threads are started per copy, not pooled: nothing
 * outlives the call (a thread's last act is to say its range is done), so
 * fork and interpreter exit have nothing to clean up, and starting one costs tens of
 * microseconds against the milliseconds such a copy takes. */
static void ap_copy_strided_to_contiguous(char *dst, const char *src, int ndim,
                                          const int64_t *shape, const int64_t *byte_strides,
                                          int64_t itemsize) {
    int64_t dims[AP_COPY_MAX_NDIM], strides[AP_COPY_MAX_NDIM];
    int n = ap_merge_dims(ndim, shape, byte_strides, dims, strides);
    if (n < 0) return;  /* nothing to copy */
    int64_t total_bytes = itemsize;
    for (int d = 0; d < n; d++) total_bytes *= dims[d];
    if (n == 0) { memcpy(dst, src, (size_t)itemsize); return; }

    /* The destination's strides (C order over the merged dimensions). */
    int64_t dst_strides[AP_COPY_MAX_NDIM];
    dst_strides[n - 1] = itemsize;
    for (int d = n - 2; d >= 0; d--) dst_strides[d] = dst_strides[d + 1] * dims[d + 1];

    ap_copy_configure();
    const int streaming = total_bytes >= ap_copy_config.streaming_bytes
                          && ap_copy_config.path >= AP_COPY_PATH_BLOCKS;
    int64_t threads = ap_copy_config.threads;
    if (ap_copy_config.thread_bytes > 0 && total_bytes / ap_copy_config.thread_bytes < threads)
        threads = total_bytes / ap_copy_config.thread_bytes;
#ifdef AP_COPY_THREADS
    int cut = 0;  /* the largest dimension, cut into ranges of whole 64-element blocks */
    for (int d = 1; d < n; d++) if (dims[d] > dims[cut]) cut = d;
    int64_t range = (dims[cut] + threads - 1) / (threads > 0 ? threads : 1);
    range = (range + 63) / 64 * 64;
    if (threads > 1 && range < dims[cut]) {
        ap_copy_share_t shares[AP_COPY_MAX_THREADS];
        int running[AP_COPY_MAX_THREADS] = {0};
        int count = 0;
        for (int64_t begin = 0; begin < dims[cut] && count < AP_COPY_MAX_THREADS;
             begin += range, count++) {
            ap_copy_share_t *share = &shares[count];
            memcpy(share->dims, dims, (size_t)n * sizeof(int64_t));
            share->dims[cut] = dims[cut] - begin < range ? dims[cut] - begin : range;
            share->dst = dst + begin * dst_strides[cut];
            share->src = src + begin * strides[cut];
            share->dst_strides = dst_strides;
            share->strides = strides;
            share->n = n;
            share->itemsize = itemsize;
            share->streaming = streaming;
            share->done = NULL;
            if (count == 0) continue;
            /* A share whose thread cannot start runs here instead, after the first. */
            share->done = PyThread_allocate_lock();
            if (share->done == NULL) continue;
            PyThread_acquire_lock(share->done, WAIT_LOCK);  /* held until the share is done */
            if (PyThread_start_new_thread(ap_copy_share_run, share) == PYTHREAD_INVALID_THREAD_ID) {
                PyThread_release_lock(share->done);
                PyThread_free_lock(share->done);
                share->done = NULL;
                continue;
            }
            running[count] = 1;
        }
        ap_copy_share_run(&shares[0]);
        for (int k = 1; k < count; k++) {
            if (running[k]) {
                PyThread_acquire_lock(shares[k].done, WAIT_LOCK);  /* the share is written */
                PyThread_release_lock(shares[k].done);
                PyThread_free_lock(shares[k].done);
            } else {
                ap_copy_share_run(&shares[k]);
            }
        }
        return;
    }
#endif
    ap_copy_merged(dst, dst_strides, src, n, dims, strides, itemsize, streaming);
}

#endif  /* ARRAYPORT_STRIDED_COPY_H */
