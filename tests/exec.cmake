# executor: the MPI backend under mpirun (label "mpi"). fp_mpi_test(name np
# exe args...) runs `mpiexec -n np <preflags> exe args` as FindMPI documents
# (FP_MPIEXEC_PREFLAGS and FP_MPI_ENV: tests/CMakeLists.txt).
function(fp_mpi_test name np exe)
  add_test(NAME ${name}
           COMMAND ${FP_MPIEXEC} ${MPIEXEC_NUMPROC_FLAG} ${np} ${FP_MPIEXEC_PREFLAGS}
                   $<TARGET_FILE:${exe}> ${MPIEXEC_POSTFLAGS} ${ARGN})
  set_tests_properties(${name} PROPERTIES LABELS mpi TIMEOUT 300 PROCESSORS ${np} ENVIRONMENT "${FP_MPI_ENV}")
endfunction()

add_executable(test_exec_ops ${CMAKE_CURRENT_SOURCE_DIR}/test_exec_ops.c)
target_link_libraries(test_exec_ops PRIVATE flexplan_exec flexplan_core) # (exec_util.h builds plans with the planner)
foreach(np 1 2 3 4)
  fp_mpi_test(exec_ops_np${np} ${np} test_exec_ops)
endforeach()

# fp_plan_test(name model spec np program args...): compile tests/mpi/<spec>
# for np ranks (run_plan.py), then run the program on it under mpirun;
# "{plan}" in args is the plan's path.
set(FP_MPIEXEC_CMD "${FP_MPIEXEC};${MPIEXEC_NUMPROC_FLAG};${FP_MPIEXEC_PREFLAGS}")
function(fp_plan_test name model spec np)
  add_test(NAME ${name}
           COMMAND ${FP_PYTHON} ${CMAKE_CURRENT_SOURCE_DIR}/mpi/run_plan.py --flexplan $<TARGET_FILE:flexplan>
                   --model ${CMAKE_CURRENT_SOURCE_DIR}/mpi/${model}.model.json
                   --spec ${CMAKE_CURRENT_SOURCE_DIR}/mpi/${spec}.spec.json --np ${np}
                   "--mpiexec=${FP_MPIEXEC_CMD}" -- ${ARGN})
  set_tests_properties(${name} PROPERTIES LABELS mpi TIMEOUT 300 PROCESSORS ${np} ENVIRONMENT "${FP_MPI_ENV}")
endfunction()

# train_mlp parity: every step's weights against the single-process
# reference. fp_parity(name model spec np [train_mlp args])
function(fp_parity name model spec np)
  fp_plan_test(parity_${name}_np${np} ${model} ${spec} ${np}
               $<TARGET_FILE:train_mlp> --plan {plan} --steps 4 --check ${ARGN})
endfunction()

foreach(np 1 2 3 4)
  fp_parity(full_shard mlp full_shard ${np})
  fp_parity(shard_grad_op mlp shard_grad_op ${np})
  fp_parity(no_shard mlp no_shard ${np})
endforeach()
# flat buckets forced (docs/layout.md): one bucket over every module (params
# cut across ranks), accumulation; shard_grad_op; the per-param path forced
foreach(np 2 3 4)
  fp_parity(flat mlp flat ${np})
  fp_parity(flat_shard_grad_op mlp flat-sgo ${np})
  fp_parity(per_param mlp per-param ${np})
endforeach()
fp_parity(flat_hybrid_2x2_ga2 mlp flat-hybrid 4)
# shard_grad_op with overlap_param_gather: the compute weights are gathered
# again in the next step's forward (prefetched), not in post_optimizer
foreach(np 2 3 4)
  fp_parity(sgo_overlap mlp sgo-overlap ${np})
endforeach()
fp_parity(sgo_overlap_flat_ga2 mlp sgo-overlap-flat-ga2 4)
fp_parity(flat_frozen mlp-frozen flat 3)
fp_parity(full_shard_poll mlp full_shard 3 --progress poll)
fp_parity(hybrid_2x2 mlp hybrid 4)
fp_parity(hybrid_2x2_ga2 mlp hybrid-ga2 4)
fp_parity(placements mlp placements-w3 3)
# CPU offload (docs/layout.md, "Offload"): main weights, grads and AdamW state
# of the offloaded buckets in the host arena, h2d before each gather, d2h
# after the last reduction; flat, per-param and dim-1 buckets with
# accumulation; ragged, owned and replicate under hybrid with bf16 compute;
# shard_grad_op's refresh
foreach(np 2 4)
  fp_parity(offload mlp offload ${np})
  fp_parity(offload_mixed mlp offload-mixed ${np})
  fp_parity(offload_sgo mlp offload-sgo ${np})
endforeach()
fp_parity(placements mlp placements-w4 4)
fp_parity(frozen_no_shard mlp-frozen no_shard 2)
fp_parity(frozen_no_shard mlp-frozen no_shard 3)
# frozen fc1 kept whole under bf16 compute over fp32 main weights: one bf16
# copy only (issue 31); the refit casts the file into it and training matches
foreach(np 2 3)
  fp_parity(frozen_bf16_one_copy mlp-frozen frozen-bf16 ${np} --refit-at 2)
endforeach()
fp_parity(bf16_params mlp bf16 2)
fp_parity(bf16_params mlp bf16 4)
fp_parity(ga2 mlp ga2 2)
fp_parity(ga2 mlp ga2 3)
fp_parity(ga2_poll mlp ga2 4 --progress poll)
# 16-bit reductions at 3 and more ranks (MPI's order differs from the
# reference's from 4 ranks on: train_mlp's reduction_bound) and per-bucket
# mixed precision (bf16 params and reductions in one bucket, fp32 elsewhere)
fp_parity(bf16_reduce mlp bf16-reduce 3)
fp_parity(bf16_reduce mlp bf16-reduce 4)
fp_parity(bucket_mp mlp bucket-mp 2)
fp_parity(bucket_mp mlp bucket-mp 4)

# a tied weight (model.json v2 "uses": the last layer reads fc0.weight
# transposed; train_mlp's tied layer) and recomputed modules (the spec's
# "recompute": train_mlp drops their pre-activations and recomputes them
# between pre_forward / post_forward hooks inside the backward)
foreach(np 1 2 3 4)
  fp_parity(tied_full_shard mlp-tied full_shard ${np})
endforeach()
fp_parity(tied_shard_grad_op mlp-tied shard_grad_op 2)
fp_parity(tied_no_shard mlp-tied no_shard 3)
fp_parity(tied_hybrid_2x2_ga2 mlp-tied hybrid-ga2 4)
fp_parity(tied_placements mlp-tied placements-tied-w4 4)
foreach(np 1 2 4)
  fp_parity(tied_recompute mlp-tied recompute ${np})
endforeach()
# the tied layer in the middle (dec reads fc0.weight right after fc0): the
# tied bucket is resharded after dec's forward and gathered again for the
# backward of dec and fc0 (reshard true, and 2 with dec recomputed)
fp_parity(tied_mid_full_shard mlp-tied-mid full_shard 3)
fp_parity(tied_mid_reshard2 mlp-tied-mid reshard2 4)
fp_parity(tied_mid_hybrid_2x2_ga2 mlp-tied-mid hybrid-ga2 4)
add_executable(test_plan_tied ${CMAKE_CURRENT_SOURCE_DIR}/test_plan_tied.c)
target_link_libraries(test_plan_tied PRIVATE flexplan_exec)
fp_plan_test(plan_tied mlp-tied recompute 1 $<TARGET_FILE:test_plan_tied> {plan})
add_test(NAME parity_tied_fsdp2_np4
         COMMAND ${FP_PYTHON} ${CMAKE_CURRENT_SOURCE_DIR}/mpi/run_plan.py --flexplan $<TARGET_FILE:flexplan>
                 --model ${CMAKE_CURRENT_SOURCE_DIR}/mpi/mlp-tied.model.json
                 --spec ${CMAKE_CURRENT_SOURCE_DIR}/mpi/recompute.spec.json --np 4 --policy fsdp2
                 "--mpiexec=${FP_MPIEXEC_CMD}" -- $<TARGET_FILE:train_mlp> --plan {plan} --steps 4 --check)
set_tests_properties(parity_tied_fsdp2_np4 PROPERTIES LABELS mpi TIMEOUT 300 PROCESSORS 4 ENVIRONMENT "${FP_MPI_ENV}")
# --policy fsdp2 against the reference: AVG on 3 ranks (not a power of two),
# fp16's pre/post divides around sums (3 ranks: 2 and 1.5), HSDP 2x2 with 2
# micro-batches (AVG all-reduce, the 1/2 scale), chunk_cat casting bf16 grads
# to fp32, frozen params between trainable runs (docs/layout.md, "fsdp2 units")
function(fp_parity_fsdp2 name model spec np)
  add_test(NAME parity_fsdp2_${name}_np${np}
           COMMAND ${FP_PYTHON} ${CMAKE_CURRENT_SOURCE_DIR}/mpi/run_plan.py --flexplan $<TARGET_FILE:flexplan>
                   --model ${CMAKE_CURRENT_SOURCE_DIR}/mpi/${model}.model.json
                   --spec ${CMAKE_CURRENT_SOURCE_DIR}/mpi/${spec}.spec.json --np ${np} --policy fsdp2
                   "--mpiexec=${FP_MPIEXEC_CMD}" -- $<TARGET_FILE:train_mlp> --plan {plan} --steps 4 --check)
  set_tests_properties(parity_fsdp2_${name}_np${np} PROPERTIES LABELS mpi TIMEOUT 300 PROCESSORS ${np}
                       ENVIRONMENT "${FP_MPI_ENV}")
endfunction()
fp_parity_fsdp2(avg mlp full_shard 3)
fp_parity_fsdp2(fp16 mlp fp16-reduce 3)
fp_parity_fsdp2(hybrid_ga2 mlp hybrid-ga2 4)
fp_parity_fsdp2(bf16_params mlp bf16 4)
fp_parity_fsdp2(frozen mlp-frozen full_shard 3)

# hostile plans, plans this run cannot use, config errors (one rank)
# the external backend (issue 38) through its public transport table, with a
# fake transport: every rank a thread of one process (no MPI, no torch; runs
# under ASan/UBSan in the asan preset, where the Python tests cannot)
add_executable(test_exec_external ${CMAKE_CURRENT_SOURCE_DIR}/test_exec_external.c)
target_link_libraries(test_exec_external PRIVATE flexplan_exec flexplan_api m)
add_test(NAME exec_external COMMAND test_exec_external ${CMAKE_CURRENT_SOURCE_DIR}/mpi/mlp.model.json)
set_tests_properties(exec_external PROPERTIES LABELS unit TIMEOUT 120)

add_executable(test_exec_plan ${CMAKE_CURRENT_SOURCE_DIR}/test_exec_plan.c)
target_link_libraries(test_exec_plan PRIVATE flexplan_exec flexplan_core) # (exec_util.h builds plans with the planner)
fp_mpi_test(exec_plan 1 test_exec_plan)

# hook order, plan-hash agreement, refit validation
foreach(t order hash refit timing)
  add_executable(test_exec_${t} ${CMAKE_CURRENT_SOURCE_DIR}/test_exec_${t}.c)
  target_link_libraries(test_exec_${t} PRIVATE flexplan_exec flexplan_core) # (exec_util.h builds plans with the planner)
endforeach()
target_link_libraries(test_exec_timing PRIVATE PkgConfig::JSONC) # the file read by json-c: an independent reader
fp_mpi_test(exec_order 2 test_exec_order)
fp_mpi_test(exec_timing 2 test_exec_timing)
fp_mpi_test(exec_hash_np2 2 test_exec_hash)
fp_mpi_test(exec_hash_np3 3 test_exec_hash)
fp_plan_test(exec_refit mlp placements-w3 3 $<TARGET_FILE:test_exec_refit> {plan})
# the watchdog: a rank that stops calling hooks; FLEXPLAN_TIMEOUT=1 (the test
# also arms alarm(60): it fails, never hangs)
add_executable(test_exec_watchdog ${CMAKE_CURRENT_SOURCE_DIR}/test_exec_watchdog.c)
target_link_libraries(test_exec_watchdog PRIVATE flexplan_exec flexplan_core) # (exec_util.h builds plans with the planner)
foreach(mode poll thread)
  fp_mpi_test(exec_watchdog_${mode} 3 test_exec_watchdog ${mode})
  set_property(TEST exec_watchdog_${mode} APPEND PROPERTY ENVIRONMENT FLEXPLAN_TIMEOUT=1)
  set_tests_properties(exec_watchdog_${mode} PROPERTIES TIMEOUT 120)
endforeach()

# fp_exec_create under the watchdog (issue 31): a rank with a tampered plan
# never creates its executor; the others fail with FP_ERR_TIMEOUT naming it
# (FLEXPLAN_TIMEOUT=1; the test arms alarm(60) and ctest's timeout is 120 s)
add_executable(test_exec_create_watchdog ${CMAKE_CURRENT_SOURCE_DIR}/test_exec_create_watchdog.c)
target_link_libraries(test_exec_create_watchdog PRIVATE flexplan_exec flexplan_core) # (exec_util.h builds plans with the planner)
fp_mpi_test(exec_create_watchdog 3 test_exec_create_watchdog)
set_property(TEST exec_create_watchdog APPEND PROPERTY ENVIRONMENT FLEXPLAN_TIMEOUT=1)
set_tests_properties(exec_create_watchdog PROPERTIES TIMEOUT 120)

# the NCCL backend's GPU-free decisions (executor/nccl_plan.c: bootstrap
# rules, communicator splits, the issue order of records, waits and runs),
# for every rank of compiled plans; built with or without CUDA
add_executable(test_nccl_plan ${CMAKE_CURRENT_SOURCE_DIR}/test_nccl_plan.c)
target_link_libraries(test_nccl_plan PRIVATE flexplan_exec)
add_test(NAME nccl_plan
         COMMAND ${FP_PYTHON} ${CMAKE_CURRENT_SOURCE_DIR}/nccl_plan_test.py --flexplan $<TARGET_FILE:flexplan>
                 --test $<TARGET_FILE:test_nccl_plan> --dir ${CMAKE_CURRENT_SOURCE_DIR}/mpi)
set_tests_properties(nccl_plan PROPERTIES LABELS unit TIMEOUT 300)

# the NCCL backend on a machine without a CUDA device: every rank fails at
# once and cleanly (skipped, 77, where there is a device)
if(FP_HAVE_CUDA)
  add_executable(test_exec_nccl_nodev ${CMAKE_CURRENT_SOURCE_DIR}/test_exec_nccl_nodev.c)
  target_link_libraries(test_exec_nccl_nodev PRIVATE flexplan_exec flexplan_core) # (exec_util.h builds plans with the planner)
  fp_mpi_test(exec_nccl_nodev_np2 2 test_exec_nccl_nodev)
  set_tests_properties(exec_nccl_nodev_np2 PROPERTIES SKIP_RETURN_CODE 77)
endif()

# measured beside modeled: train_mlp --timing (fp_exec_timing_start/write)
# on 2 ranks, then flexplan viz --measured; the records and the trace
# checked against the plan, and the located errors (tests/viz_measured.py)
add_test(NAME viz_measured
         COMMAND ${FP_PYTHON} ${CMAKE_CURRENT_SOURCE_DIR}/viz_measured.py $<TARGET_FILE:flexplan>
                 $<TARGET_FILE:train_mlp> "${FP_MPIEXEC_CMD}" ${CMAKE_CURRENT_SOURCE_DIR}/mpi/mlp.model.json
                 ${CMAKE_CURRENT_SOURCE_DIR}/mpi/ga2.spec.json ${CMAKE_CURRENT_BINARY_DIR}/viz_measured)
set_tests_properties(viz_measured PROPERTIES LABELS "mpi;golden" TIMEOUT 300 PROCESSORS 2 ENVIRONMENT "${FP_MPI_ENV}")

# MXFP8 gathers: the compute weights after each gather against the C
# reference kernels' round trip of the whole flat bucket (bit for bit) and
# the format's bound; reshard 2 regathers for backward; grads stay float
add_executable(test_fp8_gather ${CMAKE_CURRENT_SOURCE_DIR}/test_fp8_gather.c)
target_link_libraries(test_fp8_gather PRIVATE flexplan_api flexplan_exec PkgConfig::JSONC m)
foreach(np 2 4)
  fp_mpi_test(fp8_gather_np${np} ${np} test_fp8_gather ${CMAKE_CURRENT_SOURCE_DIR}/mpi/mlp.model.json
              ${CMAKE_CURRENT_SOURCE_DIR}/mpi/fp8-gather.spec.json)
endforeach()

# MXFP8 params (a frozen replicated bucket, param_dtype "mxfp8"): the
# views (one e4m3 copy, the e8m0 scales where the plan puts them), refits
# against fpk_quantize_mxfp8 byte for byte, a refused refit, whole steps
add_executable(test_exec_mxfp8 ${CMAKE_CURRENT_SOURCE_DIR}/test_exec_mxfp8.c)
target_link_libraries(test_exec_mxfp8 PRIVATE flexplan_api flexplan_exec PkgConfig::JSONC m)
foreach(np 1 2 3)
  fp_mpi_test(exec_mxfp8_np${np} ${np} test_exec_mxfp8 ${CMAKE_CURRENT_SOURCE_DIR}/mpi/mlp-frozen.model.json
              ${CMAKE_CURRENT_SOURCE_DIR}/mpi/frozen-mxfp8.spec.json)
endforeach()

# transfers between plans (docs/reshard.md): test_reshard compiles two plans
# of tests/mpi/mlp at the given world sizes, moves A's weights into B's
# executors (and back), and checks every TO shard byte against the full
# tensors it computes. fp_reshard_test(name np specA worldA specB worldB [opts])
add_executable(test_reshard ${CMAKE_CURRENT_SOURCE_DIR}/test_reshard.c)
target_link_libraries(test_reshard PRIVATE flexplan_api flexplan_exec PkgConfig::JSONC m)
function(fp_reshard_test name np sa wa sb wb)
  fp_mpi_test(reshard_${name} ${np} test_reshard ${CMAKE_CURRENT_SOURCE_DIR}/mpi/mlp.model.json
              ${CMAKE_CURRENT_SOURCE_DIR}/mpi/${sa}.spec.json ${wa} ${CMAKE_CURRENT_SOURCE_DIR}/mpi/${sb}.spec.json
              ${wb} ${ARGN})
endfunction()
fp_reshard_test(fs2_to_placements3 3 full_shard 2 placements-w3 3)
# the transfer's watchdog (issue 31): a process away from the agreement, then
# process 0 away, then one whose data sends are lost (test_reshard_wd wraps
# MPI_Isend: the network losing them), each named by the others within the
# timeout, never a hang
add_executable(test_reshard_wd ${CMAKE_CURRENT_SOURCE_DIR}/test_reshard.c)
target_compile_definitions(test_reshard_wd PRIVATE FP_TEST_WRAP_ISEND)
target_link_libraries(test_reshard_wd PRIVATE flexplan_api flexplan_exec PkgConfig::JSONC m)
target_link_options(test_reshard_wd PRIVATE "LINKER:--wrap=MPI_Isend")
fp_mpi_test(reshard_watchdog 3 test_reshard_wd ${CMAKE_CURRENT_SOURCE_DIR}/mpi/mlp.model.json
            ${CMAKE_CURRENT_SOURCE_DIR}/mpi/full_shard.spec.json 3 ${CMAKE_CURRENT_SOURCE_DIR}/mpi/full_shard.spec.json 2
            --watchdog 1)
set_property(TEST reshard_watchdog APPEND PROPERTY ENVIRONMENT FLEXPLAN_TIMEOUT=1)
set_tests_properties(reshard_watchdog PROPERTIES TIMEOUT 120)
fp_reshard_test(fs4_to_fs2 4 full_shard 4 full_shard 2)
# reshard transform plug-ins (docs/reshard.md "Transforms"): a user transform
# sending fp32 params as bf16, every TO element checked against the value
# rounded here (or exact where copied locally); planted faults refused
add_executable(test_reshard_xf ${CMAKE_CURRENT_SOURCE_DIR}/test_reshard_xf.c)
target_link_libraries(test_reshard_xf PRIVATE flexplan_api flexplan_exec PkgConfig::JSONC m)
function(fp_reshard_xf_test name np sa wa sb wb)
  fp_mpi_test(reshard_xf_${name} ${np} test_reshard_xf ${CMAKE_CURRENT_SOURCE_DIR}/mpi/mlp.model.json
              ${CMAKE_CURRENT_SOURCE_DIR}/mpi/${sa}.spec.json ${wa} ${CMAKE_CURRENT_SOURCE_DIR}/mpi/${sb}.spec.json
              ${wb} ${ARGN})
endfunction()
fp_reshard_xf_test(fs1_to_fs1_disjoint 2 full_shard 1 full_shard 1 --to-offset 1)
fp_reshard_xf_test(fs4_to_fs2 4 full_shard 4 full_shard 2)
fp_reshard_xf_test(fs2_to_placements3 3 full_shard 2 placements-w3 3)
fp_reshard_xf_test(hybrid4_to_fs3 4 hybrid 4 full_shard 3)
fp_reshard_xf_test(fs2_to_fs2_disjoint 4 full_shard 2 full_shard 2 --to-offset 2)
fp_reshard_xf_test(fault_count 3 full_shard 2 full_shard 3 --fault count)
fp_reshard_xf_test(fault_outside 3 full_shard 2 full_shard 3 --fault outside)
fp_reshard_xf_test(fault_unbound 2 full_shard 1 full_shard 1 --to-offset 1 --fault unbound)
# a sender-side transform failure on process 0: every process fails (disjoint 2 -> 2 on 4, overlapping 2 -> 3)
fp_reshard_xf_test(fault_send_disjoint 4 full_shard 2 full_shard 2 --to-offset 2 --fault send)
fp_reshard_xf_test(fault_send 3 full_shard 2 full_shard 3 --fault send)
# MXFP8 on the contract (fp_transform_mxfp8), both modes: TO's arena equals
# what the built-in --transform mxfp8 writes, byte for byte
fp_reshard_xf_test(mxfp8_sender_fs4_to_placements3 4 full_shard 4 placements-w3 3 --mxfp8 sender)
fp_reshard_xf_test(mxfp8_receiver_fs4_to_placements3 4 full_shard 4 placements-w3 3 --mxfp8 receiver)
fp_reshard_xf_test(mxfp8_sender_fs2_to_noshard3 3 full_shard 2 no_shard 3 --mxfp8 sender)
fp_reshard_xf_test(mxfp8_receiver_fs2_to_fs2_disjoint 4 full_shard 2 full_shard 2 --to-offset 2 --mxfp8 receiver)
# flat hybrid buckets of params that fill whole alignment units: adjacent
# params' pieces continue each other, and the executor copies them as one
fp_mpi_test(reshard_wide_flat_hybrid4_to_2 4 test_reshard ${CMAKE_CURRENT_SOURCE_DIR}/mpi/wide.model.json
            ${CMAKE_CURRENT_SOURCE_DIR}/mpi/flat-hybrid.spec.json 4 ${CMAKE_CURRENT_SOURCE_DIR}/mpi/flat-hybrid.spec.json 2
            --expect-merged 1)
fp_reshard_test(hybrid4_to_fs2 4 hybrid 4 full_shard 2)
fp_reshard_test(fs2_to_hybrid4 4 full_shard 2 hybrid 4)
fp_reshard_test(placements3_to_noshard2 3 placements-w3 3 no_shard 2)
fp_reshard_test(fs4_to_bf16_3 4 full_shard 4 bf16 3)
# hybrid 2 x 3 -> 2 x 2: processes 2 and 3 hold what 0 and 1 hold, in both
# plans: they repeat 0's and 1's local programs (fp_tx.same); the way back
# (2 x 2 -> 2 x 3) picks them as senders to 4 and 5, so they run their own
fp_reshard_test(hybrid6_to_hybrid4_shared 6 hybrid 6 hybrid 4 --expect-shared 2)
# 2 x 8 -> 2 x 9: the owners 0 and 1 of the two classes send to 16 and 17,
# so process 8, which does not send, takes over its class (10, 12, 14 repeat
# it); the senders run their own
fp_reshard_test(hybrid16_to_hybrid18_heir 18 hybrid 16 hybrid 18 --expect-shared 3)
# disjoint rank sets: TO ranks on processes after FROM's
fp_reshard_test(fs2_to_placements3_disjoint 5 full_shard 2 placements-w3 3 --to-offset 2)
fp_reshard_test(hybrid4_to_fs2_disjoint 6 hybrid 4 full_shard 2 --to-offset 4)
# MXFP8 on the wire for the weights (slices start off block boundaries: fc0.weight is 20x13)
fp_reshard_test(fs4_to_placements3_mxfp8 4 full_shard 4 placements-w3 3 --mxfp8 fc*.weight)
fp_reshard_test(fs2_to_noshard3_mxfp8 3 full_shard 2 no_shard 3 --mxfp8 *)
# TO keeps the frozen fc1.* as MXFP8 (param_dtype "mxfp8"): e4m3 and scales
# equal the reference quantization of the whole param; flat FROM chunks
# (block-aligned: every block from one sender, the wire at the lower bound)
# and per-param FROM shards (rows of 20: blocks split between FROM ranks,
# each part quantized where it is at the max of the parts' scales, which a
# leader gathers and sends out), overlapping and disjoint. --wire-over, by
# hand: a split block costs the parts' scale bytes the leader receives, plus
# the max sent to each quantizer outside TO, less the scale byte of the
# block a leader in TO computes instead of receiving.
#  4 -> 2: fc1.weight's blocks at 96 (ranks 0|1, leader 0 in TO: 1 - 1), 192
#  (1|2, leader 1: 1 + 1 - 1), 288 (2|3, leader 2 outside TO: 1 + 1) and
#  fc1.bias's block (0|1|2|3, leader 0: 3 + 2 - 1): 7 bytes over 2,177.
#  2 -> 3 disjoint: fc1.weight at 192 and fc1.bias (0|1 each, leader 0
#  outside TO: 1 + 1 each): 4 bytes over 3,456.
function(fp_reshard_keep_test name np sa wa wb)
  fp_mpi_test(reshard_${name} ${np} test_reshard ${CMAKE_CURRENT_SOURCE_DIR}/mpi/mlp-frozen.model.json
              ${CMAKE_CURRENT_SOURCE_DIR}/mpi/${sa}.spec.json ${wa} ${CMAKE_CURRENT_SOURCE_DIR}/mpi/mxfp8-keep.spec.json
              ${wb} ${ARGN})
endfunction()
fp_reshard_keep_test(fs4_to_keep3 4 full_shard 4 3 --wire-exact 1)
fp_reshard_keep_test(perparam4_to_keep2 4 per-param 4 2 --wire-over 7)
fp_reshard_keep_test(perparam2_to_keep3_disjoint 5 per-param 2 3 --to-offset 2 --wire-over 4)
# the transfer verifier's rules, one broken transfer each, and the planner's errors
add_executable(test_xfer_verify ${CMAKE_CURRENT_SOURCE_DIR}/test_xfer_verify.c)
target_link_libraries(test_xfer_verify PRIVATE flexplan_api flexplan_exec)
add_test(NAME xfer_verify COMMAND test_xfer_verify ${CMAKE_CURRENT_SOURCE_DIR}/mpi)
# the issue's chain: 8-rank full_shard -> 4-rank hybrid 2x2 -> 6-rank ragged
# shard -> 8-rank full_shard, each leg a round trip (A -> B -> A bit-exact)
fp_reshard_test(fs8_to_hybrid4 8 full_shard 8 hybrid 4)
fp_reshard_test(hybrid4_to_ragged6 6 hybrid 4 ragged-w6 6)
fp_reshard_test(ragged6_to_fs8 8 ragged-w6 6 full_shard 8)
add_test(NAME reshard_cli COMMAND bash ${CMAKE_CURRENT_SOURCE_DIR}/reshard_cli.sh $<TARGET_FILE:flexplan> ${CMAKE_SOURCE_DIR})
set_tests_properties(reshard_cli PROPERTIES TIMEOUT 120 LABELS cli)
# the same chain between disjoint rank sets (TO after FROM; the way back
# with FROM after TO: from_offset)
fp_reshard_test(fs8_to_hybrid4_disjoint 12 full_shard 8 hybrid 4 --to-offset 8)
fp_reshard_test(hybrid4_to_ragged6_disjoint 10 hybrid 4 ragged-w6 6 --to-offset 4)
fp_reshard_test(ragged6_to_fs8_disjoint 14 ragged-w6 6 full_shard 8 --to-offset 6)
if(FP_SANITIZE)
  # Under the asan preset this 14-process run (alone of the MPI tests) has
  # its LeakSanitizer check off: in a whole asan run, LeakSanitizer's own
  # tracer segfaults in it (ScanRangeForPointers reading address 0x3d28, every
  # time; before MPI_Finalize and at exit alike, after all checks passed),
  # and never when the test runs alone. AddressSanitizer still checks every
  # access; test_reshard's leak check runs in the other reshard tests.
  set(env ${FP_MPI_ENV})
  list(TRANSFORM env REPLACE "detect_leaks=1" "detect_leaks=0")
  set_tests_properties(reshard_ragged6_to_fs8_disjoint PROPERTIES ENVIRONMENT "${env}")
endif()
# weights and AdamW state (the default optimizer) together: the state follows
# each main shard; bf16 main weights on one side cast both ways
fp_reshard_test(fs4_to_placements3_optim 4 full_shard 4 placements-w3 3 --what weights+optimizer)
fp_reshard_test(hybrid4_to_ragged6_optim_disjoint 10 hybrid 4 ragged-w6 6 --to-offset 4 --what weights+optimizer)
fp_reshard_test(fs4_to_bf16_3_optim 4 full_shard 4 bf16 3 --what weights+optimizer)

# the hook driver's state machine (executor/driver.c) over a recorded hook
# sequence: no executor, no MPI (cmocka)
fp_unit_test(test_driver)
target_link_libraries(test_driver PRIVATE flexplan_exec)

# placement plug-ins (docs/placements.md): the example plug-ins of
# examples/placements.h compiled by plugin_compile (the CLI's compile with
# them registered) and trained against the single-process reference.
# block_cyclic (blocks of 8 rows) at 2 ranks deals fc0's rows 0-7 and the
# short last block 16-19 to rank 0 (cyclic_shard with a short last block:
# test_plugins checks its tables and copies by hand); at 1, 3 and 4 ranks
# every rank's blocks are one run
add_executable(plugin_compile ${CMAKE_CURRENT_SOURCE_DIR}/plugin_compile.c ${CMAKE_SOURCE_DIR}/examples/placements.c)
target_link_libraries(plugin_compile PRIVATE flexplan_api)
function(fp_plugin_parity name model spec np)
  add_test(NAME parity_${name}_np${np}
           COMMAND ${FP_PYTHON} ${CMAKE_CURRENT_SOURCE_DIR}/mpi/run_plan.py --flexplan $<TARGET_FILE:plugin_compile>
                   --model ${CMAKE_CURRENT_SOURCE_DIR}/mpi/${model}.model.json
                   --spec ${CMAKE_CURRENT_SOURCE_DIR}/mpi/${spec}.spec.json --np ${np}
                   "--mpiexec=${FP_MPIEXEC_CMD}" -- $<TARGET_FILE:train_mlp> --plan {plan} --steps 4 --check)
  set_tests_properties(parity_${name}_np${np} PROPERTIES LABELS mpi TIMEOUT 300 PROCESSORS ${np}
                       ENVIRONMENT "${FP_MPI_ENV}")
endfunction()
foreach(np 1 2 3 4)
  fp_plugin_parity(plugin_expert_owned mlp-experts expert-owned ${np})
endforeach()
foreach(np 1 2 3 4)
  fp_plugin_parity(plugin_block_cyclic mlp block-cyclic ${np})
endforeach()
# rows dealt one at a time: from 2 ranks on a rank holds several rows
# (cyclic_shard: a v-gather into staging, one strided copy per rank)
foreach(np 1 2 3 4)
  fp_plugin_parity(plugin_row_cyclic mlp row-cyclic ${np})
endforeach()
# ... under hybrid_shard 2x2 with accumulation, and shard_grad_op with bf16
# compute and an offloaded bucket
fp_plugin_parity(plugin_row_cyclic_hybrid_ga2 mlp row-cyclic-hybrid-ga2 4)
fp_plugin_parity(plugin_row_cyclic_offload_sgo mlp row-cyclic-offload-sgo 2)
fp_plugin_parity(plugin_row_cyclic_offload_sgo mlp row-cyclic-offload-sgo 3)
# the transfer verifier attacked with mutants of compiled transfers (casts,
# MXFP8 on the wire, kept and split MXFP8 blocks, transforms): the strict
# classes all rejected, the others' accepted mutants printed
add_executable(test_xfer_sem ${CMAKE_CURRENT_SOURCE_DIR}/test_xfer_sem.c)
target_link_libraries(test_xfer_sem PRIVATE flexplan_api flexplan_exec)
target_compile_definitions(test_xfer_sem PRIVATE FP_SOURCE_DIR="${CMAKE_SOURCE_DIR}")
add_test(NAME xfer_sem COMMAND test_xfer_sem)
set_tests_properties(xfer_sem PROPERTIES TIMEOUT 300 LABELS golden)
