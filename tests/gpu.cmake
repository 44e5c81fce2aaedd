# GPU and CUDA tests (included after exec.cmake: they use its MPI settings).
# CUDA: built when nvcc and NCCL are found (FP_HAVE_CUDA, see CMakeLists.txt).
# Tests that need a GPU carry the label "gpu" and exit 77 (ctest: skipped)
# when cudaGetDeviceCount fails or finds no device; tests that only need the
# CUDA build run everywhere it exists (label unit / mpi).
if(NOT FP_HAVE_CUDA)
  # say so in the test report instead of leaving the GPU tests out silently
  add_test(NAME gpu_not_built COMMAND sh -c "echo \"$1\"; exit 77" sh "SKIPPED: flexplan was built without CUDA: ${FP_CUDA_WHY}")
  set_tests_properties(gpu_not_built PROPERTIES LABELS gpu SKIP_RETURN_CODE 77)
  return()
endif()

# the kernels' per-thread bodies on the host against the C references (no GPU)
add_executable(test_kernels_emul ${CMAKE_CURRENT_SOURCE_DIR}/test_kernels_emul.cu)
target_link_libraries(test_kernels_emul PRIVATE flexplan_kernels flexplan_core CUDA::cudart)
target_compile_options(test_kernels_emul PRIVATE "$<$<COMPILE_LANGUAGE:CUDA>:-O2>")
add_test(NAME kernels_emul COMMAND test_kernels_emul)
set_tests_properties(kernels_emul PROPERTIES LABELS unit TIMEOUT 300 ENVIRONMENT FP_KERNEL_CASES_N=70001)

# Under AddressSanitizer, CUDA needs the shadow gap unprotected (it maps
# memory there), and the driver's and NCCL's allocations that live until exit
# are not leaks of ours
set(FP_GPU_ENV "")
set(FP_GPU_MPI_ENV "${FP_MPI_ENV}")
if(FP_SANITIZE)
  set(fp_lsan "LSAN_OPTIONS=suppressions=${CMAKE_CURRENT_SOURCE_DIR}/gpu/lsan-cuda.supp:print_suppressions=0")
  set(FP_GPU_ENV "ASAN_OPTIONS=detect_leaks=1:abort_on_error=1:protect_shadow_gap=0" "${fp_lsan}")
  # LSan takes one suppressions file: Open MPI's and CUDA's together
  file(READ ${CMAKE_CURRENT_SOURCE_DIR}/mpi/lsan-openmpi.supp fp_supp_mpi)
  file(READ ${CMAKE_CURRENT_SOURCE_DIR}/gpu/lsan-cuda.supp fp_supp_cuda)
  file(WRITE ${CMAKE_CURRENT_BINARY_DIR}/lsan-mpi-cuda.supp "${fp_supp_mpi}${fp_supp_cuda}")
  set(FP_GPU_MPI_ENV OMPI_MCA_btl_vader_single_copy_mechanism=none OMPI_MCA_rmaps_base_oversubscribe=1
      "ASAN_OPTIONS=detect_leaks=1:abort_on_error=1:fast_unwind_on_malloc=0:protect_shadow_gap=0"
      "LSAN_OPTIONS=suppressions=${CMAKE_CURRENT_BINARY_DIR}/lsan-mpi-cuda.supp:print_suppressions=0")
  set_tests_properties(exec_nccl_nodev_np2 PROPERTIES ENVIRONMENT "${FP_GPU_MPI_ENV}")
endif()

# fp_gpu_test(name exe args...): a GPU test - label gpu, skipped (77) without
# a device, one at a time on the GPU
function(fp_gpu_test name exe)
  add_test(NAME ${name} COMMAND ${exe} ${ARGN})
  set_tests_properties(${name} PROPERTIES LABELS gpu SKIP_RETURN_CODE 77 TIMEOUT 600 RESOURCE_LOCK gpu
                       ENVIRONMENT "${FP_GPU_ENV}")
endfunction()

# the kernels on the GPU against the C references, bit for bit
add_executable(test_kernels_cuda ${CMAKE_CURRENT_SOURCE_DIR}/test_kernels_cuda.cu)
target_link_libraries(test_kernels_cuda PRIVATE flexplan_kernels_cuda flexplan_kernels flexplan_core)
fp_gpu_test(gpu_kernels test_kernels_cuda)

# train_mlp at world size 1 on the NCCL backend (eager, graph, whole-step
# capture by the trainer) against the MPI backend's run of the same plan, bit
# for bit, with a refit after the graphs were captured
set(FP_GPU_MPIEXEC "${FP_MPIEXEC};${MPIEXEC_NUMPROC_FLAG};${FP_MPIEXEC_PREFLAGS}")
function(fp_gpu_parity name model spec policy)
  add_test(NAME gpu_parity_${name}
           COMMAND ${FP_PYTHON} ${CMAKE_CURRENT_SOURCE_DIR}/gpu/train_parity.py --flexplan $<TARGET_FILE:flexplan>
                   --train $<TARGET_FILE:train_mlp> "--mpiexec=${FP_GPU_MPIEXEC}" --dir ${CMAKE_CURRENT_SOURCE_DIR}/mpi
                   --model ${model} --spec ${spec} --policy ${policy})
  set_tests_properties(gpu_parity_${name} PROPERTIES LABELS gpu SKIP_RETURN_CODE 77 TIMEOUT 600 RESOURCE_LOCK gpu
                       ENVIRONMENT "${FP_GPU_MPI_ENV}")
endfunction()
fp_gpu_parity(full_shard mlp full_shard flexplan)
fp_gpu_parity(full_shard_fsdp2 mlp full_shard fsdp2)
fp_gpu_parity(shard_grad_op mlp shard_grad_op flexplan)
fp_gpu_parity(no_shard_frozen mlp-frozen no_shard flexplan)
fp_gpu_parity(bf16 mlp bf16 flexplan)
fp_gpu_parity(ga2 mlp ga2 flexplan)

# the NCCL backend against the MPI backend on a program with every op, in
# each mode; refusals inside a capture; a refit under captured graphs;
# bootstraps (runs the MPI half first: that part needs no GPU)
add_executable(test_exec_cuda ${CMAKE_CURRENT_SOURCE_DIR}/test_exec_cuda.c)
target_link_libraries(test_exec_cuda PRIVATE flexplan_exec flexplan_core) # (exec_util.h builds plans with the planner)
fp_mpi_test(gpu_exec 1 test_exec_cuda)
set_tests_properties(gpu_exec PROPERTIES LABELS gpu SKIP_RETURN_CODE 77 RESOURCE_LOCK gpu ENVIRONMENT "${FP_GPU_MPI_ENV}")

# a transfer between plans (docs/reshard.md) on NCCL executors against the
# same transfer on MPI executors, byte for byte: full_shard -> no_shard (its
# compute weights derived), an MXFP8 quantize/dequantize with a short head
# block, twice (the communicator kept), and back; then into a plan that keeps
# frozen params as MXFP8 (the CUDA quantize into TO's elements and scales)
add_executable(test_xfer_nccl ${CMAKE_CURRENT_SOURCE_DIR}/test_xfer_nccl.c)
target_link_libraries(test_xfer_nccl PRIVATE flexplan_api flexplan_exec PkgConfig::JSONC m)
fp_mpi_test(gpu_xfer 1 test_xfer_nccl ${CMAKE_CURRENT_SOURCE_DIR}/mpi/mlp.model.json
            ${CMAKE_CURRENT_SOURCE_DIR}/mpi/full_shard.spec.json ${CMAKE_CURRENT_SOURCE_DIR}/mpi/no_shard.spec.json
            ${CMAKE_CURRENT_SOURCE_DIR}/mpi/mlp-frozen.model.json ${CMAKE_CURRENT_SOURCE_DIR}/mpi/mxfp8-keep.spec.json)
set_tests_properties(gpu_xfer PROPERTIES LABELS gpu SKIP_RETURN_CODE 77 RESOURCE_LOCK gpu ENVIRONMENT "${FP_GPU_MPI_ENV}")
