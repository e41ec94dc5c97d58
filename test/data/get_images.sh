#!/usr/bin/env bash
# Obtains real photos from Debian packages and builds the test and benchmark images from them.
#   test/data/get_images.sh [OUT]          (OUT defaults to build/data)
# OUT/cache/     the downloaded packages (apt-get download) and their extracted files
# OUT/corpus/    an ImageFolder corpus: 10 classes x PER_CLASS JPEGs (max side 500 px, quality
#                75-95), cut deterministically from the photos by test/data/mkcorpus.c
# OUT/imagenet_like/  an ImageFolder corpus like ImageNet's training images: 10 classes x 200
#                JPEGs, mostly 500x375 / 375x500 / 500x333, some smaller and larger, quality
#                75-95, ~110 KB mean (mkcorpus --imagenet), from the same photos
# OUT/variants/  odd files for tests: JPEG subsampling / progressive / CMYK / gray / truncated
#                variants and the PngSuite (from Go's image test data), real PNG photos
# Needs apt-get (Debian), a C compiler, libjpeg and libpng headers. Runs once: later calls
# return at once while OUT/corpus/.done, OUT/imagenet_like/.done and OUT/variants/.done exist. PER_CLASS (environment) defaults to 150.
set -euo pipefail

here=$(cd "$(dirname "$0")" && pwd)
root=$(cd "$here/../.." && pwd)
out=${1:-$root/build/data}
per=${PER_CLASS:-150}
mkdir -p "$out"
out=$(cd "$out" && pwd)
cache=$out/cache

if [ -f "$out/corpus/.done" ] && [ -f "$out/imagenet_like/.done" ] && [ -f "$out/variants/.done" ]; then
  echo "images ready in $out"
  exit 0
fi

PACKAGES="python3-skimage opencv-doc golang-1.19-src"
mkdir -p "$cache/debs"
for p in $PACKAGES; do
  if ! ls "$cache/debs/${p}"_*.deb >/dev/null 2>&1; then
    echo "downloading $p"
    if ! (cd "$cache/debs" && apt-get download -q "$p" 2>/dev/null); then
      apt-get update -qq 2>/dev/null || true
      (cd "$cache/debs" && apt-get download -q "$p") || {
        echo "get_images.sh: cannot download Debian package $p (apt-get download $p)" >&2; exit 1; }
    fi
  fi
  if [ ! -f "$cache/x/$p/.done" ]; then
    rm -rf "$cache/x/$p" && mkdir -p "$cache/x/$p"
    dpkg-deb -x "$cache/debs/${p}"_*.deb "$cache/x/$p"
    touch "$cache/x/$p/.done"
  fi
done

sk=$cache/x/python3-skimage/usr/lib/python3/dist-packages/skimage/data
cv=$cache/x/opencv-doc/usr/share/doc/opencv-doc/examples/data
go=$cache/x/golang-1.19-src/usr/share/go-1.19/src/image

# ---- the corpus
cc -O2 -std=c11 -o "$out/mkcorpus" "$here/mkcorpus.c" -ljpeg -lpng16 -lz -lm
classes=(
  "astronaut=$sk/astronaut.png" "cat=$sk/chelsea.png" "coffee=$sk/coffee.png"
  "motorcycle=$sk/motorcycle_left.png" "rocket=$sk/rocket.jpg" "baboon=$cv/baboon.jpg"
  "fruits=$cv/fruits.jpg" "painting=$cv/starry_night.jpg" "squirrel=$cv/squirrel_cls.jpg"
  "plant=$cv/../alphamat/input_images/plant.jpg"
)
if [ ! -f "$out/corpus/.done" ]; then
  rm -rf "$out/corpus.tmp"
  echo "building the corpus: ${#classes[@]} classes x $per images"
  "$out/mkcorpus" "$out/corpus.tmp" "$per" "${classes[@]}"
  touch "$out/corpus.tmp/.done"
  rm -rf "$out/corpus" && mv "$out/corpus.tmp" "$out/corpus"
fi
if [ ! -f "$out/imagenet_like/.done" ]; then
  rm -rf "$out/imagenet_like.tmp"
  echo "building the ImageNet-like corpus: ${#classes[@]} classes x 200 images"
  # two halves of the classes at once: the files do not depend on how the work is split
  "$out/mkcorpus" --imagenet "$out/imagenet_like.tmp" 200 "${classes[@]:0:5}" &
  first=$!
  "$out/mkcorpus" --imagenet "$out/imagenet_like.tmp" 200 "${classes[@]:5}" || { wait "$first"; exit 1; }
  wait "$first"
  touch "$out/imagenet_like.tmp/.done"
  rm -rf "$out/imagenet_like" && mv "$out/imagenet_like.tmp" "$out/imagenet_like"
fi

# ---- variants for the tests
v=$out/variants
rm -rf "$v" && mkdir -p "$v/pngsuite"
cp "$go"/testdata/video-001*.jpeg "$go"/testdata/video-005.gray*.jpeg "$v/"
cp "$go"/testdata/video-001.png "$go"/testdata/video-001.cmyk.png "$go"/testdata/video-005.gray.png \
   "$go"/testdata/video-001.progressive.truncated.png "$v/"
cp "$go"/testdata/*.gif "$v/"
cp "$go"/png/testdata/pngsuite/*.png "$v/pngsuite/"
cp "$go"/png/testdata/invalid-*.png "$v/"
cp "$sk/camera.png" "$sk/astronaut.png" "$v/"
touch "$v/.done"
echo "images ready in $out ($(find "$out/corpus" -name '*.jpg' | wc -l) corpus files)"
