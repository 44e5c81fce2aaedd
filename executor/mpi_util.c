/* mpi_util.c - MPI for programs that do not link MPI themselves: a Python
 * trainer over ctypes starts, stops and aborts MPI through the library
 * (which links MPI for its backend) instead of needing mpi4py. Thin
 * wrappers: they ask for MPI_THREAD_MULTIPLE (the MPI backend's progress
 * thread needs it), tolerate MPI already being initialized by someone else,
 * and never finalize twice. */
#include <mpi.h>
#include <stdlib.h>

#include "flexplan.h"

fp_status fp_mpi_init(int *rank, int *world_size) {
  int inited = 0, finalized = 0, provided = 0, r = 0, n = 0;
  if (MPI_Finalized(&finalized) != MPI_SUCCESS || finalized) return FP_ERR_BACKEND;
  if (MPI_Initialized(&inited) != MPI_SUCCESS) return FP_ERR_BACKEND;
  if (!inited && MPI_Init_thread(NULL, NULL, MPI_THREAD_MULTIPLE, &provided) != MPI_SUCCESS) return FP_ERR_BACKEND;
  if (MPI_Comm_rank(MPI_COMM_WORLD, &r) != MPI_SUCCESS || MPI_Comm_size(MPI_COMM_WORLD, &n) != MPI_SUCCESS)
    return FP_ERR_BACKEND;
  if (rank) *rank = r;
  if (world_size) *world_size = n;
  return FP_OK;
}

fp_status fp_mpi_finalize(void) {
  int inited = 0, finalized = 0;
  MPI_Initialized(&inited);
  MPI_Finalized(&finalized);
  if (!inited || finalized) return FP_OK;
  return MPI_Finalize() == MPI_SUCCESS ? FP_OK : FP_ERR_BACKEND;
}

void fp_mpi_abort(int code) {
  int inited = 0, finalized = 0;
  MPI_Initialized(&inited);
  MPI_Finalized(&finalized);
  if (inited && !finalized) MPI_Abort(MPI_COMM_WORLD, code);
  exit(code);
}
