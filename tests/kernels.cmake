# kernels: the plain-C reference kernels (kernels/) against hand-computed
# values, exhaustive round trips and an independent rounding oracle
fp_unit_test(test_kernels)
target_link_libraries(test_kernels PRIVATE flexplan_kernels)
# train_mlp's own conversions and arithmetic (examples/mlp_math.h, the
# example's independent code) against the kernels' bits
fp_unit_test(test_mlp_math)
target_link_libraries(test_mlp_math PRIVATE flexplan_kernels)
target_include_directories(test_mlp_math PRIVATE ${CMAKE_SOURCE_DIR} ${CMAKE_SOURCE_DIR}/include)
