#!/usr/bin/env python3
"""scripts/check_pages.py - the reader-facing text speaks of the project only, within its budget.

Checks, and names every finding as file:line:
  - the pages (README.md, docs/*.md but docs/tuning_log.md, chapters/*/README.md) and the
    comments of the source files (chapters/, common/, kernels/, bench/, tests/ but
    tests/data/, scripts/) hold none of the banned patterns: a numbered work session, a
    commit hash (in backticks or after the word "commit"; on a page, the one commit that
    the generated results block names for its run is allowed inside generated blocks), a
    history command, the removed experiment folder or notebook, the time-limit variable of
    the check script, or words about borrowed machines (BANNED below lists them);
  - the word budgets: a chapter page holds at most 2,500 words of prose and README.md at
    most 1,800. Prose is the text outside fenced code blocks, markdown tables, <details>
    blocks, generated blocks (between `<!-- X:begin` and `<!-- X:end -->`) and HTML comments.

docs/tuning_log.md is the one page that names commits: it is the index into history.

    python3 scripts/check_pages.py              # this checkout; exit 1 on any finding
    python3 scripts/check_pages.py --root DIR   # another tree
    python3 scripts/check_pages.py --words      # also print every page's prose word count
"""
import argparse
import ast
import io
import json
import pathlib
import re
import sys
import tokenize

REPOSITORY = pathlib.Path(__file__).resolve().parent.parent

# (name, pattern) searched in pages and comments. Spelled with classes ([ ]) where the
# literal text would itself be a finding in this file's comments.
BANNED = [
    ("session number", re.compile(r"\bsessions?[ ]\d", re.IGNORECASE)),
    ("history command", re.compile(r"\bgit[ ]show\b")),
    ("experiment folder", re.compile(r"results/experiment[s]")),
    ("notebook", re.compile(r"performance_note[s]")),
    ("time-limit variable", re.compile(r"LADDER_TIME_LIMI[T]")),
    ("borrowed machine", re.compile(r"\blent[ ]machine|\bdevice[ ]call|\ba[ ]lent\b", re.IGNORECASE)),
]
HASH = r"[0-9a-fA-F]{7,40}"
HASH_IN_BACKTICKS = re.compile(rf"`({HASH})`")
HASH_AFTER_COMMIT = re.compile(rf"\bcommits?[ \t:]+(?:at[ \t]+)?`?({HASH})\b", re.IGNORECASE)

PAGE_BUDGETS = {"README.md": 1800}
CHAPTER_PAGE_BUDGET = 2500

SOURCE_FOLDERS = ("chapters", "common", "kernels", "bench", "tests", "scripts")
SKIPPED_FOLDERS = ("tests/data",)
# This checker and its self-test spell the patterns out on purpose.
SKIPPED_FILES = ("scripts/check_pages.py", "tests/scripts/test_check_pages.py")
C_LIKE = {".c", ".cc", ".cpp", ".cxx", ".h", ".hpp", ".cu", ".cuh"}
HASH_COMMENTS = {".sh", ".cmake"}  # and CMakeLists.txt

GENERATED_BEGIN = re.compile(r"<!--\s*([A-Za-z0-9_.:/-]+?):begin\b")
GENERATED_END = re.compile(r"<!--\s*([A-Za-z0-9_.:/-]+?):end\s*-->")


def looks_like_hash(text: str) -> bool:
    """A commit hash has digits and letters a-f; a plain number or word does not count."""
    return bool(re.search(r"[0-9]", text)) and bool(re.search(r"[a-fA-F]", text))


def hashes_in(line: str):
    found = set()
    for pattern in (HASH_IN_BACKTICKS, HASH_AFTER_COMMIT):
        for match in pattern.finditer(line):
            if looks_like_hash(match.group(1)):
                found.add(match.group(1))
    return sorted(found)


def findings_in_line(line: str, allowed_hashes=()):
    """The names of the banned patterns in one line of text (hashes in allowed_hashes pass)."""
    names = [name for name, pattern in BANNED if pattern.search(line)]
    names += [f"commit hash {value}" for value in hashes_in(line)
              if value.lower() not in allowed_hashes]
    return names


# ---------------------------------------------------------------- pages

def generated_lines(lines):
    """The set of 0-based line numbers inside generated blocks, markers included."""
    inside, open_name = set(), None
    for number, line in enumerate(lines):
        if open_name is None:
            begin = GENERATED_BEGIN.search(line)
            if begin:
                open_name = begin.group(1)
                inside.add(number)
                if GENERATED_END.search(line, begin.end()):
                    open_name = None
            continue
        inside.add(number)
        end = GENERATED_END.search(line)
        if end and end.group(1).split(":")[0] == open_name.split(":")[0]:
            open_name = None
    return inside


def check_page_text(text: str, allowed_hashes=()):
    """[(line number from 1, finding)] for one page. A hash in allowed_hashes passes only
    inside a generated block."""
    allowed = {value.lower() for value in allowed_hashes}
    lines = text.splitlines()
    generated = generated_lines(lines)
    result = []
    for number, line in enumerate(lines):
        for name in findings_in_line(line, allowed if number in generated else ()):
            result.append((number + 1, name))
    return result


def prose_words(text: str) -> int:
    """Words of prose: outside fenced code, tables, <details>, generated blocks and HTML
    comments."""
    text = re.sub(r"<!--(?!\s*[A-Za-z0-9_.:/-]+?:(?:begin|end)\b).*?-->", " ", text, flags=re.DOTALL)
    lines = text.splitlines()
    generated = generated_lines(lines)
    words, fence, details = 0, None, 0
    for number, line in enumerate(lines):
        stripped = line.strip()
        if fence:
            if stripped.startswith(fence):
                fence = None
            continue
        fence_match = re.match(r"(`{3,}|~{3,})", stripped)
        if fence_match:
            fence = fence_match.group(1)
            continue
        if number in generated:
            continue
        opened = len(re.findall(r"<details\b", stripped, re.IGNORECASE))
        closed = len(re.findall(r"</details>", stripped, re.IGNORECASE))
        if details or opened:
            details = max(0, details + opened - closed)
            continue
        if stripped.startswith("|"):
            continue
        words += sum(1 for word in stripped.split() if re.search(r"[A-Za-z0-9]", word))
    return words


def budget_of(relative: str):
    if relative in PAGE_BUDGETS:
        return PAGE_BUDGETS[relative]
    if re.fullmatch(r"chapters/[^/]+/README\.md", relative):
        return CHAPTER_PAGE_BUDGET
    return None


def pages(root: pathlib.Path):
    found = [root / "README.md"]
    found += sorted(path for path in (root / "docs").glob("*.md") if path.name != "tuning_log.md")
    found += sorted((root / "chapters").glob("*/README.md"))
    return [path for path in found if path.is_file()]


# ---------------------------------------------------------------- source comments

def c_comments(text: str):
    """[(line number from 1, comment text)] of C, C++ and CUDA source: // and /* */,
    skipping string and character literals."""
    result, index, line, length = [], 0, 1, len(text)
    while index < length:
        char = text[index]
        if char == "\n":
            line += 1
            index += 1
        elif text.startswith("//", index):
            end = text.find("\n", index)
            end = length if end < 0 else end
            result.append((line, text[index:end]))
            index = end
        elif text.startswith("/*", index):
            end = text.find("*/", index + 2)
            end = length if end < 0 else end + 2
            for offset, part in enumerate(text[index:end].split("\n")):
                result.append((line + offset, part))
            line += text.count("\n", index, end)
            index = end
        elif text.startswith('R"', index):
            match = re.match(r'R"([^(\s]*)\(', text[index:])
            if not match:
                index += 1
                continue
            closing = ")" + match.group(1) + '"'
            end = text.find(closing, index + match.end())
            end = length if end < 0 else end + len(closing)
            line += text.count("\n", index, end)
            index = end
        elif char in "\"'":
            end = index + 1
            while end < length and text[end] != char and text[end] != "\n":
                end += 2 if text[end] == "\\" else 1
            index = end + 1
        else:
            index += 1
    return result


def hash_comments(text: str):
    """[(line number, comment text)] of shell and CMake: from a # that starts the line or
    follows whitespace (outside quotes, roughly) to the end of the line."""
    result = []
    for number, line in enumerate(text.splitlines(), 1):
        quote = None
        for position, char in enumerate(line):
            if quote:
                if char == quote:
                    quote = None
            elif char in "\"'":
                quote = char
            elif char == "#" and (position == 0 or line[position - 1] in " \t;"):
                result.append((number, line[position:]))
                break
    return result


def python_comments(text: str):
    """[(line number, text)] of Python: # comments and docstrings."""
    result = []
    try:
        for token in tokenize.generate_tokens(io.StringIO(text).readline):
            if token.type == tokenize.COMMENT:
                result.append((token.start[0], token.string))
    except (tokenize.TokenError, SyntaxError):
        pass
    try:
        tree = ast.parse(text)
    except SyntaxError:
        return result
    for node in ast.walk(tree):
        if isinstance(node, (ast.Module, ast.ClassDef, ast.FunctionDef, ast.AsyncFunctionDef)):
            body = node.body
            if body and isinstance(body[0], ast.Expr) and isinstance(body[0].value, ast.Constant) \
                    and isinstance(body[0].value.value, str):
                first = body[0].lineno
                for offset, part in enumerate(body[0].value.value.split("\n")):
                    result.append((first + offset, part))
    return result


def comments_of(path: pathlib.Path, text: str):
    if path.suffix in C_LIKE:
        return c_comments(text)
    if path.suffix == ".py":
        return python_comments(text)
    if path.suffix in HASH_COMMENTS or path.name == "CMakeLists.txt":
        return hash_comments(text)
    return None


def check_source_text(path: pathlib.Path, text: str):
    """[(line number, finding)] in the comments of one source file."""
    comments = sorted(comments_of(path, text) or [], key=lambda item: item[0])
    return [(number, name) for number, comment in comments for name in findings_in_line(comment)]


def source_files(root: pathlib.Path):
    for folder in SOURCE_FOLDERS:
        base = root / folder
        if not base.is_dir():
            continue
        for path in sorted(base.rglob("*")):
            relative = path.relative_to(root).as_posix()
            if not path.is_file() or relative in SKIPPED_FILES:
                continue
            if any(relative.startswith(skipped + "/") for skipped in SKIPPED_FOLDERS):
                continue
            if "/__pycache__/" in "/" + relative:
                continue
            if comments_of(path, "") is not None:
                yield path


# ---------------------------------------------------------------- the check

def run_commit(root: pathlib.Path):
    run = root / "results" / "latest" / "run.json"
    try:
        commit = json.loads(run.read_text()).get("git_commit")
    except (OSError, ValueError):
        return ()
    return (commit.lower(),) if isinstance(commit, str) and commit else ()


def check(root: pathlib.Path, show_words=False):
    """[(relative path, line or None, finding)] over the whole tree, in a fixed order."""
    allowed = run_commit(root)
    result = []
    for path in pages(root):
        relative = path.relative_to(root).as_posix()
        text = path.read_text(encoding="utf-8", errors="replace")
        result += [(relative, number, name) for number, name in check_page_text(text, allowed)]
        budget = budget_of(relative)
        if budget is not None:
            words = prose_words(text)
            if show_words:
                print(f"{relative}: {words} words of prose (budget {budget})")
            if words > budget:
                result.append((relative, None, f"{words} words of prose, over the budget of {budget}"))
    for path in source_files(root):
        relative = path.relative_to(root).as_posix()
        text = path.read_text(encoding="utf-8", errors="replace")
        result += [(relative, number, name + " in a comment")
                   for number, name in check_source_text(path, text)]
    return result


def main(argv=None):
    parser = argparse.ArgumentParser(description=__doc__.split("\n")[0])
    parser.add_argument("--root", type=pathlib.Path, default=REPOSITORY)
    parser.add_argument("--words", action="store_true", help="print every budgeted page's prose words")
    args = parser.parse_args(argv)
    findings = check(args.root.resolve(), args.words)
    for relative, number, name in findings:
        print(f"{relative}:{number}: {name}" if number else f"{relative}: {name}")
    files = sorted({relative for relative, _, _ in findings})
    if findings:
        print(f"check_pages.py: {len(findings)} findings in {len(files)} files:")
        for relative in files:
            count = sum(1 for other, _, _ in findings if other == relative)
            print(f"  {relative}: {count}")
        return 1
    print("check_pages.py: pages and comments clean, every page within its budget")
    return 0


if __name__ == "__main__":
    sys.exit(main())
