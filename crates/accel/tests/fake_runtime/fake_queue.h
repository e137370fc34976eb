/* What the fake GPU runtimes share (crates/cuda/tests/fake_libcuda, crates/rocm/tests/fake_rocm,
 * each including this file by its relative path): injected failures, the free log, and the
 * deferred queue of async copies that makes the staged path's ordering real.
 *
 * An async copy is only queued; it is carried out when a marker (an event) recorded after it is
 * asked for the second time (the first answer is "not ready"), or the event or the stream is
 * synchronised. So an engine that uses a bounce buffer before its copy's event reported
 * complete moves stale bytes, and --validate catches it. One queue for all streams: copies run
 * in the order queued. A runtime that times its copies defines FAKE_COPY_DONE(n) before
 * including this file; it is called with each copy's length as the copy is carried out. */
#ifndef FAKE_QUEUE_H
#define FAKE_QUEUE_H
#ifndef _GNU_SOURCE
#define _GNU_SOURCE
#endif
#include <stdio.h>
#include <stdlib.h>
#include <string.h>
#include <pthread.h>
#include <malloc.h>

#ifndef FAKE_COPY_DONE
#define FAKE_COPY_DONE(n) ((void)(n))
#endif

/* VAR=NAME:CODE in the environment: CODE when NAME is the entry point asking, else 0. */
static int fake_injected(const char *var, const char *name) {
    const char *f = getenv(var);
    size_t n = strlen(name);
    if (!f || strncmp(f, name, n) || f[n] != ':') return 0;
    return atoi(f + n + 1);
}

#define FAKE_QUEUE 4096
struct fake_copy { void *dst; const void *src; size_t n; };
static struct fake_copy fake_queue[FAKE_QUEUE];
static unsigned long long fake_queued, fake_done;
static pthread_mutex_t fake_lock = PTHREAD_MUTEX_INITIALIZER;

/* Carries out the queued copies up to `upto` (the lock held). */
static void fake_run_copies(unsigned long long upto) {
    while (fake_done < upto) {
        struct fake_copy *c = &fake_queue[fake_done % FAKE_QUEUE];
        memcpy(c->dst, c->src, c->n);
        FAKE_COPY_DONE(c->n);
        fake_done++;
    }
}
static void fake_run_locked(unsigned long long upto) {
    pthread_mutex_lock(&fake_lock);
    fake_run_copies(upto);
    pthread_mutex_unlock(&fake_lock);
}
static void fake_enqueue(void *dst, const void *src, size_t n) {
    pthread_mutex_lock(&fake_lock);
    if (fake_queued - fake_done == FAKE_QUEUE) fake_run_copies(fake_done + 1);
    fake_queue[fake_queued % FAKE_QUEUE] = (struct fake_copy){dst, src, n};
    fake_queued++;
    pthread_mutex_unlock(&fake_lock);
}
/* An event recorded now: it is reached when the copies queued so far are done. */
static unsigned long long fake_record(void) {
    pthread_mutex_lock(&fake_lock);
    unsigned long long upto = fake_queued;
    pthread_mutex_unlock(&fake_lock);
    return upto;
}
/* Whether an event recorded at `upto` is reached, the second time it is asked at the latest
 * (`*queries` counts the askings); its copies are carried out when it is. */
static int fake_reached(unsigned long long upto, int *queries) {
    pthread_mutex_lock(&fake_lock);
    int ready = fake_done >= upto || (*queries)++ > 0;
    if (ready) fake_run_copies(upto);
    pthread_mutex_unlock(&fake_lock);
    return ready;
}
static int fake_overlaps(const char *a, size_t alen, const char *b, size_t blen) {
    return a < b + blen && b < a + alen;
}
static unsigned long fake_pending_copies_touching(const char *base, size_t len) {
    unsigned long n = 0;
    pthread_mutex_lock(&fake_lock);
    for (unsigned long long i = fake_done; i < fake_queued; i++) {
        struct fake_copy *c = &fake_queue[i % FAKE_QUEUE];
        if (fake_overlaps(c->dst, c->n, base, len) || fake_overlaps(c->src, c->n, base, len)) n++;
    }
    pthread_mutex_unlock(&fake_lock);
    return n;
}

/* The process's pages pinned by memory registrations, in kB (VmPin in /proc/self/status); -1 if
 * unreadable. */
static long fake_pinned_kb(void) {
    FILE *f = fopen("/proc/self/status", "r");
    char line[256];
    long kb = -1;
    if (!f) return -1;
    while (fgets(line, sizeof line, f))
        if (sscanf(line, "VmPin: %ld", &kb) == 1) break;
    fclose(f);
    return kb;
}
/* Appends "CALL 0xADDR pinned_kb=K pending_copies=C" to the file named by VAR, if set: so a test
 * sees whether memory was freed under a live registration or a pending copy. */
static void fake_log_free(const char *var, const char *call, void *block) {
    const char *path = getenv(var);
    if (!path || !block) return;
    FILE *f = fopen(path, "a");
    if (!f) return;
    fprintf(f, "%s %p pinned_kb=%ld pending_copies=%lu\n", call, block, fake_pinned_kb(),
            fake_pending_copies_touching(block, malloc_usable_size(block)));
    fclose(f);
}
#endif
