/*
 * arrayport/arrow_abi.h — arrayport's own declaration of the Arrow C data interface and
 * C device data interface structs.
 *
 * Written for arrayport from the published Arrow format facts (struct layouts, capsule
 * names, the move and release rules). Every name carries the APArrow prefix so this header
 * can sit beside Arrow's own abi.h in one translation unit; the layouts are identical, so
 * pointers convert with a plain cast.
 *
 * Ownership, as the format states it: whoever holds a struct last calls its release
 * callback exactly once (a NULL release marks a released or moved-from struct). A consumer
 * moves a struct out of its capsule by copying it and setting the capsule's copy's release
 * to NULL; the capsule's destructor releases only what is still set.
 */
#ifndef ARRAYPORT_ARROW_ABI_H
#define ARRAYPORT_ARROW_ABI_H

#include <stdint.h>

#ifdef __cplusplus
extern "C" {
#endif

#define APARROW_CAPSULE_SCHEMA "arrow_schema"
#define APARROW_CAPSULE_ARRAY "arrow_array"
#define APARROW_CAPSULE_STREAM "arrow_array_stream"
#define APARROW_CAPSULE_DEVICE_ARRAY "arrow_device_array"

#define APARROW_FLAG_DICTIONARY_ORDERED 1
#define APARROW_FLAG_NULLABLE 2
#define APARROW_FLAG_MAP_KEYS_SORTED 4

typedef struct APArrowSchema {
    const char* format;            /* the type, as a format string ("f", "+w:4", ...) */
    const char* name;
    const char* metadata;          /* int32 count, then (int32 length, bytes) key/value pairs */
    int64_t flags;
    int64_t n_children;
    struct APArrowSchema** children;
    struct APArrowSchema* dictionary;
    void (*release)(struct APArrowSchema*);
    void* private_data;
} APArrowSchema;

typedef struct APArrowArray {
    int64_t length;
    int64_t null_count;            /* -1: not computed */
    int64_t offset;                /* in elements (bits for booleans) of every buffer */
    int64_t n_buffers;
    int64_t n_children;
    const void** buffers;          /* [0] validity bitmap (may be NULL without nulls) */
    struct APArrowArray** children;
    struct APArrowArray* dictionary;
    void (*release)(struct APArrowArray*);
    void* private_data;
} APArrowArray;

typedef struct APArrowDeviceArray {
    APArrowArray array;
    int64_t device_id;
    int32_t device_type;           /* DLPack's device type numbers */
    void* sync_event;              /* CUDA: a cudaEvent_t* to wait on before reading */
    int64_t reserved[3];
} APArrowDeviceArray;

/* A stream of arrays of one schema (the C stream interface). get_schema and get_next fill
 * a struct the caller then owns (get_next: release == NULL at the end of the stream) and
 * return 0 or an errno value, get_last_error describing it (valid until the next call or
 * the release). Arrays taken from a stream are independent of it: they may outlive it. */
typedef struct APArrowArrayStream {
    int (*get_schema)(struct APArrowArrayStream*, APArrowSchema* out);
    int (*get_next)(struct APArrowArrayStream*, APArrowArray* out);
    const char* (*get_last_error)(struct APArrowArrayStream*);
    void (*release)(struct APArrowArrayStream*);
    void* private_data;
} APArrowArrayStream;

#ifdef __cplusplus
}
#endif

#endif /* ARRAYPORT_ARROW_ABI_H */
