/* witness_icd.c — a stand-in for a CPU-only OpenCL driver (built as
 * libpocl_witness.so: GpuOcl knows libpocl* as CPU-only) that records being
 * opened. Its constructor appends a line to the file GPUOCL_TEST_WITNESS
 * names, so a test sees whether anything (GpuOcl, or the ICD loader opening
 * every driver) opened it, even if it was closed again. It offers no
 * platform. */
#include <stdio.h>
#include <stdlib.h>

__attribute__((constructor)) static void opened(void) {
  const char* path = getenv("GPUOCL_TEST_WITNESS");
  if (path == NULL || path[0] == '\0') return;
  FILE* f = fopen(path, "a");
  if (f == NULL) return;
  fputs("opened\n", f);
  fclose(f);
}
