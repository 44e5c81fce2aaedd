# planner: layout math (cmocka) and golden .fpir tests of the lowering
fp_unit_test(test_layout)
