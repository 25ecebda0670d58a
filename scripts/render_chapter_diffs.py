#!/usr/bin/env python3
"""scripts/render_chapter_diffs.py - the generated code in the chapter pages: each chapter's diff
against its base chapter, its `// NEW in chapter NN:` markers, and quoted lines.

A chapter adds exactly one optimization to the chapter it is built on, so the diff of their
two decode loops IS the lesson. A chapter's base is the chapter before it in the ladder,
unless its loop file's header (the comment above the first `#include`) names another on a
line of its own:

    // Built on: chapters/10_mixed_precision

(chapter 12 serves with chapter 10's step, not chapter 11's persistent kernel).
scripts/count_lesson_statements.py takes the same pairs. For every chapters/NN_name/ after
the first, this script writes three kinds of generated blocks into chapters/NN_name/README.md,
each between two lines that hold only its markers:

    <!-- diff:begin --> ... <!-- diff:end -->
        `diff -u` of the base chapter's loop file (the folder's one .cpp or .cu) and
        this chapter's, from each file's first `#include` on (the header comments are
        prose, not the lesson), folded into a <details> element.
    <!-- new-markers:begin --> ... <!-- new-markers:end -->
        every `// NEW in chapter NN:` line of this chapter's loop file, with its line number:
        exactly what `grep -n "NEW in chapter NN:"` finds. Each must be a line the diff
        adds; one that is not marks nothing new and is reported.
    <!-- quote:begin PATH | ANCHOR | COUNT --> ... <!-- quote:end -->
        COUNT lines of the file PATH (from the checkout's root), starting at the first line
        that contains ANCHOR, as a ```cpp block: the lines a page quotes stay the code's
        (in the first chapter's README too).

The blocks are generated, never edited by hand: change the code, run the script. The same
sources give the same README, byte for byte, so running it twice changes nothing.

    python3 scripts/render_chapter_diffs.py            # rewrite the blocks that are stale
    python3 scripts/render_chapter_diffs.py --check    # exit 1 if any block is stale (CI)
    python3 scripts/render_chapter_diffs.py --chapters 02 03   # only these chapters' READMEs

Exit status: 0 when every README is (or now is) up to date; 1 when --check finds a stale
block, or when a chapter after the first has no README, no diff markers, not exactly one
loop file, a marker the diff does not add, a quote whose file or anchor is missing, or a
`Built on:` line that names no earlier chapter (each problem is named on one line).
"""
import argparse
import pathlib
import re
import subprocess
import sys
import tempfile

REPOSITORY = pathlib.Path(__file__).resolve().parent.parent
DIFF_BEGIN, DIFF_END = "<!-- diff:begin -->", "<!-- diff:end -->"
MARKERS_BEGIN, MARKERS_END = "<!-- new-markers:begin -->", "<!-- new-markers:end -->"
QUOTE_BEGIN = re.compile(r"^[ \t]*<!-- quote:begin (\S+) \| (.+?) \| ([0-9]+) -->[ \t]*$",
                         re.MULTILINE)
QUOTE_END = "<!-- quote:end -->"
HUNK_HEADER = re.compile(r"^@@ -([0-9]+)(,[0-9]+)? \+([0-9]+)(,[0-9]+)? @@", re.MULTILINE)
CHAPTER_FOLDER = re.compile(r"^[0-9][0-9]_")
BUILT_ON = re.compile(r"^//[ \t]*Built on:[ \t]*chapters/(\S+?)/?[ \t]*$", re.MULTILINE)
LOOP_FILE_SUFFIXES = (".cpp", ".cu")


class ChapterError(Exception):
    """A chapter whose README cannot be rendered; the message names the file and the fix."""


def chapter_folders(root: pathlib.Path) -> list:
    """chapters/NN_name/ folders in ladder order."""
    chapters = root / "chapters"
    return sorted(path for path in chapters.iterdir()
                  if path.is_dir() and CHAPTER_FOLDER.match(path.name))


def loop_file(folder: pathlib.Path) -> pathlib.Path:
    """The chapter's one source file: its decode loop."""
    sources = sorted(path for path in folder.iterdir()
                     if path.is_file() and path.suffix in LOOP_FILE_SUFFIXES)
    if len(sources) != 1:
        raise ChapterError(f"{folder}: expected exactly one .cpp or .cu file (the decode loop), "
                           f"found {len(sources)}")
    return sources[0]


def base_chapter(folder: pathlib.Path, previous: pathlib.Path, folders: list) -> pathlib.Path:
    """The chapter `folder`'s diff is taken against: the one its loop file's header names on
    a `// Built on: chapters/NN_name` line, else `previous` (the chapter before it). A
    name that is not an earlier chapter of `folders` is a ChapterError."""
    path = loop_file(folder)
    text = path.read_text()
    first_include = text.find("\n#include")
    header = text if first_include < 0 else text[:first_include]
    named = BUILT_ON.findall(header)
    if not named:
        return previous
    earlier = {other.name: other for other in folders if other.name < folder.name}
    if len(named) > 1 or named[0] not in earlier:
        raise ChapterError(f"{path}: its `// Built on:` line names {', '.join(named)}, not one "
                           f"earlier chapter's folder (chapters/NN_name)")
    return earlier[named[0]]


def code_lines(path: pathlib.Path) -> tuple:
    """(lines before the first `#include`, the file's lines from it on)."""
    lines = path.read_text().splitlines(keepends=True)
    first = next((index for index, line in enumerate(lines) if line.startswith("#include")), 0)
    return first, lines[first:]


def unified_diff(root: pathlib.Path, before: pathlib.Path, after: pathlib.Path) -> str:
    """`diff -u` of two files from their first `#include` on, labelled with their paths from
    the root (no timestamps), with the line numbers of the whole files."""
    before_label = before.relative_to(root).as_posix()
    after_label = after.relative_to(root).as_posix()
    (before_skipped, before_code), (after_skipped, after_code) = code_lines(before), code_lines(after)
    with tempfile.TemporaryDirectory() as scratch:
        before_copy, after_copy = pathlib.Path(scratch, "before"), pathlib.Path(scratch, "after")
        before_copy.write_text("".join(before_code))
        after_copy.write_text("".join(after_code))
        result = subprocess.run(
            ["diff", "-u", "--label", before_label, "--label", after_label, str(before_copy),
             str(after_copy)], capture_output=True, text=True, check=False)
    if result.returncode not in (0, 1):  # 0: same, 1: different, 2: trouble
        raise ChapterError(f"diff -u {before_label} {after_label} failed: {result.stderr.strip()}")

    def whole_file_numbers(match):
        old_start, old_count, new_start, new_count = match.groups()
        return (f"@@ -{int(old_start) + before_skipped}{old_count or ''} "
                f"+{int(new_start) + after_skipped}{new_count or ''} @@")
    return HUNK_HEADER.sub(whole_file_numbers, result.stdout)


def added_lines(diff: str) -> set:
    """The line numbers (in the new file) of the lines a unified diff adds."""
    added, number = set(), 0
    for line in diff.splitlines():
        header = HUNK_HEADER.match(line)
        if header:
            number = int(header.group(3))
        elif line.startswith("+") and not line.startswith("+++"):
            added.add(number)
            number += 1
        elif line.startswith(" "):
            number += 1
    return added


def fenced(text: str, language: str) -> str:
    """A fenced block longer than any run of backticks that starts a line of `text`."""
    longest = max((len(match.group(0)) for match in re.finditer(r"(?m)^`+", text)), default=0)
    fence = "`" * max(3, longest + 1)
    return f"{fence}{language}\n{text.rstrip(chr(10))}\n{fence}\n"


def diff_block(root: pathlib.Path, before: pathlib.Path, after: pathlib.Path,
               ladder_previous: pathlib.Path) -> str:
    """The text that goes between the diff markers; `ladder_previous` is the chapter before
    `after`'s in the ladder (the summary names a base that is not it)."""
    diff = unified_diff(root, before, after)
    before_label = before.relative_to(root).as_posix()
    after_label = after.relative_to(root).as_posix()
    if not diff:
        return (f"`{after_label}` is identical to `{before_label}` from the first `#include` on "
                "(generated by `scripts/render_chapter_diffs.py`).\n")
    changed = sum(1 for line in diff.splitlines()
                  if line[:1] in "+-" and not line.startswith(("+++", "---")))
    against = ("the chapter before" if before.parent == ladder_previous
               else f"chapter {chapter_number(before.parent)}, the chapter it is built on")
    return (f"<details>\n<summary>The whole diff against {against}: {changed} lines "
            f"changed (<code>diff -u {before_label} {after_label}</code>, from the first "
            f"include line)</summary>\n\n"
            f"Generated by `scripts/render_chapter_diffs.py`.\n\n"
            + fenced(diff, "diff") + "\n</details>\n")


def chapter_number(folder: pathlib.Path) -> str:
    return folder.name[:2]


def marker_lines(path: pathlib.Path, number: str) -> list:
    """(line number, text) of every `// NEW in chapter NN:` comment of the file."""
    marker = f"// NEW in chapter {number}:"
    return [(index, line.strip()) for index, line in enumerate(path.read_text().splitlines(), 1)
            if marker in line]


def markers_block(root: pathlib.Path, before: pathlib.Path, after: pathlib.Path) -> str:
    """The text that goes between the new-markers markers; a marker the diff does not add
    is a ChapterError."""
    number = chapter_number(after.parent)
    label = after.relative_to(root).as_posix()
    markers = marker_lines(after, number)
    added = added_lines(unified_diff(root, before, after))
    stale = [line for line, _ in markers if line not in added]
    if stale:
        raise ChapterError(f"{label}: line(s) {', '.join(map(str, stale))} say \"NEW in chapter "
                           f"{number}\" but the diff against {before.relative_to(root).as_posix()} "
                           "does not add them: mark only what this chapter changes")
    if not markers:
        return f"`{label}` holds no `// NEW in chapter {number}:` line.\n"
    plural = "line" if len(markers) == 1 else "lines"
    lines = [f"`grep -n \"NEW in chapter {number}:\" {label}` finds {len(markers)} {plural} "
             "(generated by `scripts/render_chapter_diffs.py`):", ""]
    lines += [f"- line {line}: {code_span(text)}" for line, text in markers]
    return "\n".join(lines) + "\n"


def code_span(text: str) -> str:
    """`text` as inline code, also when it holds a backtick."""
    return f"`` {text} ``" if "`" in text else f"`{text}`"


def quote_block(root: pathlib.Path, relative: str, anchor: str, count: int, readme) -> str:
    """`count` lines of root/relative from the first line that contains `anchor`."""
    path = root / relative
    if not path.is_file():
        raise ChapterError(f"{readme}: the quote names '{relative}', which does not exist")
    lines = path.read_text().splitlines()
    first = next((index for index, line in enumerate(lines) if anchor in line), None)
    if first is None:
        raise ChapterError(f"{readme}: no line of {relative} contains the quote's anchor "
                           f"'{anchor}': update the anchor")
    quoted = lines[first:first + count]
    indent = min((len(line) - len(line.lstrip()) for line in quoted if line.strip()), default=0)
    text = "\n".join(line[indent:] for line in quoted)
    where = (f"line {first + 1}" if len(quoted) == 1
             else f"lines {first + 1}-{first + len(quoted)}")
    return f"`{relative}`, {where}:\n\n" + fenced(text, "cpp")


def with_quotes(root: pathlib.Path, text: str, readme: pathlib.Path) -> str:
    """`text` with every quote block filled in."""
    pieces, position = [], 0
    for begin in QUOTE_BEGIN.finditer(text):
        stop = marker_line(QUOTE_END).search(text, begin.end())
        if not stop:
            raise ChapterError(f"{readme}: a quote:begin line has no {QUOTE_END} line after it")
        block = quote_block(root, begin.group(1), begin.group(2), int(begin.group(3)), readme)
        pieces += [text[position:begin.end()], "\n\n", block, "\n"]
        position = stop.start()
    return "".join(pieces) + text[position:]


def marker_line(marker: str):
    """A marker counts only alone on its line, so prose may name it."""
    return re.compile(r"^[ \t]*" + re.escape(marker) + r"[ \t]*$", re.MULTILINE)


def with_block(text: str, block: str, readme: pathlib.Path, begin: str = DIFF_BEGIN,
               end: str = DIFF_END, required: bool = True) -> str:
    """`text` with the lines between the markers replaced by `block`."""
    start = marker_line(begin).search(text)
    stop = marker_line(end).search(text, start.end()) if start else None
    if not start or not stop:
        if not required:
            return text
        raise ChapterError(f"{readme}: no {begin} ... {end} lines: add them, each alone "
                           "on its line, where the diff against the previous chapter belongs")
    # Blank lines around the block keep it apart from the markers in any Markdown reader.
    return text[:start.end()] + "\n\n" + block + "\n" + text[stop.start():]


def rendered(root: pathlib.Path, base: pathlib.Path, previous: pathlib.Path,
             folder: pathlib.Path, text: str, readme: pathlib.Path) -> str:
    """The README text with every generated block of the chapter current: the diff against
    `base`, the chapter it is built on (`previous`, the chapter before it, unless its
    header names another)."""
    before, after = loop_file(base), loop_file(folder)
    text = with_block(text, diff_block(root, before, after, previous), readme)
    if marker_line(MARKERS_BEGIN).search(text):
        text = with_block(text, markers_block(root, before, after), readme, MARKERS_BEGIN,
                          MARKERS_END, required=False)
    return with_quotes(root, text, readme)


def main(argv) -> int:
    parser = argparse.ArgumentParser(
        description="Write each chapter's diff against its base chapter into its README.")
    parser.add_argument("--check", action="store_true",
                        help="write nothing; exit 1 if any README's diff block is stale")
    parser.add_argument("--root", type=pathlib.Path, default=REPOSITORY,
                        help="the checkout whose chapters/ to render (default: this one)")
    parser.add_argument("--chapters", nargs="+", metavar="NN",
                        help="render (or check) only these chapters' READMEs, by number "
                             "(default: every chapter)")
    args = parser.parse_args(argv)
    root = args.root.resolve()

    problems = []
    stale = []
    folders = chapter_folders(root)
    for previous, folder in zip([None] + folders, folders):
        if args.chapters and chapter_number(folder) not in args.chapters:
            continue
        readme = folder / "README.md"
        try:
            # 00 is the prologue on the CPU, not a rung of the ladder: chapter 01 is not
            # diffed against it (00's page says what each chapter moves to the GPU).
            base = None if previous is None else base_chapter(folder, previous, folders)
            if base is None or base.name.startswith("00_"):  # quotes only, no diff
                if not readme.is_file():
                    continue
                text = readme.read_text()
                updated = with_quotes(root, text, readme)
            else:
                if not readme.is_file():
                    raise ChapterError(f"{readme}: missing (every chapter has a README with a "
                                       f"{DIFF_BEGIN} ... {DIFF_END} block)")
                text = readme.read_text()
                updated = rendered(root, base, previous, folder, text, readme)
        except ChapterError as error:
            problems.append(str(error))
            continue
        if updated == text:
            continue
        stale.append(readme)
        if not args.check:
            readme.write_text(updated)

    for problem in problems:
        print(f"render_chapter_diffs.py: {problem}", file=sys.stderr)
    for readme in stale:
        if args.check:
            print(f"render_chapter_diffs.py: {readme}: a generated block is stale; run "
                  "python3 scripts/render_chapter_diffs.py", file=sys.stderr)
        else:
            print(f"render_chapter_diffs.py: wrote {readme}", file=sys.stderr)
    if problems or (args.check and stale):
        return 1
    return 0


if __name__ == "__main__":
    sys.exit(main(sys.argv[1:]))
