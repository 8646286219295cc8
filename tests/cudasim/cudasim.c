/*
 * cudasim — a stand-in for the CUDA driver (libcuda.so.1) that keeps the rules the Driver
 * API documentation states and fails as the driver fails, for machines without a GPU
 * (issue 32). Compiled by the tests (tests/helpers/cudasim.py) against NVIDIA's own cuda.h,
 * taken from the nvidia-cuda-runtime-cu12 wheel at build time and never committed, so
 * every entry point has the header's prototype and exported name (cuMemAlloc is
 * cuMemAlloc_v2, and so on, through the header's own macros).
 *
 * What it keeps (each rule is a class of bug it can find; tests/test_cudasim_rules.py
 * breaks each on purpose):
 *   - devices (CUDASIM_DEVICES, default 2), primary contexts, a per-thread context stack;
 *     calls that need a current context return CUDA_ERROR_INVALID_CONTEXT without one;
 *     cuDevicePrimaryCtxReset destroys a primary context's memory (not pools' blocks: a pool
 *     is its device's), streams, events and modules, and the context it gives next has a new
 *     cuCtxGetId behind the same handle; a launch of a function whose module went is
 *     CUDA_ERROR_INVALID_HANDLE (counted: dead_function_launches);
 *   - sticky faults: once a context's work faulted (an illegal or misaligned address, freed
 *     memory), it runs no more work and every call that works in it returns that error
 *     until it is reset (see "sticky faults");
 *   - peer access: cuDeviceCanAccessPeer says yes between distinct devices
 *     (CUDASIM_PEER_ACCESS=0: no), cuCtxEnablePeerAccess / cuCtxDisablePeerAccess with their
 *     errors, cuMemPoolSetAccess / cuMemPoolGetAccess per pool and device; a kernel touching
 *     another device's memory faults unless its context enabled access to that memory's
 *     context (cuMemAlloc memory) or the pool granted its device access (a pool's blocks).
 *     Copies between devices need neither (the driver stages them);
 *   - device memory the host cannot read: a device pointer is an address reserved with no
 *     access (PROT_NONE), its bytes kept elsewhere — a host read is a SIGSEGV, as on a
 *     GPU; pinned and managed memory are ordinary host memory; pointer attributes answer
 *     per allocation;
 *   - streams and events belong to a context: cuEventRecord of another context's stream
 *     is CUDA_ERROR_INVALID_HANDLE, cuStreamWaitEvent may cross contexts;
 *   - asynchronous streams: every stream has a worker thread that runs its work in issue
 *     order, each item after CUDASIM_DELAY_US microseconds (default 2000), so a consumer
 *     that does not wait reads stale or half-written data; the legacy default stream
 *     (NULL or CU_STREAM_LEGACY) synchronizes with the context's blocking streams, the
 *     per-thread one (CU_STREAM_PER_THREAD) among them; non-blocking streams do not;
 *   - copies: bounds of every allocation, 2-D pitches and CU_DEVICE_ATTRIBUTE_MAX_PITCH;
 *     the API synchronization rules for pageable host memory (an asynchronous copy from it
 *     stages the source at once, a copy into it returns when done);
 *   - cuGetProcAddress with the header's versions, the way NVIDIA's Python libraries
 *     (cuda-bindings, cuda-core, numba-cuda) find every entry point;
 *   - modules and kernels: PTX modules per context (a newer PTX ISA than the driver's is
 *     refused), launch limits (grid, block, shared memory), parameters captured at launch,
 *     launches ordered on their stream like any other work; arrayport's own kernels run
 *     from their source, compiled as C into this library (see "modules and kernels"), and
 *     an address outside device, pinned or managed memory faults the launch with the
 *     context's sticky CUDA_ERROR_ILLEGAL_ADDRESS; a 2-, 4-, 8- or 16-byte access at an
 *     address not a multiple of its size with CUDA_ERROR_MISALIGNED_ADDRESS (counted:
 *     misaligned_accesses);
 *   - at exit, a report of allocations, streams, events and modules never released (to
 *     stderr, or to the file CUDASIM_REPORT names).
 * What it counts (cudasim_counters): driver calls by name, host synchronizations, kernel
 * and copy faults, accesses to freed memory, pool reuses and pool chunks given back — the
 * costs a test can measure where it cannot time a GPU.
 *   - stream-ordered allocation (cuMemAllocAsync / cuMemFreeAsync, the device's default
 *     pool): a freed block is reused at once by the stream that freed it, by other streams
 *     once the free has run; a block whose free has run is no memory anyone may touch;
 *   - freed memory: the driver's weaker promises, kept. cuMemFree "may" synchronize and
 *     cuMemFreeHost promises nothing: here both free at once, without waiting for work
 *     queued that uses the memory (a pooled block freed with cuMemFree "will not perform
 *     any implicit synchronization" either). Freed memory is poisoned: a copy, memset or
 *     kernel that touches it when it runs — queued before the free or after — faults as a
 *     kernel touching a bad address does (the context's sticky CUDA_ERROR_ILLEGAL_ADDRESS
 *     at its synchronizations; counted: copy_faults, freed_memory_accesses), so a use
 *     after free that a waiting free would hide is seen. Work looks its memory up when it
 *     runs (an allocation and its generation: a pooled block reused in its freeing stream's
 *     order is no false alarm). Freed pinned and managed memory is dropped and made
 *     inaccessible (madvise, mprotect PROT_NONE): a host read is a SIGSEGV, never the old
 *     bytes. Freed addresses stay reserved (a grave) until MAX_GRAVES later frees, so that
 *     what names them is recognised as freed; work running when its memory is freed
 *     finishes on the old bytes, as on a GPU;
 *   - memory pools (cuMemPoolCreate, the default pools): a pool reserves physical memory
 *     in chunks of POOL_GRANULARITY (2 MiB; a larger block, a multiple), blocks carved from
 *     them; RESERVED_MEM_CURRENT is whole chunks, a device's memory counts them, and a trim
 *     (cuMemPoolTrimTo) gives back only chunks no block in use (or waiting for its free)
 *     lies in. CU_MEMPOOL_ATTR_RELEASE_THRESHOLD is kept as documented: memory a pool holds
 *     past it goes back to the system at the next cuStreamSynchronize, cuEventSynchronize
 *     or cuCtxSynchronize of the device, not before — idle chunks, until the pool reserves
 *     the threshold or less (the default threshold, 0: everything idle goes at each);
 * What it does not model: timing, PTX it has no C build of (such launches answer
 * CUDA_ERROR_NOT_SUPPORTED), warps, peer-access hardware limits (CUDA_ERROR_TOO_MANY_PEERS),
 * pools' reuse policies (set and reported, not followed), host pools, graphs, texture and
 * array objects.
 *   - interprocess (CUDA IPC of cuMemAlloc memory and of events, between processes that each
 *     load this library): see "interprocess" for what it keeps; and IPC of memory pools
 *     (POSIX file descriptors): see "interprocess pools".
 */
#define _GNU_SOURCE
#include <cuda.h>

#include <pthread.h>
#include <stdint.h>
#include <stdio.h>
#include <stdlib.h>
#include <string.h>
#include <errno.h>
#include <fcntl.h>
#include <signal.h>
#include <sys/mman.h>
#include <sys/stat.h>
#include <time.h>
#include <unistd.h>

#define SIM_EXPORT __attribute__((visibility("default")))
/* The simulator's own controls (counters, delays, live objects, kernel registration). Built
 * with -DCUDASIM_AS_DRIVER they are not exported: the library then offers the driver API
 * alone, as a GPU's libcuda.so.1 does, which is how the GPU suite's hardware mode
 * (ARRAYPORT_GPU=hardware) is tested without a GPU (tests/test_gpu_suite.py). */
#ifdef CUDASIM_AS_DRIVER
#define SIM_CONTROL __attribute__((visibility("hidden")))
#else
#define SIM_CONTROL SIM_EXPORT
#endif
#define MAX_DEVICES 8
#define MAX_DEPS 2

/* ---- objects ---------------------------------------------------------------------------- */

enum { CTX_MAGIC = 0x43545831, STREAM_MAGIC = 0x5354524d, EVENT_MAGIC = 0x45564e54 };

struct CUctx_st {
    int magic, device;
    unsigned long long id;            /* unique in the process, new at each (re)creation */
    struct CUstream_st *legacy;       /* this context's NULL / CU_STREAM_LEGACY stream */
    CUresult sticky;                  /* a fault of its work: every later call in it says so
                                         (see "sticky faults"), until the context goes */
    int peers[MAX_DEVICES];           /* cuCtxEnablePeerAccess: this context's kernels may
                                         touch device d's primary context's cuMemAlloc memory */
};

typedef struct op op;
struct CUstream_st {
    int magic;
    struct CUctx_st *ctx;
    unsigned flags;                   /* CU_STREAM_NON_BLOCKING, or 0 (blocking) */
    int priority;                     /* kept and reported; scheduling ignores it */
    unsigned long long id;            /* unique in the process (cuStreamGetId) */
    int per_thread;                   /* the per-thread default stream of one thread */
    pthread_t owner_thread;
    uint64_t issued, done;            /* work items enqueued / finished, in order */
    op *head, *tail;
    pthread_t worker;
    int stopping;
    struct CUstream_st *next;         /* every stream, for the legacy rule and the report;
                                         kept as it was when the stream leaves the list, so
                                         that a walk waiting on it still reaches the rest */
    struct CUstream_st *gone_next;    /* the streams going with a context, then `retired` */
};

/* The shared pages of "interprocess" (below). */
enum { IPC_LIVE = 1, IPC_FREED = 2 };
struct ipc_header {                     /* the first page of an exported allocation's memfd */
    char magic[8];
    uint64_t nonce[2], serial, size;
    int32_t device, state;
    uint64_t start;                     /* the exporter's start (process_ended) */
};

#define IPC_RING 256                    /* records of one event in flight at most */
struct ipc_event {                      /* the page of an interprocess event */
    char magic[8];
    uint64_t nonce[2];
    uint64_t recorded;                  /* records made (record n: the n-th) */
    int32_t state, pid;                 /* the exporter: its destroy or its death ends waits */
    uint64_t start;                     /* and its start (process_ended) */
    uint64_t done[IPC_RING];            /* slot n % IPC_RING: the latest record n done there */
};

struct CUevent_st {
    int magic;
    struct CUctx_st *ctx;
    struct CUevent_st *next;          /* every live event, to go with its context */
    struct CUstream_st *stream;       /* where it was last recorded, or NULL */
    uint64_t seq;                     /* the work item that completes it */
    /* CU_EVENT_INTERPROCESS: its records and completions, counted in a page every process
     * that opened it maps (see "interprocess"); NULL for a process-local event */
    struct ipc_event *shared;
    int shared_fd;                    /* the exporter's memfd of that page (-1 imported) */
};

enum { OP_MARK, OP_COPY, OP_SET, OP_KERNEL, OP_FREE };
typedef struct kernel_impl kernel_impl;
struct op {
    int kind;
    uint64_t seq;
    struct { struct CUstream_st *stream; uint64_t seq; } deps[MAX_DEPS + 1];
    int ndeps;
    /* OP_COPY: rows of width bytes; OP_SET: value into width * height bytes */
    unsigned char *dst, *src;
    size_t width, height, dst_pitch, src_pitch;
    unsigned char value;
    unsigned char *staging;           /* a pageable source's bytes, copied at issue; freed */
    /* OP_KERNEL: the C build of the kernel, its parameters as captured at launch, the grid */
    const kernel_impl *kernel;
    unsigned char *params;
    unsigned grid[3], block[3];
    struct CUctx_st *ctx;
    /* OP_COPY, OP_SET: the memory each end names (0 destination, 1 source), looked up
     * again when the work runs: serial 0 is memory the driver does not own (pageable host
     * memory, or the staging above); else the allocation and its generation at issue, and
     * the work faults if that memory was freed before it ran (see "freed memory") */
    struct { uintptr_t address; unsigned long serial, generation; } ends[2];
    /* OP_FREE: the pooled block it frees, as it was when the free was called */
    unsigned long freed, generation;
    /* OP_MARK of an interprocess event: the shared completion count it raises to `signal_to`
     * when it runs; of a wait on one: the count it waits for (polled: the signal comes from
     * another process) */
    struct ipc_event *signal, *awaited;
    uint64_t signal_to, awaited_at;
    op *next;
};

typedef enum { MEM_DEVICE = 1, MEM_PINNED = 2, MEM_MANAGED = 3 } mem_kind;
typedef struct chunk chunk;
typedef struct allocation {
    uintptr_t base;                   /* the address the application sees */
    size_t size, reserved;
    mem_kind kind;
    int device;
    struct CUctx_st *ctx;
    unsigned char *bytes;             /* where the bytes live (== base for host kinds) */
    /* Stream-ordered allocations (cuMemAllocAsync) live in the device's pool: freed, a block
     * stays there for reuse — at once by its freeing stream (stream order), by any stream
     * once the free has run — and is not a leak. */
    int pooled, pool_state;           /* pool_state: POOL_LIVE, POOL_FREEING, POOL_FREE */
    struct CUmemPoolHandle_st *pool;  /* whose block it is: reused only by that pool */
    size_t capacity;                  /* the bytes a pooled block can hold */
    struct CUstream_st *freed_on;
    unsigned long generation;         /* new at each reuse, unique in the process: a late
                                         free names the old block, even at a reused address */
    unsigned long freed_through;      /* the last generation whose free has run (pooled) */
    unsigned long serial;             /* unique in the process, never reused */
    chunk *chunk;                     /* pooled: the chunk of its pool it lies in */
    int busy;                         /* work items touching its bytes right now */
    int dead;                         /* freed: in the graveyard, poisoned */
    /* Interprocess (see "interprocess"): memory exported with cuIpcGetMemHandle has its bytes
     * in a memfd, after a header page (`ipc`) every process mapping it shares; `ipc_fd` is
     * the exporter's descriptor. Memory opened from another process's handle is `imported`
     * (its opens counted: closed at the last cuIpcCloseMemHandle), and is not this
     * process's device memory to count. */
    struct ipc_header *ipc;
    int ipc_fd;
    long imported;
    int ipc_pid;
    unsigned long ipc_serial;
    /* A block of an exportable pool (CU_MEM_HANDLE_TYPE_POSIX_FILE_DESCRIPTOR) has its bytes
     * mapped from the pool's memfd (`pool_mapped` bytes, at `pool_offset` past its record
     * pages), its state in record `pool_record` there; a block imported from another
     * process's pool (cuMemPoolImportPointer) names its importing pool and the generation it
     * was imported at (see "interprocess pools"). */
    size_t pool_mapped, pool_offset;
    long pool_record;
    struct CUmemPoolHandle_st *import_pool;
    struct allocation *next;
    struct allocation *idle_next;     /* pooled, not in use: its place in `idle_blocks` */
} allocation;
/* A pool's physical memory: chunks of POOL_GRANULARITY bytes (or a multiple, for a larger
 * block), blocks carved from them in order. A pool reserves whole chunks, and gives a chunk
 * back to the system (trim, release threshold) only when no block in it is in use or waiting
 * for its stream-ordered free. */
#define POOL_GRANULARITY ((size_t)2 << 20)
struct chunk {
    struct CUmemPoolHandle_st *pool;  /* NULL once its pool is destroyed with blocks in use */
    int device;
    size_t size, filled;
    chunk *next;
};
static chunk *chunks;
static unsigned long serials;         /* the last allocation serial given (lock held) */
enum { POOL_LIVE, POOL_FREEING, POOL_FREE };
static unsigned long generations;     /* the last pooled block generation given (lock held) */

static pthread_mutex_t lock = PTHREAD_MUTEX_INITIALIZER;
static pthread_cond_t progress = PTHREAD_COND_INITIALIZER;
static int initialised, device_count = 2;
static long delay_us = 2000;
static int paused;                    /* cudasim_set_paused: nothing runs, nothing is woken */
/* CU_DEVICE_ATTRIBUTE_MAX_PITCH of every device, and the limit 2-D copies keep (a GPU's is
 * 2**31 - 1; CUDASIM_MAX_PITCH or cudasim_set_max_pitch lower it, so that a test can reach
 * it without gigabytes of memory). */
static size_t max_pitch = 2147483647u;
static struct CUctx_st primary[MAX_DEVICES];
static int primary_retained[MAX_DEVICES];
static unsigned long long contexts_created;   /* context ids given (lock held) */
static struct CUstream_st *streams;
/* Destroyed streams, their work done, kept (never freed, never reused) because events
 * recorded on them and other streams' waits still name them: a freed stream read through
 * such a pointer once hung cuEventSynchronize at exit. A real driver keeps an event usable
 * after its stream is destroyed (documented); so does this. */
static struct CUstream_st *retired;
static allocation *allocations;
/* The pooled blocks of `allocations` not in use (freed, or their free queued), the latest
 * first: where a pool allocation looks for one to reuse, without walking the blocks in use
 * (caller holds the lock). */
static allocation *idle_blocks;

static void block_idles(allocation *a) {
    a->idle_next = idle_blocks;
    idle_blocks = a;
}

static void block_leaves_idle(allocation *a) {
    for (allocation **link = &idle_blocks; *link; link = &(*link)->idle_next)
        if (*link == a) { *link = a->idle_next; a->idle_next = NULL; return; }
}
/* Freed memory (see "freed memory"): kept, poisoned, so that what touches it later is seen
 * as touching freed memory; the oldest past MAX_GRAVES go back to the system. */
#define MAX_GRAVES 4096
static allocation *graveyard;
static long graves;
static long live_events;
static struct CUevent_st *events;     /* the live ones (lock held) */

/* The per-thread context stack. */
#define STACK_DEPTH 32
static __thread struct CUctx_st *ctx_stack[STACK_DEPTH];
static __thread int ctx_depth;

/* ---- counters ---------------------------------------------------------------------------- */

#define COUNTED(X) X(cuInit) X(cuDriverGetVersion) X(cuDeviceGet) X(cuDeviceGetCount) \
    X(cuDeviceGetAttribute) X(cuDeviceGetName) X(cuDevicePrimaryCtxRetain) \
    X(cuDevicePrimaryCtxRelease) X(cuCtxPushCurrent) X(cuCtxPopCurrent) X(cuCtxSetCurrent) \
    X(cuCtxGetCurrent) X(cuCtxGetDevice) X(cuCtxSynchronize) X(cuPointerGetAttribute) \
    X(cuPointerGetAttributes) X(cuMemAlloc) X(cuMemFree) X(cuMemAllocManaged) \
    X(cuMemHostAlloc) X(cuMemAllocHost) X(cuMemFreeHost) X(cuMemcpyAsync) X(cuMemcpy) \
    X(cuMemcpyHtoD) X(cuMemcpyDtoH) X(cuMemcpyHtoDAsync) X(cuMemcpyDtoHAsync) \
    X(cuMemcpy2DAsync) X(cuMemcpyPeerAsync) X(cuMemsetD8Async) X(cuStreamCreate) \
    X(cuStreamDestroy) X(cuStreamGetCtx) X(cuStreamSynchronize) X(cuStreamQuery) X(cuStreamWaitEvent) \
    X(cuEventCreate) X(cuEventRecord) X(cuEventDestroy) X(cuEventSynchronize) X(cuEventQuery) \
    X(cuGetProcAddress) X(cuCtxGetStreamPriorityRange) X(cuStreamCreateWithPriority) \
    X(cuStreamGetFlags) X(cuStreamGetPriority) X(cuDeviceGetUuid) X(cuDeviceGetUuid_v2) \
    X(cuDeviceTotalMem) X(cuMemGetInfo) X(cuMemGetAddressRange) X(cuCtxGetId) X(cuStreamGetId) \
    X(cuModuleLoadData) X(cuModuleUnload) X(cuModuleGetFunction) X(cuLaunchKernel) \
    X(cuMemAllocAsync) X(cuMemFreeAsync) X(cuDeviceGetDefaultMemPool) X(cuMemPoolCreate) \
    X(cuMemPoolDestroy) X(cuMemAllocFromPoolAsync) X(cuMemPoolTrimTo) \
    X(cuDeviceCanAccessPeer) X(cuCtxEnablePeerAccess) X(cuCtxDisablePeerAccess) \
    X(cuMemPoolSetAccess) X(cuMemPoolGetAccess) X(cuDevicePrimaryCtxReset) \
    X(cuDevicePrimaryCtxGetState) X(cuIpcGetMemHandle) X(cuIpcOpenMemHandle) \
    X(cuIpcCloseMemHandle) X(cuIpcGetEventHandle) X(cuIpcOpenEventHandle) \
    X(cuMemPoolExportToShareableHandle) X(cuMemPoolImportFromShareableHandle) \
    X(cuMemPoolExportPointer) X(cuMemPoolImportPointer)
#define AS_ENUM(name) COUNT_##name,
#define AS_NAME(name) #name,
enum { COUNTED(AS_ENUM) COUNT_HOST_SYNCS, COUNT_KERNEL_FAULTS, COUNT_POOL_REUSES,
       COUNT_COPY_FAULTS, COUNT_FREED_ACCESSES, COUNT_POOL_CHUNKS_RELEASED,
       COUNT_MISALIGNED, COUNT_PEER_FAULTS, COUNT_STICKY_REFUSALS, COUNT_DEAD_LAUNCHES,
       COUNT_ACCESS_FAULTS, COUNT_EARLY_FREES, COUNT_N };
static const char *const counter_names[] = {COUNTED(AS_NAME) "host_synchronizations",
                                            "kernel_faults", "pool_reuses", "copy_faults",
                                            "freed_memory_accesses", "pool_chunks_released",
                                            "misaligned_accesses", "peer_access_faults",
                                            "sticky_refusals", "dead_function_launches",
                                            "pool_access_faults", "pool_frees_before_importers"};
static long counters[COUNT_N];
#define COUNT(name) __atomic_add_fetch(&counters[COUNT_##name], 1, __ATOMIC_RELAXED)

/* ---- helpers ----------------------------------------------------------------------------- */

static struct CUctx_st *current(void) { return ctx_depth ? ctx_stack[ctx_depth - 1] : NULL; }

/* Sticky faults. A fault of a context's work (a kernel's illegal or misaligned address, a
 * copy touching freed memory) is sticky, as on a GPU: from then on every call that works in
 * that context — allocations and frees, copies and memsets, stream and event calls, module
 * loads, launches, synchronizations — returns the fault's error, until the context goes
 * (cuDevicePrimaryCtxReset, or its last cuDevicePrimaryCtxRelease). The primary context is
 * shared by every library of the process: after one fault, nobody's work on that device
 * runs. What still answers: the devices' own queries, the context stack (push, pop, set,
 * get current, cuCtxGetDevice, cuCtxGetId), retain/release/reset of primary contexts, pool
 * handles' attributes and access, cuGetErrorName/String and cuGetProcAddress.
 * Counted: sticky_refusals. */
static CUresult sticky_of(const struct CUctx_st *ctx) {
    CUresult status = ctx ? __atomic_load_n(&ctx->sticky, __ATOMIC_ACQUIRE) : CUDA_SUCCESS;
    if (status != CUDA_SUCCESS) COUNT(STICKY_REFUSALS);
    return status;
}

/* The first of the contexts' sticky errors, or CUDA_SUCCESS (NULLs skipped). */
static CUresult sticky2(const struct CUctx_st *a, const struct CUctx_st *b) {
    CUresult status = sticky_of(a);
    return status != CUDA_SUCCESS ? status : sticky_of(b);
}

/* Peer access (cuDeviceCanAccessPeer): between distinct devices, unless CUDASIM_PEER_ACCESS=0
 * or cudasim_set_peer_access(0) says the machine has no peer-to-peer path. */
static int peer_access_possible = 1;

static int valid_ctx(CUcontext c) {
    for (int i = 0; i < device_count; i++)
        if (c == &primary[i] && primary_retained[i] > 0) return 1;
    return 0;
}

static void configure(void) {
    const char *devices = getenv("CUDASIM_DEVICES"), *delay = getenv("CUDASIM_DELAY_US");
    if (devices) device_count = atoi(devices);
    if (device_count < 1) device_count = 1;
    if (device_count > MAX_DEVICES) device_count = MAX_DEVICES;
    if (delay) delay_us = atol(delay);
    const char *pitch = getenv("CUDASIM_MAX_PITCH");
    if (pitch && atol(pitch) > 0) max_pitch = (size_t)atol(pitch);
    const char *peer = getenv("CUDASIM_PEER_ACCESS");
    if (peer && *peer) peer_access_possible = atoi(peer) != 0;
}

/* The allocation holding [ptr, ptr + n), or NULL (caller holds the lock): the one whose
 * bytes include ptr — an address one past an allocation's end is not that allocation's
 * (it may be the next one's start), as the driver answers for it. Live allocations
 * do not overlap, so the list's order is free: the one found moves to the front, and the
 * next look-up of the same memory (a copy's source, asked about again and again) is
 * immediate, as the driver's own look-up (a tree, not a list) is whatever memory is
 * allocated — a program holding thousands of blocks does not pay for each look-up here
 * what no GPU driver charges. No caller walks the list while it asks. */
static allocation *find(uintptr_t ptr, size_t n) {
    for (allocation **link = &allocations; *link; link = &(*link)->next) {
        allocation *a = *link;
        if (ptr >= a->base && (ptr - a->base < a->size || (a->size == 0 && ptr == a->base)) &&
            n <= a->size - (ptr - a->base) && !(a->pooled && a->pool_state == POOL_FREE)) {
            *link = a->next;
            a->next = allocations;
            allocations = a;
            return a;
        }
    }
    return NULL;
}

/* The live allocation with this serial, or NULL: freed (caller holds the lock). */
static allocation *by_serial(unsigned long serial) {
    for (allocation *a = allocations; a; a = a->next)
        if (a->serial == serial) return a;
    return NULL;
}

/* Freed memory overlapping [ptr, ptr + n): a grave, or a pooled block whose free has run;
 * NULL if none (caller holds the lock). */
static allocation *freed_at(uintptr_t ptr, size_t n) {
    for (allocation *a = allocations; a; a = a->next)
        if (a->pooled && a->pool_state == POOL_FREE && ptr < a->base + a->reserved &&
            a->base < ptr + (n ? n : 1))
            return a;
    for (allocation *a = graveyard; a; a = a->next)
        if (ptr < a->base + a->reserved && a->base < ptr + (n ? n : 1)) return a;
    return NULL;
}

/* One end of a copy, [ptr, ptr + n), for op->ends: where its bytes can be touched by the
 * simulator now (device memory through its shadow, host memory as it is; NULL for freed
 * memory, whose work will fault), and its device (-1: pageable host memory). Returns 0
 * where part of the range is memory past an allocation's end, or spans allocations. */
static int resolve_end(uintptr_t ptr, size_t n, unsigned char **bytes, int *device,
                       unsigned long *serial, unsigned long *generation) {
    allocation *a = find(ptr, n);
    if (!a) a = freed_at(ptr, n);
    if (a) {
        *device = a->device;
        *serial = a->serial;
        *generation = a->generation;
        *bytes = a->dead || (a->pooled && a->pool_state == POOL_FREE) ? NULL
                 : a->bytes + (ptr - a->base);
        return 1;
    }
    for (allocation *b = allocations; b; b = b->next)   /* overlaps an allocation badly */
        if (ptr < b->base + b->reserved && b->base < ptr + n) return 0;
    *device = -1;
    *serial = *generation = 0;
    *bytes = (unsigned char *)ptr;                       /* pageable host memory */
    return 1;
}

/* Freed memory is poisoned (caller holds the lock; no work is touching it): device memory's
 * bytes go, pinned and managed memory's pages are dropped and made inaccessible, so that a
 * host read is a SIGSEGV, never the old bytes. The addresses stay reserved while the grave
 * lasts: nothing else is given them. */
static int ipc_freed(const allocation *a);
static void ipc_unmap(allocation *a);
#define IPC_READY_BYTES ((size_t)1 << 20)
static unsigned char *ipc_ready(allocation *a, size_t size);

static void poison(allocation *a) {
    if (a->ipc) ipc_unmap(a);
    else if (a->pool_mapped) munmap(a->bytes, a->pool_mapped);
    else if (a->kind == MEM_DEVICE) free(a->bytes);
    else {
        madvise((void *)a->base, a->reserved, MADV_DONTNEED);
        mprotect((void *)a->base, a->reserved, PROT_NONE);
    }
    a->bytes = NULL;
}

/* Bury a freed allocation, already unlinked from `allocations` (caller holds the lock):
 * poisoned now, or when the work touching it finishes. */
static void bury(allocation *a) {
    a->dead = 1;
    if (!a->busy) poison(a);
    a->next = graveyard;
    graveyard = a;
    if (++graves <= 2 * MAX_GRAVES) return;
    allocation *keep = graveyard, *old;      /* the oldest half's addresses go back */
    for (long i = 1; i < MAX_GRAVES; i++) keep = keep->next;
    old = keep->next;
    keep->next = NULL;
    graves = MAX_GRAVES;
    while (old) {
        allocation *next = old->next;
        if (old->busy) {                     /* still touched: stays until next time */
            old->next = graveyard;
            graveyard = old;
            graves++;
        } else {
            munmap((void *)old->base, old->reserved);
            free(old);
        }
        old = next;
    }
}

/* A fault of ctx's work: sticky from now on, the first one kept (caller holds the lock). */
static void set_sticky(struct CUctx_st *ctx, CUresult status) {
    if (ctx && ctx->sticky == CUDA_SUCCESS) __atomic_store_n(&ctx->sticky, status, __ATOMIC_RELEASE);
}

/* Work stops touching `a` (caller holds the lock). */
static void unpin(allocation *a) {
    if (--a->busy == 0 && a->dead) poison(a);
}

static void *worker(void *arg);
static void ipc_signal(struct ipc_event *page, uint64_t record);
static int ipc_event_reached(struct ipc_event *page, uint64_t record);
static void ipc_page_ref(struct ipc_event *page);
static void ipc_page_unref(struct ipc_event *page);
struct ipc_event;
static int ipc_event_page(struct CUevent_st *e);
static int ipc_event_pending(struct ipc_event *shared);
/* "interprocess pools" */
static int pool_exportable(const struct CUmemPoolHandle_st *pool);
static int ipc_pool_import_freed(const allocation *a);
static int import_allows(const allocation *a, int device, int write);
static int ipc_pool_create(struct CUmemPoolHandle_st *p);
static void ipc_pool_close(struct CUmemPoolHandle_st *p);
static int import_protection(const struct CUmemPoolHandle_st *p);
static unsigned char *ipc_pool_block(struct CUmemPoolHandle_st *pool, allocation *a, size_t size);
static void ipc_pool_record(const allocation *a);
static void ipc_pool_importer(const allocation *a, int imported);
static void ipc_event_release(struct CUevent_st *e);
static void ipc_pool_release_destroyed(struct CUmemPoolHandle_st *p);

/* Whether `a` is a block imported from another process's pool. */
static int pool_import(const allocation *a) { return a->imported && a->pool_mapped; }

/* A block imported from another process's pool freed here (cuMemFree, or a cuMemFreeAsync
 * its stream reached; caller holds the lock): off the live list and out of its record's
 * importers — "the imported memory must be freed from all importing processes before being
 * freed in the exporting process" — and its mapping gone. */
static void free_import(allocation *a) {
    allocation **link = &allocations;
    while (*link && *link != a) link = &(*link)->next;
    if (*link) *link = a->next;
    ipc_pool_importer(a, 0);
    bury(a);
    if (a->import_pool) ipc_pool_release_destroyed(a->import_pool);
}

static struct CUstream_st *new_stream(struct CUctx_st *ctx, unsigned flags, int per_thread) {
    struct CUstream_st *s = calloc(1, sizeof *s);
    if (!s) return NULL;
    s->magic = STREAM_MAGIC;
    s->ctx = ctx;
    s->flags = flags;
    s->per_thread = per_thread;
    static unsigned long long next_id;
    s->id = ++next_id;
    s->owner_thread = pthread_self();
    s->next = streams;
    streams = s;
    pthread_create(&s->worker, NULL, worker, s);
    return s;
}

/* A stream whose worker has finished all its work leaves for `retired` (caller holds the
 * lock): its handle is invalid from now on, and what recorded on it reads it as done. */
static void retire(struct CUstream_st *s) {
    s->magic = 0;
    s->stopping = 1;
    s->gone_next = retired;
    retired = s;
}

/* The stream a handle names, in the current context for the special values; NULL and an
 * error in *status for a bad handle or no current context (caller holds the lock). */
static struct CUstream_st *resolve_stream(CUstream handle, CUresult *status) {
    struct CUctx_st *ctx = current();
    *status = CUDA_SUCCESS;
    if (handle == NULL || handle == CU_STREAM_LEGACY || handle == CU_STREAM_PER_THREAD) {
        if (!ctx) { *status = CUDA_ERROR_INVALID_CONTEXT; return NULL; }
        if (handle != CU_STREAM_PER_THREAD) {
            if (!ctx->legacy) ctx->legacy = new_stream(ctx, 0, 0);
            return ctx->legacy;
        }
        for (struct CUstream_st *s = streams; s; s = s->next)
            if (s->per_thread && s->ctx == ctx && pthread_equal(s->owner_thread, pthread_self()))
                return s;
        return new_stream(ctx, 0, 1);
    }
    for (struct CUstream_st *s = streams; s; s = s->next)
        if (s == handle && s->magic == STREAM_MAGIC) return s;
    *status = CUDA_ERROR_INVALID_HANDLE;
    return NULL;
}

/* Append a work item to s, ordered after the legacy stream's work (blocking streams) or
 * after every blocking stream's work (the legacy stream): the documented NULL-stream rule. */
static void enqueue(struct CUstream_st *s, op *o) {
    struct CUctx_st *ctx = s->ctx;
    if (!ctx->legacy) ctx->legacy = new_stream(ctx, 0, 0);
    if (s == ctx->legacy) {
        for (struct CUstream_st *t = streams; t; t = t->next) {
            if (t == s || t->ctx != ctx || (t->flags & CU_STREAM_NON_BLOCKING)) continue;
            op *barrier = calloc(1, sizeof *barrier);   /* wait for t's work so far */
            barrier->kind = OP_MARK;
            barrier->deps[0].stream = t;
            barrier->deps[0].seq = t->issued;
            barrier->ndeps = 1;
            barrier->seq = ++s->issued;
            if (s->tail) s->tail->next = barrier; else s->head = barrier;
            s->tail = barrier;
        }
    } else if (!(s->flags & CU_STREAM_NON_BLOCKING)) {
        o->deps[o->ndeps].stream = ctx->legacy;
        o->deps[o->ndeps].seq = ctx->legacy->issued;
        o->ndeps++;
    }
    o->seq = ++s->issued;
    if (s->tail) s->tail->next = o; else s->head = o;
    s->tail = o;
    if (!paused) pthread_cond_broadcast(&progress);
}

static int ready(const op *o) {
    for (int i = 0; i < o->ndeps; i++)
        if (o->deps[i].stream->done < o->deps[i].seq) return 0;
    return !o->awaited || ipc_event_reached(o->awaited, o->awaited_at);
}

/* The worker's wait for its next item (lock held): woken by this process's progress, or,
 * for an item that waits on another process's event, every 100 microseconds to look. */
static void wait_for_progress(const op *head) {
    if (!head || !head->awaited || paused) { pthread_cond_wait(&progress, &lock); return; }
    struct timespec until;
    clock_gettime(CLOCK_REALTIME, &until);
    until.tv_nsec += 100000;
    if (until.tv_nsec >= 1000000000L) { until.tv_sec++; until.tv_nsec -= 1000000000L; }
    pthread_cond_timedwait(&progress, &lock, &until);
}

static void run_kernel(const op *o);
static void pool_free_done(const op *o);
static void release_above_thresholds(int device);

static void *worker(void *arg) {
    struct CUstream_st *s = arg;
    pthread_mutex_lock(&lock);
    for (;;) {
        while (!s->stopping && (paused || !s->head || !ready(s->head)))
            wait_for_progress(s->head);
        if (s->stopping && !s->head) break;
        op *o = s->head;
        pthread_mutex_unlock(&lock);
        if (delay_us > 0 && o->kind != OP_MARK) usleep((useconds_t)delay_us);
        pthread_mutex_lock(&lock);
        /* A copy's memory is looked up again when it runs: freed since it was enqueued (or
         * before), it is no memory to touch, and the copy faults as a kernel does. */
        allocation *touched[2] = {NULL, NULL};
        uintptr_t fault = 0;
        int faulted_copy = 0;
        /* A context that faulted runs no more work: what was queued behind the fault (or in
         * its other streams) is dropped, as a GPU drops a faulted context's work. */
        int dropped = s->ctx->sticky != CUDA_SUCCESS &&
                      (o->kind == OP_COPY || o->kind == OP_SET || o->kind == OP_KERNEL);
        for (int i = 0; i < (dropped ? 0 : o->kind == OP_COPY ? 2 : o->kind == OP_SET ? 1 : 0);
             i++) {
            if (!o->ends[i].serial) continue;
            allocation *a = by_serial(o->ends[i].serial);
            if (!a || o->ends[i].generation <= a->freed_through || ipc_freed(a)) {
                faulted_copy = 1;
                fault = o->ends[i].address;
                break;
            }
            /* another process's pool block: as its importer granted this device (see
             * "interprocess pools"); the destination is written, the source read */
            if (a->imported && a->pool_mapped && !import_allows(a, o->ctx->device, i == 0)) {
                faulted_copy = 2;
                fault = o->ends[i].address;
                break;
            }
            a->busy++;
            touched[i] = a;
            *(i ? &o->src : &o->dst) = a->bytes + (o->ends[i].address - a->base);
        }
        pthread_mutex_unlock(&lock);
        if (o->kind == OP_KERNEL && !dropped) run_kernel(o);
        for (size_t row = 0; row < o->height && !faulted_copy && !dropped; row++) {
            if (o->kind == OP_COPY)
                memmove(o->dst + row * o->dst_pitch, o->src + row * o->src_pitch, o->width);
            else if (o->kind == OP_SET)
                memset(o->dst + row * o->dst_pitch, o->value, o->width);
        }
        pthread_mutex_lock(&lock);
        for (int i = 0; i < 2; i++)
            if (touched[i]) unpin(touched[i]);
        if (faulted_copy) {
            __atomic_add_fetch(&counters[COUNT_COPY_FAULTS], 1, __ATOMIC_RELAXED);
            __atomic_add_fetch(&counters[faulted_copy == 2 ? COUNT_ACCESS_FAULTS
                                                           : COUNT_FREED_ACCESSES], 1,
                               __ATOMIC_RELAXED);
            fprintf(stderr, "cudasim: %s: illegal address %#lx (%s)\n",
                    o->kind == OP_COPY ? "copy" : "memset", (unsigned long)fault,
                    faulted_copy == 2 ? "an imported pool's block this device may not "
                                        "touch so: cuMemPoolSetAccess" : "freed memory");
            set_sticky(o->ctx, CUDA_ERROR_ILLEGAL_ADDRESS);
        }
        if (o->kind == OP_FREE) pool_free_done(o);
        if (o->signal) { ipc_signal(o->signal, o->signal_to); ipc_page_unref(o->signal); }
        if (o->awaited) ipc_page_unref(o->awaited);
        s->head = o->next;
        if (!s->head) s->tail = NULL;
        s->done = o->seq;
        free(o->staging);
        free(o->params);
        free(o);
        pthread_cond_broadcast(&progress);
    }
    pthread_mutex_unlock(&lock);
    return NULL;
}

/* The host blocks until s has done its work up to seq (caller holds the lock). Callers
 * count one host synchronization per blocking call, however many streams it waits for. */
static void wait_for(struct CUstream_st *s, uint64_t seq) {
    while (s->done < seq) pthread_cond_wait(&progress, &lock);
}

#define REQUIRE_INIT() do { if (!initialised) return CUDA_ERROR_NOT_INITIALIZED; } while (0)

/* ---- initialisation, devices, contexts -------------------------------------------------- */

SIM_EXPORT CUresult CUDAAPI cuInit(unsigned int flags) {
    COUNT(cuInit);
    if (flags != 0) return CUDA_ERROR_INVALID_VALUE;
    pthread_mutex_lock(&lock);
    if (!initialised) {
        configure();
        for (int i = 0; i < device_count; i++) {
            primary[i].magic = CTX_MAGIC;
            primary[i].device = i;
        }
        initialised = 1;
    }
    pthread_mutex_unlock(&lock);
    return CUDA_SUCCESS;
}

SIM_EXPORT CUresult CUDAAPI cuDriverGetVersion(int *version) {
    COUNT(cuDriverGetVersion);
    if (!version) return CUDA_ERROR_INVALID_VALUE;
    *version = CUDA_VERSION;
    return CUDA_SUCCESS;
}

SIM_EXPORT CUresult CUDAAPI cuDeviceGetCount(int *count) {
    COUNT(cuDeviceGetCount);
    REQUIRE_INIT();
    if (!count) return CUDA_ERROR_INVALID_VALUE;
    *count = device_count;
    return CUDA_SUCCESS;
}

SIM_EXPORT CUresult CUDAAPI cuDeviceGet(CUdevice *device, int ordinal) {
    COUNT(cuDeviceGet);
    REQUIRE_INIT();
    if (!device) return CUDA_ERROR_INVALID_VALUE;
    if (ordinal < 0 || ordinal >= device_count) return CUDA_ERROR_INVALID_DEVICE;
    *device = ordinal;
    return CUDA_SUCCESS;
}

SIM_EXPORT CUresult CUDAAPI cuDeviceGetName(char *name, int len, CUdevice device) {
    COUNT(cuDeviceGetName);
    REQUIRE_INIT();
    if (!name || len <= 0) return CUDA_ERROR_INVALID_VALUE;
    if (device < 0 || device >= device_count) return CUDA_ERROR_INVALID_DEVICE;
    snprintf(name, (size_t)len, "cudasim device %d", device);
    return CUDA_SUCCESS;
}

SIM_EXPORT CUresult CUDAAPI cuDeviceGetAttribute(int *value, CUdevice_attribute attribute,
                                                 CUdevice device) {
    COUNT(cuDeviceGetAttribute);
    REQUIRE_INIT();
    if (!value) return CUDA_ERROR_INVALID_VALUE;
    if (device < 0 || device >= device_count) return CUDA_ERROR_INVALID_DEVICE;
    switch (attribute) {
    case CU_DEVICE_ATTRIBUTE_MAX_PITCH: *value = (int)max_pitch; break;
    case CU_DEVICE_ATTRIBUTE_UNIFIED_ADDRESSING: *value = 1; break;
    case CU_DEVICE_ATTRIBUTE_MANAGED_MEMORY: *value = 1; break;
    case CU_DEVICE_ATTRIBUTE_MEMORY_POOLS_SUPPORTED: *value = 1; break;
    case CU_DEVICE_ATTRIBUTE_MEMPOOL_SUPPORTED_HANDLE_TYPES:
        *value = CU_MEM_HANDLE_TYPE_POSIX_FILE_DESCRIPTOR; break;
    case CU_DEVICE_ATTRIBUTE_COMPUTE_CAPABILITY_MAJOR: *value = 8; break;
    case CU_DEVICE_ATTRIBUTE_COMPUTE_CAPABILITY_MINOR: *value = 0; break;
    case CU_DEVICE_ATTRIBUTE_PCI_DEVICE_ID: *value = device; break;
    default: *value = 0; break;
    }
    return CUDA_SUCCESS;
}

/* Each simulated device's memory, as reported. */
#define DEVICE_MEMORY ((size_t)16 << 30)
/* Each device's memory: DEVICE_MEMORY, or less where cudasim_set_device_memory says (so that
 * a test can run a device out of memory). Device allocations past it fail with
 * CUDA_ERROR_OUT_OF_MEMORY, as a driver's do; a pool's blocks count whether in use or not
 * (the pool reserves them). */
static size_t device_memory = DEVICE_MEMORY;

static CUresult device_uuid(CUuuid *uuid, CUdevice device) {
    REQUIRE_INIT();
    if (!uuid) return CUDA_ERROR_INVALID_VALUE;
    if (device < 0 || device >= device_count) return CUDA_ERROR_INVALID_DEVICE;
    memset(uuid->bytes, 0, sizeof uuid->bytes);
    memcpy(uuid->bytes, "cudasim", 7);
    uuid->bytes[15] = (char)device;
    return CUDA_SUCCESS;
}

SIM_EXPORT CUresult CUDAAPI cuDeviceGetUuid(CUuuid *uuid, CUdevice device) {
    COUNT(cuDeviceGetUuid);
    return device_uuid(uuid, device);
}

SIM_EXPORT CUresult CUDAAPI cuDeviceGetUuid_v2(CUuuid *uuid, CUdevice device) {
    COUNT(cuDeviceGetUuid_v2);
    return device_uuid(uuid, device);
}

SIM_EXPORT CUresult CUDAAPI cuDeviceTotalMem(size_t *bytes, CUdevice device) {
    COUNT(cuDeviceTotalMem);
    REQUIRE_INIT();
    if (!bytes) return CUDA_ERROR_INVALID_VALUE;
    if (device < 0 || device >= device_count) return CUDA_ERROR_INVALID_DEVICE;
    *bytes = device_memory;
    return CUDA_SUCCESS;
}

SIM_EXPORT CUresult CUDAAPI cuDevicePrimaryCtxRetain(CUcontext *ctx, CUdevice device) {
    COUNT(cuDevicePrimaryCtxRetain);
    REQUIRE_INIT();
    if (!ctx) return CUDA_ERROR_INVALID_VALUE;
    if (device < 0 || device >= device_count) return CUDA_ERROR_INVALID_DEVICE;
    pthread_mutex_lock(&lock);
    if (primary_retained[device]++ == 0) primary[device].id = ++contexts_created;
    *ctx = &primary[device];
    pthread_mutex_unlock(&lock);
    return CUDA_SUCCESS;
}

/* "Get the state of the primary context": active while anyone retains it. */
SIM_EXPORT CUresult CUDAAPI cuDevicePrimaryCtxGetState(CUdevice device, unsigned int *flags,
                                                      int *active) {
    COUNT(cuDevicePrimaryCtxGetState);
    REQUIRE_INIT();
    if (!flags || !active) return CUDA_ERROR_INVALID_VALUE;
    if (device < 0 || device >= device_count) return CUDA_ERROR_INVALID_DEVICE;
    pthread_mutex_lock(&lock);
    *flags = 0;
    *active = primary_retained[device] > 0;
    pthread_mutex_unlock(&lock);
    return CUDA_SUCCESS;
}

static void reset_context(struct CUctx_st *ctx);
static void drop_modules(struct CUctx_st *ctx);

SIM_EXPORT CUresult CUDAAPI cuDevicePrimaryCtxRelease(CUdevice device) {
    COUNT(cuDevicePrimaryCtxRelease);
    REQUIRE_INIT();
    if (device < 0 || device >= device_count) return CUDA_ERROR_INVALID_DEVICE;
    pthread_mutex_lock(&lock);
    CUresult status = primary_retained[device] > 0 ? CUDA_SUCCESS : CUDA_ERROR_INVALID_CONTEXT;
    int last = status == CUDA_SUCCESS && --primary_retained[device] == 0;
    pthread_mutex_unlock(&lock);
    /* "If the usage drops to 0 the primary context of device dev will be destroyed
     * regardless of how many threads it is current to": its memory and streams go too. */
    if (last) reset_context(&primary[device]);
    return status;
}

/* "Explicitly destroys and cleans up all resources associated with the current device in the
 * current process": the primary context's memory (device, managed and pinned), streams,
 * events and modules go, its peer access both ways, its sticky error; it stays retained by
 * whoever retained it ("Resetting the primary context does not release it"), and its next
 * use is a new context: the same handle (as on a GPU: the same pointer), a new cuCtxGetId.
 * Handles to what went are invalid; a launch of a function of a destroyed module is
 * CUDA_ERROR_INVALID_HANDLE (undefined behaviour on a GPU; the simulator is the strict side,
 * and counts it: dead_function_launches). */
SIM_EXPORT CUresult CUDAAPI cuDevicePrimaryCtxReset(CUdevice device) {
    COUNT(cuDevicePrimaryCtxReset);
    REQUIRE_INIT();
    if (device < 0 || device >= device_count) return CUDA_ERROR_INVALID_DEVICE;
    reset_context(&primary[device]);
    pthread_mutex_lock(&lock);
    primary[device].id = ++contexts_created;
    pthread_mutex_unlock(&lock);
    return CUDA_SUCCESS;
}

SIM_EXPORT CUresult CUDAAPI cuCtxPushCurrent(CUcontext ctx) {
    COUNT(cuCtxPushCurrent);
    REQUIRE_INIT();
    pthread_mutex_lock(&lock);
    int ok = valid_ctx(ctx);
    pthread_mutex_unlock(&lock);
    if (!ok) return CUDA_ERROR_INVALID_CONTEXT;
    if (ctx_depth == STACK_DEPTH) return CUDA_ERROR_INVALID_VALUE;
    ctx_stack[ctx_depth++] = ctx;
    return CUDA_SUCCESS;
}

SIM_EXPORT CUresult CUDAAPI cuCtxPopCurrent(CUcontext *ctx) {
    COUNT(cuCtxPopCurrent);
    REQUIRE_INIT();
    if (!ctx_depth) return CUDA_ERROR_INVALID_CONTEXT;
    ctx_depth--;
    if (ctx) *ctx = ctx_stack[ctx_depth];
    return CUDA_SUCCESS;
}

SIM_EXPORT CUresult CUDAAPI cuCtxSetCurrent(CUcontext ctx) {
    COUNT(cuCtxSetCurrent);
    REQUIRE_INIT();
    if (ctx == NULL) {                      /* NULL pops the current one, as documented */
        if (ctx_depth) ctx_depth--;
        return CUDA_SUCCESS;
    }
    pthread_mutex_lock(&lock);
    int ok = valid_ctx(ctx);
    pthread_mutex_unlock(&lock);
    if (!ok) return CUDA_ERROR_INVALID_CONTEXT;
    if (ctx_depth) ctx_stack[ctx_depth - 1] = ctx; else ctx_stack[ctx_depth++] = ctx;
    return CUDA_SUCCESS;
}

SIM_EXPORT CUresult CUDAAPI cuCtxGetCurrent(CUcontext *ctx) {
    COUNT(cuCtxGetCurrent);
    REQUIRE_INIT();
    if (!ctx) return CUDA_ERROR_INVALID_VALUE;
    *ctx = current();
    return CUDA_SUCCESS;
}

SIM_EXPORT CUresult CUDAAPI cuCtxGetDevice(CUdevice *device) {
    COUNT(cuCtxGetDevice);
    REQUIRE_INIT();
    if (!device) return CUDA_ERROR_INVALID_VALUE;
    if (!current()) return CUDA_ERROR_INVALID_CONTEXT;
    *device = current()->device;
    return CUDA_SUCCESS;
}

SIM_EXPORT CUresult CUDAAPI cuCtxGetId(CUcontext ctx, unsigned long long *id) {
    COUNT(cuCtxGetId);
    REQUIRE_INIT();
    if (!id) return CUDA_ERROR_INVALID_VALUE;
    if (!ctx) ctx = current();
    pthread_mutex_lock(&lock);
    int ok = ctx && valid_ctx(ctx);
    if (ok) *id = (unsigned long long)ctx->id;
    pthread_mutex_unlock(&lock);
    return ok ? CUDA_SUCCESS : CUDA_ERROR_INVALID_CONTEXT;
}

SIM_EXPORT CUresult CUDAAPI cuCtxSynchronize(void) {
    COUNT(cuCtxSynchronize);
    REQUIRE_INIT();
    struct CUctx_st *ctx = current();
    if (!ctx) return CUDA_ERROR_INVALID_CONTEXT;
    COUNT(HOST_SYNCS);
    pthread_mutex_lock(&lock);
    for (struct CUstream_st *s = streams; s; s = s->next)
        if (s->ctx == ctx) wait_for(s, s->issued);
    CUresult status = sticky_of(ctx);
    release_above_thresholds(ctx->device);
    pthread_mutex_unlock(&lock);
    return status;
}

/* ---- peer access ---------------------------------------------------------------------------- */

/* "Returns in *canAccessPeer a value of 1 if contexts on dev are capable of directly accessing
 * memory from contexts on peerDev": between distinct devices, unless CUDASIM_PEER_ACCESS=0 (or
 * cudasim_set_peer_access(0)) makes this a machine without a peer-to-peer path; never a
 * device to itself. */
SIM_EXPORT CUresult CUDAAPI cuDeviceCanAccessPeer(int *can_access, CUdevice device,
                                                  CUdevice peer) {
    COUNT(cuDeviceCanAccessPeer);
    REQUIRE_INIT();
    if (!can_access) return CUDA_ERROR_INVALID_VALUE;
    if (device < 0 || device >= device_count || peer < 0 || peer >= device_count)
        return CUDA_ERROR_INVALID_DEVICE;
    *can_access = device != peer && peer_access_possible;
    return CUDA_SUCCESS;
}

/* Access from the current context's kernels to the peer context's memory (cuMemAlloc
 * memory; pools' blocks follow cuMemPoolSetAccess instead): one way only, once. Copies
 * between devices need none (the driver stages them). */
SIM_EXPORT CUresult CUDAAPI cuCtxEnablePeerAccess(CUcontext peer, unsigned int flags) {
    COUNT(cuCtxEnablePeerAccess);
    REQUIRE_INIT();
    struct CUctx_st *ctx = current();
    if (!ctx) return CUDA_ERROR_INVALID_CONTEXT;
    CUresult status = sticky_of(ctx);
    if (status != CUDA_SUCCESS) return status;
    if (flags != 0) return CUDA_ERROR_INVALID_VALUE;
    pthread_mutex_lock(&lock);
    if (!valid_ctx(peer) || peer == ctx) status = CUDA_ERROR_INVALID_CONTEXT;
    else if (!peer_access_possible) status = CUDA_ERROR_PEER_ACCESS_UNSUPPORTED;
    else if (ctx->peers[peer->device]) status = CUDA_ERROR_PEER_ACCESS_ALREADY_ENABLED;
    else ctx->peers[peer->device] = 1;
    pthread_mutex_unlock(&lock);
    return status;
}

SIM_EXPORT CUresult CUDAAPI cuCtxDisablePeerAccess(CUcontext peer) {
    COUNT(cuCtxDisablePeerAccess);
    REQUIRE_INIT();
    struct CUctx_st *ctx = current();
    if (!ctx) return CUDA_ERROR_INVALID_CONTEXT;
    CUresult status = sticky_of(ctx);
    if (status != CUDA_SUCCESS) return status;
    pthread_mutex_lock(&lock);
    if (!valid_ctx(peer)) status = CUDA_ERROR_INVALID_CONTEXT;
    else if (!ctx->peers[peer->device]) status = CUDA_ERROR_PEER_ACCESS_NOT_ENABLED;
    else ctx->peers[peer->device] = 0;
    pthread_mutex_unlock(&lock);
    return status;
}

/* ---- memory --------------------------------------------------------------------------------- */

static CUresult allocate_in(struct CUctx_st *ctx, mem_kind kind, size_t size,
                            struct CUmemPoolHandle_st *pool, uintptr_t *out);

/* The bytes of device `device` allocated: ordinary allocations, and the chunks pools
 * reserve, their blocks in use or not (caller holds the lock). */
static size_t device_memory_used(int device) {
    size_t used = 0;
    for (allocation *a = allocations; a; a = a->next)
        if (a->kind == MEM_DEVICE && a->device == device && !a->pooled && !a->imported)
            used += a->capacity;
    for (chunk *c = chunks; c; c = c->next)
        if (c->device == device) used += c->size;
    return used;
}

/* A new allocation, given its serial and generation, among the live ones (caller holds the
 * lock). */
static void link_allocation(allocation *a) {
    a->serial = ++serials;
    a->generation = ++generations;
    a->next = allocations;
    allocations = a;
}

static CUresult allocate(mem_kind kind, size_t size, uintptr_t *out) {
    return allocate_in(current(), kind, size, NULL, out);
}

/* A new allocation; from `pool` (a block carved from one of its chunks, a new chunk if none
 * has room) where not NULL. */
static CUresult allocate_in(struct CUctx_st *ctx, mem_kind kind, size_t size,
                            struct CUmemPoolHandle_st *pool, uintptr_t *out) {
    if (!ctx) return CUDA_ERROR_INVALID_CONTEXT;
    CUresult broken = sticky_of(ctx);
    if (broken != CUDA_SUCCESS) return broken;
    if (!out) return CUDA_ERROR_INVALID_VALUE;
    if (size == 0) return CUDA_ERROR_INVALID_VALUE;
    size_t page = (size_t)sysconf(_SC_PAGESIZE);
    if (size > SIZE_MAX - page) return CUDA_ERROR_OUT_OF_MEMORY;
    size_t reserved = (size + page - 1) / page * page;
    allocation *a = calloc(1, sizeof *a);
    if (!a) return CUDA_ERROR_OUT_OF_MEMORY;
    /* Device memory: an address range no host access may touch; the bytes live apart. */
    void *base = mmap(NULL, reserved, kind == MEM_DEVICE ? PROT_NONE : PROT_READ | PROT_WRITE,
                      MAP_PRIVATE | MAP_ANONYMOUS | MAP_NORESERVE, -1, 0);
    if (base == MAP_FAILED) { free(a); return CUDA_ERROR_OUT_OF_MEMORY; }
    /* Large cuMemAlloc memory lives in a memfd from the start, ready for CUDA IPC (see
     * "interprocess"): exporting it then moves no bytes. */
    if (kind == MEM_DEVICE && !pool && size >= IPC_READY_BYTES) a->bytes = ipc_ready(a, size);
    else if (pool && pool_exportable(pool)) a->bytes = ipc_pool_block(pool, a, size);
    else a->bytes = kind == MEM_DEVICE ? calloc(1, size) : base;
    if (!a->bytes) { munmap(base, reserved); free(a); return CUDA_ERROR_OUT_OF_MEMORY; }
    a->base = (uintptr_t)base;
    a->size = a->capacity = size;
    a->reserved = reserved;
    a->kind = kind;
    a->device = kind == MEM_DEVICE ? ctx->device : 0;
    a->ctx = ctx;
    pthread_mutex_lock(&lock);
    chunk *c = NULL;
    size_t charge = kind == MEM_DEVICE ? size : 0;   /* what the device must find now */
    if (pool) {
        for (c = chunks; c; c = c->next)
            if (c->pool == pool && c->device == a->device && c->size - c->filled >= size) break;
        charge = c ? 0 : (size + POOL_GRANULARITY - 1) / POOL_GRANULARITY * POOL_GRANULARITY;
    }
    chunk *fresh = pool && !c ? calloc(1, sizeof *fresh) : NULL;
    if ((pool && !c && !fresh) ||
        (charge && device_memory_used(a->device) + charge > device_memory)) {
        pthread_mutex_unlock(&lock);
        free(fresh);
        if (a->ipc) {
            munmap(a->ipc, page + size);
            close(a->ipc_fd);
        } else if (a->pool_mapped) munmap(a->bytes, a->pool_mapped);
        else if (kind == MEM_DEVICE) free(a->bytes);
        munmap(base, reserved);
        free(a);
        return CUDA_ERROR_OUT_OF_MEMORY;
    }
    if (fresh) {
        c = fresh;
        c->pool = pool;
        c->device = a->device;
        c->size = charge;
        c->next = chunks;
        chunks = c;
    }
    if (c) {
        c->filled += size;
        a->chunk = c;
        a->pooled = 1;
        a->pool = pool;
    }
    link_allocation(a);
    ipc_pool_record(a);
    pthread_mutex_unlock(&lock);
    *out = a->base;
    return CUDA_SUCCESS;
}

static void pooled_block_freed(allocation *a);

/* cuMemFree, cuMemFreeHost: the memory is freed at once, without waiting for work still
 * queued that uses it — cuMemFree "may" synchronize, cuMemFreeHost promises nothing, and a
 * pooled block "will not perform any implicit synchronization" (cuda.h). Work that touches
 * it afterwards, queued before or after, faults (see "freed memory"). */
static CUresult release(uintptr_t ptr, mem_kind kind) {
    if (!current()) return CUDA_ERROR_INVALID_CONTEXT;
    CUresult broken = sticky_of(current());
    if (broken != CUDA_SUCCESS) return broken;
    pthread_mutex_lock(&lock);
    allocation **link = &allocations;
    while (*link && !((*link)->base == ptr && ((*link)->kind == kind ||
                                             (kind == MEM_DEVICE && (*link)->kind == MEM_MANAGED))
                      && !(((*link)->pooled || pool_import(*link)) &&
                           (*link)->pool_state != POOL_LIVE)
                      && !((*link)->imported && !pool_import(*link))))
        link = &(*link)->next;   /* cuIpcCloseMemHandle's to close; a pool import is freed */
    allocation *a = *link;
    if (a && a->pooled) {                 /* back to its pool, free for any stream now */
        a->pool_state = POOL_FREE;
        ipc_pool_record(a);
        block_idles(a);
        a->freed_through = a->generation;
        pooled_block_freed(a);
    } else if (a && pool_import(a)) {
        free_import(a);
    } else if (a) {
        *link = a->next;
        bury(a);
    }
    pthread_mutex_unlock(&lock);
    return a ? CUDA_SUCCESS : CUDA_ERROR_INVALID_VALUE;
}

SIM_EXPORT CUresult CUDAAPI cuMemAlloc(CUdeviceptr *dptr, size_t bytesize) {
    COUNT(cuMemAlloc);
    REQUIRE_INIT();
    uintptr_t address = 0;
    CUresult status = allocate(MEM_DEVICE, bytesize, &address);
    if (status == CUDA_SUCCESS) *dptr = address;
    return status;
}

SIM_EXPORT CUresult CUDAAPI cuMemAllocManaged(CUdeviceptr *dptr, size_t bytesize,
                                              unsigned int flags) {
    COUNT(cuMemAllocManaged);
    REQUIRE_INIT();
    if (flags != CU_MEM_ATTACH_GLOBAL && flags != CU_MEM_ATTACH_HOST)
        return CUDA_ERROR_INVALID_VALUE;
    uintptr_t address = 0;
    CUresult status = allocate(MEM_MANAGED, bytesize, &address);
    if (status == CUDA_SUCCESS) *dptr = address;
    return status;
}

SIM_EXPORT CUresult CUDAAPI cuMemHostAlloc(void **pp, size_t bytesize, unsigned int flags) {
    COUNT(cuMemHostAlloc);
    REQUIRE_INIT();
    (void)flags;
    uintptr_t address = 0;
    CUresult status = allocate(MEM_PINNED, bytesize, &address);
    if (status == CUDA_SUCCESS) *pp = (void *)address;
    return status;
}

SIM_EXPORT CUresult CUDAAPI cuMemAllocHost(void **pp, size_t bytesize) {
    COUNT(cuMemAllocHost);
    return cuMemHostAlloc(pp, bytesize, 0);
}

SIM_EXPORT CUresult CUDAAPI cuMemFree(CUdeviceptr dptr) {
    COUNT(cuMemFree);
    REQUIRE_INIT();
    return release((uintptr_t)dptr, MEM_DEVICE);
}

SIM_EXPORT CUresult CUDAAPI cuMemFreeHost(void *p) {
    COUNT(cuMemFreeHost);
    REQUIRE_INIT();
    return release((uintptr_t)p, MEM_PINNED);
}

SIM_EXPORT CUresult CUDAAPI cuMemGetInfo(size_t *free_bytes, size_t *total_bytes) {
    COUNT(cuMemGetInfo);
    REQUIRE_INIT();
    struct CUctx_st *ctx = current();
    if (!ctx) return CUDA_ERROR_INVALID_CONTEXT;
    CUresult broken = sticky_of(ctx);
    if (broken != CUDA_SUCCESS) return broken;
    if (!free_bytes || !total_bytes) return CUDA_ERROR_INVALID_VALUE;
    pthread_mutex_lock(&lock);
    size_t used = device_memory_used(ctx->device);
    pthread_mutex_unlock(&lock);
    *total_bytes = device_memory;
    *free_bytes = used < device_memory ? device_memory - used : 0;
    return CUDA_SUCCESS;
}

/* The allocation (device or managed, from cuMemAlloc*) holding ptr: its base and size. */
SIM_EXPORT CUresult CUDAAPI cuMemGetAddressRange(CUdeviceptr *base, size_t *size,
                                                 CUdeviceptr ptr) {
    COUNT(cuMemGetAddressRange);
    REQUIRE_INIT();
    if (!current()) return CUDA_ERROR_INVALID_CONTEXT;
    CUresult broken = sticky_of(current());
    if (broken != CUDA_SUCCESS) return broken;
    pthread_mutex_lock(&lock);
    allocation *a = find((uintptr_t)ptr, 0);
    int found = a && a->kind != MEM_PINNED && (uintptr_t)ptr < a->base + a->size;
    if (found && base) *base = (CUdeviceptr)a->base;
    if (found && size) *size = a->size;
    pthread_mutex_unlock(&lock);
    return found ? CUDA_SUCCESS : CUDA_ERROR_NOT_FOUND;
}

static void set_attribute(CUpointer_attribute attribute, void *data, const allocation *a) {
    switch (attribute) {
    case CU_POINTER_ATTRIBUTE_CONTEXT: *(CUcontext *)data = a ? a->ctx : NULL; break;
    case CU_POINTER_ATTRIBUTE_MEMORY_TYPE:
        *(unsigned *)data = !a ? 0 : a->kind == MEM_PINNED ? CU_MEMORYTYPE_HOST
                                                           : CU_MEMORYTYPE_DEVICE;
        break;
    case CU_POINTER_ATTRIBUTE_DEVICE_POINTER: *(CUdeviceptr *)data = a ? a->base : 0; break;
    case CU_POINTER_ATTRIBUTE_HOST_POINTER:
        *(void **)data = a && a->kind != MEM_DEVICE ? (void *)a->base : NULL;
        break;
    case CU_POINTER_ATTRIBUTE_IS_MANAGED: *(unsigned *)data = a && a->kind == MEM_MANAGED; break;
    case CU_POINTER_ATTRIBUTE_DEVICE_ORDINAL: *(int *)data = a ? a->device : -2; break;
    case CU_POINTER_ATTRIBUTE_RANGE_START_ADDR: *(CUdeviceptr *)data = a ? a->base : 0; break;
    case CU_POINTER_ATTRIBUTE_RANGE_SIZE: *(size_t *)data = a ? a->size : 0; break;
    case CU_POINTER_ATTRIBUTE_MAPPED: *(int *)data = a != NULL; break;
    default: memset(data, 0, sizeof(int)); break;
    }
}

SIM_EXPORT CUresult CUDAAPI cuPointerGetAttribute(void *data, CUpointer_attribute attribute,
                                                  CUdeviceptr ptr) {
    COUNT(cuPointerGetAttribute);
    REQUIRE_INIT();
    if (!data) return CUDA_ERROR_INVALID_VALUE;
    if (!current()) return CUDA_ERROR_INVALID_CONTEXT;
    CUresult broken = sticky_of(current());
    if (broken != CUDA_SUCCESS) return broken;
    pthread_mutex_lock(&lock);
    allocation *a = find((uintptr_t)ptr, 0);
    if (a) set_attribute(attribute, data, a);
    pthread_mutex_unlock(&lock);
    return a ? CUDA_SUCCESS : CUDA_ERROR_INVALID_VALUE;   /* not a CUDA pointer */
}

SIM_EXPORT CUresult CUDAAPI cuPointerGetAttributes(unsigned int n, CUpointer_attribute *attributes,
                                                   void **data, CUdeviceptr ptr) {
    COUNT(cuPointerGetAttributes);
    REQUIRE_INIT();
    if (!attributes || !data) return CUDA_ERROR_INVALID_VALUE;
    if (!current()) return CUDA_ERROR_INVALID_CONTEXT;
    CUresult broken = sticky_of(current());
    if (broken != CUDA_SUCCESS) return broken;
    pthread_mutex_lock(&lock);
    allocation *a = find((uintptr_t)ptr, 0);              /* unknown: defaults, no error */
    for (unsigned i = 0; i < n; i++) set_attribute(attributes[i], data[i], a);
    pthread_mutex_unlock(&lock);
    return CUDA_SUCCESS;
}

/* ---- copies ------------------------------------------------------------------------------- */

/* Enqueue rows of `width` bytes on `handle` (NULL: synchronous on the legacy stream). */
static CUresult copy_rows(uintptr_t dst, size_t dst_pitch, uintptr_t src, size_t src_pitch,
                          size_t width, size_t height, CUstream handle, int synchronous,
                          int set, unsigned char value) {
    if (!current()) return CUDA_ERROR_INVALID_CONTEXT;
    CUresult broken = sticky_of(current());
    if (broken != CUDA_SUCCESS) return broken;
    if (height == 0 || width == 0) return CUDA_SUCCESS;
    if (height > 1 && (width > dst_pitch || (!set && width > src_pitch)))
        return CUDA_ERROR_INVALID_VALUE;
    if (height > 1 && (dst_pitch > max_pitch || (!set && src_pitch > max_pitch)))
        return CUDA_ERROR_INVALID_VALUE;                   /* CU_DEVICE_ATTRIBUTE_MAX_PITCH */
    size_t dst_span = (height - 1) * dst_pitch + width;
    size_t src_span = set ? 0 : (height - 1) * src_pitch + width;
    pthread_mutex_lock(&lock);
    CUresult status;
    struct CUstream_st *s = resolve_stream(handle, &status);
    if (s && s->ctx != current()) status = sticky_of(s->ctx);   /* the stream's context */
    int dst_device, src_device = 0;
    unsigned char *to = NULL, *from = NULL;
    unsigned long serial[2] = {0, 0}, generation[2] = {0, 0};
    int placed = resolve_end(dst, dst_span, &to, &dst_device, &serial[0], &generation[0]) &&
                 (set || resolve_end(src, src_span, &from, &src_device, &serial[1],
                                     &generation[1]));
    if (s && !placed) status = CUDA_ERROR_INVALID_VALUE;
    if (getenv("CUDASIM_TRACE"))
        fprintf(stderr, "cudasim: %s %#lx <- %#lx, %zu x %zu bytes, stream %p: %d\n",
                set ? "set" : "copy", (unsigned long)dst, (unsigned long)src, height, width,
                (void *)handle, status);
    if (status != CUDA_SUCCESS) { pthread_mutex_unlock(&lock); return status; }
    /* The driver's API synchronization rules for pageable host memory (bytes_of's device
     * -1): an asynchronous copy from it is staged at once, so the caller may reuse the
     * source on return; a copy into it returns only once done, as does host to host. */
    int pageable_dst = dst_device < 0, pageable_src = !set && src_device < 0;
    if (set && pageable_dst) { pthread_mutex_unlock(&lock); return CUDA_ERROR_INVALID_VALUE; }
    if (pageable_dst) synchronous = 1;
    unsigned char *staging = NULL;
    if (pageable_src && !synchronous) {
        staging = malloc(src_span);
        if (!staging) { pthread_mutex_unlock(&lock); return CUDA_ERROR_OUT_OF_MEMORY; }
        memcpy(staging, from, src_span);
        from = staging;
    }
    op *o = calloc(1, sizeof *o);
    o->staging = staging;
    o->kind = set ? OP_SET : OP_COPY;
    o->ctx = s->ctx;
    o->dst = to;
    o->src = from;
    o->ends[0].address = dst, o->ends[0].serial = serial[0], o->ends[0].generation = generation[0];
    o->ends[1].address = src, o->ends[1].generation = generation[1];
    o->ends[1].serial = staging ? 0 : serial[1];
    o->width = width;
    o->height = height;
    o->dst_pitch = dst_pitch;
    o->src_pitch = src_pitch;
    o->value = value;
    enqueue(s, o);
    if (synchronous) {
        COUNT(HOST_SYNCS);
        wait_for(s, s->issued);
        status = sticky_of(s->ctx);   /* a synchronous copy that faulted says so */
    }
    pthread_mutex_unlock(&lock);
    return status;
}

SIM_EXPORT CUresult CUDAAPI cuMemcpyAsync(CUdeviceptr dst, CUdeviceptr src, size_t n,
                                          CUstream stream) {
    COUNT(cuMemcpyAsync);
    REQUIRE_INIT();
    return copy_rows(dst, n, src, n, n, 1, stream, 0, 0, 0);
}

SIM_EXPORT CUresult CUDAAPI cuMemcpy(CUdeviceptr dst, CUdeviceptr src, size_t n) {
    COUNT(cuMemcpy);
    REQUIRE_INIT();
    return copy_rows(dst, n, src, n, n, 1, NULL, 1, 0, 0);
}

SIM_EXPORT CUresult CUDAAPI cuMemcpyHtoD(CUdeviceptr dst, const void *src, size_t n) {
    COUNT(cuMemcpyHtoD);
    REQUIRE_INIT();
    return copy_rows(dst, n, (uintptr_t)src, n, n, 1, NULL, 1, 0, 0);
}

SIM_EXPORT CUresult CUDAAPI cuMemcpyDtoH(void *dst, CUdeviceptr src, size_t n) {
    COUNT(cuMemcpyDtoH);
    REQUIRE_INIT();
    return copy_rows((uintptr_t)dst, n, src, n, n, 1, NULL, 1, 0, 0);
}

SIM_EXPORT CUresult CUDAAPI cuMemcpyHtoDAsync(CUdeviceptr dst, const void *src, size_t n,
                                              CUstream stream) {
    COUNT(cuMemcpyHtoDAsync);
    REQUIRE_INIT();
    return copy_rows(dst, n, (uintptr_t)src, n, n, 1, stream, 0, 0, 0);
}

SIM_EXPORT CUresult CUDAAPI cuMemcpyDtoHAsync(void *dst, CUdeviceptr src, size_t n,
                                              CUstream stream) {
    COUNT(cuMemcpyDtoHAsync);
    REQUIRE_INIT();
    return copy_rows((uintptr_t)dst, n, src, n, n, 1, stream, 0, 0, 0);
}

SIM_EXPORT CUresult CUDAAPI cuMemsetD8Async(CUdeviceptr dst, unsigned char value, size_t n,
                                            CUstream stream) {
    COUNT(cuMemsetD8Async);
    REQUIRE_INIT();
    return copy_rows(dst, n, 0, 0, n, 1, stream, 0, 1, value);
}

static uintptr_t copy2d_end(CUmemorytype type, const void *host, CUdeviceptr device,
                            size_t x, size_t y, size_t pitch) {
    uintptr_t base = type == CU_MEMORYTYPE_HOST ? (uintptr_t)host : (uintptr_t)device;
    return base + y * pitch + x;
}

SIM_EXPORT CUresult CUDAAPI cuMemcpy2DAsync(const CUDA_MEMCPY2D *copy, CUstream stream) {
    COUNT(cuMemcpy2DAsync);
    REQUIRE_INIT();
    if (!copy) return CUDA_ERROR_INVALID_VALUE;
    if (copy->srcMemoryType == CU_MEMORYTYPE_ARRAY || copy->dstMemoryType == CU_MEMORYTYPE_ARRAY)
        return CUDA_ERROR_NOT_SUPPORTED;                  /* arrays are not modelled */
    uintptr_t src = copy2d_end(copy->srcMemoryType, copy->srcHost, copy->srcDevice,
                               copy->srcXInBytes, copy->srcY, copy->srcPitch);
    uintptr_t dst = copy2d_end(copy->dstMemoryType, copy->dstHost, copy->dstDevice,
                               copy->dstXInBytes, copy->dstY, copy->dstPitch);
    return copy_rows(dst, copy->dstPitch, src, copy->srcPitch, copy->WidthInBytes, copy->Height,
                     stream, 0, 0, 0);
}

SIM_EXPORT CUresult CUDAAPI cuMemcpyPeerAsync(CUdeviceptr dst, CUcontext dst_ctx, CUdeviceptr src,
                                              CUcontext src_ctx, size_t n, CUstream stream) {
    COUNT(cuMemcpyPeerAsync);
    REQUIRE_INIT();
    pthread_mutex_lock(&lock);
    int ok = valid_ctx(dst_ctx) && valid_ctx(src_ctx);
    allocation *to = find((uintptr_t)dst, n), *from = find((uintptr_t)src, n);
    int placed = to && from && to->ctx == dst_ctx && from->ctx == src_ctx;
    pthread_mutex_unlock(&lock);
    if (!ok) return CUDA_ERROR_INVALID_CONTEXT;
    CUresult broken = sticky2(dst_ctx, src_ctx);
    if (broken != CUDA_SUCCESS) return broken;
    if (!placed) return CUDA_ERROR_INVALID_VALUE;
    return copy_rows(dst, n, src, n, n, 1, stream, 0, 0, 0);
}

/* ---- streams and events ---------------------------------------------------------------------- */

SIM_EXPORT CUresult CUDAAPI cuStreamGetId(CUstream handle, unsigned long long *id) {
    COUNT(cuStreamGetId);
    REQUIRE_INIT();
    if (!id) return CUDA_ERROR_INVALID_VALUE;
    pthread_mutex_lock(&lock);
    CUresult status;
    struct CUstream_st *s = resolve_stream(handle, &status);
    if (s) status = sticky_of(s->ctx);
    if (s && status == CUDA_SUCCESS) *id = s->id;
    pthread_mutex_unlock(&lock);
    return status;
}

/* Stream priorities: lower numbers are higher priority; the range is the context's. */
enum { LEAST_PRIORITY = 0, GREATEST_PRIORITY = -5 };

SIM_EXPORT CUresult CUDAAPI cuCtxGetStreamPriorityRange(int *least, int *greatest) {
    COUNT(cuCtxGetStreamPriorityRange);
    REQUIRE_INIT();
    if (!current()) return CUDA_ERROR_INVALID_CONTEXT;
    CUresult broken = sticky_of(current());
    if (broken != CUDA_SUCCESS) return broken;
    if (least) *least = LEAST_PRIORITY;
    if (greatest) *greatest = GREATEST_PRIORITY;
    return CUDA_SUCCESS;
}

SIM_EXPORT CUresult CUDAAPI cuStreamCreateWithPriority(CUstream *stream, unsigned int flags,
                                                       int priority) {
    COUNT(cuStreamCreateWithPriority);
    REQUIRE_INIT();
    if (!stream || (flags & ~CU_STREAM_NON_BLOCKING)) return CUDA_ERROR_INVALID_VALUE;
    struct CUctx_st *ctx = current();
    if (!ctx) return CUDA_ERROR_INVALID_CONTEXT;
    CUresult broken = sticky_of(ctx);
    if (broken != CUDA_SUCCESS) return broken;
    /* Outside the range the driver clamps (documented), it does not fail. */
    if (priority > LEAST_PRIORITY) priority = LEAST_PRIORITY;
    if (priority < GREATEST_PRIORITY) priority = GREATEST_PRIORITY;
    pthread_mutex_lock(&lock);
    *stream = new_stream(ctx, flags, 0);
    if (*stream) (*stream)->priority = priority;
    pthread_mutex_unlock(&lock);
    return *stream ? CUDA_SUCCESS : CUDA_ERROR_OUT_OF_MEMORY;
}

SIM_EXPORT CUresult CUDAAPI cuStreamCreate(CUstream *stream, unsigned int flags) {
    COUNT(cuStreamCreate);
    return cuStreamCreateWithPriority(stream, flags, LEAST_PRIORITY);
}

/* A stream's flags or priority (which: 0 flags, 1 priority). */
static CUresult stream_property(CUstream handle, int which, void *out) {
    REQUIRE_INIT();
    if (!out) return CUDA_ERROR_INVALID_VALUE;
    pthread_mutex_lock(&lock);
    CUresult status;
    struct CUstream_st *s = resolve_stream(handle, &status);
    if (s) status = sticky_of(s->ctx);
    if (status != CUDA_SUCCESS) s = NULL;
    if (s && which == 0) *(unsigned *)out = s->flags;
    if (s && which == 1) *(int *)out = s->priority;
    pthread_mutex_unlock(&lock);
    return status;
}

SIM_EXPORT CUresult CUDAAPI cuStreamGetFlags(CUstream handle, unsigned int *flags) {
    COUNT(cuStreamGetFlags);
    return stream_property(handle, 0, flags);
}

SIM_EXPORT CUresult CUDAAPI cuStreamGetPriority(CUstream handle, int *priority) {
    COUNT(cuStreamGetPriority);
    return stream_property(handle, 1, priority);
}

SIM_EXPORT CUresult CUDAAPI cuStreamDestroy(CUstream handle) {
    COUNT(cuStreamDestroy);
    REQUIRE_INIT();
    if (handle == NULL || handle == CU_STREAM_LEGACY || handle == CU_STREAM_PER_THREAD)
        return CUDA_ERROR_INVALID_HANDLE;
    pthread_mutex_lock(&lock);
    CUresult status;
    struct CUstream_st *s = resolve_stream(handle, &status);
    if (s) status = sticky_of(s->ctx);
    if (status != CUDA_SUCCESS) { pthread_mutex_unlock(&lock); return status; }
    /* Work already enqueued still runs (documented); then the stream goes. */
    struct CUstream_st **link = &streams;
    while (*link != s) link = &(*link)->next;
    *link = s->next;
    s->stopping = 1;
    pthread_cond_broadcast(&progress);
    pthread_mutex_unlock(&lock);
    pthread_join(s->worker, NULL);
    pthread_mutex_lock(&lock);
    retire(s);
    pthread_mutex_unlock(&lock);
    return CUDA_SUCCESS;
}

SIM_EXPORT CUresult CUDAAPI cuStreamGetCtx(CUstream handle, CUcontext *ctx) {
    COUNT(cuStreamGetCtx);
    REQUIRE_INIT();
    if (!ctx) return CUDA_ERROR_INVALID_VALUE;
    pthread_mutex_lock(&lock);
    CUresult status;
    struct CUstream_st *s = resolve_stream(handle, &status);
    if (s) status = sticky_of(s->ctx);
    if (s && status == CUDA_SUCCESS) *ctx = s->ctx;
    pthread_mutex_unlock(&lock);
    return status;
}

SIM_EXPORT CUresult CUDAAPI cuStreamSynchronize(CUstream handle) {
    COUNT(cuStreamSynchronize);
    REQUIRE_INIT();
    pthread_mutex_lock(&lock);
    CUresult status;
    struct CUstream_st *s = resolve_stream(handle, &status);
    if (s) {
        COUNT(HOST_SYNCS);
        wait_for(s, s->issued);
        status = sticky_of(s->ctx);
        release_above_thresholds(s->ctx->device);
    }
    pthread_mutex_unlock(&lock);
    return status;
}

SIM_EXPORT CUresult CUDAAPI cuStreamQuery(CUstream handle) {
    COUNT(cuStreamQuery);
    REQUIRE_INIT();
    pthread_mutex_lock(&lock);
    CUresult status;
    struct CUstream_st *s = resolve_stream(handle, &status);
    if (s) status = sticky_of(s->ctx);
    if (s && status == CUDA_SUCCESS && s->done < s->issued) status = CUDA_ERROR_NOT_READY;
    pthread_mutex_unlock(&lock);
    return status;
}

static struct CUevent_st *valid_event(CUevent e) {
    return e && e->magic == EVENT_MAGIC ? e : NULL;
}

SIM_EXPORT CUresult CUDAAPI cuStreamWaitEvent(CUstream handle, CUevent event, unsigned int flags) {
    COUNT(cuStreamWaitEvent);
    REQUIRE_INIT();
    if (flags != 0) return CUDA_ERROR_INVALID_VALUE;
    pthread_mutex_lock(&lock);
    CUresult status;
    struct CUstream_st *s = resolve_stream(handle, &status);
    struct CUevent_st *e = valid_event(event);
    if (s && !e) status = CUDA_ERROR_INVALID_HANDLE;
    if (s && e) status = sticky_of(s->ctx);
    if (status == CUDA_SUCCESS && e->shared) {    /* its last record, in any process */
        uint64_t target = __atomic_load_n(&e->shared->recorded, __ATOMIC_ACQUIRE);
        if (!ipc_event_reached(e->shared, target)) {
            op *barrier = calloc(1, sizeof *barrier);
            if (!barrier) { pthread_mutex_unlock(&lock); return CUDA_ERROR_OUT_OF_MEMORY; }
            barrier->kind = OP_MARK;
            barrier->awaited = e->shared;
            barrier->awaited_at = target;
            ipc_page_ref(e->shared);
            enqueue(s, barrier);
        }
    } else if (status == CUDA_SUCCESS && e->stream) {   /* never recorded: nothing to wait for */
        op *barrier = calloc(1, sizeof *barrier);   /* may cross contexts and devices */
        barrier->kind = OP_MARK;
        barrier->deps[0].stream = e->stream;
        barrier->deps[0].seq = e->seq;
        barrier->ndeps = 1;
        enqueue(s, barrier);
    }
    pthread_mutex_unlock(&lock);
    return status;
}

SIM_EXPORT CUresult CUDAAPI cuEventCreate(CUevent *event, unsigned int flags) {
    COUNT(cuEventCreate);
    REQUIRE_INIT();
    if (!event) return CUDA_ERROR_INVALID_VALUE;
    /* "CU_EVENT_DISABLE_TIMING must be set" with CU_EVENT_INTERPROCESS (cuda.h) */
    if ((flags & CU_EVENT_INTERPROCESS) && !(flags & CU_EVENT_DISABLE_TIMING))
        return CUDA_ERROR_INVALID_VALUE;
    struct CUctx_st *ctx = current();
    if (!ctx) return CUDA_ERROR_INVALID_CONTEXT;
    CUresult broken = sticky_of(ctx);
    if (broken != CUDA_SUCCESS) return broken;
    struct CUevent_st *e = calloc(1, sizeof *e);
    if (!e) return CUDA_ERROR_OUT_OF_MEMORY;
    e->shared_fd = -1;
    if ((flags & CU_EVENT_INTERPROCESS) && !ipc_event_page(e)) {
        free(e);
        return CUDA_ERROR_OUT_OF_MEMORY;
    }
    e->magic = EVENT_MAGIC;
    e->ctx = ctx;
    pthread_mutex_lock(&lock);
    e->next = events;
    events = e;
    pthread_mutex_unlock(&lock);
    __atomic_add_fetch(&live_events, 1, __ATOMIC_RELAXED);
    *event = e;
    return CUDA_SUCCESS;
}

SIM_EXPORT CUresult CUDAAPI cuEventRecord(CUevent event, CUstream handle) {
    COUNT(cuEventRecord);
    REQUIRE_INIT();
    pthread_mutex_lock(&lock);
    CUresult status;
    struct CUstream_st *s = resolve_stream(handle, &status);
    struct CUevent_st *e = valid_event(event);
    if (s && (!e || e->ctx != s->ctx)) status = CUDA_ERROR_INVALID_HANDLE;   /* same context */
    if (status == CUDA_SUCCESS) status = sticky_of(s->ctx);
    if (status == CUDA_SUCCESS) {
        op *mark = calloc(1, sizeof *mark);
        mark->kind = OP_MARK;
        if (e->shared) {          /* counted where every process that opened it looks */
            mark->signal = e->shared;
            mark->signal_to = __atomic_add_fetch(&e->shared->recorded, 1, __ATOMIC_ACQ_REL);
            ipc_page_ref(e->shared);
        }
        enqueue(s, mark);
        e->stream = s;
        e->seq = mark->seq;
    }
    pthread_mutex_unlock(&lock);
    return status;
}

SIM_EXPORT CUresult CUDAAPI cuEventQuery(CUevent event) {
    COUNT(cuEventQuery);
    REQUIRE_INIT();
    pthread_mutex_lock(&lock);
    struct CUevent_st *e = valid_event(event);
    CUresult status = !e ? CUDA_ERROR_INVALID_HANDLE : sticky_of(e->ctx);
    if (status == CUDA_SUCCESS && (e->shared ? ipc_event_pending(e->shared)
                                             : e->stream && e->stream->done < e->seq))
        status = CUDA_ERROR_NOT_READY;
    pthread_mutex_unlock(&lock);
    return status;
}

SIM_EXPORT CUresult CUDAAPI cuEventSynchronize(CUevent event) {
    COUNT(cuEventSynchronize);
    REQUIRE_INIT();
    pthread_mutex_lock(&lock);
    struct CUevent_st *e = valid_event(event);
    if (e) COUNT(HOST_SYNCS);
    if (e && e->shared) {              /* its last record, made in any process */
        uint64_t target = __atomic_load_n(&e->shared->recorded, __ATOMIC_ACQUIRE);
        while (!ipc_event_reached(e->shared, target)) {
            pthread_mutex_unlock(&lock);
            usleep(100);
            pthread_mutex_lock(&lock);
        }
    } else if (e && e->stream) wait_for(e->stream, e->seq);
    CUresult status = !e ? CUDA_ERROR_INVALID_HANDLE : sticky_of(e->ctx);
    if (e && e->ctx) release_above_thresholds(e->ctx->device);
    pthread_mutex_unlock(&lock);
    return status;
}

SIM_EXPORT CUresult CUDAAPI cuEventDestroy(CUevent event) {
    COUNT(cuEventDestroy);
    REQUIRE_INIT();
    pthread_mutex_lock(&lock);
    struct CUevent_st *e = valid_event(event);
    CUresult status = e ? sticky_of(e->ctx) : CUDA_ERROR_INVALID_HANDLE;
    if (status == CUDA_SUCCESS) {
        e->magic = 0;        /* a record still pending completes on its own (documented) */
        struct CUevent_st **link = &events;
        while (*link != e) link = &(*link)->next;
        *link = e->next;
    }
    pthread_mutex_unlock(&lock);
    if (status != CUDA_SUCCESS) return status;
    __atomic_sub_fetch(&live_events, 1, __ATOMIC_RELAXED);
    pthread_mutex_lock(&lock);
    ipc_event_release(e);
    pthread_mutex_unlock(&lock);
    free(e);
    return CUDA_SUCCESS;
}

/* A destroyed context's memory (cuMemAlloc device memory, managed and pinned memory) is
 * freed, its streams stop (their queued work runs first), its events and modules go, and
 * peer access to it or from it ends; handles to all of them are invalid from then on
 * (CUDA_ERROR_INVALID_HANDLE). Its sticky error goes with it. Streams, events and modules stay
 * allocated, dead (never reused: a stale handle is never mistaken for a new object). Memory
 * pools' blocks stay: a pool is its device's, not a context's ("memory pool pointers do not
 * have a device context associated with them"; on a GPU a pool's memory outlives
 * cuDevicePrimaryCtxReset), so a block in use is still its owner's to free. */
static void reset_context(struct CUctx_st *ctx) {
    pthread_mutex_lock(&lock);
    for (struct CUevent_st **link = &events; *link;) {
        struct CUevent_st *e = *link;
        if (e->ctx != ctx) { link = &e->next; continue; }
        *link = e->next;
        e->magic = 0;                       /* a dead handle; its memory is never reused */
        ipc_event_release(e);
        __atomic_sub_fetch(&live_events, 1, __ATOMIC_RELAXED);
    }
    for (int d = 0; d < MAX_DEVICES; d++) {
        ctx->peers[d] = 0;
        primary[d].peers[ctx->device] = 0;
    }
    struct CUstream_st *gone = NULL;
    for (struct CUstream_st **link = &streams; *link;) {
        struct CUstream_st *s = *link;
        if (s->ctx != ctx) { link = &s->next; continue; }
        *link = s->next;
        s->stopping = 1;
        s->gone_next = gone;
        gone = s;
    }
    ctx->legacy = NULL;
    drop_modules(ctx);
    pthread_cond_broadcast(&progress);
    pthread_mutex_unlock(&lock);
    while (gone) {
        struct CUstream_st *s = gone;
        gone = s->gone_next;
        pthread_join(s->worker, NULL);
        pthread_mutex_lock(&lock);
        retire(s);
        pthread_mutex_unlock(&lock);
    }
    pthread_mutex_lock(&lock);
    for (allocation **link = &allocations; *link;) {
        allocation *a = *link;
        if (a->ctx != ctx || a->pooled) { link = &a->next; continue; }
        *link = a->next;
        bury(a);
    }
    for (chunk **link = &chunks; *link;) {   /* the chunks their pools' blocks lay in */
        chunk *c = *link;
        allocation *a = allocations;
        while (a && a->chunk != c) a = a->next;
        if (a) { link = &c->next; continue; }
        *link = c->next;
        free(c);
    }
    /* last: its streams' queued work, which ran above, may have faulted */
    __atomic_store_n(&ctx->sticky, CUDA_SUCCESS, __ATOMIC_RELEASE);
    pthread_mutex_unlock(&lock);
}


/* ---- stream-ordered allocation (the device's default memory pool) ---------------------------- */

static struct CUmemPoolHandle_st *device_pool(int device);

/* A block of `pool` (NULL: the default pool of the stream's device) for work on `handle`. */
static CUresult allocate_from_pool(CUdeviceptr *dptr, size_t bytesize,
                                   struct CUmemPoolHandle_st *pool, CUstream handle) {
    if (!dptr || bytesize == 0) return CUDA_ERROR_INVALID_VALUE;
    pthread_mutex_lock(&lock);
    CUresult status;
    struct CUstream_st *s = resolve_stream(handle, &status);
    if (s) status = sticky_of(s->ctx);
    if (status != CUDA_SUCCESS) {
        pthread_mutex_unlock(&lock);
        return status;
    }
    if (!pool) pool = device_pool(s->ctx->device);
    for (allocation **link = &idle_blocks; *link; link = &(*link)->idle_next) {
        allocation *a = *link;
        if (a->ctx != s->ctx || a->capacity < bytesize || a->pool != pool)
            continue;
        /* reusable in stream order by the stream that freed it; by others once it ran */
        if (a->pool_state == POOL_FREE || a->freed_on == s) {
            *link = a->idle_next;
            a->idle_next = NULL;
            a->pool_state = POOL_LIVE;
            a->size = bytesize;
            a->generation = ++generations;
            a->freed_on = NULL;
            ipc_pool_record(a);
            __atomic_add_fetch(&counters[COUNT_POOL_REUSES], 1, __ATOMIC_RELAXED);
            *dptr = a->base;
            pthread_mutex_unlock(&lock);
            return CUDA_SUCCESS;
        }
    }
    struct CUctx_st *ctx = s->ctx;
    pthread_mutex_unlock(&lock);
    uintptr_t address = 0;
    status = allocate_in(ctx, MEM_DEVICE, bytesize, pool, &address);
    if (status != CUDA_SUCCESS) return status;
    *dptr = address;
    return CUDA_SUCCESS;
}

SIM_EXPORT CUresult CUDAAPI cuMemAllocAsync(CUdeviceptr *dptr, size_t bytesize, CUstream handle) {
    COUNT(cuMemAllocAsync);
    REQUIRE_INIT();
    return allocate_from_pool(dptr, bytesize, NULL, handle);
}

SIM_EXPORT CUresult CUDAAPI cuMemFreeAsync(CUdeviceptr dptr, CUstream handle) {
    COUNT(cuMemFreeAsync);
    REQUIRE_INIT();
    pthread_mutex_lock(&lock);
    CUresult status;
    struct CUstream_st *s = resolve_stream(handle, &status);
    allocation *a = NULL;
    if (s) status = sticky_of(s->ctx);
    if (status != CUDA_SUCCESS) s = NULL;
    /* a live block of a pool of this process, or one imported from another's ("the pointer
     * may be freed with cuMemFree or cuMemFreeAsync": its import ends when the stream
     * reaches the free — see "interprocess pools") */
    for (allocation *x = allocations; s && x; x = x->next)
        if (x->base == dptr && (x->pooled || pool_import(x)) && x->pool_state == POOL_LIVE)
            a = x;
    op *o = a ? calloc(1, sizeof *o) : NULL;
    if (s && !a) status = CUDA_ERROR_INVALID_VALUE;   /* not a live pooled block */
    if (a && !o) status = CUDA_ERROR_OUT_OF_MEMORY;
    if (o) {
        a->pool_state = POOL_FREEING;
        if (a->pooled) block_idles(a);     /* an import is no block of a pool of this process */
        a->freed_on = s;
        o->kind = OP_FREE;
        o->freed = a->serial;
        o->generation = a->generation;
        enqueue(s, o);
    }
    pthread_mutex_unlock(&lock);
    return status;
}

/* Memory pools: each device's default pool (the one cuMemAllocAsync draws from) and pools
 * made with cuMemPoolCreate (cuMemAllocFromPoolAsync). A pool's blocks are reused by that pool
 * only; attributes callers set are kept and reported (reuse follows the stream-order rule above
 * whatever they say). A destroyed pool's free blocks go at once; its live blocks when freed. */
struct CUmemPoolHandle_st {
    int device; cuuint64_t release_threshold; int reuse[3];
    /* cuMemPoolSetAccess: which devices' kernels may touch its blocks — its own device always
     * (CU_MEM_ACCESS_FLAGS_PROT_READWRITE), a peer once granted it (PROT_NONE by default) */
    CUmemAccess_flags access[MAX_DEVICES];
    int created;                                  /* by cuMemPoolCreate (destroyable) */
    struct CUmemPoolHandle_st *next;              /* the created ones, listed */
    /* Interprocess pools (see "interprocess pools"): the handle types it was made with; its
     * memfd (this process's descriptor) and the record pages mapped from it; where its next
     * block goes in the memfd. An imported pool (cuMemPoolImportFromShareableHandle) makes
     * no blocks; it maps other process's blocks. */
    CUmemAllocationHandleType handle_types;
    int imported, ipc_fd;
    struct ipc_pool *ipc;
    size_t ipc_next;
    /* An imported pool destroyed while blocks imported from it were still imported: its
     * handle is gone, and it is released once the last of them is freed (cuMemPoolDestroy:
     * "released automatically once there are no more outstanding allocations"). */
    int destroyed;
};
static struct CUmemPoolHandle_st default_pools[MAX_DEVICES];
static struct CUmemPoolHandle_st *created_pools;

/* The bytes `pool` reserves: its chunks (caller holds the lock). */
static size_t pool_reserved(struct CUmemPoolHandle_st *pool) {
    size_t reserved = 0;
    for (chunk *c = chunks; c; c = c->next)
        if (c->pool == pool) reserved += c->size;
    return reserved;
}

/* Whether every block of chunk c is free, its free run (caller holds the lock). */
static int chunk_idle(const chunk *c) {
    for (allocation *a = allocations; a; a = a->next)
        if (a->chunk == c && a->pool_state != POOL_FREE) return 0;
    return 1;
}

/* Chunk c, idle and unlinked from `chunks`, back to the system with its blocks (caller
 * holds the lock): what touches them later touches freed memory. */
static void release_chunk(chunk *c) {
    for (allocation **link = &allocations; *link;) {
        allocation *a = *link;
        if (a->chunk != c) { link = &a->next; continue; }
        *link = a->next;
        if (a->pool_state != POOL_LIVE) block_leaves_idle(a);
        bury(a);
    }
    free(c);
    __atomic_add_fetch(&counters[COUNT_POOL_CHUNKS_RELEASED], 1, __ATOMIC_RELAXED);
}

/* The driver's rule for cuMemPoolTrimTo, at the pool's granularity: idle chunks go back
 * while the pool reserves more than `keep` bytes, never below `keep` (a chunk whose release
 * would go below stays) — or, `at_most` (the release threshold: memory held past it goes),
 * until it reserves `keep` or less; a chunk holding a block in use, or one whose
 * stream-ordered free has not run, stays whole (caller holds the lock). */
static void trim_pool(struct CUmemPoolHandle_st *pool, size_t keep, int at_most) {
    /* "IPC pools currently do not support releasing physical blocks back to the OS": a trim
     * of one is a no-op and its release threshold is ignored, until it is destroyed */
    if (pool->ipc) return;
    size_t reserved = pool_reserved(pool);
    for (chunk **link = &chunks; *link && reserved > keep;) {
        chunk *c = *link;
        if (c->pool != pool || (!at_most && reserved - c->size < keep) || !chunk_idle(c)) {
            link = &c->next;
            continue;
        }
        *link = c->next;
        reserved -= c->size;
        release_chunk(c);
    }
}

/* CU_MEMPOOL_ATTR_RELEASE_THRESHOLD: "When more than the release threshold bytes of memory
 * are held by the memory pool, the allocator will try to release memory back to the OS on
 * the next call to stream, event or context synchronize" — here, device `device`'s pools
 * give back idle chunks until they reserve their threshold or less, at those three calls
 * and not before (caller holds the lock). The default threshold is 0: an idle pool keeps
 * nothing past a synchronization. */
static void release_above_thresholds(int device) {
    if (device < 0 || device >= device_count) return;
    trim_pool(device_pool(device), (size_t)default_pools[device].release_threshold, 1);
    for (struct CUmemPoolHandle_st *p = created_pools; p; p = p->next)
        if (p->device == device) trim_pool(p, (size_t)p->release_threshold, 1);
}

/* A pooled block's free ran, or it was freed with cuMemFree: if its pool was destroyed
 * meanwhile, its chunk goes once idle (caller holds the lock). */
static void pooled_block_freed(allocation *a) {
    chunk *c = a->chunk;
    if (a->pool || !c || c->pool || !chunk_idle(c)) return;
    chunk **link = &chunks;
    while (*link != c) link = &(*link)->next;
    *link = c->next;
    release_chunk(c);
}

static struct CUmemPoolHandle_st *device_pool(int device) {
    default_pools[device].device = device;
    default_pools[device].access[device] = CU_MEM_ACCESS_FLAGS_PROT_READWRITE;
    return &default_pools[device];
}

static struct CUmemPoolHandle_st *valid_pool(CUmemoryPool pool) {
    for (int d = 0; d < device_count; d++)
        if (pool == &default_pools[d]) return pool;
    pthread_mutex_lock(&lock);
    struct CUmemPoolHandle_st *p = created_pools;
    while (p && p != pool) p = p->next;
    pthread_mutex_unlock(&lock);
    return p;
}

SIM_EXPORT CUresult CUDAAPI cuMemPoolCreate(CUmemoryPool *pool, const CUmemPoolProps *props) {
    COUNT(cuMemPoolCreate);
    REQUIRE_INIT();
    if (!pool || !props || props->allocType != CU_MEM_ALLOCATION_TYPE_PINNED ||
        props->location.type != CU_MEM_LOCATION_TYPE_DEVICE)
        return CUDA_ERROR_INVALID_VALUE;   /* device pools only: what arrayport makes */
    if (props->location.id < 0 || props->location.id >= device_count)
        return CUDA_ERROR_INVALID_DEVICE;
    if (props->handleTypes != CU_MEM_HANDLE_TYPE_NONE &&
        props->handleTypes != CU_MEM_HANDLE_TYPE_POSIX_FILE_DESCRIPTOR)
        return CUDA_ERROR_NOT_SUPPORTED;   /* see "interprocess pools" */
    struct CUmemPoolHandle_st *p = calloc(1, sizeof *p);
    if (!p) return CUDA_ERROR_OUT_OF_MEMORY;
    p->device = props->location.id;
    p->access[p->device] = CU_MEM_ACCESS_FLAGS_PROT_READWRITE;
    p->created = 1;
    p->ipc_fd = -1;
    p->handle_types = props->handleTypes;
    if (p->handle_types && !ipc_pool_create(p)) { free(p); return CUDA_ERROR_OUT_OF_MEMORY; }
    pthread_mutex_lock(&lock);
    p->next = created_pools;
    created_pools = p;
    pthread_mutex_unlock(&lock);
    *pool = p;
    return CUDA_SUCCESS;
}

SIM_EXPORT CUresult CUDAAPI cuMemPoolDestroy(CUmemoryPool pool) {
    COUNT(cuMemPoolDestroy);
    REQUIRE_INIT();
    pthread_mutex_lock(&lock);
    struct CUmemPoolHandle_st **link = &created_pools;
    while (*link && *link != pool) link = &(*link)->next;
    if (!*link) {
        pthread_mutex_unlock(&lock);
        return CUDA_ERROR_INVALID_VALUE;   /* a default pool, or none: not destroyable */
    }
    *link = pool->next;
    if (pool->imported) {                      /* blocks imported from it still imported:
                                                  it goes when the last of them is freed */
        for (allocation *x = allocations; x; x = x->next)
            if (x->import_pool == pool) {
                pool->destroyed = 1;
                pthread_mutex_unlock(&lock);
                return CUDA_SUCCESS;
            }
    }
    ipc_pool_close(pool);                      /* its importers told, its memfd closed */
    for (allocation *x = graveyard; x; x = x->next)
        if (x->import_pool == pool) x->import_pool = NULL;
    trim_pool(pool, 0, 1);                     /* idle chunks go with their pool */
    for (chunk *c = chunks; c; c = c->next)    /* the others when their blocks are freed */
        if (c->pool == pool) c->pool = NULL;
    for (allocation *x = allocations; x; x = x->next)
        if (x->pool == pool) x->pool = NULL;
    pthread_mutex_unlock(&lock);
    free(pool);
    return CUDA_SUCCESS;
}

SIM_EXPORT CUresult CUDAAPI cuDeviceGetDefaultMemPool(CUmemoryPool *pool, CUdevice dev) {
    COUNT(cuDeviceGetDefaultMemPool);
    REQUIRE_INIT();
    if (!pool) return CUDA_ERROR_INVALID_VALUE;
    if (dev < 0 || dev >= device_count) return CUDA_ERROR_INVALID_DEVICE;
    *pool = device_pool(dev);
    return CUDA_SUCCESS;
}

SIM_EXPORT CUresult CUDAAPI cuDeviceGetMemPool(CUmemoryPool *pool, CUdevice dev) {
    return cuDeviceGetDefaultMemPool(pool, dev);   /* no pool was ever set as current */
}

SIM_EXPORT CUresult CUDAAPI cuMemPoolSetAttribute(CUmemoryPool pool, CUmemPool_attribute attr,
                                                  void *value) {
    struct CUmemPoolHandle_st *p = valid_pool(pool);
    if (!p || !value) return p ? CUDA_ERROR_INVALID_VALUE : CUDA_ERROR_INVALID_HANDLE;
    switch (attr) {
    case CU_MEMPOOL_ATTR_RELEASE_THRESHOLD: p->release_threshold = *(cuuint64_t *)value; break;
    case CU_MEMPOOL_ATTR_REUSE_FOLLOW_EVENT_DEPENDENCIES:
    case CU_MEMPOOL_ATTR_REUSE_ALLOW_OPPORTUNISTIC:
    case CU_MEMPOOL_ATTR_REUSE_ALLOW_INTERNAL_DEPENDENCIES:
        p->reuse[attr - CU_MEMPOOL_ATTR_REUSE_FOLLOW_EVENT_DEPENDENCIES] = *(int *)value; break;
    default: return CUDA_ERROR_INVALID_VALUE;   /* the others are read-only or reset-only */
    }
    return CUDA_SUCCESS;
}

SIM_EXPORT CUresult CUDAAPI cuMemPoolGetAttribute(CUmemoryPool pool, CUmemPool_attribute attr,
                                                  void *value) {
    struct CUmemPoolHandle_st *p = valid_pool(pool);
    if (!p || !value) return p ? CUDA_ERROR_INVALID_VALUE : CUDA_ERROR_INVALID_HANDLE;
    cuuint64_t used = 0;
    switch (attr) {
    case CU_MEMPOOL_ATTR_RELEASE_THRESHOLD: *(cuuint64_t *)value = p->release_threshold; break;
    case CU_MEMPOOL_ATTR_REUSE_FOLLOW_EVENT_DEPENDENCIES:
    case CU_MEMPOOL_ATTR_REUSE_ALLOW_OPPORTUNISTIC:
    case CU_MEMPOOL_ATTR_REUSE_ALLOW_INTERNAL_DEPENDENCIES:
        *(int *)value = p->reuse[attr - CU_MEMPOOL_ATTR_REUSE_FOLLOW_EVENT_DEPENDENCIES]; break;
    default:   /* the memory figures: what the pool holds (reserved: whole chunks) or hands
                  out (used: the blocks in use) */
        pthread_mutex_lock(&lock);
        if (attr == CU_MEMPOOL_ATTR_RESERVED_MEM_CURRENT ||
            attr == CU_MEMPOOL_ATTR_RESERVED_MEM_HIGH)
            used = pool_reserved(p);
        else
            for (allocation *a = allocations; a; a = a->next)
                if (a->pooled && a->pool == p && a->pool_state == POOL_LIVE) used += a->capacity;
        pthread_mutex_unlock(&lock);
        *(cuuint64_t *)value = used;
    }
    return CUDA_SUCCESS;
}

/* At the pool's granularity: see trim_pool. */
SIM_EXPORT CUresult CUDAAPI cuMemPoolTrimTo(CUmemoryPool pool, size_t keep) {
    COUNT(cuMemPoolTrimTo);
    REQUIRE_INIT();
    struct CUmemPoolHandle_st *p = valid_pool(pool);
    if (!p) return CUDA_ERROR_INVALID_HANDLE;
    pthread_mutex_lock(&lock);
    trim_pool(p, keep, 0);
    pthread_mutex_unlock(&lock);
    return CUDA_SUCCESS;
}

/* Which devices' kernels may touch a pool's blocks (existing and future ones), recorded per
 * pool and device and acted on: a kernel of another device touching a block faults unless
 * the pool granted that device access (see kernel_may_touch). Each descriptor names a
 * device; its flags are PROT_READWRITE or PROT_NONE for a pool of this process (its own
 * device keeps its access); an imported pool's (see "interprocess pools") may also be
 * PROT_READ, for any device, its own included. A peer that cuDeviceCanAccessPeer says
 * cannot read the pool's device is refused. Nothing is changed unless every descriptor is
 * valid. */
SIM_EXPORT CUresult CUDAAPI cuMemPoolSetAccess(CUmemoryPool pool, const CUmemAccessDesc *map,
                                               size_t count) {
    COUNT(cuMemPoolSetAccess);
    REQUIRE_INIT();
    struct CUmemPoolHandle_st *p = valid_pool(pool);
    if (!p) return CUDA_ERROR_INVALID_HANDLE;
    if (count && !map) return CUDA_ERROR_INVALID_VALUE;
    for (size_t i = 0; i < count; i++) {
        const CUmemAccessDesc *d = &map[i];
        if (d->location.type != CU_MEM_LOCATION_TYPE_DEVICE || d->location.id < 0 ||
            d->location.id >= device_count)
            return CUDA_ERROR_INVALID_VALUE;
        if (d->flags != CU_MEM_ACCESS_FLAGS_PROT_READWRITE &&
            d->flags != CU_MEM_ACCESS_FLAGS_PROT_NONE &&
            !(p->imported && d->flags == CU_MEM_ACCESS_FLAGS_PROT_READ))
            return CUDA_ERROR_INVALID_VALUE;
        if (d->location.id == p->device && d->flags != CU_MEM_ACCESS_FLAGS_PROT_READWRITE &&
            !p->imported)
            return CUDA_ERROR_INVALID_VALUE;
        if (d->location.id != p->device && d->flags != CU_MEM_ACCESS_FLAGS_PROT_NONE &&
            !peer_access_possible)
            return CUDA_ERROR_INVALID_VALUE;
    }
    pthread_mutex_lock(&lock);
    for (size_t i = 0; i < count; i++) p->access[map[i].location.id] = map[i].flags;
    if (p->imported)                   /* its blocks mapped here: as widely as now granted */
        for (allocation *a = allocations; a; a = a->next)
            if (a->import_pool == p) mprotect(a->bytes, a->pool_mapped, import_protection(p));
    pthread_mutex_unlock(&lock);
    return CUDA_SUCCESS;
}

SIM_EXPORT CUresult CUDAAPI cuMemPoolGetAccess(CUmemAccess_flags *flags, CUmemoryPool pool,
                                               CUmemLocation *location) {
    COUNT(cuMemPoolGetAccess);
    REQUIRE_INIT();
    struct CUmemPoolHandle_st *p = valid_pool(pool);
    if (!p || !flags || !location || location->type != CU_MEM_LOCATION_TYPE_DEVICE ||
        location->id < 0 || location->id >= device_count)
        return CUDA_ERROR_INVALID_VALUE;
    pthread_mutex_lock(&lock);
    *flags = p->access[location->id];
    pthread_mutex_unlock(&lock);
    return CUDA_SUCCESS;
}

SIM_EXPORT CUresult CUDAAPI cuMemAllocFromPoolAsync(CUdeviceptr *dptr, size_t bytesize,
                                                    CUmemoryPool pool, CUstream handle) {
    COUNT(cuMemAllocFromPoolAsync);
    REQUIRE_INIT();
    struct CUmemPoolHandle_st *p = valid_pool(pool);
    if (!p || p->imported) return CUDA_ERROR_INVALID_VALUE;   /* an import makes no blocks */
    return allocate_from_pool(dptr, bytesize, p, handle);
}

SIM_EXPORT CUresult CUDAAPI cuStreamIsCapturing(CUstream handle, CUstreamCaptureStatus *status) {
    REQUIRE_INIT();
    if (!status) return CUDA_ERROR_INVALID_VALUE;
    pthread_mutex_lock(&lock);
    CUresult result;
    struct CUstream_st *s = resolve_stream(handle, &result);
    if (s) result = sticky_of(s->ctx);
    pthread_mutex_unlock(&lock);
    if (s && result == CUDA_SUCCESS) *status = CU_STREAM_CAPTURE_STATUS_NONE;   /* graphs are not modelled: never */
    return result;
}

/* The worker ran a free: the block is the pool's for any stream (caller holds the lock). */
static void pool_free_done(const op *o) {
    allocation *a = by_serial(o->freed);
    if (!a) return;
    if (pool_import(a)) {              /* another process's block: its import ends here */
        free_import(a);
        return;
    }
    /* from now on, work that names this generation of the block touches freed memory */
    if (a->freed_through < o->generation) a->freed_through = o->generation;
    if (a->generation == o->generation && a->pool_state == POOL_FREEING) {
        a->pool_state = POOL_FREE;
        ipc_pool_record(a);
        pooled_block_freed(a);
    }
}

/* ---- modules and kernels -------------------------------------------------------------------- */

/* A module is PTX text (what arrayport ships; cubins and fatbins are not read here). Loading
 * keeps the driver's rules that a caller can get wrong: a module belongs to the context
 * current at load, its functions launch only there, a PTX ISA newer than the driver's is
 * refused, and an entry's parameter space has the size its PTX declares. What runs at launch
 * is the kernel's C build, compiled into this library from the same source
 * (src/arrayport/gpu/kernels/dialect.h); a function without one loads and is found, but its
 * launch answers CUDA_ERROR_NOT_SUPPORTED: the simulator does not interpret PTX. */

enum { MODULE_MAGIC = 0x4d4f444c, FUNCTION_MAGIC = 0x46554e43 };
#define MAX_ENTRY_NAME 128
#define MAX_STATIC_SHARED ((size_t)48 << 10)   /* per block, without the opt-in attribute */
#define SIMULATED_PTX_ISA 88                    /* PTX ISA 8.8: what CUDA 12.9 reads */

struct kernel_impl {
    const char *name;
    size_t param_size;
    void (*run)(const void *params);
    struct kernel_impl *next;
};
static kernel_impl *kernel_impls;

struct CUfunc_st {
    int magic;
    struct CUmod_st *module;
    char name[MAX_ENTRY_NAME];
    size_t param_size, static_shared;
    const kernel_impl *impl;
    struct CUfunc_st *next;
};

struct CUmod_st {
    int magic;
    struct CUctx_st *ctx;
    struct CUfunc_st *functions;
    struct CUmod_st *next;
};
static struct CUmod_st *modules;

/* Called by the kernels' C builds as the library loads (their constructors). */
SIM_CONTROL void cudasim_register_kernel(const char *name, size_t param_size,
                                        void (*run)(const void *)) {
    kernel_impl *k = calloc(1, sizeof *k);
    if (!k) return;
    k->name = name;
    k->param_size = param_size;
    k->run = run;
    k->next = kernel_impls;
    kernel_impls = k;
}

/* The thread-local state of a kernel running on a stream's worker (dialect.h names it). */
__thread struct { unsigned x, y, z; } threadIdx, blockIdx, blockDim, gridDim;
static __thread struct CUctx_st *running_ctx;
static __thread uintptr_t fault_address;
static __thread int faulted;
static __thread CUresult fault_status;
static __thread const char *fault_kind, *fault_reason;
static __thread unsigned char fault_sink[64] __attribute__((aligned(16)));
/* The allocations the running kernel has touched: kept from poisoning until it ends (a free
 * while it runs takes effect for what it touches afterwards). */
static __thread allocation **kernel_touched;
static __thread size_t kernel_touched_n, kernel_touched_cap;

/* The running kernel faults at `address`: the first fault is the launch's (its error becomes
 * the context's sticky error when the launch ends); the rest of the block runs harmlessly on
 * fault_sink, and the launch stops there. */
static void *kernel_fault(uintptr_t address, CUresult status, const char *kind,
                          const char *reason) {
    if (!faulted) {
        fault_address = address;
        fault_status = status;
        fault_kind = kind;
        fault_reason = reason;
    }
    faulted = 1;
    return fault_sink;
}

/* Whether the running kernel may touch allocation `a` (caller holds the lock): memory of its
 * own device, pinned or managed memory; another device's memory only through peer access —
 * a pool's block where the pool granted the kernel's device access (cuMemPoolSetAccess;
 * pools do not follow cuCtxEnablePeerAccess), other device memory (cuMemAlloc) where the
 * kernel's context enabled access to the memory's context (cuCtxEnablePeerAccess). A block
 * of a destroyed pool is its own device's only. */
static int kernel_may_touch(const allocation *a) {
    if (a->imported && a->pool_mapped) return import_allows(a, running_ctx->device, 0);
    if (a->kind != MEM_DEVICE || a->device == running_ctx->device) return 1;
    if (a->imported) return a->ctx == running_ctx;   /* opened with lazy peer access */
    if (a->pooled)
        return a->pool && a->pool->access[running_ctx->device] == CU_MEM_ACCESS_FLAGS_PROT_READWRITE;
    return running_ctx->peers[a->device];
}

/* The host bytes of one load or store of `size` bytes at `address` by a running kernel
 * (dialect.h's AP_GLOBAL_BYTES): device memory of its own device (or of a peer it was given
 * access to), pinned or managed memory. Anything else — pageable host memory, another
 * device's memory without peer access, freed memory, past an allocation's end — is the GPU's
 * illegal address. And a GPU moves a 2-, 4-, 8- or 16-byte unit (a short, an int, a uint2 or
 * double, a uint4) in one access that must be aligned to its size: at any other address the
 * access faults with CUDA_ERROR_MISALIGNED_ADDRESS (counted: misaligned_accesses). Either
 * fault stops the launch, and is sticky for its context. */
SIM_CONTROL void *cudasim_device_bytes(uint64_t address, size_t size) {
    if (faulted) return fault_sink;
    if (size > 1 && size <= 16 && !(size & (size - 1)) && address % size) {
        __atomic_add_fetch(&counters[COUNT_MISALIGNED], 1, __ATOMIC_RELAXED);
        return kernel_fault((uintptr_t)address, CUDA_ERROR_MISALIGNED_ADDRESS,
                            "misaligned address", size == 16 ? " (a 16-byte access)"
                            : size == 8 ? " (an 8-byte access)" : size == 4
                            ? " (a 4-byte access)" : " (a 2-byte access)");
    }
    pthread_mutex_lock(&lock);
    allocation *a = find((uintptr_t)address, size);
    int peer = a && !kernel_may_touch(a);
    if (peer) a = NULL;
    size_t i = 0;
    while (a && i < kernel_touched_n && kernel_touched[i] != a) i++;
    if (a && i == kernel_touched_n) {
        if (kernel_touched_n == kernel_touched_cap) {
            size_t cap = kernel_touched_cap ? 2 * kernel_touched_cap : 8;
            allocation **grown = realloc(kernel_touched, cap * sizeof *grown);
            if (grown) kernel_touched = grown, kernel_touched_cap = cap;
        }
        if (kernel_touched_n < kernel_touched_cap) {
            kernel_touched[kernel_touched_n++] = a;
            a->busy++;
        } else a = NULL;
    }
    int exporter_freed = a && ipc_freed(a);
    void *bytes = a && !exporter_freed ? a->bytes + ((uintptr_t)address - a->base) : NULL;
    int freed = exporter_freed || (!bytes && !peer && freed_at((uintptr_t)address, size));
    pthread_mutex_unlock(&lock);
    if (bytes) return bytes;
    if (freed) __atomic_add_fetch(&counters[COUNT_FREED_ACCESSES], 1, __ATOMIC_RELAXED);
    if (peer) __atomic_add_fetch(&counters[COUNT_PEER_FAULTS], 1, __ATOMIC_RELAXED);
    return kernel_fault((uintptr_t)address, CUDA_ERROR_ILLEGAL_ADDRESS, "illegal address",
                        peer ? " (another device's memory, no peer access)"
                        : freed ? " (freed memory)" : "");
}

static void run_kernel(const op *o) {
    running_ctx = o->ctx;
    faulted = 0;
    blockDim.x = o->block[0], blockDim.y = o->block[1], blockDim.z = o->block[2];
    gridDim.x = o->grid[0], gridDim.y = o->grid[1], gridDim.z = o->grid[2];
    for (blockIdx.z = 0; blockIdx.z < gridDim.z && !faulted; blockIdx.z++)
        for (blockIdx.y = 0; blockIdx.y < gridDim.y && !faulted; blockIdx.y++)
            for (blockIdx.x = 0; blockIdx.x < gridDim.x && !faulted; blockIdx.x++)
                o->kernel->run(o->params);
    pthread_mutex_lock(&lock);
    for (size_t i = 0; i < kernel_touched_n; i++) unpin(kernel_touched[i]);
    kernel_touched_n = 0;
    if (faulted) set_sticky(o->ctx, fault_status);
    pthread_mutex_unlock(&lock);
    if (!faulted) return;
    __atomic_add_fetch(&counters[COUNT_KERNEL_FAULTS], 1, __ATOMIC_RELAXED);
    fprintf(stderr, "cudasim: kernel %s: %s %#lx%s\n", o->kernel->name, fault_kind,
            (unsigned long)fault_address, fault_reason);
}

/* The size of one `.param` declaration of an entry (`.param .align 8 .b8 name[1056]`,
 * `.param .u64 name`), or 0 when the text is not one. */
static size_t param_bytes(const char *text) {
    const char *bracket = strchr(text, '['), *end = strpbrk(text, ",)\n");
    if (bracket && (!end || bracket < end)) return (size_t)strtoul(bracket + 1, NULL, 10);
    static const struct { const char *type; size_t size; } widths[] = {
        {".u64", 8}, {".s64", 8}, {".b64", 8}, {".f64", 8}, {".u32", 4}, {".s32", 4},
        {".b32", 4}, {".f32", 4}, {".u16", 2}, {".s16", 2}, {".b16", 2}, {".u8", 1},
        {".s8", 1}, {".b8", 1}};
    for (size_t i = 0; i < sizeof widths / sizeof widths[0]; i++) {
        const char *at = strstr(text, widths[i].type);
        if (at && (!end || at < end)) return widths[i].size;
    }
    return 0;
}

/* A module that was never handed out (its load failed). */
static void free_module(struct CUmod_st *m) {
    while (m->functions) {
        struct CUfunc_st *f = m->functions;
        m->functions = f->next;
        free(f);
    }
    free(m);
}

/* Modules unloaded, or gone with their context: dead, their functions too, and kept (never
 * freed, never reused), so that a stale handle is recognised as one — never mistaken for a
 * new module's that took its memory. */
static struct CUmod_st *dead_modules;

/* Module m, unlinked from `modules`, dead from now on (caller holds the lock). */
static void bury_module(struct CUmod_st *m) {
    for (struct CUfunc_st *f = m->functions; f; f = f->next) f->magic = 0;
    m->magic = 0;
    m->next = dead_modules;
    dead_modules = m;
}

/* Whether a handle names a function of a dead module (caller holds the lock). */
static int dead_function(CUfunction handle) {
    for (struct CUmod_st *m = dead_modules; m; m = m->next)
        for (struct CUfunc_st *f = m->functions; f; f = f->next)
            if (f == handle) return 1;
    return 0;
}

/* A destroyed context's modules go with it (caller holds the lock). */
static void drop_modules(struct CUctx_st *ctx) {
    for (struct CUmod_st **link = &modules; *link;) {
        struct CUmod_st *m = *link;
        if (m->ctx != ctx) { link = &m->next; continue; }
        *link = m->next;
        bury_module(m);
    }
}

/* Parse the entries of PTX text into m's functions; a CUDA error for what the driver refuses. */
static CUresult parse_ptx(struct CUmod_st *m, const char *ptx) {
    const char *version = strstr(ptx, ".version "), *target = strstr(ptx, ".target ");
    if (!version || !target) return CUDA_ERROR_INVALID_IMAGE;
    int major = 0, minor = 0;
    if (sscanf(version + 9, "%d.%d", &major, &minor) != 2) return CUDA_ERROR_INVALID_PTX;
    if (major * 10 + minor > SIMULATED_PTX_ISA) return CUDA_ERROR_UNSUPPORTED_PTX_VERSION;
    for (const char *at = strstr(ptx, ".entry "); at; at = strstr(at + 1, ".entry ")) {
        struct CUfunc_st *f = calloc(1, sizeof *f);
        if (!f) return CUDA_ERROR_OUT_OF_MEMORY;
        f->magic = FUNCTION_MAGIC;
        f->module = m;
        f->next = m->functions;
        m->functions = f;
        size_t n = strcspn(at + 7, "( \t\n");
        if (n == 0 || n >= MAX_ENTRY_NAME) return CUDA_ERROR_INVALID_PTX;
        memcpy(f->name, at + 7, n);
        const char *next = strstr(at + 1, ".entry "), *close = strchr(at, ')');
        if (!close) return CUDA_ERROR_INVALID_PTX;
        for (const char *p = strstr(at, ".param "); p && p < close; p = strstr(p + 1, ".param "))
            f->param_size += param_bytes(p);
        for (const char *p = strstr(close, ".shared "); p && (!next || p < next);
             p = strstr(p + 1, ".shared "))
            f->static_shared += param_bytes(p);
        for (const kernel_impl *k = kernel_impls; k; k = k->next)
            if (!strcmp(k->name, f->name)) f->impl = k;
        if (f->impl && f->impl->param_size != f->param_size) {
            /* the C build and the PTX disagree on the parameter struct: a kernel defect */
            fprintf(stderr, "cudasim: %s: the PTX's parameters are %zu bytes, its C build's %zu\n",
                    f->name, f->param_size, f->impl->param_size);
            return CUDA_ERROR_INVALID_IMAGE;
        }
    }
    return CUDA_SUCCESS;
}

SIM_EXPORT CUresult CUDAAPI cuModuleLoadData(CUmodule *module, const void *image) {
    COUNT(cuModuleLoadData);
    REQUIRE_INIT();
    if (!module || !image) return CUDA_ERROR_INVALID_VALUE;
    struct CUctx_st *ctx = current();
    if (!ctx) return CUDA_ERROR_INVALID_CONTEXT;
    CUresult broken = sticky_of(ctx);
    if (broken != CUDA_SUCCESS) return broken;
    struct CUmod_st *m = calloc(1, sizeof *m);
    if (!m) return CUDA_ERROR_OUT_OF_MEMORY;
    m->magic = MODULE_MAGIC;
    m->ctx = ctx;
    CUresult status = parse_ptx(m, image);
    if (status != CUDA_SUCCESS) {
        free_module(m);
        return status;
    }
    pthread_mutex_lock(&lock);
    m->next = modules;
    modules = m;
    pthread_mutex_unlock(&lock);
    *module = m;
    return CUDA_SUCCESS;
}

/* The live module a handle names, or NULL (caller holds the lock). */
static struct CUmod_st *valid_module(CUmodule handle) {
    for (struct CUmod_st *m = modules; m; m = m->next)
        if (m == handle && m->magic == MODULE_MAGIC) return m;
    return NULL;
}

SIM_EXPORT CUresult CUDAAPI cuModuleUnload(CUmodule handle) {
    COUNT(cuModuleUnload);
    REQUIRE_INIT();
    pthread_mutex_lock(&lock);
    struct CUmod_st *m = valid_module(handle);
    CUresult status = m ? sticky_of(m->ctx) : CUDA_ERROR_INVALID_HANDLE;
    if (status == CUDA_SUCCESS) {
        struct CUmod_st **link = &modules;
        while (*link != m) link = &(*link)->next;
        *link = m->next;
        /* a launch still queued keeps running: it holds its kernel and parameters */
        bury_module(m);
    }
    pthread_mutex_unlock(&lock);
    return status;
}

SIM_EXPORT CUresult CUDAAPI cuModuleGetFunction(CUfunction *function, CUmodule handle,
                                                const char *name) {
    COUNT(cuModuleGetFunction);
    REQUIRE_INIT();
    if (!function || !name) return CUDA_ERROR_INVALID_VALUE;
    pthread_mutex_lock(&lock);
    struct CUmod_st *m = valid_module(handle);
    CUresult broken = m ? sticky_of(m->ctx) : CUDA_SUCCESS;
    struct CUfunc_st *found = NULL;
    for (struct CUfunc_st *f = m ? m->functions : NULL; f; f = f->next)
        if (!strcmp(f->name, name)) found = f;
    pthread_mutex_unlock(&lock);
    if (!m) return CUDA_ERROR_INVALID_HANDLE;
    if (broken != CUDA_SUCCESS) return broken;
    if (!found) return CUDA_ERROR_NOT_FOUND;
    *function = found;
    return CUDA_SUCCESS;
}

/* The function a handle names, in a live module, or NULL (caller holds the lock). */
static struct CUfunc_st *valid_function(CUfunction handle) {
    for (struct CUmod_st *m = modules; m; m = m->next)
        for (struct CUfunc_st *f = m->functions; f; f = f->next)
            if (f == handle && f->magic == FUNCTION_MAGIC) return f;
    return NULL;
}

SIM_EXPORT CUresult CUDAAPI cuLaunchKernel(CUfunction function, unsigned gx, unsigned gy,
                                           unsigned gz, unsigned bx, unsigned by, unsigned bz,
                                           unsigned shared, CUstream handle, void **params,
                                           void **extra) {
    COUNT(cuLaunchKernel);
    REQUIRE_INIT();
    /* The limits every GPU arrayport supports has (compute capability 6.0 and later). */
    if (!gx || !gy || !gz || !bx || !by || !bz || gx > 2147483647u || gy > 65535 ||
        gz > 65535 || bx > 1024 || by > 1024 || bz > 64 ||
        (unsigned long)bx * by * bz > 1024)
        return CUDA_ERROR_INVALID_VALUE;
    if (params && extra) return CUDA_ERROR_INVALID_VALUE;
    pthread_mutex_lock(&lock);
    CUresult status;
    struct CUfunc_st *f = valid_function(function);
    struct CUstream_st *s = f ? resolve_stream(handle, &status) : NULL;
    if (!f) status = CUDA_ERROR_INVALID_HANDLE;
    if (!f && dead_function(function))   /* unloaded, or gone with its context: never run */
        __atomic_add_fetch(&counters[COUNT_DEAD_LAUNCHES], 1, __ATOMIC_RELAXED);
    if (s) status = sticky_of(s->ctx);
    if (!s || status != CUDA_SUCCESS) { /* refused above */ }
    else if (s->ctx != f->module->ctx) status = CUDA_ERROR_INVALID_CONTEXT;
    else if (s && f->static_shared + shared > MAX_STATIC_SHARED)
        status = CUDA_ERROR_INVALID_VALUE;
    else if (s && f->param_size && !params) status = CUDA_ERROR_INVALID_VALUE;
    else if (s && !f->impl) status = CUDA_ERROR_NOT_SUPPORTED;   /* no C build to run */
    if (status != CUDA_SUCCESS || !s) {
        pthread_mutex_unlock(&lock);
        return status;
    }
    /* The parameters are captured now, as the driver does: the caller may reuse them. */
    op *o = calloc(1, sizeof *o);
    unsigned char *copy = malloc(f->param_size ? f->param_size : 1);
    if (!o || !copy) {
        free(o);
        free(copy);
        pthread_mutex_unlock(&lock);
        return CUDA_ERROR_OUT_OF_MEMORY;
    }
    if (f->param_size) memcpy(copy, params[0], f->param_size);
    o->kind = OP_KERNEL;
    o->kernel = f->impl;
    o->params = copy;
    o->ctx = s->ctx;
    o->grid[0] = gx, o->grid[1] = gy, o->grid[2] = gz;
    o->block[0] = bx, o->block[1] = by, o->block[2] = bz;
    enqueue(s, o);
    pthread_mutex_unlock(&lock);
    return CUDA_SUCCESS;
}

/* Modules not unloaded so far. */
SIM_CONTROL long cudasim_live_modules(void) {
    long n = 0;
    pthread_mutex_lock(&lock);
    for (struct CUmod_st *m = modules; m; m = m->next) n++;
    pthread_mutex_unlock(&lock);
    return n;
}

/* ---- errors --------------------------------------------------------------------------------- */

SIM_EXPORT CUresult CUDAAPI cuGetErrorName(CUresult error, const char **name) {
    if (!name) return CUDA_ERROR_INVALID_VALUE;
    switch (error) {
#define NAME(e) case e: *name = #e; return CUDA_SUCCESS;
    NAME(CUDA_SUCCESS) NAME(CUDA_ERROR_INVALID_VALUE) NAME(CUDA_ERROR_OUT_OF_MEMORY)
    NAME(CUDA_ERROR_NOT_INITIALIZED) NAME(CUDA_ERROR_INVALID_DEVICE)
    NAME(CUDA_ERROR_INVALID_CONTEXT) NAME(CUDA_ERROR_INVALID_HANDLE)
    NAME(CUDA_ERROR_NOT_READY) NAME(CUDA_ERROR_NOT_SUPPORTED) NAME(CUDA_ERROR_NOT_FOUND)
    NAME(CUDA_ERROR_ILLEGAL_ADDRESS) NAME(CUDA_ERROR_MISALIGNED_ADDRESS)
    NAME(CUDA_ERROR_PEER_ACCESS_UNSUPPORTED) NAME(CUDA_ERROR_PEER_ACCESS_ALREADY_ENABLED)
    NAME(CUDA_ERROR_PEER_ACCESS_NOT_ENABLED) NAME(CUDA_ERROR_INVALID_IMAGE)
    NAME(CUDA_ERROR_INVALID_PTX) NAME(CUDA_ERROR_UNSUPPORTED_PTX_VERSION)
#undef NAME
    default: *name = NULL; return CUDA_ERROR_INVALID_VALUE;
    }
}

SIM_EXPORT CUresult CUDAAPI cuGetErrorString(CUresult error, const char **text) {
    return cuGetErrorName(error, text);
}

/* ---- cuGetProcAddress: how NVIDIA's libraries find every entry point --------------------- */

/* Each entry point by its base name, with the CUDA version that introduced the ABI variant
 * exported here (the header's macros pick the variant: cuMemAlloc is cuMemAlloc_v2, from
 * 3.2). A request names a base name and the CUDA version the caller was built for; the
 * driver answers with the newest variant not newer than that version. */

/* ---- interprocess ------------------------------------------------------------------------------
 *
 * CUDA IPC as the driver documents it, between processes that each load this library:
 *   - cuIpcGetMemHandle takes the base of a cuMemAlloc allocation (anything else, a pool's
 *     block included, is CUDA_ERROR_INVALID_VALUE). Its bytes move, once, into a memfd after a
 *     header page; the handle names the exporter's process and descriptor, the allocation's
 *     serial and a random nonce the header repeats (a forged or stale handle opens nothing:
 *     CUDA_ERROR_INVALID_HANDLE). Another process opens it through /proc/<pid>/fd, so only
 *     while the exporter lives, and only a process allowed to read the exporter's descriptors
 *     (the same user), as a memfd segment of arrayport's host sharing is opened.
 *   - cuIpcOpenMemHandle needs CU_IPC_MEM_LAZY_ENABLE_PEER_ACCESS ("must be specified"), a
 *     current context, and another process: a process opening its own handle gets
 *     CUDA_ERROR_INVALID_CONTEXT, as on a GPU. Another device's memory opens with peer
 *     access enabled for the opening context (the flag's "as needed"), or
 *     CUDA_ERROR_PEER_ACCESS_UNSUPPORTED where the devices cannot reach each other. Opened again in the same context, the same
 *     pointer and one more reference; cuIpcCloseMemHandle drops one, and unmaps at the last.
 *     cuMemFree of an opened pointer is CUDA_ERROR_INVALID_VALUE (it is not an allocation).
 *   - the exporter freeing the memory while another process has it open is "undefined
 *     behavior": here the header says freed, and any copy or kernel of the importer that
 *     touches it faults as freed memory does (sticky CUDA_ERROR_ILLEGAL_ADDRESS; counted:
 *     freed_memory_accesses), and the handle opens no more.
 *   - events made with CU_EVENT_INTERPROCESS (only with CU_EVENT_DISABLE_TIMING) keep their
 *     records in a shared page: cuEventRecord, in either process, counts a record, and its
 *     mark marks that record done when it runs; cuStreamWaitEvent waits, on the GPU's side
 *     (a worker polling the page), for the last record made before it — that record, not an
 *     earlier one and not a later one of another stream; cuEventQuery and
 *     cuEventSynchronize look at the last record the same way. A wait on an event its exporter destroyed,
 *     or whose exporter died, ends (undefined on a GPU; here no hang). Memory whose exporter
 *     died is freed memory to the importer's work. cuIpcGetEventHandle of any other event
 *     is CUDA_ERROR_INVALID_VALUE.
 * The memory and events of another process are the exporter's: they do not count against
 * this process's device memory, and each open is reported at exit until it is closed.
 * Whether another process is still there is asked of process_ended: the driver knows its
 * processes exactly, so a process is recorded where others look (an exporter in its shared
 * pages, an importer in a pool block's record) as its pid and its start, and a later
 * process the kernel gave a dead one's pid is not taken for it (a process found running is
 * looked at again after 10 ms at most). */

#define IPC_MEM_MAGIC "cudasimM"
#define IPC_EVENT_MAGIC "cudasimE"

typedef struct {                        /* what a CUipcMemHandle / CUipcEventHandle holds */
    char magic[8];
    int32_t pid, fd;
    uint64_t nonce[2], serial, size;
    int32_t device;
} ipc_wire;
_Static_assert(sizeof(ipc_wire) <= CU_IPC_HANDLE_SIZE, "an IPC handle is 64 bytes");

static size_t page_size(void) { return (size_t)sysconf(_SC_PAGESIZE); }

/* Process `pid`'s start, in clock ticks since boot (field 22 of /proc/<pid>/stat; 0: not
 * readable, where the pid alone decides), and in *gone whether it has ended: no such
 * process, or a zombie (ended, not yet waited for: it holds nothing). */
static uint64_t process_start(int32_t pid, int *gone) {
    char path[48], line[1024];
    snprintf(path, sizeof path, "/proc/%d/stat", (int)pid);
    int fd = open(path, O_RDONLY | O_CLOEXEC);
    ssize_t n = fd < 0 ? -1 : read(fd, line, sizeof line - 1);
    if (fd >= 0) close(fd);
    *gone = 0;
    if (n <= 0) {   /* not readable (hidepid may hide a live one): its pid alone decides */
        *gone = kill(pid, 0) != 0 && errno == ESRCH;
        return 0;
    }
    line[n] = '\0';
    /* "pid (name) state ppid ...": the name may hold spaces and parentheses */
    const char *after = strrchr(line, ')');
    char state = 0;
    unsigned long long start = 0;
    /* field 3 (state), fields 4-21 skipped as words, field 22 (starttime) */
    if (!after || sscanf(after + 1, " %c %*s %*s %*s %*s %*s %*s %*s %*s %*s %*s %*s %*s %*s "
                                    "%*s %*s %*s %*s %*s %llu", &state, &start) != 2)
        return 0;
    *gone = state == 'Z' || state == 'X';
    return (uint64_t)start;
}

/* This process's start (what it records of itself; a fork's child has its own): read once
 * per process, so that every record of it says the same (a slot written with it is found
 * again to be cleared). */
static uint64_t own_start(void) {
    static pthread_mutex_t once = PTHREAD_MUTEX_INITIALIZER;
    static pid_t of;
    static uint64_t start;
    pthread_mutex_lock(&once);
    if (of != getpid()) {
        int gone;
        start = process_start(getpid(), &gone);
        of = getpid();
    }
    uint64_t mine = start;
    pthread_mutex_unlock(&once);
    return mine;
}

/* Whether the process recorded as (`pid`, `start`) has ended: gone, or its pid now another
 * process's (a start of 0: not known, the pid alone decides). */
static int process_ended(int32_t pid, uint64_t start) {
    if (kill(pid, 0) != 0 && errno == ESRCH) return 1;   /* gone: nothing more to read */
    /* a process runs under that pid: the recorded one? Asked of /proc at most once per
     * 10 ms per thread for the same record (a wait on another process's event asks every
     * 100 microseconds, with the lock held) */
    static __thread int32_t seen_pid;
    static __thread uint64_t seen_start, seen_at;
    struct timespec clock;
    clock_gettime(CLOCK_MONOTONIC, &clock);
    uint64_t now_ns = (uint64_t)clock.tv_sec * 1000000000u + (uint64_t)clock.tv_nsec;
    if (seen_pid == pid && seen_start == start && now_ns - seen_at < 10000000u) return 0;
    int gone;
    uint64_t now = process_start(pid, &gone);
    int ended = gone || (start && now && now != start);
    if (!ended) seen_pid = pid, seen_start = start, seen_at = now_ns;
    return ended;
}

static void random_nonce(uint64_t nonce[2]) {
    FILE *source = fopen("/dev/urandom", "rb");
    if (!source || fread(nonce, sizeof(uint64_t), 2, source) != 2) {
        nonce[0] = (uint64_t)getpid() << 32 ^ (uint64_t)time(NULL);
        nonce[1] = (uint64_t)(uintptr_t)nonce ^ ++serials;
    }
    if (source) fclose(source);
}

/* A new memfd of `size` bytes, mapped shared (NULL on failure); its descriptor in *fd. */
static void *shared_pages(size_t size, int *fd) {
    *fd = memfd_create("cudasim-ipc", MFD_CLOEXEC);
    if (*fd < 0) return NULL;
    void *pages = ftruncate(*fd, (off_t)size) == 0
                  ? mmap(NULL, size, PROT_READ | PROT_WRITE, MAP_SHARED, *fd, 0) : MAP_FAILED;
    if (pages == MAP_FAILED) { close(*fd); *fd = -1; return NULL; }
    return pages;
}

/* Another process's memfd that `wire` names, mapped shared (NULL: it is gone, or not ours
 * to open, or not `size` bytes). */
static void *open_shared_pages(const ipc_wire *wire, size_t size) {
    char path[64];
    snprintf(path, sizeof path, "/proc/%d/fd/%d", (int)wire->pid, (int)wire->fd);
    int fd = open(path, O_RDWR | O_CLOEXEC);
    if (fd < 0) return NULL;
    struct stat st;
    void *pages = fstat(fd, &st) == 0 && (size_t)st.st_size == size
                  ? mmap(NULL, size, PROT_READ | PROT_WRITE, MAP_SHARED, fd, 0) : MAP_FAILED;
    close(fd);
    return pages == MAP_FAILED ? NULL : pages;
}

/* Imported memory its exporter freed, or whose exporter died (its memory went with it). */
static int ipc_freed(const allocation *a) {
    if (a->import_pool || (a->imported && a->pool_mapped)) return ipc_pool_import_freed(a);
    if (!a->ipc || !a->imported) return 0;
    if (__atomic_load_n(&a->ipc->state, __ATOMIC_ACQUIRE) != IPC_LIVE) return 1;
    return process_ended(a->ipc_pid, a->ipc->start);
}

/* Poisoning an exported or imported allocation (caller holds the lock): the exporter's
 * free marks the header freed for every importer; the mapping (header and bytes) goes. */
static void ipc_unmap(allocation *a) {
    if (!a->imported) {
        __atomic_store_n(&a->ipc->state, IPC_FREED, __ATOMIC_RELEASE);
        close(a->ipc_fd);
    }
    munmap(a->ipc, page_size() + a->size);
    a->ipc = NULL;
}

/* Record `record` of an event has run. Each record is done on its own: a wait passes when
 * the record it captured is done — not an earlier one, and not a later one of another
 * stream (CUDA: cuStreamWaitEvent waits for "the most recent" record at the call). */
static void ipc_signal(struct ipc_event *page, uint64_t record) {
    uint64_t *slot = &page->done[record % IPC_RING];
    uint64_t seen = __atomic_load_n(slot, __ATOMIC_ACQUIRE);
    while (seen < record &&
           !__atomic_compare_exchange_n(slot, &seen, record, 0, __ATOMIC_ACQ_REL, __ATOMIC_ACQUIRE))
        ;
}

/* Whether a wait for record `record` is over: that record done (0: never recorded), or the
 * exporter destroyed the event or died (undefined behaviour on a GPU; here the wait ends
 * rather than hang for ever). */
static int ipc_event_reached(struct ipc_event *page, uint64_t record) {
    if (record == 0 || __atomic_load_n(&page->done[record % IPC_RING], __ATOMIC_ACQUIRE) >= record)
        return 1;
    if (__atomic_load_n(&page->state, __ATOMIC_ACQUIRE) != IPC_LIVE) return 1;
    return process_ended(page->pid, page->start);
}

static int ipc_event_pending(struct ipc_event *shared) {
    return !ipc_event_reached(shared, __atomic_load_n(&shared->recorded, __ATOMIC_ACQUIRE));
}

/* This process's references to the event pages it maps (its events, their queued records
 * and waits): a page is unmapped when the last goes (caller holds the lock). */
typedef struct ipc_page { struct ipc_event *page; long refs; struct ipc_page *next; } ipc_page;
static ipc_page *ipc_pages;

static void ipc_page_ref(struct ipc_event *page) {
    for (ipc_page *p = ipc_pages; p; p = p->next)
        if (p->page == page) { p->refs++; return; }
    ipc_page *p = calloc(1, sizeof *p);
    if (!p) return;                      /* never unmapped: a page, not a fault */
    p->page = page;
    p->refs = 1;
    p->next = ipc_pages;
    ipc_pages = p;
}

static void ipc_page_unref(struct ipc_event *page) {
    for (ipc_page **link = &ipc_pages; *link; link = &(*link)->next) {
        ipc_page *p = *link;
        if (p->page != page) continue;
        if (--p->refs == 0) {
            *link = p->next;
            munmap(page, page_size());
            free(p);
        }
        return;
    }
}

static int ipc_event_page(struct CUevent_st *e) {
    _Static_assert(sizeof(struct ipc_event) <= 4096, "an event's page");
    struct ipc_event *shared = shared_pages(page_size(), &e->shared_fd);
    if (!shared) return 0;
    memcpy(shared->magic, IPC_EVENT_MAGIC, 8);
    random_nonce(shared->nonce);
    shared->state = IPC_LIVE;
    shared->pid = getpid();
    shared->start = own_start();
    e->shared = shared;
    pthread_mutex_lock(&lock);
    ipc_page_ref(shared);
    pthread_mutex_unlock(&lock);
    return 1;
}

/* cuEventDestroy of an interprocess event, or its context's reset (caller holds the lock):
 * the exporter's says so to every importer; this process's reference to the page goes (a
 * record or wait still queued keeps it mapped until it has run). */
static void ipc_event_release(struct CUevent_st *e) {
    if (!e->shared) return;
    if (e->shared_fd >= 0) {
        __atomic_store_n(&e->shared->state, IPC_FREED, __ATOMIC_RELEASE);
        close(e->shared_fd);
        e->shared_fd = -1;
    }
    ipc_page_unref(e->shared);
    e->shared = NULL;
}

/* The bytes of a new cuMemAlloc allocation of `size`, in a memfd after its header page
 * (NULL: out of memory); its serial is filled in when it is exported. */
static unsigned char *ipc_ready(allocation *a, size_t size) {
    int fd;
    size_t page = page_size();
    unsigned char *pages = shared_pages(page + size, &fd);
    if (!pages) return NULL;
    struct ipc_header *header = (struct ipc_header *)pages;
    memcpy(header->magic, IPC_MEM_MAGIC, 8);
    random_nonce(header->nonce);
    header->size = size;
    header->state = IPC_LIVE;
    a->ipc = header;
    a->ipc_fd = fd;
    return pages + page;
}

/* Moves a cuMemAlloc allocation's bytes into a memfd (caller holds the lock): after the
 * work touching them now, so that no copy or kernel is left with the old bytes. */
static CUresult ipc_export(allocation *a) {
    while (a->busy) pthread_cond_wait(&progress, &lock);
    int fd;
    size_t page = page_size();
    unsigned char *pages = shared_pages(page + a->size, &fd);
    if (!pages) return CUDA_ERROR_OUT_OF_MEMORY;
    struct ipc_header *header = (struct ipc_header *)pages;
    memcpy(header->magic, IPC_MEM_MAGIC, 8);
    random_nonce(header->nonce);
    header->serial = a->serial;
    header->size = a->size;
    header->device = a->device;
    header->state = IPC_LIVE;
    header->start = own_start();
    memcpy(pages + page, a->bytes, a->size);
    free(a->bytes);
    a->bytes = pages + page;
    a->ipc = header;
    a->ipc_fd = fd;
    return CUDA_SUCCESS;
}

SIM_EXPORT CUresult CUDAAPI cuIpcGetMemHandle(CUipcMemHandle *handle, CUdeviceptr dptr) {
    COUNT(cuIpcGetMemHandle);
    REQUIRE_INIT();
    if (!current()) return CUDA_ERROR_INVALID_CONTEXT;
    CUresult status = sticky_of(current());
    if (status != CUDA_SUCCESS) return status;
    if (!handle) return CUDA_ERROR_INVALID_VALUE;
    pthread_mutex_lock(&lock);
    allocation *a = find((uintptr_t)dptr, 0);
    /* "the base of an existing device memory allocation created with cuMemAlloc" */
    if (!a || a->kind != MEM_DEVICE || a->base != (uintptr_t)dptr || a->pooled || a->imported)
        status = CUDA_ERROR_INVALID_VALUE;
    else if (!a->ipc)
        status = ipc_export(a);
    if (status == CUDA_SUCCESS) {
        a->ipc->serial = a->serial;
        a->ipc->device = a->device;
        ipc_wire wire = {.pid = getpid(), .fd = a->ipc_fd, .serial = a->serial,
                         .size = a->size, .device = a->device};
        memcpy(wire.magic, IPC_MEM_MAGIC, 8);
        memcpy(wire.nonce, a->ipc->nonce, sizeof wire.nonce);
        memset(handle, 0, sizeof *handle);
        memcpy(handle->reserved, &wire, sizeof wire);
    }
    pthread_mutex_unlock(&lock);
    return status;
}

SIM_EXPORT CUresult CUDAAPI cuIpcOpenMemHandle(CUdeviceptr *pdptr, CUipcMemHandle handle,
                                               unsigned int flags) {
    COUNT(cuIpcOpenMemHandle);
    REQUIRE_INIT();
    struct CUctx_st *ctx = current();
    if (!ctx) return CUDA_ERROR_INVALID_CONTEXT;
    CUresult status = sticky_of(ctx);
    if (status != CUDA_SUCCESS) return status;
    if (!pdptr || flags != CU_IPC_MEM_LAZY_ENABLE_PEER_ACCESS) return CUDA_ERROR_INVALID_VALUE;
    ipc_wire wire;
    memcpy(&wire, handle.reserved, sizeof wire);
    if (memcmp(wire.magic, IPC_MEM_MAGIC, 8) != 0 || wire.size == 0) return CUDA_ERROR_INVALID_VALUE;
    if (wire.pid == getpid()) return CUDA_ERROR_INVALID_CONTEXT;   /* its own handle */
    if (wire.device < 0 || wire.device >= device_count) return CUDA_ERROR_INVALID_DEVICE;
    /* another device's memory: mapped with peer access, enabled as needed ("lazily") —
     * where the devices can reach each other at all */
    if (wire.device != ctx->device && !peer_access_possible)
        return CUDA_ERROR_PEER_ACCESS_UNSUPPORTED;
    pthread_mutex_lock(&lock);
    for (allocation *a = allocations; a; a = a->next)   /* opened here already: once more */
        if (a->imported && a->ctx == ctx && a->ipc_pid == wire.pid &&
            a->ipc_serial == wire.serial && !ipc_freed(a) &&
            !memcmp(a->ipc->nonce, wire.nonce, sizeof wire.nonce)) {
            a->imported++;
            *pdptr = a->base;
            pthread_mutex_unlock(&lock);
            return CUDA_SUCCESS;
        }
    pthread_mutex_unlock(&lock);
    size_t page = page_size(), reserved = (wire.size + page - 1) / page * page;
    unsigned char *pages = open_shared_pages(&wire, page + wire.size);
    struct ipc_header *header = (struct ipc_header *)pages;
    if (!pages || memcmp(header->magic, IPC_MEM_MAGIC, 8) != 0 ||
        memcmp(header->nonce, wire.nonce, sizeof wire.nonce) != 0 ||
        header->serial != wire.serial ||
        __atomic_load_n(&header->state, __ATOMIC_ACQUIRE) != IPC_LIVE) {
        if (pages) munmap(pages, page + wire.size);
        return CUDA_ERROR_INVALID_HANDLE;   /* gone, freed, or never this memory */
    }
    allocation *a = calloc(1, sizeof *a);
    void *base = a ? mmap(NULL, reserved, PROT_NONE, MAP_PRIVATE | MAP_ANONYMOUS | MAP_NORESERVE,
                          -1, 0) : MAP_FAILED;
    if (base == MAP_FAILED) {
        free(a);
        munmap(pages, page + wire.size);
        return CUDA_ERROR_MAP_FAILED;
    }
    a->base = (uintptr_t)base;
    a->size = wire.size;
    a->reserved = reserved;
    a->kind = MEM_DEVICE;
    a->device = wire.device;
    a->ctx = ctx;
    a->bytes = pages + page;
    a->ipc = header;
    a->ipc_fd = -1;
    a->imported = 1;
    a->ipc_pid = wire.pid;
    a->ipc_serial = wire.serial;
    pthread_mutex_lock(&lock);
    link_allocation(a);
    pthread_mutex_unlock(&lock);
    *pdptr = a->base;
    return CUDA_SUCCESS;
}

SIM_EXPORT CUresult CUDAAPI cuIpcCloseMemHandle(CUdeviceptr dptr) {
    COUNT(cuIpcCloseMemHandle);
    REQUIRE_INIT();
    if (!current()) return CUDA_ERROR_INVALID_CONTEXT;
    CUresult broken = sticky_of(current());
    if (broken != CUDA_SUCCESS) return broken;
    pthread_mutex_lock(&lock);
    allocation **link = &allocations;
    while (*link && !((*link)->base == (uintptr_t)dptr && (*link)->imported)) link = &(*link)->next;
    allocation *a = *link;
    if (a && --a->imported == 0) {      /* the last reference: unmapped */
        *link = a->next;
        a->imported = 1;                /* still another process's memory while it is buried */
        bury(a);
    }
    pthread_mutex_unlock(&lock);
    return a ? CUDA_SUCCESS : CUDA_ERROR_INVALID_VALUE;
}

SIM_EXPORT CUresult CUDAAPI cuIpcGetEventHandle(CUipcEventHandle *handle, CUevent event) {
    COUNT(cuIpcGetEventHandle);
    REQUIRE_INIT();
    pthread_mutex_lock(&lock);
    struct CUevent_st *e = valid_event(event);
    CUresult status = !e ? CUDA_ERROR_INVALID_HANDLE : !handle || !e->shared || e->shared_fd < 0
                      ? CUDA_ERROR_INVALID_VALUE : sticky_of(e->ctx);
    if (status == CUDA_SUCCESS) {
        ipc_wire wire = {.pid = getpid(), .fd = e->shared_fd};
        memcpy(wire.magic, IPC_EVENT_MAGIC, 8);
        memcpy(wire.nonce, e->shared->nonce, sizeof wire.nonce);
        memset(handle, 0, sizeof *handle);
        memcpy(handle->reserved, &wire, sizeof wire);
    }
    pthread_mutex_unlock(&lock);
    return status;
}

SIM_EXPORT CUresult CUDAAPI cuIpcOpenEventHandle(CUevent *event, CUipcEventHandle handle) {
    COUNT(cuIpcOpenEventHandle);
    REQUIRE_INIT();
    struct CUctx_st *ctx = current();
    if (!ctx) return CUDA_ERROR_INVALID_CONTEXT;
    CUresult status = sticky_of(ctx);
    if (status != CUDA_SUCCESS) return status;
    if (!event) return CUDA_ERROR_INVALID_VALUE;
    ipc_wire wire;
    memcpy(&wire, handle.reserved, sizeof wire);
    if (memcmp(wire.magic, IPC_EVENT_MAGIC, 8) != 0) return CUDA_ERROR_INVALID_VALUE;
    if (wire.pid == getpid()) return CUDA_ERROR_INVALID_CONTEXT;
    struct ipc_event *shared = open_shared_pages(&wire, page_size());
    if (!shared || memcmp(shared->magic, IPC_EVENT_MAGIC, 8) != 0 ||
        memcmp(shared->nonce, wire.nonce, sizeof wire.nonce) != 0 ||
        __atomic_load_n(&shared->state, __ATOMIC_ACQUIRE) != IPC_LIVE) {
        if (shared) munmap(shared, page_size());
        return CUDA_ERROR_INVALID_HANDLE;
    }
    struct CUevent_st *e = calloc(1, sizeof *e);
    if (!e) { munmap(shared, page_size()); return CUDA_ERROR_OUT_OF_MEMORY; }
    e->magic = EVENT_MAGIC;
    e->ctx = ctx;
    e->shared = shared;
    e->shared_fd = -1;
    pthread_mutex_lock(&lock);
    ipc_page_ref(shared);
    e->next = events;
    events = e;
    pthread_mutex_unlock(&lock);
    __atomic_add_fetch(&live_events, 1, __ATOMIC_RELAXED);
    *event = e;
    return CUDA_SUCCESS;
}

/* ---- interprocess pools ------------------------------------------------------------------
 *
 * IPC of stream-ordered memory as the driver documents it (cuMemPoolExportToShareableHandle
 * and kin), between processes that each load this library:
 *   - a pool made with CU_MEM_HANDLE_TYPE_POSIX_FILE_DESCRIPTOR (the only handle type here,
 *     as CU_DEVICE_ATTRIBUTE_MEMPOOL_SUPPORTED_HANDLE_TYPES says; another is
 *     CUDA_ERROR_NOT_SUPPORTED) keeps its blocks' bytes in a memfd, after record pages that
 *     say which generation of each block is live. cuMemPoolExportToShareableHandle gives the
 *     caller a new descriptor of that memfd (the caller's to close, and to pass to another
 *     process as the platform allows: over a Unix socket). Such a pool never gives memory
 *     back ("IPC pools currently do not support releasing physical blocks back to the OS":
 *     cuMemPoolTrimTo does nothing and the release threshold is ignored).
 *   - cuMemPoolImportFromShareableHandle maps a descriptor's pool into another process — once:
 *     a second import of the same pool (another descriptor of it) gives the same handle, its
 *     access grants shared (the simulator's reading, the weaker side: the driver does not
 *     say it gives a second, independent one); an imported pool "does not support creating
 *     new allocations" (cuMemAllocFromPoolAsync is CUDA_ERROR_INVALID_VALUE). No device may touch its memory until the importer grants
 *     it access (cuMemPoolSetAccess: the simulator's reading, the stricter one — CUDA's own
 *     sample asks cuMemPoolGetAccess first), and an importer may grant read-only access
 *     (CU_MEM_ACCESS_FLAGS_PROT_READ): a copy or memset writing there faults (sticky
 *     CUDA_ERROR_ILLEGAL_ADDRESS; counted: pool_access_faults), and a kernel's store is a
 *     SIGSEGV of the process (the mapping is read-only: this C build of a kernel cannot tell
 *     a load from a store). A process importing its own pool is refused
 *     (CUDA_ERROR_INVALID_VALUE: the simulator's choice; the driver does not say).
 *   - cuMemPoolExportPointer describes a live block of an exportable pool (64 bytes, no
 *     secret: nothing opens without the pool's descriptor); cuMemPoolImportPointer maps it
 *     from an imported pool, once per process (a second import of the same block, through
 *     any handle, is CUDA_ERROR_INVALID_VALUE, as is a freed or reused block, or one of
 *     another pool). The import is freed with cuMemFree, or with cuMemFreeAsync: then when
 *     its stream reaches the free (until then it is still imported, and a second free of it
 *     is CUDA_ERROR_INVALID_VALUE). An importer destroying its imported pool while blocks
 *     are imported from it loses the handle at once; the blocks stay imported, and the pool
 *     goes with the last of their frees ("released automatically once there are no more
 *     outstanding allocations").
 *   - "The imported memory must be freed from all importing processes before being freed in
 *     the exporting process": a block's record names the processes that have it imported
 *     (up to IPC_POOL_IMPORTERS), and the exporter's free of it while one of them lives is
 *     counted (pool_frees_before_importers) and said on stderr; and a block its exporter
 *     freed (its free run) or reused, a pool its exporter destroyed, or an exporter that
 *     died, is freed memory to the importer's work, which faults as on freed memory.
 * Imported blocks are the exporter's memory: they do not count against the importer's
 * device, and one never freed is reported at exit. */

#define IPC_POOL_MAGIC "cudasimP"
#define IPC_POINTER_MAGIC "cudasimX"
#define IPC_POOL_RECORDS 4096            /* blocks an exportable pool can make */

#define IPC_POOL_IMPORTERS 8             /* importing processes a block's record tracks */
#define IMPORTER_PID_BITS 22              /* an importer's slot: its start above its pid */
#define IMPORTER_PID_MASK ((1ull << IMPORTER_PID_BITS) - 1)   /* (Linux: pids < 2^22) */
struct ipc_pool_record {
    uint64_t generation, offset, mapped;
    uint64_t importers[IPC_POOL_IMPORTERS];  /* the processes that have it imported now:
                                                importer_slot(pid, start) each */
};
struct ipc_pool {                        /* the first pages of an exportable pool's memfd */
    char magic[8];
    uint64_t nonce[2];
    int32_t device, state, pid, pad;
    uint64_t start;                      /* the exporter's (process_ended) */
    uint64_t records_made;
    struct ipc_pool_record records[IPC_POOL_RECORDS];
};

typedef struct {                         /* what a CUmemPoolPtrExportData holds */
    char magic[8];
    uint64_t nonce[2], record, generation, size;
} ipc_pointer_wire;
_Static_assert(sizeof(ipc_pointer_wire) <= sizeof(CUmemPoolPtrExportData),
               "a pointer's export data is 64 bytes");

static size_t ipc_pool_data_offset(void) {   /* where blocks start in the memfd */
    size_t page = page_size();
    return (sizeof(struct ipc_pool) + page - 1) / page * page;
}

static int pool_exportable(const struct CUmemPoolHandle_st *pool) {
    return pool->ipc && !pool->imported;
}

/* The bytes of a new block of exportable `pool`: `size` (page-rounded) mapped from its memfd
 * at the next free offset, the block given the next record (NULL: out of records or memory). */
static unsigned char *ipc_pool_block(struct CUmemPoolHandle_st *pool, allocation *a, size_t size) {
    size_t page = page_size(), mapped = (size + page - 1) / page * page;
    pthread_mutex_lock(&lock);
    uint64_t record = pool->ipc->records_made;
    size_t offset = pool->ipc_next;
    int room = record < IPC_POOL_RECORDS &&
               ftruncate(pool->ipc_fd, (off_t)(ipc_pool_data_offset() + offset + mapped)) == 0;
    if (room) {
        pool->ipc->records_made = record + 1;
        pool->ipc_next += mapped;
        pool->ipc->records[record].offset = offset;
        pool->ipc->records[record].mapped = mapped;
    }
    pthread_mutex_unlock(&lock);
    void *bytes = room ? mmap(NULL, mapped, PROT_READ | PROT_WRITE, MAP_SHARED, pool->ipc_fd,
                              (off_t)(ipc_pool_data_offset() + offset)) : MAP_FAILED;
    if (bytes == MAP_FAILED) return NULL;
    a->pool_mapped = mapped;
    a->pool_offset = offset;
    a->pool_record = (long)record;
    return bytes;
}

/* A block of an exportable pool changed state: its record says which generation is live (0:
 * none), for importers to see (caller holds the lock). */
static void ipc_pool_record(const allocation *a) {
    if (!a->pool_mapped || !a->pool || !a->pool->ipc || a->pool->imported) return;
    struct ipc_pool_record *record = &a->pool->ipc->records[a->pool_record];
    uint64_t now = a->pool_state == POOL_FREE ? 0 : (uint64_t)a->generation;
    uint64_t before = __atomic_exchange_n(&record->generation, now, __ATOMIC_ACQ_REL);
    /* the block's generation imported so far ends: freed, or reused by the stream that
     * freed it before its free ran (never passing through "free") */
    if (before == now || before == 0) return;
    /* "The imported memory must be freed from all importing processes before being freed in
     * the exporting process": a live process that still has it imported is a violation
     * (counted: pool_frees_before_importers); a dead one's import went with it. */
    for (int i = 0; i < IPC_POOL_IMPORTERS; i++) {
        uint64_t slot = __atomic_exchange_n(&record->importers[i], 0, __ATOMIC_ACQ_REL);
        int32_t pid = (int32_t)(slot & IMPORTER_PID_MASK);
        if (slot && !process_ended(pid, slot >> IMPORTER_PID_BITS)) {
            __atomic_add_fetch(&counters[COUNT_EARLY_FREES], 1, __ATOMIC_RELAXED);
            fprintf(stderr, "cudasim: a pool block freed by its exporter while process %d still "
                    "has it imported (it must be freed in every importer first)\n", (int)pid);
        }
    }
}

/* This process has the imported block `a` (record `record` of its pool's page) imported now,
 * or (`imported` 0) no longer: its pid in one of the record's importer slots. */
static void ipc_pool_importer(const allocation *a, int imported) {
    struct CUmemPoolHandle_st *p = a->import_pool;
    if (!p || !p->ipc) return;
    uint64_t *slots = p->ipc->records[a->pool_record].importers;
    uint64_t me = (uint64_t)getpid() | own_start() << IMPORTER_PID_BITS;
    for (int i = 0; i < IPC_POOL_IMPORTERS; i++) {
        uint64_t expected = imported ? 0 : me;
        if (__atomic_compare_exchange_n(&slots[i], &expected, imported ? me : 0, 0,
                                        __ATOMIC_ACQ_REL, __ATOMIC_ACQUIRE))
            return;                      /* more importers than slots: not tracked */
    }
}

/* A new exportable pool's memfd and record pages (0: out of memory). */
static int ipc_pool_create(struct CUmemPoolHandle_st *p) {
    p->ipc = shared_pages(ipc_pool_data_offset(), &p->ipc_fd);
    if (!p->ipc) return 0;
    memcpy(p->ipc->magic, IPC_POOL_MAGIC, 8);
    random_nonce(p->ipc->nonce);
    p->ipc->device = p->device;
    p->ipc->state = IPC_LIVE;
    p->ipc->pid = getpid();
    p->ipc->start = own_start();
    return 1;
}

/* A pool's interprocess side goes with it (caller holds the lock): an exporter's destroy
 * says so to every importer; its blocks still in use keep their mappings. */
/* An imported pool its importer destroyed while blocks were still imported from it, released
 * once none is (caller holds the lock); any other pool is left as it is. */
static void ipc_pool_release_destroyed(struct CUmemPoolHandle_st *p) {
    if (!p->destroyed) return;
    for (allocation *x = allocations; x; x = x->next)
        if (x->import_pool == p) return;       /* another block of it still imported */
    ipc_pool_close(p);
    for (allocation *x = graveyard; x; x = x->next)
        if (x->import_pool == p) x->import_pool = NULL;
    free(p);
}

static void ipc_pool_close(struct CUmemPoolHandle_st *p) {
    if (!p->ipc) return;
    if (!p->imported) __atomic_store_n(&p->ipc->state, IPC_FREED, __ATOMIC_RELEASE);
    munmap(p->ipc, ipc_pool_data_offset());
    close(p->ipc_fd);
    p->ipc = NULL;
    p->ipc_fd = -1;
}

/* Whether an imported block is freed memory to this process: its exporter freed or reused
 * it, destroyed its pool, or died. */
static int ipc_pool_import_freed(const allocation *a) {
    struct ipc_pool *shared = a->import_pool ? a->import_pool->ipc : NULL;
    if (!shared || __atomic_load_n(&shared->state, __ATOMIC_ACQUIRE) != IPC_LIVE ||
        __atomic_load_n(&shared->records[a->pool_record].generation, __ATOMIC_ACQUIRE) !=
            a->ipc_serial)
        return 1;
    return process_ended(shared->pid, shared->start);
}

/* The widest access any device has to an imported pool, as a page protection: what its
 * blocks are mapped with here (caller holds the lock). */
static int import_protection(const struct CUmemPoolHandle_st *p) {
    int widest = CU_MEM_ACCESS_FLAGS_PROT_NONE;
    for (int d = 0; d < device_count; d++)
        if ((int)p->access[d] > widest) widest = (int)p->access[d];
    return widest == CU_MEM_ACCESS_FLAGS_PROT_READWRITE ? PROT_READ | PROT_WRITE
           : widest == CU_MEM_ACCESS_FLAGS_PROT_READ ? PROT_READ : PROT_NONE;
}

/* Whether device `device`'s work may read (or, `write`, write) imported block `a`: what its
 * importing pool granted that device (caller holds the lock). */
static int import_allows(const allocation *a, int device, int write) {
    CUmemAccess_flags granted = a->import_pool ? a->import_pool->access[device]
                                               : CU_MEM_ACCESS_FLAGS_PROT_NONE;
    return write ? granted == CU_MEM_ACCESS_FLAGS_PROT_READWRITE
                 : granted != CU_MEM_ACCESS_FLAGS_PROT_NONE;
}

SIM_EXPORT CUresult CUDAAPI cuMemPoolExportToShareableHandle(void *handle_out, CUmemoryPool pool,
                                                             CUmemAllocationHandleType type,
                                                             unsigned long long flags) {
    COUNT(cuMemPoolExportToShareableHandle);
    REQUIRE_INIT();
    struct CUmemPoolHandle_st *p = valid_pool(pool);
    if (!p) return CUDA_ERROR_INVALID_VALUE;
    if (!handle_out || flags || type != CU_MEM_HANDLE_TYPE_POSIX_FILE_DESCRIPTOR ||
        !pool_exportable(p) || !(p->handle_types & type))
        return CUDA_ERROR_INVALID_VALUE;
    pthread_mutex_lock(&lock);
    int fd = p->ipc ? fcntl(p->ipc_fd, F_DUPFD_CLOEXEC, 0) : -1;
    pthread_mutex_unlock(&lock);
    if (fd < 0) return CUDA_ERROR_OUT_OF_MEMORY;
    *(int *)handle_out = fd;
    return CUDA_SUCCESS;
}

SIM_EXPORT CUresult CUDAAPI cuMemPoolImportFromShareableHandle(CUmemoryPool *pool_out, void *handle,
                                                               CUmemAllocationHandleType type,
                                                               unsigned long long flags) {
    COUNT(cuMemPoolImportFromShareableHandle);
    REQUIRE_INIT();
    if (!pool_out || flags || type != CU_MEM_HANDLE_TYPE_POSIX_FILE_DESCRIPTOR)
        return CUDA_ERROR_INVALID_VALUE;
    int fd = fcntl((int)(intptr_t)handle, F_DUPFD_CLOEXEC, 0);
    if (fd < 0) return CUDA_ERROR_INVALID_VALUE;
    struct stat st;
    size_t head = ipc_pool_data_offset();
    struct ipc_pool *shared = fstat(fd, &st) == 0 && (size_t)st.st_size >= head
        ? mmap(NULL, head, PROT_READ | PROT_WRITE, MAP_SHARED, fd, 0) : MAP_FAILED;
    if (shared == MAP_FAILED || memcmp(shared->magic, IPC_POOL_MAGIC, 8) != 0 ||
        __atomic_load_n(&shared->state, __ATOMIC_ACQUIRE) != IPC_LIVE ||
        shared->pid == getpid() || shared->device < 0 || shared->device >= device_count) {
        if (shared != MAP_FAILED) munmap(shared, head);
        close(fd);
        return CUDA_ERROR_INVALID_VALUE;   /* not a pool's, destroyed, or this process's own */
    }
    pthread_mutex_lock(&lock);     /* looked for and made under one hold: one pool, whatever
                                      threads import it at once */
    struct CUmemPoolHandle_st *p = created_pools;
    while (p && !(p->imported && p->ipc && !memcmp(p->ipc->nonce, shared->nonce,
                                                   sizeof shared->nonce)))
        p = p->next;
    int found = p != NULL;             /* imported here already: the same pool */
    if (!found && (p = calloc(1, sizeof *p)) != NULL) {
        p->device = shared->device;    /* every device's access: none until granted */
        p->created = p->imported = 1;
        p->handle_types = type;
        p->ipc = shared;
        p->ipc_fd = fd;
        p->next = created_pools;
        created_pools = p;
    }
    pthread_mutex_unlock(&lock);
    if (found || !p) { munmap(shared, head); close(fd); }
    if (!p) return CUDA_ERROR_OUT_OF_MEMORY;
    *pool_out = p;
    return CUDA_SUCCESS;
}

SIM_EXPORT CUresult CUDAAPI cuMemPoolExportPointer(CUmemPoolPtrExportData *data, CUdeviceptr ptr) {
    COUNT(cuMemPoolExportPointer);
    REQUIRE_INIT();
    if (!data) return CUDA_ERROR_INVALID_VALUE;
    pthread_mutex_lock(&lock);
    allocation *a = NULL;
    for (allocation *x = allocations; x; x = x->next)
        if (x->base == (uintptr_t)ptr && x->pooled && x->pool_state == POOL_LIVE) a = x;
    CUresult status = a && a->pool && pool_exportable(a->pool) && a->pool_mapped
                      ? CUDA_SUCCESS : CUDA_ERROR_INVALID_VALUE;
    if (status == CUDA_SUCCESS) {
        ipc_pointer_wire wire = {.record = (uint64_t)a->pool_record,
                                 .generation = a->generation, .size = a->size};
        memcpy(wire.magic, IPC_POINTER_MAGIC, 8);
        memcpy(wire.nonce, a->pool->ipc->nonce, sizeof wire.nonce);
        memset(data, 0, sizeof *data);
        memcpy(data->reserved, &wire, sizeof wire);
    }
    pthread_mutex_unlock(&lock);
    return status;
}

SIM_EXPORT CUresult CUDAAPI cuMemPoolImportPointer(CUdeviceptr *ptr_out, CUmemoryPool pool,
                                                   CUmemPoolPtrExportData *data) {
    COUNT(cuMemPoolImportPointer);
    REQUIRE_INIT();
    struct CUctx_st *ctx = current();
    if (!ctx) return CUDA_ERROR_INVALID_CONTEXT;
    CUresult status = sticky_of(ctx);
    if (status != CUDA_SUCCESS) return status;
    struct CUmemPoolHandle_st *p = valid_pool(pool);
    if (!ptr_out || !data || !p || !p->imported) return CUDA_ERROR_INVALID_VALUE;
    ipc_pointer_wire wire;
    memcpy(&wire, data->reserved, sizeof wire);
    pthread_mutex_lock(&lock);
    struct ipc_pool *shared = p->ipc;
    int valid = shared && memcmp(wire.magic, IPC_POINTER_MAGIC, 8) == 0 &&
                memcmp(wire.nonce, shared->nonce, sizeof wire.nonce) == 0 &&
                wire.record < IPC_POOL_RECORDS && wire.generation != 0 &&
                __atomic_load_n(&shared->records[wire.record].generation, __ATOMIC_ACQUIRE) ==
                    wire.generation &&
                wire.size <= shared->records[wire.record].mapped;
    for (allocation *a = allocations; valid && a; a = a->next)   /* imported here already */
        if (a->import_pool && a->import_pool->ipc &&
            !memcmp(a->import_pool->ipc->nonce, wire.nonce, sizeof wire.nonce) &&
            a->pool_record == (long)wire.record && a->ipc_serial == wire.generation)
            valid = 0;
    size_t offset = valid ? shared->records[wire.record].offset : 0;
    size_t mapped = valid ? shared->records[wire.record].mapped : 0;
    int protection = import_protection(p);
    pthread_mutex_unlock(&lock);
    if (!valid) return CUDA_ERROR_INVALID_VALUE;
    allocation *a = calloc(1, sizeof *a);
    void *base = a ? mmap(NULL, mapped, PROT_NONE, MAP_PRIVATE | MAP_ANONYMOUS | MAP_NORESERVE,
                          -1, 0) : MAP_FAILED;
    void *bytes = base != MAP_FAILED
        ? mmap(NULL, mapped, protection, MAP_SHARED, p->ipc_fd,
               (off_t)(ipc_pool_data_offset() + offset)) : MAP_FAILED;
    if (bytes == MAP_FAILED) {
        if (base != MAP_FAILED) munmap(base, mapped);
        free(a);
        return CUDA_ERROR_OUT_OF_MEMORY;
    }
    a->base = (uintptr_t)base;
    a->size = a->capacity = wire.size;
    a->reserved = mapped;
    a->kind = MEM_DEVICE;
    a->device = p->device;
    a->ctx = ctx;
    a->bytes = bytes;
    a->pool_mapped = mapped;
    a->pool_record = (long)wire.record;
    a->import_pool = p;
    a->imported = 1;
    a->ipc_pid = shared->pid;
    a->ipc_serial = wire.generation;
    pthread_mutex_lock(&lock);
    /* imported meanwhile by another thread (the check above let go of the lock): once only */
    for (allocation *b = allocations; b; b = b->next)
        if (b->import_pool == p && b->pool_record == a->pool_record &&
            b->ipc_serial == a->ipc_serial) {
            pthread_mutex_unlock(&lock);
            munmap(bytes, mapped);
            munmap(base, mapped);
            free(a);
            return CUDA_ERROR_INVALID_VALUE;
        }
    link_allocation(a);
    ipc_pool_importer(a, 1);
    pthread_mutex_unlock(&lock);
    *ptr_out = a->base;
    return CUDA_SUCCESS;
}

#define PROCS(X) X(cuInit, 2000) X(cuDriverGetVersion, 2020) X(cuDeviceGet, 2000) \
    X(cuDeviceGetCount, 2000) X(cuDeviceGetAttribute, 2000) X(cuDeviceGetName, 2000) \
    X(cuDevicePrimaryCtxRetain, 7000) X(cuDevicePrimaryCtxRelease, 11000) \
    X(cuDevicePrimaryCtxGetState, 7000) \
    X(cuCtxPushCurrent, 4000) X(cuCtxPopCurrent, 4000) X(cuCtxSetCurrent, 4000) \
    X(cuCtxGetCurrent, 4000) X(cuCtxGetDevice, 2000) X(cuCtxSynchronize, 2000) \
    X(cuPointerGetAttribute, 4000) X(cuPointerGetAttributes, 7000) X(cuMemAlloc, 3020) \
    X(cuMemFree, 3020) X(cuMemAllocManaged, 6000) X(cuMemHostAlloc, 2020) \
    X(cuMemAllocHost, 3020) X(cuMemFreeHost, 2000) X(cuMemcpyAsync, 4000) X(cuMemcpy, 4000) \
    X(cuMemcpyHtoD, 3020) X(cuMemcpyDtoH, 3020) X(cuMemcpyHtoDAsync, 3020) \
    X(cuMemcpyDtoHAsync, 3020) X(cuMemcpy2DAsync, 3020) X(cuMemcpyPeerAsync, 4000) \
    X(cuMemsetD8Async, 3020) X(cuStreamCreate, 2000) X(cuStreamDestroy, 4000) \
    X(cuStreamGetCtx, 9020) X(cuStreamSynchronize, 2000) X(cuStreamQuery, 2000) \
    X(cuStreamWaitEvent, 3020) X(cuEventCreate, 2000) X(cuEventRecord, 2000) \
    X(cuEventDestroy, 4000) X(cuEventSynchronize, 2000) X(cuEventQuery, 2000) \
    X(cuGetErrorName, 6000) X(cuGetErrorString, 6000) X(cuGetProcAddress, 12000) \
    X(cuCtxGetStreamPriorityRange, 5050) X(cuStreamCreateWithPriority, 5050) \
    X(cuStreamGetFlags, 5050) X(cuStreamGetPriority, 5050) \
    X(cuDeviceGetUuid, 9020) X(cuDeviceTotalMem, 3020) X(cuMemGetInfo, 3020) \
    X(cuMemGetAddressRange, 3020) X(cuCtxGetId, 12000) X(cuStreamGetId, 12000) \
    X(cuModuleLoadData, 2000) X(cuModuleUnload, 2000) X(cuModuleGetFunction, 2000) \
    X(cuLaunchKernel, 4000) X(cuMemAllocAsync, 11020) X(cuMemFreeAsync, 11020) \
    X(cuDeviceGetDefaultMemPool, 11020) X(cuDeviceGetMemPool, 11020) \
    X(cuMemPoolSetAttribute, 11020) X(cuMemPoolGetAttribute, 11020) X(cuMemPoolTrimTo, 11020) \
    X(cuMemPoolSetAccess, 11020) X(cuMemPoolGetAccess, 11020) X(cuMemAllocFromPoolAsync, 11020) \
    X(cuMemPoolCreate, 11020) X(cuMemPoolDestroy, 11020) \
    X(cuStreamIsCapturing, 10000) X(cuDeviceCanAccessPeer, 4000) \
    X(cuCtxEnablePeerAccess, 4000) X(cuCtxDisablePeerAccess, 4000) \
    X(cuDevicePrimaryCtxReset, 11000) X(cuIpcGetMemHandle, 4010) \
    X(cuIpcOpenMemHandle, 11000) X(cuIpcCloseMemHandle, 4010) X(cuIpcGetEventHandle, 4010) \
    X(cuIpcOpenEventHandle, 4010) X(cuMemPoolExportToShareableHandle, 11020) \
    X(cuMemPoolImportFromShareableHandle, 11020) X(cuMemPoolExportPointer, 11020) \
    X(cuMemPoolImportPointer, 11020)

/* Entry points whose newer variant has a name of its own in the header rather than a macro
 * (cuDeviceGetUuid_v2): the base name, the variant, the version that introduced it. */
#define VARIANTS(Y) Y(cuDeviceGetUuid, cuDeviceGetUuid_v2, 11040)

typedef struct { const char *name; int version; void *entry; } proc;
#define AS_PROC(name, version) {#name, version, (void *)&name},
#define AS_VARIANT(name, entry, version) {#name, version, (void *)&entry},
static const proc procs[] = {PROCS(AS_PROC) VARIANTS(AS_VARIANT)};

SIM_EXPORT CUresult CUDAAPI cuGetProcAddress(const char *symbol, void **pfn, int cuda_version,
                                             cuuint64_t flags,
                                             CUdriverProcAddressQueryResult *status) {
    COUNT(cuGetProcAddress);
    if (!symbol || !pfn) return CUDA_ERROR_INVALID_VALUE;
    if (flags & ~(cuuint64_t)(CU_GET_PROC_ADDRESS_LEGACY_STREAM |
                              CU_GET_PROC_ADDRESS_PER_THREAD_DEFAULT_STREAM))
        return CUDA_ERROR_INVALID_VALUE;
    *pfn = NULL;
    int known = 0;
    /* Per-thread-default-stream variants (_ptsz/_ptds) are not provided: asked for, an entry
     * point that takes a stream is reported missing rather than silently given the legacy
     * semantics (CU_STREAM_PER_THREAD passed explicitly is kept by every entry point). */
    for (size_t i = 0; i < sizeof procs / sizeof procs[0]; i++) {
        if (strcmp(procs[i].name, symbol) != 0) continue;
        known = 1;
    }
    /* Several variants of one name: the newest the caller's version allows wins. */
    int chosen = 0;
    for (size_t i = 0; i < sizeof procs / sizeof procs[0]; i++)
        if (!strcmp(procs[i].name, symbol) && procs[i].version <= cuda_version &&
            procs[i].version >= chosen) {
            chosen = procs[i].version;
            *pfn = procs[i].entry;
        }
    if (getenv("CUDASIM_TRACE") && !*pfn)
        fprintf(stderr, "cudasim: cuGetProcAddress(%s, %d): %s\n", symbol, cuda_version,
                known ? "version not sufficient" : "not provided");
    if (status)
        *status = *pfn ? CU_GET_PROC_ADDRESS_SUCCESS
                  : known ? CU_GET_PROC_ADDRESS_VERSION_NOT_SUFFICIENT
                          : CU_GET_PROC_ADDRESS_SYMBOL_NOT_FOUND;
    return *pfn ? CUDA_SUCCESS : CUDA_ERROR_NOT_FOUND;
}

/* ---- the simulator's own controls (not CUDA's) -------------------------------------------- */

/* Counters by name: fills up to `n` entries, returns how many there are. */
SIM_CONTROL int cudasim_counters(const char **names, long *values, int n) {
    for (int i = 0; i < COUNT_N && i < n; i++) {
        names[i] = counter_names[i];
        values[i] = __atomic_load_n(&counters[i], __ATOMIC_RELAXED);
    }
    return COUNT_N;
}

SIM_CONTROL void cudasim_set_delay_us(long microseconds) { delay_us = microseconds; }

/* Streams paused (1): work is queued and nothing runs, so enqueueing wakes no worker — what
 * the host pays for a call, without the simulator's thread switches (benchmarks of the
 * host's cost: benchmarks/bench_gpu_host.py). Nothing may wait for work meanwhile (it
 * would wait for ever); unpaused (0), the queued work runs. */
SIM_CONTROL void cudasim_set_paused(int pause) {
    pthread_mutex_lock(&lock);
    paused = pause != 0;
    pthread_cond_broadcast(&progress);
    pthread_mutex_unlock(&lock);
}

/* Whether distinct devices can reach each other's memory (cuDeviceCanAccessPeer); 1 by
 * default, CUDASIM_PEER_ACCESS=0 at cuInit or this with 0 for a machine without a
 * peer-to-peer path. Access already enabled or granted stays. */
SIM_CONTROL void cudasim_set_peer_access(int possible) { peer_access_possible = possible != 0; }

/* Every device's memory, in bytes (0: back to DEVICE_MEMORY). */
SIM_CONTROL void cudasim_set_device_memory(long bytes) {
    pthread_mutex_lock(&lock);
    device_memory = bytes > 0 ? (size_t)bytes : DEVICE_MEMORY;
    pthread_mutex_unlock(&lock);
}

SIM_CONTROL void cudasim_set_max_pitch(long bytes) {
    max_pitch = bytes > 0 && bytes <= 2147483647 ? (size_t)bytes : 2147483647u;
}

/* Allocations, events and user streams not released so far. */
SIM_CONTROL void cudasim_live(long *allocations_out, long *events_out, long *streams_out) {
    long a = 0, s = 0;
    pthread_mutex_lock(&lock);
    for (allocation *x = allocations; x; x = x->next)
        a += !(x->pooled && x->pool_state != POOL_LIVE);   /* a freed block is the pool's */
    for (struct CUstream_st *x = streams; x; x = x->next)
        if (!x->per_thread && !(x->ctx && x->ctx->legacy == x)) s++;
    pthread_mutex_unlock(&lock);
    *allocations_out = a;
    *events_out = __atomic_load_n(&live_events, __ATOMIC_RELAXED);
    *streams_out = s;
}

__attribute__((destructor)) static void report_unreleased(void) {
    if (!initialised) return;
    long a, e, s, m = cudasim_live_modules();
    cudasim_live(&a, &e, &s);
    if (!a && !e && !s && !m) return;
    const char *path = getenv("CUDASIM_REPORT");
    FILE *out = path ? fopen(path, "a") : stderr;
    if (!out) return;
    fprintf(out, "cudasim: at exit, never released: %ld allocations, %ld events, %ld streams, "
            "%ld modules\n", a, e, s, m);
    if (out != stderr) fclose(out);
}
