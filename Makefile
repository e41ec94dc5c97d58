# rill build. `make` builds lib/librill.a, lib/librill.so and bin/rill; `make check` runs every
# test (then again under AddressSanitizer + UndefinedBehaviorSanitizer); `make demo` runs the
# demo; `make bench` runs the benchmarks. See README.md.
include config.mk

SHELL := /bin/bash
ROOT := $(abspath .)

# ------------------------------------------------------------------ feature detection
# Missing Debian packages (the `deps` target) are installed first, when run as root, so that a
# first `make` on a fresh machine finds their headers below; a goal that builds nothing skips it,
# as do the GPU checks (test/gpu builds with the CUDA toolkit alone, on machines without a registry).
ifeq ($(MAKELEVEL),0)
ifneq ($(filter-out clean distclean info print-ldlibs deps gpu-check gpu-bench,$(or $(MAKECMDGOALS),all)),)
DEPS_RC := $(shell $(MAKE) --no-print-directory -s deps >&2; echo $$?)
ifneq ($(DEPS_RC),0)
$(error missing Debian packages: see the line above)
endif
endif
endif
HASH := \#
have_header = $(shell printf '$(HASH)include <stdio.h>\n$(HASH)include <$(1)>\n' | $(CC) $(2) -E -x c - >/dev/null 2>&1 && echo 1 || echo 0)
resolve = $(if $(filter auto,$(1)),$(2),$(1))

USE_JPEG_R   := $(call resolve,$(USE_JPEG),$(call have_header,jpeglib.h))
USE_PNG_R    := $(call resolve,$(USE_PNG),$(call have_header,png.h))
USE_SQLITE_R := $(call resolve,$(USE_SQLITE),$(call have_header,sqlite3.h))
USE_WEBP_R   := $(call resolve,$(USE_WEBP),$(call have_header,webp/decode.h))
USE_ZLIB_R   := $(call resolve,$(USE_ZLIB),$(call have_header,zlib.h))
USE_ZSTD_R   := $(call resolve,$(USE_ZSTD),$(call have_header,zstd.h))
USE_DEFLATE_R := $(if $(filter 1,$(USE_ZLIB_R)),$(call resolve,$(USE_DEFLATE),$(call have_header,libdeflate.h)),0)
USE_CUDA_R   := $(call resolve,$(USE_CUDA),$(shell command -v $(NVCC) >/dev/null 2>&1 && test -f $(CUDA_HOME)/include/cuda_runtime_api.h && echo 1 || echo 0))

# ------------------------------------------------------------------ flags
CSTD     := -std=c11 -D_GNU_SOURCE
WARN     := -Wall -Wextra -Wpedantic -Werror -Wno-unused-parameter
# Dependency files: each object depends on the headers it includes (build/**/*.d).
DEPFLAGS := -MMD -MP
CPPFLAGS += -Iinclude -Ilib -Iaddons \
            -DRILL_HAVE_JPEG=$(USE_JPEG_R) -DRILL_HAVE_PNG=$(USE_PNG_R) \
            -DRILL_HAVE_WEBP=$(USE_WEBP_R) -DRILL_HAVE_SQLITE=$(USE_SQLITE_R) \
            -DRILL_HAVE_CUDA=$(USE_CUDA_R) -DRILL_HAVE_ZLIB=$(USE_ZLIB_R) -DRILL_HAVE_DEFLATE=$(USE_DEFLATE_R) \
            -DRILL_HAVE_ZSTD=$(USE_ZSTD_R)
CFLAGS   += $(CSTD) $(WARN) $(OPT) -g -fPIC -pthread -fvisibility=hidden
LDLIBS   += -pthread -lm -ldl -lrt
ifneq ($(SANITIZE),)
CFLAGS   += -fsanitize=$(SANITIZE) -fno-omit-frame-pointer -fno-sanitize-recover=undefined
LDFLAGS  += -fsanitize=$(SANITIZE)
OPT      := -O1
endif
ifeq ($(USE_JPEG_R),1)
LDLIBS   += -ljpeg
endif
ifeq ($(USE_PNG_R),1)
LDLIBS   += -lpng16
endif
# the compressed-CSV libraries (zlib also for libpng)
LDLIBS   += $(if $(filter 1,$(USE_DEFLATE_R)),-ldeflate) $(if $(filter 1,$(USE_ZSTD_R)),-lzstd) \
            $(if $(filter 1,$(USE_PNG_R) $(USE_ZLIB_R)),-lz)
ifeq ($(USE_WEBP_R),1)
LDLIBS   += -lwebp
endif
ifeq ($(USE_SQLITE_R),1)
LDLIBS   += -lsqlite3
endif
ifeq ($(USE_CUDA_R),1)
CPPFLAGS += -I$(CUDA_HOME)/include
# The CUDA runtime is linked statically: librill.so runs where only the driver is installed,
# and on machines without one (CUDA calls then fail with RILL_ENODEV).
LDLIBS   += -L$(CUDA_HOME)/lib64 -lcudart_static -lstdc++
NVCCFLAGS ?= -O2 -std=c++17 -Xcompiler -fPIC,-fvisibility=hidden \
             -gencode arch=compute_80,code=sm_80 -gencode arch=compute_90,code=sm_90 \
             -gencode arch=compute_90,code=compute_90
endif

# ------------------------------------------------------------------ sources
LIB_C   := $(sort $(wildcard lib/*.c addons/*.c))
LIB_CU  := $(if $(filter 1,$(USE_CUDA_R)),$(sort $(wildcard lib/*.cu addons/*.cu)))
LIB_OBJ := $(LIB_C:%.c=$(BUILD)/obj/%.o) $(LIB_CU:%.cu=$(BUILD)/obj/%.cu.o)
BIN_C   := $(sort $(wildcard bin/*.c))
BIN_OBJ := $(BIN_C:%.c=$(BUILD)/obj/%.o)
HEADERS := $(wildcard include/*.h lib/*.h addons/*.h bin/*.h)

LIB_A   := $(OUT)/lib/librill.a
LIB_SO  := $(OUT)/lib/librill.so
RILL    := $(OUT)/bin/rill

TEST_C    := $(sort $(wildcard test/test_*.c))
TEST_BIN  := $(TEST_C:test/%.c=$(BUILD)/test/%)
BENCH_C   := $(sort $(wildcard test/bench/bench_*.c))
BENCH_BIN := $(BENCH_C:test/bench/%.c=$(BUILD)/bench/%)

.PHONY: print-ldlibs pyext all lib tests check check-boundary test pytest check-asan tsan tsan-run bench bench-deps data demo fuzz fuzz-smoke deps venv \
        gpu-check gpu-bench gpu-build-check clean distclean install install-check info
all: deps $(LIB_A) $(LIB_SO) $(RILL)
lib: $(LIB_A) $(LIB_SO)

info:
	@echo "jpeg=$(USE_JPEG_R) png=$(USE_PNG_R) webp=$(USE_WEBP_R) sqlite=$(USE_SQLITE_R) zlib=$(USE_ZLIB_R) libdeflate=$(USE_DEFLATE_R) zstd=$(USE_ZSTD_R) cuda=$(USE_CUDA_R) sanitize=$(SANITIZE)"

# The libraries a program linking lib/librill.a needs (used by setup.py).
print-ldlibs:
	@echo $(LDLIBS)

$(BUILD)/obj/%.o: %.c config.mk Makefile
	@mkdir -p $(dir $@)
	$(CC) $(CPPFLAGS) $(CFLAGS) $(DEPFLAGS) -c $< -o $@

$(BUILD)/obj/%.cu.o: %.cu $(HEADERS) config.mk
	@mkdir -p $(dir $@)
	$(NVCC) $(NVCCFLAGS) -Iinclude -Ilib -Iaddons -DRILL_HAVE_CUDA=1 -c $< -o $@

$(LIB_A): $(LIB_OBJ)
	@mkdir -p $(dir $@)
	rm -f $@ && ar rcs $@ $^

$(LIB_SO): $(LIB_OBJ)
	@mkdir -p $(dir $@)
	$(CC) -shared $(LDFLAGS) -o $@ $^ $(LDLIBS)

$(RILL): $(BIN_OBJ) $(LIB_A)
	@mkdir -p $(dir $@)
	$(CC) $(LDFLAGS) -o $@ $(BIN_OBJ) $(LIB_A) $(LDLIBS)

-include $(LIB_OBJ:.o=.d) $(BIN_OBJ:.o=.d) $(TEST_BIN:=.d) $(BENCH_BIN:=.d) \
         $(patsubst test/tsan/%.c,$(BUILD)/tsan/%.d,$(wildcard test/tsan/*.c))

# ------------------------------------------------------------------ dependencies
# Debian packages the build and the tests need. Installed when missing and we are root;
# otherwise the build stops with the command to run.
DEB_PACKAGES := libcriterion-dev libjpeg62-turbo-dev libturbojpeg0-dev libpng-dev libwebp-dev libsqlite3-dev libdeflate-dev libzstd-dev \
                zlib1g-dev pkg-config clang libclang-rt-14-dev \
                python3-dev python3-venv python3-torch python3-numpy python3-pil
deps:
	@missing=""; for p in $(DEB_PACKAGES); do \
	  dpkg-query -W -f='$${Status}' $$p 2>/dev/null | grep -q "install ok installed" || missing="$$missing $$p"; \
	done; \
	if [ -n "$$missing" ]; then \
	  if [ "$$(id -u)" = 0 ] && command -v apt-get >/dev/null; then \
	    echo "installing Debian packages:$$missing"; \
	    (apt-get update -qq && DEBIAN_FRONTEND=noninteractive apt-get install -y -qq $$missing >/dev/null) || \
	      { echo "apt-get failed; run: apt-get update && apt-get install -y$$missing"; exit 1; }; \
	  else \
	    echo "missing Debian packages; run: sudo apt-get update && sudo apt-get install -y$$missing"; exit 1; \
	  fi; \
	fi

# ------------------------------------------------------------------ tests
$(BUILD)/test/%: test/%.c $(LIB_A)
	@mkdir -p $(dir $@)
	$(CC) $(CPPFLAGS) -Itest $(filter-out -fvisibility=hidden,$(CFLAGS)) -Wno-missing-field-initializers $(DEPFLAGS) -MF $@.d \
	  $(LDFLAGS) -o $@ $< $(LIB_A) -lcriterion $(LDLIBS)

tests: $(TEST_BIN)

# Runs every C test binary (T=name runs one: make test T=test_core).
test: all $(TEST_BIN)
	@set -e; fail=0; for t in $(if $(T),$(BUILD)/test/$(T),$(TEST_BIN)); do \
	  echo "== $$t"; RILL_TEST_ROOT=$(ROOT) RILL_BIN=$(ROOT)/$(RILL) $$t --jobs 2 || fail=1; \
	done; exit $$fail

VENV := $(ROOT)/.venv
PY_PACKAGES := pytest setuptools wheel 'pyarrow<21' nanoarrow 'numpy<2' pandas polars
# Debian's Python with its site-packages visible (python3-torch); a stamp of another version
# means an environment made differently: it is made anew.
VENV_STAMP := $(VENV)/.stamp-system-site
venv: $(VENV_STAMP)
$(VENV_STAMP):
	rm -rf $(VENV)
	$(PYTHON) -m venv --system-site-packages $(VENV)
	$(VENV)/bin/pip install -q --disable-pip-version-check $(PY_PACKAGES)
	touch $@

# The Python extension built in place (python/rill/_rill*.so) for development:
# PYTHONPATH=python .venv/bin/python ...
pyext: lib venv
	cd $(ROOT) && $(VENV)/bin/python setup.py -q build_ext --inplace

# The Python tests run against the package installed into .venv by pip (not the source tree),
# then once more under Python's debug allocator (PYTHONMALLOC=debug: reference and lifetime
# mistakes in the extension show up as crashes or "Debug memory block" reports).
PYTEST := RILL_TEST_INSTALLED=1 RILL_BIN=$(ROOT)/$(RILL) RILL_CORPUS=$(ROOT)/build/data/corpus \
          $(VENV)/bin/python -m pytest -q -p no:cacheprovider test/python
pytest: all venv
	@if ls test/python/test_*.py >/dev/null 2>&1; then set -e; \
	  $(VENV)/bin/pip install -q --disable-pip-version-check --no-build-isolation --no-deps $(ROOT); \
	  echo "== pytest (installed package)"; \
	  $(PYTEST); \
	  echo "== pytest (PYTHONMALLOC=debug)"; \
	  PYTHONMALLOC=debug $(PYTEST); \
	fi

# Criterion's runner passes a test whose process LeakSanitizer reports at its exit (the report
# is printed, the exit status is lost): the run's output is kept and searched for reports.
check-asan:
	@mkdir -p build/asan; set -o pipefail; \
	$(MAKE) BUILD=build/asan OUT=build/asan SANITIZE=address,undefined test 2>&1 | tee build/asan/test.log; \
	if grep -q -e "ERROR: LeakSanitizer" -e "ERROR: AddressSanitizer" -e "runtime error:" build/asan/test.log; then \
	  echo "check-asan: sanitizer reports in the output above"; exit 1; fi

# ThreadSanitizer: Criterion's test runner cannot start under TSan, so the threaded paths
# (worker pool, prefetch, seek, epochs, errors, two iterators) are exercised by plain C
# programs in test/tsan/ that print "N passed, N failed".
TSAN_C := $(sort $(wildcard test/tsan/*.c))
tsan:
	$(MAKE) BUILD=build/tsan OUT=build/tsan SANITIZE=thread tsan-run
tsan-run: $(LIB_A) $(TSAN_C:test/tsan/%.c=$(BUILD)/tsan/%)
	@set -e; for t in $(TSAN_C:test/tsan/%.c=$(BUILD)/tsan/%); do echo "== $$t"; \
	  TSAN_OPTIONS="halt_on_error=1" $$t; done
$(BUILD)/tsan/%: test/tsan/%.c $(LIB_A)
	@mkdir -p $(dir $@)
	$(CC) $(CPPFLAGS) -Itest $(CFLAGS) $(DEPFLAGS) -MF $@.d $(LDFLAGS) -o $@ $< $(LIB_A) $(LDLIBS)

# The engine is sealed: only its own files include engine.h (addons and the interchange
# files use addon.h), and no addon writes the arrays' private bookkeeping.
ENGINE_FILES := lib/engine.h lib/stage.h lib/dataframe.c lib/concat.c lib/iter.c lib/chunk.c lib/stage.c lib/tasks.c \
                lib/batching.c lib/compact.c lib/exec.c lib/workers.c
check-boundary:
	@bad=$$(grep -l '\#include "\(engine\|stage\).h"' lib/*.c lib/*.h addons/*.c addons/*.h addons/*.cu bin/*.c \
	        python/rill/_rill/*.c 2>/dev/null | grep -vxF -e "$$(echo $(ENGINE_FILES) | tr ' ' '\n')"); \
	if [ -n "$$bad" ]; then echo "check-boundary: engine.h included outside the engine: $$bad"; exit 1; fi; \
	bad=$$(grep -n -- '->priv->\(var_cells\|flags\|pool\|engine\|next_free\|refs\)' addons/*.c addons/*.cu lib/interop_*.c \
	        lib/arrow_*.c 2>/dev/null); \
	if [ -n "$$bad" ]; then echo "check-boundary: private array fields written outside the engine:"; echo "$$bad"; exit 1; fi; \
	echo "check-boundary: engine.h stays inside the engine"

check: all check-boundary data test pytest fuzz-smoke check-asan tsan install-check gpu-build-check
	@echo "make check: passed: build, engine boundary, data, $(words $(TEST_BIN)) C test programs, pytest, fuzz smoke ($(words $(FUZZ_C)) targets x $(FUZZ_SECONDS)s), C tests under ASan+UBSan, $(words $(TSAN_C)) TSan programs, install into a temporary DESTDIR, GPU programs built (and run: without a device they skip)"

# The GPU programs are built wherever CUDA's toolkit is (they rot otherwise), and run: on a
# machine without a device each prints why it skips and exits 0; with one, this is gpu-check.
gpu-build-check:
	@if [ "$(USE_CUDA_R)" = 1 ]; then \
	  $(MAKE) --no-print-directory -f test/gpu/Makefile.inc gpu-build >/dev/null && \
	  build/gpu/gpu_check && build/gpu/gpu_bench && \
	  $(PYTHON) -c 'import ast, sys; [ast.parse(open(f).read(), f) for f in sys.argv[1:]]' test/gpu/*.py; \
	else echo "gpu-build-check: skipped: rill is built without CUDA"; fi

# ------------------------------------------------------------------ fuzzing (clang libFuzzer)
FUZZ_C   := $(sort $(wildcard test/fuzz/*.c))
FUZZ_BIN := $(FUZZ_C:test/fuzz/%.c=build/fuzz/%)
FUZZ_FLAGS := -g -O1 -fsanitize=fuzzer,address,undefined -fno-sanitize-recover=undefined $(CSTD) -Iinclude -Ilib -Iaddons \
              -DRILL_HAVE_JPEG=$(USE_JPEG_R) -DRILL_HAVE_PNG=$(USE_PNG_R) \
              -DRILL_HAVE_WEBP=$(USE_WEBP_R) -DRILL_HAVE_SQLITE=$(USE_SQLITE_R) -DRILL_HAVE_CUDA=0 \
              -DRILL_HAVE_ZLIB=$(USE_ZLIB_R) -DRILL_HAVE_DEFLATE=$(USE_DEFLATE_R) -DRILL_HAVE_ZSTD=$(USE_ZSTD_R)
build/fuzz/%: test/fuzz/%.c $(LIB_C) $(HEADERS) test/image_enc.h test/tar_write.h $(wildcard test/fuzz/*.h)
	@mkdir -p $(dir $@)
	clang $(FUZZ_FLAGS) -o $@ $< $(LIB_C) $(filter-out -L% -lcudart_static -lstdc++,$(LDLIBS))
FUZZ_SECONDS ?= 20
fuzz-smoke: $(FUZZ_BIN)
	@for f in $(FUZZ_BIN); do n=$$(basename $$f); mkdir -p build/fuzz/corpus-$$n; \
	  echo "== fuzz $$n ($(FUZZ_SECONDS)s)"; \
	  seeds="test/fuzz/seeds/$$n"; [ -d "$$seeds" ] || seeds=""; \
	  [ "$$n" = image ] && [ -d build/data/variants ] && seeds="$$seeds build/data/variants"; \
	  set -o pipefail; $$f -max_total_time=$(FUZZ_SECONDS) -max_len=262144 -rss_limit_mb=2048 \
	    -artifact_prefix=build/fuzz/$$n- build/fuzz/corpus-$$n $$seeds 2>&1 | tail -3 || exit 1; done
fuzz: FUZZ_SECONDS=300
fuzz: fuzz-smoke

# ------------------------------------------------------------------ benchmarks and demo
$(BUILD)/bench/%: test/bench/%.c $(LIB_A)
	@mkdir -p $(dir $@)
	$(CC) $(CPPFLAGS) -Itest $(filter-out -fvisibility=hidden,$(CFLAGS)) -O3 $(DEPFLAGS) -MF $@.d $(LDFLAGS) -o $@ $< $(LIB_A) $(LDLIBS) \
	  $(shell pkg-config --libs libturbojpeg 2>/dev/null)

# Peers the benchmarks compare with: PyTorch's DataLoader + torchvision + PIL (Debian's,
# run with the system Python).
BENCH_DEB := python3-torch python3-torchvision python3-pil python3-numpy
bench-deps:
	@$(MAKE) --no-print-directory deps DEB_PACKAGES="$(BENCH_DEB)"

# The Python benchmark (run_python.sh) uses the package installed into .venv.
.PHONY: bench-pyinstall
# DuckDB (CSV reader and sqlite_scan, with its sqlite extension as a Python package) is a peer
# of the CSV and SQLite benchmarks; without it they print why it was skipped.
BENCH_PY_PACKAGES := 'duckdb==1.4.4' 'duckdb-ext-sqlite==1.4.4.*'
# WebDataset is the peer of the tar shard benchmark (run_tar.sh).
BENCH_WDS_PACKAGES := 'webdataset==1.0.2'
bench-pyinstall: all venv
	@$(VENV)/bin/pip install -q --disable-pip-version-check --no-build-isolation --no-deps $(ROOT)
	@$(VENV)/bin/pip install -q --disable-pip-version-check $(BENCH_PY_PACKAGES) || \
	  echo "duckdb could not be installed: its benchmark peers will be skipped"
	@$(VENV)/bin/pip install -q --disable-pip-version-check $(BENCH_WDS_PACKAGES) || \
	  echo "webdataset could not be installed: the tar benchmark's peer will be skipped"

bench: all data $(BENCH_BIN) venv bench-deps bench-pyinstall
	@for s in test/bench/run_*.sh; do echo "== $$s"; \
	  ROOT=$(ROOT) BUILD=$(ROOT)/$(BUILD) RILL_BIN=$(ROOT)/$(RILL) \
	  VENV=$(VENV) bash $$s || exit 1; done

# Real photos from Debian packages, turned into an ImageFolder corpus (build/data/corpus) and
# odd image variants for tests (build/data/variants). Runs once.
data: all
	bash test/data/get_images.sh $(ROOT)/build/data

demo: all data
	$(RILL) demo $(ROOT)/build/data/corpus

# The GPU machine may lack Debian's -dev packages and a registry: test/gpu builds what it needs.
gpu-check gpu-bench:
	@if [ -f test/gpu/Makefile.inc ]; then $(MAKE) -f test/gpu/Makefile.inc $@; \
	 else echo "no GPU tests in this tree"; fi

# clean: build outputs (build/data, the downloads and corpus of `make data`, is kept);
# distclean: also build/data, the test virtual environment and the demo's preview.png.
clean:
	find build -mindepth 1 -maxdepth 1 ! -name data -exec rm -rf {} + 2>/dev/null || true
	rm -f lib/librill.a lib/librill.so bin/rill python/rill/_rill*.so
	rm -rf rill.egg-info python/rill.egg-info

distclean: clean
	rm -rf build .venv preview.png

# ------------------------------------------------------------------ install
# make install [PREFIX=/usr/local] [DESTDIR=/staging]: headers, librill.a, librill.so,
# bin/rill and a pkg-config file (rill.pc).
PREFIX ?= /usr/local
RILL_VERSION := $(shell sed -n 's/^\#define RILL_VERSION_STRING "\(.*\)"/\1/p' include/rill.h)
install: $(LIB_A) $(LIB_SO) $(RILL)
	install -d $(DESTDIR)$(PREFIX)/include $(DESTDIR)$(PREFIX)/lib/pkgconfig $(DESTDIR)$(PREFIX)/bin
	install -m 644 include/rill.h include/rill_addons.h include/rill_interop.h $(DESTDIR)$(PREFIX)/include/
	install -m 644 $(LIB_A) $(DESTDIR)$(PREFIX)/lib/
	install -m 755 $(LIB_SO) $(DESTDIR)$(PREFIX)/lib/
	install -m 755 $(RILL) $(DESTDIR)$(PREFIX)/bin/
	printf '%s\n' 'prefix=$(PREFIX)' 'libdir=$${prefix}/lib' 'includedir=$${prefix}/include' '' \
	  'Name: rill' 'Description: pull-based streaming dataframe for machine-learning input pipelines' \
	  'Version: $(RILL_VERSION)' 'Libs: -L$${libdir} -lrill' 'Libs.private: $(LDLIBS)' \
	  'Cflags: -I$${includedir}' > $(DESTDIR)$(PREFIX)/lib/pkgconfig/rill.pc

# Installs into a temporary DESTDIR, then builds and runs a program against it through
# pkg-config (shared and static library).
install-check: all
	@set -e; d=$$(mktemp -d "$${TMPDIR:-/tmp}/rill-install-XXXXXX"); trap 'rm -rf "$$d"' EXIT; \
	$(MAKE) --no-print-directory install DESTDIR="$$d" PREFIX=/opt/rill >/dev/null; \
	for f in include/rill.h include/rill_addons.h include/rill_interop.h lib/librill.a lib/librill.so \
	         bin/rill lib/pkgconfig/rill.pc; do test -e "$$d/opt/rill/$$f" || { echo "install: $$f missing"; exit 1; }; done; \
	export PKG_CONFIG_PATH="$$d/opt/rill/lib/pkgconfig" PKG_CONFIG_SYSROOT_DIR="$$d"; \
	printf '#include <stdio.h>\n#include <string.h>\n#include <rill.h>\n#include <rill_addons.h>\nint main(void) { return strcmp(rill_version(), RILL_VERSION_STRING) != 0; }\n' > "$$d/t.c"; \
	$(CC) "$$d/t.c" -o "$$d/t_shared" $$(pkg-config --cflags --libs rill); \
	LD_LIBRARY_PATH="$$d/opt/rill/lib" "$$d/t_shared"; \
	$(CC) "$$d/t.c" -o "$$d/t_static" $$(pkg-config --cflags rill) "$$d/opt/rill/lib/librill.a" $$(pkg-config --libs-only-other --static rill) $(LDLIBS); \
	"$$d/t_static"; "$$d/opt/rill/bin/rill" info >/dev/null; \
	echo "install-check: headers, librill.a, librill.so, bin/rill and rill.pc install and link"
