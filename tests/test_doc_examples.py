"""Every code block of the README and the guide runs, so an example cannot rot: each page's blocks in order, in a
sandbox shaped like the repository, on a tiny setting (tests/doc_examples.py says exactly what is changed).

A shell command is run unless it is listed below with the reason it is only parsed (it needs a GPU, the network
or a quarter of an hour); a Python block is executed; a YAML block (a config excerpt) trains, tiny, on a Bible corpus of the languages it names;
the contributor's file map names only files that exist. A block of any other kind fails the inventory test."""

from __future__ import annotations

import json
import re
import shlex
from pathlib import Path

import pytest
import yaml
from conftest import CODES, nllb_checkpoint
from doc_examples import PAGES, PLACEHOLDERS, ROOT, Block, Sandbox, blocks, commands, parses, program, shrink_suite

# run by .ci/run itself, which the inventory test checks
CI_STEPS = {"bash scripts/setup.sh", "bash scripts/test.sh"}
# only parsed by the script's own parser here, each with its reason
PARSED_ONLY = {
    "python3 scripts/gpu_plan.py": "a step of the GPU plan: needs a CUDA device",
    "python scripts/gpu_plan.py": "packs wheels from PyPI or a suite's data for a GPU machine",
    "python3 scripts/compat_matrix.py": "installs each cell's packages into its own environment (~14 min a cell)",
    "python examples/finetune_xnli.py": "needs XNLI (from the Hub, or --data-dir)",
}
# run until they need the network, which here they must name in one line
NEEDS_NETWORK = {"hf-langspec push": "Could not push to the Hugging Face Hub"}
# appended to a documented script's command line to make it tiny, as `train` gets `--set`
TINY_FLAGS = {
    "examples/pretrain_xlp.py": shlex.split(
        "--books 40 41 42 43 --max-steps 2 --valid-sentences 2 --vocab-size 300 --save-steps 2 --warmup-steps 0"
    ),
    "pip": shlex.split("--dry-run --no-deps --quiet"),  # the package builds and installs (its build requirements
    # come from PyPI, as for a user), without installing it over the tests' own environment
}


NLLB = "path/to/nllb-200-distilled-600M"
RUSSIAN = [
    "В начале сотворил Бог небо и землю.",
    "И сказал Бог: да будет свет. И стал свет.",
    "Блаженны кроткие, ибо они наследуют землю.",
    "Любовь долготерпит, милосердствует.",
] * 25


def _nllb_lora(folder: Path, checkpoint: str, languages: list[str]) -> None:
    from hf_langspec.pretrained import load_pretrained

    model, tokenizer = load_pretrained(checkpoint, "lora", languages=languages, lora_rank=4)
    model.save_pretrained(folder)
    tokenizer.save_pretrained(folder)


def _ru_config(path: Path) -> None:
    """What cll.md asks for: the CLL run's corpus with the new language, its training settings, no tokenizer."""
    config = yaml.safe_load((ROOT / "examples/configs/bible_cll_cpu.yaml").read_text())
    config["data"]["bible"]["languages"] = [*config["data"]["bible"]["languages"], "ru"]
    config.pop("tokenizer")
    config["model"] = {}
    config["output_dir"] = "runs/bible-cll-ru-trained"
    path.write_text(yaml.safe_dump(config))


def _main_job(path: Path, sandbox: Sandbox) -> None:
    result = sandbox.run("hf-langspec train --config examples/configs/bible_baseline_cpu.yaml")
    assert result.returncode == 0 and path.is_dir(), result.stderr[-3000:]


# what a page's commands use that a user has and no command of the page makes: a stand-in for each
USER_FILES = {
    "runs/bible-baseline/model": _main_job,  # the main job's model (README, main-job.md)
    "runs/nllb-lora/model": lambda path, s: _nllb_lora(path, s.stand_ins[NLLB], CODES[:2]),
    "runs/nllb-lora-tl/model": lambda path, s: _nllb_lora(path, s.stand_ins[NLLB], ["eng_Latn", "tgl_Latn"]),
    "ru.txt": lambda path, s: path.write_text("\n".join(RUSSIAN) + "\n"),
    "my_ru_config.yaml": lambda path, s: _ru_config(path),
}


def _words(command: str) -> str:
    _env, words = program(command)
    return " ".join(words)


def _kind(command: str) -> str:
    line = _words(command)
    if command in CI_STEPS:
        return "ci"
    if any(line.startswith(start) for start in PARSED_ONLY):
        return "parsed"
    if any(line.startswith(start) for start in NEEDS_NETWORK):
        return "network"
    return "run"


def test_every_block_of_the_readme_and_the_guide_is_checked_here():
    """The inventory: every block has a kind this module runs, and the CI steps are what .ci/run runs."""
    kinds = {"bash", "python", "yaml", "text"}
    found = [block for page in PAGES for block in blocks(page)]
    assert len(found) > 30, "the pages hold fewer blocks than expected: is the block pattern still right?"
    assert [b.name for b in found if b.language not in kinds] == []
    assert [b.name for b in found if b.language == "text" and b.page != "docs/contributing.md"] == []
    written = {m for block in found for m in re.findall(r"path/to/[\w.-]+|<\w+>/", block.code)}
    assert written <= set(PLACEHOLDERS), f"placeholders without a stand-in: {written - set(PLACEHOLDERS)}"
    ci = (ROOT / ".ci" / "run").read_text()
    for command in CI_STEPS:
        assert command in ci, f".ci/run no longer runs {command}: the README's command is not what CI runs"


@pytest.fixture(scope="module")
def stand_ins(tmp_path_factory) -> dict[str, str]:
    folder = tmp_path_factory.mktemp("stand-ins")
    # NLLB-200's 1,024 positions: a corpus's default max_length fits it as it fits the real checkpoint
    checkpoint = nllb_checkpoint(folder / "nllb", codes=[*CODES, "tgl_Latn"], max_position_embeddings=1024)
    stand_ins = {NLLB: str(checkpoint), "<you>/": "you/",
                 "path/to/flores200_dataset": str(ROOT / "tests/fixtures/test_sets/flores200_dataset"),
                 "path/to/flores200_spm.model": str(ROOT / "tests/fixtures/test_sets/spm/flores_sample.model")}  # fmt: skip
    assert set(stand_ins) == set(PLACEHOLDERS)
    return stand_ins


def _check_command(sandbox: Sandbox, command: str, where: str) -> None:
    _env, words = program(command)
    kind = _kind(command)
    if kind == "ci":
        return
    if kind == "parsed":
        script = next(w for w in words if w.endswith(".py"))
        problem = parses(words[words.index(script) :])
        assert problem is None, f"{where}: `{command}` does not parse: {problem}"
        return
    for name, make in USER_FILES.items():
        if name in command and not (sandbox.folder / name).exists():
            make(sandbox.folder / name, sandbox)
    extra = next((flags for start, flags in TINY_FLAGS.items() if start in words[:2] or words[0] == start), [])
    result = sandbox.run(f"{command} {shlex.join(extra)}".strip())
    output = f"{result.stdout}\n{result.stderr}"
    if kind == "network":
        expected = next(said for start, said in NEEDS_NETWORK.items() if _words(command).startswith(start))
        assert result.returncode != 0 and expected in output, f"{where}: `{command}`:\n{output[-3000:]}"
        return
    assert result.returncode == 0, f"{where}: `{command}` exited {result.returncode}:\n{output[-4000:]}"
    if words[0] == "curl":
        answer = json.loads(result.stdout)
        assert {"translation", "translatedText", "added_languages"} & set(answer), answer  # a tiny model may say ""


def _check_python(sandbox: Sandbox, block: Block, monkeypatch) -> None:
    monkeypatch.chdir(sandbox.folder)
    monkeypatch.setenv("OMP_NUM_THREADS", "1")
    exec(
        compile(sandbox.text(block.code), block.name, "exec"), {"__name__": "__doc_example__"}
    )  # the documentation's own example


def _check_yaml(sandbox: Sandbox, block: Block) -> None:
    """A config excerpt trains: its sections, a Bible corpus of the languages it names (`data.language_codes`, or
    the main job's), tiny as every documented `train` is."""
    config = yaml.safe_load(sandbox.text(block.code))
    data = config.setdefault("data", {})
    if "bible" not in data and "train_files" not in data:
        data["bible"] = {"languages": sorted(data.get("language_codes") or ["en", "de", "fr"])}
    path = sandbox.folder / "doc-example.yaml"
    path.write_text(yaml.safe_dump({"output_dir": "runs/doc-example", **config}))
    result = sandbox.run("hf-langspec train --config doc-example.yaml")
    assert result.returncode == 0, f"{block.name}:\n{(result.stdout + result.stderr)[-4000:]}"


def _check_file_map(block: Block) -> None:
    """Each entry of the contributor's map exists, and so does each file it names in its folder."""
    missing, folder = [], ROOT
    for line in block.code.splitlines():
        entry = line.split()[0] if line[:1].strip() else None
        if entry:
            folder = ROOT / entry if entry.endswith("/") else (ROOT / entry).parent
            missing += [entry] if not (ROOT / entry).exists() else []
        for name in re.findall(r"(?<![\w/*])([\w/]+\.py)\b", line[len(entry or "") :]):
            where = [ROOT / name] if "/" in name else [folder / name, *ROOT.glob(f"hf_langspec/**/{name}")]
            missing += [] if any(path.exists() for path in where) else [name]
    assert missing == [], f"{block.name} names files that do not exist: {missing}"


@pytest.mark.slow
@pytest.mark.parametrize("page", [p for p in PAGES if blocks(p)])
def test_the_pages_blocks_run_in_order(page, tmp_path, stand_ins, monkeypatch):
    sandbox = Sandbox(tmp_path / "repo", stand_ins)
    try:
        for block in blocks(page):
            if block.language == "bash":
                for command in commands(sandbox.text(block.code)):
                    _check_command(sandbox, command, block.name)
            elif block.language == "python":
                _check_python(sandbox, block, monkeypatch)
            elif block.language == "yaml":
                _check_yaml(sandbox, block)
            else:
                _check_file_map(block)
    finally:
        sandbox.stop_servers()


def test_commands_are_split_as_a_shell_would():
    code = "bash a.sh && .venv/bin/hf-langspec train --config x.yaml   # comment\n" \
           "echo \"a b\" | hf-langspec translate m \\\n    --src-lang en\n# only a comment\n"  # fmt: skip
    assert commands(code) == ["bash a.sh", ".venv/bin/hf-langspec train --config x.yaml",
                              "echo 'a b' | hf-langspec translate m --src-lang en"]  # fmt: skip
    assert program("OMP_NUM_THREADS=1 .venv/bin/hf-langspec compare --suite s.yaml") == (
        ["OMP_NUM_THREADS=1"],
        ["hf-langspec", "compare", "--suite", "s.yaml"],
    )


def test_a_script_command_line_is_parsed_by_its_own_parser_without_running_it():
    assert parses(["scripts/compat_matrix.py", "lock"]) is None
    assert "invalid choice" in parses(["scripts/compat_matrix.py", "nonsense"])
    assert "unrecognized arguments: --nope" in parses(["scripts/gpu_plan.py", "tests", "--out", "x", "--nope"])


def test_a_page_block_keeps_its_name_when_text_above_it_changes(tmp_path, monkeypatch):
    page = tmp_path / "page.md"
    page.write_text("# A\n```bash\nls\n```\n## B\ntext\n```python\nx = 1\n```\n```yaml\na: 1\n```\n")
    monkeypatch.setattr("doc_examples.ROOT", tmp_path)
    assert [(b.name, b.language, b.code) for b in blocks("page.md")] == [
        ("page.md > A #1", "bash", "ls\n"),
        ("page.md > B #1", "python", "x = 1\n"),
        ("page.md > B #2", "yaml", "a: 1\n"),
    ]
    assert Path(tmp_path).exists()


def test_the_file_map_check_names_a_file_that_does_not_exist():
    good = "hf_langspec/export/     the server (api.py: requests; server.py), push\nscripts/gpu_plan.py     the GPU plan\n"
    _check_file_map(Block("docs/contributing.md", "Layout", 1, "text", good))
    bad = good + "hf_langspec/data/       corpus_store.py and columns_v2.py (see scripts/missing_tool.py)\n"
    with pytest.raises(AssertionError, match=r"\['columns_v2.py', 'scripts/missing_tool.py'\]"):
        _check_file_map(Block("docs/contributing.md", "Layout", 1, "text", bad))


def test_tiny_settings_keep_a_staged_suite_at_one_budget(tmp_path):
    """Every system of a shrunk suite trains the same number of steps: a staged system's stages add up to the base's
    budget (the suite refuses anything else), and a data-size rule is scaled to the slice."""
    suite = shrink_suite(yaml.safe_load((ROOT / "examples/suites/bible6.yaml").read_text()))
    budget = suite["base"]["training"]["max_steps"]
    staged = [s["set"] for s in suite["systems"].values() if "stages" in s.get("set", {})]
    assert staged and all(sum(st["training"]["max_steps"] for st in s["stages"]) == budget for s in staged)
    assert suite["seeds"] == [1] and suite["base"]["data"]["bible"]["books"] == [62]
    from hf_langspec.compare.suite import load_suite

    path = tmp_path / "bible6.yaml"
    path.write_text(yaml.safe_dump(suite))
    loaded = load_suite(path)
    controls = [name for name, system in loaded.systems.items() if system.control is not None]
    assert sorted(set(loaded.systems) - set(controls)) == sorted(suite["systems"])  # the suite's own checks pass
    assert controls  # and the matched controls its systems ask for are solved at the shrunk shape
    assert all(loaded.seeds_of(system) == [1] for system in loaded.systems)
