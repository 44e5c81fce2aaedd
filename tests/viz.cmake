# viz: the plan viewers (flexplan viz, compile --emit=trace|html, explain's
# modeled columns). docs/viz.md says what each test guards.
fp_unit_test(test_viz)
target_link_libraries(test_viz PRIVATE flexplan_viz)
# flexplan explain (one row per op with modeled start and end) against the
# golden tables tests/ir/*.explain (explain_golden.py --update rewrites them)
file(GLOB FP_EXPLAIN_IN CONFIGURE_DEPENDS ${CMAKE_CURRENT_SOURCE_DIR}/ir/*.fpir)
add_test(NAME explain_golden
         COMMAND ${FP_PYTHON} ${CMAKE_CURRENT_SOURCE_DIR}/explain_golden.py $<TARGET_FILE:flexplan> ${FP_EXPLAIN_IN})
set_tests_properties(explain_golden PROPERTIES LABELS golden TIMEOUT 60)
# the trace's structure on compiled examples (plain, ragged + owned, hybrid,
# zero2, a real model, a tied weight with recomputed modules): valid JSON, declared tids, flows paired, counters in
# order, lifetimes balanced, metadata; viz and compile --emit=trace agree
add_test(NAME viz_trace
         COMMAND ${FP_PYTHON} ${CMAKE_CURRENT_SOURCE_DIR}/viz_trace_check.py $<TARGET_FILE:flexplan>
                 ${CMAKE_CURRENT_BINARY_DIR}/viz_trace
                 ${CMAKE_SOURCE_DIR}/examples/tiny-mlp.json ${CMAKE_SOURCE_DIR}/examples/tiny-mlp-ragged.json
                 ${CMAKE_SOURCE_DIR}/examples/tiny-mlp-hybrid.json ${CMAKE_SOURCE_DIR}/examples/tiny-mlp-zero2.json
                 ${CMAKE_SOURCE_DIR}/examples/tiny-mlp-ddp.json ${CMAKE_SOURCE_DIR}/examples/llama3-8b.json
                 ${CMAKE_SOURCE_DIR}/examples/mixtral-8x7b.json
                 ${CMAKE_CURRENT_SOURCE_DIR}/golden/tied_hybrid_recompute.json)
set_tests_properties(viz_trace PROPERTIES LABELS golden TIMEOUT 300)
# the HTML page in headless Chromium: no console output, fetches nothing,
# one box per op for a small plan, every op drawn for llama3-405b, a
# screenshot that is not blank. Skipped (77) only when chromium is missing;
# .ci/packages installs it.
add_test(NAME viz_html
         COMMAND ${FP_PYTHON} ${CMAKE_CURRENT_SOURCE_DIR}/viz_html_check.py $<TARGET_FILE:flexplan> ${CMAKE_SOURCE_DIR}
                 ${CMAKE_CURRENT_BINARY_DIR}/viz_html)
set_tests_properties(viz_html PROPERTIES LABELS golden TIMEOUT 600 SKIP_RETURN_CODE 77)
