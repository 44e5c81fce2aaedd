# executor: the MPI backend under mpirun (label "mpi"). fp_mpi_test(name np
# exe args...) runs `mpiexec -n np <preflags> exe args` as FindMPI documents,
# with --oversubscribe (more ranks than cores) and --allow-run-as-root (CI
# containers run as root) in the preflags.
set(FP_MPIEXEC_PREFLAGS --oversubscribe --allow-run-as-root ${MPIEXEC_PREFLAGS}
    CACHE STRING "flags before the program in MPI tests")
# Docker's default seccomp profile blocks vader's CMA single copy
# (process_vm_readv): "Read -1, expected N, errno = 1" (docs/executor.md)
set(FP_MPI_ENV OMPI_MCA_btl_vader_single_copy_mechanism=none OMPI_MCA_rmaps_base_oversubscribe=1)

function(fp_mpi_test name np exe)
  add_test(NAME ${name}
           COMMAND ${MPIEXEC_EXECUTABLE} ${MPIEXEC_NUMPROC_FLAG} ${np} ${FP_MPIEXEC_PREFLAGS}
                   $<TARGET_FILE:${exe}> ${MPIEXEC_POSTFLAGS} ${ARGN})
  set_tests_properties(${name} PROPERTIES LABELS mpi TIMEOUT 300 PROCESSORS ${np} ENVIRONMENT "${FP_MPI_ENV}")
endfunction()

add_executable(test_exec_ops ${CMAKE_CURRENT_SOURCE_DIR}/test_exec_ops.c)
target_link_libraries(test_exec_ops PRIVATE flexplan_exec)
foreach(np 1 2 3 4)
  fp_mpi_test(exec_ops_np${np} ${np} test_exec_ops)
endforeach()
