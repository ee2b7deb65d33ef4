/* A plugin library written in C against plugin.h, with one creator whose ABI version is wrong
 * (BAD_CREATOR_ABI) or whose plugins carry a wrong ABI version (BAD_PLUGIN_ABI). Compiled as C:
 * it also shows that plugin.h is a C header. */
#include <stdlib.h>
#include <string.h>

#include "tensoracle/plugin.h"

static void destroy(TensoraclePlugin* p) { free(p); }
static int32_t num_outputs(const TensoraclePlugin* p, int32_t* n, char* e, size_t es) {
  (void)p, (void)e, (void)es;
  *n = 1;
  return TENSORACLE_PLUGIN_OK;
}

static int32_t create(const TensoraclePluginCreator* c, const TensoraclePluginField* f, int32_t n, TensoraclePlugin** out,
                      char* e, size_t es) {
  (void)c, (void)f, (void)n, (void)e, (void)es;
  TensoraclePlugin* p = (TensoraclePlugin*)calloc(1, sizeof(TensoraclePlugin));
  if (!p) return TENSORACLE_PLUGIN_ERROR;
  p->abi_version = TENSORACLE_PLUGIN_ABI_VERSION + 6; /* always wrong: the plugin's own version */
  p->get_num_outputs = num_outputs;
  p->destroy = destroy;
  *out = p;
  return TENSORACLE_PLUGIN_OK;
}

#ifdef BAD_CREATOR_ABI
#define CREATOR_ABI (TENSORACLE_PLUGIN_ABI_VERSION + 41)
#define CREATOR_NAME "BadCreatorAbi"
#else
#define CREATOR_ABI TENSORACLE_PLUGIN_ABI_VERSION
#define CREATOR_NAME "BadPluginAbi"
#endif

static const TensoraclePluginCreator kCreator = {CREATOR_ABI, CREATOR_NAME, "1", "tensoracle.tests.c", NULL, 0, NULL, create};
static const TensoraclePluginCreator* const kCreators[] = {&kCreator};

TENSORACLE_PLUGIN_EXPORT const TensoraclePluginCreator* const* getCreators(int32_t* count) {
  *count = 1;
  return kCreators;
}
