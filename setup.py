"""Builds librill (through the project's Makefile) and the CPython extension rill._rill.

`pip install .` and `pip install -e .` both run this: the static library lib/librill.a is
built first with `make lib` (the Makefile detects libjpeg-turbo, libpng, SQLite and CUDA), then
the extension is linked against it, so the installed package needs no librill.so at run time.
"""
import os
import re
import shutil
import subprocess
import sys
import sysconfig

from setuptools import Extension, setup
from setuptools.command.build import build
from setuptools.command.build_ext import build_ext

ROOT = os.path.dirname(os.path.abspath(__file__))


def version():
    text = open(os.path.join(ROOT, "include", "rill.h")).read()
    return re.search(r'#define RILL_VERSION_STRING "([^"]+)"', text).group(1)


def make(*args):
    cmd = ["make", "--no-print-directory", "-C", ROOT] + list(args)
    return subprocess.run(cmd, check=True, stdout=subprocess.PIPE, text=True).stdout


class CleanBuild(build):
    """Builds under build/python and empties the staged package first (but for this Python's
    extension, relinked whenever its sources or lib/librill.a change), so files left there by
    an earlier build (a module since removed, another Python's extension) are never installed."""

    def initialize_options(self):
        super().initialize_options()
        self.build_base = os.path.join("build", "python")

    def run(self):
        staged = os.path.join(self.build_lib, "rill")
        keep = "_rill" + sysconfig.get_config_var("EXT_SUFFIX")
        if os.path.isdir(staged):
            for name in os.listdir(staged):
                path = os.path.join(staged, name)
                if name == keep:
                    continue
                if os.path.isdir(path):
                    shutil.rmtree(path)
                else:
                    os.remove(path)
        super().run()


class BuildWithLibrill(build_ext):
    """Builds lib/librill.a with make, then links every extension against it."""

    def run(self):
        jobs = os.environ.get("RILL_MAKE_JOBS", str(os.cpu_count() or 1))
        sys.stdout.write(make("-j" + jobs, "lib"))
        libs = make("-s", "print-ldlibs").split()
        archive = os.path.join(ROOT, "lib", "librill.a")
        for ext in self.extensions:
            ext.extra_objects = [archive]
            ext.extra_link_args = libs
            ext.depends = list(ext.depends) + [archive]  # relink when the library changed
        super().run()


EXT_DIR = os.path.join("python", "rill", "_rill")
sources = sorted(os.path.join(EXT_DIR, f) for f in os.listdir(os.path.join(ROOT, EXT_DIR))
                 if f.endswith(".c"))

setup(
    version=version(),
    ext_modules=[Extension(
        "rill._rill",
        sources=sources,
        include_dirs=[os.path.join(ROOT, "include")],
        depends=[os.path.join(EXT_DIR, "rillpy.h")] + [
            os.path.join("include", h) for h in ("rill.h", "rill_addons.h", "rill_interop.h")],
        extra_compile_args=["-std=c11", "-D_GNU_SOURCE", "-Wall", "-Wextra", "-Wpedantic", "-Werror",
                            "-Wno-unused-parameter", "-Wno-missing-field-initializers",
                            "-fvisibility=hidden"],
    )],
    cmdclass={"build": CleanBuild, "build_ext": BuildWithLibrill},
)
