# Tests over every shipped example (examples/*.json, globbed at configure
# time), labelled "examples":
#   example_check_<name>      `flexplan check FILE` accepts it
#   example_roundtrip_<name>  plan.json and .fpir print to the same .fpir text,
#                             and `flexplan verify` passes on both (roundtrip.sh)
#   example_summary_<name>    `compile --emit=summary` is valid JSON with every
#                             field, agreeing with the file (check_summary.py)
#   examples_generated        examples/ is what tools/gen_examples.py writes
file(GLOB FP_EXAMPLES CONFIGURE_DEPENDS ${CMAKE_SOURCE_DIR}/examples/*.json)
foreach(ex ${FP_EXAMPLES})
  get_filename_component(name ${ex} NAME_WE)
  add_test(NAME example_check_${name} COMMAND $<TARGET_FILE:flexplan> check ${ex})
  add_test(NAME example_roundtrip_${name}
           COMMAND sh ${CMAKE_CURRENT_SOURCE_DIR}/roundtrip.sh $<TARGET_FILE:flexplan> ${ex})
  add_test(NAME example_summary_${name}
           COMMAND ${FP_PYTHON} ${CMAKE_CURRENT_SOURCE_DIR}/check_summary.py
                   $<TARGET_FILE:flexplan> ${ex})
  set_tests_properties(example_check_${name} example_roundtrip_${name} example_summary_${name}
                       PROPERTIES LABELS examples TIMEOUT 300)
endforeach()
add_test(NAME examples_generated
         COMMAND ${FP_PYTHON} ${CMAKE_SOURCE_DIR}/tools/gen_examples.py --check)
set_tests_properties(examples_generated PROPERTIES LABELS examples TIMEOUT 120)
