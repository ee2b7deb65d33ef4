/* A shared library that is not a plugin library: it exports no getCreators. */
#include "tensoracle/plugin.h"

TENSORACLE_PLUGIN_EXPORT int32_t getCreatorz(void) { return 0; }
