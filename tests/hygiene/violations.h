/*
 * violations.h — the planted breaches of the hygiene contract
 * (tools/hygiene.hpp): mock_backend.c built with MOCK_HOOKS_HEADER naming this
 * file and one HYGIENE_BREAK_* definition is a working Relu backend that
 * breaks exactly one rule, in the step named beside it.
 *
 *   HYGIENE_BREAK_ENVIRONMENT      create:  setenv
 *   HYGIENE_BREAK_AFFINITY         execute: narrows the caller to one CPU, restores it after
 *   HYGIENE_BREAK_SIGNAL_MASK      compile: blocks SIGUSR1 in the caller
 *   HYGIENE_BREAK_SIGNAL_HANDLERS  create:  installs a SIGUSR2 handler
 *   HYGIENE_BREAK_FLOATING_POINT   execute: rounds toward zero from then on
 *   HYGIENE_BREAK_LOCALE           configure: setlocale(LC_ALL, "C.UTF-8")
 *   HYGIENE_BREAK_WORKING_DIRECTORY compile: chdir("/")
 *   HYGIENE_BREAK_UMASK            execute: umask(077)
 *   HYGIENE_BREAK_THREADS          create:  starts a thread that never ends
 */
#ifndef BACKPLANE_TESTS_HYGIENE_VIOLATIONS_H
#define BACKPLANE_TESTS_HYGIENE_VIOLATIONS_H

#include <fenv.h>
#include <locale.h>
#include <pthread.h>
#include <sched.h>
#include <signal.h>
#include <stdlib.h>
#include <sys/stat.h>
#include <unistd.h>

#if defined(HYGIENE_BREAK_ENVIRONMENT)
#define MOCK_ON_CREATE() setenv("BACKPLANE_HYGIENE_PLANTED", "1", 1)

#elif defined(HYGIENE_BREAK_AFFINITY)
static cpu_set_t hygiene_saved;
static int hygiene_held;
static void hygiene_narrow(void) {
  cpu_set_t one;
  int cpu = sched_getcpu();
  hygiene_held = 0;
  if (cpu < 0 || sched_getaffinity(0, sizeof hygiene_saved, &hygiene_saved) != 0) return;
  CPU_ZERO(&one);
  CPU_SET(cpu, &one);
  hygiene_held = sched_setaffinity(0, sizeof one, &one) == 0;
  usleep(2000); /* long enough for the watcher to see it */
}
static void hygiene_restore(void) {
  if (hygiene_held) sched_setaffinity(0, sizeof hygiene_saved, &hygiene_saved);
}
#define MOCK_ON_EXECUTE() hygiene_narrow()
#define MOCK_ON_EXECUTE_END() hygiene_restore()

#elif defined(HYGIENE_BREAK_SIGNAL_MASK)
static void hygiene_block(void) {
  sigset_t set;
  sigemptyset(&set);
  sigaddset(&set, SIGUSR1);
  pthread_sigmask(SIG_BLOCK, &set, NULL);
}
#define MOCK_ON_COMPILE() hygiene_block()

#elif defined(HYGIENE_BREAK_SIGNAL_HANDLERS)
static void hygiene_handler(int sig) { (void)sig; }
#define MOCK_ON_CREATE() signal(SIGUSR2, hygiene_handler)

#elif defined(HYGIENE_BREAK_FLOATING_POINT)
#define MOCK_ON_EXECUTE() fesetround(FE_TOWARDZERO)

#elif defined(HYGIENE_BREAK_LOCALE)
#define MOCK_ON_CONFIGURE() setlocale(LC_ALL, "C.UTF-8")

#elif defined(HYGIENE_BREAK_WORKING_DIRECTORY)
#define MOCK_ON_COMPILE() (void)!chdir("/")

#elif defined(HYGIENE_BREAK_UMASK)
#define MOCK_ON_EXECUTE() umask(077)

#elif defined(HYGIENE_BREAK_THREADS)
static void* hygiene_forever(void* arg) {
  (void)arg;
  for (;;) pause();
  return NULL;
}
static void hygiene_start(void) {
  pthread_t t;
  if (pthread_create(&t, NULL, hygiene_forever, NULL) == 0) pthread_detach(t);
}
#define MOCK_ON_CREATE() hygiene_start()
#endif

#endif
