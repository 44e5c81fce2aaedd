/* flexplan_version.h - the version of flexplan: the one place the number is
 * written. CMakeLists.txt reads it from here (project(VERSION)), the shared
 * library's SONAME is FP_VERSION_MAJOR, plan.json's "planner_version" is
 * FP_VERSION_STRING, and the Python package checks it against fp_version().
 * Included by flexplan.h; no declarations, so internal code may include it
 * alone. */
#ifndef FLEXPLAN_VERSION_H
#define FLEXPLAN_VERSION_H

#define FP_VERSION_MAJOR 0
#define FP_VERSION_MINOR 2
#define FP_VERSION_PATCH 0
#define FP_VERSION_STRING "0.2.0"

#endif
