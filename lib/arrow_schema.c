/* The Arrow schema module: rill types <-> Arrow format strings and field metadata, the tensor
 * extension types, and schema nodes (see arrow_schema.h). */
#include "arrow_schema.h"

#include <inttypes.h>
#include <stdio.h>
#include <stdlib.h>
#include <string.h>

/* ---------------------------------------------------------------- format strings */

const char* rill__arrow_format(rill_dtype_t d) {
  switch (d) {
  case RILL_BOOL: return "b";
  case RILL_INT8: return "c";
  case RILL_INT16: return "s";
  case RILL_INT32: return "i";
  case RILL_INT64: return "l";
  case RILL_UINT8: return "C";
  case RILL_UINT16: return "S";
  case RILL_UINT32: return "I";
  case RILL_UINT64: return "L";
  case RILL_FLOAT16: return "e";
  case RILL_BFLOAT16: return "S";
  case RILL_FLOAT32: return "f";
  case RILL_FLOAT64: return "g";
  case RILL_STRING: return "U";
  case RILL_BINARY: return "Z";
  case RILL_TIMESTAMP_US: return "tsu:UTC";
  }
  return NULL;
}

/* The dtype of a one-letter fixed-width format ("S" with rill.dtype=bfloat16 metadata:
 * BFLOAT16). Returns 0 for other formats. */
static int fixed_dtype(const struct ArrowSchema* s, rill_dtype_t* d) {
  static const char letters[] = "csilCSILefgb";
  static const rill_dtype_t dtypes[] = {RILL_INT8,   RILL_INT16,   RILL_INT32,   RILL_INT64,
                                        RILL_UINT8,  RILL_UINT16,  RILL_UINT32,  RILL_UINT64,
                                        RILL_FLOAT16, RILL_FLOAT32, RILL_FLOAT64, RILL_BOOL};
  const char* f = s->format;
  if (f == NULL || f[0] == '\0' || f[1] != '\0') return 0;
  const char* at = strchr(letters, f[0]);
  if (at == NULL) return 0;
  *d = dtypes[at - letters];
  char v[32];
  if (*d == RILL_UINT16 && rill__arrow_metadata_get(s->metadata, "rill.dtype", v, sizeof v) &&
      strcmp(v, "bfloat16") == 0)
    *d = RILL_BFLOAT16;
  return 1;
}

/* ---------------------------------------------------------------- metadata */

/* Binary metadata per the C Data Interface: int32 pair count, then per pair int32 key
 * length, key bytes, int32 value length, value bytes (native endianness). */
char* rill__arrow_metadata_encode(const char* const* keys, const char* const* values, int n) {
  size_t size = 4;
  for (int i = 0; i < n; i++) size += 8 + strlen(keys[i]) + strlen(values[i]);
  char* buf = rill__alloc(size);
  if (buf == NULL) return NULL;
  char* p = buf;
  int32_t v = n;
  memcpy(p, &v, 4);
  p += 4;
  for (int i = 0; i < n; i++) {
    const char* kv[2] = {keys[i], values[i]};
    for (int j = 0; j < 2; j++) {
      v = (int32_t)strlen(kv[j]);
      memcpy(p, &v, 4);
      p += 4;
      memcpy(p, kv[j], (size_t)v);
      p += v;
    }
  }
  return buf;
}

int rill__arrow_metadata_get(const char* md, const char* key, char* val, size_t size) {
  if (md == NULL) return 0;
  int32_t n;
  memcpy(&n, md, 4);
  const char* p = md + 4;
  size_t klen = strlen(key);
  for (int32_t i = 0; i < n; i++) {
    int32_t kl, vl;
    memcpy(&kl, p, 4);
    p += 4;
    const char* k = p;
    p += kl;
    memcpy(&vl, p, 4);
    p += 4;
    const char* v = p;
    p += vl;
    if ((size_t)kl == klen && memcmp(k, key, klen) == 0) {
      size_t m = (size_t)vl < size - 1 ? (size_t)vl : size - 1;
      memcpy(val, v, m);
      val[m] = '\0';
      return 1;
    }
  }
  return 0;
}

/* ---------------------------------------------------------------- tensor extensions */

/* {"<key>":[2,3]} with null for the dimensions that vary. */
static char* shape_json(const char* key, const rill_type_t* t) {
  char* buf = rill__alloc(64 + (size_t)t->ndim * 24);
  if (buf == NULL) return NULL;
  int pos = sprintf(buf, "{\"%s\":[", key);
  for (int i = 0; i < t->ndim; i++) {
    if (t->shape[i] < 0)
      pos += sprintf(buf + pos, "%snull", i ? "," : "");
    else
      pos += sprintf(buf + pos, "%s%" PRId64, i ? "," : "", t->shape[i]);
  }
  sprintf(buf + pos, "]}");
  return buf;
}

/* Reads {"<key>":[a,b,...]} ("null" reads as -1); returns the count or -1. */
static int shape_parse(const char* json, const char* key, int64_t* shape) {
  const char* p = strstr(json, key);
  if (p == NULL) return -1;
  p = strchr(p, '[');
  if (p == NULL) return -1;
  p++;
  int n = 0;
  for (;;) {
    while (*p == ' ') p++;
    if (*p == ']') return n;
    if (n == RILL_MAX_NDIM) return -1;
    if (strncmp(p, "null", 4) == 0) {
      shape[n++] = -1;
      p += 4;
      while (*p == ' ') p++;
      if (*p == ',') p++;
      else if (*p != ']') return -1;
      continue;
    }
    char* end;
    long long v = strtoll(p, &end, 10);
    if (end == p || v < 0) return -1;
    shape[n++] = v;
    p = end;
    while (*p == ' ') p++;
    if (*p == ',') p++;
    else if (*p != ']') return -1;
  }
}

/* Field metadata of element dtype `d` (bfloat16 only), or NULL with *rc = RILL_OK. */
static char* dtype_metadata(rill_dtype_t d, int* rc) {
  *rc = RILL_OK;
  if (d != RILL_BFLOAT16) return NULL;
  const char* k[1] = {"rill.dtype"};
  const char* v[1] = {"bfloat16"};
  char* md = rill__arrow_metadata_encode(k, v, 1);
  if (md == NULL) *rc = RILL_ENOMEM;
  return md;
}

/* Extension name and metadata of tensor cells of type t (plus the bfloat16 marker). */
static char* tensor_metadata(const rill_type_t* t, int var_shape) {
  char* json = shape_json(var_shape ? "uniform_shape" : "shape", t);
  if (json == NULL) return NULL;
  const char* k[3] = {"ARROW:extension:name", "ARROW:extension:metadata", "rill.dtype"};
  const char* v[3] = {var_shape ? "arrow.variable_shape_tensor" : "arrow.fixed_shape_tensor", json, "bfloat16"};
  char* md = rill__arrow_metadata_encode(k, v, t->dtype == RILL_BFLOAT16 ? 3 : 2);
  rill__free(json);
  return md;
}

/* ---------------------------------------------------------------- Arrow -> rill */

static int var_tensor_type(const struct ArrowSchema* s, rill__arrow_field_t* out, const char** why) {
  const struct ArrowSchema* data = s->n_children == 2 ? s->children[0] : NULL;
  const struct ArrowSchema* shp = s->n_children == 2 ? s->children[1] : NULL;
  if (data == NULL || shp == NULL || data->n_children != 1 || shp->n_children != 1 ||
      (strcmp(data->format, "+l") != 0 && strcmp(data->format, "+L") != 0) ||
      strncmp(shp->format, "+w:", 3) != 0 || strcmp(shp->children[0]->format, "i") != 0) {
    *why = " (malformed arrow.variable_shape_tensor)";
    return RILL_ENOTSUP;
  }
  rill_dtype_t d;
  if (!fixed_dtype(data->children[0], &d) || d == RILL_BOOL) {
    *why = " (variable_shape_tensor of an unsupported element type)";
    return RILL_ENOTSUP;
  }
  long nd = strtol(shp->format + 3, NULL, 10);
  if (nd < 1 || nd > RILL_MAX_NDIM) {
    *why = " (variable_shape_tensor rank out of range)";
    return RILL_ENOTSUP;
  }
  int64_t shape[RILL_MAX_NDIM];
  for (int i = 0; i < nd; i++) shape[i] = -1;
  char json[512];
  if (rill__arrow_metadata_get(s->metadata, "ARROW:extension:metadata", json, sizeof json) &&
      strstr(json, "\"uniform_shape\"") != NULL) {
    int64_t u[RILL_MAX_NDIM];
    if (shape_parse(json, "\"uniform_shape\"", u) != nd) {
      *why = " (uniform_shape does not match the rank)";
      return RILL_ENOTSUP;
    }
    int fixed = 1;
    for (int i = 0; i < nd; i++) fixed &= u[i] >= 0;
    /* rill stores cells with one or more unknown dimensions as variable cells */
    if (!fixed) memcpy(shape, u, sizeof(int64_t) * (size_t)nd);
  }
  out->type = rill_type_tensor(d, (int)nd, shape);
  out->layout = RILL__ARROW_VAR_TENSOR;
  out->large_list = data->format[1] == 'L';
  return RILL_OK;
}

static int fixed_list_type(const struct ArrowSchema* s, rill__arrow_field_t* out, const char** why) {
  char* end;
  long long n = strtoll(s->format + 3, &end, 10);
  if (*end != '\0' || n < 0 || s->n_children != 1 || s->children == NULL) {
    *why = " (malformed fixed_size_list)";
    return RILL_ENOTSUP;
  }
  rill_dtype_t d;
  if (!fixed_dtype(s->children[0], &d)) {
    *why = " (fixed_size_list of a non-numeric element type)";
    return RILL_ENOTSUP;
  }
  int64_t shape[RILL_MAX_NDIM] = {n};
  int ndim = 1;
  char ext[64], json[512];
  if (rill__arrow_metadata_get(s->metadata, "ARROW:extension:name", ext, sizeof ext) &&
      strcmp(ext, "arrow.fixed_shape_tensor") == 0 &&
      rill__arrow_metadata_get(s->metadata, "ARROW:extension:metadata", json, sizeof json)) {
    int64_t sh[RILL_MAX_NDIM];
    int nd = shape_parse(json, "\"shape\"", sh);
    int64_t prod = 1;
    for (int i = 0; i < nd; i++) prod *= sh[i];
    if (nd < 1 || prod != n) {
      *why = " (arrow.fixed_shape_tensor metadata does not match the list size)";
      return RILL_ENOTSUP;
    }
    ndim = nd;
    memcpy(shape, sh, sizeof(int64_t) * (size_t)nd);
  }
  out->type = rill_type_tensor(d, ndim, shape);
  out->layout = RILL__ARROW_FIXED_LIST;
  out->elem_bits = d == RILL_BOOL;
  out->list_size = n;
  return RILL_OK;
}

int rill__arrow_field_type(const struct ArrowSchema* s, rill__arrow_field_t* out, const char** why) {
  const char* f = s->format;
  memset(out, 0, sizeof *out);
  out->ts_mul = out->ts_div = 1;
  *why = "";
  if (s->dictionary != NULL) {
    *why = " (dictionary-encoded)";
    return RILL_ENOTSUP;
  }
  rill_dtype_t d;
  if (fixed_dtype(s, &d)) {
    out->type = rill_type_scalar(d);
    out->layout = d == RILL_BOOL ? RILL__ARROW_BITS : RILL__ARROW_FIXED;
    return RILL_OK;
  }
  if (strcmp(f, "u") == 0 || strcmp(f, "z") == 0 || strcmp(f, "U") == 0 || strcmp(f, "Z") == 0) {
    out->type = rill_type_scalar(f[0] == 'u' || f[0] == 'U' ? RILL_STRING : RILL_BINARY);
    out->layout = (f[0] == 'u' || f[0] == 'z') ? RILL__ARROW_VAR32 : RILL__ARROW_VAR64;
    return RILL_OK;
  }
  if (strcmp(f, "vu") == 0 || strcmp(f, "vz") == 0) {
    out->type = rill_type_scalar(f[1] == 'u' ? RILL_STRING : RILL_BINARY);
    out->layout = RILL__ARROW_VIEW;
    return RILL_OK;
  }
  if (strncmp(f, "ts", 2) == 0 && strlen(f) >= 4 && f[3] == ':') { /* any time zone */
    switch (f[2]) {
    case 's': out->ts_mul = 1000000; break;
    case 'm': out->ts_mul = 1000; break;
    case 'u': break;
    case 'n': out->ts_div = 1000; break;
    default: return RILL_ENOTSUP;
    }
    out->type = rill_type_scalar(RILL_TIMESTAMP_US);
    out->layout = RILL__ARROW_TIMESTAMP;
    return RILL_OK;
  }
  char ext[64];
  if (strcmp(f, "+s") == 0 && rill__arrow_metadata_get(s->metadata, "ARROW:extension:name", ext, sizeof ext) &&
      strcmp(ext, "arrow.variable_shape_tensor") == 0)
    return var_tensor_type(s, out, why);
  if (strncmp(f, "+w:", 3) == 0) return fixed_list_type(s, out, why);
  return RILL_ENOTSUP;
}

/* ---------------------------------------------------------------- schema nodes */

typedef struct snode {
  char* format;
  char* name;
  char* metadata;
  struct ArrowSchema** child_ptrs;
  struct ArrowSchema* children;
  int64_t n_children;
} snode_t;

static void schema_release(struct ArrowSchema* s) {
  if (s == NULL || s->release == NULL) return;
  snode_t* node = s->private_data;
  if (node != NULL) {
    for (int64_t i = 0; i < node->n_children; i++)
      if (node->children[i].release != NULL) node->children[i].release(&node->children[i]);
    rill__free(node->format);
    rill__free(node->name);
    rill__free(node->metadata);
    rill__free(node->child_ptrs);
    rill__free(node->children);
    rill__free(node);
  }
  s->private_data = NULL;
  s->release = NULL;
}

int rill__arrow_schema_init(struct ArrowSchema* s, const char* format, const char* name, char* metadata,
                            int64_t flags, int64_t n_children) {
  memset(s, 0, sizeof(*s));
  snode_t* node = rill__calloc(1, sizeof(*node));
  if (node == NULL) {
    rill__free(metadata);
    return RILL_ENOMEM;
  }
  node->metadata = metadata;
  node->format = rill__strdup(format);
  node->name = rill__strdup(name != NULL ? name : "");
  if (n_children > 0) {
    node->child_ptrs = rill__calloc((size_t)n_children, sizeof(*node->child_ptrs));
    node->children = rill__calloc((size_t)n_children, sizeof(*node->children));
  }
  s->private_data = node;
  s->release = schema_release;
  if (node->format == NULL || node->name == NULL ||
      (n_children > 0 && (node->child_ptrs == NULL || node->children == NULL))) {
    schema_release(s);
    return RILL_ENOMEM;
  }
  node->n_children = n_children;
  for (int64_t i = 0; i < n_children; i++) node->child_ptrs[i] = &node->children[i];
  s->format = node->format;
  s->name = node->name;
  s->metadata = metadata;
  s->flags = flags;
  s->n_children = n_children;
  s->children = n_children > 0 ? node->child_ptrs : NULL;
  s->dictionary = NULL;
  return RILL_OK;
}

/* ---------------------------------------------------------------- rill -> Arrow */

/* A primitive (or string) node without children: `name`, the element format of d. */
static int flat_schema(rill_dtype_t d, const char* name, int64_t flags, struct ArrowSchema* s) {
  int rc;
  char* md = dtype_metadata(d, &rc);
  if (rc != RILL_OK) return rc;
  return rill__arrow_schema_init(s, rill__arrow_format(d), name, md, flags, 0);
}

int rill__arrow_schema_for(const rill_type_t* t, const char* name, int64_t flags, struct ArrowSchema* s) {
  s->release = NULL;
  if (t->ndim == 0) return flat_schema(t->dtype, name, flags, s);
  int var_shape = 0;
  int64_t cell = 1;
  for (int i = 0; i < t->ndim; i++) {
    var_shape |= t->shape[i] < 0;
    cell *= t->shape[i];
  }
  char* md = tensor_metadata(t, var_shape);
  if (md == NULL) return RILL_ENOMEM;
  char format[32];
  if (!var_shape) { /* fixed_size_list<T>[cell] */
    snprintf(format, sizeof(format), "+w:%" PRId64, cell);
    if (rill__arrow_schema_init(s, format, name, md, flags, 1) != RILL_OK) return RILL_ENOMEM;
    if (flat_schema(t->dtype, "item", ARROW_FLAG_NULLABLE, s->children[0]) != RILL_OK) goto nomem;
    return RILL_OK;
  }
  /* struct<data: list<T>, shape: fixed_size_list<int32>[ndim]> */
  if (rill__arrow_schema_init(s, "+s", name, md, flags, 2) != RILL_OK) return RILL_ENOMEM;
  snprintf(format, sizeof(format), "+w:%d", t->ndim);
  struct ArrowSchema* sd = s->children[0];
  struct ArrowSchema* ss = s->children[1];
  if (rill__arrow_schema_init(sd, "+l", "data", NULL, 0, 1) != RILL_OK ||
      flat_schema(t->dtype, "item", ARROW_FLAG_NULLABLE, sd->children[0]) != RILL_OK ||
      rill__arrow_schema_init(ss, format, "shape", NULL, 0, 1) != RILL_OK ||
      rill__arrow_schema_init(ss->children[0], rill__arrow_format(RILL_INT32), "item", NULL, 0, 0) != RILL_OK)
    goto nomem;
  return RILL_OK;
nomem:
  s->release(s);
  return RILL_ENOMEM;
}
