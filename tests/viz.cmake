# viz: the plan viewers (flexplan viz, compile --emit=trace|html, explain's
# modeled columns). docs/viz.md says what each test guards.
fp_unit_test(test_viz)
target_link_libraries(test_viz PRIVATE flexplan_viz)
