/* The dialect arrayport's device kernels are written in: one source, two compilers.
 *
 * Under NVRTC (scripts/build_ptx.py, which writes the PTX arrayport ships) the macros below
 * are CUDA's own: a kernel is an extern "C" __global__ function of one by-value parameter
 * struct, AP_THREADS is every thread of the block running the statement after it, and
 * AP_BARRIER is __syncthreads().
 *
 * Compiled as C into the project's CUDA driver simulator (tests/helpers/cudasim.py), the
 * same source runs on the host: the simulator's launch calls a kernel once per block,
 * AP_THREADS loops over the block's threads, and every global-memory address goes through
 * the simulator (AP_GLOBAL_BYTES), which finds the allocation it belongs to and faults, as
 * a GPU does, on an address outside one. So a kernel's indexing is tested on every push, not
 * only its plumbing. AP_DEVICE marks a helper function a kernel calls. What the C build cannot show is speed, and warp-level behaviour: a kernel
 * here uses neither warp intrinsics nor a barrier inside divergent code.
 *
 * Rules for a kernel source, so that both compilers read it alike: C99 that is also C++
 * (no templates, no references, no bool); one parameter struct per kernel, declared with
 * fixed-width fields (its size is checked against the PTX at load by the simulator); state
 * that crosses an AP_BARRIER lives in AP_SHARED arrays, not in locals of an AP_THREADS body;
 * a barrier is reached by every thread of the block (loops around it depend on the block
 * only), since the C build runs each AP_THREADS body for all threads before the next.
 */
#ifndef ARRAYPORT_KERNEL_DIALECT_H
#define ARRAYPORT_KERNEL_DIALECT_H

#include "kernel_types.h"

#if defined(__CUDACC_RTC__) || defined(__CUDACC__)

#define AP_KERNEL(name, Params, p) extern "C" __global__ void name(const Params p)
#define AP_UNROLL _Pragma("unroll")
#define AP_THREADS
#define AP_BARRIER __syncthreads();
#define AP_SHARED __shared__
#define AP_DEVICE static __device__ __forceinline__
#define AP_GLOBAL_BYTES(address, size) ((void *)(address))

#else   /* C, inside the simulator */

#include <stddef.h>
#include <string.h>

typedef struct { unsigned x, y, z; } ap_dim3;
extern __thread ap_dim3 threadIdx, blockIdx, blockDim, gridDim;
/* The host bytes behind one load or store of `size` bytes at `address`, of memory a kernel
 * may touch (device memory of its device or of a peer it was given access to, pinned or
 * managed): as on a GPU, an access of 2, 4, 8 or 16 bytes (a short, an int, a uint2 or
 * double, a uint4) at an address not a multiple of its size is CUDA_ERROR_MISALIGNED_ADDRESS,
 * and an address outside such memory CUDA_ERROR_ILLEGAL_ADDRESS; either fault stops the
 * launch and is sticky for its context (see cudasim.c). So every AP_GLOBAL_BYTES is one
 * access, of the size the kernel loads or stores there. */
void *cudasim_device_bytes(ap_u64 address, size_t size);
void cudasim_register_kernel(const char *name, size_t param_size, void (*run)(const void *));

#define AP_KERNEL(name, Params, p)                                                          \
    static void name##_block(const Params p);                                               \
    static void name##_run(const void *raw) {                                               \
        Params copy;                                                                        \
        memcpy(&copy, raw, sizeof copy);                                                    \
        name##_block(copy);                                                                 \
    }                                                                                       \
    __attribute__((constructor)) static void name##_register(void) {                        \
        cudasim_register_kernel(#name, sizeof(Params), name##_run);                         \
    }                                                                                       \
    static void name##_block(const Params p)
#define AP_THREADS                                                                          \
    for (threadIdx.z = 0; threadIdx.z < blockDim.z; threadIdx.z++)                          \
        for (threadIdx.y = 0; threadIdx.y < blockDim.y; threadIdx.y++)                      \
            for (threadIdx.x = 0; threadIdx.x < blockDim.x; threadIdx.x++)
#define AP_BARRIER
#define AP_SHARED
#define AP_UNROLL
#define AP_DEVICE static inline
#define AP_GLOBAL_BYTES(address, size) cudasim_device_bytes((address), (size))

#endif
#endif
