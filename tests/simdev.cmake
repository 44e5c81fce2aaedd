# The simulated CUDA device (tests/simdev/, docs/simdev.md): the CUDA runtime
# and NCCL on the host, with CUDA's stream semantics and an adversarial,
# seeded scheduler. The NCCL backend's own sources (executor/nccl.c,
# executor/xfer_nccl.c) and the rest of the executor compile a second time
# against its headers into flexplan_exec_simdev; train_mlp and the GPU tests
# link that instead of the real executor. Built in every configuration (no
# CUDA toolkit needed), used only by tests and benches; ctest label simdev.
set(FP_SIMDEV_DIR ${CMAKE_CURRENT_SOURCE_DIR}/simdev)
# object libraries (position-independent): static archives for the C tests,
# and the shared library for the Python ones (below)
add_library(fp_simdev_obj OBJECT ${FP_SIMDEV_DIR}/simdev.c ${FP_SIMDEV_DIR}/simnccl.c ${FP_SIMDEV_DIR}/simkern.c)
set_target_properties(fp_simdev_obj PROPERTIES POSITION_INDEPENDENT_CODE ON)
target_include_directories(fp_simdev_obj BEFORE PUBLIC ${FP_SIMDEV_DIR}/include)
target_include_directories(fp_simdev_obj PUBLIC ${CMAKE_SOURCE_DIR} ${CMAKE_SOURCE_DIR}/include)
# the layers' sums as the GPU computes them (no contraction into FMAs)
target_compile_options(fp_simdev_obj PRIVATE -ffp-contract=off)
target_link_libraries(fp_simdev_obj PUBLIC Threads::Threads rt m)
add_library(fp_simdev STATIC $<TARGET_OBJECTS:fp_simdev_obj>)
target_link_libraries(fp_simdev PUBLIC fp_simdev_obj flexplan_kernels)

list(TRANSFORM FP_EXEC_SRC PREPEND ${CMAKE_SOURCE_DIR}/ OUTPUT_VARIABLE fp_exec_src_abs)
list(TRANSFORM FP_EXEC_CUDA_SRC PREPEND ${CMAKE_SOURCE_DIR}/ OUTPUT_VARIABLE fp_exec_cuda_src_abs)
add_library(flexplan_exec_simdev_obj OBJECT ${fp_exec_src_abs} ${fp_exec_cuda_src_abs})
set_target_properties(flexplan_exec_simdev_obj PROPERTIES POSITION_INDEPENDENT_CODE ON)
target_include_directories(flexplan_exec_simdev_obj BEFORE PRIVATE ${FP_SIMDEV_DIR}/include)
target_include_directories(flexplan_exec_simdev_obj PUBLIC ${CMAKE_SOURCE_DIR} ${CMAKE_SOURCE_DIR}/include)
target_compile_definitions(flexplan_exec_simdev_obj PUBLIC FP_HAVE_CUDA=1)
target_link_libraries(flexplan_exec_simdev_obj PUBLIC MPI::MPI_C Threads::Threads m)
add_library(flexplan_exec_simdev STATIC $<TARGET_OBJECTS:flexplan_exec_simdev_obj>)
target_link_libraries(flexplan_exec_simdev PUBLIC flexplan_exec_simdev_obj fp_simdev flexplan_ir flexplan_kernels
                      flexplan_st)

# train_mlp on the simulated device (--backend nccl)
add_executable(train_mlp_simdev ${CMAKE_SOURCE_DIR}/examples/train_mlp.c)
target_link_libraries(train_mlp_simdev PRIVATE flexplan_exec_simdev m)
# planted plan bugs (FP_SIMDEV_DROP_WAIT, tests/simdev/mutate.c) for the mutation tests
target_sources(train_mlp_simdev PRIVATE ${FP_SIMDEV_DIR}/mutate.c)
target_link_options(train_mlp_simdev PRIVATE "LINKER:--wrap=fp_plan_load")

set(FP_SIMDEV_ENV ${FP_MPI_ENV} FP_SIMDEV_HANG_S=120)
if(FP_SANITIZE)
  # the simulated heap's memfd is mapped twice (its PROT_NONE view faults on host access by design)
  list(APPEND FP_SIMDEV_ENV FP_SIMDEV_MEM=268435456)
endif()

# fp_sim_parity(name model spec np [args...]): train_mlp on the simulated
# device against the MPI backend at np ranks, eager / graph / capture modes,
# three scheduler seeds each (tests/simdev/sim_parity.py); under the
# sanitizers one seed (they look for memory errors: the interleavings are
# the default preset's job, and ten sanitized runs a test take minutes)
set(FP_SIMDEV_SEEDS 1,2,3)
if(FP_SANITIZE)
  set(FP_SIMDEV_SEEDS 1)
endif()
function(fp_sim_parity name model spec np)
  add_test(NAME simdev_parity_${name}_np${np}
           COMMAND ${FP_PYTHON} ${FP_SIMDEV_DIR}/sim_parity.py --flexplan $<TARGET_FILE:flexplan>
                   --train $<TARGET_FILE:train_mlp> --train-sim $<TARGET_FILE:train_mlp_simdev>
                   "--mpiexec=${FP_MPIEXEC_CMD}" --dir ${CMAKE_CURRENT_SOURCE_DIR}/mpi --model ${model} --spec ${spec}
                   --np ${np} --seeds ${FP_SIMDEV_SEEDS} ${ARGN})
  set_tests_properties(simdev_parity_${name}_np${np} PROPERTIES LABELS "simdev;mpi" TIMEOUT 600 PROCESSORS ${np}
                       ENVIRONMENT "${FP_SIMDEV_ENV}")
endfunction()
foreach(np 1 2 3 4)
  fp_sim_parity(full_shard mlp full_shard ${np})
  fp_sim_parity(shard_grad_op mlp shard_grad_op ${np})
  fp_sim_parity(no_shard_frozen mlp-frozen no_shard ${np})
  fp_sim_parity(bf16 mlp bf16 ${np})
  fp_sim_parity(ga2 mlp ga2 ${np})
  fp_sim_parity(flat mlp flat ${np})
  fp_sim_parity(offload mlp offload ${np})
endforeach()
# MXFP8 gathers (reshard_after_forward 2: even worlds)
fp_sim_parity(mxfp8_gather mlp fp8-gather 2 --no-check)
fp_sim_parity(mxfp8_gather mlp fp8-gather 4 --no-check)
fp_sim_parity(full_shard_fsdp2 mlp full_shard 2 --policy fsdp2)
fp_sim_parity(hybrid_2x2 mlp hybrid 4)
fp_sim_parity(hybrid_2x2_ga2 mlp hybrid-ga2 4)
# one CUDA graph per step through the executor's capture API (train_mlp --mode
# step; include/flexplan.h, docs/cuda.md "One graph per step"): step 0 eager,
# step 1 captured whole in a global-mode capture between fp_exec_capture_begin
# and _end, steps 2.. replayed with no hook and a refit before step 2; eight
# scheduler seeds, every run of either mode byte for byte equal to the others
# (--sim-exact) and to the MPI run (bytes at 1-2 ranks, 1e-5 at 3-4)
set(FP_SIMDEV_STEP_SEEDS 1,2,3,4,5,6,7,8)
if(FP_SANITIZE)
  set(FP_SIMDEV_STEP_SEEDS 1)
endif()
function(fp_sim_step name model spec np)
  fp_sim_parity(step_${name} ${model} ${spec} ${np} --modes eager,step --seeds ${FP_SIMDEV_STEP_SEEDS} --sim-exact
                ${ARGN})
endfunction()
foreach(np 1 2 3 4)
  fp_sim_step(full_shard mlp full_shard ${np})
  fp_sim_step(shard_grad_op mlp shard_grad_op ${np})
  fp_sim_step(bf16 mlp bf16 ${np})
  fp_sim_step(ga2 mlp ga2 ${np})
  fp_sim_step(no_shard_frozen mlp-frozen no_shard ${np})
  fp_sim_step(offload mlp offload ${np})
endforeach()
fp_sim_step(mxfp8_gather mlp fp8-gather 2 --no-check)
fp_sim_step(mxfp8_gather mlp fp8-gather 4 --no-check)
fp_sim_step(hybrid_2x2 mlp hybrid 4)
fp_sim_step(hybrid_2x2_ga2 mlp hybrid-ga2 4)
fp_sim_step(full_shard_fsdp2 mlp full_shard 2 --policy fsdp2)
fp_sim_step(stream_executor mlp full_shard 2 --trainer-args=--stream=executor)
# the trainer's capture mistakes (train_mlp --plant), each caught with a clear
# error on every rank and seed: the capture ended after the backward without
# fp_exec_capture_end (the plan's side streams not joined back), a host
# synchronization and an allocation inside the capture (CUDA invalidates
# it; the executor's next hook says so), fp_exec_sync inside it (refused)
function(fp_sim_plant name regex)
  fp_sim_parity(step_plant_${name} mlp ga2 2 --modes step --seeds 1,2 --no-check --trainer-args=--plant=${name}
                "--expect-error=${regex}")
endfunction()
fp_sim_plant(unjoined "ended without fp_exec_capture_end inside a step, before pre_optimizer: the plan's side streams forked into it \\(ag, rs\\) were not joined back")
fp_sim_plant(sync "hook post_forward\\(fc0\\): the capture begun by fp_exec_capture_begin was invalidated")
fp_sim_plant(alloc "hook post_forward\\(fc0\\): the capture begun by fp_exec_capture_begin was invalidated")
fp_sim_plant(exec-sync "planted fp_exec_sync: fp_exec_sync \\(or a refit\\) while the compute stream is being captured")

# the stream contract: the trainer on the legacy default stream (handed over
# as FP_CUDA_STREAM_LEGACY), on the executor's own stream, and on another
# stream every step (fp_exec_set_cuda_stream)
fp_sim_parity(stream_legacy mlp full_shard 2 --modes eager,graph --trainer-args=--stream=legacy)
fp_sim_parity(stream_executor mlp full_shard 2 --trainer-args=--stream=executor)
fp_sim_parity(stream_switch mlp ga2 3 --modes eager,graph --trainer-args=--stream=switch)

# mutation tests: each planted ordering bug must make the parity fail under
# some seed among the first few (sim_parity.py --expect-fail names them)
fp_sim_parity(mutation_drop_wait mlp full_shard 2 --expect-fail --seeds 1,2,3,4,5 --modes eager,graph,step
              --env FP_SIMDEV_DROP_WAIT=0)
fp_sim_parity(mutation_untold_legacy_stream mlp full_shard 2 --expect-fail --seeds 1,2,3,4,5 --modes eager,graph
              --trainer-args=--stream=legacy-untold)
fp_sim_parity(mutation_unordered_upload mlp full_shard 2 --expect-fail --seeds 1,2,3,4,5 --modes capture,graph
              --trainer-args=--upload=unordered)

# the GPU tests' own programs on the simulated device (tests/gpu.cmake runs them on a GPU)
add_executable(test_exec_cuda_simdev ${CMAKE_CURRENT_SOURCE_DIR}/test_exec_cuda.c)
target_link_libraries(test_exec_cuda_simdev PRIVATE flexplan_exec_simdev flexplan_core) # (exec_util.h builds plans with the planner)
add_library(flexplan_api_simdev STATIC $<TARGET_OBJECTS:flexplan_api_obj>)
target_link_libraries(flexplan_api_simdev PUBLIC flexplan_viz flexplan_planner flexplan_exec_simdev)
add_executable(test_xfer_nccl_simdev ${CMAKE_CURRENT_SOURCE_DIR}/test_xfer_nccl.c)
target_link_libraries(test_xfer_nccl_simdev PRIVATE flexplan_api_simdev PkgConfig::JSONC m)
add_executable(test_exec_nccl_nodev_simdev ${CMAKE_CURRENT_SOURCE_DIR}/test_exec_nccl_nodev.c)
target_link_libraries(test_exec_nccl_nodev_simdev PRIVATE flexplan_exec_simdev flexplan_core) # (exec_util.h builds plans with the planner)
add_executable(test_simdev_watchdog ${FP_SIMDEV_DIR}/test_simdev_watchdog.c)
target_link_libraries(test_simdev_watchdog PRIVATE flexplan_exec_simdev flexplan_core) # (exec_util.h builds plans with the planner)
add_executable(test_simnccl_groups ${FP_SIMDEV_DIR}/test_simnccl_groups.c)
target_link_libraries(test_simnccl_groups PRIVATE flexplan_exec_simdev flexplan_core)

# fp_simdev_test(name np exe args...): an MPI test on the simulated device, once per seed of FP_SIMDEV_SEEDS
function(fp_simdev_test name np exe)
  string(REPLACE "," ";" seeds "${FP_SIMDEV_SEEDS}")
  foreach(seed ${seeds})
    add_test(NAME simdev_${name}_seed${seed}
             COMMAND ${FP_MPIEXEC} ${MPIEXEC_NUMPROC_FLAG} ${np} ${FP_MPIEXEC_PREFLAGS} $<TARGET_FILE:${exe}>
                     ${MPIEXEC_POSTFLAGS} ${ARGN})
    set_tests_properties(simdev_${name}_seed${seed} PROPERTIES LABELS "simdev;mpi" TIMEOUT 300 PROCESSORS ${np}
                         ENVIRONMENT "${FP_SIMDEV_ENV};FP_SIMDEV_SEED=${seed}")
  endforeach()
endfunction()
# every op on all three streams, each mode, refusals inside a capture, a refit
# under captured graphs, each bootstrap with NCCL_COMM_ID set (gpu_exec's program)
fp_simdev_test(exec 1 test_exec_cuda_simdev)
# a transfer between plans on NCCL executors against MPI executors (gpu_xfer's
# program), at 1 to 4 ranks: full_shard <-> no_shard, MXFP8 on the way, into
# kept MXFP8 weights
foreach(np 1 2 3 4)
  fp_simdev_test(xfer_np${np} ${np} test_xfer_nccl_simdev ${CMAKE_CURRENT_SOURCE_DIR}/mpi/mlp.model.json
                 ${CMAKE_CURRENT_SOURCE_DIR}/mpi/full_shard.spec.json ${CMAKE_CURRENT_SOURCE_DIR}/mpi/no_shard.spec.json
                 ${CMAKE_CURRENT_SOURCE_DIR}/mpi/mlp-frozen.model.json ${CMAKE_CURRENT_SOURCE_DIR}/mpi/mxfp8-keep.spec.json)
endforeach()
# ... from a FROM whose shards cut MXFP8 blocks (fc0 on dim 1, fc1 ragged at
# 3 ranks): the built-in MXFP8 quantizes slices that start inside a block
# (a short head block) on the device
fp_simdev_test(xfer_ragged_np3 3 test_xfer_nccl_simdev ${CMAKE_CURRENT_SOURCE_DIR}/mpi/mlp.model.json
               ${CMAKE_CURRENT_SOURCE_DIR}/mpi/placements-w3.spec.json ${CMAKE_CURRENT_SOURCE_DIR}/mpi/no_shard.spec.json)
string(REPLACE "," ";" fp_seeds "${FP_SIMDEV_SEEDS}")
foreach(seed ${fp_seeds})
  set_property(TEST simdev_xfer_ragged_np3_seed${seed} APPEND PROPERTY ENVIRONMENT "FP_XFER_WANT_SHORT_HEAD=1")
endforeach()
# the simulated NCCL itself: groups longer than its point-to-point rings and
# its collective slots, at 2 and 3 ranks
fp_simdev_test(nccl_groups_np2 2 test_simnccl_groups)
fp_simdev_test(nccl_groups_np3 3 test_simnccl_groups)
# the NCCL watchdog on a rank that stops
fp_simdev_test(watchdog 2 test_simdev_watchdog)
# a machine without a device (FP_SIMDEV_DEVICES=0): every rank fails at once and cleanly
add_test(NAME simdev_exec_nccl_nodev_np2
         COMMAND ${FP_MPIEXEC} ${MPIEXEC_NUMPROC_FLAG} 2 ${FP_MPIEXEC_PREFLAGS} $<TARGET_FILE:test_exec_nccl_nodev_simdev>)
set_tests_properties(simdev_exec_nccl_nodev_np2 PROPERTIES LABELS "simdev;mpi" TIMEOUT 300 PROCESSORS 2
                     ENVIRONMENT "${FP_SIMDEV_ENV};FP_SIMDEV_DEVICES=0")

# libflexplan_simdev.so: the whole library with its NCCL backend on the
# simulated device, for flexplan.torch's tests (tests/simdev/torch_sim_worker.py):
# torch CPU tensors over simulated device memory (FP_SIMDEV_HOST_VISIBLE=1)
add_library(flexplan_simdev_shared SHARED)
target_link_libraries(flexplan_simdev_shared PRIVATE flexplan_base_obj flexplan_ir_obj flexplan_planner_obj flexplan_kernels_obj
                      flexplan_st_obj flexplan_viz_obj flexplan_api_obj flexplan_exec_simdev_obj fp_simdev_obj)
set_target_properties(flexplan_simdev_shared PROPERTIES OUTPUT_NAME flexplan_simdev)
# -Bsymbolic: its own cuda*/nccl* calls bind to the simulator, never to a CUDA runtime
# torch (a CUDA build) loaded into the process first
target_link_options(flexplan_simdev_shared PRIVATE "LINKER:--no-undefined" "LINKER:-Bsymbolic")

# flexplan.torch on the simulated device (tests/python/test_torch_simdev.py)
fp_add_pytest(simdev_torch test_torch_simdev.py LABELS simdev TIMEOUT 1200)
set_property(TEST simdev_torch APPEND PROPERTY ENVIRONMENT
             "FLEXPLAN_SIMDEV_LIBRARY=$<TARGET_FILE:flexplan_simdev_shared>")

# flexplan.torch's whole-step capture contract (tests/python/test_torch_capture.py)
fp_add_pytest(simdev_torch_capture test_torch_capture.py LABELS simdev TIMEOUT 900)
set_property(TEST simdev_torch_capture APPEND PROPERTY ENVIRONMENT
             "FLEXPLAN_SIMDEV_LIBRARY=$<TARGET_FILE:flexplan_simdev_shared>")

# the stream contract's resolution on the C side
add_executable(test_simdev_stream ${FP_SIMDEV_DIR}/test_simdev_stream.c)
target_link_libraries(test_simdev_stream PRIVATE flexplan_exec_simdev flexplan_core) # (exec_util.h builds plans with the planner)
fp_simdev_test(stream_contract 1 test_simdev_stream)

# gpu_kernels' program on the simulated device: tests/test_kernels_cuda.cu
# holds no device code (it launches through kernels/kernels_cuda.h), so it
# compiles as C++ against the simulator's headers (a wrapper file: the .cu
# itself stays CUDA for tests/gpu.cmake). The kernels are the C references
# here, so what this checks is the test's own use of the runtime - uploads,
# launches on a non-blocking stream, read-backs, the captured graph - and the
# launchers' refusals: the first H200 run of it read half-uploaded inputs
# (docs/run-record.md), which the simulator now shows under some seeds.
enable_language(CXX)
file(GENERATE OUTPUT ${CMAKE_CURRENT_BINARY_DIR}/test_kernels_cuda_simdev.cpp
     CONTENT "#include \"tests/test_kernels_cuda.cu\"\n")
add_executable(test_kernels_cuda_simdev ${CMAKE_CURRENT_BINARY_DIR}/test_kernels_cuda_simdev.cpp)
target_include_directories(test_kernels_cuda_simdev BEFORE PRIVATE ${FP_SIMDEV_DIR}/include)
target_include_directories(test_kernels_cuda_simdev PRIVATE ${CMAKE_SOURCE_DIR} ${CMAKE_SOURCE_DIR}/include)
target_compile_options(test_kernels_cuda_simdev PRIVATE -Wall -Wextra $<$<BOOL:${FP_WERROR}>:-Werror>
                       $<$<BOOL:${FP_SANITIZE}>:-fsanitize=address,undefined;-fno-sanitize-recover=undefined;-fno-omit-frame-pointer>)
target_link_libraries(test_kernels_cuda_simdev PRIVATE fp_simdev flexplan_kernels flexplan_core)
fp_simdev_test(kernels 1 test_kernels_cuda_simdev)
string(REPLACE "," ";" fp_kseeds "${FP_SIMDEV_SEEDS}")
foreach(seed ${fp_kseeds}) # the long case at 70001 elements, as kernels_emul
  set_property(TEST simdev_kernels_seed${seed} APPEND PROPERTY ENVIRONMENT FP_KERNEL_CASES_N=70001)
endforeach()

# placement plug-ins (docs/placements.md): the example plug-ins' plans
# (compiled by tests/plugin_compile.c, the CLI's compile with them
# registered) on the simulated device against the MPI backend
function(fp_sim_plugin_parity name model spec np)
  add_test(NAME simdev_parity_${name}_np${np}
           COMMAND ${FP_PYTHON} ${FP_SIMDEV_DIR}/sim_parity.py --flexplan $<TARGET_FILE:plugin_compile>
                   --train $<TARGET_FILE:train_mlp> --train-sim $<TARGET_FILE:train_mlp_simdev>
                   "--mpiexec=${FP_MPIEXEC_CMD}" --dir ${CMAKE_CURRENT_SOURCE_DIR}/mpi --model ${model} --spec ${spec}
                   --np ${np} --seeds ${FP_SIMDEV_SEEDS})
  set_tests_properties(simdev_parity_${name}_np${np} PROPERTIES LABELS "simdev;mpi" TIMEOUT 600 PROCESSORS ${np}
                       ENVIRONMENT "${FP_SIMDEV_ENV}")
endfunction()
foreach(np 1 2 3 4)
  fp_sim_plugin_parity(plugin_expert_owned mlp-experts expert-owned ${np})
endforeach()
foreach(np 2 3 4)
  fp_sim_plugin_parity(plugin_block_cyclic mlp block-cyclic ${np})
endforeach()
foreach(np 2 3 4)
  fp_sim_plugin_parity(plugin_row_cyclic mlp row-cyclic ${np})
endforeach()
