#!/usr/bin/python3
"""Runs the walkthrough of docs/writing-a-backend.md as written, from an empty HOME.

Every ```sh block of the guide is run, in order, in one bash session (so `cd`
and `export` carry over from block to block), with HOME a fresh temporary
directory, PATH the system's, and no BACKPLANE_* or PKG_CONFIG_PATH from the
caller. The one precondition the guide states, "your checkout of Backplane,
built in build/", is set up as $HOME/src/backplane: links to the source
tree's entries, and `build` linked to the build under test. So the guide's
`make -C "$BACKPLANE_SRC" demo` runs too, as written: the Makefile resolves
the links (its own and build/'s), so it reconfigures and rebuilds the build
under test in place (nothing to compile: the build is current) and runs the
demo. Should the build under test not be the Release build that target makes,
that block is skipped, saying so (it would rebuild the tree under test). A
block preceded by `<!-- guide-test: skip: REASON -->` is not run.

A ```text block right after a ```sh block is that block's output (stdout and
stderr, the home directory shown as /home/me). The test compares them with
every number masked (timings, addresses, sizes vary from run to run) and fails
on any other difference. A block whose expected output has a line starting
with `error: ` must exit with status 1; any other block must succeed.

--update rewrites those text blocks with this run's output instead: the
guide's sample outputs are generated, never typed.
"""
import argparse
import os
import re
import shutil
import subprocess
import sys
import tempfile

FENCE = re.compile(r"^```(\w*)\s*$")
SKIP = re.compile(r"^<!-- guide-test: skip: (.+) -->\s*$")


def parse(lines):
    """Returns [(sh_start, sh_end, text_start, text_end or None, skip)] line ranges (content only)."""
    blocks, i = [], 0
    fenced = []  # (lang, start, end, skip) of content lines
    pending_skip = False
    while i < len(lines):
        m = FENCE.match(lines[i])
        if m and m.group(1) in ("sh", "text", "cmake", "cpp", "c", ""):
            lang, start = m.group(1), i + 1
            j = start
            while j < len(lines) and not lines[j].startswith("```"):
                j += 1
            fenced.append((lang, start, j, pending_skip, i))
            pending_skip = False
            i = j + 1
            continue
        if SKIP.match(lines[i]):
            pending_skip = True
        elif lines[i].strip():
            pending_skip = False
        i += 1
    for k, (lang, start, end, skip, opening) in enumerate(fenced):
        if lang != "sh":
            continue
        text = None
        if k + 1 < len(fenced) and fenced[k + 1][0] == "text":
            nxt = fenced[k + 1]
            between = lines[end + 1:nxt[4]]
            if all(not ln.strip() for ln in between):
                text = (nxt[1], nxt[2])
        blocks.append((start, end, text, skip))
    return blocks


def mask(text):
    # Addresses (nm), not the digits after a decimal point: 1.6699600000000001
    # (a time printed with 17 digits) is one number.
    text = re.sub(r"(?<![.\d])\b[0-9a-f]{8,16}\b", "#", text)
    text = re.sub(r"\d+(\.\d+)?([eE][-+]?\d+)?", "#", text)
    return [ln.rstrip() for ln in text.strip("\n").splitlines()]


def main():
    ap = argparse.ArgumentParser()
    ap.add_argument("--guide", required=True)
    ap.add_argument("--source-dir", required=True)
    ap.add_argument("--build-dir", required=True)
    ap.add_argument("--update", action="store_true", help="rewrite the guide's sample outputs")
    ap.add_argument("--keep", action="store_true", help="keep the temporary HOME")
    args = ap.parse_args()

    lines = open(args.guide).read().split("\n")
    blocks = parse(lines)
    build_type = ""
    cache = os.path.join(args.build_dir, "CMakeCache.txt")
    if os.path.exists(cache):
        for ln in open(cache):
            if ln.startswith("CMAKE_BUILD_TYPE:"):
                build_type = ln.split("=", 1)[1].strip()
    if build_type != "Release":
        for k, (start, end, text, skip) in enumerate(blocks):
            if any(ln.startswith("make -C ") for ln in lines[start:end]):
                print(f"skip block at line {start}: the build under test is a '{build_type}' build, "
                      "which `make demo` would reconfigure as Release")
                blocks[k] = (start, end, text, True)
    home = os.path.realpath(tempfile.mkdtemp(prefix="backplane_guide_"))
    try:
        checkout = os.path.join(home, "src", "backplane")
        os.makedirs(checkout)
        source = os.path.realpath(args.source_dir)
        for entry in os.listdir(source):
            if entry != "build" and not entry.startswith("."):
                os.symlink(os.path.join(source, entry), os.path.join(checkout, entry))
        os.symlink(os.path.realpath(args.build_dir), os.path.join(checkout, "build"))

        outdir = os.path.join(home, ".guide_test")
        os.makedirs(outdir)
        script = ["cd \"$HOME\""]
        runnable = []
        for n, (start, end, text, skip) in enumerate(blocks):
            if skip:
                continue
            body = "\n".join(lines[start:end])
            path = os.path.join(outdir, f"block{n}.sh")
            with open(path, "w") as f:
                f.write(body + "\n")
            expect_error = text is not None and any(
                ln.startswith("error: ") for ln in lines[text[0]:text[1]])
            out = os.path.join(outdir, f"block{n}.out")
            status = os.path.join(outdir, f"block{n}.status")
            # Each block sourced into the one shell; stop at the first
            # unexpected status (the block's last command's).
            script.append(f"source '{path}' > '{out}' 2>&1; echo $? > '{status}'")
            script.append(f"[ \"$(cat '{status}')\" = {1 if expect_error else 0} ] || exit 100")
            runnable.append((n, start, end, text, out, status, expect_error))
        env = {"HOME": home, "PATH": "/usr/local/bin:/usr/bin:/bin", "LANG": "C.UTF-8",
               "TMPDIR": os.environ.get("TMPDIR", "/tmp")}
        p = subprocess.run(["bash", "-c", "\n".join(script)], env=env, cwd=home)

        failures = []
        replacements = []
        for n, start, end, text, out, status, expect_error in runnable:
            if not os.path.exists(status):
                break
            got = open(out, errors="replace").read().replace(home, "/home/me")
            code = int(open(status).read().strip() or "-1")
            first = lines[start]
            if code != (1 if expect_error else 0):
                failures.append(f"block at line {start} ({first}) exited with {code}:\n{got}")
                break
            if text is None:
                continue
            want = "\n".join(lines[text[0]:text[1]])
            if args.update:
                replacements.append((text, got.rstrip("\n").split("\n")))
            elif mask(want) != mask(got):
                failures.append(f"block at line {start} ({first}): output differs\n--- guide\n{want}\n--- got\n{got}")
            else:
                print(f"ok   block at line {start}: {first}")
        if p.returncode not in (0, 100) and not failures:
            failures.append(f"the walkthrough's shell exited with {p.returncode}")

        if args.update and not failures:
            for (a, b), new in sorted(replacements, reverse=True):
                lines[a:b] = new
            with open(args.guide, "w") as f:
                f.write("\n".join(lines))
            print(f"rewrote {len(replacements)} sample output(s) in {args.guide}")
        for f in failures:
            print("FAIL " + f)
        if not failures:
            print(f"all {len(runnable)} blocks of {args.guide} ran as written")
        return 1 if failures else 0
    finally:
        if args.keep:
            print("HOME kept at " + home)
        else:
            shutil.rmtree(home, ignore_errors=True)


if __name__ == "__main__":
    sys.exit(main())
