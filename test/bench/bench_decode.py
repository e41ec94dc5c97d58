"""PIL peer of bench_decode: decodes the same JPEGs (in memory) to RGB, then the same images
re-encoded as PNG and as lossy WebP (quality 80). Prints 'JPEG PNG WEBP' in images per second
(best of 3 passes after a warm-up; process CPU time, like the C side; WEBP 0 when PIL has no
WebP). Usage: python3 bench_decode.py LIST [MAX]"""
import io
import sys
import time

from PIL import Image, features


def rate(blobs):
    def one_pass():
        for b in blobs:
            Image.open(io.BytesIO(b)).convert("RGB")

    one_pass()
    best = float("inf")
    for _ in range(3):
        t0 = time.process_time()
        one_pass()
        best = min(best, time.process_time() - t0)
    return len(blobs) / best


def main():
    limit = int(sys.argv[2]) if len(sys.argv) > 2 else 1 << 30
    with open(sys.argv[1]) as f:
        paths = [line.strip() for line in f if line.strip()][:limit]
    jpegs = []
    for p in paths:
        with open(p, "rb") as f:
            jpegs.append(f.read())
    pngs, webps = [], []
    for b in jpegs:
        out = io.BytesIO()
        Image.open(io.BytesIO(b)).convert("RGB").save(out, format="PNG")
        pngs.append(out.getvalue())
        if features.check("webp"):
            out = io.BytesIO()
            Image.open(io.BytesIO(b)).convert("RGB").save(out, format="WEBP", quality=80)
            webps.append(out.getvalue())
    print(f"{rate(jpegs):.1f} {rate(pngs):.1f} {rate(webps) if webps else 0:.1f}")


if __name__ == "__main__":
    main()
