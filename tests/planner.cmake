# planner: layout math (cmocka) and golden .fpir tests of the lowering
fp_unit_test(test_layout)
add_test(NAME golden_lowering
         COMMAND ${FP_PYTHON} ${CMAKE_CURRENT_SOURCE_DIR}/run_golden.py --cmd $<TARGET_FILE:flexplan>
                 --dir ${CMAKE_CURRENT_SOURCE_DIR}/golden)
set_tests_properties(golden_lowering PROPERTIES LABELS golden TIMEOUT 300)
