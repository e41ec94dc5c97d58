/* Saved indexes of tar archives (rill_tar_opts_t.index_dir): the members a walk through an
 * archive's headers found, kept in a file of their own so that a later open reads one file
 * instead of every header. Shared by addons/tar.c (which walks and replays) and
 * addons/tar_index.c (the file format). Not installed. */
#ifndef RILL_TAR_INDEX_H
#define RILL_TAR_INDEX_H

#include <stdint.h>

#define RILL__TAR_BLOCK 512                      /* a header, and the unit of member data */
#define RILL__TAR_MAX_META ((int64_t)1 << 20)    /* a pax record set or GNU long name larger than this is damage */

/* The regular-file members of an archive in the order of their headers: each one's full name
 * (names[name_off .. name_off + name_len), name_off the sum of the earlier lengths) and its
 * data (off: a multiple of 512 past its header; size bytes). */
typedef struct rill__tar_rec {
  int64_t off, size, name_len;
} rill__tar_rec_t;

typedef struct rill__tar_log {
  rill__tar_rec_t* recs;
  int64_t n, cap;
  char* names;
  int64_t names_len, names_cap;
} rill__tar_log_t;

/* What the saved index is of: the archive's size, modification time, device and inode
 * (fstat at open); an index saved for other values is not used. */
typedef struct rill__tar_stamp {
  int64_t size, mtime_ns;
  uint64_t dev, ino;
} rill__tar_stamp_t;

/* Appends a member: RILL_OK or RILL_ENOMEM. */
int rill__tar_log_add(rill__tar_log_t* log, const char* name, int64_t len, int64_t off, int64_t size);
void rill__tar_log_free(rill__tar_log_t* log);

/* The file in `dir` that holds the index of the archive whose real path is `real`, into
 * buf: RILL_OK, or RILL_EINVAL when it does not fit. */
int rill__tar_index_path(const char* dir, const char* real, char* buf, size_t size);

/* The index saved in file `path` for archive `real` with stamp *st into *log (empty): 1 when
 * there is one, whole and consistent (its checksum, its records within the archive and in
 * order), 0 when there is none or it cannot be used (a stale, damaged or foreign file: the
 * archive is then walked again), RILL_ENOMEM. */
int rill__tar_index_load(const char* path, const char* real, const rill__tar_stamp_t* st, rill__tar_log_t* log);

/* Saves *log as the index of `real` with stamp *st in file `path`, through a temporary file
 * of the same folder renamed over it (a reader sees the old file or the new one whole): 0, or
 * -1 when it could not be written (nothing is left behind). */
int rill__tar_index_save(const char* path, const char* real, const rill__tar_stamp_t* st, const rill__tar_log_t* log);

/* Archives walked through their headers since the process started (saved indexes not
 * counted): a test's view of whether an index was used. */
extern _Atomic int64_t rill__tar_walks;

#endif
