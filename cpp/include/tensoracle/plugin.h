/* tensoracle/plugin.h — the plugin ABI: C, usable from C and C++17.
 *
 * A plugin library is a shared library that exports one function, getCreators, returning its
 * plugin creators. A creator makes a plugin (one layer's kernel) from typed fields; tensoracle
 * stores the fields in the engine, so an engine with plugins reopens in another process once
 * the same library is loaded (`plugins=` of build_serialized_engine / open_engine).
 *
 *   static const TensoraclePluginFieldSpec kFields[] = {{"epsilon", TENSORACLE_FIELD_FLOAT32, 1}};
 *   static const TensoraclePluginCreator kCreator = {
 *       TENSORACLE_PLUGIN_ABI_VERSION, "RMSNorm", "1", "", kFields, 1, NULL, &create_rmsnorm};
 *   static const TensoraclePluginCreator* const kCreators[] = {&kCreator};
 *
 *   TENSORACLE_PLUGIN_EXPORT const TensoraclePluginCreator* const* getCreators(int32_t* count) {
 *     *count = 1;
 *     return kCreators;
 *   }
 *
 * C++ authors write a class instead and export it with one macro: tensoracle/plugin.hpp.
 *
 * Rules of the ABI:
 * - The first field of every struct is its ABI version, TENSORACLE_PLUGIN_ABI_VERSION at the
 *   time the library was compiled. tensoracle refuses a library whose creators or plugins carry
 *   another version (PluginLibraryError). Versions change only when a struct changes.
 * - Nothing throws across the ABI. Every function returns TENSORACLE_PLUGIN_OK (0) or an error
 *   code, and on error writes a NUL-terminated message of at most `error_size` bytes (including
 *   the NUL) into `error`. tensoracle raises it, naming the layer and the creator.
 * - Strings passed in are NUL-terminated UTF-8 and live only during the call. Pointers a
 *   plugin returns (names, schemas) must stay valid while the library is loaded: tensoracle
 *   keeps plugin libraries loaded until the process exits.
 * - A plugin created by `create` is owned by tensoracle and released with its `destroy`.
 *   tensoracle calls `enqueue_cpu` / `enqueue_cuda` of one plugin from several threads at once
 *   (one call per execution): keep per-call state in the workspace, not in the plugin.
 * - Dims: at most TENSORACLE_PLUGIN_MAX_RANK; -1 is a dimension known only at execution time
 *   (get_output_descs and supports see them while a network is built; workspace_size and
 *   the enqueue functions always get concrete dims).
 * - Tensors are dense and row-major; element types use tensoracle's DataType values (TensorRT's):
 *   float32 0, float16 1, int8 2, int32 3, bool 4, uint8 5, fp8 e4m3 6, bfloat16 7, int64 8.
 */
#ifndef TENSORACLE_PLUGIN_H
#define TENSORACLE_PLUGIN_H

#include <stddef.h>
#include <stdint.h>

#ifdef __cplusplus
extern "C" {
#endif

#define TENSORACLE_PLUGIN_ABI_VERSION 1u
#define TENSORACLE_PLUGIN_MAX_RANK 8

#if defined(_WIN32)
#define TENSORACLE_PLUGIN_EXPORT __declspec(dllexport)
#else
#define TENSORACLE_PLUGIN_EXPORT __attribute__((visibility("default")))
#endif

/* Return codes. */
#define TENSORACLE_PLUGIN_OK 0
#define TENSORACLE_PLUGIN_ERROR 1            /* anything else that failed */
#define TENSORACLE_PLUGIN_INVALID_ARGUMENT 2 /* bad fields, input types or dims */
#define TENSORACLE_PLUGIN_UNSUPPORTED 3      /* a valid request the plugin does not run */

/* Element types (tensoracle::DataType). */
#define TENSORACLE_TYPE_FLOAT32 0
#define TENSORACLE_TYPE_FLOAT16 1
#define TENSORACLE_TYPE_INT8 2
#define TENSORACLE_TYPE_INT32 3
#define TENSORACLE_TYPE_BOOL 4
#define TENSORACLE_TYPE_UINT8 5
#define TENSORACLE_TYPE_FP8 6
#define TENSORACLE_TYPE_BFLOAT16 7
#define TENSORACLE_TYPE_INT64 8

/* Backends, as bits of a mask. */
#define TENSORACLE_BACKEND_CPU 1
#define TENSORACLE_BACKEND_CUDA 2

/* Types of creator fields. Element sizes: 4, 8, 4, 8, 1, 1. A string field's elements are its
 * UTF-8 bytes (no NUL counted; tensoracle adds one after the data), a bytes field's are bytes. */
typedef enum TensoraclePluginFieldType {
  TENSORACLE_FIELD_INT32 = 0,
  TENSORACLE_FIELD_INT64 = 1,
  TENSORACLE_FIELD_FLOAT32 = 2,
  TENSORACLE_FIELD_FLOAT64 = 3,
  TENSORACLE_FIELD_STRING = 4,
  TENSORACLE_FIELD_BYTES = 5
} TensoraclePluginFieldType;

/* One entry of a creator's schema: a field it accepts, its type, and its element count (-1: any
 * count). A field missing from a create call takes the plugin's default; tensoracle refuses a
 * field not in the schema, or one of another type or count, before calling create. */
typedef struct TensoraclePluginFieldSpec {
  const char* name;
  int32_t type;  /* TensoraclePluginFieldType */
  int64_t count;
} TensoraclePluginFieldSpec;

/* A field's value: `count` elements of `type` at `data` (valid during the call only). */
typedef struct TensoraclePluginField {
  const char* name;
  int32_t type;  /* TensoraclePluginFieldType */
  int64_t count;
  const void* data;
} TensoraclePluginField;

/* The type and dims of one input or output. */
typedef struct TensoraclePluginTensorDesc {
  int32_t type; /* TENSORACLE_TYPE_* */
  int32_t rank;
  int64_t dims[TENSORACLE_PLUGIN_MAX_RANK];
} TensoraclePluginTensorDesc;

typedef struct TensoraclePlugin TensoraclePlugin;
typedef struct TensoraclePluginCreator TensoraclePluginCreator;

/* A plugin: one layer's kernel, made by a creator from fields. `self` is the plugin's own state.
 * Every function returns a TENSORACLE_PLUGIN_* code and writes a message into `error` on failure. */
struct TensoraclePlugin {
  uint32_t abi_version; /* TENSORACLE_PLUGIN_ABI_VERSION */
  void* self;

  /* The number of outputs (at least 1), fixed for the plugin. */
  int32_t (*get_num_outputs)(const TensoraclePlugin* plugin, int32_t* num_outputs, char* error, size_t error_size);

  /* Output types and dims from the inputs'. Input dims may hold -1 (at build time): an output
   * dim that depends on one is -1 too; every other output dim must be >= 0. Refuse inputs the
   * plugin cannot take (count, types, ranks, dims) with TENSORACLE_PLUGIN_INVALID_ARGUMENT. */
  int32_t (*get_output_descs)(const TensoraclePlugin* plugin, const TensoraclePluginTensorDesc* inputs,
                              int32_t num_inputs, TensoraclePluginTensorDesc* outputs, int32_t num_outputs,
                              char* error, size_t error_size);

  /* Whether `backend` (one TENSORACLE_BACKEND_* bit) runs these input and output types and dims
   * (dims may hold -1): *supported = 1 or 0. A 0 may come with a reason in `error`. */
  int32_t (*supports)(const TensoraclePlugin* plugin, int32_t backend, const TensoraclePluginTensorDesc* inputs,
                      int32_t num_inputs, const TensoraclePluginTensorDesc* outputs, int32_t num_outputs,
                      int32_t* supported, char* error, size_t error_size);

  /* Scratch bytes one enqueue needs on `backend` at these concrete shapes (host memory for the
   * CPU, device memory for CUDA). tensoracle sizes scratch at the profile's max shapes, so the
   * size must not grow when dims shrink. */
  int32_t (*workspace_size)(const TensoraclePlugin* plugin, int32_t backend, const TensoraclePluginTensorDesc* inputs,
                            int32_t num_inputs, const TensoraclePluginTensorDesc* outputs, int32_t num_outputs,
                            uint64_t* bytes, char* error, size_t error_size);

  /* Runs the plugin on the CPU: host pointers, synchronous. Null when the plugin has no CPU
   * implementation. `workspace` is 64-byte aligned (null when workspace_size said 0). */
  int32_t (*enqueue_cpu)(const TensoraclePlugin* plugin, const TensoraclePluginTensorDesc* input_descs,
                         const void* const* inputs, int32_t num_inputs, const TensoraclePluginTensorDesc* output_descs,
                         void* const* outputs, int32_t num_outputs, void* workspace, uint64_t workspace_bytes,
                         char* error, size_t error_size);

  /* Launches the plugin on a CUDA stream (`stream` is a cudaStream_t): device pointers,
   * asynchronous; only stream-ordered work (no synchronization, no host reads of the tensors).
   * Null when the plugin has no CUDA implementation. `workspace` is 256-byte aligned. */
  int32_t (*enqueue_cuda)(const TensoraclePlugin* plugin, const TensoraclePluginTensorDesc* input_descs,
                          const void* const* inputs, int32_t num_inputs, const TensoraclePluginTensorDesc* output_descs,
                          void* const* outputs, int32_t num_outputs, void* workspace, uint64_t workspace_bytes,
                          void* stream, char* error, size_t error_size);

  /* Releases the plugin (and `self`). Called once; nothing else is called afterwards. */
  void (*destroy)(TensoraclePlugin* plugin);
};

/* A plugin creator, identified by (plugin_namespace, name, version). `fields` lists the fields
 * `create` accepts. `user` is the creator's own state. */
struct TensoraclePluginCreator {
  uint32_t abi_version; /* TENSORACLE_PLUGIN_ABI_VERSION */
  const char* name;
  const char* version;
  const char* plugin_namespace; /* "" for none */
  const TensoraclePluginFieldSpec* fields;
  int32_t num_fields;
  void* user;

  /* Makes a plugin from `fields` (checked against the schema by tensoracle; a field may be
   * absent). On success *plugin owns a new plugin that tensoracle destroys. */
  int32_t (*create)(const TensoraclePluginCreator* creator, const TensoraclePluginField* fields, int32_t num_fields,
                    TensoraclePlugin** plugin, char* error, size_t error_size);
};

/* What a plugin library exports under the name "getCreators": its creators and their count.
 * The array and the creators stay valid while the library is loaded. */
typedef const TensoraclePluginCreator* const* (*TensoracleGetCreatorsFn)(int32_t* num_creators);

#ifdef __cplusplus
} /* extern "C" */
#endif

#endif /* TENSORACLE_PLUGIN_H */
