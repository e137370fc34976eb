/* A fake ROCm for rdmabench-rocm's tests and the bench crate's guest tests: the HIP runtime
 * (libamdhip64.so.6) and the HSA runtime's dma-buf export (libhsa-runtime64.so.1) in one
 * library, installed under both names, so that every ROCm memory path runs through a real dlopen
 * on machines without an AMD GPU. "Device memory" is host memory: hipMalloc is an aligned
 * malloc, the copies are memcpy, and the dma-buf export hands out a memfd (which no RDMA driver
 * accepts as a dma-buf). rdmabench's ROCm memory modes then run end to end on soft-RoCE:
 * peer-memory registration of such a pointer is plain ibv_reg_mr of host memory.
 * Two GPUs: 0 at 0000:17:00.0, 1 at 0000:9a:00.0, "Fake AMD GPU N".
 * Async copies are deferred until their event is seen complete (fake_queue.h, shared with the
 * fake libcuda), so the staged path's ordering is exercised for real.
 * Built with -DNO_DMABUF the HSA export is missing (a ROCm older than 5.6); with -DNO_DRIVER_VERSION
 * hipDriverGetVersion is missing (rdmabench never calls it, so must not require it). Knobs:
 *   FAKE_ROCM_MODE=nodevice   hipGetDeviceCount returns hipErrorNoDevice (100); =zero: 0 devices;
 *   FAKE_ROCM_FAIL=NAME:CODE  entry point NAME returns CODE;
 *   FAKE_ROCM_FREE_LOG=FILE   every hipFree / hipHostFree appends "CALL 0xADDR pinned_kb=K
 *                             pending_copies=C" to FILE: K the process's pages pinned by memory
 *                             registrations (VmPin), C the queued copies that still touch the
 *                             freed block; so a test sees memory freed under a registration or a
 *                             pending copy. */
#include "../../../accel/tests/fake_runtime/fake_queue.h"
#include <stdint.h>
#include <sys/mman.h>

static const char *mode(void) {
    const char *m = getenv("FAKE_ROCM_MODE");
    return m ? m : "ok";
}
#define FAIL_IF_INJECTED(name) \
    do { int code_ = fake_injected("FAKE_ROCM_FAIL", name); if (code_) return code_; } while (0)

static int current = 0;

int hipGetDeviceCount(int *n) {
    FAIL_IF_INJECTED("hipGetDeviceCount");
    if (!strcmp(mode(), "nodevice")) return 100; /* hipErrorNoDevice */
    *n = strcmp(mode(), "zero") ? 2 : 0;
    return 0;
}
#ifndef NO_DRIVER_VERSION
int hipDriverGetVersion(int *v) { *v = 60241; return 0; }
#endif
int hipSetDevice(int dev) {
    if (dev < 0 || dev > 1) return 101; /* hipErrorInvalidDevice */
    current = dev;
    return 0;
}
int hipDeviceGetName(char *name, int len, int dev) {
    if (dev < 0 || dev > 1) return 101;
    snprintf(name, (size_t)len, "Fake AMD GPU %d", dev);
    return 0;
}
int hipDeviceGetPCIBusId(char *id, int len, int dev) {
    if (dev < 0 || dev > 1) return 101;
    snprintf(id, (size_t)len, "0000:%02x:00.0", dev == 0 ? 0x17 : 0x9a);
    return 0;
}
int hipDeviceTotalMem(size_t *bytes, int dev) { (void)dev; *bytes = (size_t)192 << 30; return 0; }

int hipMalloc(void **p, size_t n) {
    FAIL_IF_INJECTED("hipMalloc");
    *p = aligned_alloc(65536, (n + 65535) & ~(size_t)65535);
    return *p ? 0 : 2; /* hipErrorOutOfMemory */
}
int hipFree(void *p) {
    fake_log_free("FAKE_ROCM_FREE_LOG", "hipFree", p);
    free(p);
    return 0;
}
int hipHostMalloc(void **p, size_t n, unsigned flags) {
    (void)flags;
    FAIL_IF_INJECTED("hipHostMalloc");
    *p = aligned_alloc(4096, (n + 4095) & ~(size_t)4095);
    return *p ? 0 : 2;
}
int hipHostFree(void *p) {
    fake_log_free("FAKE_ROCM_FREE_LOG", "hipHostFree", p);
    free(p);
    return 0;
}
int hipMemcpy(void *dst, const void *src, size_t n, int kind) {
    (void)kind;
    FAIL_IF_INJECTED("hipMemcpy");
    memcpy(dst, src, n);
    return 0;
}

struct event { unsigned long long upto; int queries; };
static int stream_storage;

int hipMemcpyAsync(void *dst, const void *src, size_t n, int kind, void *stream) {
    (void)kind; (void)stream;
    FAIL_IF_INJECTED("hipMemcpyAsync");
    fake_enqueue(dst, src, n);
    return 0;
}
int hipStreamCreateWithFlags(void **s, unsigned flags) {
    (void)flags;
    FAIL_IF_INJECTED("hipStreamCreateWithFlags");
    *s = &stream_storage;
    return 0;
}
int hipStreamDestroy(void *s) { (void)s; return 0; }
int hipStreamSynchronize(void *s) { (void)s; fake_run_locked(fake_record()); return 0; }
int hipEventCreateWithFlags(void **e, unsigned flags) {
    (void)flags;
    struct event *ev = calloc(1, sizeof *ev);
    if (!ev) return 2;
    *e = ev;
    return 0;
}
int hipEventDestroy(void *e) { free(e); return 0; }
int hipEventRecord(void *e, void *s) {
    (void)s;
    struct event *ev = e;
    ev->upto = fake_record();
    ev->queries = 0;
    return 0;
}
int hipEventQuery(void *e) {
    FAIL_IF_INJECTED("hipEventQuery");
    struct event *ev = e;
    return fake_reached(ev->upto, &ev->queries) ? 0 : 600; /* hipErrorNotReady */
}

/* The HSA runtime's part. */
int hsa_init(void) { FAIL_IF_INJECTED("hsa_init"); return 0; }
#ifndef NO_DMABUF
int hsa_amd_portable_export_dmabuf(const void *ptr, size_t size, int *fd, uint64_t *offset) {
    (void)size;
    FAIL_IF_INJECTED("hsa_amd_portable_export_dmabuf");
    int m = memfd_create("fake-dmabuf", 0);
    if (m < 0) return 0x1000; /* HSA_STATUS_ERROR */
    *fd = m;
    *offset = (uint64_t)((uintptr_t)ptr & 4095);
    return 0;
}
#endif
