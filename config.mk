# Build configuration. Override on the command line: make USE_CUDA=0 SANITIZE=address
CC       ?= cc
NVCC     ?= nvcc
CUDA_HOME ?= /usr/local/cuda
# auto: detected; 1: required; 0: left out (the addon returns RILL_ENOTSUP)
USE_CUDA   ?= auto
USE_PNG    ?= auto
USE_JPEG   ?= auto
USE_SQLITE ?= auto
USE_WEBP   ?= auto
USE_ZLIB   ?= auto
# libdeflate: a faster inflate of gzip-compressed CSV (used with zlib, which explains bad data)
USE_DEFLATE ?= auto
# libzstd: zstd-compressed CSV
USE_ZSTD   ?= auto
# address | undefined | address,undefined | thread (empty: none)
SANITIZE ?=
OPT      ?= -O2
# Where objects go and where lib/ and bin/ outputs go (sanitizer builds use build/<name>).
# Taken from the command line only: an environment variable of the same name (OUT and BUILD
# are common names) must not move the library away from where setup.py and the tests look.
ifneq ($(origin BUILD),command line)
BUILD := build
endif
ifneq ($(origin OUT),command line)
OUT := .
endif
# Python of the test virtual environment: Debian's, whose python3-torch the tests use as an
# oracle (the environment sees Debian's site-packages).
PYTHON ?= /usr/bin/python3
