"""The package's version: the library's (include/flexplan_version.h).

tests/lib/check_exports.py checks that the two agree; flexplan.version()
returns what the loaded library says (fp_version()).
"""

__version__ = "0.2.0"
