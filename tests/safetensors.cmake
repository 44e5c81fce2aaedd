# safetensors: the strict reader and the writer (executor/safetensors.c):
# round trips, one hand-made broken file per rule, random byte edits
fp_unit_test(test_safetensors)
target_link_libraries(test_safetensors PRIVATE flexplan_st)
