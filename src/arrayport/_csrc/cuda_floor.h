/*
 * cuda_floor.h — the CUDA driver's floor under arrayport's stream order and device imports:
 * the driver entry points a stream wait and a CUDA Array Interface import call, resolved
 * once (cuGetProcAddress, from the driver library the Python layer opened: gpu/cuda.py) and
 * called from C, with no Python in between.
 *
 * What it owns, for the life of the process (given back by ap_cuda_floor_close, at exit):
 *   - each device's primary context, retained once (the context the CUDA runtime, and so
 *     PyTorch, CuPy, JAX, use; arrayport works in it and keeps it, as the runtime does);
 *   - one event per context, reused by every stream wait in that context: a wait uses the
 *     event's state at the time of the call, later records do not affect it (documented),
 *     so record-then-wait under the floor's lock can reuse it at once.
 * What it states: which stream values name a device's default stream (NULL, 1
 * CU_STREAM_LEGACY, 2 CU_STREAM_PER_THREAD: the current context's, so the device's primary
 * context is made current for them), and that a stream handle belongs to the context the
 * driver names (cuStreamGetCtx); where memory lives, read from cuPointerGetAttributes's
 * answer (ap_cuda_location_of), and which device a thread works on. A device copy's calls
 * (a pool allocation and a stream-ordered free, the transfer, an allocation's extent, a host
 * wait for a copy into host memory, the launch of one of
 * arrayport's kernels — their modules loaded and unloaded by gpu/kernels, their functions
 * published here with the context's id, so a context made again is never launched into).
 * It decides nothing: when to wait is the core's stream order (_core_streams.pxi), when a
 * copy is made here the core's _core_device_copy.pxi, the kernel's plan the core's
 * _csrc/device_copy_plan.h, what memory to hold gpu/held_memory.py's.
 *
 * The declarations are arrayport's own (no cuda.h): CUresult is an int, handles pointers.
 * Each entry point is asked for with the CUDA version whose ABI is declared here (12.0:
 * cuCtxPushCurrent_v2, cuEventDestroy_v2, cuDevicePrimaryCtxRelease_v2, cuStreamGetCtx).
 * Errors come back as the driver's code with the entry point's name (ap_cuda_failed), for
 * the Cython side to raise the BufferError the Python driver raises for the same call.
 *
 * Threads: the core calls in without the GIL (a driver call may block: a full command queue,
 * a context's creation), so a mutex guards the tables, and the name of a failed call is
 * the calling thread's own. After fork the child's floor is off (ap_cuda_ready 0): the
 * driver's state does not survive a fork, and the Python layer refuses it there. On
 * Windows the floor is not built (no fork, another lock API): it stays off, and the ctypes
 * calls serve.
 *
 * Contexts reset or destroyed by someone else: cuDevicePrimaryCtxReset (cudaDeviceReset)
 * destroys every event of a primary context and keeps its handle; a destroyed context's
 * handle may come back for a new one. So each reused event is kept with its context's id
 * (cuCtxGetId, unique in the process and new after a reset): an event whose context has
 * another id now is dead with its context, never used or destroyed again, and a new one
 * is made.
 */
#ifndef ARRAYPORT_CUDA_FLOOR_H
#define ARRAYPORT_CUDA_FLOOR_H

#include <stdint.h>
#include <stdlib.h>
#include <string.h>

#include "floor_platform.h"

#include "arrayport/dlpack_abi.h"

typedef int ap_cu_result;
typedef void *ap_cu_context;
typedef void *ap_cu_stream;
typedef void *ap_cu_event;

#define AP_CU_EVENT_DISABLE_TIMING 0x2
#define AP_CU_ERROR_NOT_FOUND 500
#define AP_CU_ERROR_INVALID_CONTEXT 201
/* cuPointerGetAttributes: the attributes asked, and the memory types it answers. */
#define AP_CU_POINTER_ATTRIBUTE_MEMORY_TYPE 2
#define AP_CU_POINTER_ATTRIBUTE_IS_MANAGED 8
#define AP_CU_POINTER_ATTRIBUTE_DEVICE_ORDINAL 9
#define AP_CU_POINTER_ATTRIBUTE_RANGE_START_ADDR 11
#define AP_CU_POINTER_ATTRIBUTE_RANGE_SIZE 12
#define AP_CU_MEMORYTYPE_HOST 1
#define AP_CU_MEMORYTYPE_DEVICE 2
#define AP_CU_MEMORYTYPE_UNIFIED 4
/* Not a driver code: the address is no memory CUDA knows (not device, pinned or managed). */
#define AP_CU_UNKNOWN_MEMORY (-1)
#define AP_CU_MAX_DEVICES 64
#define AP_CU_VERSION 12000   /* the ABI declared below */

/* cuGetProcAddress (CUDA 11.3) and _v2 (12.0, with a status out). */
typedef ap_cu_result (*ap_cu_get_proc_v1)(const char *, void **, int, unsigned long long);
typedef ap_cu_result (*ap_cu_get_proc_v2)(const char *, void **, int, unsigned long long,
                                          int *);

static struct {
    ap_cu_result (*DeviceGet)(int *, int);
    ap_cu_result (*DevicePrimaryCtxRetain)(ap_cu_context *, int);
    ap_cu_result (*DevicePrimaryCtxRelease)(int);
    ap_cu_result (*CtxGetCurrent)(ap_cu_context *);
    ap_cu_result (*CtxPushCurrent)(ap_cu_context);
    ap_cu_result (*CtxPopCurrent)(ap_cu_context *);
    ap_cu_result (*StreamGetCtx)(ap_cu_stream, ap_cu_context *);
    ap_cu_result (*EventCreate)(ap_cu_event *, unsigned);
    ap_cu_result (*EventRecord)(ap_cu_event, ap_cu_stream);
    ap_cu_result (*EventDestroy)(ap_cu_event);
    ap_cu_result (*StreamWaitEvent)(ap_cu_stream, ap_cu_event, unsigned);
    ap_cu_result (*PointerGetAttributes)(unsigned, int *, void **, unsigned long long);
    ap_cu_result (*CtxGetDevice)(int *);
    ap_cu_result (*CtxGetId)(ap_cu_context, unsigned long long *);
    ap_cu_result (*MemAllocFromPoolAsync)(unsigned long long *, size_t, void *, ap_cu_stream);
    ap_cu_result (*MemcpyAsync)(unsigned long long, unsigned long long, size_t, ap_cu_stream);
    ap_cu_result (*MemGetAddressRange)(unsigned long long *, size_t *, unsigned long long);
    ap_cu_result (*LaunchKernel)(void *, unsigned, unsigned, unsigned, unsigned, unsigned,
                                 unsigned, unsigned, ap_cu_stream, void **, void **);
    ap_cu_result (*StreamSynchronize)(ap_cu_stream);
    ap_cu_result (*MemFreeAsync)(unsigned long long, ap_cu_stream);
} ap_cu;

/* How many of arrayport's kernels the floor can launch (their functions published to it:
 * ap_cuda_publish_kernel; which is which is the caller's: _core_kernel_plan.pxi). */
#define AP_CU_KERNELS 2

/* A device's published kernel functions, with the context their module was loaded into and
 * that context's id then (a function of a context made again since is dead with it). */
typedef struct {
    ap_cu_context context;
    unsigned long long context_id;
    void *function[AP_CU_KERNELS];
} ap_cu_device_kernels;

/* A reused event, with the context it was made in and that context's id then. */
typedef struct {
    ap_cu_context context;
    unsigned long long context_id;
    ap_cu_event event;
} ap_cu_context_event;

static struct {
    int ready;                                    /* resolved, and not a fork's child */
    ap_floor_lock_t lock;
    ap_cu_context primary[AP_CU_MAX_DEVICES];     /* retained once, NULL until then */
    int device_ids[AP_CU_MAX_DEVICES];            /* cuDeviceGet's answer per ordinal */
    ap_cu_context_event *events;                  /* one reused event per context */
    size_t n_events, events_capacity;
    long stream_waits;                            /* made by the floor (tests, benchmarks) */
    ap_cu_device_kernels kernels[AP_CU_MAX_DEVICES];  /* published; loaded by gpu/kernels */
    long launches;                                /* made by the floor (tests, benchmarks) */
} ap_cuda = {0, AP_FLOOR_LOCK_INIT, {0}, {0}, NULL, 0, 0, 0, {{0}}, 0};

/* The entry point a failed call named (for the error message), set with every failure, per
 * thread (calls run without the GIL). */
static AP_THREAD_LOCAL const char *ap_cuda_failed = "";

/* A device copy's session (ap_cuda_session_enter .. _exit, on the calling thread): device
 * `ordinal`'s primary context made current once, its id read once, and the stream the copy
 * runs on, once the driver has said it is that context's. While it lasts, the floor's calls
 * for that device on this thread skip the questions it answers (which context is current,
 * which context a stream or an event belongs to, whether the context was made again):
 * nothing else can change them on this thread meanwhile. The driver's own rules are
 * unchanged; only repeated questions go. */
typedef struct {
    int ordinal;
    ap_cu_context context;
    unsigned long long context_id;
    uintptr_t stream;            /* a handle known to be `context`'s; 0 until one is */
    int pushed;
} ap_cuda_session;

static AP_THREAD_LOCAL ap_cuda_session *ap_cuda_current_session = NULL;

/* The calling thread's session for device `ordinal`, or NULL. */
static inline ap_cuda_session *ap_cuda_session_of(int ordinal) {
    ap_cuda_session *session = ap_cuda_current_session;
    return session != NULL && session->ordinal == ordinal ? session : NULL;
}

/* Whether `stream` runs in `session`'s context, as far as the session knows without
 * asking: a default-stream value (that context's, made current), or the session's own. */
static inline int ap_cuda_session_knows(const ap_cuda_session *session, uintptr_t stream) {
    return stream <= 2 || (session->stream != 0 && stream == session->stream);
}

#if AP_FLOOR_BUILT
static void ap_cuda_after_fork_in_child(void) {
    /* The parent's contexts and events are not this process's; nothing of them is touched
     * (not even freed: the parent frees its own). The lock may have been held by one of
     * the parent's threads: a new one. */
    ap_cuda.ready = 0;
    pthread_mutex_t fresh = PTHREAD_MUTEX_INITIALIZER;
    ap_cuda.lock = fresh;
}
#endif

/* Resolve every entry point through `get_proc` (cuGetProcAddress_v2 when `with_status`,
 * else the 11.3 one). 0, or the driver's error with ap_cuda_failed naming the entry point
 * it could not give (the floor then stays off: the Python driver serves). */
static ap_cu_result ap_cuda_floor_install(void *get_proc, int with_status) {
    static int fork_rule = 0;
    const struct { const char *name; void **slot; } wanted[] = {
        {"cuDeviceGet", (void **)&ap_cu.DeviceGet},
        {"cuDevicePrimaryCtxRetain", (void **)&ap_cu.DevicePrimaryCtxRetain},
        {"cuDevicePrimaryCtxRelease", (void **)&ap_cu.DevicePrimaryCtxRelease},
        {"cuCtxGetCurrent", (void **)&ap_cu.CtxGetCurrent},
        {"cuCtxPushCurrent", (void **)&ap_cu.CtxPushCurrent},
        {"cuCtxPopCurrent", (void **)&ap_cu.CtxPopCurrent},
        {"cuStreamGetCtx", (void **)&ap_cu.StreamGetCtx},
        {"cuEventCreate", (void **)&ap_cu.EventCreate},
        {"cuEventRecord", (void **)&ap_cu.EventRecord},
        {"cuEventDestroy", (void **)&ap_cu.EventDestroy},
        {"cuStreamWaitEvent", (void **)&ap_cu.StreamWaitEvent},
        {"cuPointerGetAttributes", (void **)&ap_cu.PointerGetAttributes},
        {"cuCtxGetDevice", (void **)&ap_cu.CtxGetDevice},
        {"cuCtxGetId", (void **)&ap_cu.CtxGetId},
        {"cuMemAllocFromPoolAsync", (void **)&ap_cu.MemAllocFromPoolAsync},
        {"cuMemcpyAsync", (void **)&ap_cu.MemcpyAsync},
        {"cuMemGetAddressRange", (void **)&ap_cu.MemGetAddressRange},
        {"cuLaunchKernel", (void **)&ap_cu.LaunchKernel},
        {"cuStreamSynchronize", (void **)&ap_cu.StreamSynchronize},
        {"cuMemFreeAsync", (void **)&ap_cu.MemFreeAsync},
    };
    if (!AP_FLOOR_BUILT) {
        ap_cuda_failed = "the compiled floor (not built on this platform)";
        return AP_CU_ERROR_NOT_FOUND;
    }
    if (get_proc == NULL) {
        ap_cuda_failed = "cuGetProcAddress";
        return AP_CU_ERROR_NOT_FOUND;
    }
    for (size_t i = 0; i < sizeof wanted / sizeof wanted[0]; i++) {
        void *entry = NULL;
        int status = 0;
        ap_cu_result result = with_status
            ? ((ap_cu_get_proc_v2)get_proc)(wanted[i].name, &entry, AP_CU_VERSION, 0, &status)
            : ((ap_cu_get_proc_v1)get_proc)(wanted[i].name, &entry, AP_CU_VERSION, 0);
        if (result != 0 || entry == NULL) {
            ap_cuda_failed = wanted[i].name;
            return result != 0 ? result : AP_CU_ERROR_NOT_FOUND;
        }
        *wanted[i].slot = entry;
    }
#if AP_FLOOR_BUILT
    if (!fork_rule) {
        pthread_atfork(NULL, NULL, ap_cuda_after_fork_in_child);
        fork_rule = 1;
    }
#endif
    ap_cuda.ready = 1;
    return 0;
}

/* Whether `stream` is a default-stream value: the current context's stream, not a handle. */
static inline int ap_cuda_is_default_stream(uintptr_t stream) { return stream <= 2; }

/* Device `ordinal`'s primary context, retained on first use (lock held by the caller). */
static ap_cu_result ap_cuda_primary_locked(int ordinal, ap_cu_context *out) {
    if (ordinal < 0 || ordinal >= AP_CU_MAX_DEVICES) {
        ap_cuda_failed = "cuDeviceGet";
        return 101;   /* CUDA_ERROR_INVALID_DEVICE */
    }
    if (ap_cuda.primary[ordinal] == NULL) {
        int device = 0;
        ap_cu_context context = NULL;
        ap_cu_result result = ap_cu.DeviceGet(&device, ordinal);
        if (result != 0) { ap_cuda_failed = "cuDeviceGet"; return result; }
        result = ap_cu.DevicePrimaryCtxRetain(&context, device);
        if (result != 0) { ap_cuda_failed = "cuDevicePrimaryCtxRetain"; return result; }
        ap_cuda.device_ids[ordinal] = device;
        ap_cuda.primary[ordinal] = context;
    }
    *out = ap_cuda.primary[ordinal];
    return 0;
}

static ap_cu_result ap_cuda_primary_context(int ordinal, ap_cu_context *out) {
    ap_floor_lock(&ap_cuda.lock);
    ap_cu_result result = ap_cuda_primary_locked(ordinal, out);
    ap_floor_unlock(&ap_cuda.lock);
    return result;
}

/* `context` current on this thread: pushed unless it is current already (*pushed says). */
static ap_cu_result ap_cuda_make_current(ap_cu_context context, int *pushed) {
    ap_cu_context current = NULL;
    *pushed = 0;
    if (ap_cu.CtxGetCurrent(&current) == 0 && current != NULL && current == context)
        return 0;
    ap_cu_result result = ap_cu.CtxPushCurrent(context);
    if (result != 0) { ap_cuda_failed = "cuCtxPushCurrent_v2"; return result; }
    *pushed = 1;
    return 0;
}

static void ap_cuda_restore_current(int pushed) {
    if (pushed) {
        ap_cu_context dropped = NULL;
        ap_cu.CtxPopCurrent(&dropped);
    }
}

/* The reused event of `context` (current) while its id is `id`, made on first use, and made
 * again when the context's id has changed since (reset, or a new context at the same handle:
 * the old event went with the old context). Lock held by the caller. */
static ap_cu_result ap_cuda_event_of_locked(ap_cu_context context, unsigned long long id,
                                            ap_cu_event *out) {
    size_t slot = ap_cuda.n_events;
    for (size_t i = 0; i < ap_cuda.n_events; i++)
        if (ap_cuda.events[i].context == context) {
            if (ap_cuda.events[i].context_id == id) { *out = ap_cuda.events[i].event; return 0; }
            slot = i;   /* dead with its context: replaced, never destroyed */
            break;
        }
    if (slot == ap_cuda.n_events && ap_cuda.n_events == ap_cuda.events_capacity) {
        size_t capacity = ap_cuda.events_capacity ? 2 * ap_cuda.events_capacity : 8;
        ap_cu_context_event *grown = realloc(ap_cuda.events, capacity * sizeof *grown);
        if (grown == NULL) { ap_cuda_failed = "cuEventCreate"; return 2; }  /* OUT_OF_MEMORY */
        ap_cuda.events = grown;
        ap_cuda.events_capacity = capacity;
    }
    ap_cu_event event = NULL;
    ap_cu_result result = ap_cu.EventCreate(&event, AP_CU_EVENT_DISABLE_TIMING);
    if (result != 0) { ap_cuda_failed = "cuEventCreate"; return result; }
    ap_cuda.events[slot].context = context;
    ap_cuda.events[slot].context_id = id;
    ap_cuda.events[slot].event = event;
    if (slot == ap_cuda.n_events) ap_cuda.n_events++;
    *out = event;
    return 0;
}

/* The reused event of `context` (current), its id asked of the driver. Lock held. */
static ap_cu_result ap_cuda_event_locked(ap_cu_context context, ap_cu_event *out) {
    unsigned long long id = 0;
    ap_cu_result result = ap_cu.CtxGetId(context, &id);
    if (result != 0) { ap_cuda_failed = "cuCtxGetId"; return result; }
    return ap_cuda_event_of_locked(context, id, out);
}

/* A stream wait inside the calling thread's session, where the session knows the producer's
 * stream (its context is the session's, current): record the session's context's event on
 * the producer, the consumer waits for it. Lock held by the caller. */
static ap_cu_result ap_cuda_session_wait_locked(const ap_cuda_session *session,
                                                uintptr_t consumer, uintptr_t producer) {
    ap_cu_event event = NULL;
    ap_cu_result result = ap_cuda_event_of_locked(session->context, session->context_id,
                                                  &event);
    if (result == 0) {
        result = ap_cu.EventRecord(event, (ap_cu_stream)producer);
        if (result != 0) ap_cuda_failed = "cuEventRecord";
    }
    if (result == 0) {
        result = ap_cu.StreamWaitEvent((ap_cu_stream)consumer, event, 0);
        if (result != 0) ap_cuda_failed = "cuStreamWaitEvent";
        else ap_cuda.stream_waits++;
    }
    return result;
}

/* Order `consumer` (a stream of device `ordinal`) after the work queued on `producer` (of
 * device `producer_ordinal`) so far, on the GPU: the producer's context's event recorded on
 * the producer's stream, waited on by the consumer's. The host never blocks. The same
 * stream of the same device needs nothing. A default-stream value names that stream of the
 * device's primary context, made current for the call that names it. */
static ap_cu_result ap_cuda_stream_wait(int ordinal, uintptr_t consumer, uintptr_t producer,
                                        int producer_ordinal) {
    if (consumer == producer && ordinal == producer_ordinal) return 0;
    ap_cu_context context = NULL, consumer_context = NULL;
    ap_cu_event event = NULL;
    int pushed = 0, consumer_pushed = 0;
    ap_cu_result result;
    const ap_cuda_session *session = ap_cuda_session_of(ordinal);
    if (session != NULL && producer_ordinal == ordinal) {
        /* The producer's context: the session's where it knows the stream, else asked. A
         * default-stream consumer is the session's context's too (current). */
        if (ap_cuda_session_knows(session, producer)) {
            context = session->context;
        } else if ((result = ap_cu.StreamGetCtx((ap_cu_stream)producer, &context)) != 0) {
            ap_cuda_failed = "cuStreamGetCtx";
            return result;
        }
        if (context == session->context) {   /* current, its id known: no more questions */
            ap_floor_lock(&ap_cuda.lock);
            result = ap_cuda_session_wait_locked(session, consumer, producer);
            ap_floor_unlock(&ap_cuda.lock);
            return result;
        }
    }
    ap_floor_lock(&ap_cuda.lock);
    if (ap_cuda_is_default_stream(producer)) {
        result = ap_cuda_primary_locked(producer_ordinal, &context);
    } else {
        result = ap_cu.StreamGetCtx((ap_cu_stream)producer, &context);
        if (result != 0) ap_cuda_failed = "cuStreamGetCtx";
    }
    if (result == 0 && ap_cuda_is_default_stream(consumer))
        result = ap_cuda_primary_locked(ordinal, &consumer_context);
    if (result == 0) result = ap_cuda_make_current(context, &pushed);
    if (result == 0) result = ap_cuda_event_locked(context, &event);
    if (result == 0) {
        result = ap_cu.EventRecord(event, (ap_cu_stream)producer);
        if (result != 0) ap_cuda_failed = "cuEventRecord";
    }
    if (result == 0 && consumer_context != NULL && consumer_context != context)
        result = ap_cuda_make_current(consumer_context, &consumer_pushed);
    if (result == 0) {
        result = ap_cu.StreamWaitEvent((ap_cu_stream)consumer, event, 0);
        if (result != 0) ap_cuda_failed = "cuStreamWaitEvent";
        else ap_cuda.stream_waits++;
    }
    ap_cuda_restore_current(consumer_pushed);
    ap_cuda_restore_current(pushed);
    ap_floor_unlock(&ap_cuda.lock);
    return result;
}

/* The DLPack location of memory as cuPointerGetAttributes describes it: managed memory
 * (either answer says so) as CUDAManaged, device memory on its own device, pinned host
 * memory as CUDAHost; AP_CU_UNKNOWN_MEMORY for anything else. The one owner of this
 * reading: gpu/cuda.py's ctypes path (a driver without the floor) asks it too. */
static int ap_cuda_location_of(unsigned memory_type, unsigned is_managed, int ordinal,
                               int32_t *device_type, int32_t *device_id) {
    if (is_managed || memory_type == AP_CU_MEMORYTYPE_UNIFIED) {
        *device_type = APDL_CUDA_MANAGED; *device_id = 0;
    } else if (memory_type == AP_CU_MEMORYTYPE_DEVICE) {
        *device_type = APDL_CUDA; *device_id = ordinal > 0 ? ordinal : 0;
    } else if (memory_type == AP_CU_MEMORYTYPE_HOST) {
        *device_type = APDL_CUDA_HOST; *device_id = 0;
    } else {
        return AP_CU_UNKNOWN_MEMORY;
    }
    return 0;
}

/* cuPointerGetAttributes(count, attributes, outputs, ptr): unlike cuPointerGetAttribute, it
 * answers for an address CUDA does not know (zeros, not an error); it needs a current
 * context, any (addresses are unified): a thread with none gets device 0's primary context
 * for the call. */
static ap_cu_result ap_cuda_pointer_attributes(unsigned count, int *attributes,
                                               void **outputs, uintptr_t ptr) {
    ap_cu_result result = ap_cu.PointerGetAttributes(count, attributes, outputs, ptr);
    if (result == AP_CU_ERROR_INVALID_CONTEXT) {
        ap_cu_context context = NULL;
        int pushed = 0;
        ap_floor_lock(&ap_cuda.lock);
        result = ap_cuda_primary_locked(0, &context);
        if (result == 0) result = ap_cuda_make_current(context, &pushed);
        ap_floor_unlock(&ap_cuda.lock);
        if (result != 0) return result;   /* ap_cuda_failed names that call, not this one */
        result = ap_cu.PointerGetAttributes(count, attributes, outputs, ptr);
        ap_cuda_restore_current(pushed);
    }
    if (result != 0) ap_cuda_failed = "cuPointerGetAttributes";
    return result;
}

/* Where the memory at `ptr` lives (ap_cuda_location_of): one cuPointerGetAttributes. */
static ap_cu_result ap_cuda_locate_pointer(uintptr_t ptr, int32_t *device_type,
                                           int32_t *device_id) {
    unsigned memory_type = 0, is_managed = 0;
    int ordinal = -1;
    int attributes[3] = {AP_CU_POINTER_ATTRIBUTE_MEMORY_TYPE, AP_CU_POINTER_ATTRIBUTE_IS_MANAGED,
                         AP_CU_POINTER_ATTRIBUTE_DEVICE_ORDINAL};
    void *outputs[3] = {&memory_type, &is_managed, &ordinal};
    ap_cu_result result = ap_cuda_pointer_attributes(3, attributes, outputs, ptr);
    if (result != 0) return result;
    return ap_cuda_location_of(memory_type, is_managed, ordinal, device_type, device_id);
}

/* Where the memory at `ptr` lives, as ap_cuda_locate_pointer says, and the allocation
 * holding it: [*base, *base + *size), the driver's range (of a virtual reservation, the
 * whole reserved range: it may be wider than what is mapped), both 0 where the driver
 * gives none. One cuPointerGetAttributes, asked before arrayport's kernel reads memory
 * (the core's _kernel_source_refusal). */
static ap_cu_result ap_cuda_locate_allocation(uintptr_t ptr, int32_t *device_type,
                                              int32_t *device_id, uintptr_t *base,
                                              size_t *size) {
    unsigned memory_type = 0, is_managed = 0;
    int ordinal = -1;
    unsigned long long start = 0;
    size_t length = 0;
    int attributes[5] = {AP_CU_POINTER_ATTRIBUTE_MEMORY_TYPE, AP_CU_POINTER_ATTRIBUTE_IS_MANAGED,
                         AP_CU_POINTER_ATTRIBUTE_DEVICE_ORDINAL,
                         AP_CU_POINTER_ATTRIBUTE_RANGE_START_ADDR,
                         AP_CU_POINTER_ATTRIBUTE_RANGE_SIZE};
    void *outputs[5] = {&memory_type, &is_managed, &ordinal, &start, &length};
    ap_cu_result result = ap_cuda_pointer_attributes(5, attributes, outputs, ptr);
    if (result != 0) return result;
    *base = (uintptr_t)start;
    *size = length;
    return ap_cuda_location_of(memory_type, is_managed, ordinal, device_type, device_id);
}

/* The device of the calling thread's current context; 0 where none is current. */
static ap_cu_result ap_cuda_current_device(int *out) {
    int device = 0;
    ap_cu_result result = ap_cu.CtxGetDevice(&device);
    if (result == AP_CU_ERROR_INVALID_CONTEXT) device = 0;
    else if (result != 0) { ap_cuda_failed = "cuCtxGetDevice"; return result; }
    *out = device;
    return 0;
}

/* ---- a device copy's calls (the core's _core_device_copy.pxi decides when; gpu/held_memory.py
 * owns the pool and what becomes of its blocks) ---- */

/* Device `ordinal`'s primary context current on this thread (*pushed says whether it was
 * pushed: ap_cuda_restore_current). */
static ap_cu_result ap_cuda_enter_device(int ordinal, int *pushed) {
    ap_cu_context context = NULL;
    *pushed = 0;
    if (ap_cuda_session_of(ordinal) != NULL) return 0;   /* current for the session */
    ap_floor_lock(&ap_cuda.lock);
    ap_cu_result result = ap_cuda_primary_locked(ordinal, &context);
    ap_floor_unlock(&ap_cuda.lock);
    return result != 0 ? result : ap_cuda_make_current(context, pushed);
}

/* Start a device copy's session for device `ordinal` on this thread (`session` lives on the
 * caller's stack until ap_cuda_session_exit, which the caller always calls, even after a
 * failure here). One session per thread at a time: a second is refused (never nested). */
static ap_cu_result ap_cuda_session_enter(int ordinal, ap_cuda_session *session) {
    memset(session, 0, sizeof *session);
    session->ordinal = -1;
    if (ap_cuda_current_session != NULL) { ap_cuda_failed = "a nested copy session"; return 1; }
    ap_cu_context context = NULL;
    ap_floor_lock(&ap_cuda.lock);
    ap_cu_result result = ap_cuda_primary_locked(ordinal, &context);
    ap_floor_unlock(&ap_cuda.lock);
    if (result == 0) result = ap_cuda_make_current(context, &session->pushed);
    if (result != 0) return result;
    result = ap_cu.CtxGetId(context, &session->context_id);
    if (result != 0) {
        ap_cuda_failed = "cuCtxGetId";
        ap_cuda_restore_current(session->pushed);
        session->pushed = 0;
        return result;
    }
    session->context = context;
    session->ordinal = ordinal;
    ap_cuda_current_session = session;
    return 0;
}

/* End the calling thread's session (`session`, entered or refused): the context made
 * current for it is popped again. */
static void ap_cuda_session_exit(ap_cuda_session *session) {
    if (ap_cuda_current_session == session) ap_cuda_current_session = NULL;
    ap_cuda_restore_current(session->pushed);
    session->pushed = 0;
    session->ordinal = -1;
}

/* Whether `stream` runs in device `ordinal`'s primary context (*on): a default stream value
 * does (the floor makes that context current for it), a handle where the driver says. */
static ap_cu_result ap_cuda_stream_is_on(uintptr_t stream, int ordinal, int *on) {
    ap_cu_context primary = NULL, context = NULL;
    *on = 0;
    if (ap_cuda_is_default_stream(stream)) { *on = 1; return 0; }
    ap_floor_lock(&ap_cuda.lock);
    ap_cu_result result = ap_cuda_primary_locked(ordinal, &primary);
    ap_floor_unlock(&ap_cuda.lock);
    if (result != 0) return result;
    result = ap_cu.StreamGetCtx((ap_cu_stream)stream, &context);
    if (result != 0) { ap_cuda_failed = "cuStreamGetCtx"; return result; }
    *on = context == primary;
    ap_cuda_session *session = ap_cuda_session_of(ordinal);
    if (*on && session != NULL && session->context == primary) session->stream = stream;
    return 0;
}

/* `nbytes` (at least 1) of the memory pool `pool` of device `ordinal`, in `stream`'s order. */
static ap_cu_result ap_cuda_pool_allocate(int ordinal, void *pool, size_t nbytes,
                                          uintptr_t stream, uintptr_t *out) {
    unsigned long long address = 0;
    int pushed = 0;
    ap_cu_result result = ap_cuda_enter_device(ordinal, &pushed);
    if (result != 0) return result;
    result = ap_cu.MemAllocFromPoolAsync(&address, nbytes ? nbytes : 1, pool,
                                         (ap_cu_stream)stream);
    ap_cuda_restore_current(pushed);
    if (result != 0) { ap_cuda_failed = "cuMemAllocFromPoolAsync"; return result; }
    *out = (uintptr_t)address;
    return 0;
}

/* `nbytes` from `src` to `dst`, enqueued on `stream` of device `ordinal`. */
static ap_cu_result ap_cuda_copy_async(int ordinal, uintptr_t dst, uintptr_t src,
                                       size_t nbytes, uintptr_t stream) {
    int pushed = 0;
    ap_cu_result result = ap_cuda_enter_device(ordinal, &pushed);
    if (result != 0) return result;
    result = ap_cu.MemcpyAsync(dst, src, nbytes, (ap_cu_stream)stream);
    ap_cuda_restore_current(pushed);
    if (result != 0) ap_cuda_failed = "cuMemcpyAsync";
    return result;
}

/* A block of a memory pool (`address`, of device `ordinal`) freed in `stream`'s order:
 * after the work queued on it so far (a copy's staging, read by that work only). */
static ap_cu_result ap_cuda_free_async(int ordinal, uintptr_t address, uintptr_t stream) {
    int pushed = 0;
    ap_cu_result result = ap_cuda_enter_device(ordinal, &pushed);
    if (result != 0) return result;
    result = ap_cu.MemFreeAsync((unsigned long long)address, (ap_cu_stream)stream);
    ap_cuda_restore_current(pushed);
    if (result != 0) ap_cuda_failed = "cuMemFreeAsync";
    return result;
}

/* Block the calling thread until `stream`'s work so far is done (of device `ordinal`): only
 * where the host itself reads the result (a copy into host memory). Called without the GIL. */
static ap_cu_result ap_cuda_stream_synchronize(int ordinal, uintptr_t stream) {
    int pushed = 0;
    ap_cu_result result = ap_cuda_enter_device(ordinal, &pushed);
    if (result != 0) return result;
    result = ap_cu.StreamSynchronize((ap_cu_stream)stream);
    ap_cuda_restore_current(pushed);
    if (result != 0) ap_cuda_failed = "cuStreamSynchronize";
    return result;
}

/* The size of the whole allocation `address` (memory of device `ordinal`) lies in; 0 where
 * the driver knows none there. */
static ap_cu_result ap_cuda_allocation_bytes(int ordinal, uintptr_t address, size_t *out) {
    unsigned long long base = 0;
    size_t size = 0;
    int pushed = 0;
    *out = 0;
    ap_cu_result result = ap_cuda_enter_device(ordinal, &pushed);
    if (result != 0) return result;
    if (ap_cu.MemGetAddressRange(&base, &size, address) == 0) *out = size;
    ap_cuda_restore_current(pushed);
    return 0;
}

/* ---- arrayport's kernels: loaded by gpu/kernels (KernelCache, which owns the modules and
 * unloads them), their functions published here for the core to launch ---- */

/* Say that kernel `which` of device `ordinal` is `function`, of a module loaded into
 * `context` while its id was `context_id`; `ordinal` -1: no kernel of any device (the
 * modules are being unloaded). */
static void ap_cuda_publish_kernel(int ordinal, int which, void *context,
                                   unsigned long long context_id, void *function) {
    ap_floor_lock(&ap_cuda.lock);
    if (ordinal == -1) {
        memset(ap_cuda.kernels, 0, sizeof ap_cuda.kernels);
    } else if (ordinal >= 0 && ordinal < AP_CU_MAX_DEVICES && which >= 0
               && which < AP_CU_KERNELS) {
        ap_cu_device_kernels *entry = &ap_cuda.kernels[ordinal];
        if (entry->context != context || entry->context_id != context_id)
            memset(entry, 0, sizeof *entry);   /* another context's: gone with it */
        entry->context = context;
        entry->context_id = context_id;
        entry->function[which] = function;
    }
    ap_floor_unlock(&ap_cuda.lock);
}

/* Whether kernel `which` of device `ordinal` has been published for its primary context
 * (a table read: no driver call; ap_cuda_launch checks that the context is still it). */
static int ap_cuda_kernel_published(int ordinal, int which) {
    int published = 0;
    ap_floor_lock(&ap_cuda.lock);
    if (ordinal >= 0 && ordinal < AP_CU_MAX_DEVICES && which >= 0 && which < AP_CU_KERNELS)
        published = ap_cuda.kernels[ordinal].function[which] != NULL
                    && ap_cuda.kernels[ordinal].context == ap_cuda.primary[ordinal];
    ap_floor_unlock(&ap_cuda.lock);
    return published;
}

/* Launch kernel `which` of device `ordinal` on `stream` (of that device's primary context):
 * a grid of `grid` blocks of `block` threads, its one by-value parameter `params`. *launched
 * is 0, with nothing launched, where no function of the context as it is now was published
 * (none yet, or the context was made again since: the caller's Python path loads it). */
static ap_cu_result ap_cuda_launch(int ordinal, int which, const unsigned *grid,
                                   const unsigned *block, void *params, uintptr_t stream,
                                   int *launched) {
    ap_cu_context context = NULL;
    unsigned long long id = 0;
    void *function = NULL;
    int pushed = 0;
    *launched = 0;
    if (ordinal < 0 || ordinal >= AP_CU_MAX_DEVICES || which < 0 || which >= AP_CU_KERNELS)
        return 0;
    ap_floor_lock(&ap_cuda.lock);
    ap_cu_result result = ap_cuda_primary_locked(ordinal, &context);
    if (result == 0 && ap_cuda.kernels[ordinal].context == context) {
        function = ap_cuda.kernels[ordinal].function[which];
        id = ap_cuda.kernels[ordinal].context_id;
    }
    ap_floor_unlock(&ap_cuda.lock);
    if (result != 0 || function == NULL) return result;
    const ap_cuda_session *session = ap_cuda_session_of(ordinal);
    unsigned long long now = 0;
    if (session != NULL && session->context == context) {
        now = session->context_id;   /* read at the session's start; current since */
    } else {
        result = ap_cu.CtxGetId(context, &now);
        if (result != 0) { ap_cuda_failed = "cuCtxGetId"; return result; }
    }
    if (now != id) return 0;   /* the module went with the context it was loaded into */
    if (session == NULL) {
        result = ap_cuda_make_current(context, &pushed);
        if (result != 0) return result;
    }
    void *arguments[1] = {params};
    result = ap_cu.LaunchKernel(function, grid[0], grid[1], grid[2], block[0], block[1],
                                block[2], 0, (ap_cu_stream)stream, arguments, NULL);
    ap_cuda_restore_current(pushed);
    if (result != 0) { ap_cuda_failed = "cuLaunchKernel"; return result; }
    ap_floor_lock(&ap_cuda.lock);
    ap_cuda.launches++;
    ap_floor_unlock(&ap_cuda.lock);
    *launched = 1;
    return 0;
}

static long ap_cuda_floor_launches(void) {
    ap_floor_lock(&ap_cuda.lock);
    long n = ap_cuda.launches;
    ap_floor_unlock(&ap_cuda.lock);
    return n;
}

static inline int ap_cuda_floor_ready(void) { return ap_cuda.ready; }

static long ap_cuda_floor_stream_waits(void) {
    ap_floor_lock(&ap_cuda.lock);
    long n = ap_cuda.stream_waits;
    ap_floor_unlock(&ap_cuda.lock);
    return n;
}

static const char *ap_cuda_floor_failed(void) { return ap_cuda_failed; }

static size_t ap_cuda_cached_events(void) {
    ap_floor_lock(&ap_cuda.lock);
    size_t n = ap_cuda.n_events;
    ap_floor_unlock(&ap_cuda.lock);
    return n;
}

/* Give back what the floor keeps (at exit): each event destroyed in its context, then each
 * primary context released. Errors are ignored: the driver may be shutting down. */
static void ap_cuda_floor_close(void) {
    ap_floor_lock(&ap_cuda.lock);
    if (ap_cuda.ready) {
        for (size_t i = 0; i < ap_cuda.n_events; i++) {
            /* Only an event whose context is still the one it was made in: another's is
             * gone with its context (and that context may be gone too). */
            unsigned long long id = 0;
            int pushed = 0;
            if (ap_cu.CtxGetId(ap_cuda.events[i].context, &id) != 0
                    || id != ap_cuda.events[i].context_id)
                continue;
            if (ap_cuda_make_current(ap_cuda.events[i].context, &pushed) == 0) {
                ap_cu.EventDestroy(ap_cuda.events[i].event);
                ap_cuda_restore_current(pushed);
            }
        }
        for (int i = 0; i < AP_CU_MAX_DEVICES; i++)
            if (ap_cuda.primary[i] != NULL) {
                ap_cu.DevicePrimaryCtxRelease(ap_cuda.device_ids[i]);
                ap_cuda.primary[i] = NULL;
            }
    }
    free(ap_cuda.events);
    memset(ap_cuda.kernels, 0, sizeof ap_cuda.kernels);   /* their modules are unloaded */
    ap_cuda.events = NULL;
    ap_cuda.n_events = ap_cuda.events_capacity = 0;
    ap_cuda.ready = 0;   /* closed: whatever comes later (exit-time finalizers) is Python's */
    ap_floor_unlock(&ap_cuda.lock);
}

#endif /* ARRAYPORT_CUDA_FLOOR_H */
