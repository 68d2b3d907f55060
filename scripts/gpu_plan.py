"""One command per step of `../shared/GPU_PLAN.md`, each resumable and each under 10 minutes on one H100.

    .venv/bin/python scripts/gpu_plan.py bundle         # here, with PyPI: the wheels the GPU image lacks, in .whl/
    .venv/bin/python scripts/gpu_plan.py pack --suite examples/suites/bible6.yaml   # here: its shared data, into .whl/
    .venv/bin/python scripts/gpu_plan.py pack --cache OUT/inductor-cache.tar.xz     # here: a GPU's warm compile cache
    python3 scripts/gpu_plan.py tests   --out $OUT      # step 1: the device-aware tests on cuda
    python3 scripts/gpu_plan.py fsdp    --out $OUT      # step 2: accelerate's FSDP plugin applies, trains, saves
    python3 scripts/gpu_plan.py profile --out $OUT      # the training loop as runs use it (bench_loop), per step
    python3 scripts/gpu_plan.py processes --out $OUT    # 1, 2, 4, 8 runs side by side on the GPU: do they add up?
    python3 scripts/gpu_plan.py static  --out $OUT      # issue 57: the static loop, cold and warm compile (~6 min)
    python3 scripts/gpu_plan.py graph   --out $OUT      # issue 57: the recorded whole step's device tests, then its speed
    python3 scripts/gpu_plan.py decoding --out $OUT     # beam search: static cache, eager and CUDA graphs
    python3 scripts/gpu_plan.py speed   --out $OUT      # step 3: bench_methods at Transformer-base in bf16
    python3 scripts/gpu_plan.py compile --out $OUT      # step 3b: torch.compile against eager (bench_compile)
    python3 scripts/gpu_plan.py routing --out $OUT      # step 3c: each language-routing strategy, 50 languages
    python3 scripts/gpu_plan.py curve   --out $OUT --suite examples/suites/bible11_gpu.yaml --max-steps 10000   # 4a
    python3 scripts/gpu_plan.py compare --out $OUT --suite examples/suites/bible11_gpu.yaml --workers 8   # step 4

On the GPU machine (`device` tool: carry `.whl`; about 6 MiB of wheels, 12 MiB per packed suite) every step but
`bundle` and `pack` first installs the bundle without network (`pip install --no-index --no-deps --target /tmp/site`)
unless the packages import already, and re-runs itself with them on the path. Each step prints its figures
and writes them under `--out` as a few files (a log, a JSON, one archive of a comparison's results), so they
come back and are committed. `--device cpu` runs the same code path on a CPU with a tiny budget, which is
how tests/test_gpu_plan.py checks every step here. Standard library only until the bundle is installed.
"""

from __future__ import annotations

import argparse
import contextlib
import json
import os
import shutil
import subprocess
import sys
import tarfile
import time
from pathlib import Path

ROOT = Path(__file__).resolve().parent.parent
BUNDLE = ROOT / ".whl"
SITE = Path("/tmp/site")
# what the GPU image lacks (its package list: /work/.library/device/KINDS.md), at the lock's versions; lingua's
# wheel (96 MB) does not fit the 64 MB a call carries, so off-target rates of GPU runs use what travels
MISSING = ["datasets", "dill", "multiprocess", "evaluate", "py3langid"]
PLATFORMS = ["manylinux_2_28_x86_64", "manylinux_2_27_x86_64", "manylinux_2_17_x86_64", "manylinux2014_x86_64"]
TINY_CONFIG = ROOT / "tests" / "fixtures" / "gpu_plan_tiny.yaml"


def run(command: list[str], log: Path | None = None, minutes: float | None = None, **kwargs) -> int:
    """Run a command with its output shown and, with `log`, appended to that file too; after `minutes` it is
    stopped with SIGTERM (a compare runner then stops its workers, whose runs resume from their checkpoints)."""
    import threading

    print("$ " + " ".join(map(str, command)), flush=True)
    # Python holds piped output back: a command stopped at the machine's limit would leave its log empty
    kwargs["env"] = {**kwargs.get("env", os.environ), "PYTHONUNBUFFERED": "1"}
    if log is None:
        return subprocess.run(command, **kwargs).returncode
    # line-buffered: a step stopped by the call's own `timeout` (SIGTERM) keeps every line it printed
    with log.open("a", buffering=1) as out:
        process = subprocess.Popen(command, stdout=subprocess.PIPE, stderr=subprocess.STDOUT, text=True, **kwargs)
        timer = threading.Timer(minutes * 60, process.terminate) if minutes else None
        if timer:
            timer.start()
        for line in process.stdout:
            out.write(line)  # the log first: it is what comes back of a stopped call
            sys.stdout.write(line)
        code = process.wait()
        if timer:
            timer.cancel()
        return code


def lock_versions() -> dict[str, str]:
    pins = {}
    for line in (ROOT / "requirements" / "lock.txt").read_text().splitlines():
        name, _, version = line.split("#", 1)[0].strip().partition("==")
        if version:
            pins[name.lower().replace("_", "-")] = version
    return pins


def bundle(args: argparse.Namespace) -> None:
    """Download the GPU image's missing wheels (CPython `--python-version`, x86-64); the package itself travels as
    the working tree and runs from it (PYTHONPATH)."""
    pins = lock_versions()
    BUNDLE.mkdir(exist_ok=True)
    for old in BUNDLE.glob("*.whl"):
        old.unlink()
    platforms = [arg for platform in PLATFORMS for arg in ("--platform", platform)]
    wanted = [f"{name}=={pins[name]}" for name in MISSING + ["ctranslate2"] * args.ct2]
    code = run([sys.executable, "-m", "pip", "download", "-q", "--no-deps", "--only-binary=:all:", "--python-version",
                args.python_version, "--implementation", "cp", *platforms, "-d", str(BUNDLE), *wanted])  # fmt: skip
    if code:
        raise SystemExit(f"bundle: pip failed (exit {code}); the wheels above are incomplete.")
    size = sum(p.stat().st_size for p in BUNDLE.glob("*.whl"))
    print(f"bundle: {len(list(BUNDLE.glob('*.whl')))} wheels, {size / 2**20:.1f} MiB in {BUNDLE} "
          f"(carry it: the `device` tool's carry=['.whl'])")  # fmt: skip


def pack(args: argparse.Namespace) -> None:
    """Prepare a suite's shared data here (the corpus is built on this machine) and put it into the bundle as one
    archive, which the compare step unpacks: a GPU machine then runs the suite without the corpus. With `--cache
    FILE` (an `inductor-cache.tar.xz` a GPU call brought back) the warm compile cache goes into the bundle too."""
    from hf_langspec.compare.shared import prepare_shared
    from hf_langspec.compare.suite import load_suite

    if getattr(args, "cache", None):  # a Namespace made in code may lack it
        BUNDLE.mkdir(exist_ok=True)
        shutil.copy(args.cache, BUNDLE / CACHE_ARCHIVE)
        print(f"pack: {args.cache} -> {BUNDLE / CACHE_ARCHIVE} (the next GPU machine compiles from it)")
        if not args.suite:
            return
    if not args.suite:
        raise SystemExit("pack needs --suite (and/or --cache).")
    suite = load_suite(args.suite)
    prepare_shared(suite)
    shared = suite.output_dir / "shared"
    BUNDLE.mkdir(exist_ok=True)
    archive = BUNDLE / f"{suite.name}-shared.tar.xz"
    with tarfile.open(archive.with_suffix(".tmp"), "w:xz") as tar:
        for path in [shared / "data.json", *sorted((shared / "data").glob("*.jsonl"))]:
            tar.add(path, arcname=str(path.relative_to(shared)))
    os.replace(archive.with_suffix(".tmp"), archive)
    print(f"pack: {archive} ({archive.stat().st_size / 2**20:.1f} MiB); commit {suite.results_dir}/tokenizer and "
          f"references.json.gz (the suite's vocabulary and test sets travel with the working tree)")  # fmt: skip


def unpack(suite_path: str, output_dir: str | None) -> None:
    """Unpack `<suite>-shared.tar.xz` of the bundle into the suite's output_dir/shared, unless it is there."""
    from hf_langspec.compare.suite import load_suite

    suite = load_suite(suite_path)
    shared = Path(output_dir) / "shared" if output_dir else suite.output_dir / "shared"
    archive = BUNDLE / f"{suite.name}-shared.tar.xz"
    if archive.exists() and not (shared / "data.json").exists():
        with tarfile.open(archive) as tar:
            tar.extractall(shared, filter="data")
        print(f"compare: the shared data of {suite.name} unpacked from {archive} into {shared}")


# inductor's caches (FX graphs, AOTAutograd, Triton kernels) travel between GPU machines: a step that compiles
# leaves them in OUT as one archive, `pack` puts that into the bundle, and the next machine starts from it
# (H200: bible11_gpu's 4 buckets compiled in 133.7 s cold and 14.1 s warm). Same torch and GPU architecture only
# (the H100 and the H200 are both sm_90); another machine's cache is only ever a miss, never a wrong kernel.
INDUCTOR_CACHE = Path("/tmp/hf-langspec-inductor")
CACHE_ARCHIVE = "inductor-cache.tar.xz"
CACHE_LIMIT = 15 * 2**20  # a file that comes back from the device machine is at most 16 MB


def restore_cache(cache: Path) -> None:
    """Unpack the bundle's inductor cache into `cache`, unless it already holds one."""
    archive = BUNDLE / CACHE_ARCHIVE
    if archive.exists() and not (cache.exists() and any(cache.iterdir())):
        with tarfile.open(archive) as tar:
            tar.extractall(cache, filter="data")
        print(f"inductor cache: {archive} unpacked into {cache}")


@contextlib.contextmanager
def travelling_cache(args: argparse.Namespace):
    """The environment a compiling step runs in: inductor's cache in TORCHINDUCTOR_CACHE_DIR (the user's, else
    INDUCTOR_CACHE), restored from the bundle before and left in OUT after (on a GPU; a CPU check carries none).
    Yields `(env, cache)`."""
    cache = Path(os.environ.get("TORCHINDUCTOR_CACHE_DIR", INDUCTOR_CACHE))
    if not args.tiny:
        restore_cache(cache)
    yield dict(os.environ, TORCHINDUCTOR_CACHE_DIR=str(cache)), cache
    if not args.tiny:
        save_cache(cache, args.out)


def save_cache(cache: Path, out: Path) -> None:
    """`cache` as `out/inductor-cache.tar.xz` (brought back, then `pack`ed for the next machine), if it fits."""
    if not cache.exists() or not any(cache.iterdir()):
        return
    archive = out / CACHE_ARCHIVE
    with tarfile.open(archive.with_suffix(".tmp"), "w:xz") as tar:
        tar.add(cache, arcname=".")
    os.replace(archive.with_suffix(".tmp"), archive)
    if archive.stat().st_size > CACHE_LIMIT:
        print(f"inductor cache: {archive.stat().st_size / 2**20:.1f} MiB is more than comes back; not kept")
        archive.unlink()


def ensure_installed() -> None:
    """Install the bundle into /tmp/site (no network, no dependency resolution) when the packages are missing,
    then re-run this command with it on PYTHONPATH; a no-op where they import (the CPU set-up)."""
    probe = "import datasets, evaluate, hf_langspec"
    if subprocess.run([sys.executable, "-c", probe], capture_output=True).returncode == 0:
        return
    if os.environ.get("GPU_PLAN_INSTALLED"):
        raise SystemExit(f"the bundle is installed in {SITE} but `{probe}` still fails; see the error above.")
    wheels = sorted(BUNDLE.glob("*.whl"))
    if not wheels:
        raise SystemExit(f"no wheels in {BUNDLE}: run `python3 scripts/gpu_plan.py bundle` on a machine with PyPI "
                         "and carry .whl to this one.")  # fmt: skip
    code = run([sys.executable, "-m", "pip", "install", "-q", "--no-index", "--no-deps", "--no-compile",
                "--no-cache-dir", "--upgrade", "--target", str(SITE), *map(str, wheels)])  # fmt: skip
    if code:
        raise SystemExit(f"installing the bundle failed (exit {code}).")
    # the working tree's package first (it travels with the command; no wheel of it can go stale), then the bundle
    env = dict(os.environ, GPU_PLAN_INSTALLED="1", PYTHONPATH=os.pathsep.join([str(ROOT), str(SITE)]),
               PATH=f"{SITE / 'bin'}{os.pathsep}{os.environ.get('PATH', '')}")  # fmt: skip
    os.execve(sys.executable, [sys.executable, *sys.argv], env)


def versions() -> dict[str, str]:
    import torch

    from hf_langspec.evaluation.expected import library_versions

    found = {"python": sys.version.split()[0], **library_versions()}
    found["device"] = torch.cuda.get_device_name(0) if torch.cuda.is_available() else "cpu"
    sys.path.insert(0, str(ROOT / "benchmarks"))
    from _report import commit  # the stamp BENCHMARKS.md sections get (BENCH_COMMIT, else HEAD)

    found["commit"] = commit()
    return found


def record(out: Path, step: str, result: dict) -> None:
    """Write `<out>/<step>.json` (what the step measured, with the machine) and print it."""
    result = {"step": step, **versions(), **result}
    (out / f"{step}.json").write_text(json.dumps(result, indent=1) + "\n")
    print(json.dumps(result, indent=1))


def tests(args: argparse.Namespace) -> int:
    """Step 1: `pytest -m device` on the device, with a JUnit report."""
    env = dict(os.environ, HF_LANGSPEC_TEST_DEVICE=args.device)
    start = time.time()
    tiny = ["-k", "baseline and not reloads"] if args.tiny else []  # the CPU check of this path: a few tests
    code = run([sys.executable, "-m", "pytest", "-m", "device", "-q", "-p", "no:cacheprovider",
                f"--junitxml={args.out / 'tests.xml'}", *tiny], log=args.out / "tests.log", env=env, cwd=ROOT)  # fmt: skip
    record(args.out, "tests", {"exit": code, "seconds": round(time.time() - start, 1)})
    return code


def fsdp(args: argparse.Namespace) -> int:
    """Step 2: a tiny training run under examples/accelerate/fsdp.yaml with one process; the model reloads."""
    run_dir = args.out / "fsdp-run"
    shutil.rmtree(run_dir, ignore_errors=True)
    overrides = [f"training.use_cpu={str(args.device == 'cpu').lower()}"]
    launch = [sys.executable, "-m", "accelerate.commands.launch", "--config_file",
              str(ROOT / "examples" / "accelerate" / "fsdp.yaml"), "--num_processes", "1",
              "--mixed_precision", "bf16" if args.device == "cuda" else "no"]  # fmt: skip
    start = time.time()
    code = run([*launch, str(ROOT / "examples" / "train_translation.py"), "--config", str(TINY_CONFIG),
                "--output-dir", str(run_dir), *[a for o in overrides for a in ("--set", o)]],
               log=args.out / "fsdp.log", cwd=ROOT)  # fmt: skip
    log = (args.out / "fsdp.log").read_text()
    result = {"exit": code, "seconds": round(time.time() - start, 1),
              "fsdp_applied": "applies FSDP only on GPUs" not in log, "reloads": False}  # fmt: skip
    if code == 0:
        from transformers import AutoModelForSeq2SeqLM

        import hf_langspec  # noqa: F401  (registers the Auto classes)

        model = AutoModelForSeq2SeqLM.from_pretrained(run_dir / "model")
        result["reloads"] = True
        result["parameters"] = sum(p.numel() for p in model.parameters())
    shutil.rmtree(run_dir, ignore_errors=True)  # the archive is the figures, not the tiny model
    record(args.out, "fsdp", result)
    return 0 if code == 0 and result["reloads"] else 1


def benchmark(args: argparse.Namespace, step: str, script: str, arguments: list[str], **figures) -> int:
    """Run a benchmarks/ script on the device; bring back the BENCHMARKS.md section it wrote (not in the CPU check)."""
    start = time.time()
    command = [sys.executable, str(ROOT / "benchmarks" / script), "--device", args.device, *arguments]
    code = run(command, log=args.out / f"{step}.log", cwd=ROOT)
    if code == 0 and not args.tiny:
        shutil.copy(ROOT / "BENCHMARKS.md", args.out / "BENCHMARKS.md")
    record(args.out, step, {"exit": code, "seconds": round(time.time() - start, 1), **figures})
    return code


def speed(args: argparse.Namespace) -> int:
    """Step 3: training and decoding speed of every method against the backbone and MarianMTModel."""
    if args.tiny:
        arguments = ["--shape", "tiny", "--languages", "2", "--steps", "1", "--generation-repeats", "1",
                     "--rounds", "1", "--new-tokens", "4", "--batch-size", "4", "--no-write"]  # fmt: skip
    else:
        arguments = ["--shape", "base", "--languages", "2,50", "--bf16"]
    return benchmark(args, "speed", "bench_methods.py", arguments, shape="tiny" if args.tiny else "base")


def profile(args: argparse.Namespace) -> int:
    """The training loop as runs use it (benchmarks/bench_loop.py): steps/s, host ops, kernel launches, GPU time
    and syncs per step, at bible11_gpu's model and at Transformer-base, baseline and two routed methods, as the
    suites run it and with the loader's settings changed; every figure also in profile-loop.json."""
    if args.tiny:
        arguments = ["--settings", "tiny", "--systems", args.systems or "baseline,fcll", "--batch-size", "8",
                     "--examples", "300", "--warmup", "1", "--steps", "2", "--profile-steps", "1",
                     "--census-steps", "1", "--no-write"]  # fmt: skip
    else:
        arguments = [*(["--systems", args.systems] if args.systems else []), *(["--loops", args.loops] if args.loops else []),
                     *(["--label", args.label] if args.label else [])]  # fmt: skip
    return benchmark(args, "profile", "bench_loop.py", [*arguments, "--json", str(args.out / "profile-loop.json")])


def processes(args: argparse.Namespace) -> int:
    """Several runs on one GPU (issue 47, item 4): 1, 2, 4 and 8 processes of the Trainer loop side by side, as
    `compare --workers N` runs a suite's seeds; each one's steps/s and their sum against one alone."""
    if args.tiny:
        arguments = ["--settings", "tiny", "--processes", "1,2", "--batch-size", "8", "--examples", "300",
                     "--warmup", "1", "--steps", "2", "--profile-steps", "1", "--census-steps", "1", "--no-write"]  # fmt: skip
    else:
        arguments = ["--settings", "bible11_gpu", "--processes", args.counts,
                     *(["--label", args.label] if args.label else [])]  # fmt: skip
    arguments += [
        "--systems",
        (args.systems or "baseline").split(",")[0],
        "--loops",
        (args.loops or "loader").split(",")[0],
    ]
    return benchmark(args, "processes", "bench_loop.py", [*arguments, "--json", str(args.out / "processes-loop.json")])


# issue 57's measurement, in the order of what it settles (a stopped call keeps the parts before): the whole step
# recorded (cuda_graph_step) and the static loop against eager on the same machine at bible11_gpu's model, the
# same compilation from the warm cache, Transformer-base at ~4k and ~32k target tokens, and last the routed methods
# (their compiles are the slowest). The first GPU call (c6a8db1) measured bible11_gpu, warm-cache and base.
STATIC_PARTS = [
    ("graph-step", ["--settings", "bible11_gpu", "--systems", "baseline", "--loops",
                    "loader,compiled graph step,graph step"]),
    ("bible11_gpu", ["--settings", "bible11_gpu", "--systems", "baseline", "--loops", "loader,static graphs"]),
    ("warm-cache", ["--settings", "bible11_gpu", "--systems", "baseline", "--loops", "static graphs"]),
    ("base", ["--settings", "base", "--systems", "baseline", "--loops", "loader,static graphs"]),
    ("base32k", ["--settings", "base32k", "--systems", "baseline", "--loops", "loader,static graphs"]),
    ("methods", ["--settings", "bible11_gpu", "--systems", "fcll,laa,sclm,xlp,ls_mnmt,lsl,lms,lms_fd", "--loops",
                 "static graphs", "--compiled-systems", "fcll,laa,sclm,xlp,ls_mnmt,lsl,lms,lms_fd"]),
]  # fmt: skip


def static(args: argparse.Namespace) -> int:
    """Issue 57: the static loop (static shapes, compiled once per bucket, CUDA graphs captured before the first
    step): steady-state steps/s over 300 steps against the eager `loader` loop, compile and capture seconds cold
    and from the warm inductor cache; each part's figures in static-<part>.json, written after every measurement,
    and every part stopped at `--minutes` after the step began (the call's limit)."""
    if args.tiny:
        loops = "graph step" if args.parts == "graph-step" else "loader,static,graph step"
        parts = [("tiny", ["--settings", "tiny", "--systems", "baseline", "--loops", loops, "--batch-size",
                           "8", "--examples", "300", "--warmup", "1", "--steps", "2", "--profile-steps", "1",
                           "--census-steps", "1", "--backend", "aot_eager", "--no-write"])]  # fmt: skip
    else:
        wanted = args.parts.split(",") if args.parts else [name for name, _ in STATIC_PARTS]
        parts = [(name, [*arguments, "--steps", "300", "--warmup", "20", "--no-throwaway", "--label", f"static-{name}"])
                 for name, arguments in STATIC_PARTS if name in wanted]  # fmt: skip
    codes, start = [], time.time()
    with travelling_cache(args) as (env, cache):
        for name, arguments in parts:
            left = args.minutes - (time.time() - start) / 60
            if left <= 0.5:
                break
            command = [sys.executable, str(ROOT / "benchmarks" / "bench_loop.py"), "--device", args.device,
                       *arguments, "--json", str(args.out / f"static-{name}.json")]  # fmt: skip
            codes.append(run(command, log=args.out / "static.log", minutes=left, cwd=ROOT, env=env))
            if not args.tiny and (ROOT / "BENCHMARKS.md").exists():
                shutil.copy(ROOT / "BENCHMARKS.md", args.out / "BENCHMARKS.md")
    done = [name for (name, _), code in zip(parts, codes, strict=False) if code == 0]
    record(args.out, "static", {"exit": max(codes, default=0), "seconds": round(time.time() - start, 1),
                                "finished_parts": done, "cache": str(cache)})  # fmt: skip
    return max(codes, default=0)


def graph(args: argparse.Namespace) -> int:
    """Issue 57's recorded whole step (`training.cuda_graph_step`), checked then measured in one call: its device
    tests (the recorded step against the eager one on CUDA, tests/test_graph_step.py), then, if they pass, the
    `graph-step` part of `static` (bible11_gpu's baseline: eager, recorded over compiled and over eager kernels)."""
    env = dict(os.environ, HF_LANGSPEC_TEST_DEVICE=args.device)
    # the CPU check of this path: two of the module's quick tests (the device ones skip without CUDA)
    selected = ["-k", "fused_adamw or warm_ups"] if args.tiny else ["-m", "device"]
    code = run([sys.executable, "-m", "pytest", "-q", "-p", "no:cacheprovider", "tests/test_graph_step.py",
                *selected], log=args.out / "graph.log", env=env, cwd=ROOT)  # fmt: skip
    if code != 0:
        record(args.out, "graph", {"exit": code, "tests_passed": False})
        return code
    args.parts = args.parts or "graph-step"
    code = static(args)
    measured = json.loads((args.out / "static.json").read_text())
    record(args.out, "graph", {"exit": code, "tests_passed": True, "finished_parts": measured["finished_parts"]})
    return code


def decoding(args: argparse.Namespace) -> int:
    """Beam search with a static cache, eager and compiled (CUDA graphs), against the growing cache, every model
    beside the backbone and MarianMTModel (benchmarks/bench_static_decoding.py)."""
    if args.tiny:
        arguments = ["--shape", "tiny", "--kinds", args.kinds or "baseline,marian", "--batch-size", "4",
                     "--new-tokens", "4", "--repeats", "1", "--no-write"]  # fmt: skip
    else:
        arguments = ["--shape", "base", "--bf16", "--vocab", "32000", *(["--kinds", args.kinds] if args.kinds else [])]
    return benchmark(args, "decoding", "bench_static_decoding.py", arguments)


def compile_speed(args: argparse.Namespace) -> int:
    """Step 3b: torch.compile against eager mode, training step of every model (benchmarks/bench_compile.py)."""
    if args.tiny:
        arguments = ["--shape", "tiny", "--kinds", args.kinds or "baseline,laa", "--steps", "2", "--batch-size", "4",
                     "--no-write"]  # fmt: skip
    else:
        arguments = ["--shape", "base", "--bf16", "--vocab", "32000", *(["--kinds", args.kinds] if args.kinds else [])]
    return benchmark(args, "compile", "bench_compile.py", arguments)


# the methods under 0.9x of the backbone on the first H100 (step 3), each routed every way LanguageRouter offers
ROUTED = ["cll", "ls_mnmt", "xlp", "laa", "adapter"]


def routing(args: argparse.Namespace) -> int:
    """Step 3c: bench_methods with each routing strategy forced (`KIND@STRATEGY`) beside auto's choice, at 50
    languages (22 targets in a batch of 32): the measurement `LanguageRouter.choose` should follow on a GPU."""
    kinds = ["cll", "cll@gather", "cll@group"] if args.tiny else [
        f"{kind}{suffix}" for kind in ROUTED for suffix in ("", "@gather", "@group")]  # fmt: skip
    if args.tiny:
        arguments = ["--shape", "tiny", "--languages", "4", "--steps", "1", "--generation-repeats", "1",
                     "--rounds", "1", "--new-tokens", "4", "--batch-size", "4", "--no-write"]  # fmt: skip
    else:
        arguments = ["--shape", "base", "--languages", "50", "--bf16"]
    return benchmark(args, "routing", "bench_methods.py", [*arguments, "--kinds", ",".join(kinds)])


def curve(args: argparse.Namespace) -> int:
    """Step 4a: a suite's budget by measurement (`hf-langspec curve`), stopped after `--minutes`; the run lives in
    /tmp/gpu-plan-curves (or --output-dir) so that the next call on a still-warm machine resumes it. What it reached
    comes back as the curve JSON, finished or partial (from the last complete checkpoint)."""
    from hf_langspec.compare.learning_curve import curve_file_name, partial_learning_curve
    from hf_langspec.compare.suite import load_suite
    from hf_langspec_cli.types import parse_target

    if not args.suite:
        raise SystemExit("curve needs --suite (examples/suites/bible11_gpu.yaml, ...).")
    suite = load_suite(args.suite)
    run_dir = Path(args.output_dir) if args.output_dir else Path("/tmp/gpu-plan-curves") / suite.name
    try:  # the CLI's parsing, before the run: a stopped run's partial curve needs the targets too
        wanted = dict(map(parse_target, args.target))
    except ValueError as error:
        raise SystemExit(str(error)) from None
    targets = [a for target in args.target for a in ("--target", target)]
    unpack(args.suite, None)
    start = time.time()
    code = run([sys.executable, "-m", "hf_langspec.cli", "curve", "--suite", args.suite, "--max-steps",
                str(args.max_steps), "--every", str(args.every), "--output-dir", str(run_dir), *targets],
               log=args.out / "curve.log", minutes=args.minutes, cwd=ROOT)  # fmt: skip
    seed = suite.seeds_of(suite.baseline)[0]
    curve_file = suite.results_dir / curve_file_name(suite.baseline, seed, args.every)  # written by either
    # finished: the command's curve; stopped (or failed): the points of its last complete checkpoint, if any yet
    result = (json.loads(curve_file.read_text()) if code == 0
              else partial_learning_curve(suite, args.max_steps, args.every, run_dir, targets=wanted))  # fmt: skip
    if result:
        shutil.copy(curve_file, args.out / curve_file.name)
    record(args.out, "curve", {"exit": code, "finished": code == 0, "suite": suite.name,
                               "seconds": round(time.time() - start, 1), "run_dir": str(run_dir),
                               "points": [[p["step"], p["groups"]] for p in (result or {}).get("points", [])]})  # fmt: skip
    return 0 if code in (0, -15) else code


def compare(args: argparse.Namespace) -> int:
    """Step 4: a suite's runs (resumed where a previous machine stopped), several side by side on the GPU;
    the results come back as one archive."""
    if not args.suite:
        raise SystemExit("compare needs --suite (examples/suites/bible6.yaml, examples/suites/bible11_gpu.yaml).")
    command = [sys.executable, "-m", "hf_langspec.cli", "compare", "--suite", args.suite, "--workers",
               str(args.workers), "--off-target-later", *(["--systems", args.systems] if args.systems else []),
               *(["--output-dir", args.output_dir] if args.output_dir else [])]  # fmt: skip
    unpack(args.suite, args.output_dir)
    start = time.time()
    # the suite runs as it is: a run trains on the GPU where one is present (suites leave training.use_cpu unset);
    # compiled runs share the cache that travels (a chosen TORCHINDUCTOR_CACHE_DIR wins over the suite's own)
    with travelling_cache(args) as (env, _):
        code = run(command, log=args.out / "compare.log", minutes=args.minutes, cwd=ROOT, env=env)
    from hf_langspec.compare.suite import load_suite

    suite = load_suite(args.suite)
    results = (
        suite.results_dir if not args.output_dir or suite.results_dir_setting else Path(args.output_dir) / "results"
    )
    archive = args.out / f"{suite.name}-results.tar.gz"
    with tarfile.open(archive, "w:gz") as tar:
        # the finished runs' results files (and the report's off-target flags), nothing else
        for path in sorted(results.glob("*/seed*.*")):
            tar.add(path, arcname=str(path.relative_to(results)))
    stopped = code == -15  # our SIGTERM after --minutes: the unfinished runs resume on the next call
    finished = sorted({str(Path(p).parent) + " " + Path(p).name.split(".")[0] for p in tar_names(archive)})
    runs = (Path(args.output_dir) if args.output_dir else suite.output_dir) / "runs"
    record(args.out, "compare", {"exit": code, "stopped_after_minutes": stopped, "finished_runs": finished,
                                 "unfinished_runs": unfinished_progress(runs, finished),
                                 "seconds": round(time.time() - start, 1), "suite": suite.name,
                                 "archive": archive.name, "results_dir": str(results)})  # fmt: skip
    return 0 if stopped else code


def unfinished_progress(runs: Path, finished: list[str]) -> dict[str, str]:
    """How far each started, unfinished run got: its newest checkpoint (`high/checkpoint-3500` for a staged run),
    which a next call on the same machine resumes from; with the call's seconds, the GPU's speed. Read from the
    folder names only (resuming verifies them). A run stopped before its first checkpoint: "no checkpoint yet"."""
    from hf_langspec.training.checkpoints import CHECKPOINT  # the name the Trainer gives, set-aside ones excluded

    progress = {}
    for seed_dir in sorted(runs.glob("*/seed*")):
        name = f"{seed_dir.parent.name} {seed_dir.name}"
        if name in finished:
            continue
        root = seed_dir / "checkpoints"  # a staged run (HLT-MT) keeps one folder per stage in it
        found = [c for c in root.glob("**/checkpoint-*") if c.is_dir() and CHECKPOINT.match(c.name)]
        last = max(found, key=lambda c: c.stat().st_mtime, default=None)
        progress[name] = str(last.relative_to(root)) if last else "no checkpoint yet"
    return progress


def tar_names(archive: Path) -> list[str]:
    with tarfile.open(archive) as tar:
        return tar.getnames()


STEPS = {
    "tests": tests,
    "fsdp": fsdp,
    "speed": speed,
    "profile": profile,
    "processes": processes,
    "static": static,
    "graph": graph,
    "decoding": decoding,
    "compile": compile_speed,
    "routing": routing,
    "curve": curve,
    "compare": compare,
}


def main() -> int:
    parser = argparse.ArgumentParser(description=__doc__, formatter_class=argparse.RawDescriptionHelpFormatter)
    parser.add_argument("step", choices=["bundle", "pack", *STEPS])
    parser.add_argument("--out", type=Path, default=Path(os.environ.get("OUT", "gpu-plan-out")))
    parser.add_argument("--device", default="cuda", choices=["cuda", "cpu"], help="cpu: the same path, tiny budget")
    parser.add_argument("--python-version", default="3.12", help="bundle: the GPU image's Python")
    parser.add_argument("--ct2", action="store_true", help="bundle: CTranslate2 too (43 MB; no plan step needs it)")
    parser.add_argument("--kinds", help="compile, decoding: the models to time (default: compile all 11, decoding 5)")
    parser.add_argument("--loops", help="profile: bench_loop's loops (default: as is,loader)")
    parser.add_argument("--label", help="profile, processes: the BENCHMARKS.md section's label (e.g. before, after)")
    parser.add_argument("--parts", help=f"static: which parts, of {[name for name, _ in STATIC_PARTS]}")
    parser.add_argument("--cache", type=Path, help="pack: an inductor-cache.tar.xz a GPU call brought back")
    parser.add_argument("--counts", default="1,2,4,8", help="processes: how many side by side, each count in turn")
    parser.add_argument("--suite", help="compare: the suite to run")
    parser.add_argument(
        "--systems", help="compare, profile: comma-separated systems (default: all; profile: baseline,fcll,laa)"
    )
    parser.add_argument("--max-steps", type=int, default=10000, help="curve: train the baseline this long")
    parser.add_argument("--every", type=int, default=1000, help="curve: validate every this many steps")
    parser.add_argument("--target", action="append", default=[], help="curve: GROUP=BLEU, repeatable")
    parser.add_argument(
        "--workers",
        type=int,
        default=8,
        help="compare: runs side by side on the one GPU (8: 5.19x one alone on an H200)",
    )
    parser.add_argument("--output-dir", help="compare: the suite's output_dir elsewhere; curve: the run's folder")
    parser.add_argument("--minutes", type=float, default=8.0,
                        help="compare, curve: stop after this long (the machine's 10-minute command limit), archive what "
                             "finished; the next call resumes the rest")  # fmt: skip
    args = parser.parse_args()
    if args.step in ("bundle", "pack"):
        bundle(args) if args.step == "bundle" else pack(args)
        return 0
    ensure_installed()
    args.tiny = args.device == "cpu"
    args.out.mkdir(parents=True, exist_ok=True)
    return STEPS[args.step](args)


if __name__ == "__main__":
    sys.exit(main())
