# planner: layout math (cmocka) and golden .fpir tests of the lowering
fp_unit_test(test_layout)
add_test(NAME golden_lowering
         COMMAND ${FP_PYTHON} ${CMAKE_CURRENT_SOURCE_DIR}/run_golden.py --cmd $<TARGET_FILE:flexplan>
                 --dir ${CMAKE_CURRENT_SOURCE_DIR}/golden)
set_tests_properties(golden_lowering PROPERTIES LABELS golden TIMEOUT 300)
add_test(NAME cli COMMAND bash ${CMAKE_CURRENT_SOURCE_DIR}/test_cli.sh $<TARGET_FILE:flexplan> ${CMAKE_SOURCE_DIR})
set_tests_properties(cli PROPERTIES LABELS cli TIMEOUT 300)
add_test(NAME hwfile COMMAND bash ${CMAKE_CURRENT_SOURCE_DIR}/test_hwfile.sh $<TARGET_FILE:flexplan> ${CMAKE_SOURCE_DIR})
set_tests_properties(hwfile PROPERTIES LABELS cli TIMEOUT 120)
# random models and specs through the whole compiler: compile + verify + print
# agree, or a located rejection; never an internal error
add_test(NAME random_specs COMMAND ${FP_PYTHON} ${CMAKE_CURRENT_SOURCE_DIR}/random_specs.py
         --cmd $<TARGET_FILE:flexplan> --n 300)
set_tests_properties(random_specs PROPERTIES LABELS fuzz TIMEOUT 600)
# prefetch "auto" picks the deepest depth that fits the budget
add_test(NAME prefetch_auto COMMAND ${FP_PYTHON} ${CMAKE_CURRENT_SOURCE_DIR}/prefetch_auto.py
         --cmd $<TARGET_FILE:flexplan> --src ${CMAKE_SOURCE_DIR})
set_tests_properties(prefetch_auto PROPERTIES LABELS golden TIMEOUT 300)
# the sync pass inserts only needed waits: deleting any one wait of a compiled
# program (examples and golden specs) makes verify fail with an ordering error
add_test(NAME wait_deletion COMMAND ${FP_PYTHON} ${CMAKE_CURRENT_SOURCE_DIR}/wait_deletion.py
         --cmd $<TARGET_FILE:flexplan> --root ${CMAKE_SOURCE_DIR})
set_tests_properties(wait_deletion PROPERTIES LABELS golden TIMEOUT 600)
# compiles that were quadratic (issue 14): 20,000 one-param units (once exit
# 70), a spec of 100,000 buckets, literal/glob bucket precedence; no timing
add_test(NAME scale_compile COMMAND ${FP_PYTHON} ${CMAKE_CURRENT_SOURCE_DIR}/scale_compile.py
         --cmd $<TARGET_FILE:flexplan>)
set_tests_properties(scale_compile PROPERTIES LABELS golden TIMEOUT 1200)
# --policy fsdp2 on the DeepSeek-V3 671B shape at 2,048 ranks: within 2x the
# default policy's ops, compile memory and plan memory (issue 13); no timing
add_test(NAME fsdp2_scale COMMAND ${FP_PYTHON} ${CMAKE_CURRENT_SOURCE_DIR}/fsdp2_scale.py
         --cmd $<TARGET_FILE:flexplan> --root ${CMAKE_SOURCE_DIR})
set_tests_properties(fsdp2_scale PROPERTIES LABELS golden TIMEOUT 600)
# the cost model against hand-computed figures
fp_unit_test(test_cost)
# calibration: synthesized records fitted back to their machine (planner/calib.c)
fp_unit_test(test_calib)
# the simulator on hand-written programs (tests/sim/*.fpir: figures computed
# by hand) and on compiled examples
fp_unit_test(test_sim)
# memplan with no budget: what fits the hardware's device memory is kept over
# a faster plan that does not (tests/memplan_fit.py)
add_test(NAME memplan_fit COMMAND ${FP_PYTHON} ${CMAKE_CURRENT_SOURCE_DIR}/memplan_fit.py --cmd $<TARGET_FILE:flexplan>
         --example ${CMAKE_SOURCE_DIR}/examples/deepseek-v3-16b.json)
set_tests_properties(memplan_fit PROPERTIES LABELS golden TIMEOUT 300)
# memplan's conflict lists and its trees (FLEXPLAN_MEMPLAN_TREES=1) give every
# example the same plan (tests/memplan_lists.py)
add_test(NAME memplan_lists COMMAND ${FP_PYTHON} ${CMAKE_CURRENT_SOURCE_DIR}/memplan_lists.py --cmd $<TARGET_FILE:flexplan>
         --examples ${CMAKE_SOURCE_DIR}/examples)
set_tests_properties(memplan_lists PROPERTIES LABELS golden TIMEOUT 300)
# the held memory plan skipped where plain's critical path holds no reuse of
# bytes: every example the same plan as with FLEXPLAN_MEMPLAN_HELD_ALWAYS=1
# (tests/memplan_held.py)
add_test(NAME memplan_held COMMAND ${FP_PYTHON} ${CMAKE_CURRENT_SOURCE_DIR}/memplan_held.py --cmd $<TARGET_FILE:flexplan>
         --examples ${CMAKE_SOURCE_DIR}/examples)
set_tests_properties(memplan_held PROPERTIES LABELS golden TIMEOUT 300)
# hybrid with accumulation: the replicas' all-reduce once per step or every
# micro-batch, whichever models faster (tests/replica_defer.py)
add_test(NAME replica_defer COMMAND ${FP_PYTHON} ${CMAKE_CURRENT_SOURCE_DIR}/replica_defer.py --cmd $<TARGET_FILE:flexplan>
         --examples ${CMAKE_SOURCE_DIR}/examples)
set_tests_properties(replica_defer PROPERTIES LABELS golden TIMEOUT 300)
# a reduction's cast into the reduce dtype on the rs or the compute stream,
# whichever models faster (tests/reduce_prep.py)
add_test(NAME reduce_prep COMMAND ${FP_PYTHON} ${CMAKE_CURRENT_SOURCE_DIR}/reduce_prep.py --cmd $<TARGET_FILE:flexplan>
         --examples ${CMAKE_SOURCE_DIR}/examples)
set_tests_properties(reduce_prep PROPERTIES LABELS golden TIMEOUT 300)

# placement plug-ins (docs/placements.md): the example plug-ins against
# hand-computed layouts and the plans of the equivalent built-in specs, and
# planted faulty plug-ins rejected with their located messages
add_executable(test_plugins ${CMAKE_CURRENT_SOURCE_DIR}/test_plugins.c ${CMAKE_SOURCE_DIR}/examples/placements.c)
target_link_libraries(test_plugins PRIVATE flexplan_api PkgConfig::CMOCKA)
add_test(NAME test_plugins COMMAND test_plugins)
set_tests_properties(test_plugins PROPERTIES TIMEOUT 300 LABELS unit)

# flexplan calibrate end to end: records synthesized from explain's modeled
# durations on a known hardware file, fitted back; the refusals (calibrate_cli.py)
add_test(NAME calibrate_cli COMMAND ${FP_PYTHON} ${CMAKE_CURRENT_SOURCE_DIR}/calibrate_cli.py $<TARGET_FILE:flexplan>
                                    ${CMAKE_CURRENT_BINARY_DIR}/calibrate_cli)
set_tests_properties(calibrate_cli PROPERTIES LABELS cli TIMEOUT 120)
