# Front end (base/json.c, planner/model.c, planner/spec.c): unit tests, the bad-input
# corpus (through the CLI) and the C-vs-JSON-Schema agreement test.
fp_unit_test(test_frontend)
target_link_libraries(test_frontend PRIVATE PkgConfig::JSONC)
set_tests_properties(test_frontend PROPERTIES LABELS "unit;frontend")

# parse + validate only, exit 0/1: used by schema_agree.py (independent of the CLI)
add_executable(fp_frontcheck ${CMAKE_CURRENT_SOURCE_DIR}/fp_frontcheck.c)
target_link_libraries(fp_frontcheck PRIVATE flexplan_core)

add_test(NAME bad_inputs
         COMMAND ${FP_PYTHON} ${CMAKE_CURRENT_SOURCE_DIR}/run_bad.py --cmd $<TARGET_FILE:flexplan>
                 --dir ${CMAKE_CURRENT_SOURCE_DIR}/bad)
set_tests_properties(bad_inputs PROPERTIES TIMEOUT 600 LABELS frontend)

# the C front end and schemas/*.schema.json agree on tests/schema/{valid,invalid,semantic}
# fixtures and on every examples/*.json
add_test(NAME schema_agreement
         COMMAND ${FP_PYTHON} ${CMAKE_CURRENT_SOURCE_DIR}/schema_agree.py --check $<TARGET_FILE:fp_frontcheck>
                 --root ${CMAKE_SOURCE_DIR})
set_tests_properties(schema_agreement PROPERTIES TIMEOUT 300 LABELS frontend)
