/* nccl.h (simulated device) - the part of NCCL's API flexplan calls,
 * implemented by tests/simdev/simnccl.c across processes over shared memory
 * (docs/simdev.md). Types, values and the config initializer are NCCL's, so
 * executor/nccl.c and executor/xfer_nccl.c compile against it unchanged. */
#ifndef FP_SIMDEV_NCCL_H
#define FP_SIMDEV_NCCL_H

#include <stddef.h>

#include "cuda_runtime_api.h"

#ifdef __cplusplus
extern "C" {
#endif

#define NCCL_MAJOR 2
#define NCCL_MINOR 28
#define NCCL_PATCH 0
#define NCCL_VERSION_CODE 22800
#define NCCL_UNIQUE_ID_BYTES 128
#define NCCL_SPLIT_NOCOLOR -1

typedef struct ncclComm *ncclComm_t;
typedef struct {
  char internal[NCCL_UNIQUE_ID_BYTES];
} ncclUniqueId;

typedef enum {
  ncclSuccess = 0,
  ncclUnhandledCudaError = 1, /* a CUDA call failed inside NCCL */
  ncclSystemError = 2,        /* the OS refused (bind, shared memory) */
  ncclInternalError = 3,      /* a simulator bug */
  ncclInvalidArgument = 4,    /* a bad argument */
  ncclInvalidUsage = 5,       /* a call the ranks disagree on, or out of order */
  ncclRemoteError = 6,        /* a peer failed */
  ncclInProgress = 7          /* non-blocking communicator still initializing */
} ncclResult_t;

typedef enum {
  ncclInt8 = 0, ncclChar = 0, ncclUint8 = 1, ncclInt32 = 2, ncclInt = 2, ncclUint32 = 3, ncclInt64 = 4,
  ncclUint64 = 5, ncclFloat16 = 6, ncclHalf = 6, ncclFloat32 = 7, ncclFloat = 7, ncclFloat64 = 8, ncclDouble = 8,
  ncclBfloat16 = 9
} ncclDataType_t;

typedef enum { ncclSum = 0, ncclProd = 1, ncclMax = 2, ncclMin = 3, ncclAvg = 4 } ncclRedOp_t;

typedef struct ncclConfig_v22800 {
  size_t size;
  unsigned int magic;
  unsigned int version;
  int blocking;
  int cgaClusterSize;
  int minCTAs;
  int maxCTAs;
  const char *netName;
  int splitShare;
  int trafficClass;
  const char *commName;
  int collnetEnable;
  int CTAPolicy;
  int shrinkShare;
  int nvlsCTAs;
} ncclConfig_t;
#define NCCL_CONFIG_UNDEF_INT (-2147483647 - 1)
#define NCCL_CONFIG_UNDEF_PTR NULL
#define NCCL_CONFIG_INITIALIZER                                                                            \
  {                                                                                                        \
    sizeof(ncclConfig_t), 0xcafebeef, NCCL_VERSION_CODE, NCCL_CONFIG_UNDEF_INT, NCCL_CONFIG_UNDEF_INT,     \
        NCCL_CONFIG_UNDEF_INT, NCCL_CONFIG_UNDEF_INT, NCCL_CONFIG_UNDEF_PTR, NCCL_CONFIG_UNDEF_INT,        \
        NCCL_CONFIG_UNDEF_INT, NCCL_CONFIG_UNDEF_PTR, NCCL_CONFIG_UNDEF_INT, NCCL_CONFIG_UNDEF_INT,        \
        NCCL_CONFIG_UNDEF_INT, NCCL_CONFIG_UNDEF_INT                                                       \
  }

const char *ncclGetErrorString(ncclResult_t r);
const char *ncclGetLastError(ncclComm_t c);
ncclResult_t ncclGetVersion(int *v);
ncclResult_t ncclGetUniqueId(ncclUniqueId *id);
ncclResult_t ncclCommInitRank(ncclComm_t *c, int nranks, ncclUniqueId id, int rank);
ncclResult_t ncclCommInitRankConfig(ncclComm_t *c, int nranks, ncclUniqueId id, int rank, ncclConfig_t *cfg);
ncclResult_t ncclCommSplit(ncclComm_t c, int color, int key, ncclComm_t *out, ncclConfig_t *cfg);
ncclResult_t ncclCommCount(const ncclComm_t c, int *n);
ncclResult_t ncclCommUserRank(const ncclComm_t c, int *r);
ncclResult_t ncclCommGetAsyncError(ncclComm_t c, ncclResult_t *r);
ncclResult_t ncclCommFinalize(ncclComm_t c);
ncclResult_t ncclCommDestroy(ncclComm_t c);
ncclResult_t ncclCommAbort(ncclComm_t c);
ncclResult_t ncclCommRegister(const ncclComm_t c, void *buf, size_t bytes, void **handle);
ncclResult_t ncclCommDeregister(const ncclComm_t c, void *handle);
ncclResult_t ncclMemAlloc(void **p, size_t bytes);
ncclResult_t ncclMemFree(void *p);
ncclResult_t ncclGroupStart(void);
ncclResult_t ncclGroupEnd(void);
ncclResult_t ncclAllGather(const void *src, void *dst, size_t count, ncclDataType_t t, ncclComm_t c, cudaStream_t s);
ncclResult_t ncclReduceScatter(const void *src, void *dst, size_t count, ncclDataType_t t, ncclRedOp_t op, ncclComm_t c,
                               cudaStream_t s);
ncclResult_t ncclAllReduce(const void *src, void *dst, size_t count, ncclDataType_t t, ncclRedOp_t op, ncclComm_t c,
                           cudaStream_t s);
ncclResult_t ncclBroadcast(const void *src, void *dst, size_t count, ncclDataType_t t, int root, ncclComm_t c,
                           cudaStream_t s);
ncclResult_t ncclReduce(const void *src, void *dst, size_t count, ncclDataType_t t, ncclRedOp_t op, int root,
                        ncclComm_t c, cudaStream_t s);
ncclResult_t ncclSend(const void *src, size_t count, ncclDataType_t t, int peer, ncclComm_t c, cudaStream_t s);
ncclResult_t ncclRecv(void *dst, size_t count, ncclDataType_t t, int peer, ncclComm_t c, cudaStream_t s);

#ifdef __cplusplus
}
#endif
#endif
