/* test_simnccl_groups.c (label simdev; mpirun -n 2..4) - the simulated
 * NCCL's own contract for large groups, which every NCCL test on the
 * simulated device leans on: one ncclGroupStart/End holding more
 * point-to-point operations per peer than the simulator's ring has slots
 * (3 rings and a bit, each way, to every peer), and more collectives than
 * its collective slots (2 rounds and a bit). NCCL matches sends and
 * receives per peer in the order they were issued and runs a group's
 * collectives in order, however many there are; every byte received and
 * every reduced element is checked against what the host computes.
 *
 * The collectives' group hangs in a simulator that reuses a slot before its
 * last user's peers have read it; the point-to-point rounds hang now and then
 * (a race between ranks) in one that lets a later send take a ring slot ahead
 * of an earlier one, which is why they run many rounds. A hang is reported by
 * the simulator (FP_SIMDEV_HANG_S) with what each stuck operation waits for,
 * and alarm() ends the test if all else fails. */
#include <signal.h>
#include <stdint.h>

#include <cuda_runtime_api.h>
#include <nccl.h>

#include "tests/exec_util.h"

enum { ROUNDS = 150, P2P_OPS = 3 * 16 + 5, COLLS = 2 * 64 + 3 };

static uint8_t byte_of(int from, int to, int k, size_t i, int round) {
  return (uint8_t)(from * 131 + to * 31 + k * 7 + (int)i * 13 + round * 3 + 1);
}
/* message k of the round from rank from to rank to: 1 to 97 bytes, ragged */
static size_t msg_bytes(int from, int to, int k, int round) { return 1 + (size_t)((from * 5 + to * 3 + k * 11 + round) % 97); }

static void on_alarm(int sig) {
  (void)sig;
  static const char m[] = "test_simnccl_groups: hung (alarm)\n";
  if (write(2, m, sizeof m - 1) < 0) _exit(3);
  _exit(3);
}

/* a failed NCCL or CUDA call ends every rank (the test cannot go on) */
static void must(bool ok, const char *call, const char *why) {
  if (ok) return;
  fprintf(stderr, "rank %d: %s: %s\n", tu_rank, call, why);
  MPI_Abort(MPI_COMM_WORLD, 1);
}
#define NCHECK(call)                                                  \
  do {                                                                \
    ncclResult_t r_ = (call);                                         \
    must(r_ == ncclSuccess, #call, ncclGetErrorString(r_));           \
  } while (0)
#define CCHECK(call)                                                  \
  do {                                                                \
    cudaError_t e_ = (call);                                          \
    must(e_ == cudaSuccess, #call, cudaGetErrorString(e_));           \
  } while (0)

/* every rank sends P2P_OPS messages to every other rank and receives as
 * many from each, all in one group, sends and receives interleaved per peer */
static void p2p_round(ncclComm_t comm, cudaStream_t st, int round) {
  const int W = tu_world, me = tu_rank;
  size_t out_bytes = 0, in_bytes = 0;
  for (int p = 0; p < W; p++)
    for (int k = 0; k < P2P_OPS; k++)
      if (p != me) out_bytes += msg_bytes(me, p, k, round), in_bytes += msg_bytes(p, me, k, round);
  uint8_t *host = malloc(out_bytes + in_bytes + 1), *dev = NULL;
  size_t at = 0;
  for (int p = 0; p < W; p++)
    for (int k = 0; k < P2P_OPS; k++)
      if (p != me)
        for (size_t i = 0; i < msg_bytes(me, p, k, round); i++) host[at++] = byte_of(me, p, k, i, round);
  memset(host + out_bytes, 0xee, in_bytes);
  CCHECK(cudaMalloc((void **)&dev, out_bytes + in_bytes + 1));
  CCHECK(cudaMemcpyAsync(dev, host, out_bytes + in_bytes, cudaMemcpyHostToDevice, st)); /* ordered before the group */
  NCHECK(ncclGroupStart());
  size_t so = 0, ro = out_bytes;
  for (int k = 0; k < P2P_OPS; k++)
    for (int q = 1; q < W; q++) { /* to me + q, from me - q: every rank's order differs */
      int to = (me + q) % W, from = (me - q + W) % W;
      size_t sb = msg_bytes(me, to, k, round), rb = msg_bytes(from, me, k, round);
      /* where message k to `to` sits in the send block (laid out peer by peer) */
      size_t s_at = 0, r_at = 0;
      for (int p = 0; p < to; p++)
        for (int j = 0; j < P2P_OPS; j++)
          if (p != me) s_at += msg_bytes(me, p, j, round);
      for (int j = 0; j < k; j++) s_at += msg_bytes(me, to, j, round);
      for (int p = 0; p < from; p++)
        for (int j = 0; j < P2P_OPS; j++)
          if (p != me) r_at += msg_bytes(p, me, j, round);
      for (int j = 0; j < k; j++) r_at += msg_bytes(from, me, j, round);
      NCHECK(ncclSend(dev + s_at, sb, ncclUint8, to, comm, st));
      NCHECK(ncclRecv(dev + out_bytes + r_at, rb, ncclUint8, from, comm, st));
      so += sb, ro += rb;
    }
  NCHECK(ncclGroupEnd());
  EXPECT(so == out_bytes && ro == out_bytes + in_bytes, "round %d: the layout adds up", round);
  CCHECK(cudaStreamSynchronize(st));
  CCHECK(cudaMemcpyAsync(host + out_bytes, dev + out_bytes, in_bytes, cudaMemcpyDeviceToHost, st));
  CCHECK(cudaStreamSynchronize(st));
  size_t r_at = out_bytes;
  int bad = 0;
  for (int p = 0; p < W; p++)
    for (int k = 0; k < P2P_OPS; k++) {
      if (p == me) continue;
      for (size_t i = 0; i < msg_bytes(p, me, k, round); i++, r_at++)
        if (host[r_at] != byte_of(p, me, k, i, round) && bad++ < 3)
          EXPECT(0, "round %d: message %d from rank %d, byte %zu: %u, sent %u", round, k, p, i, host[r_at],
                 byte_of(p, me, k, i, round));
    }
  CCHECK(cudaFree(dev));
  free(host);
}

/* COLLS all-reduces of ragged lengths (sums of small integers: exact in fp32) in one group */
static void coll_round(ncclComm_t comm, cudaStream_t st, int round) {
  const int W = tu_world, me = tu_rank;
  size_t total = 0;
  for (int k = 0; k < COLLS; k++) total += 1 + (size_t)((k * 7 + round) % 23);
  float *host = malloc(total * sizeof *host), *dev = NULL;
  for (size_t i = 0; i < total; i++) host[i] = (float)((me + 1) * (int)(i % 17 + 1));
  CCHECK(cudaMalloc((void **)&dev, total * sizeof *dev));
  CCHECK(cudaMemcpyAsync(dev, host, total * sizeof *dev, cudaMemcpyHostToDevice, st));
  NCHECK(ncclGroupStart());
  size_t at = 0;
  for (int k = 0; k < COLLS; k++) {
    size_t n = 1 + (size_t)((k * 7 + round) % 23);
    NCHECK(ncclAllReduce(dev + at, dev + at, n, ncclFloat32, ncclSum, comm, st));
    at += n;
  }
  NCHECK(ncclGroupEnd());
  CCHECK(cudaStreamSynchronize(st));
  CCHECK(cudaMemcpyAsync(host, dev, total * sizeof *dev, cudaMemcpyDeviceToHost, st));
  CCHECK(cudaStreamSynchronize(st));
  int bad = 0;
  for (size_t i = 0; i < total; i++) {
    float want = (float)(W * (W + 1) / 2 * (int)(i % 17 + 1));
    if (host[i] != want && bad++ < 3) EXPECT(0, "round %d: element %zu: %g, want %g", round, i, host[i], want);
  }
  CCHECK(cudaFree(dev));
  free(host);
}

int main(int argc, char **argv) {
  tu_init(&argc, &argv);
  if (tu_world < 2) {
    fprintf(stderr, "test_simnccl_groups: run with 2 or more ranks\n");
    return 2;
  }
  signal(SIGALRM, on_alarm);
  alarm(240);
  CCHECK(cudaSetDevice(tu_rank));
  ncclUniqueId id;
  if (tu_rank == 0) NCHECK(ncclGetUniqueId(&id));
  MPI_Bcast(&id, sizeof id, MPI_BYTE, 0, MPI_COMM_WORLD);
  ncclComm_t comm;
  NCHECK(ncclCommInitRank(&comm, tu_world, id, tu_rank));
  cudaStream_t st;
  CCHECK(cudaStreamCreateWithFlags(&st, cudaStreamNonBlocking));
  for (int round = 0; round < ROUNDS; round++) p2p_round(comm, st, round);
  for (int round = 0; round < 3; round++) coll_round(comm, st, round);
  CCHECK(cudaStreamDestroy(st));
  NCHECK(ncclCommDestroy(comm));
  return tu_finish();
}
