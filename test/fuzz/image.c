/* libFuzzer target for the image decoders: probe, plan and decode arbitrary bytes as JPEG or
 * PNG, whole and as a region (packed and padded), with every output channel count. Any crash,
 * leak or sanitizer report is a bug; errors are expected. */
#include <stdint.h>
#include <stdlib.h>

#include "image_internal.h"

int LLVMFuzzerTestOneInput(const uint8_t* data, size_t size);

int LLVMFuzzerTestOneInput(const uint8_t* data, size_t size) {
  rill_error_t err;
  rill_error_clear(&err);
  rill__img_info_t info;
  if (rill__img_probe(data, size, &info, &err) != RILL_OK) return 0;
  static const int channels[] = {1, 3, 4, 3};
  for (int k = 0; k < 4; k++) {
    rill__img_request_t req = {.channels = channels[k], .max_pixels = 1 << 22, .padded = k == 3};
    if (k >= 2 && info.width > 2 && info.height > 2) {
      /* a region and a DCT-scaled decode, derived from the input's own size */
      req.x = info.width / 3;
      req.y = info.height / 3;
      req.w = info.width - req.x;
      req.h = info.height - req.y;
      req.min_w = req.w / 4 + 1;
      req.min_h = req.h / 4 + 1;
    }
    rill__img_out_t plan, out;
    if (rill__img_plan(&info, &req, &plan, &err) != RILL_OK) continue;
    size_t bytes = req.padded ? rill__img_padded_size(&plan) : (size_t)plan.w * (size_t)plan.h * (size_t)plan.channels;
    uint8_t* dst = malloc(bytes ? bytes : 1);
    if (!dst) return 0;
    if (rill__img_decode(data, size, &req, dst, bytes, &out, &err) == RILL_OK) {
      if (out.w != plan.w || out.h != plan.h || out.channels != plan.channels) abort();
      if (out.x < 0 || out.stride < (int64_t)(out.x + out.w) * out.channels ||
          (size_t)out.stride * (size_t)out.h > bytes || (!req.padded && out.x != 0))
        abort();
    }
    free(dst);
  }
  return 0;
}
