/* simdev.h - what the simulated device's parts share (simdev.c: memory,
 * streams, events, graphs and the scheduler; simnccl.c: NCCL across
 * processes; simkern.c: the kernels' launchers). docs/simdev.md is the
 * design. Every function here runs with the simulator's lock held. */
#ifndef FP_SIMDEV_H
#define FP_SIMDEV_H

#include <stdbool.h>
#include <stddef.h>
#include <stdint.h>
#include <stdio.h>

#include "include/cuda_runtime_api.h"
#include "include/nccl.h"

/* device work: a host function over an argument block the simulator owns */
typedef void (*sd_fn)(void *arg);

void sd_lock(void);
void sd_unlock(void);
/* the lock held, and (seeded) some queued work run first: every API call's entry */
void sd_enter(void);
uint64_t sd_rand(void);
double sd_now_s(void);

/* the host waits until done(arg), running queued work - first what target
 * (the stream waited on; NULL: every stream) needs, the rest once that is
 * stuck for 2 ms (peers: sleeping); FP_SIMDEV_HANG_S without progress aborts
 * with the streams' state */
void sd_drive(bool (*done)(void *), void *arg, struct CUstream_st *target, const char *what);
/* enqueue fn(arg copy) on stream s, or add it to s's capture */
cudaError_t sd_launch(cudaStream_t s, sd_fn fn, const void *arg, size_t len);
/* a pointer device work may touch: device memory (translated to the
 * simulator's view of it) or pinned host memory, bytes long; anything else
 * is an illegal address (a sticky error, reported; NULL) */
void *sd_dev(const void *p, size_t bytes);
/* is p device memory (any offset inside an allocation) */
bool sd_is_dev(const void *p);
/* device memory as (heap offset); -1 when p is not inside an allocation of bytes */
int64_t sd_dev_offset(const void *p, size_t bytes);
/* this process's heap: its memfd and size (peers map it through /proc) */
void sd_heap_info(int *fd, size_t *size, char **rw);
/* allocate / free device memory (cudaMalloc, ncclMemAlloc) */
cudaError_t sd_alloc(void **p, size_t bytes, const char *what);
cudaError_t sd_free(void *p);
/* a capture that forbids a potentially unsafe call from this thread
 * (invalidated, reported as cudaErrorStreamCaptureUnsupported); 0 when none */
cudaError_t sd_capture_forbids(const char *what);
/* the device this thread set */
int sd_device(void);
/* the sticky error the next synchronizing call reports */
void sd_fail(cudaError_t e, const char *fmt, ...) __attribute__((format(printf, 2, 3)));

/* ---- NCCL tasks (simnccl.c), as items of a stream or nodes of a graph ---- */
typedef struct sd_ntask sd_ntask;
/* enqueue task t on s (or add it to s's capture); takes t */
cudaError_t sd_launch_nccl(cudaStream_t s, sd_ntask *t);
/* bind t to its communicators' order (eager: at enqueue; graphs: at each launch) */
void sd_ntask_bind(sd_ntask *t);
/* one step: 0 blocked (peers), 1 progress, 2 finished */
int sd_ntask_advance(sd_ntask *t);
sd_ntask *sd_ntask_clone(const sd_ntask *t);
void sd_ntask_free(sd_ntask *t);
const char *sd_ntask_name(const sd_ntask *t);
void sd_ntask_dump(const sd_ntask *t, FILE *f);

#endif
