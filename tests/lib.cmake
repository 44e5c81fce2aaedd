# The shared library (label "lib"): exports exactly the public API
# (tests/lib/check_exports.py), with the version of the headers.
add_test(NAME lib_exports
         COMMAND ${FP_PYTHON} ${CMAKE_CURRENT_SOURCE_DIR}/lib/check_exports.py $<TARGET_FILE:flexplan_shared>
                 ${CMAKE_SOURCE_DIR}/include ${PROJECT_VERSION}
                 ${CMAKE_SOURCE_DIR}/python/flexplan/_version.py)
set_tests_properties(lib_exports PROPERTIES LABELS lib TIMEOUT 60)

# cmake --install into a temporary prefix, then two outside projects (CMake
# find_package, pkg-config + cc) and the Python package use only that prefix
# (tests/install/run.sh)
add_test(NAME install_consumers
         COMMAND sh ${CMAKE_CURRENT_SOURCE_DIR}/install/run.sh ${CMAKE_SOURCE_DIR} ${CMAKE_BINARY_DIR}
                 ${CMAKE_COMMAND} $<BOOL:${FP_SANITIZE}>
                 ${FP_MPIEXEC} ${MPIEXEC_NUMPROC_FLAG} 1 ${FP_MPIEXEC_PREFLAGS})
set_tests_properties(install_consumers PROPERTIES LABELS "install;mpi" TIMEOUT 300 ENVIRONMENT "${FP_MPI_ENV}")

# the layers point one way: base/ under everything, ir/ never includes
# planner/ or executor/, executor/ never planner/, kernels/ only base/;
# includes direct and transitive, and the CMake link graph
add_test(NAME layering COMMAND ${FP_PYTHON} ${CMAKE_CURRENT_SOURCE_DIR}/layering.py ${CMAKE_SOURCE_DIR})
set_tests_properties(layering PROPERTIES LABELS unit TIMEOUT 60)
# ... and it finds what it is for: a violation of each kind planted in a tree
# of its own (a transitive include, a link to a layer above, MPI on api/, two
# layers in one library)
add_test(NAME layering_planted COMMAND ${FP_PYTHON} ${CMAKE_CURRENT_SOURCE_DIR}/layering.py --self-test)
set_tests_properties(layering_planted PROPERTIES LABELS unit TIMEOUT 60)

# no product function over 100 lines or cyclomatic complexity 40
# (tests/func_size.py: its own measure, lizard's figures; a commented
# exceptions list), and the measure itself on code counted by hand
add_test(NAME function_size COMMAND ${FP_PYTHON} ${CMAKE_CURRENT_SOURCE_DIR}/func_size.py ${CMAKE_SOURCE_DIR})
set_tests_properties(function_size PROPERTIES LABELS unit TIMEOUT 60)
add_test(NAME function_size_planted COMMAND ${FP_PYTHON} ${CMAKE_CURRENT_SOURCE_DIR}/func_size.py --self-test)
set_tests_properties(function_size_planted PROPERTIES LABELS unit TIMEOUT 60)
