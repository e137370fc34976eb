/* A fake libcuda.so for tests/fake_driver.rs: just enough of the CUDA driver API for rdmabench-cuda's probe and
 * device queries to run through a real dlopen, so that odd drivers (too old, the toolkit's stub, no GPU) and
 * device selection by bus id are tested on machines without a GPU. Behaviour is chosen by FAKE_CUDA_MODE:
 *   ok (default): 2 GPUs, GPU 0 at 0000:17:00.0 with dma-buf, GPU 1 at 0000:9A:00.0 without; cuMemAlloc fails
 *                 with CUDA_ERROR_OUT_OF_MEMORY;
 *   nodevice:     cuInit returns CUDA_ERROR_NO_DEVICE;
 *   stub:         cuInit returns CUDA_ERROR_STUB_LIBRARY;
 *   zero:         cuDeviceGetCount reports 0 devices;
 *   hostmem:      like ok, but "device memory" is host memory: cuMemAlloc is an aligned malloc, the copies
 *                 and memset are memcpy/memset, and a dma-buf export hands out a memfd (which no RDMA driver
 *                 accepts as a dma-buf). rdmabench's GPU memory modes then run end to end on soft-RoCE:
 *                 nvidia-peermem-style registration of such a pointer is plain ibv_reg_mr of host memory.
 * Built with -DONLY_INIT it exports cuInit alone: a driver too old for the entry points the crate calls.
 * Return values are CUresult codes from cuda.h. */
#define _GNU_SOURCE
#include <stdio.h>
#include <stdlib.h>
#include <string.h>
#include <sys/mman.h>

static const char *mode(void) {
    const char *m = getenv("FAKE_CUDA_MODE");
    return m ? m : "ok";
}

int cuInit(unsigned flags) {
    (void)flags;
    if (!strcmp(mode(), "nodevice")) return 100; /* CUDA_ERROR_NO_DEVICE */
    if (!strcmp(mode(), "stub")) return 34;      /* CUDA_ERROR_STUB_LIBRARY */
    return 0;
}

#ifndef ONLY_INIT
int cuDriverGetVersion(int *v) { *v = 12040; return 0; }
int cuDeviceGetCount(int *n) { *n = strcmp(mode(), "zero") ? 2 : 0; return 0; }
int cuDeviceGet(int *dev, int ordinal) {
    if (ordinal < 0 || ordinal > 1) return 101; /* CUDA_ERROR_INVALID_DEVICE */
    *dev = ordinal;
    return 0;
}
int cuDeviceGetName(char *name, int len, int dev) { snprintf(name, (size_t)len, "Fake GPU %d", dev); return 0; }
int cuDeviceGetAttribute(int *v, int attr, int dev) {
    switch (attr) {
    case 50: *v = 0; return 0;                  /* PCI_DOMAIN_ID */
    case 33: *v = dev == 0 ? 0x17 : 0x9a; return 0; /* PCI_BUS_ID */
    case 34: *v = 0; return 0;                  /* PCI_DEVICE_ID */
    case 124: *v = dev == 0; return 0;          /* DMA_BUF_SUPPORTED */
    case 116: *v = 1; return 0;                 /* GPU_DIRECT_RDMA_SUPPORTED */
    default: return 1;                          /* CUDA_ERROR_INVALID_VALUE */
    }
}
int cuDeviceGetPCIBusId(char *id, int len, int dev) {
    snprintf(id, (size_t)len, "0000:%02X:00.0", dev == 0 ? 0x17 : 0x9a);
    return 0;
}
int cuDeviceTotalMem_v2(size_t *bytes, int dev) { (void)dev; *bytes = (size_t)80 << 30; return 0; }
static int ctx_storage[2];
int cuDevicePrimaryCtxRetain(void **ctx, int dev) { *ctx = &ctx_storage[dev & 1]; return 0; }
int cuDevicePrimaryCtxRelease_v2(int dev) { (void)dev; return 0; }
int cuCtxSetCurrent(void *ctx) { (void)ctx; return 0; }
static int hostmem(void) { return !strcmp(mode(), "hostmem"); }

int cuMemAlloc_v2(unsigned long long *p, size_t n) {
    if (!hostmem()) return 2; /* CUDA_ERROR_OUT_OF_MEMORY */
    void *m = aligned_alloc(65536, (n + 65535) & ~(size_t)65535);
    if (!m) return 2;
    *p = (unsigned long long)(size_t)m;
    return 0;
}
int cuMemFree_v2(unsigned long long p) { free((void *)(size_t)p); return 0; }
int cuPointerSetAttribute(const void *v, int attr, unsigned long long p) { (void)v; (void)attr; (void)p; return 0; }
int cuMemsetD8_v2(unsigned long long p, unsigned char b, size_t n) { memset((void *)(size_t)p, b, n); return 0; }
int cuMemcpyHtoD_v2(unsigned long long d, const void *h, size_t n) { memcpy((void *)(size_t)d, h, n); return 0; }
int cuMemcpyDtoH_v2(void *h, unsigned long long d, size_t n) { memcpy(h, (void *)(size_t)d, n); return 0; }
int cuMemGetHandleForAddressRange(void *handle, unsigned long long base, size_t len, int type, unsigned long long fl) {
    (void)base; (void)len; (void)type; (void)fl;
    int fd = memfd_create("fake-dmabuf", 0);
    if (fd < 0) return 999;
    *(int *)handle = fd;
    return 0;
}

/* Present so the probe's symbol check passes; never reached in these tests. */
#define UNREACHED(name) int name(void) { return 999; /* CUDA_ERROR_UNKNOWN */ }
UNREACHED(cuMemHostAlloc)
UNREACHED(cuMemFreeHost)
UNREACHED(cuStreamCreate)
UNREACHED(cuStreamDestroy_v2)
UNREACHED(cuStreamSynchronize)
UNREACHED(cuMemcpyHtoDAsync_v2)
UNREACHED(cuMemcpyDtoHAsync_v2)
UNREACHED(cuEventCreate)
UNREACHED(cuEventDestroy_v2)
UNREACHED(cuEventRecord)
UNREACHED(cuEventQuery)
UNREACHED(cuEventSynchronize)
UNREACHED(cuEventElapsedTime)
#endif
