/* Saved indexes of tar archives (rill_tar_opts_t.index_dir): the members a walk through an
 * archive's headers found, kept in a file of their own so that a later open reads one file
 * instead of every header. Shared by addons/tar.c (which walks and replays) and
 * addons/tar_index.c (the file format). Not installed. */
#ifndef RILL_TAR_INDEX_H
#define RILL_TAR_INDEX_H

#include <stdint.h>
#include <sys/stat.h>

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

/* What the saved index is of: the archive open on fd, with its size and modification time
 * (fstat at open). An index is used only for the same size and time and the same bytes in
 * the archive's first block and in its last member's header (read from fd): not its device
 * or inode, so that an index stays good for a copy of the archive (rsync -a, cp -p) and in
 * a folder shared by machines that number a network file system's devices each their own
 * way. */
typedef struct rill__tar_stamp {
  int64_t size, mtime_ns;
  int fd;
} rill__tar_stamp_t;

/* A file's modification time in nanoseconds (of its fstat). */
static inline int64_t rill__tar_mtime_ns(const struct stat* st) {
  return (int64_t)st->st_mtim.tv_sec * 1000000000 + st->st_mtim.tv_nsec;
}

/* Reads n bytes at off of fd (fewer only at the end of the file), again after EINTR: the
 * bytes read, or -1 (errno). */
int64_t rill__tar_pread(int fd, void* buf, int64_t n, int64_t off);

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

/* The stamp's content mark of the archive on st->fd whose members are *log: FNV-1a of its
 * first block and of its last member's header block (the block before its data). 0, or -1
 * when they cannot be read. */
int rill__tar_index_mark(const rill__tar_stamp_t* st, const rill__tar_log_t* log, uint64_t* mark);

/* The real path of the archive whose index file `path` holds, into buf (NUL-terminated):
 * 1, or 0 when the file is not a saved index of this version (or its path does not fit). */
int rill__tar_index_archive(const char* path, char* buf, size_t size);

/* Saves *log as the index of `real` with stamp *st in file `path`, through a temporary file
 * of the same folder renamed over it (a reader sees the old file or the new one whole): 0, or
 * -1 when it could not be written (nothing is left behind). */
int rill__tar_index_save(const char* path, const char* real, const rill__tar_stamp_t* st, const rill__tar_log_t* log);

/* Archives walked through their headers since the process started (saved indexes not
 * counted): a test's view of whether an index was used. */
extern _Atomic int64_t rill__tar_walks;

#endif
