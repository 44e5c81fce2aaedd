# The simulated CUDA device (tests/simdev/, docs/simdev.md): the CUDA runtime
# and NCCL on the host, with CUDA's stream semantics and an adversarial,
# seeded scheduler. The NCCL backend's own sources (executor/nccl.c,
# executor/xfer_nccl.c) and the rest of the executor compile a second time
# against its headers into flexplan_exec_simdev; train_mlp and the GPU tests
# link that instead of the real executor. Built in every configuration (no
# CUDA toolkit needed), used only by tests and benches; ctest label simdev.
set(FP_SIMDEV_DIR ${CMAKE_CURRENT_SOURCE_DIR}/simdev)
add_library(fp_simdev STATIC ${FP_SIMDEV_DIR}/simdev.c ${FP_SIMDEV_DIR}/simnccl.c ${FP_SIMDEV_DIR}/simkern.c)
target_include_directories(fp_simdev BEFORE PUBLIC ${FP_SIMDEV_DIR}/include)
target_include_directories(fp_simdev PRIVATE ${CMAKE_SOURCE_DIR} ${CMAKE_SOURCE_DIR}/include)
# the layers' sums as the GPU computes them (no contraction into FMAs)
target_compile_options(fp_simdev PRIVATE -ffp-contract=off)
target_link_libraries(fp_simdev PUBLIC flexplan_kernels Threads::Threads rt m)

add_library(flexplan_exec_simdev STATIC)
target_sources(flexplan_exec_simdev PRIVATE ${FP_EXEC_SRC} ${FP_EXEC_CUDA_SRC})
list(TRANSFORM FP_EXEC_SRC PREPEND ${CMAKE_SOURCE_DIR}/ OUTPUT_VARIABLE fp_exec_src_abs)
list(TRANSFORM FP_EXEC_CUDA_SRC PREPEND ${CMAKE_SOURCE_DIR}/ OUTPUT_VARIABLE fp_exec_cuda_src_abs)
set_property(TARGET flexplan_exec_simdev PROPERTY SOURCES ${fp_exec_src_abs} ${fp_exec_cuda_src_abs})
target_include_directories(flexplan_exec_simdev PUBLIC ${CMAKE_SOURCE_DIR} ${CMAKE_SOURCE_DIR}/include)
target_compile_definitions(flexplan_exec_simdev PUBLIC FP_HAVE_CUDA=1)
target_link_libraries(flexplan_exec_simdev PUBLIC fp_simdev flexplan_core flexplan_kernels flexplan_st
                      PkgConfig::JSONC MPI::MPI_C Threads::Threads m)

# train_mlp on the simulated device (--backend nccl)
add_executable(train_mlp_simdev ${CMAKE_SOURCE_DIR}/examples/train_mlp.c)
target_link_libraries(train_mlp_simdev PRIVATE flexplan_exec_simdev m)
