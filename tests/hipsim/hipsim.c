/*
 * hipsim — a stand-in for the HIP runtime (libamdhip64.so) that keeps the rules HIP 6/7
 * document for the calls arrayport makes, and fails as HIP fails, for machines without an
 * AMD GPU (issue 54). Built by the tests (tests/helpers/hipsim.py); its prototypes are its
 * own (no HIP header is at hand that is recent enough), and the numbers it answers with —
 * error codes, memory types, flags, attributes — are held to AMD's own bindings by
 * tests/test_hipsim.py, as arrayport's are by tests/test_hip_facts.py.
 *
 * What it keeps (tests/test_hipsim.py breaks each rule on purpose):
 *   - devices (HIPSIM_DEVICES, default 2) and the calling thread's current device
 *     (hipSetDevice / hipGetDevice; an ordinal out of range is hipErrorInvalidDevice);
 *   - device memory the host cannot read: hipMalloc returns an address reserved with no
 *     access (a host read is a SIGSEGV, as on a GPU), its bytes kept elsewhere; pinned
 *     (hipHostMalloc) and managed (hipMallocManaged) memory are host memory; each device
 *     has HIPSIM_DEVICE_MEMORY bytes (default 16 GiB): past them hipErrorOutOfMemory;
 *   - hipPointerGetAttributes with HIP 6's numbering (host 1, device 2, managed 3), and
 *     hipErrorInvalidValue for memory HIP does not know (pageable host memory);
 *   - asynchronous streams: each stream has a worker thread that runs its work in issue
 *     order, each item after HIPSIM_DELAY_US microseconds (default 2000), so a consumer that
 *     does not wait reads stale data; the null stream (0) of a device waits for the work
 *     queued on that device's other streams, and they wait for its work (HIP's blocking
 *     streams; hipStreamNonBlocking streams do not); hipStreamGetDevice names a stream's
 *     own device (the null stream's: the current one);
 *   - events: hipEventRecord on a stream of the current device, hipStreamWaitEvent (any
 *     device), hipEventQuery (hipErrorNotReady until done), hipEventSynchronize; a
 *     destroyed handle is hipErrorInvalidHandle;
 *   - copies: hipMemcpyAsync, hipMemcpy2DAsync (pitches at least the width and at most
 *     hipDeviceAttributeMaxPitch), hipMemcpyPeerAsync; the bounds of every allocation; the
 *     kinds (hipMemcpyDefault and the four directions, which must match the memory); an
 *     asynchronous copy from pageable memory reads it at once, one into it returns when
 *     done; hipMemcpy runs on the null stream and returns when done;
 *   - frees: hipFree and hipHostFree synchronize the memory's device first (HIP documents
 *     it; another device's work is not waited for), then the memory is gone: its address
 *     stays reserved with no access (the last 4,096 freed), and work that runs later on it
 *     is counted (freed_memory_accesses), not run;
 *   - at exit, a report of allocations, streams and events never released (stderr, or the
 *     file HIPSIM_REPORT names).
 * What it does not model: kernels, memory pools (hipMallocAsync), graphs, IPC, timing.
 */
#define _GNU_SOURCE
#include <pthread.h>
#include <stdint.h>
#include <stdio.h>
#include <stdlib.h>
#include <string.h>
#include <sys/mman.h>
#include <time.h>
#include <unistd.h>

#define SIM_EXPORT __attribute__((visibility("default")))
#define MAX_DEVICES 8

/* HIP's numbers (held to rocm-bindings-hip by tests/test_hipsim.py: hipsim_fact). */
enum {
    hipSuccess = 0, hipErrorInvalidValue = 1, hipErrorOutOfMemory = 2,
    hipErrorInvalidDevice = 101, hipErrorInvalidHandle = 400, hipErrorNotReady = 600,
    hipErrorNotSupported = 801
};
enum { hipMemoryTypeHost = 1, hipMemoryTypeDevice = 2, hipMemoryTypeManaged = 3 };
enum { hipMemcpyHostToHost = 0, hipMemcpyHostToDevice = 1, hipMemcpyDeviceToHost = 2,
       hipMemcpyDeviceToDevice = 3, hipMemcpyDefault = 4 };
enum { hipDeviceAttributeMaxPitch = 58 };
enum { hipStreamNonBlocking = 1, hipEventDisableTiming = 2, hipHostMallocPortable = 1,
       hipMemAttachGlobal = 1 };
#define HIPSIM_VERSION 70100000   /* HIP 7.1 (major * 10^7 + minor * 10^5 + patch) */

typedef struct {   /* hipPointerAttribute_t (HIP 6) */
    unsigned type;
    int device;
    void *devicePointer, *hostPointer;
    int isManaged;
    unsigned allocationFlags;
} hipPointerAttribute_t;

/* ---- counters and settings ---------------------------------------------------------------- */

static pthread_mutex_t lock = PTHREAD_MUTEX_INITIALIZER;
static pthread_cond_t changed = PTHREAD_COND_INITIALIZER;   /* any item finished */
static int devices = 2;
static long delay_us = 2000;
static long long device_memory = 16LL << 30;
static long long used[MAX_DEVICES];
static __thread int current = 0;

#define COUNTERS X(calls) X(host_synchronizations) X(device_synchronizations) \
    X(freed_memory_accesses) X(stale_handles) X(out_of_bounds)
#define X(name) static long count_##name;
COUNTERS
#undef X

static void configure(void) {
    static int done = 0;
    if (done) return;
    done = 1;
    const char *text;
    if ((text = getenv("HIPSIM_DEVICES")) && atoi(text) >= 1 && atoi(text) <= MAX_DEVICES)
        devices = atoi(text);
    if ((text = getenv("HIPSIM_DELAY_US")) && atol(text) >= 0) delay_us = atol(text);
    if ((text = getenv("HIPSIM_DEVICE_MEMORY")) && atoll(text) > 0)
        device_memory = atoll(text);
}

/* ---- memory ------------------------------------------------------------------------------- */

typedef struct allocation {
    struct allocation *next;
    char *base;            /* the address handed out */
    size_t size, mapped;
    unsigned type;         /* hipMemoryType */
    int device;
    char *bytes;           /* where the bytes are (device memory: elsewhere) */
    unsigned flags;
    int freed;
    struct allocation *next_freed;   /* the freed ones kept reserved, oldest first */
} allocation;

static allocation *allocations;
static long live_allocations;
/* Freed allocations stay reserved (a stale access is caught), the last KEPT_FREED of them:
 * an older one is given back for real, so that a long run's memory and look-ups stay
 * bounded (as the CUDA simulator keeps its last 4,096). */
enum { KEPT_FREED = 4096 };
static allocation *oldest_freed, *newest_freed;
static long kept_freed;

static void forget_oldest_freed(void) {   /* lock held */
    allocation *a = oldest_freed;
    oldest_freed = a->next_freed;
    if (oldest_freed == NULL) newest_freed = NULL;
    kept_freed--;
    for (allocation **link = &allocations; *link; link = &(*link)->next)
        if (*link == a) { *link = a->next; break; }
    munmap(a->base, a->mapped);
    free(a);
}

/* The allocation holding address, or NULL: the newest record holding it (a freed record's
 * addresses may have been mapped again since; the newer record is nearer the front). A
 * live allocation found moves to the front, and the next question about the same memory
 * is immediate, as the runtime's own look-up (a tree) is however much is allocated (the
 * CUDA simulator does the same): live allocations overlap no other live one, and each is
 * newer than any freed record it overlaps, so the order that matters is kept. No caller
 * walks the list while it asks. */
static allocation *find(const void *address) {
    for (allocation **link = &allocations; *link; link = &(*link)->next) {
        allocation *a = *link;
        if ((const char *)address >= a->base && (const char *)address < a->base + a->size) {
            if (a->freed) return a;
            *link = a->next;
            a->next = allocations;
            allocations = a;
            return a;
        }
    }
    return NULL;
}

static int add_allocation(void **out, size_t size, unsigned type, unsigned flags) {
    size_t page = (size_t)sysconf(_SC_PAGESIZE), mapped = (size + page - 1) / page * page;
    int device = type == hipMemoryTypeHost ? 0 : current;
    if (type == hipMemoryTypeDevice && used[device] + (long long)mapped > device_memory)
        return hipErrorOutOfMemory;
    allocation *a = calloc(1, sizeof *a);
    if (a == NULL) return hipErrorOutOfMemory;
    int protection = type == hipMemoryTypeDevice ? PROT_NONE : PROT_READ | PROT_WRITE;
    a->base = mmap(NULL, mapped, protection, MAP_PRIVATE | MAP_ANONYMOUS, -1, 0);
    a->bytes = type == hipMemoryTypeDevice ? calloc(1, mapped) : a->base;
    if (a->base == MAP_FAILED || a->bytes == NULL) {
        if (a->base != MAP_FAILED) munmap(a->base, mapped);
        free(a);
        return hipErrorOutOfMemory;
    }
    a->size = size, a->mapped = mapped, a->type = type, a->device = device, a->flags = flags;
    if (type == hipMemoryTypeDevice) used[device] += (long long)mapped;
    a->next = allocations, allocations = a;
    live_allocations++;
    *out = a->base;
    return hipSuccess;
}

/* Where ``n`` bytes at ``address`` are read or written: the bytes of the allocation holding
 * them, or the address itself (pageable host memory); NULL where they leave an allocation or
 * lie in freed memory (counted). */
static char *bytes_at(const void *address, size_t n) {
    allocation *a = find(address);
    if (a == NULL) return (char *)address;
    if (a->freed) { count_freed_memory_accesses++; return NULL; }
    size_t offset = (size_t)((const char *)address - a->base);
    if (n > a->size - offset) { count_out_of_bounds++; return NULL; }
    return a->bytes + offset;
}

/* ---- streams and their work ---------------------------------------------------------------- */

typedef struct item {
    struct item *next;
    long long number;                 /* issue order in its stream */
    int done;
    int refs;                         /* who still points at it (freed at 0, once done) */
    struct item *after[MAX_DEVICES + 1];  /* items this one waits for (other streams') */
    int waits;
    char *dst; const char *src;       /* a copy's addresses, looked up when it runs */
    char *staged;                     /* its source read at issue (pageable memory) */
    size_t width, height, dst_pitch, src_pitch;   /* a copy (height 0: none) */
} item;

/* An item lives while anything points at it: its stream's queue until it has run, the
 * stream's `last`, an event recorded after it, an item waiting for it, a host waiting for
 * it (lock held for both). */
static item *hold(item *it) {
    if (it) it->refs++;
    return it;
}

static void release(item *it) {
    if (it && --it->refs == 0) {
        free(it->staged);
        free(it);
    }
}

typedef struct stream {
    int magic, device, nonblocking, null, stopping;
    item *head, *tail;                /* queued, not yet run */
    item *last;                       /* the last item issued (done or not) */
    long long issued, finished;
    pthread_t worker;
    struct stream *next_of_device;
} stream;

enum { STREAM_MAGIC = 0x48535452, EVENT_MAGIC = 0x48455654 };
static stream *null_streams[MAX_DEVICES];
static stream *streams[MAX_DEVICES];   /* every stream of a device, null stream included */
static long live_streams, live_events;

/* Run a copy (lock held): its memory looked up now, so that memory freed since it was
 * queued is seen (counted: freed_memory_accesses) and not touched. */
static char *bytes_at(const void *address, size_t n);

static void run(item *it) {
    if (it->height == 0) return;
    size_t dst_span = it->dst_pitch * (it->height - 1) + it->width;
    size_t src_span = it->src_pitch * (it->height - 1) + it->width;
    char *out = bytes_at(it->dst, dst_span);
    const char *in = it->staged ? it->staged : bytes_at(it->src, src_span);
    if (out == NULL || in == NULL) return;
    for (size_t row = 0; row < it->height; row++)
        memcpy(out + row * it->dst_pitch,
               it->staged ? in + row * it->width : in + row * it->src_pitch, it->width);
}

static void *worker(void *argument) {
    stream *s = argument;
    pthread_mutex_lock(&lock);
    for (;;) {
        while (s->head == NULL && !s->stopping) pthread_cond_wait(&changed, &lock);
        if (s->head == NULL) break;
        item *it = s->head;
        int ready = 1;
        for (int k = 0; k < it->waits; k++) if (!it->after[k]->done) ready = 0;
        if (!ready) { pthread_cond_wait(&changed, &lock); continue; }
        pthread_mutex_unlock(&lock);
        if (delay_us) usleep((useconds_t)delay_us);
        pthread_mutex_lock(&lock);
        run(it);   /* under the lock: a free cannot pull the memory away mid-copy */
        free(it->staged), it->staged = NULL;
        it->done = 1;
        s->head = it->next;
        if (s->head == NULL) s->tail = NULL;
        s->finished++;
        for (int k = 0; k < it->waits; k++) release(it->after[k]);
        it->waits = 0;
        release(it);   /* the queue's */
        pthread_cond_broadcast(&changed);
    }
    pthread_mutex_unlock(&lock);
    return NULL;
}

static stream *new_stream(int device, int nonblocking, int null) {
    stream *s = calloc(1, sizeof *s);
    s->magic = STREAM_MAGIC, s->device = device, s->nonblocking = nonblocking, s->null = null;
    pthread_create(&s->worker, NULL, worker, s);
    s->next_of_device = streams[device], streams[device] = s;
    return s;
}

/* The stream a handle names (0: the current device's null stream); NULL where it is none. */
static stream *stream_of(void *handle) {
    if (handle == NULL) {
        if (null_streams[current] == NULL) null_streams[current] = new_stream(current, 0, 1);
        return null_streams[current];
    }
    stream *s = handle;
    for (int d = 0; d < devices; d++)
        for (stream *t = streams[d]; t; t = t->next_of_device) if (t == s) return s;
    count_stale_handles++;
    return NULL;
}

/* Queue ``it`` on ``s`` (lock held): after the null stream's last work for a blocking
 * stream, after every blocking stream's last work for the null stream. */
static void issue(stream *s, item *it) {
    if (s->null) {
        for (stream *t = streams[s->device]; t; t = t->next_of_device)
            if (t != s && !t->nonblocking && t->last && !t->last->done && it->waits < MAX_DEVICES)
                it->after[it->waits++] = hold(t->last);
    } else if (!s->nonblocking) {
        stream *n = null_streams[s->device];
        if (n && n->last && !n->last->done) it->after[it->waits++] = hold(n->last);
    }
    it->number = ++s->issued;
    if (s->tail) s->tail->next = it; else s->head = it;
    hold(it);   /* the queue's, released once it has run */
    release(s->last);
    s->tail = it, s->last = hold(it);
    pthread_cond_broadcast(&changed);
}

static void wait_for(item *it) {   /* lock held */
    count_host_synchronizations++;
    hold(it);   /* the host's, while it waits (the lock is let go meanwhile) */
    while (!it->done) pthread_cond_wait(&changed, &lock);
    release(it);
}

static void synchronize_device(int device) {   /* lock held */
    count_device_synchronizations++;
    for (stream *s = streams[device]; s; s = s->next_of_device)
        if (s->last) wait_for(s->last);
}

/* ---- the runtime's entry points ------------------------------------------------------------ */

#define ENTER() pthread_mutex_lock(&lock); configure(); count_calls++
#define RETURN(value) do { int result_ = (value); pthread_mutex_unlock(&lock); \
                           return result_; } while (0)

SIM_EXPORT int hipRuntimeGetVersion(int *version) {
    ENTER();
    if (version == NULL) RETURN(hipErrorInvalidValue);
    *version = HIPSIM_VERSION;
    RETURN(hipSuccess);
}

SIM_EXPORT int hipGetDeviceCount(int *count) {
    ENTER();
    if (count == NULL) RETURN(hipErrorInvalidValue);
    *count = devices;
    RETURN(hipSuccess);
}

SIM_EXPORT int hipGetDevice(int *device) {
    ENTER();
    if (device == NULL) RETURN(hipErrorInvalidValue);
    *device = current;
    RETURN(hipSuccess);
}

SIM_EXPORT int hipSetDevice(int device) {
    ENTER();
    if (device < 0 || device >= devices) RETURN(hipErrorInvalidDevice);
    current = device;
    RETURN(hipSuccess);
}

SIM_EXPORT int hipDeviceGetAttribute(int *value, int attribute, int device) {
    ENTER();
    if (value == NULL) RETURN(hipErrorInvalidValue);
    if (device < 0 || device >= devices) RETURN(hipErrorInvalidDevice);
    if (attribute != hipDeviceAttributeMaxPitch) RETURN(hipErrorNotSupported);
    *value = 2147483647;
    RETURN(hipSuccess);
}

SIM_EXPORT int hipDeviceSynchronize(void) {
    ENTER();
    synchronize_device(current);
    RETURN(hipSuccess);
}

SIM_EXPORT int hipMalloc(void **out, size_t size) {
    ENTER();
    if (out == NULL) RETURN(hipErrorInvalidValue);
    if (size == 0) { *out = NULL; RETURN(hipSuccess); }
    RETURN(add_allocation(out, size, hipMemoryTypeDevice, 0));
}

SIM_EXPORT int hipMallocManaged(void **out, size_t size, unsigned flags) {
    ENTER();
    if (out == NULL || size == 0 || flags != hipMemAttachGlobal) RETURN(hipErrorInvalidValue);
    RETURN(add_allocation(out, size, hipMemoryTypeManaged, flags));
}

SIM_EXPORT int hipHostMalloc(void **out, size_t size, unsigned flags) {
    ENTER();
    if (out == NULL) RETURN(hipErrorInvalidValue);
    if (size == 0) { *out = NULL; RETURN(hipSuccess); }
    RETURN(add_allocation(out, size, hipMemoryTypeHost, flags));
}

static int free_memory(void *address, int host) {   /* lock held */
    if (address == NULL) return hipSuccess;
    allocation *a = find(address);
    if (a == NULL || a->freed || a->base != (char *)address
            || (a->type == hipMemoryTypeHost) != host)
        return hipErrorInvalidValue;
    /* Documented: the free synchronizes the device — its own device, and no promise about
     * another device's work that reads the memory (a peer copy on its stream): the weaker
     * reading, kept; such work finds the memory gone when it runs (freed_memory_accesses). */
    synchronize_device(a->device);
    a->freed = 1;
    live_allocations--;
    if (a->type == hipMemoryTypeDevice) {
        used[a->device] -= (long long)a->mapped;
        free(a->bytes);
        a->bytes = NULL;
    } else {   /* the address stays reserved, no access: a host read is a SIGSEGV */
        mprotect(a->base, a->mapped, PROT_NONE);
        madvise(a->base, a->mapped, MADV_DONTNEED);
    }
    if (newest_freed) newest_freed->next_freed = a; else oldest_freed = a;
    newest_freed = a;
    if (++kept_freed > KEPT_FREED) forget_oldest_freed();
    return hipSuccess;
}

SIM_EXPORT int hipFree(void *address) {
    ENTER();
    RETURN(free_memory(address, 0));
}

SIM_EXPORT int hipHostFree(void *address) {
    ENTER();
    RETURN(free_memory(address, 1));
}

SIM_EXPORT int hipPointerGetAttributes(hipPointerAttribute_t *attributes, const void *address) {
    ENTER();
    if (attributes == NULL) RETURN(hipErrorInvalidValue);
    allocation *a = find(address);
    if (a == NULL || a->freed) RETURN(hipErrorInvalidValue);   /* memory HIP does not know */
    memset(attributes, 0, sizeof *attributes);
    attributes->type = a->type;
    attributes->device = a->device;
    attributes->devicePointer = (void *)address;
    attributes->hostPointer = a->type == hipMemoryTypeDevice ? NULL : (void *)address;
    attributes->isManaged = a->type == hipMemoryTypeManaged;
    attributes->allocationFlags = a->flags;
    RETURN(hipSuccess);
}

SIM_EXPORT int hipStreamCreateWithFlags(void **out, unsigned flags) {
    ENTER();
    if (out == NULL || (flags & ~1u)) RETURN(hipErrorInvalidValue);
    *out = new_stream(current, (flags & hipStreamNonBlocking) != 0, 0);
    live_streams++;
    RETURN(hipSuccess);
}

SIM_EXPORT int hipStreamCreate(void **out) {
    return hipStreamCreateWithFlags(out, 0);
}

SIM_EXPORT int hipStreamDestroy(void *handle) {
    ENTER();
    stream *s = handle ? stream_of(handle) : NULL;
    if (s == NULL || s->null) RETURN(hipErrorInvalidHandle);
    if (s->last) wait_for(s->last);   /* its work finishes first, as HIP's does */
    for (stream **link = &streams[s->device]; *link; link = &(*link)->next_of_device)
        if (*link == s) { *link = s->next_of_device; break; }
    s->stopping = 1, s->magic = 0;
    pthread_cond_broadcast(&changed);
    pthread_mutex_unlock(&lock);
    pthread_join(s->worker, NULL);
    pthread_mutex_lock(&lock);
    release(s->last), s->last = NULL;
    live_streams--;
    RETURN(hipSuccess);   /* the record stays (freed never): a stale handle is recognised */
}

/* The device a stream belongs to (the null stream: the current device's). */
SIM_EXPORT int hipStreamGetDevice(void *handle, int *device) {
    ENTER();
    stream *s = stream_of(handle);
    if (s == NULL) RETURN(hipErrorInvalidHandle);
    if (device == NULL) RETURN(hipErrorInvalidValue);
    *device = s->device;
    RETURN(hipSuccess);
}

SIM_EXPORT int hipStreamSynchronize(void *handle) {
    ENTER();
    stream *s = stream_of(handle);
    if (s == NULL) RETURN(hipErrorInvalidHandle);
    if (s->last) wait_for(s->last);
    RETURN(hipSuccess);
}

typedef struct event {
    int magic, device;
    unsigned flags;
    item *marker;
    struct event *next_dead;   /* destroyed ones, oldest first */
} event;

/* Destroyed events stay recognisable as stale (their records kept), the last KEPT_FREED of
 * them; an older record is used again for a new event, so that a long run's memory stays
 * bounded (HIP reuses its handles too). */
static event *oldest_dead, *newest_dead;
static long dead_events;

static event *event_of(void *handle) {   /* lock held */
    event *e = handle;
    if (e == NULL || e->magic != EVENT_MAGIC) { count_stale_handles++; return NULL; }
    return e;
}

SIM_EXPORT int hipEventCreateWithFlags(void **out, unsigned flags) {
    ENTER();
    if (out == NULL || (flags & ~0x7u)) RETURN(hipErrorInvalidValue);
    event *e;
    if (dead_events > KEPT_FREED) {
        e = oldest_dead;
        oldest_dead = e->next_dead;
        if (oldest_dead == NULL) newest_dead = NULL;
        dead_events--;
        memset(e, 0, sizeof *e);
    } else {
        e = calloc(1, sizeof *e);
    }
    e->magic = EVENT_MAGIC, e->device = current, e->flags = flags;
    *out = e;
    live_events++;
    RETURN(hipSuccess);
}

SIM_EXPORT int hipEventDestroy(void *handle) {
    ENTER();
    event *e = event_of(handle);
    if (e == NULL) RETURN(hipErrorInvalidHandle);
    e->magic = 0;   /* kept: a later use is recognised as stale (the last KEPT_FREED) */
    release(e->marker), e->marker = NULL;
    e->next_dead = NULL;
    if (newest_dead) newest_dead->next_dead = e; else oldest_dead = e;
    newest_dead = e;
    dead_events++;
    live_events--;
    RETURN(hipSuccess);
}

SIM_EXPORT int hipEventRecord(void *handle, void *stream_handle) {
    ENTER();
    event *e = event_of(handle);
    stream *s = stream_of(stream_handle);
    if (e == NULL || s == NULL) RETURN(hipErrorInvalidHandle);
    if (s->device != e->device) RETURN(hipErrorInvalidHandle);   /* another device's stream */
    item *marker = calloc(1, sizeof *marker);
    issue(s, marker);
    release(e->marker);
    e->marker = hold(marker);
    RETURN(hipSuccess);
}

SIM_EXPORT int hipEventQuery(void *handle) {
    ENTER();
    event *e = event_of(handle);
    if (e == NULL) RETURN(hipErrorInvalidHandle);
    RETURN(e->marker == NULL || e->marker->done ? hipSuccess : hipErrorNotReady);
}

SIM_EXPORT int hipEventSynchronize(void *handle) {
    ENTER();
    event *e = event_of(handle);
    if (e == NULL) RETURN(hipErrorInvalidHandle);
    if (e->marker) wait_for(e->marker);
    RETURN(hipSuccess);
}

SIM_EXPORT int hipStreamWaitEvent(void *stream_handle, void *handle, unsigned flags) {
    ENTER();
    stream *s = stream_of(stream_handle);
    event *e = event_of(handle);
    if (s == NULL || e == NULL) RETURN(hipErrorInvalidHandle);
    if (flags != 0) RETURN(hipErrorInvalidValue);
    if (e->marker && !e->marker->done) {
        item *wait = calloc(1, sizeof *wait);
        wait->after[wait->waits++] = hold(e->marker);
        issue(s, wait);
    }
    RETURN(hipSuccess);
}

/* A copy of ``height`` rows of ``width`` bytes on stream ``s``: checked, then queued (from
 * pageable memory the source is read now; into it, the call returns when done). */
static int copy(char *dst, size_t dst_pitch, const char *src, size_t src_pitch, size_t width,
                size_t height, int kind, stream *s) {
    if (s == NULL) return hipErrorInvalidHandle;
    if (kind < hipMemcpyHostToHost || kind > hipMemcpyDefault) return hipErrorInvalidValue;
    if (width == 0 || height == 0) return hipSuccess;
    if (dst_pitch < width || src_pitch < width || dst_pitch > 2147483647u
            || src_pitch > 2147483647u)
        return hipErrorInvalidValue;
    size_t dst_span = dst_pitch * (height - 1) + width, src_span = src_pitch * (height - 1) + width;
    allocation *from = find(src), *to = find(dst);
    int from_device = from && from->type == hipMemoryTypeDevice;
    int to_device = to && to->type == hipMemoryTypeDevice;
    if ((kind == hipMemcpyHostToDevice && (from_device || !to_device))
            || (kind == hipMemcpyDeviceToHost && (!from_device || to_device))
            || (kind == hipMemcpyDeviceToDevice && (!from_device || !to_device))
            || (kind == hipMemcpyHostToHost && (from_device || to_device)))
        return hipErrorInvalidValue;   /* a direction the memory does not have */
    char *out = bytes_at(dst, dst_span);
    const char *in = bytes_at(src, src_span);
    if (out == NULL || in == NULL) return hipErrorInvalidValue;
    item *it = calloc(1, sizeof *it);
    it->dst = dst, it->src = src, it->width = width, it->height = height;
    it->dst_pitch = dst_pitch, it->src_pitch = src_pitch;
    if (from == NULL) {   /* pageable: read at once */
        it->staged = malloc(width * height);
        for (size_t row = 0; row < height; row++)
            memcpy(it->staged + row * width, in + row * src_pitch, width);
    }
    issue(s, it);
    if (to == NULL) wait_for(it);   /* into pageable memory: done on return */
    return hipSuccess;
}

SIM_EXPORT int hipMemcpyAsync(void *dst, const void *src, size_t n, int kind, void *handle) {
    ENTER();
    RETURN(copy(dst, n, src, n, n, 1, kind, stream_of(handle)));
}

/* hipMemcpy: queued on the current device's null stream (so after the work of its blocking
 * streams) and done when the call returns, whatever memory it copies into. */
SIM_EXPORT int hipMemcpy(void *dst, const void *src, size_t n, int kind) {
    ENTER();
    stream *s = stream_of(NULL);
    int status = copy(dst, n, src, n, n, 1, kind, s);
    if (status == hipSuccess && s->last) wait_for(s->last);
    RETURN(status);
}

SIM_EXPORT int hipMemcpy2DAsync(void *dst, size_t dst_pitch, const void *src, size_t src_pitch,
                                size_t width, size_t height, int kind, void *handle) {
    ENTER();
    RETURN(copy(dst, dst_pitch, src, src_pitch, width, height, kind, stream_of(handle)));
}

SIM_EXPORT int hipMemcpyPeerAsync(void *dst, int dst_device, const void *src, int src_device,
                                  size_t n, void *handle) {
    ENTER();
    if (dst_device < 0 || dst_device >= devices || src_device < 0 || src_device >= devices)
        RETURN(hipErrorInvalidDevice);
    allocation *from = find(src), *to = find(dst);
    if (!from || !to || from->device != src_device || to->device != dst_device)
        RETURN(hipErrorInvalidValue);
    RETURN(copy(dst, n, src, n, n, 1, hipMemcpyDeviceToDevice, stream_of(handle)));
}

/* ---- the simulator's own controls ---------------------------------------------------------- */

SIM_EXPORT void hipsim_set_delay_us(long microseconds) {
    pthread_mutex_lock(&lock); configure(); delay_us = microseconds; pthread_mutex_unlock(&lock);
}

SIM_EXPORT void hipsim_set_device_memory(long long nbytes) {
    pthread_mutex_lock(&lock); configure(); device_memory = nbytes > 0 ? nbytes : 16LL << 30;
    pthread_mutex_unlock(&lock);
}

SIM_EXPORT int hipsim_counters(const char **names, long *values, int most) {
    int n = 0;
    pthread_mutex_lock(&lock);
#define X(name) if (n < most) { names[n] = #name; values[n++] = count_##name; }
    COUNTERS
#undef X
    pthread_mutex_unlock(&lock);
    return n;
}

SIM_EXPORT void hipsim_live(long *allocations_out, long *events_out, long *streams_out) {
    pthread_mutex_lock(&lock);
    *allocations_out = live_allocations, *events_out = live_events, *streams_out = live_streams;
    pthread_mutex_unlock(&lock);
}

/* The numbers this simulator answers with, by HIP's names (tests hold them to AMD's
 * bindings); -1 for a name it does not know. */
SIM_EXPORT long hipsim_fact(const char *name) {
    static const struct { const char *name; long value; } facts[] = {
        {"hipSuccess", hipSuccess}, {"hipErrorInvalidValue", hipErrorInvalidValue},
        {"hipErrorOutOfMemory", hipErrorOutOfMemory},
        {"hipErrorInvalidDevice", hipErrorInvalidDevice},
        {"hipErrorInvalidHandle", hipErrorInvalidHandle},
        {"hipErrorNotReady", hipErrorNotReady}, {"hipErrorNotSupported", hipErrorNotSupported},
        {"hipMemoryTypeHost", hipMemoryTypeHost}, {"hipMemoryTypeDevice", hipMemoryTypeDevice},
        {"hipMemoryTypeManaged", hipMemoryTypeManaged},
        {"hipMemcpyHostToHost", hipMemcpyHostToHost},
        {"hipMemcpyHostToDevice", hipMemcpyHostToDevice},
        {"hipMemcpyDeviceToHost", hipMemcpyDeviceToHost},
        {"hipMemcpyDeviceToDevice", hipMemcpyDeviceToDevice},
        {"hipMemcpyDefault", hipMemcpyDefault},
        {"hipDeviceAttributeMaxPitch", hipDeviceAttributeMaxPitch},
        {"hipStreamNonBlocking", hipStreamNonBlocking},
        {"hipEventDisableTiming", hipEventDisableTiming},
        {"hipHostMallocPortable", hipHostMallocPortable},
        {"hipMemAttachGlobal", hipMemAttachGlobal},
        {"sizeof(hipPointerAttribute_t)", (long)sizeof(hipPointerAttribute_t)},
    };
    for (size_t i = 0; i < sizeof facts / sizeof facts[0]; i++)
        if (strcmp(facts[i].name, name) == 0) return facts[i].value;
    return -1;
}

__attribute__((destructor)) static void report(void) {
    if (live_allocations == 0 && live_events == 0 && live_streams == 0) return;
    const char *path = getenv("HIPSIM_REPORT");
    FILE *out = path ? fopen(path, "w") : stderr;
    if (out == NULL) return;
    fprintf(out, "hipsim: never released: %ld allocations, %ld events, %ld streams\n",
            live_allocations, live_events, live_streams);
    if (out != stderr) fclose(out);
}
