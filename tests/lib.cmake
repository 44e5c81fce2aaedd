# The shared library (label "lib"): exports exactly the public API
# (tests/lib/check_exports.py), with the version of the headers.
add_test(NAME lib_exports
         COMMAND ${FP_PYTHON} ${CMAKE_CURRENT_SOURCE_DIR}/lib/check_exports.py $<TARGET_FILE:flexplan_shared>
                 ${CMAKE_SOURCE_DIR}/include ${PROJECT_VERSION}
                 ${CMAKE_SOURCE_DIR}/python/flexplan/_version.py)
set_tests_properties(lib_exports PROPERTIES LABELS lib TIMEOUT 60)
