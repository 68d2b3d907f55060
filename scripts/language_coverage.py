"""Which off-target detector measures each language of OPUS-100, TED-59 and WMT-10: the table in docs/DATA.md.

python scripts/language_coverage.py           # rewrites the table between its markers in docs/DATA.md
python scripts/language_coverage.py --check   # exit 1 if the committed table differs (run by the tests)
"""

from __future__ import annotations

import argparse
import sys
from importlib.metadata import version
from pathlib import Path

from hf_langspec.data.hub import CORPUS_LANGUAGES
from hf_langspec.evaluation.language_id import DEFAULT_ORDER, DETECTED_AS, language_identifier

DOC = Path(__file__).resolve().parents[1] / "docs" / "DATA.md"
BEGIN, END = "<!-- language-coverage -->", "<!-- /language-coverage -->"
PACKAGES = {"lingua": "lingua-language-detector", "py3langid": "py3langid", "langid": "langid"}
NAMES = {"opus100": "OPUS-100", "ted59": "TED-59", "wmt10": "WMT-10"}


def table() -> str:
    detectors = {name: language_identifier(name) for name in DEFAULT_ORDER}
    default = language_identifier()
    codes = sorted({code for codes in CORPUS_LANGUAGES.values() for code in codes})
    rows = [
        "Detectors (versions this table was made with): "
        + ", ".join(
            f"{name} {version(PACKAGES[name])} ({len(d.languages)} languages)" for name, d in detectors.items()
        )
        + f". The default ({default.name}) measures each language with the first that covers it.",
        "",
        "| language | " + " | ".join(NAMES.values()) + " | " + " | ".join(DEFAULT_ORDER) + " | measured by |",
        "|---|" + ":-:|" * (len(NAMES) + len(DEFAULT_ORDER)) + "---|",
    ]
    not_measured: dict[str, list[str]] = {name: [] for name in NAMES}
    for code in codes:
        chosen = default.for_language(code)
        label = f"{code} (as {'/'.join(DETECTED_AS[code])})" if code in DETECTED_AS else code
        cells = ["x" if code in CORPUS_LANGUAGES[name] else "" for name in NAMES]
        cells += ["x" if d.for_language(code) is not None else "" for d in detectors.values()]
        rows.append(f"| {label} | " + " | ".join(cells) + f" | {chosen.name if chosen else '**not measured**'} |")
        for name in NAMES:
            if chosen is None and code in CORPUS_LANGUAGES[name]:
                not_measured[name].append(code)
    counts = "; ".join(
        f"{NAMES[name]}: {len(CORPUS_LANGUAGES[name]) - len(missing)} of {len(CORPUS_LANGUAGES[name])} measured"
        + (f" (not: {', '.join(missing)})" if missing else "")
        for name, missing in not_measured.items()
    )
    return "\n".join([*rows, "", counts + "."])


def main() -> None:
    parser = argparse.ArgumentParser(description=__doc__, formatter_class=argparse.RawDescriptionHelpFormatter)
    parser.add_argument("--check", action="store_true", help="compare with docs/DATA.md instead of writing it")
    args = parser.parse_args()
    text = DOC.read_text()
    if BEGIN not in text or END not in text:
        sys.exit(f"{DOC} has no {BEGIN} ... {END} markers; add them where the table goes.")
    head, rest = text.split(BEGIN, 1)
    new = f"{head}{BEGIN}\n{table()}\n{END}{rest.split(END, 1)[1]}"
    if args.check:
        if new != text:
            sys.exit("docs/DATA.md's language coverage table is out of date: run python scripts/language_coverage.py")
        print("docs/DATA.md's language coverage table is up to date")
        return
    DOC.write_text(new)
    print(f"wrote the language coverage table into {DOC}")


if __name__ == "__main__":
    main()
