"""Runs one page of the user guide: every fenced block, in page order, in one folder.

    python docs_runner.py docs/compare.md WORKDIR

- ```python  executed in one namespace per page (the page reads as one script);
- ```pycon   doctest examples (>>> lines and their output) in that namespace;
- ```console `$ command` lines run by bash in the same folder, one shell per block (so
             `echo $?` sees the previous command's status); each command's output (stdout
             and stderr together) must match the lines under it: a line "..." matches any
             number of lines, "..." inside a line any text, and numbers match within 2%
             (measured figures may move in their last digit on another CPU);
- ```cpp     skipped here: CTest compiles and runs them (cpp/cmake/DocExamples.cmake);
- ```sh      setup commands that cannot run inside the test suite; only those are allowed;
- ```text    shown, not run (a folder layout, a diagram).

The folder holds a link `examples` to the repository's examples, and the page's own files.
Exit status 0 when every block ran as shown; on a mismatch, the page, line and difference.
"""

from __future__ import annotations

import doctest
import math
import os
import pathlib
import re
import subprocess
import sys
import types

FENCE = re.compile(r"^```(\w*)\s*$")
LANGUAGES = {"python", "pycon", "console", "cpp", "sh", "text"}
# What a ```sh block may run: installation and build steps of the repository itself.
SETUP_COMMANDS = ("make ", "make\n", "cmake ", "ctest ", "git ", "source ", ".venv/bin/pip ", "pip ", "cd ", "apt-get ",
                  "sudo ", ".venv/bin/cmake ", ".venv/bin/ctest ", "#")


class PageError(Exception):
    pass


def blocks(text: str) -> list[tuple[str, str, int]]:
    """(language, code, first line number) of each fenced block."""
    out, lang, start, lines = [], None, 0, []
    for number, line in enumerate(text.splitlines(), 1):
        m = FENCE.match(line)
        if lang is None:
            if m:
                lang, start, lines = m.group(1), number + 1, []
        elif line.strip() == "```":
            out.append((lang, "\n".join(lines) + "\n", start))
            lang = None
        else:
            lines.append(line)
    if lang is not None:
        raise PageError(f"{start - 1}: a ```{lang} block is not closed")
    return out


def number(token: str) -> float | None:
    try:
        return float(token.rstrip("%,;)").lstrip("("))
    except ValueError:
        return None


def line_matches(want: str, got: str) -> bool:
    want, got = want.rstrip(), got.rstrip()
    if "..." in want:
        pattern = ".*".join(re.escape(part) for part in want.split("..."))
        return re.fullmatch(pattern, got) is not None
    a, b = want.split(), got.split()
    if len(a) != len(b):
        return False
    for x, y in zip(a, b):
        if x == y:
            continue
        fx, fy = number(x), number(y)
        if fx is None or fy is None or not math.isclose(fx, fy, rel_tol=0.02, abs_tol=1e-12):
            return False
    return True


def output_matches(want: list[str], got: list[str]) -> bool:
    """Line by line; a line "..." matches any number of lines (tried shortest first)."""
    if not want:
        return not got
    if want[0].strip() == "...":
        return any(output_matches(want[1:], got[k:]) for k in range(len(got) + 1))
    return bool(got) and line_matches(want[0], got[0]) and output_matches(want[1:], got[1:])


def run_console(code: str, line: int, workdir: pathlib.Path) -> None:
    commands: list[tuple[str, list[str], int]] = []
    for offset, text in enumerate(code.splitlines()):
        if text.startswith("$ "):
            commands.append((text[2:], [], line + offset))
        elif commands and commands[-1][0].endswith("\\"):
            commands[-1] = (commands[-1][0] + "\n" + text, commands[-1][1], commands[-1][2])
        elif commands:
            commands[-1][1].append(text)
        elif text.strip():
            raise PageError(f"{line + offset}: console output before any `$ command`")
    marker = "@@docs-runner@@"
    script = ["set +e", "status=0"]
    for i, (command, _, _) in enumerate(commands):
        script += [f"(exit $status)", f"{{ {command}\n}} 2>&1", "status=$?", f"echo '{marker}{i}'"]
    p = subprocess.run(["bash", "-c", "\n".join(script)], cwd=workdir, capture_output=True, text=True, timeout=600)
    pieces = re.split(re.escape(marker) + r"\d+\n", p.stdout)
    for (command, want, at), got in zip(commands, pieces):
        got_lines = got.splitlines()
        while want and not want[-1].strip():
            want.pop()
        if not output_matches(want, got_lines):
            raise PageError(
                f"{at}: `$ {command}` printed\n" + "\n".join("    | " + g for g in got_lines)
                + "\n  but the page shows\n" + "\n".join("    | " + w for w in want)
            )
    if len(pieces) < len(commands) + 1:
        raise PageError(f"{line}: the console block stopped early:\n{p.stdout}\n{p.stderr}")


def run_page(page: pathlib.Path, workdir: pathlib.Path) -> None:
    text = page.read_text()
    workdir.mkdir(parents=True, exist_ok=True)
    examples = workdir / "examples"
    if not examples.exists():
        examples.symlink_to(pathlib.Path(__file__).resolve().parents[2] / "examples")
    os.chdir(workdir)
    # The page runs as a script would: in a fresh __main__ module (so that pickle finds classes
    # the page defines, as torch.save needs).
    main_module = types.ModuleType("__main__")
    sys.modules["__main__"] = main_module
    namespace = main_module.__dict__
    try:
        found = blocks(text)
    except PageError as e:
        raise PageError(f"{page.name}:{e}") from None
    for lang, code, line in found:
        where = f"{page.name}:{line}"
        if lang not in LANGUAGES:
            raise PageError(f"{where}: fence ```{lang}: the guide's blocks are python, pycon, console, cpp, sh or text")
        if lang == "python":
            exec(compile(code, where, "exec"), namespace)  # noqa: S102  (the page is the test)
        elif lang == "pycon":
            test = doctest.DocTestParser().get_doctest(code, namespace, where, str(page), line - 1)
            runner = doctest.DocTestRunner(optionflags=doctest.ELLIPSIS | doctest.NORMALIZE_WHITESPACE)
            runner.run(test, clear_globs=False)
            if runner.failures:
                raise PageError(f"{where}: a pycon example printed something else (see above)")
        elif lang == "console":
            try:
                run_console(code, line, workdir)
            except PageError as e:
                raise PageError(f"{page.name}:{e}") from None
        elif lang == "sh":
            for offset, command in enumerate(code.splitlines()):
                if command.strip() and not (command + "\n").startswith(SETUP_COMMANDS):
                    raise PageError(
                        f"{page.name}:{line + offset}: `{command}` in a ```sh block is not run by the tests; "
                        "show it in a ```console block (run and checked) instead"
                    )


def main() -> int:
    page, workdir = pathlib.Path(sys.argv[1]).resolve(), pathlib.Path(sys.argv[2]).resolve()
    try:
        run_page(page, workdir)
    except PageError as e:
        print(f"docs: {e}", file=sys.stderr)
        return 1
    return 0


if __name__ == "__main__":
    sys.exit(main())
