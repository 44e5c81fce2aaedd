# kernels: the plain-C reference kernels (kernels/) against hand-computed
# values, exhaustive round trips and an independent rounding oracle
fp_unit_test(test_kernels)
target_link_libraries(test_kernels PRIVATE flexplan_kernels)
