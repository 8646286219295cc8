/*
 * copy_kernel_check.c — the host copy kernel (src/arrayport/_csrc/strided_copy.h) on its
 * own, without Python, held bit for bit to a plain element loop on every vector path the
 * CPU runs. Built and run by tests/test_copy_kernel_native.py natively and, cross-compiled
 * for ARM64, under qemu-aarch64: the one way a NEON path is tested on an x86 machine.
 *
 * Cases: 2-D transposes whose sides cross every block edge of every element size (1, 2,
 * 4, 8, 16 and 3 bytes), sources one byte off alignment, reversed axes, 3-d permutations
 * (channels of 3 and 4 among them), rows long enough for band walking, and each with
 * streaming stores forced on and off. Exit status 0 when every case matched; otherwise the
 * first mismatch is printed.
 */
#include "strided_copy.h"

#include <stdio.h>
#include <stdlib.h>
#include <string.h>

static int64_t cases_run = 0;

/* The view of a C-contiguous ``base`` (dims ``base_shape``) permuted by ``perm``, with
 * axis ``flip`` (or -1) reversed, copied by the kernel and by an element loop. */
static int check(int path, int ndim, const int64_t *base_shape, const int *perm, int flip,
                 int64_t itemsize, int misalign, int streaming) {
    int64_t base_strides[3], shape[3], strides[3], count = 1;
    for (int d = ndim - 1; d >= 0; d--) {
        base_strides[d] = d == ndim - 1 ? itemsize : base_strides[d + 1] * base_shape[d + 1];
        count *= base_shape[d];
    }
    char *buffer = malloc((size_t)(count * itemsize + 64));
    char *expected = malloc((size_t)(count * itemsize + 1));
    char *copied = malloc((size_t)(count * itemsize + 1));
    if (!buffer || !expected || !copied) { fprintf(stderr, "out of memory\n"); exit(3); }
    char *base = buffer + misalign;
    for (int64_t i = 0; i < count * itemsize; i++) base[i] = (char)(i * 131 + (i >> 8) * 7 + 1);
    const char *start = base;
    for (int d = 0; d < ndim; d++) {
        shape[d] = base_shape[perm[d]];
        strides[d] = base_strides[perm[d]];
        if (perm[d] == flip) {
            start += (shape[d] - 1) * strides[d];
            strides[d] = -strides[d];
        }
    }
    /* The element loop, in C order of the view. */
    int64_t index[3] = {0, 0, 0};
    for (int64_t e = 0; e < count; e++) {
        const char *s = start;
        for (int d = 0; d < ndim; d++) s += index[d] * strides[d];
        memcpy(expected + e * itemsize, s, (size_t)itemsize);
        for (int d = ndim - 1; d >= 0 && ++index[d] == shape[d]; d--) index[d] = 0;
    }
    ap_copy_force_path(path);
    ap_copy_config.streaming_bytes = streaming ? 0 : ((int64_t)1 << 62);
    memset(copied, 0xA5, (size_t)(count * itemsize));
    ap_copy_strided_to_contiguous(copied, start, ndim, shape, strides, itemsize);
    cases_run++;
    int64_t bad = -1;
    for (int64_t i = 0; i < count * itemsize && bad < 0; i++)
        if (copied[i] != expected[i]) bad = i / itemsize;
    if (bad >= 0) {
        printf("MISMATCH path %s itemsize %lld shape", ap_copy_path_names[path], (long long)itemsize);
        for (int d = 0; d < ndim; d++) printf(" %lld", (long long)base_shape[d]);
        printf(" perm");
        for (int d = 0; d < ndim; d++) printf(" %d", perm[d]);
        printf(" flip %d misalign %d streaming %d: element %lld\n", flip, misalign, streaming,
               (long long)bad);
    }
    free(buffer);
    free(expected);
    free(copied);
    return bad < 0;
}

int main(void) {
    ap_copy_configure();
    const int64_t sides[] = {1, 3, 8, 15, 16, 17, 31, 33, 63, 64, 65, 129, 200};
    const int nsides = (int)(sizeof sides / sizeof sides[0]);
    const int64_t sizes[] = {1, 2, 4, 8, 16, 3};
    const int transpose[2] = {1, 0};
    const int64_t cubes[][3] = {{3, 70, 66}, {66, 5, 130}, {4, 64, 3}, {17, 40, 3},
                                {3, 17, 40}, {4, 33, 70}, {9, 70, 4}, {2, 130, 65}};
    const int perms[6][3] = {{0, 1, 2}, {0, 2, 1}, {1, 0, 2}, {1, 2, 0}, {2, 0, 1}, {2, 1, 0}};
    int ok = 1;
    for (int path = 0; path <= ap_copy_config.best && ok; path++) {
        for (int z = 0; z < 6 && ok; z++) {
            int64_t itemsize = sizes[z];
            for (int i = 0; i < nsides && ok; i++)
                for (int j = 0; j < nsides && ok; j++) {
                    int64_t shape[2] = {sides[i], sides[j]};
                    int variant = (i + j) % 4;  /* each pair once, cycling the variations */
                    ok = check(path, 2, shape, transpose, variant == 3 ? 0 : -1, itemsize,
                               variant & 1, (variant >> 1) & 1);
                }
            /* rows longer than 4 KiB: the band walk, both streaming and not */
            int64_t wide[2] = {4400 / itemsize + 3, 70};
            for (int variant = 0; variant < 4 && ok; variant++)
                ok = check(path, 2, wide, transpose, variant == 3 ? 1 : -1, itemsize,
                           variant & 1, (variant >> 1) & 1);
            for (int c = 0; c < 8 && ok; c++)
                for (int p = 0; p < 6 && ok; p++)
                    ok = check(path, 3, cubes[c], perms[p], (c + p) % 5 == 0 ? p % 3 : -1,
                               itemsize, (c + p) & 1, (c + p) % 3 == 0);
        }
    }
    printf("%s: %lld cases on paths", ok ? "ok" : "FAILED", (long long)cases_run);
    for (int path = 0; path <= ap_copy_config.best; path++) printf(" %s", ap_copy_path_names[path]);
    printf("\n");
    return ok ? 0 : 1;
}
