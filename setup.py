"""Builds the backplane Python package with the project's CMake.

`pip install --no-build-isolation .` (in a venv made with
--system-site-packages, so Debian's numpy, setuptools and wheel are seen):

1. configures and builds the project in build/python-wheel/cmake (Release, no
   tests) for the interpreter running pip (BACKPLANE_CMAKE_ARGS: more
   configure arguments, BACKPLANE_JOBS: parallel jobs), or uses the
   configured build directory named by BACKPLANE_BUILD_DIR (building what the
   package needs);
2. `cmake --install`s it into a staging prefix;
3. packages backplane/ (the extension, __init__.py, the .pyi stubs) with the
   runtime inside: backplane/lib/libbackplane.so.M.m (found through the
   extension's RUNPATH $ORIGIN/lib) and backplane/lib/backplane/ (the
   dynamic backends, found beside libbackplane.so).
"""
import glob
import os
import shlex
import shutil
import subprocess
import sys

from setuptools import Extension, setup
from setuptools.command.build_ext import build_ext

SOURCE = os.path.dirname(os.path.abspath(__file__))


class CMakeBuild(build_ext):
    def build_extension(self, ext):
        build_dir = os.environ.get("BACKPLANE_BUILD_DIR")
        jobs = os.environ.get("BACKPLANE_JOBS", str(os.cpu_count() or 1))
        if build_dir:
            build_dir = os.path.abspath(build_dir)
            if not os.path.exists(os.path.join(build_dir, "CMakeCache.txt")):
                raise SystemExit(f"BACKPLANE_BUILD_DIR={build_dir} is not a configured CMake build directory")
            targets = ["_backplane", "Backplane_CpuRef_backend"]
            cache = open(os.path.join(build_dir, "CMakeCache.txt")).read()
            if "BACKPLANE_WITH_ONEDNN:BOOL=ON" in cache:
                targets += ["Backplane_CpuOneDnn_backend"]
            subprocess.check_call(["cmake", "--build", build_dir, "-j", jobs, "--target", *targets])
        else:
            build_dir = os.path.join(SOURCE, "build", "python-wheel", "cmake")
            subprocess.check_call(["cmake", "-S", SOURCE, "-B", build_dir, "-DCMAKE_BUILD_TYPE=Release",
                                   "-DBACKPLANE_BUILD_TESTS=OFF", f"-DBACKPLANE_PYTHON={sys.executable}",
                                   *shlex.split(os.environ.get("BACKPLANE_CMAKE_ARGS", ""))])
            subprocess.check_call(["cmake", "--build", build_dir, "-j", jobs])

        staging = os.path.abspath(os.path.join(self.build_temp, "staging"))
        shutil.rmtree(staging, ignore_errors=True)
        subprocess.check_call(["cmake", "--install", build_dir, "--prefix", staging])
        modules = glob.glob(os.path.join(staging, "**", "backplane", "_backplane*.so"), recursive=True)
        if len(modules) != 1:
            raise SystemExit(f"expected one installed extension module in {staging}, found {modules}")
        package_src = os.path.dirname(modules[0])

        target = os.path.abspath(self.get_ext_fullpath(ext.name))
        package_dst = os.path.dirname(target)
        shutil.rmtree(package_dst, ignore_errors=True)
        os.makedirs(package_dst)
        for name in os.listdir(package_src):
            shutil.copy2(os.path.join(package_src, name), package_dst)
        if os.path.basename(modules[0]) != os.path.basename(target):
            os.replace(os.path.join(package_dst, os.path.basename(modules[0])), target)

        # The runtime library under its SONAME (a wheel holds no symlinks), and
        # the backends beside it.
        lib_src = os.path.dirname(os.path.realpath(glob.glob(os.path.join(staging, "lib*", "libbackplane.so"))[0]))
        lib_dst = os.path.join(package_dst, "lib")
        os.makedirs(lib_dst)
        soname = subprocess.check_output(["readelf", "-d", os.path.join(lib_src, "libbackplane.so")], text=True)
        soname = soname.split("Library soname: [")[1].split("]")[0]
        shutil.copy2(os.path.join(lib_src, "libbackplane.so"), os.path.join(lib_dst, soname))
        shutil.copytree(os.path.join(lib_src, "backplane"), os.path.join(lib_dst, "backplane"), symlinks=False)


setup(
    packages=[],
    py_modules=[],
    ext_modules=[Extension("backplane._backplane", sources=[])],
    cmdclass={"build_ext": CMakeBuild},
    # Away from the CMake build's own build/lib.
    options={"build": {"build_base": os.path.join("build", "python-wheel")},
             "egg_info": {"egg_base": os.path.join("build", "python-wheel")}},
    zip_safe=False,
)
