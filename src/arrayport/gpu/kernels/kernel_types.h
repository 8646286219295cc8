/* The fixed-width types arrayport's device kernels and their parameter structs are written
 * in (dialect.h's rule: fixed-width fields only). Their own header, apart from dialect.h's
 * macros, because the host side includes a kernel's parameter structs too: the core's
 * planner (_csrc/device_copy_plan.h) fills them, so a struct has one declaration that the
 * GPU, the simulator and the host all compile. */
#ifndef ARRAYPORT_KERNEL_TYPES_H
#define ARRAYPORT_KERNEL_TYPES_H

typedef signed char ap_i8;
typedef unsigned char ap_u8;
typedef unsigned short ap_u16;
typedef unsigned int ap_u32;
typedef long long ap_i64;
typedef unsigned long long ap_u64;
typedef struct { ap_u64 lo, hi; } __attribute__((aligned(16))) ap_u128;

#endif
