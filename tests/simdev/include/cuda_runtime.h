/* cuda_runtime.h (simulated device): the runtime API header (docs/simdev.md) */
#include "cuda_runtime_api.h"
