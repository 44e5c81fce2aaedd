# ir: unit tests of the IR (builder, .fpir, plan.json, verifier) and the
# golden .fpir files: tests/ir/*.fpir must parse, verify and print as
# tests/ir/<name>.expected; tests/ir/bad/*.fpir must fail with the message
# their first line names ("# expect: <fragment>").
fp_unit_test(test_ir)

add_executable(ir_golden ${CMAKE_CURRENT_SOURCE_DIR}/ir_golden.c)
target_link_libraries(ir_golden PRIVATE flexplan_core)

file(GLOB FP_IR_GOOD CONFIGURE_DEPENDS ${CMAKE_CURRENT_SOURCE_DIR}/ir/*.fpir)
foreach(f ${FP_IR_GOOD})
  get_filename_component(n ${f} NAME_WE)
  add_test(NAME ir_golden_${n} COMMAND ir_golden good ${f})
  set_tests_properties(ir_golden_${n} PROPERTIES LABELS golden TIMEOUT 60)
endforeach()
file(GLOB FP_IR_BAD CONFIGURE_DEPENDS ${CMAKE_CURRENT_SOURCE_DIR}/ir/bad/*.fpir)
foreach(f ${FP_IR_BAD})
  get_filename_component(n ${f} NAME_WE)
  add_test(NAME ir_bad_${n} COMMAND ir_golden bad ${f})
  set_tests_properties(ir_bad_${n} PROPERTIES LABELS golden TIMEOUT 60)
endforeach()

# plan.json written from every golden program agrees with the JSON Schema
add_test(NAME ir_plan_schema
         COMMAND ${FP_PYTHON} ${CMAKE_CURRENT_SOURCE_DIR}/ir_schema.py ${CMAKE_SOURCE_DIR}/schemas/plan.schema.json
                 --gen $<TARGET_FILE:ir_golden> ${CMAKE_CURRENT_BINARY_DIR} ${FP_IR_GOOD})
set_tests_properties(ir_plan_schema PROPERTIES LABELS golden TIMEOUT 60)

# the writers' fast paths against the code they replace: fpi_fmt_double against
# the snprintf/strtod loop, plan.json strings against json-c's escaping
fp_unit_test(test_fmt)
target_link_libraries(test_fmt PRIVATE PkgConfig::JSONC)

# the radix sort against qsort, the arena's mapped chunks, and the alias
# clocks against a brute-force maximum over overlapping buffers
fp_unit_test(test_base)

# plan.json of compiled examples (hardware, memory timeline) agrees with the JSON Schema
add_test(NAME plan_schema_examples
         COMMAND ${FP_PYTHON} ${CMAKE_CURRENT_SOURCE_DIR}/ir_schema.py ${CMAKE_SOURCE_DIR}/schemas/plan.schema.json
                 --compile $<TARGET_FILE:flexplan> ${CMAKE_CURRENT_BINARY_DIR}
                 ${CMAKE_SOURCE_DIR}/examples/tiny-mlp.json ${CMAKE_SOURCE_DIR}/examples/tiny-mlp-hybrid.json
                 ${CMAKE_SOURCE_DIR}/examples/llama3-8b.json)
set_tests_properties(plan_schema_examples PROPERTIES LABELS golden TIMEOUT 120)
# the semantic check (rule 9, ir/verify_sem.c) on a mutation corpus of every
# example and golden, each mutant re-hashed through plan.json (tests/test_sem.c)
fp_unit_test(test_sem)
set_tests_properties(test_sem PROPERTIES LABELS golden)
# the memory plan's rules (6, 8) on a mutation corpus of placements and live
# ranges, each mutant judged by an oracle of its own (tests/test_mem.c)
fp_unit_test(test_mem)
set_tests_properties(test_mem PROPERTIES LABELS golden)
# plan.json changed value by value, its hash kept: rejected, or read as the
# original (tests/test_plan_edits.c)
fp_unit_test(test_plan_edits)
set_tests_properties(test_plan_edits PROPERTIES LABELS golden)
