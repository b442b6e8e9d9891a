/* omp.h for the fuzz build: the OpenMP calls CpuOneDnn makes, so clang can
 * build the backend against libgomp (the OpenMP runtime Debian's oneDNN is
 * built on) without LLVM's libomp and its header. */
#pragma once
#ifdef __cplusplus
extern "C" {
#endif
void omp_set_num_threads(int num_threads);
int omp_get_max_threads(void);
void omp_set_dynamic(int dynamic_threads);
int omp_get_dynamic(void);
int omp_get_thread_num(void);
int omp_get_num_threads(void);
#ifdef __cplusplus
}
#endif
