/*
 * hip_floor.h — the HIP runtime's floor under arrayport's stream order, device imports and
 * the copies the core issues itself on ROCm (issues 54, 52; the CUDA one is cuda_floor.h):
 * the runtime entry points a stream wait, a pointer's location call and a copy's transfer
 * make (an allocation, a transfer, a free, a stream's synchronization), resolved once by
 * the Python layer (gpu/hip.py hands over their addresses in the library it opened) and
 * called from C, with no Python between. A copy's calls run in one session
 * (ap_hip_session_enter): its device made current once.
 *
 * What it owns, for the life of the process (given back by ap_hip_floor_close, at exit):
 * one event per device, reused by every stream wait whose producer runs on that device: a
 * wait uses the event's state at the time of the call, later records do not affect it
 * (documented), so record-then-wait under the floor's lock can reuse it at once. HIP has no
 * contexts: a call works on the calling thread's current device, so a call for another
 * device makes that device current (hipSetDevice) and restores the previous one after.
 * What it states: that 0 (the null stream) is the only default-stream value on ROCm (the
 * current device's: made current for a wait that names it); where memory lives, read from
 * hipPointerGetAttributes's answer (ap_hip_location_of: HIP 6's numbering, the one owner of
 * that reading — gpu/hip.py's ctypes path asks it too); which device a thread works on.
 * It decides nothing: when to wait is the core's stream order (_core_streams.pxi).
 *
 * The declarations are arrayport's own (no hip_runtime_api.h): hipError_t is an int,
 * handles pointers, hipPointerAttribute_t as HIP 6 lays it out (held to AMD's bindings by
 * tests/test_hip_facts.py). Errors come back as the runtime's code with the entry point's
 * name (ap_hip_floor_failed), for the Cython side to raise the BufferError the Python
 * driver raises for the same call.
 *
 * Threads and fork: as cuda_floor.h (a mutex guards the events, the failed call's name is
 * per thread; a fork's child has the floor off). A device reset (hipDeviceReset, by someone
 * else) destroys the device's events: HIP gives nothing to tell, so a reused event would be
 * a dead handle — the same limit as the Python driver's, which keeps its events per device
 * too (documented in docs/devices.md).
 */
#ifndef ARRAYPORT_HIP_FLOOR_H
#define ARRAYPORT_HIP_FLOOR_H

#include <stddef.h>
#include <stdint.h>
#include <string.h>

#include "floor_platform.h"
#include "arrayport/dlpack_abi.h"

typedef int ap_hip_result;
typedef void *ap_hip_stream;
typedef void *ap_hip_event;

/* hipPointerAttribute_t (HIP 6). */
typedef struct {
    unsigned type;
    int device;
    void *devicePointer;
    void *hostPointer;
    int isManaged;
    unsigned allocationFlags;
} ap_hip_pointer_attributes;

#define AP_HIP_ERROR_INVALID_VALUE 1
#define AP_HIP_ERROR_NOT_INITIALIZED 3
#define AP_HIP_ERROR_INVALID_DEVICE 101
#define AP_HIP_EVENT_DISABLE_TIMING 0x2
#define AP_HIP_MEMORY_TYPE_HOST 1
#define AP_HIP_MEMORY_TYPE_DEVICE 2
#define AP_HIP_MEMORY_TYPE_MANAGED 3
#define AP_HIP_MEMORY_TYPE_UNIFIED 11
/* Not a runtime code: the address is no memory HIP knows (not device, pinned or managed). */
#define AP_HIP_UNKNOWN_MEMORY (-1)
/* Not a runtime code: the call was not made (ap_hip_free: the floor closed, or the device
 * could not be made current). */
#define AP_HIP_NOT_TRIED (-2)
#define AP_HIP_MAX_DEVICES 64
/* How many entry points ap_hip_floor_install takes the addresses of (ap_hip_entry_names). */
#define AP_HIP_ENTRY_POINTS 14
/* hipMemcpyDefault: the runtime tells the direction from the addresses (unified addressing). */
#define AP_HIP_MEMCPY_DEFAULT 4
/* hipDeviceAttributeMaxPitch (HIP 6): the largest source pitch a 2-D transfer takes. */
#define AP_HIP_DEVICE_ATTRIBUTE_MAX_PITCH 58

static struct {
    ap_hip_result (*GetDevice)(int *);
    ap_hip_result (*SetDevice)(int);
    ap_hip_result (*EventCreateWithFlags)(ap_hip_event *, unsigned);
    ap_hip_result (*EventRecord)(ap_hip_event, ap_hip_stream);
    ap_hip_result (*EventDestroy)(ap_hip_event);
    ap_hip_result (*StreamWaitEvent)(ap_hip_stream, ap_hip_event, unsigned);
    ap_hip_result (*PointerGetAttributes)(ap_hip_pointer_attributes *, const void *);
    ap_hip_result (*StreamGetDevice)(ap_hip_stream, int *);
    ap_hip_result (*Malloc)(void **, size_t);
    ap_hip_result (*Free)(void *);
    ap_hip_result (*MemcpyAsync)(void *, const void *, size_t, int, ap_hip_stream);
    ap_hip_result (*StreamSynchronize)(ap_hip_stream);
    ap_hip_result (*Memcpy2DAsync)(void *, size_t, const void *, size_t, size_t, size_t, int,
                                   ap_hip_stream);
    ap_hip_result (*DeviceGetAttribute)(int *, int, int);
} ap_hip;

static const char *const ap_hip_entry_names[AP_HIP_ENTRY_POINTS] = {
    "hipGetDevice", "hipSetDevice", "hipEventCreateWithFlags", "hipEventRecord",
    "hipEventDestroy", "hipStreamWaitEvent", "hipPointerGetAttributes", "hipStreamGetDevice",
    "hipMalloc", "hipFree", "hipMemcpyAsync", "hipStreamSynchronize", "hipMemcpy2DAsync",
    "hipDeviceGetAttribute"};

static struct {
    int ready;                                  /* installed, and not a fork's child */
    ap_floor_lock_t lock;
    ap_hip_event events[AP_HIP_MAX_DEVICES];    /* one reused event per device, or NULL */
    long stream_waits;                          /* made by the floor (tests, benchmarks) */
} ap_hip_floor = {0, AP_FLOOR_LOCK_INIT, {0}, 0};

static AP_THREAD_LOCAL const char *ap_hip_failed = "";

#if AP_FLOOR_BUILT
static void ap_hip_after_fork_in_child(void) {
    /* The parent's events are not this process's: not touched. A fresh lock (one of the
     * parent's threads may have held it at the fork). */
    ap_hip_floor.ready = 0;
    pthread_mutex_t fresh = PTHREAD_MUTEX_INITIALIZER;
    ap_hip_floor.lock = fresh;
}
#endif

/* The entry points' addresses, in ap_hip_entry_names' order (`count` of them: all
 * AP_HIP_ENTRY_POINTS). 0, or -1 with ap_hip_failed naming the first missing one (the
 * floor then stays off: the Python driver serves). */
static int ap_hip_floor_install(const uintptr_t *entries, int count) {
    static int fork_rule = 0;
    void **slots[AP_HIP_ENTRY_POINTS] = {
        (void **)&ap_hip.GetDevice, (void **)&ap_hip.SetDevice,
        (void **)&ap_hip.EventCreateWithFlags, (void **)&ap_hip.EventRecord,
        (void **)&ap_hip.EventDestroy, (void **)&ap_hip.StreamWaitEvent,
        (void **)&ap_hip.PointerGetAttributes, (void **)&ap_hip.StreamGetDevice,
        (void **)&ap_hip.Malloc, (void **)&ap_hip.Free, (void **)&ap_hip.MemcpyAsync,
        (void **)&ap_hip.StreamSynchronize, (void **)&ap_hip.Memcpy2DAsync,
        (void **)&ap_hip.DeviceGetAttribute};
    if (!AP_FLOOR_BUILT) {
        ap_hip_failed = "the compiled floor (not built on this platform)";
        return -1;
    }
    for (int i = 0; i < AP_HIP_ENTRY_POINTS; i++)
        if (i >= count || entries[i] == 0) { ap_hip_failed = ap_hip_entry_names[i]; return -1; }
    for (int i = 0; i < AP_HIP_ENTRY_POINTS; i++) *slots[i] = (void *)entries[i];
    /* Events made through another library's functions are not this one's: forgotten (the
     * Python layer installs the floor from the process's runtime only, once). */
    memset(ap_hip_floor.events, 0, sizeof ap_hip_floor.events);
#if AP_FLOOR_BUILT
    if (!fork_rule) {
        pthread_atfork(NULL, NULL, ap_hip_after_fork_in_child);
        fork_rule = 1;
    }
#endif
    ap_hip_floor.ready = 1;
    return 0;
}

static inline int ap_hip_floor_ready(void) { return ap_hip_floor.ready; }
static const char *ap_hip_floor_failed(void) { return ap_hip_failed; }

/* The device of the calling thread's copy session (ap_hip_session_enter), current for its
 * length; -1 outside one. */
static AP_THREAD_LOCAL int ap_hip_session_device = -1;

/* Device `ordinal` current on this thread; *previous says which was, *switched whether it
 * was changed (for ap_hip_restore_device: a device is set back only where one was set).
 * Inside a copy session the current device is known: not asked. */
static ap_hip_result ap_hip_make_current(int ordinal, int *previous, int *switched) {
    *switched = 0;
    ap_hip_result result = 0;
    if (ap_hip_session_device >= 0) *previous = ap_hip_session_device;
    else if ((result = ap_hip.GetDevice(previous)) != 0) {
        ap_hip_failed = "hipGetDevice";
        return result;
    }
    if (*previous != ordinal) {
        if ((result = ap_hip.SetDevice(ordinal)) != 0) ap_hip_failed = "hipSetDevice";
        else *switched = 1;
    }
    return result;
}

static void ap_hip_restore_device(int previous, int switched) {
    if (switched) ap_hip.SetDevice(previous);
}

/* The device stream `stream` belongs to (0, the null stream: the current device's). */
static ap_hip_result ap_hip_device_of_stream(uintptr_t stream, int *out) {
    if (stream == 0 && ap_hip_session_device >= 0) { *out = ap_hip_session_device; return 0; }
    ap_hip_result result = stream == 0 ? ap_hip.GetDevice(out)
                                       : ap_hip.StreamGetDevice((ap_hip_stream)stream, out);
    if (result != 0) ap_hip_failed = stream == 0 ? "hipGetDevice" : "hipStreamGetDevice";
    return result;
}

/* Order `consumer` (a stream of device `ordinal`; 0 its null stream) after the work queued
 * on `producer` (of device `producer_ordinal`) so far, on the GPU: the producer's device's
 * event recorded on the producer's stream (that device current), waited on by the consumer's
 * (the consumer's device current where the consumer is a null stream, which names the
 * current device's). A negative `producer_ordinal` says the memory names no device (pinned
 * host memory): the producer's stream says which (hipStreamGetDevice), and a null-stream
 * consumer is that device's too. The host never blocks. The same stream of the same device
 * needs nothing. The calling thread's current device is as it was after, failure or not. */
static ap_hip_result ap_hip_stream_wait(int ordinal, uintptr_t consumer, uintptr_t producer,
                                        int producer_ordinal) {
    if (consumer == producer && ordinal == producer_ordinal) return 0;
    ap_hip_result result;
    if (producer_ordinal < 0) {
        if ((result = ap_hip_device_of_stream(producer, &producer_ordinal)) != 0) return result;
        ordinal = producer_ordinal;
        if (consumer == producer) return 0;
    }
    if (producer_ordinal >= AP_HIP_MAX_DEVICES || ordinal < 0 || ordinal >= AP_HIP_MAX_DEVICES) {
        ap_hip_failed = "hipSetDevice";
        return AP_HIP_ERROR_INVALID_DEVICE;
    }
    int previous = 0, switched = 0;
    ap_floor_lock(&ap_hip_floor.lock);
    if (!ap_hip_floor.ready) {   /* closed meanwhile (at exit): its events are gone */
        ap_floor_unlock(&ap_hip_floor.lock);
        ap_hip_failed = "the HIP floor (closed)";
        return AP_HIP_ERROR_NOT_INITIALIZED;
    }
    result = ap_hip_make_current(producer_ordinal, &previous, &switched);
    ap_hip_event event = ap_hip_floor.events[producer_ordinal];
    if (result == 0 && event == NULL) {
        result = ap_hip.EventCreateWithFlags(&event, AP_HIP_EVENT_DISABLE_TIMING);
        if (result != 0) ap_hip_failed = "hipEventCreateWithFlags";
        else ap_hip_floor.events[producer_ordinal] = event;
    }
    if (result == 0 && (result = ap_hip.EventRecord(event, (ap_hip_stream)producer)) != 0)
        ap_hip_failed = "hipEventRecord";
    if (result == 0 && consumer == 0 && ordinal != producer_ordinal) {
        if ((result = ap_hip.SetDevice(ordinal)) != 0) ap_hip_failed = "hipSetDevice";
        else switched = 1;   /* set back to `previous` after (read above) */
    }
    if (result == 0) {
        result = ap_hip.StreamWaitEvent((ap_hip_stream)consumer, event, 0);
        if (result != 0) ap_hip_failed = "hipStreamWaitEvent";
        else ap_hip_floor.stream_waits++;
    }
    ap_hip_restore_device(previous, switched);
    ap_floor_unlock(&ap_hip_floor.lock);
    return result;
}

/* The DLPack location of memory as hipPointerGetAttributes describes it (HIP 6 numbering):
 * device and managed memory as ROCm on its device (DLPack has no ROCm managed type), pinned
 * host memory as ROCMHost; AP_HIP_UNKNOWN_MEMORY for anything else. */
static int ap_hip_location_of(unsigned memory_type, int is_managed, int ordinal,
                              int32_t *device_type, int32_t *device_id) {
    if (memory_type == AP_HIP_MEMORY_TYPE_DEVICE || memory_type == AP_HIP_MEMORY_TYPE_MANAGED
            || memory_type == AP_HIP_MEMORY_TYPE_UNIFIED || is_managed) {
        *device_type = APDL_ROCM; *device_id = ordinal > 0 ? ordinal : 0;
    } else if (memory_type == AP_HIP_MEMORY_TYPE_HOST) {
        *device_type = APDL_ROCM_HOST; *device_id = 0;
    } else {
        return AP_HIP_UNKNOWN_MEMORY;
    }
    return 0;
}

/* Where the memory at `ptr` lives (ap_hip_location_of). HIP answers an address it does not
 * know (pageable host memory) with hipErrorInvalidValue: that is an answer, not a failure. */
static ap_hip_result ap_hip_locate_pointer(uintptr_t ptr, int32_t *device_type,
                                           int32_t *device_id) {
    ap_hip_pointer_attributes attributes;
    memset(&attributes, 0, sizeof attributes);
    ap_hip_result result = ap_hip.PointerGetAttributes(&attributes, (const void *)ptr);
    if (result == AP_HIP_ERROR_INVALID_VALUE) return AP_HIP_UNKNOWN_MEMORY;
    if (result != 0) { ap_hip_failed = "hipPointerGetAttributes"; return result; }
    return ap_hip_location_of(attributes.type, attributes.isManaged, attributes.device,
                              device_type, device_id);
}

/* The calling thread's current device. */
static ap_hip_result ap_hip_current_device(int *out) {
    ap_hip_result result = ap_hip.GetDevice(out);
    if (result != 0) ap_hip_failed = "hipGetDevice";
    return result;
}

/* A copy's session on device `ordinal` (ap_hip_session_enter .. _exit, on the calling
 * thread; `session` on the caller's stack, _exit always called, even after a failure
 * here): the device made current once for every call of the copy — the floor's calls
 * inside ask nothing about the current device — and the thread's previous device set back
 * at the end. One per thread at a time (a second is refused, never nested). The calls
 * below named ap_hip_session_* work on the session's device and are made inside one. */
typedef struct {
    int ordinal;    /* the session's device; -1 before it started */
    int previous;   /* the thread's device before it */
    int switched;   /* whether it was changed (set back at the end) */
} ap_hip_session;

static ap_hip_result ap_hip_session_enter(int ordinal, ap_hip_session *session) {
    /* `ready` read without the lock: only the floor's close (at exit) clears it, and the
     * library its entry points live in stays loaded after. */
    session->ordinal = -1;
    session->previous = session->switched = 0;
    if (!ap_hip_floor.ready) {
        ap_hip_failed = "the HIP floor (closed)";
        return AP_HIP_ERROR_NOT_INITIALIZED;
    }
    if (ap_hip_session_device >= 0) {
        ap_hip_failed = "a second copy session on one thread";
        return AP_HIP_ERROR_INVALID_VALUE;
    }
    if (ordinal < 0 || ordinal >= AP_HIP_MAX_DEVICES) {
        ap_hip_failed = "hipSetDevice";
        return AP_HIP_ERROR_INVALID_DEVICE;
    }
    ap_hip_result result = ap_hip_make_current(ordinal, &session->previous, &session->switched);
    if (result == 0) session->ordinal = ap_hip_session_device = ordinal;
    return result;
}

static void ap_hip_session_exit(ap_hip_session *session) {
    if (session->ordinal >= 0) ap_hip_session_device = -1;
    ap_hip_restore_device(session->previous, session->switched);
    session->ordinal = -1;
    session->switched = 0;
}

/* Whether `stream` runs on the session's device: 0, the null stream, names the current
 * device's (the session's); another stream's device is asked. */
static ap_hip_result ap_hip_session_stream_is_on(uintptr_t stream, int *on) {
    int device = ap_hip_session_device;
    ap_hip_result result = stream == 0 ? 0 : ap_hip_device_of_stream(stream, &device);
    *on = result == 0 && device == ap_hip_session_device;
    return result;
}

/* `nbytes` of ordinary device memory on the session's device (hipMalloc). */
static ap_hip_result ap_hip_session_allocate(size_t nbytes, uintptr_t *out) {
    void *address = NULL;
    ap_hip_result result = ap_hip.Malloc(&address, nbytes);
    if (result != 0) ap_hip_failed = "hipMalloc";
    *out = result == 0 ? (uintptr_t)address : 0;
    return result;
}

/* One transfer of `nbytes` on `stream`, its direction told by the addresses
 * (hipMemcpyDefault): device to device, device to host, host to device. */
static ap_hip_result ap_hip_session_copy_async(uintptr_t dst, uintptr_t src, size_t nbytes,
                                               uintptr_t stream) {
    ap_hip_result result = ap_hip.MemcpyAsync((void *)dst, (const void *)src, nbytes,
                                              AP_HIP_MEMCPY_DEFAULT, (ap_hip_stream)stream);
    if (result != 0) ap_hip_failed = "hipMemcpyAsync";
    return result;
}

/* `height` rows of `width` bytes, `src_pitch` apart at `src`, `dst_pitch` apart at `dst`, on
 * `stream` (a plan's transfer: transfer_runs.h). */
static ap_hip_result ap_hip_session_copy_2d_async(uintptr_t dst, size_t dst_pitch,
                                                  uintptr_t src, size_t src_pitch,
                                                  size_t width, size_t height,
                                                  uintptr_t stream) {
    ap_hip_result result = ap_hip.Memcpy2DAsync((void *)dst, dst_pitch, (const void *)src,
                                                src_pitch, width, height,
                                                AP_HIP_MEMCPY_DEFAULT, (ap_hip_stream)stream);
    if (result != 0) ap_hip_failed = "hipMemcpy2DAsync";
    return result;
}

/* The largest source pitch a 2-D transfer on the session's device takes. */
static ap_hip_result ap_hip_session_max_pitch(int *out) {
    ap_hip_result result = ap_hip.DeviceGetAttribute(out, AP_HIP_DEVICE_ATTRIBUTE_MAX_PITCH,
                                                     ap_hip_session_device);
    if (result != 0) ap_hip_failed = "hipDeviceGetAttribute";
    return result;
}

/* The host waits until the work queued on `stream` so far has run. */
static ap_hip_result ap_hip_session_synchronize(uintptr_t stream) {
    ap_hip_result result = ap_hip.StreamSynchronize((ap_hip_stream)stream);
    if (result != 0) ap_hip_failed = "hipStreamSynchronize";
    return result;
}

/* Free device memory of device `ordinal` (hipFree: it waits for the device's work using
 * it), that device current for the call (a result's last View going; inside a session or
 * not). AP_HIP_NOT_TRIED where hipFree was not called — the floor closed (at exit), a
 * fork's child, the device not made current — for the caller to free another way; any
 * other failure is hipFree's own (the memory may be gone: never freed again). */
static ap_hip_result ap_hip_free(int ordinal, uintptr_t address) {
    if (!ap_hip_floor.ready) {
        ap_hip_failed = "the HIP floor (closed)";
        return AP_HIP_NOT_TRIED;
    }
    int previous = 0, switched = 0;
    if (ap_hip_make_current(ordinal, &previous, &switched) != 0) return AP_HIP_NOT_TRIED;
    ap_hip_result result = ap_hip.Free((void *)address);
    if (result != 0) ap_hip_failed = "hipFree";
    ap_hip_restore_device(previous, switched);
    return result;
}

static long ap_hip_floor_stream_waits(void) {
    ap_floor_lock(&ap_hip_floor.lock);
    long waits = ap_hip_floor.stream_waits;
    ap_floor_unlock(&ap_hip_floor.lock);
    return waits;
}

static size_t ap_hip_cached_events(void) {
    size_t count = 0;
    ap_floor_lock(&ap_hip_floor.lock);
    for (int i = 0; i < AP_HIP_MAX_DEVICES; i++) count += ap_hip_floor.events[i] != NULL;
    ap_floor_unlock(&ap_hip_floor.lock);
    return count;
}

/* The layout of hipPointerAttribute_t as declared here (size, then each field's offset in
 * declaration order): for tests/test_hip_facts.py, which holds it to AMD's bindings. */
static void ap_hip_pointer_attributes_layout(size_t out[7]) {
    out[0] = sizeof(ap_hip_pointer_attributes);
    out[1] = offsetof(ap_hip_pointer_attributes, type);
    out[2] = offsetof(ap_hip_pointer_attributes, device);
    out[3] = offsetof(ap_hip_pointer_attributes, devicePointer);
    out[4] = offsetof(ap_hip_pointer_attributes, hostPointer);
    out[5] = offsetof(ap_hip_pointer_attributes, isManaged);
    out[6] = offsetof(ap_hip_pointer_attributes, allocationFlags);
}

/* Give back the events (each destroyed with its device current), at the driver's close.
 * The floor is off after: whatever comes later (exit-time finalizers) is Python's. */
static void ap_hip_floor_close(void) {
    ap_floor_lock(&ap_hip_floor.lock);
    if (ap_hip_floor.ready) {
        for (int i = 0; i < AP_HIP_MAX_DEVICES; i++) {
            int previous = 0, switched = 0;
            if (ap_hip_floor.events[i] == NULL) continue;
            if (ap_hip_make_current(i, &previous, &switched) == 0)
                ap_hip.EventDestroy(ap_hip_floor.events[i]);
            ap_hip_restore_device(previous, switched);
            ap_hip_floor.events[i] = NULL;
        }
    }
    ap_hip_floor.ready = 0;
    ap_floor_unlock(&ap_hip_floor.lock);
}

#endif /* ARRAYPORT_HIP_FLOOR_H */
