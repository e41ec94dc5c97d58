/* Clocks (clock.c): CLOCK_MONOTONIC nanoseconds, and the clock that times short intervals
 * (stage calls, a chunk's evaluation, the consumer's waits): the CPU's time-stamp counter
 * where it ticks at a constant rate (x86 "invariant TSC"), else CLOCK_MONOTONIC. Reading
 * the counter costs well under half of a clock_gettime, and a cheap stage is timed twice per
 * call, so its readers are inline. Ticks become nanoseconds at the rate measured against
 * CLOCK_MONOTONIC since the first use; the rate is measured again at doubling intervals (the
 * first after ~2^20 ticks), and until it is first known, and on other CPUs, intervals are
 * timed with CLOCK_MONOTONIC itself. Not installed. */
#ifndef RILL_CLOCK_H
#define RILL_CLOCK_H

#include <stdatomic.h>
#include <stdint.h>

int64_t rill__now_ns(void); /* CLOCK_MONOTONIC */

/* Measures a short interval. Any thread; a stopwatch belongs to the thread that uses it. */
typedef struct rill__stopwatch {
  int64_t t0;
  double scale; /* ns per tick, or 0: t0 is CLOCK_MONOTONIC nanoseconds */
} rill__stopwatch_t;
void rill__stopwatch_start(rill__stopwatch_t* sw);
/* Nanoseconds since the start; also where the tick rate is measured again when due. */
int64_t rill__stopwatch_ns(const rill__stopwatch_t* sw);

/* ---- the readers, for loops that time every call (the stage runner): take a scale once
 * with rill__clk_start, read with rill__clk_now(scale), and convert the sum of the
 * differences with the scale (ticks * scale = ns) when it is > 0. */
#if (defined(__x86_64__) || defined(__i386__)) && defined(__GNUC__)
#define RILL__CLK_TSC 1
#else
#define RILL__CLK_TSC 0
#endif

extern _Atomic int rill__clk_ready; /* rill__clk_init has run */
extern int rill__clk_tsc;           /* the time-stamp counter is used (set once, before ready) */
extern _Atomic double rill__clk_scale; /* ns per tick; 0 until first measured */
void rill__clk_init(void);          /* idempotent, thread-safe; sets rill__clk_ready */
/* Measures the rate again when due; `t`: a reading of rill__clk_ticks the caller has just
 * taken. Any thread, any number at once. */
void rill__clk_refresh(int64_t t);

static inline int64_t rill__clk_ticks(void) {
#if RILL__CLK_TSC
  return (int64_t)__builtin_ia32_rdtsc();
#else
  return 0;
#endif
}

/* The scale for timing a new interval: ns per tick, or 0 to time it with CLOCK_MONOTONIC. */
static inline double rill__clk_start(void) {
  if (!atomic_load_explicit(&rill__clk_ready, memory_order_acquire)) rill__clk_init();
  return rill__clk_tsc ? atomic_load_explicit(&rill__clk_scale, memory_order_relaxed) : 0;
}

/* A reading of the interval's clock: ticks when scale > 0, else nanoseconds. */
static inline int64_t rill__clk_now(double scale) { return scale > 0 ? rill__clk_ticks() : rill__now_ns(); }

#endif /* RILL_CLOCK_H */
