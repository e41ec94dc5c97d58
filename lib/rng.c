/* Counter-seeded random numbers: xoshiro256** seeded through splitmix64 from
 * (seed, epoch, row, column), so every cell has its own stream whatever thread computes it. */
#include "internal.h"

static uint64_t splitmix64(uint64_t* x) {
  uint64_t z = (*x += 0x9E3779B97F4A7C15ULL);
  z = (z ^ (z >> 30)) * 0xBF58476D1CE4E5B9ULL;
  z = (z ^ (z >> 27)) * 0x94D049BB133111EBULL;
  return z ^ (z >> 31);
}

static inline uint64_t rotl(uint64_t x, int k) { return (x << k) | (x >> (64 - k)); }

uint64_t rill_rng_u64(rill_rng_t* r) {
  if (!r) return 0;
  uint64_t* s = r->s;
  uint64_t result = rotl(s[1] * 5, 7) * 9;
  uint64_t t = s[1] << 17;
  s[2] ^= s[0];
  s[3] ^= s[1];
  s[1] ^= s[2];
  s[0] ^= s[3];
  s[2] ^= t;
  s[3] = rotl(s[3], 45);
  return result;
}

double rill_rng_uniform(rill_rng_t* r) { return (double)(rill_rng_u64(r) >> 11) * 0x1.0p-53; }

double rill_rng_range(rill_rng_t* r, double lo, double hi) { return lo + (hi - lo) * rill_rng_uniform(r); }

rill_rng_t rill_rng_seeded(uint64_t seed, int64_t epoch, int64_t row, int64_t column) {
  /* Fold the four keys through splitmix64 so that nearby keys give unrelated states. */
  uint64_t x = seed;
  uint64_t k = splitmix64(&x);
  x = k ^ (uint64_t)epoch;
  k = splitmix64(&x);
  x = k ^ (uint64_t)row;
  k = splitmix64(&x);
  x = k ^ ((uint64_t)column * 0xD1B54A32D192ED03ULL);
  rill_rng_t r;
  for (int i = 0; i < 4; i++) r.s[i] = splitmix64(&x);
  if (!(r.s[0] | r.s[1] | r.s[2] | r.s[3])) r.s[0] = 1; /* the all-zero state is absorbing */
  return r;
}
