#!/usr/bin/env python3
"""scripts/count_lesson_statements.py - how many code statements each chapter changes.

A chapter's diff against its base should be its lesson and nothing else. This
script measures that diff in code statements, not lines, so that comments and line
wrapping do not count: for each chapter's loop file (the folder's one .cpp or .cu) it

  1. strips comments (// to the end of the line, /* ... */) and preprocessor lines,
  2. joins the rest into one line and splits it into statements: at every `;` outside
     parentheses (a for header stays one statement), and after every `{` and `}`,
  3. normalizes white space inside each statement,

and compares the statement lists of each chapter and its base with difflib: the chapter
before it, unless its header names another on a `// Built on: chapters/NN_name` line
(scripts/render_chapter_diffs.py's rule: chapter 12 is built on chapter 10). A statement
removed or added counts once; a block of n statements replaced by m counts max(n, m).

    python3 scripts/count_lesson_statements.py            # every chapter against its base
    python3 scripts/count_lesson_statements.py 04 05      # one pair, by chapter number
    python3 scripts/count_lesson_statements.py --show 04 05   # ... and the changed statements
    python3 scripts/count_lesson_statements.py --layer-loops  # loops over the layers, per file
    python3 scripts/count_lesson_statements.py --limit 04:05:45 --limit 05:06:60 --one-layer-loop
                                   # exit 1 if a pair changes more, or a file from 02 on
                                   # holds more than one loop over the layers (CI)

Exit status 0; 1 when a --limit or --one-layer-loop is exceeded; 2 on a bad chapter number
or a folder without exactly one loop file.
"""
import argparse
import difflib
import pathlib
import re
import sys

sys.path.insert(0, str(pathlib.Path(__file__).resolve().parent))
from render_chapter_diffs import (REPOSITORY, ChapterError, base_chapter,  # noqa: E402
                                  chapter_folders, loop_file)

# A loop over the model's layers: `for (... ; ... n_layer ...)`.
LAYER_LOOP = re.compile(r"\bfor \([^;]*;[^;]*\bn_layer\b")


def strip_comments(source: str) -> str:
    """The source without comments and preprocessor lines; string literals kept whole."""
    token = re.compile(r'"(?:\\.|[^"\\])*"|\'(?:\\.|[^\'\\])*\'|//[^\n]*|/\*.*?\*/', re.DOTALL)
    without = token.sub(lambda match: " " if match.group(0)[0] == "/" else match.group(0), source)
    return "\n".join(line for line in without.splitlines() if not line.lstrip().startswith("#"))


def opens_initializer(code: str, index: int) -> bool:
    """Whether the `{` at code[index] starts a braced initializer rather than a block.

    Formatted code writes `name{...}` for an initializer and `) {`, `] {`, `else {`,
    `class Name {` for a block (a lambda's body is a block too); `return {...}`,
    `= {...}` and a `{` that follows `(`, `,` or `{` are initializers.
    """
    before = code[:index]
    if not before.endswith(" "):
        return True
    return before.rstrip().endswith(("=", "return", ",", "(", "{"))


def statements(source: str) -> list:
    """The code's statements, white space normalized, in order. A statement ends at a
    `;` that is not inside parentheses or an initializer, and after a block's `{` or `}`;
    a lambda's body inside a call is split the same way."""
    code = " ".join(strip_comments(source).split())
    result, current, nesting, in_string = [], [], [], None

    def finish():
        statement = "".join(current).strip()
        if statement:
            result.append(statement)
        current.clear()

    for index, char in enumerate(code):
        current.append(char)
        if in_string:
            if char == in_string and code[index - 1] != "\\":
                in_string = None
            continue
        in_block = not nesting or nesting[-1] == "block"
        if char in "\"'":
            in_string = char
        elif char == "(":
            nesting.append("paren")
        elif char == ")":
            if nesting:
                nesting.pop()
        elif char == "{":
            if nesting and nesting[-1] == "init" or opens_initializer(code, index):
                nesting.append("init")
            else:
                nesting.append("block")
                finish()
        elif char == "}":
            kind = nesting.pop() if nesting else "block"
            if kind == "block":
                finish()
        elif char == ";" and in_block:
            finish()
    finish()
    return result


def changed_statements(before: list, after: list) -> list:
    """(tag, old statements, new statements) for every block that differs."""
    matcher = difflib.SequenceMatcher(a=before, b=after, autojunk=False)
    return [(tag, before[i1:i2], after[j1:j2])
            for tag, i1, i2, j1, j2 in matcher.get_opcodes() if tag != "equal"]


def count(blocks: list) -> int:
    return sum(max(len(old), len(new)) for _, old, new in blocks)


def layer_loops(path: pathlib.Path) -> int:
    return sum(1 for statement in statements(path.read_text()) if LAYER_LOOP.search(statement))


def check_limits(limits: list, one_layer_loop: bool, folders: list, by_number: dict) -> int:
    """1 (and one line each) when a pair changes more than its limit or a file from
    chapter 02 on holds more than one loop over the layers."""
    failures = []
    for limit in limits:
        try:
            before, after, most = limit.split(":")
            pair, most = (by_number[before], by_number[after]), int(most)
        except (ValueError, KeyError):
            print(f"count_lesson_statements.py: --limit {limit}: expected NN:MM:MAX with two "
                  "chapter numbers", file=sys.stderr)
            return 2
        changed = count(changed_statements(statements(loop_file(pair[0]).read_text()),
                                           statements(loop_file(pair[1]).read_text())))
        print(f"{before} -> {after}: {changed} statements changed (limit {most})")
        if changed > most:
            failures.append(f"{before} -> {after} changes {changed} statements, more than {most}")
    if one_layer_loop:
        for folder in (folder for folder in folders if int(folder.name[:2]) >= 2):
            loops = layer_loops(loop_file(folder))
            if loops > 1:
                failures.append(f"{folder.name} loops over the layers {loops} times")
    for failure in failures:
        print(f"count_lesson_statements.py: {failure}", file=sys.stderr)
    return 1 if failures else 0


def main(argv) -> int:
    try:
        return run(argv)
    except ChapterError as error:
        print(f"count_lesson_statements.py: {error}", file=sys.stderr)
        return 2


def run(argv) -> int:
    parser = argparse.ArgumentParser(description="Code statements each chapter changes.")
    parser.add_argument("chapters", nargs="*",
                        help="two chapter numbers (default: every chapter against its base)")
    parser.add_argument("--show", action="store_true", help="print the changed statements")
    parser.add_argument("--layer-loops", action="store_true",
                        help="print how many loops over the layers each chapter file holds")
    parser.add_argument("--limit", action="append", default=[], metavar="NN:MM:MAX",
                        help="fail when chapter NN -> MM changes more than MAX statements")
    parser.add_argument("--one-layer-loop", action="store_true",
                        help="fail when a chapter file from chapter 02 on loops over the "
                             "layers more than once")
    parser.add_argument("--root", type=pathlib.Path, default=REPOSITORY)
    args = parser.parse_args(argv)
    folders = chapter_folders(args.root.resolve())
    by_number = {folder.name[:2]: folder for folder in folders}

    if args.layer_loops:
        for folder in folders:
            print(f"{folder.name}: {layer_loops(loop_file(folder))} loop(s) over the layers")
        return 0
    if args.limit or args.one_layer_loop:
        return check_limits(args.limit, args.one_layer_loop, folders, by_number)
    if args.chapters:
        if len(args.chapters) != 2 or any(number.zfill(2) not in by_number
                                          for number in args.chapters):
            print("count_lesson_statements.py: give two chapter numbers, e.g. 04 05",
                  file=sys.stderr)
            return 2
        pairs = [(by_number[args.chapters[0].zfill(2)], by_number[args.chapters[1].zfill(2)])]
    else:
        pairs = [(base_chapter(folder, previous, folders), folder)
                 for previous, folder in zip(folders, folders[1:])]

    for before, after in pairs:
        blocks = changed_statements(statements(loop_file(before).read_text()),
                                    statements(loop_file(after).read_text()))
        print(f"{before.name[:2]} -> {after.name[:2]}: {count(blocks)} statements changed")
        if args.show:
            for tag, old, new in blocks:
                for statement in old:
                    print(f"  - {statement}")
                for statement in new:
                    print(f"  + {statement}")
                print()
    return 0


if __name__ == "__main__":
    sys.exit(main(sys.argv[1:]))
