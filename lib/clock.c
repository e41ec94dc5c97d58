/* Clocks: CLOCK_MONOTONIC, and the time-stamp counter converted at a measured rate (see
 * clock.h for when each is used). */
#include <pthread.h>
#include <time.h>

#include "clock.h"

#if RILL__CLK_TSC
#include <cpuid.h>
#endif

int64_t rill__now_ns(void) {
  struct timespec ts;
  clock_gettime(CLOCK_MONOTONIC, &ts);
  return (int64_t)ts.tv_sec * 1000000000LL + ts.tv_nsec;
}

static pthread_once_t clk_once = PTHREAD_ONCE_INIT;
_Atomic int rill__clk_ready;
int rill__clk_tsc;
_Atomic double rill__clk_scale;
static int64_t clk_tsc0, clk_ns0; /* the base reading of both clocks (set once) */
static _Atomic int64_t clk_next;  /* TSC reading at which the rate is measured again */

/* A reading of both clocks taken together: the tightest of a few tries (a thread preempted
 * between the reads would skew the rate); returns the ticks the bracket spans. */
static int64_t clk_pair(int64_t* ns, int64_t* ticks) {
  int64_t width = INT64_MAX;
  for (int k = 0; k < 4; k++) {
    int64_t a = rill__clk_ticks(), n = rill__now_ns(), b = rill__clk_ticks();
    if (b - a < width) {
      width = b - a;
      *ns = n;
      *ticks = a + (b - a) / 2;
    }
  }
  return width;
}

static void clk_once_init(void) {
#if RILL__CLK_TSC
  unsigned a = 0, b = 0, c = 0, d = 0;
  if (!__get_cpuid(0x80000000u, &a, &b, &c, &d) || a < 0x80000007u) return;
  if (!__get_cpuid(0x80000007u, &a, &b, &c, &d) || !(d & (1u << 8))) return; /* invariant TSC */
  clk_pair(&clk_ns0, &clk_tsc0);
  atomic_store(&clk_next, clk_tsc0 + ((int64_t)1 << 20));
  rill__clk_tsc = 1;
#endif
}

void rill__clk_init(void) {
  pthread_once(&clk_once, clk_once_init);
  atomic_store_explicit(&rill__clk_ready, 1, memory_order_release);
}

void rill__clk_refresh(int64_t t) {
  if (!rill__clk_tsc) return;
  int64_t next = atomic_load_explicit(&clk_next, memory_order_relaxed);
  if (t < next || !atomic_compare_exchange_strong(&clk_next, &next, t + (t - clk_tsc0))) return;
  int64_t ns = 0, ticks = 0, width = clk_pair(&ns, &ticks);
  /* the bracket within 1/1024 of the interval (else the next measurement will do) */
  if (ns > clk_ns0 && ticks > clk_tsc0 && width <= (ticks - clk_tsc0) / 1024)
    atomic_store_explicit(&rill__clk_scale, (double)(ns - clk_ns0) / (double)(ticks - clk_tsc0), memory_order_relaxed);
}

void rill__stopwatch_start(rill__stopwatch_t* sw) {
  sw->scale = rill__clk_start();
  sw->t0 = rill__clk_now(sw->scale);
}

/* Also where the rate is measured again (every chunk is timed), with the reading at hand. */
int64_t rill__stopwatch_ns(const rill__stopwatch_t* sw) {
  int64_t t = rill__clk_now(sw->scale), dt = t - sw->t0;
  rill__clk_refresh(sw->scale > 0 ? t : rill__clk_ticks());
  if (dt < 0) return 0; /* a thread moved to a CPU whose counter lags */
  return sw->scale > 0 ? (int64_t)((double)dt * sw->scale) : dt;
}
