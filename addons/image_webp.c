/* WebP decoding through libwebp: lossy (VP8) and lossless (VP8L) still images, with or without
 * alpha, to RGB or RGBA (gray from RGB by BT.601 luma, as for PNG). Animations are refused.
 *
 * A region is decoded with libwebp's cropping, widened by a margin: libwebp starts a crop on
 * even coordinates and upsamples a lossy image's chroma at the crop's edges as at the image's,
 * so the pixels at a crop's border differ from those of a whole decode. Two pixels of margin
 * on each side (clipped to the image) give the region exactly the pixels of a whole decode,
 * which are then copied out. libwebp 1.2's cropped decode misplaces the alpha of lossy images
 * when the crop does not start at the top row, so an RGBA region of such an image is decoded
 * from the top. libwebp decodes the macroblock rows down to the region's last one; the rows
 * below it are not read (VP8 data carries no checksum: damage libwebp cannot see decodes to
 * wrong pixels, as with every WebP reader; a truncated file fails at its headers). */
#include <string.h>

#include "addon.h"
#include "image_internal.h"

#if RILL_HAVE_WEBP

#include <webp/decode.h>

#define MARGIN 2

static const char* status_text(VP8StatusCode s) {
  switch (s) {
    case VP8_STATUS_OUT_OF_MEMORY: return "out of memory";
    case VP8_STATUS_INVALID_PARAM: return "invalid parameter";
    case VP8_STATUS_BITSTREAM_ERROR: return "bitstream error";
    case VP8_STATUS_UNSUPPORTED_FEATURE: return "unsupported feature";
    case VP8_STATUS_SUSPENDED: return "suspended";
    case VP8_STATUS_USER_ABORT: return "aborted";
    case VP8_STATUS_NOT_ENOUGH_DATA: return "truncated";
    default: return "error";
  }
}

static int fail(VP8StatusCode s, const char* what, rill_error_t* err) {
  if (s == VP8_STATUS_OUT_OF_MEMORY) return rill_error_set(err, RILL_ENOMEM, "out of memory (WebP decoder)");
  if (s == VP8_STATUS_UNSUPPORTED_FEATURE)
    return rill_error_set(err, RILL_ENOTSUP, "unsupported WebP feature (libwebp %d.%d.%d)", WebPGetDecoderVersion() >> 16,
                          (WebPGetDecoderVersion() >> 8) & 0xff, WebPGetDecoderVersion() & 0xff);
  return rill_error_set(err, RILL_EFORMAT, "corrupt WebP %s (%s)", what, status_text(s));
}

static int features(const void* buf, size_t n, WebPBitstreamFeatures* f, rill_error_t* err) {
  VP8StatusCode s = WebPGetFeatures(buf, n, f);
  if (s != VP8_STATUS_OK) return fail(s, "header", err);
  if (f->has_animation) return rill_error_set(err, RILL_ENOTSUP, "animated WebP is not supported");
  return RILL_OK;
}

int rill__webp_probe(const void* buf, size_t n, rill__img_info_t* info, rill_error_t* err) {
  WebPBitstreamFeatures f;
  int rc = features(buf, n, &f, err);
  if (rc < 0) return rc;
  info->format = RILL__IMG_WEBP;
  info->width = f.width;
  info->height = f.height;
  info->channels = f.has_alpha ? 4 : 3;
  return RILL_OK;
}

typedef struct webp_state {
  uint8_t* scratch;              /* the widened region, when it cannot go to dst directly */
  size_t scratch_cap;
} webp_state_t;

static void state_destroy(void* p) { rill__free(((webp_state_t*)p)->scratch); }

static const rill__scratch_kind_t state_kind = {sizeof(webp_state_t), state_destroy};

static int clamp(int v, int lo, int hi) { return v < lo ? lo : v > hi ? hi : v; }

int rill__webp_decode(const void* buf, size_t n, const rill__img_request_t* req, uint8_t* dst, size_t dst_size,
                      rill__img_out_t* out, rill_error_t* err) {
  rill__img_info_t info;
  int rc = rill__webp_probe(buf, n, &info, err);
  if (rc < 0) return rc;
  rill__img_geom_t g;
  int channels = req->channels;
  if ((rc = rill__img_geometry(&info, req, &g, err)) < 0 || (rc = rill__img_dst_fits(&g, channels, dst_size, err)) < 0)
    return rc;
  size_t stride = (size_t)g.w * (size_t)channels;
  int oc = channels == 4 ? 4 : 3; /* libwebp's output: RGBA or RGB */
  int x0 = clamp(g.x - MARGIN, 0, info.width) & ~1, y0 = clamp(g.y - MARGIN, 0, info.height) & ~1;
  int x1 = clamp(g.x + g.w + MARGIN, 0, info.width), y1 = clamp(g.y + g.h + MARGIN, 0, info.height);
  if (info.channels == 4 && oc == 4) y0 = 0;
  int ww = x1 - x0, wh = y1 - y0;
  int direct = oc == channels && x0 == g.x && y0 == g.y && ww == g.w && wh == g.h;

  WebPDecoderConfig config;
  if (!WebPInitDecoderConfig(&config)) return rill_error_set(err, RILL_ENOTSUP, "libwebp's decoder ABI does not match");
  if (ww != info.width || wh != info.height) {
    config.options.use_cropping = 1;
    config.options.crop_left = x0;
    config.options.crop_top = y0;
    config.options.crop_width = ww;
    config.options.crop_height = wh;
  }
  config.output.colorspace = oc == 4 ? MODE_RGBA : MODE_RGB;
  config.output.is_external_memory = 1;
  size_t wstride = (size_t)ww * (size_t)oc;
  uint8_t* target = dst;
  if (!direct) {
    webp_state_t* st = rill__scratch(&state_kind);
    if (!st || !rill__img_grow(&st->scratch, &st->scratch_cap, wstride * (size_t)wh))
      return rill_error_set(err, RILL_ENOMEM, "out of memory (%zu bytes of WebP scratch)", wstride * (size_t)wh);
    target = st->scratch;
  }
  config.output.u.RGBA.rgba = target;
  config.output.u.RGBA.stride = (int)wstride;
  config.output.u.RGBA.size = wstride * (size_t)wh;
  VP8StatusCode s = WebPDecode(buf, n, &config);
  WebPFreeDecBuffer(&config.output); /* external memory: frees nothing of ours */
  if (s != VP8_STATUS_OK) return fail(s, "data", err);
  if (!direct) {
    const uint8_t* src = target + (size_t)(g.y - y0) * wstride + (size_t)(g.x - x0) * (size_t)oc;
    for (int y = 0; y < g.h; y++, src += wstride)
      rill__img_convert_row(src, oc, dst + (size_t)y * stride, channels, g.w);
  }
  if (out) *out = (rill__img_out_t){g.w, g.h, channels, 1, 1, 0, (int64_t)stride};
  return RILL_OK;
}

#endif
