#!/usr/bin/env python3
"""Prints the build targets that the tests selected by a ctest label regex run.

    ci_targets.py BUILD_DIR LABEL_REGEX

BUILD_DIR must have been configured with a CMake file-API codemodel query
(.cmake/api/v1/query/codemodel-v2, which .ci/run creates before configuring).
A test needs a target when its command line names a file that target builds
(the test binary itself, or e.g. the CLI a shell test drives); what that
target depends on (backend modules, tools) is then built with it. So a new
test binary joins a sanitizer run by its ctest label alone.
"""
import glob
import json
import os
import re
import subprocess
import sys


def artifacts_by_path(build_dir):
    """Maps each built file's absolute path to the name of its target."""
    reply = os.path.join(build_dir, ".cmake", "api", "v1", "reply")
    indexes = sorted(glob.glob(os.path.join(reply, "index-*.json")))
    if not indexes:
        sys.exit(f"ci_targets: no CMake file-API reply in {reply}: configure with the query first")
    index = json.load(open(indexes[-1]))
    codemodel = next(r for r in index["reply"].values()
                     if isinstance(r, dict) and r.get("kind") == "codemodel")
    model = json.load(open(os.path.join(reply, codemodel["jsonFile"])))
    paths = {}
    for config in model["configurations"]:
        for ref in config["targets"]:
            target = json.load(open(os.path.join(reply, ref["jsonFile"])))
            for artifact in target.get("artifacts", []):
                path = os.path.normpath(os.path.join(build_dir, artifact["path"]))
                paths[path] = target["name"]
    return paths


def test_commands(build_dir):
    """Maps each test's name to its command line, read from the CTestTestfile.cmake files
    (ctest itself omits the command of a test whose executable is not built yet)."""
    add_test = re.compile(r'^add_test\(\[=\[(.*?)\]=\]((?: "(?:[^"\\]|\\.)*")*)\)$')
    commands = {}
    for dirpath, _, files in os.walk(build_dir):
        if "CTestTestfile.cmake" not in files:
            continue
        for line in open(os.path.join(dirpath, "CTestTestfile.cmake")):
            match = add_test.match(line.strip())
            if match:
                words = re.findall(r'"((?:[^"\\]|\\.)*)"', match.group(2))
                commands[match.group(1)] = [w.replace('\\"', '"') for w in words]
    return commands


def main():
    if len(sys.argv) != 3:
        sys.exit(__doc__)
    build_dir, labels = os.path.abspath(sys.argv[1]), sys.argv[2]
    listing = subprocess.run(["ctest", "--show-only=json-v1", "-L", labels], cwd=build_dir,
                             capture_output=True, text=True, check=True).stdout
    tests = json.loads(listing)["tests"]
    if not tests:
        sys.exit(f"ci_targets: no test in {build_dir} has a label matching '{labels}'")
    paths = artifacts_by_path(build_dir)
    commands = test_commands(build_dir)
    targets = set()
    for test in tests:
        for word in commands.get(test["name"], []):
            target = paths.get(os.path.normpath(word))
            if target:
                targets.add(target)
    print("\n".join(sorted(targets)))


if __name__ == "__main__":
    main()
