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
 *                 Pinned memory is host memory; async copies are deferred until their event is seen complete
 *                 (see below), so the staged path's ordering is exercised for real.
 * Built with -DONLY_INIT it exports cuInit alone: a driver too old for the entry points the crate calls; with
 * -DNO_OPTIONAL, every entry point but the optional ones (cuPointerGetAttribute, cuEventElapsedTime,
 * cuFlushGPUDirectRDMAWrites): a driver that lacks what only the GPU check, or only some GPUs, need.
 * Return values are CUresult codes from cuda.h. Knobs, in any mode:
 *   FAKE_CUDA_FAIL=NAME:CODE  entry point NAME returns CODE (any integer: one the bindings lack, e.g. 12345, tests
 *                             that results are read as raw integers);
 *   FAKE_CUDA_MISALIGN=1      hostmem allocations start 256 bytes past a 64 KiB boundary, as cuMemAlloc may
 *                             return, so the crate's padded-allocation path runs;
 *   FAKE_CUDA_WRITES_ORDERING=N  GPU_DIRECT_RDMA_WRITES_ORDERING reads N (default 100, OWNER; 0 is NONE, a GPU
 *                             whose NIC writes need cuFlushGPUDirectRDMAWrites before they are read back);
 *   FAKE_CUDA_FLUSH_OPTIONS=N GPU_DIRECT_RDMA_FLUSH_WRITES_OPTIONS reads N (default 1, HOST; without that bit
 *                             cuFlushGPUDirectRDMAWrites returns CUDA_ERROR_NOT_SUPPORTED);
 *   FAKE_CUDA_FLUSH_LOG=FILE  every cuFlushGPUDirectRDMAWrites appends "FLUSH TARGET SCOPE" to FILE;
 *   FAKE_CUDA_COPY_GBPS=R     hostmem async copies take n / R ns longer on the events' clock, as if a link of
 *                             R GB/s carried them: the copy bandwidth the events time stays below R;
 *   FAKE_CUDA_DMA_BUF=0|1     DMA_BUF_SUPPORTED reads this for every GPU (default: 1 for GPU 0, 0 for GPU 1);
 *                             0 is what NVIDIA's proprietary kernel modules report;
 *   FAKE_CUDA_LINK_FILE=FILE, FAKE_CUDA_LINK_LOADED=TEXT  the first async copy queued writes TEXT (and a
 *                             newline) over FILE, a sysfs copy's current_link_speed: a GPU that raises its link
 *                             speed from its idle one once it is busy;
 *   FAKE_CUDA_FREE_LOG=FILE   every cuMemFree_v2 / cuMemFreeHost appends a line to FILE:
 *                             "CALL 0xADDR pinned_kb=K pending_copies=C", K the process's pages pinned by memory
 *                             registrations (VmPin in /proc/self/status: rdma-core's ibv_reg_mr pins them until
 *                             ibv_dereg_mr), C the queued async copies that still touch the freed allocation. So a
 *                             test sees whether memory was freed under a live registration or a pending copy. */
#define _GNU_SOURCE
#include <stdlib.h>
/* FAKE_CUDA_COPY_GBPS: the seconds the async copies' link would have added, on the events' clock. */
static double copy_delay;
static double copy_gbps(void) {
    const char *r = getenv("FAKE_CUDA_COPY_GBPS");
    return r ? atof(r) : 0.0;
}
#define FAKE_COPY_DONE(n) \
    do { if (copy_gbps() > 0) copy_delay += (double)(n) / (copy_gbps() * 1e9); } while (0)
#include "../../../accel/tests/fake_runtime/fake_queue.h"
#include <sys/mman.h>
#include <time.h>

static const char *mode(void) {
    const char *m = getenv("FAKE_CUDA_MODE");
    return m ? m : "ok";
}
#define FAIL_IF_INJECTED(name) \
    do { int code_ = fake_injected("FAKE_CUDA_FAIL", name); if (code_) return code_; } while (0)

int cuInit(unsigned flags) {
    (void)flags;
    FAIL_IF_INJECTED("cuInit");
    if (!strcmp(mode(), "nodevice")) return 100; /* CUDA_ERROR_NO_DEVICE */
    if (!strcmp(mode(), "stub")) return 34;      /* CUDA_ERROR_STUB_LIBRARY */
    return 0;
}

#ifndef ONLY_INIT
/* 12.4 unless FAKE_CUDA_DRIVER_VERSION says otherwise (12080 for 12.8). */
static int driver_version(void) {
    const char *v = getenv("FAKE_CUDA_DRIVER_VERSION");
    return v ? atoi(v) : 12040;
}
int cuDriverGetVersion(int *v) { *v = driver_version(); return 0; }
int cuDeviceGetCount(int *n) { *n = strcmp(mode(), "zero") ? 2 : 0; return 0; }
int cuDeviceGet(int *dev, int ordinal) {
    if (ordinal < 0 || ordinal > 1) return 101; /* CUDA_ERROR_INVALID_DEVICE */
    *dev = ordinal;
    return 0;
}
int cuDeviceGetName(char *name, int len, int dev) { snprintf(name, (size_t)len, "Fake GPU %d", dev); return 0; }
/* FAKE_CUDA_WRITES_ORDERING, else OWNER (100). */
static int writes_ordering(void) {
    const char *o = getenv("FAKE_CUDA_WRITES_ORDERING");
    return o ? atoi(o) : 100;
}
/* FAKE_CUDA_FLUSH_OPTIONS, else HOST (1). */
static int flush_options(void) {
    const char *o = getenv("FAKE_CUDA_FLUSH_OPTIONS");
    return o ? atoi(o) : 1;
}
int cuDeviceGetAttribute(int *v, int attr, int dev) {
    FAIL_IF_INJECTED("cuDeviceGetAttribute");
    switch (attr) {
    case 50: *v = 0; return 0;                  /* PCI_DOMAIN_ID */
    case 33: *v = dev == 0 ? 0x17 : 0x9a; return 0; /* PCI_BUS_ID */
    case 34: *v = 0; return 0;                  /* PCI_DEVICE_ID */
    case 124: *v = getenv("FAKE_CUDA_DMA_BUF") ? atoi(getenv("FAKE_CUDA_DMA_BUF")) : dev == 0; return 0; /* DMA_BUF_SUPPORTED */
    case 116: *v = 1; return 0;                 /* GPU_DIRECT_RDMA_SUPPORTED */
    case 117: *v = flush_options(); return 0;   /* GPU_DIRECT_RDMA_FLUSH_WRITES_OPTIONS */
    case 118: *v = writes_ordering(); return 0; /* GPU_DIRECT_RDMA_WRITES_ORDERING: OWNER */
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

/* Offset of every hostmem "device" allocation from its 64 KiB aligned block. */
static size_t misalign(void) {
    const char *m = getenv("FAKE_CUDA_MISALIGN");
    return m && !strcmp(m, "1") ? 256 : 0;
}
int cuMemAlloc_v2(unsigned long long *p, size_t n) {
    FAIL_IF_INJECTED("cuMemAlloc_v2");
    if (!hostmem()) return 2; /* CUDA_ERROR_OUT_OF_MEMORY */
    void *m = aligned_alloc(65536, (n + misalign() + 65535) & ~(size_t)65535);
    if (!m) return 2;
    *p = (unsigned long long)(size_t)m + misalign();
    return 0;
}
/* CU_POINTER_ATTRIBUTE_SYNC_MEMOPS (6), remembered per allocation. */
#define SYNC_MEMOPS_SLOTS 1024
static unsigned long long sync_memops[SYNC_MEMOPS_SLOTS];
int cuMemFree_v2(unsigned long long p) {
    void *block = (void *)(size_t)(p - misalign());
    for (int i = 0; i < SYNC_MEMOPS_SLOTS; i++)
        if (sync_memops[i] == p) sync_memops[i] = 0;
    fake_log_free("FAKE_CUDA_FREE_LOG", "cuMemFree_v2", block);
    free(block);
    return 0;
}
int cuPointerSetAttribute(const void *v, int attr, unsigned long long p) {
    if (attr != 6) return 1;
    for (int i = 0; i < SYNC_MEMOPS_SLOTS; i++) {
        if (sync_memops[i] == p || sync_memops[i] == 0) {
            sync_memops[i] = *(const unsigned *)v ? p : 0;
            return 0;
        }
    }
    return 2;
}
#ifndef NO_OPTIONAL
int cuPointerGetAttribute(void *v, int attr, unsigned long long p) {
    FAIL_IF_INJECTED("cuPointerGetAttribute");
    if (attr != 6) return 1;
    unsigned found = 0;
    for (int i = 0; i < SYNC_MEMOPS_SLOTS; i++)
        if (sync_memops[i] && p >= sync_memops[i] && p - sync_memops[i] < 65536) found = 1;
    *(unsigned *)v = found;
    return 0;
}
/* Appends "FLUSH target scope" to FAKE_CUDA_FLUSH_LOG; CUDA_ERROR_NOT_SUPPORTED where the flush-writes options
 * lack HOST, as the driver answers there. */
int cuFlushGPUDirectRDMAWrites(int target, int scope) {
    if (!(flush_options() & 1)) return 801; /* CUDA_ERROR_NOT_SUPPORTED */
    const char *path = getenv("FAKE_CUDA_FLUSH_LOG");
    FILE *f = path ? fopen(path, "a") : NULL;
    if (f) {
        fprintf(f, "FLUSH %d %d\n", target, scope);
        fclose(f);
    }
    return 0;
}
#endif
int cuMemsetD8_v2(unsigned long long p, unsigned char b, size_t n) { memset((void *)(size_t)p, b, n); return 0; }
int cuMemcpyHtoD_v2(unsigned long long d, const void *h, size_t n) { memcpy((void *)(size_t)d, h, n); return 0; }
int cuMemcpyDtoH_v2(void *h, unsigned long long d, size_t n) { memcpy(h, (void *)(size_t)d, n); return 0; }
/* Appends "EXPORT flags" to FAKE_CUDA_EXPORT_LOG; a flag other than 12.8's
 * CU_MEM_RANGE_FLAG_DMA_BUF_MAPPING_TYPE_PCIE (1), or that one before 12.8, is CUDA_ERROR_INVALID_VALUE,
 * as the driver answers. */
int cuMemGetHandleForAddressRange(void *handle, unsigned long long base, size_t len, int type, unsigned long long fl) {
    (void)base; (void)len; (void)type;
    FAIL_IF_INJECTED("cuMemGetHandleForAddressRange");
    const char *path = getenv("FAKE_CUDA_EXPORT_LOG");
    FILE *f = path ? fopen(path, "a") : NULL;
    if (f) {
        fprintf(f, "EXPORT %llu\n", fl);
        fclose(f);
    }
    if (fl > 1 || (fl == 1 && driver_version() < 12080)) return 1;
    int fd = memfd_create("fake-dmabuf", 0);
    if (fd < 0) return 999;
    *(int *)handle = fd;
    return 0;
}

/* Pinned host memory is page-aligned host memory. */
int cuMemHostAlloc(void **p, size_t n, unsigned flags) {
    (void)flags;
    FAIL_IF_INJECTED("cuMemHostAlloc");
    if (!hostmem()) return 2;
    *p = aligned_alloc(4096, (n + 4095) & ~(size_t)4095);
    return *p ? 0 : 2;
}
int cuMemFreeHost(void *p) {
    fake_log_free("FAKE_CUDA_FREE_LOG", "cuMemFreeHost", p);
    free(p);
    return 0;
}

/* Streams and events, hostmem mode: async copies are deferred (fake_queue.h) until an event
 * recorded after them is seen complete. */
struct event { unsigned long long upto; int queries; double recorded_at, done_at; };
static double now(void) {
    struct timespec t;
    clock_gettime(CLOCK_MONOTONIC, &t);
    return (double)t.tv_sec + (double)t.tv_nsec * 1e-9 + copy_delay;
}
static int stream_storage;

/* FAKE_CUDA_LINK_FILE / FAKE_CUDA_LINK_LOADED: the link speeds up once, when the GPU first gets work. */
static void link_loaded(void) {
    static int done;
    const char *file = getenv("FAKE_CUDA_LINK_FILE"), *text = getenv("FAKE_CUDA_LINK_LOADED");
    if (done || !file || !text) return;
    done = 1;
    FILE *f = fopen(file, "w");
    if (!f) return;
    fprintf(f, "%s\n", text);
    fclose(f);
}
static int enqueue(void *dst, const void *src, size_t n) {
    if (!hostmem()) return 999;
    link_loaded();
    fake_enqueue(dst, src, n);
    return 0;
}
int cuStreamCreate(void **s, unsigned flags) {
    (void)flags;
    FAIL_IF_INJECTED("cuStreamCreate");
    if (!hostmem()) return 999;
    *s = &stream_storage;
    return 0;
}
int cuStreamDestroy_v2(void *s) { (void)s; return 0; }
int cuStreamSynchronize(void *s) { (void)s; fake_run_locked(fake_record()); return 0; }
int cuMemcpyHtoDAsync_v2(unsigned long long d, const void *h, size_t n, void *s) {
    (void)s;
    return enqueue((void *)(size_t)d, h, n);
}
int cuMemcpyDtoHAsync_v2(void *h, unsigned long long d, size_t n, void *s) {
    (void)s;
    return enqueue(h, (const void *)(size_t)d, n);
}
int cuEventCreate(void **e, unsigned flags) {
    (void)flags;
    if (!hostmem()) return 999;
    struct event *ev = calloc(1, sizeof *ev);
    if (!ev) return 2;
    *e = ev;
    return 0;
}
int cuEventDestroy_v2(void *e) { free(e); return 0; }
int cuEventRecord(void *e, void *s) {
    (void)s;
    struct event *ev = e;
    ev->upto = fake_record();
    ev->queries = 0;
    ev->recorded_at = now();
    ev->done_at = 0;
    return 0;
}
int cuEventQuery(void *e) {
    FAIL_IF_INJECTED("cuEventQuery");
    struct event *ev = e;
    int ready = fake_reached(ev->upto, &ev->queries);
    if (ready && ev->done_at == 0) ev->done_at = now();
    return ready ? 0 : 600; /* CUDA_ERROR_NOT_READY */
}
int cuEventSynchronize(void *e) {
    struct event *ev = e;
    fake_run_locked(ev->upto);
    if (ev->done_at == 0) ev->done_at = now();
    return 0;
}
/* From the start event's record to the end event's completion: the deferred copies ran in between. */
#ifndef NO_OPTIONAL
int cuEventElapsedTime(float *ms, void *a, void *b) {
    struct event *start = a, *end = b;
    if (end->done_at == 0) return 600;
    *ms = (float)((end->done_at - start->recorded_at) * 1e3);
    return 0;
}
#endif
#endif
