#!/usr/bin/env python3
"""Build Drape's extension zips, one per platform, with Blender's own tooling.

    make extension                                   # all four platforms -> dist/
    .venv/bin/python tools/build_extension.py --platform linux-x64 --output-dir /tmp/x
    .venv/bin/python tools/build_extension.py --update-manifest   # after bumping a pin

Steps:
1. numba + llvmlite wheels for every selected platform and both Python ABIs
   Blender uses (cp311: Blender 4.2-5.0, cp313: Blender 5.1+) are fetched with
   ``pip download --no-deps --only-binary=:all:`` into ./wheels (a cache: a wheel
   already there is not downloaded again; never committed).
2. The wheels that pip picked must be exactly the ones ``blender_manifest.toml``
   lists in ``wheels = [...]``; a mismatch stops the build and says what to list.
3. The working tree (dirty or not) is copied to a staging folder with a manifest
   that names only the selected platforms and their wheels, and Blender's
   builder makes the zips: ``blender --command extension build --split-platforms``
   when BLENDER is set, else ``blender_ext.py build --split-platforms`` from the
   venv's bpy wheel, else a ``blender`` on PATH.
4. Every zip is checked with Blender's validator (``extension validate``).

Every expected failure ends in one line on stderr that says why (exit status 1).
"""

from __future__ import annotations

import argparse
import concurrent.futures
import importlib.util
import os
import pathlib
import re
import shutil
import subprocess
import sys
import tempfile
import tomllib
import zipfile

ROOT = pathlib.Path(__file__).resolve().parent.parent
MANIFEST = ROOT / "blender_manifest.toml"
WHEEL_DIR = ROOT / "wheels"
PACKAGES = ("numba", "llvmlite")

# Python versions of the Blender releases we support (blender_version_min 4.2).
PYTHONS = ("3.11", "3.13")

# Blender platform -> the newest wheel platform tags its Blender builds can load
# (pip also accepts older manylinux / macOS tags below these). Blender's Linux
# builds need glibc 2.28; its macOS builds start at macOS 11.2, but numba 0.68's
# arm64 wheels need macOS 12.
PLATFORMS = {
    "linux-x64": ("manylinux2014_x86_64", "manylinux_2_28_x86_64"),
    "windows-x64": ("win_amd64",),
    "macos-arm64": ("macosx_12_0_arm64",),
    "macos-x64": ("macosx_11_0_x86_64",),
}

# numba stopped publishing Intel-macOS wheels after 0.62 (0.63+ have none), so
# macos-x64 keeps the last release that has them. numba 0.62 accepts numpy
# 1.22-2.3, which covers the numpy of every Blender from 4.2 to 5.1.
PIN_OVERRIDES = {
    "macos-x64": {"numba": "0.62.1", "llvmlite": "0.45.1"},
}


class BuildError(Exception):
    """An expected failure: the message is the one line the user sees."""


# --------------------------------------------------------------------------- pins


def read_pins() -> dict[str, str]:
    """numba/llvmlite versions from requirements-dev.txt: the venv and the zips agree."""
    pins = {}
    for line in (ROOT / "requirements-dev.txt").read_text().splitlines():
        m = re.match(r"\s*(numba|llvmlite)\s*==\s*([^\s#;]+)", line)
        if m:
            pins[m.group(1)] = m.group(2)
    missing = [p for p in PACKAGES if p not in pins]
    if missing:
        raise BuildError(f"requirements-dev.txt pins no version for {', '.join(missing)} (need 'name==version').")
    return pins


def pins_for(platform: str, pins: dict[str, str]) -> dict[str, str]:
    return {**pins, **PIN_OVERRIDES.get(platform, {})}


# ------------------------------------------------------------------ wheel names


def parse_wheel(filename: str) -> tuple[str, str, str, str, str]:
    """(distribution, version, python tag, abi tag, platform tag) of a wheel file name."""
    parts = pathlib.PurePosixPath(filename).name[: -len(".whl")].split("-")
    if len(parts) == 6:  # with a build tag
        del parts[2]
    if len(parts) != 5:
        raise BuildError(f"'{filename}' is not a wheel file name (name-version-python-abi-platform.whl).")
    return tuple(parts)  # type: ignore[return-value]


def blender_platforms_of(platform_tag: str) -> set[str]:
    """Blender platforms a (possibly compound, dot separated) wheel platform tag runs on."""
    result = set()
    for tag in platform_tag.split("."):
        if tag == "any":
            result.update(PLATFORMS)
        elif tag.startswith(("manylinux", "musllinux", "linux")) and tag.endswith("x86_64"):
            result.add("linux-x64")
        elif tag == "win_amd64":
            result.add("windows-x64")
        elif tag.startswith("macosx_") and tag.endswith(("_arm64", "_universal2")):
            result.add("macos-arm64")
        if tag.startswith("macosx_") and tag.endswith(("_x86_64", "_universal2", "_intel")):
            result.add("macos-x64")
    return result


def wheel_key(filename: str) -> set[tuple[str, str]]:
    """{(blender platform, python 'X.Y')} a wheel serves."""
    _, _, py_tag, _, plat_tag = parse_wheel(filename)
    pythons = {f"{t[2]}.{t[3:]}" for t in py_tag.split(".") if re.fullmatch(r"cp3\d+", t)}
    return {(p, v) for p in blender_platforms_of(plat_tag) for v in pythons}


def manifest_wheels() -> list[str]:
    data = tomllib.loads(MANIFEST.read_text())
    return list(data.get("wheels", []))


def expected_manifest_entries(manifest: list[str], platform: str, python: str) -> list[str]:
    return sorted(w for w in manifest if (platform, python) in wheel_key(w))


def check_manifest_pins(manifest: list[str], platform: str, python: str, pins: dict[str, str]) -> list[str]:
    """The manifest's wheels for (platform, python): exactly one per package, at its pin."""
    entries = expected_manifest_entries(manifest, platform, python)
    got = sorted((parse_wheel(w)[0].lower(), parse_wheel(w)[1]) for w in entries)
    want = sorted(pins_for(platform, pins).items())
    if got != want:
        want_txt = ", ".join(f"{n}=={v}" for n, v in want)
        got_txt = ", ".join(entries) or "nothing"
        raise BuildError(
            f"blender_manifest.toml 'wheels' for {platform} / Python {python} list {got_txt}, "
            f"but the pins are {want_txt}; run 'tools/build_extension.py --update-manifest'."
        )
    return entries


# -------------------------------------------------------------------- download


def pip_download(platform: str, python: str, pins: dict[str, str], log_dir: pathlib.Path) -> list[str]:
    """Download the pinned wheels for one platform/ABI into ./wheels; return their names."""
    abi = "cp" + python.replace(".", "")
    want = pins_for(platform, pins)
    log = log_dir / f"pip-{platform}-{abi}.log"
    with tempfile.TemporaryDirectory(prefix=".download-", dir=WHEEL_DIR) as tmp:
        cmd = [
            sys.executable, "-m", "pip", "download", "--disable-pip-version-check", "--no-deps",
            "--only-binary=:all:", "--python-version", python, "--implementation", "cp", "--abi", abi,
            *[a for tag in PLATFORMS[platform] for a in ("--platform", tag)],
            "--dest", tmp, *[f"{n}=={v}" for n, v in want.items()],
        ]
        proc = subprocess.run(cmd, capture_output=True, text=True)
        log.write_text(" ".join(cmd) + "\n\n" + proc.stdout + proc.stderr)
        if proc.returncode != 0:
            out = proc.stdout + proc.stderr
            reqs = " ".join(f"{n}=={v}" for n, v in want.items())
            if re.search(r"connection|resolve|network|timed out|temporary failure|ssl", out, re.I):
                raise BuildError(
                    f"could not download {reqs} for {platform} / Python {python} from the package registry "
                    f"(no network?); details in {log.relative_to(ROOT)}."
                )
            if "from versions: none" in out:
                raise BuildError(
                    f"the package registry offered no version of {reqs.split('==')[0]} at all while fetching wheels "
                    f"for {platform} / Python {python} (no network?); details in {log.relative_to(ROOT)}."
                )
            raise BuildError(
                f"pip found no wheel of {reqs} for {platform} / Python {python} (not published for it?); "
                f"details in {log.relative_to(ROOT)}."
            )
        names = sorted(p.name for p in pathlib.Path(tmp).glob("*.whl"))
        for name in names:  # rename is atomic: a concurrent build never sees half a wheel
            os.replace(pathlib.Path(tmp) / name, WHEEL_DIR / name)
    return names


def fetch_wheels(platforms: list[str], pins: dict[str, str], manifest: list[str], refresh: bool,
                 check_manifest: bool = True) -> dict[tuple[str, str], list[str]]:
    """Make sure ./wheels holds the wheels for every (platform, python); return the names.

    With check_manifest, what pip picks must equal what the manifest lists.
    """
    WHEEL_DIR.mkdir(exist_ok=True)
    log_dir = WHEEL_DIR / "logs"
    log_dir.mkdir(exist_ok=True)
    jobs = {}
    result = {}
    for platform in platforms:
        for python in PYTHONS:
            if check_manifest:
                entries = check_manifest_pins(manifest, platform, python, pins)
                # A wheel that is not a readable zip (an interrupted copy) is fetched again.
                cached = all((ROOT / e).is_file() and zipfile.is_zipfile(ROOT / e) for e in entries)
                if cached and not refresh:
                    result[(platform, python)] = [pathlib.PurePosixPath(e).name for e in entries]
                    continue
            jobs[(platform, python)] = None
    if jobs:
        print(f"drape: downloading numba + llvmlite wheels for {len(jobs)} platform/Python pairs into wheels/ ...",
              flush=True)
        with concurrent.futures.ThreadPoolExecutor(max_workers=4) as pool:
            futures = {key: pool.submit(pip_download, key[0], key[1], pins, log_dir) for key in jobs}
            for key, fut in futures.items():
                result[key] = fut.result()
    if check_manifest:
        for (platform, python), names in sorted(result.items()):
            listed = sorted(pathlib.PurePosixPath(e).name for e in expected_manifest_entries(manifest, platform, python))
            if names != listed:
                raise BuildError(
                    f"pip picked {', '.join(names)} for {platform} / Python {python} but blender_manifest.toml "
                    f"lists {', '.join(listed) or 'nothing'}; run 'tools/build_extension.py --update-manifest'."
                )
    return result


def update_manifest(pins: dict[str, str], refresh: bool) -> None:
    found = fetch_wheels(list(PLATFORMS), pins, [], refresh, check_manifest=False)
    lines = []
    for platform in PLATFORMS:
        for python in PYTHONS:
            lines += [f'  "./wheels/{name}",' for name in found[(platform, python)]]
    text = MANIFEST.read_text()
    new, n = re.subn(r"(?ms)^wheels\s*=\s*\[.*?^\]", "wheels = [\n" + "\n".join(lines) + "\n]", text)
    if n != 1:
        raise BuildError("blender_manifest.toml has no 'wheels = [' ... ']' block (closing ']' on its own line).")
    MANIFEST.write_text(new)
    print(f"drape: blender_manifest.toml now lists {len(lines)} wheels.")


# ----------------------------------------------------------------------- build


def find_builder(blender: str | None) -> list[str]:
    """Command prefix that runs Blender's extension tool (build/validate sub-commands follow)."""
    if blender:
        if not shutil.which(blender):
            raise BuildError(f"BLENDER={blender} is not an executable.")
        return [blender, "--command", "extension"]
    spec = importlib.util.find_spec("bpy")
    if spec and spec.submodule_search_locations:
        for base in spec.submodule_search_locations:
            tools = sorted(pathlib.Path(base).glob("*/scripts/addons_core/bl_pkg/cli/blender_ext.py"))
            if tools:
                return [sys.executable, str(tools[-1])]
    on_path = shutil.which("blender")
    if on_path:
        return [on_path, "--command", "extension"]
    raise BuildError(
        "no Blender extension builder: run with the venv's Python (make extension), set BLENDER=/path/to/blender, "
        "or put blender on PATH."
    )


def stage_tree(stage: pathlib.Path, platforms: list[str], wheels: list[str]) -> None:
    """Copy the working tree as it is (uncommitted edits included) with a manifest for `platforms`.

    Heavy local state is skipped; Blender's builder applies the manifest's
    [build] paths_exclude_pattern to the rest, exactly as on the real tree.
    """
    skip_top = {".git", ".venv", "dist", "wheels", "out", ".pytest_cache"}

    def ignore(directory, names):
        top = pathlib.Path(directory) == ROOT
        return [n for n in names if top and n in skip_top]

    shutil.copytree(ROOT, stage, symlinks=True, ignore=ignore)
    text = MANIFEST.read_text()
    if set(platforms) != set(PLATFORMS):
        text = re.sub(r"(?m)^platforms\s*=\s*\[.*?\]", "platforms = [" + ", ".join(f'"{p}"' for p in platforms) + "]",
                      text)
        lines = "\n".join(f'  "{w}",' for w in wheels)
        text = re.sub(r"(?ms)^wheels\s*=\s*\[.*?^\]", "wheels = [\n" + lines + "\n]", text)
    (stage / "blender_manifest.toml").write_text(text)
    (stage / "wheels").mkdir()
    for w in wheels:
        name = pathlib.PurePosixPath(w).name
        try:
            os.link(WHEEL_DIR / name, stage / "wheels" / name)
        except OSError:
            os.symlink(WHEEL_DIR / name, stage / "wheels" / name)


def run_tool(cmd: list[str], what: str) -> str:
    proc = subprocess.run(cmd, capture_output=True, text=True)
    out = (proc.stdout + proc.stderr).strip()
    if proc.returncode != 0 or "FATAL_ERROR" in out or "\nError" in out:
        last = [line for line in out.splitlines() if line.strip()][-3:]
        raise BuildError(f"{what} failed: {' | '.join(last) or 'exit status %d' % proc.returncode}")
    return out


def build(platforms: list[str], output_dir: pathlib.Path, wheels: list[str], builder: list[str]) -> list[pathlib.Path]:
    output_dir.mkdir(parents=True, exist_ok=True)
    data = tomllib.loads(MANIFEST.read_text())
    with tempfile.TemporaryDirectory(prefix="drape-stage-") as tmp:
        stage = pathlib.Path(tmp) / "drape"
        stage_tree(stage, platforms, wheels)
        with tempfile.TemporaryDirectory(prefix=".build-", dir=output_dir) as out_tmp:
            run_tool([*builder, "build", "--split-platforms", "--source-dir", str(stage), "--output-dir", out_tmp],
                     "Blender's extension build")
            zips = []
            for platform in platforms:
                name = f"{data['id']}-{data['version']}-{platform.replace('-', '_')}.zip"
                built = pathlib.Path(out_tmp) / name
                if not built.is_file():
                    raise BuildError(f"Blender's builder made no {name}; got {sorted(os.listdir(out_tmp))}.")
                run_tool([*builder, "validate", str(built)], f"Blender's validator on {name}")
                check_zip(built, platform, wheels)
                os.replace(built, output_dir / name)
                zips.append(output_dir / name)
    return zips


def check_zip(path: pathlib.Path, platform: str, wheels: list[str]) -> None:
    """The zip carries exactly this platform's wheels, and its manifest lists them."""
    with zipfile.ZipFile(path) as zf:
        names = zf.namelist()
        manifest = tomllib.loads(zf.read("blender_manifest.toml").decode())
    want = sorted(w.removeprefix("./") for w in wheels if any(p == platform for p, _ in wheel_key(w)))
    have = sorted(n for n in names if n.endswith(".whl"))
    # Split builds keep the source list and put this platform's in [build.generated],
    # which is what Blender reads on install.
    generated = manifest.get("build", {}).get("generated", {})
    listed = sorted(w.removeprefix("./") for w in generated.get("wheels", manifest.get("wheels", [])))
    if have != want or listed != want:
        raise BuildError(f"{path.name} carries wheels {have} and lists {listed}, expected {want}.")


# ------------------------------------------------------------------------ main


def main(argv: list[str] | None = None) -> int:
    parser = argparse.ArgumentParser(description=__doc__.split("\n\n")[0])
    parser.add_argument("--platform", action="append", choices=list(PLATFORMS),
                        help="build only this platform (repeatable); default: all four")
    parser.add_argument("--output-dir", type=pathlib.Path, default=ROOT / "dist")
    parser.add_argument("--blender", default=os.environ.get("BLENDER") or None,
                        help="a Blender 4.2+ executable to build with (default: $BLENDER, else the venv's bpy tool)")
    parser.add_argument("--refresh", action="store_true", help="download the wheels again even if cached")
    parser.add_argument("--update-manifest", action="store_true",
                        help="download the pinned wheels for all platforms and write them into the manifest")
    args = parser.parse_args(argv)
    try:
        pins = read_pins()
        if args.update_manifest:
            update_manifest(pins, args.refresh)
            return 0
        platforms = [p for p in PLATFORMS if p in (args.platform or PLATFORMS)]
        manifest = manifest_wheels()
        declared = tomllib.loads(MANIFEST.read_text()).get("platforms", [])
        unknown = [p for p in platforms if p not in declared]
        if unknown:
            raise BuildError(f"blender_manifest.toml 'platforms' does not declare {', '.join(unknown)}.")
        builder = find_builder(args.blender)
        fetch_wheels(platforms, pins, manifest, args.refresh)
        wheels = sorted(w for w in manifest if any(p in platforms for p, _ in wheel_key(w)))
        zips = build(platforms, args.output_dir.resolve(), wheels, builder)
    except BuildError as err:
        print(f"drape: {err}", file=sys.stderr)
        return 1
    for z in zips:
        print(f"drape: built and validated {z} ({z.stat().st_size / 1e6:.1f} MB)")
    return 0


if __name__ == "__main__":
    sys.exit(main())
