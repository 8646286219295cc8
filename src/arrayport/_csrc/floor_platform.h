/*
 * floor_platform.h — what the two compiled driver floors (cuda_floor.h, hip_floor.h) need
 * of the platform, said once: whether a floor is built here (not on Windows: no fork to
 * guard against there, and another lock API: the ctypes calls serve), the lock guarding a
 * floor's tables (its calls run without the GIL), and per-thread storage (the name of the
 * entry point a thread's last failed call made).
 */
#ifndef ARRAYPORT_FLOOR_PLATFORM_H
#define ARRAYPORT_FLOOR_PLATFORM_H

#if defined(_WIN32)
#define AP_FLOOR_BUILT 0
typedef int ap_floor_lock_t;
#define AP_FLOOR_LOCK_INIT 0
#define ap_floor_lock(l) ((void)(l))
#define ap_floor_unlock(l) ((void)(l))
#define AP_THREAD_LOCAL __declspec(thread)
#else
#include <pthread.h>
#define AP_FLOOR_BUILT 1
typedef pthread_mutex_t ap_floor_lock_t;
#define AP_FLOOR_LOCK_INIT PTHREAD_MUTEX_INITIALIZER
#define ap_floor_lock(l) pthread_mutex_lock(l)
#define ap_floor_unlock(l) pthread_mutex_unlock(l)
#define AP_THREAD_LOCAL __thread
#endif

#endif /* ARRAYPORT_FLOOR_PLATFORM_H */
